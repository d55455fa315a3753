#include "pipebench/results/results.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <unistd.h>

#include <fmt/format.h>
#include <hdf5.h>

#include "h5_common.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/results/metrics.hpp"


namespace pipebench {

using namespace h5;

namespace {

// ---- reading -------------------------------------------------------------

// Every read checks what the file declares before memory is sized from it:
// the type class, the number of elements (a scalar read of an array
// attribute would overrun), the rank of a dataset, and a ceiling on sizes.
// A file is data from outside: anything unexpected is a ResultsError naming
// the object, and the file is skipped, never trusted.
constexpr hssize_t kMaxElements = hssize_t{1} << 26;  // per dataset or attribute


// What an attribute or dataset must hold.
enum class Want { number, string, event };

bool type_is(hid_t type, Want want) {
  const H5T_class_t cls = H5Tget_class(type);
  switch (want) {
    case Want::number: return cls == H5T_INTEGER || cls == H5T_FLOAT;
    case Want::string: return cls == H5T_STRING && H5Tis_variable_str(type) > 0;
    case Want::event: return cls == H5T_COMPOUND;
  }
  return false;
}

const char* to_text(Want want) { return want == Want::number ? "number" : want == Want::string ? "string" : "event"; }

// Opens attribute `name` and checks its type and its element count (exactly
// one when `scalar`).
Hid open_attr_checked(hid_t obj, const char* name, Want want, bool scalar, std::size_t* count = nullptr) {
  const hid_t id = H5Aopen(obj, name, H5P_DEFAULT);
  if (id < 0) throw ResultsError(fmt::format("attribute {} is missing", name));
  Hid attr(id, H5Aclose);
  Hid type(H5_CHECK(H5Aget_type(attr)), H5Tclose);
  Hid space(H5_CHECK(H5Aget_space(attr)), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (!type_is(type, want) || n < 0 || n > kMaxElements || (scalar && n != 1))
    throw ResultsError(fmt::format("attribute {}: expected {}{}, found {} element(s) of another shape or type", name,
                                   scalar ? "one " : "", to_text(want), n));
  if (count) *count = static_cast<std::size_t>(n);
  return attr;
}

// A chunked dataset (the writer chunks every long one) must have every chunk
// stored: the writer writes every element. A damaged extent or chunk index
// would otherwise read as fill values — slowly, into memory sized from the
// damage (the fuzzer found reads of a minute and 7 GB).
void check_chunks_stored(hid_t ds, const char* name, const std::vector<hsize_t>& dims) {
  Hid dcpl(H5_CHECK(H5Dget_create_plist(ds)), H5Pclose);
  if (H5Pget_layout(dcpl) != H5D_CHUNKED || dims.empty()) return;
  std::vector<hsize_t> chunk(dims.size(), 0);
  if (H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(dims.size()))
    throw ResultsError(fmt::format("dataset {}: a chunk shape that does not match its extent (a damaged file)", name));
  hsize_t expected = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (chunk[d] == 0) throw ResultsError(fmt::format("dataset {}: a chunk of size 0 (a damaged file)", name));
    expected *= (dims[d] + chunk[d] - 1) / chunk[d];
  }
  hsize_t stored = 0;
  Hid space(H5_CHECK(H5Dget_space(ds)), H5Sclose);  // H5S_ALL counts nothing in HDF5 1.10
  if (H5Dget_num_chunks(ds, space, &stored) < 0 || stored != expected)
    throw ResultsError(fmt::format("dataset {}: {} of its {} chunks stored (a damaged file)", name, stored, expected));
}

// Opens dataset `name` and checks its type, its rank and its size; `dims`
// gets its extent.
Hid open_dataset_checked(hid_t g, const char* name, Want want, int want_rank, std::vector<hsize_t>& dims) {
  const hid_t id = H5Dopen2(g, name, H5P_DEFAULT);
  if (id < 0) throw ResultsError(fmt::format("dataset {} is missing", name));
  Hid ds(id, H5Dclose);
  Hid type(H5_CHECK(H5Dget_type(ds)), H5Tclose);
  Hid space(H5_CHECK(H5Dget_space(ds)), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  if (!type_is(type, want) || rank != want_rank || points < 0 || points > kMaxElements)
    throw ResultsError(fmt::format("dataset {}: expected a {}-d array of {}s (at most {} elements), found a {}-d "
                                   "one of {} elements or another type",
                                   name, want_rank, to_text(want), kMaxElements, rank, points));
  dims.assign(static_cast<std::size_t>(rank), 0);
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  check_chunks_stored(ds, name, dims);
  return ds;
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    static constexpr std::uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOfLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// The strings of a results file are UTF-8 (the writer declares them so); a
// string that is not is damage, and passing it on would make the report's
// summary.json invalid JSON. Frees `p`.
std::string take_string(char* p, const char* name) {
  std::string s = p ? p : "";
  H5free_memory(p);
  if (!valid_utf8(s)) throw ResultsError(fmt::format("{}: a string that is not valid UTF-8", name));
  return s;
}

// Every string of a variable-length read; each pointer is freed, also after a
// bad one (the last problem is thrown).
std::vector<std::string> take_strings(const std::vector<char*>& ptrs, const char* name) {
  std::vector<std::string> out;
  std::string problem;
  for (char* p : ptrs) {
    try {
      out.push_back(take_string(p, name));
    } catch (const ResultsError& e) {
      problem = e.what();
    }
  }
  if (!problem.empty()) throw ResultsError(problem);
  return out;
}

std::vector<std::string> read_attr_strings(hid_t obj, const char* name) {
  std::size_t n = 0;
  Hid attr = open_attr_checked(obj, name, Want::string, false, &n);
  std::vector<char*> ptrs(n, nullptr);
  Hid type = vlen_string_type();
  if (n > 0) H5_CHECK(H5Aread(attr, type, ptrs.data()));
  return take_strings(ptrs, name);
}

template <typename T>
T read_attr_scalar(hid_t obj, const char* name) {
  Hid attr = open_attr_checked(obj, name, Want::number, true);
  T v{};
  H5_CHECK(H5Aread(attr, native_type<T>(), &v));
  return v;
}

// An integer attribute the reader keeps as an int: one beyond int's range is
// a damaged file (narrowed, 2^32 + 2 stages read as 2 and passed every check).
int read_attr_int(hid_t obj, const char* name) {
  const auto v = read_attr_scalar<std::int64_t>(obj, name);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw ResultsError(fmt::format("attribute {}: {} is beyond a 32-bit integer (a damaged file)", name, v));
  return static_cast<int>(v);
}

template <typename T>
std::vector<T> read_attr_array(hid_t obj, const char* name) {
  std::size_t n = 0;
  Hid attr = open_attr_checked(obj, name, Want::number, false, &n);
  std::vector<T> v(n);
  if (!v.empty()) H5_CHECK(H5Aread(attr, native_type<T>(), v.data()));
  return v;
}

template <typename T>
std::vector<T> read_dataset(hid_t g, const char* name, std::vector<hsize_t>* dims_out = nullptr, int want_rank = 1) {
  std::vector<hsize_t> dims;
  Hid ds = open_dataset_checked(g, name, Want::number, want_rank, dims);
  std::size_t n = 1;
  for (auto d : dims) n *= static_cast<std::size_t>(d);
  std::vector<T> v(n);
  if (n > 0) H5_CHECK(H5Dread(ds, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  if (dims_out) *dims_out = dims;
  return v;
}

template <typename T>
std::vector<std::vector<T>> read_dataset_2d(hid_t g, const char* name) {
  std::vector<hsize_t> dims;
  const auto flat = read_dataset<T>(g, name, &dims, 2);
  if (dims.at(0) > static_cast<hsize_t>(kMaxElements) || dims.at(1) > static_cast<hsize_t>(kMaxElements))
    throw ResultsError(fmt::format("dataset {}: {} x {} is beyond any run", name, dims[0], dims[1]));
  std::vector<std::vector<T>> rows(static_cast<std::size_t>(dims.at(0)));
  const auto cols = static_cast<std::size_t>(dims.at(1));
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i].assign(flat.begin() + static_cast<std::ptrdiff_t>(i * cols),
                   flat.begin() + static_cast<std::ptrdiff_t>((i + 1) * cols));
  return rows;
}

template <typename E>
E parse_enum(const std::string& s, std::initializer_list<E> values) {
  for (E v : values)
    if (to_string(v) == s) return v;
  throw ResultsError(fmt::format("unexpected value \"{}\" in results file", printable(s)));
}

// An event lies inside its run's steps, ranks, micro-batches and chunks, with
// finite times. A failed run keeps the events of the step it failed in: one
// past the steps every rank completed.
void check_event(const RunResult& r, const EventRecord& e) {
  const std::size_t steps = r.step_time_s.size(), ranks = r.peak_mem_bytes.size();
  const int m = r.spec.num_microbatches, v = r.spec.virtual_stages_per_rank;
  if (e.step < 0 || static_cast<std::size_t>(e.step) > steps || e.rank < 0 || static_cast<std::size_t>(e.rank) >= ranks ||
      e.microbatch < 0 || e.microbatch >= m || e.chunk < 0 || e.chunk >= v || !std::isfinite(e.start_s) ||
      !std::isfinite(e.end_s) || std::isinf(e.wait_s) || e.wait_s < 0.0)
    throw ResultsError(fmt::format("run {}: an event (step {}, rank {}, micro-batch {}, chunk {}) lies outside the run's {} "
                                   "(+1) steps, {} ranks, {} micro-batches and {} chunks",
                                   r.spec.name, e.step, e.rank, e.microbatch, e.chunk, steps, ranks, m, v));
}

// A run's figures agree with the counts they imply (docs/results-format.md):
// p and m within the workload limits; per-step arrays of one length; per-rank
// arrays either empty (skipped) or one entry per stage; step x rank arrays
// of that shape (every event was checked as it was read: check_event).
// Readers (the report above all) index by these counts without checking.
void check_shapes(const RunResult& r) {
  auto bad = [&](const std::string& what) { return ResultsError(fmt::format("run {}: {}", r.spec.name, what)); };
  const int p = r.spec.pipeline_size, m = r.spec.num_microbatches;
  if (p < 1 || p > kMaxPipelineSize || m < 1 || m > kMaxMicrobatches ||
      std::int64_t{p} * m > kMaxStageMicrobatches || r.spec.micro_batch_size < 1)
    throw bad(fmt::format("pipeline_size {} / num_microbatches {} / micro_batch_size {} outside the workload limits", p, m,
                          r.spec.micro_batch_size));
  if (r.warmup < 0 || r.repeats < 0 || r.repeats_extended < 0) throw bad("negative warmup, repeats or repeats_extended");
  const int v = r.spec.virtual_stages_per_rank;
  if (v < 1 || v > kMaxVirtualStagesPerRank || std::int64_t{p} * v * m > kMaxStageMicrobatches)
    throw bad(fmt::format("virtual_stages_per_rank {} outside the workload limits", v));
  if ((!r.layers_per_stage.empty() && r.layers_per_stage.size() != static_cast<std::size_t>(p * v)) ||
      std::any_of(r.layers_per_stage.begin(), r.layers_per_stage.end(), [](int n) { return n < 1; }))
    throw bad(fmt::format("layers_per_stage has {} entries for {} stages x {} chunks", r.layers_per_stage.size(), p, v));
  if (r.stage_rank.size() != r.layers_per_stage.size() ||
      std::any_of(r.stage_rank.begin(), r.stage_rank.end(), [&](int rank) { return rank < 0 || rank >= p; }))
    throw bad(fmt::format("stage_rank has {} entries (expected {}) or a rank outside 0..{}", r.stage_rank.size(),
                          r.layers_per_stage.size(), p - 1));
  const std::size_t steps = r.step_time_s.size();
  for (std::size_t n : {r.is_warmup.size(), r.loss.size(), r.slowest_stage_s.size(), r.imbalance.size(),
                        r.bubble_measured.size(), r.grad_norm.size(), r.clipped.size()})
    if (n != steps) throw bad(fmt::format("a per-step dataset has {} entries, step_time_s {}", n, steps));
  const std::size_t ranks = r.peak_mem_bytes.size();
  if (ranks != 0 && ranks != static_cast<std::size_t>(r.spec.ranks()))
    throw bad(fmt::format("peak_mem_bytes has {} entries for {} stages x {} replicas x {} context ranks x {} tensor ranks",
                          ranks, p, r.spec.data_parallel, r.spec.context_parallel, r.spec.tensor_parallel));
  std::vector<std::size_t> per_rank{r.memory_capacity_bytes.size(), r.stage_params.size(),
                                    r.peak_live_activations.size(), r.stage_layers.size(),
                                    r.pipeline_rank.size(), r.data_rank.size(), r.tensor_rank.size(),
                                    r.context_rank.size()};
  if (!r.grad_sync_bytes.empty()) per_rank.push_back(r.grad_sync_bytes.size());
  if (!r.node.empty()) per_rank.push_back(r.node.size());
  for (std::size_t i = 0; i < r.node.size(); ++i)
    if (r.node[i] < 0 || static_cast<std::size_t>(r.node[i]) >= r.node.size())
      throw bad(fmt::format("rank {} is on node {}, outside the run's {} ranks", i, r.node[i], r.node.size()));
  for (std::size_t i = 0; i < r.pipeline_rank.size() && i < r.data_rank.size(); ++i)
    if (r.pipeline_rank[i] < 0 || r.pipeline_rank[i] >= p || r.data_rank[i] < 0 || r.data_rank[i] >= r.spec.data_parallel)
      throw bad(fmt::format("rank {} is stage {} of replica {}, outside {} stages x {} replicas", i, r.pipeline_rank[i],
                            r.data_rank[i], p, r.spec.data_parallel));
  for (std::size_t i = 0; i < r.context_rank.size(); ++i)
    if (r.context_rank[i] < 0 || r.context_rank[i] >= r.spec.context_parallel)
      throw bad(fmt::format("rank {} is context rank {}, outside context_parallel {}", i, r.context_rank[i],
                            r.spec.context_parallel));
  for (std::size_t i = 0; i < r.tensor_rank.size(); ++i)
    if (r.tensor_rank[i] < 0 || r.tensor_rank[i] >= r.spec.tensor_parallel)
      throw bad(fmt::format("rank {} is tensor rank {}, outside tensor_parallel {}", i, r.tensor_rank[i], r.spec.tensor_parallel));
  for (const auto& c : r.peak_mem_by_category) per_rank.push_back(c.size());
  for (const auto* d : {&r.device_used_before_bytes, &r.device_used_peak_bytes})
    if (!d->empty()) per_rank.push_back(d->size());
  for (std::size_t n : per_rank)
    if (n != ranks) throw bad(fmt::format("a per-rank dataset has {} entries, peak_mem_bytes {}", n, ranks));
  for (const auto* rows : {&r.busy_s, &r.comm_wait_s, &r.idle_s, &r.forward_s, &r.backward_s, &r.optimizer_s})
    if (rows->size() != steps || (steps > 0 && rows->front().size() != ranks))
      throw bad(fmt::format("a step x rank dataset is not {} x {}", steps, ranks));
  for (const auto* rows : {&r.comm_transfer_s, &r.grad_sync_start_s, &r.grad_sync_s, &r.grad_sync_exposed_s, &r.tensor_comm_s})
    if (!rows->empty() && (rows->size() != steps || rows->front().size() != ranks))
      throw bad(fmt::format("a step x rank dataset (comm_transfer_s, grad_sync_s) is not {} x {}", steps, ranks));
  if (r.microbatch_latency_s.size() > steps ||
      (!r.microbatch_latency_s.empty() && r.microbatch_latency_s.front().size() != static_cast<std::size_t>(m)))
    throw bad("microbatch_latency_s does not match the steps and micro-batches");
}

// grad_buckets/ (results_write.cpp): its columns, all of one length.
std::vector<BucketRecord> read_grad_buckets(hid_t run, const std::string& name) {
  Hid g(H5_CHECK(H5Gopen2(run, "grad_buckets", H5P_DEFAULT)), H5Gclose);
  const auto rank = read_dataset<std::int32_t>(g, "rank"), step = read_dataset<std::int32_t>(g, "step"),
             chunk = read_dataset<std::int32_t>(g, "chunk"), index = read_dataset<std::int32_t>(g, "index"),
             kind = read_dataset<std::int32_t>(g, "kind");
  const auto bytes = read_dataset<std::uint64_t>(g, "bytes");
  const auto launch = read_dataset<double>(g, "launch_s"), end = read_dataset<double>(g, "end_s"),
             exposed = read_dataset<double>(g, "exposed_s");
  const std::size_t n = rank.size();
  for (std::size_t len : {step.size(), chunk.size(), index.size(), kind.size(), bytes.size(), launch.size(), end.size(),
                          exposed.size()})
    if (len != n) throw ResultsError(fmt::format("run {}: grad_buckets' columns are not all {} long", name, n));
  std::vector<BucketRecord> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = {rank[i], step[i], chunk[i], index[i], kind[i], bytes[i], launch[i], end[i], exposed[i]};
  return out;
}

// The run's ranks as (stage, replica) and its gradient synchronisation; a
// run without replicas (or a file from before them) has rank i = stage i.
void read_rank_grid(hid_t g, RunResult& r) {
  auto has = [&](const char* name) { return H5Lexists(g, name, H5P_DEFAULT) > 0; };
  if (has("pipeline_rank")) {
    r.pipeline_rank = read_dataset<int>(g, "pipeline_rank");
    r.data_rank = read_dataset<int>(g, "data_rank");
  } else {
    for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i) {
      r.pipeline_rank.push_back(static_cast<int>(i));
      r.data_rank.push_back(0);
    }
  }
  if (has("node")) r.node = read_dataset<int>(g, "node");
  if (has("tensor_rank")) r.tensor_rank = read_dataset<int>(g, "tensor_rank");
  else r.tensor_rank.assign(r.pipeline_rank.size(), 0);
  if (has("context_rank")) r.context_rank = read_dataset<int>(g, "context_rank");
  else r.context_rank.assign(r.pipeline_rank.size(), 0);
  if (has("tensor_comm_s")) r.tensor_comm_s = read_dataset_2d<double>(g, "tensor_comm_s");
  if (has("grad_sync_bytes")) r.grad_sync_bytes = read_dataset<std::uint64_t>(g, "grad_sync_bytes");
  if (has("grad_sync_s")) {
    r.grad_sync_start_s = read_dataset_2d<double>(g, "grad_sync_start_s");
    r.grad_sync_s = read_dataset_2d<double>(g, "grad_sync_s");
    r.grad_sync_exposed_s = read_dataset_2d<double>(g, "grad_sync_exposed_s");
  }
  if (has("grad_buckets")) r.grad_buckets = read_grad_buckets(g, r.spec.name);
}

// Which rank ran each virtual stage; files from before chunked schedules
// (or a run written without it) ran stage s on rank s.
std::vector<int> read_stage_rank(hid_t g, std::size_t stages) {
  std::vector<int> ranks;
  if (has_attr(g, "stage_rank")) ranks = read_attr_array<int>(g, "stage_rank");
  if (ranks.empty())
    for (std::size_t s = 0; s < stages; ++s) ranks.push_back(static_cast<int>(s));
  return ranks;
}

// /runs/<name>/events of run `r` (after its per-step and per-rank datasets,
// which bound how many there can be) to `take`, kEventBlock rows at a time,
// each checked (check_event), in pieces of whole (step, rank) groups: the end
// of a block that may continue in the next one waits for it. Returns how many;
// `reserve` (if any) is sized for them first.
using EventTake = std::function<void(const EventRecord*, std::size_t)>;
std::size_t read_events(hid_t g, const RunResult& r, const EventTake& take, std::vector<EventRecord>* reserve) {
  const std::string& name = r.spec.name;
  std::vector<hsize_t> dims;
  Hid ds = open_dataset_checked(g, "events", Want::event, 1, dims);
  // At most 3 actions (F, B, W) per micro-batch, chunk, rank and step.
  const auto declared = static_cast<hssize_t>(dims[0]);
  const double most = 3.0 * static_cast<double>(r.step_time_s.size() + 1) * static_cast<double>(r.peak_mem_bytes.size()) *
                      std::max(1, r.spec.num_microbatches) *
                      std::clamp(r.spec.virtual_stages_per_rank, 1, kMaxVirtualStagesPerRank);
  if (static_cast<double>(declared) > std::min(most, static_cast<double>(kMaxElements)))
    throw ResultsError(fmt::format("run {}: {} events declared, more than its steps, ranks and micro-batches allow",
                                   name, declared));
  Hid file_type(H5_CHECK(H5Dget_type(ds)), H5Tclose);
  for (const char* member : kEventMembers)
    if (H5Tget_member_index(file_type, member) < 0)
      throw ResultsError(fmt::format("run {}: events has no member {}", name, member));
  const bool has_wait = H5Tget_member_index(file_type, "wait_s") >= 0;
  const auto n = static_cast<hsize_t>(declared);
  if (reserve) reserve->reserve(static_cast<std::size_t>(n));
  std::vector<EventRow> rows(static_cast<std::size_t>(std::min<hsize_t>(n, kEventBlock)));
  std::vector<EventRecord> pending;  // converted, not yet taken: the last group may go on
  Hid et = event_type(has_wait);
  Hid file_space(H5_CHECK(H5Dget_space(ds)), H5Sclose);
  for (hsize_t first = 0; first < n; first += kEventBlock) {
    const hsize_t count = std::min<hsize_t>(kEventBlock, n - first);
    H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &first, nullptr, &count, nullptr));
    Hid mem_space(H5_CHECK(H5Screate_simple(1, &count, nullptr)), H5Sclose);
    H5_CHECK(H5Dread(ds, et, mem_space, file_space, H5P_DEFAULT, rows.data()));
    for (std::size_t i = 0; i < count; ++i) {
      const EventRow& e = rows[i];
      if (e.kind < 0 || e.kind > 2)
        throw ResultsError(fmt::format("run {}: an event of kind {} (F, B, W are 0-2)", name, static_cast<int>(e.kind)));
      pending.push_back({e.step, e.rank, static_cast<ActionKind>(e.kind), e.microbatch, e.chunk, e.start_s, e.end_s,
                         has_wait ? e.wait_s : std::numeric_limits<double>::quiet_NaN()});
      check_event(r, pending.back());
    }
    // Everything before the last (step, rank) group; all of it after the last block.
    std::size_t whole = pending.size();
    if (first + count < n) {
      const EventRecord& last = pending.back();
      while (whole > 0 && pending[whole - 1].step == last.step && pending[whole - 1].rank == last.rank) --whole;
    }
    if (whole > 0) take(pending.data(), whole);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(whole));
  }
  return static_cast<std::size_t>(n);
}

// A run's replicas and their keys; absent in files written before data
// parallelism: the defaults (one replica).
// warmup, repeats and the stability extension's (absent before it: max_repeats = repeats, none added).
void read_steps_attrs(hid_t g, RunResult& r) {
  r.warmup = read_attr_int(g, "warmup");
  r.repeats = read_attr_int(g, "repeats");
  r.max_repeats = has_attr(g, "max_repeats") ? read_attr_int(g, "max_repeats") : r.repeats;
  r.repeats_extended = has_attr(g, "repeats_extended") ? read_attr_int(g, "repeats_extended") : 0;
}

void read_data_parallel_attrs(hid_t g, const std::string& name, RunSpec& spec) {
  if (has_attr(g, "context_parallel")) {
    spec.context_parallel = read_attr_int(g, "context_parallel");
    if (spec.context_parallel < 1 || spec.context_parallel > kMaxContextParallel)
      throw ResultsError(fmt::format("run {}: context_parallel {} outside the workload limits", name, spec.context_parallel));
    spec.cp_comm = parse_enum(read_attr_string(g, "cp_comm"), {CpComm::ring, CpComm::allgather});
  }
  if (!has_attr(g, "data_parallel")) return;
  spec.data_parallel = read_attr_int(g, "data_parallel");
  if (spec.data_parallel < 1 || spec.data_parallel > kMaxDataParallel)
    throw ResultsError(fmt::format("run {}: data_parallel {} outside the workload limits", name, spec.data_parallel));
  spec.optimizer_sharding = parse_enum(read_attr_string(g, "optimizer_sharding"),
                                       {OptimizerSharding::none, OptimizerSharding::zero1, OptimizerSharding::zero2,
                                        OptimizerSharding::fsdp});
  if (has_attr(g, "fsdp_reshard_after_forward"))
    spec.fsdp_reshard_after_forward = read_attr_scalar<std::int64_t>(g, "fsdp_reshard_after_forward") != 0;
  spec.grad_sync =
      parse_enum(read_attr_string(g, "grad_sync"), {GradSync::after_flush, GradSync::after_chunk, GradSync::overlap});
  // A file from before the bucketed overlap (it records no grad_bucket_bytes)
  // meant by "overlap" what is now after_chunk.
  if (spec.grad_sync == GradSync::overlap && !has_attr(g, "grad_bucket_bytes")) spec.grad_sync = GradSync::after_chunk;
  if (has_attr(g, "grad_bucket_bytes")) spec.grad_bucket_bytes = read_attr_scalar<std::int64_t>(g, "grad_bucket_bytes");
  spec.rank_order = parse_enum(read_attr_string(g, "rank_order"), {RankOrder::tp_dp_pp, RankOrder::tp_pp_dp});
  if (has_attr(g, "tensor_parallel")) {
    spec.tensor_parallel = read_attr_int(g, "tensor_parallel");
    if (spec.tensor_parallel < 1 || spec.tensor_parallel > kMaxTensorParallel)
      throw ResultsError(fmt::format("run {}: tensor_parallel {} outside the workload limits", name, spec.tensor_parallel));
    spec.sequence_parallel = read_attr_scalar<std::int64_t>(g, "sequence_parallel") != 0;
  }
  if (has_attr(g, "recompute"))
    spec.recompute = parse_enum(read_attr_string(g, "recompute"), {Recompute::selective, Recompute::full});
}

RunResult read_run(hid_t runs, const std::string& name, bool keep_events) {
  Hid g(H5_CHECK(H5Gopen2(runs, name.c_str(), H5P_DEFAULT)), H5Gclose);
  RunResult r;
  r.spec.name = name;
  r.status = parse_enum(read_attr_string(g, "status"), {RunStatus::ok, RunStatus::failed, RunStatus::skipped});
  const std::string fk = read_attr_string(g, "failure_kind");
  r.failure_kind = fk.empty() ? FailureKind::none
                              : parse_enum(fk, {FailureKind::oom, FailureKind::nan, FailureKind::timeout, FailureKind::error,
                                              FailureKind::interrupted, FailureKind::environment});
  r.failure_message = read_attr_string(g, "failure_message");
  r.failing_rank = read_attr_int(g, "failing_rank");
  r.spec.mode = parse_enum(read_attr_string(g, "mode"), {RunMode::train, RunMode::inference});
  r.spec.pipeline_size = read_attr_int(g, "pipeline_size");
  r.spec.micro_batch_size = read_attr_int(g, "micro_batch_size");
  r.spec.num_microbatches = read_attr_int(g, "num_microbatches");
  r.schedule_name = read_attr_string(g, "schedule");
  if (has_attr(g, "virtual_stages_per_rank"))  // absent in files written before chunked schedules: 1
    r.spec.virtual_stages_per_rank = read_attr_int(g, "virtual_stages_per_rank");
  read_data_parallel_attrs(g, name, r.spec);
  r.layers_per_stage = read_attr_array<int>(g, "layers_per_stage");
  r.stage_rank = read_stage_rank(g, r.layers_per_stage.size());
  r.spec.layers_per_stage_origin = read_attr_int(g, "layers_per_stage_origin");
  r.backend = parse_enum(read_attr_string(g, "backend"), {BackendKind::cpu, BackendKind::sim, BackendKind::cuda});
  r.dtype = parse_enum(read_attr_string(g, "dtype"), {DType::fp32, DType::bf16, DType::fp16});
  read_steps_attrs(g, r);
  r.baseline = read_attr_string(g, "baseline");
  r.spec.baseline = r.baseline;
  r.speedup = r.speedup_low = r.speedup_high = std::numeric_limits<double>::quiet_NaN();
  if (has_attr(g, "speedup")) {  // absent in files written before it was recorded
    r.speedup = read_attr_scalar<double>(g, "speedup");
    r.speedup_low = read_attr_scalar<double>(g, "speedup_low");
    r.speedup_high = read_attr_scalar<double>(g, "speedup_high");
    if (has_attr(g, "speedup_per_sample")) r.speedup_per_sample = read_attr_scalar<std::int64_t>(g, "speedup_per_sample") != 0;
  }
  if (has_attr(g, "workload_fingerprint")) {  // absent in files written before they were recorded
    r.workload = read_attr_string(g, "workload");
    r.workload_fingerprint = read_attr_string(g, "workload_fingerprint");
  }
  r.bubble_analytic = read_attr_scalar<double>(g, "bubble_analytic");
  r.bubble_simulated = read_attr_scalar<double>(g, "bubble_simulated");
  r.step_time.median = read_attr_scalar<double>(g, "step_time_median_s");
  r.step_time.min = read_attr_scalar<double>(g, "step_time_min_s");
  r.step_time.max = read_attr_scalar<double>(g, "step_time_max_s");
  r.step_time.p90 = read_attr_scalar<double>(g, "step_time_p90_s");
  r.step_time.cv = read_attr_scalar<double>(g, "step_time_cv");
  r.step_time.slope = read_attr_scalar<double>(g, "step_time_slope_s_per_step");
  r.slowest_stage_median_s = read_attr_scalar<double>(g, "slowest_stage_median_s");
  r.bubble_measured_median = read_attr_scalar<double>(g, "bubble_measured_median");
  r.imbalance_median = read_attr_scalar<double>(g, "imbalance_median");
  r.throughput_samples_per_s = read_attr_scalar<double>(g, "throughput_samples_per_s");
  r.peak_mem_max_bytes = read_attr_scalar<std::uint64_t>(g, "peak_mem_max_bytes");
  r.loss_max_rel_dev = read_attr_scalar<double>(g, "loss_max_rel_dev");
  r.decision = read_attr_string(g, "decision");
  if (r.decision != "feasible" && r.decision != "not_feasible" && r.decision != "inconclusive" &&
      r.decision != "not_applicable")
    throw ResultsError(fmt::format("run {}: decision \"{}\" is not one of feasible, not_feasible, inconclusive, "
                                   "not_applicable (a damaged file)",
                                   name, printable(r.decision)));
  r.decision_reasons = read_attr_strings(g, "decision_reasons");

  r.step_time_s = read_dataset<double>(g, "step_time_s");
  r.is_warmup = read_dataset<std::uint8_t>(g, "is_warmup");
  r.loss = read_dataset<double>(g, "loss");
  r.busy_s = read_dataset_2d<double>(g, "busy_s");
  r.comm_wait_s = read_dataset_2d<double>(g, "comm_wait_s");
  if (H5Lexists(g, "comm_transfer_s", H5P_DEFAULT) > 0)  // files before 0.1.0's cuda backend lack it
    r.comm_transfer_s = read_dataset_2d<double>(g, "comm_transfer_s");
  r.idle_s = read_dataset_2d<double>(g, "idle_s");
  r.forward_s = read_dataset_2d<double>(g, "forward_s");
  r.backward_s = read_dataset_2d<double>(g, "backward_s");
  r.optimizer_s = read_dataset_2d<double>(g, "optimizer_s");
  r.slowest_stage_s = read_dataset<double>(g, "slowest_stage_s");
  r.imbalance = read_dataset<double>(g, "imbalance");
  r.bubble_measured = read_dataset<double>(g, "bubble_measured");
  r.grad_norm = read_dataset<double>(g, "grad_norm");
  r.clipped = read_dataset<std::uint8_t>(g, "clipped");
  r.peak_mem_bytes = read_dataset<std::uint64_t>(g, "peak_mem_bytes");
  for (int c = 0; c < kNumMemCategories; ++c)
    r.peak_mem_by_category[static_cast<std::size_t>(c)] = read_dataset<std::uint64_t>(
        g, fmt::format("peak_mem_{}_bytes", to_string(static_cast<MemCategory>(c))).c_str());
  r.memory_capacity_bytes = read_dataset<std::uint64_t>(g, "memory_capacity_bytes");
  r.stage_params = read_dataset<std::int64_t>(g, "stage_params");
  r.peak_live_activations = read_dataset<int>(g, "peak_live_activations");
  if (H5Lexists(g, "device_mem_used_peak_bytes", H5P_DEFAULT) > 0) {  // files before issue 18 lack them
    r.device_used_before_bytes = read_dataset<std::int64_t>(g, "device_mem_used_before_bytes");
    r.device_used_peak_bytes = read_dataset<std::int64_t>(g, "device_mem_used_peak_bytes");
  }
  for (const auto& row : read_dataset_2d<int>(g, "stage_layers")) r.stage_layers.push_back({row.at(0), row.at(1)});
  read_rank_grid(g, r);
  r.microbatch_latency_s = read_dataset_2d<double>(g, "microbatch_latency_s");

  // `r` is only read while its events are appended (check_event: counts).
  r.events_in_file = read_events(
      g, r, [&](const EventRecord* e, std::size_t n) { if (keep_events) r.events.insert(r.events.end(), e, e + n); },
      keep_events ? &r.events : nullptr);
  check_shapes(r);
  return r;
}

std::vector<std::string> read_dataset_strings(hid_t g, const char* name) {
  std::vector<hsize_t> dims;
  Hid ds = open_dataset_checked(g, name, Want::string, 1, dims);
  std::vector<char*> ptrs(static_cast<std::size_t>(dims[0]), nullptr);
  Hid type = vlen_string_type();
  if (!ptrs.empty()) H5_CHECK(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
  return take_strings(ptrs, name);
}

ProbeResult read_probe(hid_t file) {
  Hid g(H5_CHECK(H5Gopen2(file, "probe", H5P_DEFAULT)), H5Gclose);
  ProbeResult p;
  p.options.run_name = read_attr_string(g, "run");
  // "ranks"; files from before tensor parallelism wrote it as "pipeline_size".
  p.options.ranks = read_attr_int(g, has_attr(g, "ranks") ? "ranks" : "pipeline_size");
  p.options.lo = read_attr_int(g, "lo");
  p.options.hi = read_attr_int(g, "hi");
  if (has_attr(g, "predicted"))  // absent in files written before `tune --confirm`: 0
    p.options.predicted = read_attr_int(g, "predicted");
  p.options.steps = read_attr_int(g, "steps");
  p.options.trial_timeout_s = read_attr_scalar<double>(g, "trial_timeout_s");
  p.options.launcher = read_attr_string(g, "launcher");
  p.max_micro_batch = read_attr_int(g, "max_micro_batch");
  p.recommended_micro_batch = read_attr_int(g, "recommended_micro_batch");
  p.stop_reason = read_attr_string(g, "stop_reason");
  const auto mbs = read_dataset<std::int64_t>(g, "micro_batch_size");
  const auto outcome = read_dataset_strings(g, "outcome");
  const auto codes = read_dataset<std::int64_t>(g, "exit_code");
  const auto secs = read_dataset<double>(g, "seconds");
  const auto peaks = read_dataset_2d<std::uint64_t>(g, "peak_mem_bytes");
  const auto path = read_dataset_strings(g, "results_path");
  const auto command = read_dataset_strings(g, "command");
  const auto tail = read_dataset_strings(g, "output_tail");
  for (std::size_t i = 0; i < mbs.size(); ++i) {
    ProbeTrial t;
    t.micro_batch_size = static_cast<int>(mbs[i]);
    t.outcome = parse_enum(outcome.at(i), {TrialOutcome::ok, TrialOutcome::oom, TrialOutcome::error, TrialOutcome::nan,
                                           TrialOutcome::timeout});
    t.exit_code = static_cast<int>(codes.at(i));
    t.seconds = secs.at(i);
    if (i < peaks.size()) t.peak_mem_bytes = peaks[i];
    t.results_path = path.at(i);
    t.command = command.at(i);
    t.output_tail = tail.at(i);
    p.trials.push_back(std::move(t));
  }
  return p;
}


}  // namespace

// A string attribute, checked as every read is (declared in h5_common.hpp for the writer).
std::string h5::read_attr_string(hid_t obj, const char* name) {
  Hid attr = open_attr_checked(obj, name, Want::string, true);
  Hid type = vlen_string_type();
  char* p = nullptr;
  H5_CHECK(H5Aread(attr, type, &p));
  return take_string(p, name);
}

JobResult read_results(const std::string& path, ReadEvents events) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) throw ResultsError(fmt::format("{}: not a readable HDF5 file", path));
  Hid file(fid, H5Fclose);
  if (!has_attr(file, "schema_version") || read_attr_scalar<std::int64_t>(file, "schema_version") != kResultsSchemaVersion)
    throw ResultsError(fmt::format("{}: not a pipebench schema-{} results file", path, kResultsSchemaVersion));
  JobResult jr;
  for (const char* k : {"tool_version", "git_sha", "created_utc", "job_name", "job_toml", "command_line", "label", "role",
                        "results_id", "system", "reproduces_id", "reproduces_sha256", "reproduces_path"})
    if (has_attr(file, k)) jr.root_attrs[k] = read_attr_string(file, k);
  jr.overrides = read_attr_strings(file, "overrides");
  if (has_attr(file, "deviations")) jr.deviations = read_attr_strings(file, "deviations");
  jr.evidence_level = read_attr_string(file, "evidence_level");
  jr.status = read_attr_string(file, "status");
  jr.launch_status = has_attr(file, "launch_status") ? read_attr_string(file, "launch_status") : "complete";
  {
    Hid prov(H5_CHECK(H5Gopen2(file, "provenance", H5P_DEFAULT)), H5Gclose);
    H5O_info_t info;
    H5_CHECK(H5Oget_info(prov, &info));
    for (hsize_t i = 0; i < info.num_attrs; ++i) {
      char name[256];
      H5_CHECK(H5Aget_name_by_idx(prov, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name), H5P_DEFAULT));
      if (std::string(name) == "hostnames" || std::string(name) == "pids") continue;
      jr.provenance_attrs[name] = read_attr_string(prov, name);
    }
    jr.hostnames = read_attr_strings(prov, "hostnames");
    jr.pids = read_attr_array<std::int64_t>(prov, "pids");
  }
  Hid runs(H5_CHECK(H5Gopen2(file, "runs", H5P_DEFAULT)), H5Gclose);
  std::vector<std::string> names;
  H5_CHECK(H5Literate(runs, H5_INDEX_CRT_ORDER, H5_ITER_INC, nullptr, collect_name, &names));
  for (const auto& n : names) {
    if (!valid_name(n)) throw ResultsError(fmt::format("runs/\"{}\": not a pipebench run name", printable(n)));
    jr.runs.push_back(read_run(runs, n, events == ReadEvents::keep));
  }
  if (H5Lexists(file, "probe", H5P_DEFAULT) > 0) jr.probe = read_probe(file);
  return jr;
}

void stream_events(const std::string& path, const RunResult& run,
                   const std::function<void(const EventRecord*, std::size_t)>& take) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) throw ResultsError(fmt::format("{}: not a readable HDF5 file", path));
  Hid file(fid, H5Fclose);
  if (!valid_name(run.spec.name)) throw ResultsError(fmt::format("runs/\"{}\": not a pipebench run name", printable(run.spec.name)));
  const std::string group = "runs/" + run.spec.name;
  if (H5Lexists(file, "runs", H5P_DEFAULT) <= 0 || H5Lexists(file, group.c_str(), H5P_DEFAULT) <= 0)
    throw ResultsError(fmt::format("{}: no run {}", path, run.spec.name));
  Hid g(H5_CHECK(H5Gopen2(file, group.c_str(), H5P_DEFAULT)), H5Gclose);
  (void)read_events(g, run, take, nullptr);
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return fmt::format("{}.{}.{}", major, minor, release);
}

}  // namespace pipebench
