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

// ---- writing -------------------------------------------------------------

void attr_string(hid_t obj, const char* name, const std::string& value) {
  Hid type = vlen_string_type();
  Hid space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  Hid attr(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  const char* p = value.c_str();
  H5_CHECK(H5Awrite(attr, type, &p));
}

void attr_strings(hid_t obj, const char* name, const std::vector<std::string>& values) {
  Hid type = vlen_string_type();
  const hsize_t n = values.size();
  Hid space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  Hid attr(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n > 0) H5_CHECK(H5Awrite(attr, type, ptrs.data()));
}


template <typename T>
void attr_scalar(hid_t obj, const char* name, T value) {
  Hid space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  Hid attr(H5_CHECK(H5Acreate2(obj, name, native_type<T>(), space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(attr, native_type<T>(), &value));
}

template <typename T>
void attr_array(hid_t obj, const char* name, const std::vector<T>& values) {
  const hsize_t n = values.size();
  Hid space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  Hid attr(H5_CHECK(H5Acreate2(obj, name, native_type<T>(), space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  if (n > 0) H5_CHECK(H5Awrite(attr, native_type<T>(), values.data()));
}

// Storage of a dataset of `dims` (first dimension the long one: steps, rows,
// events): contiguous when small; from kCompressFromElements elements on,
// chunked (about kChunkElements per chunk, whole rows) with the shuffle and
// deflate filters — every HDF5 build and h5py read them, and the per-step
// figures and event times of a long run compress several-fold
// (docs/results-format.md, "Storage").
constexpr hsize_t kCompressFromElements = 4096;
constexpr hsize_t kChunkElements = 16384;
constexpr unsigned kDeflateLevel = 4;
constexpr int kEventTimeBits = 30;

// Chunks of `chunk` with the shuffle and deflate filters.
void compress(hid_t dcpl, const std::vector<hsize_t>& chunk) {
  H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
  H5_CHECK(H5Pset_shuffle(dcpl));
  H5_CHECK(H5Pset_deflate(dcpl, kDeflateLevel));
}

Hid creation_properties(const std::vector<hsize_t>& dims) {
  Hid dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  hsize_t elements = 1, row = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    elements *= dims[d];
    if (d > 0) row *= dims[d];
  }
  if (dims.empty() || elements < kCompressFromElements) return dcpl;
  std::vector<hsize_t> chunk = dims;
  chunk[0] = std::clamp<hsize_t>(kChunkElements / std::max<hsize_t>(row, 1), 1, dims[0]);
  compress(dcpl, chunk);
  return dcpl;
}

// An event time as stored: rounded to a multiple of 2^-30 s (0.93 ns), below
// the clocks' nanosecond resolution. The bits dropped are arithmetic noise
// (differences of clock readings), and without them the event table
// compresses about half as small again (docs/results-format.md, "Storage").
double event_time(double s) {
  return std::isfinite(s) ? std::ldexp(std::nearbyint(std::ldexp(s, kEventTimeBits)), -kEventTimeBits) : s;
}

template <typename T>
void dataset(hid_t group, const char* name, const std::vector<T>& data, std::vector<hsize_t> dims) {
  Hid space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  Hid dcpl = creation_properties(dims);
  Hid ds(H5_CHECK(H5Dcreate2(group, name, native_type<T>(), space, H5P_DEFAULT, dcpl, H5P_DEFAULT)), H5Dclose);
  if (!data.empty()) H5_CHECK(H5Dwrite(ds, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
}

template <typename T>
void dataset_1d(hid_t group, const char* name, const std::vector<T>& data) {
  dataset(group, name, data, {data.size()});
}

// rows x cols, row-major; `cols` is used when there are no rows.
template <typename T>
void dataset_2d(hid_t group, const char* name, const std::vector<std::vector<T>>& rows, std::size_t cols) {
  std::vector<T> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  dataset(group, name, flat, {rows.size(), rows.empty() ? cols : rows[0].size()});
}

void dataset_strings(hid_t group, const char* name, const std::vector<std::string>& values) {
  Hid type = vlen_string_type();
  const hsize_t n = values.size();
  Hid space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  Hid ds(H5_CHECK(H5Dcreate2(group, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Dclose);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n > 0) H5_CHECK(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
}

void write_probe(hid_t file, const ProbeResult& p) {
  Hid g(H5_CHECK(H5Gcreate2(file, "probe", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
  attr_string(g, "run", p.options.run_name);
  attr_scalar<std::int64_t>(g, "ranks", p.options.ranks);
  attr_scalar<std::int64_t>(g, "lo", p.options.lo);
  attr_scalar<std::int64_t>(g, "hi", p.options.hi);
  attr_scalar<std::int64_t>(g, "predicted", p.options.predicted);
  attr_scalar<std::int64_t>(g, "steps", p.options.steps);
  attr_scalar(g, "trial_timeout_s", p.options.trial_timeout_s);
  attr_string(g, "launcher", p.options.launcher);
  attr_scalar<std::int64_t>(g, "max_micro_batch", p.max_micro_batch);
  attr_scalar<std::int64_t>(g, "recommended_micro_batch", p.recommended_micro_batch);
  attr_string(g, "stop_reason", p.stop_reason);
  std::vector<std::int64_t> mbs, codes;
  std::vector<double> secs;
  std::vector<std::string> outcome, path, command, tail;
  std::vector<std::vector<std::uint64_t>> peaks;
  for (const auto& t : p.trials) {
    mbs.push_back(t.micro_batch_size);
    codes.push_back(t.exit_code);
    secs.push_back(t.seconds);
    outcome.emplace_back(to_string(t.outcome));
    path.push_back(t.results_path);
    command.push_back(t.command);
    tail.push_back(t.output_tail);
    std::vector<std::uint64_t> row(static_cast<std::size_t>(p.options.ranks), 0);
    for (std::size_t r = 0; r < row.size() && r < t.peak_mem_bytes.size(); ++r) row[r] = t.peak_mem_bytes[r];
    peaks.push_back(row);
  }
  dataset_1d(g, "micro_batch_size", mbs);
  dataset_strings(g, "outcome", outcome);
  dataset_1d(g, "exit_code", codes);
  dataset_1d(g, "seconds", secs);
  dataset_2d(g, "peak_mem_bytes", peaks, static_cast<std::size_t>(p.options.ranks));
  dataset_strings(g, "results_path", path);
  dataset_strings(g, "command", command);
  dataset_strings(g, "output_tail", tail);
}


// `count` events as rows into `rows`. The rows' padding bytes are stored too
// (the file type keeps the memory layout): they must be zeros, never a reused
// buffer's or a temporary's old bytes. Fields are assigned one by one, which
// leaves the zeroed padding alone.
void to_rows(const EventRecord* events, std::size_t count, EventRow* rows) {
  std::memset(static_cast<void*>(rows), 0, count * sizeof(EventRow));
  for (std::size_t i = 0; i < count; ++i) {
    const EventRecord& e = events[i];
    EventRow& row = rows[i];
    row.step = e.step;
    row.rank = e.rank;
    row.kind = static_cast<std::int8_t>(e.kind);
    row.microbatch = e.microbatch;
    row.chunk = e.chunk;
    row.start_s = event_time(e.start_s);
    row.end_s = event_time(e.end_s);
    row.wait_s = event_time(e.wait_s);
  }
}

// `count` rows into dataset `ds` (whose extent holds them) from row `first`.
void write_event_rows(hid_t ds, hid_t type, hsize_t first, const EventRow* rows, std::size_t count) {
  if (count == 0) return;
  Hid space(H5_CHECK(H5Dget_space(ds)), H5Sclose);
  const hsize_t block = count;
  H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &first, nullptr, &block, nullptr));
  Hid memory(H5_CHECK(H5Screate_simple(1, &block, nullptr)), H5Sclose);
  H5_CHECK(H5Dwrite(ds, type, memory, space, H5P_DEFAULT, rows));
}

void write_events(hid_t g, const std::vector<EventRecord>& events) {
  Hid et = event_type();
  const hsize_t n = events.size();
  Hid space(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  Hid dcpl = creation_properties({n});
  Hid ds(H5_CHECK(H5Dcreate2(g, "events", et, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)), H5Dclose);
  std::vector<EventRow> rows(std::min(events.size(), kEventBlock));
  for (std::size_t first = 0; first < events.size(); first += kEventBlock) {
    const std::size_t count = std::min(kEventBlock, events.size() - first);
    to_rows(events.data() + first, count, rows.data());
    write_event_rows(ds, et, first, rows.data(), count);
  }
}

}  // namespace

// Streamed events, run by run, in a scratch file (ResultsWriter::append_events):
// one extendable dataset per run, chunked and compressed like the results
// file's, filled kEventBlock rows at a time and copied (compressed chunks as
// they are, H5Ocopy) into each results file written after the run ended.
class EventStore {
 public:
  explicit EventStore(const std::string& path)
      : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose) {
    if (file_ < 0) throw ResultsError("H5Fcreate failed");
    unlink(path.c_str());  // HDF5 keeps its descriptor; nothing is left after a kill
    buffer_.reserve(kEventBlock);
  }

  void append(const std::string& run, const EventRecord* events, std::size_t n) {
    if (run != open_run_) open(run);
    while (n > 0) {
      const std::size_t take = std::min(n, kEventBlock - buffer_.size());
      const std::size_t at = buffer_.size();
      buffer_.resize(at + take);
      to_rows(events, take, buffer_.data() + at);
      events += take;
      n -= take;
      if (buffer_.size() == kEventBlock) flush();
    }
  }

  void end(const std::string& run) {
    if (run != open_run_) open(run);  // a run without events: an empty dataset
    flush();
    H5_CHECK(H5Fflush(file_, H5F_SCOPE_LOCAL));
    dataset_.reset();
    open_run_.clear();
    ended_.push_back(run);
  }

  // Copies run `run`'s events into `group` as "events"; false when they are
  // not here (not ended).
  bool copy_to(hid_t group, const std::string& run) const {
    if (std::find(ended_.begin(), ended_.end(), run) == ended_.end()) return false;
    H5_CHECK(H5Ocopy(file_, run.c_str(), group, "events", H5P_DEFAULT, H5P_DEFAULT));
    return true;
  }

 private:
  void open(const std::string& run) {
    if (!open_run_.empty()) throw ResultsError(fmt::format("events of run {} appended before run {} ended", run, open_run_));
    if (std::find(ended_.begin(), ended_.end(), run) != ended_.end())
      throw ResultsError(fmt::format("events of run {} appended after it ended", run));
    const hsize_t none = 0, unlimited = H5S_UNLIMITED;
    Hid space(H5_CHECK(H5Screate_simple(1, &none, &unlimited)), H5Sclose);
    Hid dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    compress(dcpl, {kChunkElements});
    dataset_.emplace(H5_CHECK(H5Dcreate2(file_, run.c_str(), type_, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)), H5Dclose);
    rows_ = 0;
    open_run_ = run;
  }

  void flush() {
    if (buffer_.empty()) return;
    const hsize_t rows = rows_ + buffer_.size();
    H5_CHECK(H5Dset_extent(*dataset_, &rows));
    write_event_rows(*dataset_, type_, rows_, buffer_.data(), buffer_.size());
    rows_ = rows;
    buffer_.clear();
  }

  Hid file_;
  Hid type_ = event_type();
  std::optional<Hid> dataset_;  // the open run's
  std::string open_run_;
  hsize_t rows_ = 0;            // in the open run's dataset
  std::vector<EventRow> buffer_;
  std::vector<std::string> ended_;
};
namespace {

// docs/results-format.md: the rank grid (with replicas or tensor ranks), the
// grad_buckets/: one column per BucketRecord field, a row per collective.
void write_grad_buckets(hid_t run, const std::vector<BucketRecord>& rows) {
  if (rows.empty()) return;
  Hid g(H5_CHECK(H5Gcreate2(run, "grad_buckets", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
  const auto column = [&](const char* name, auto field) {
    std::vector<std::remove_cvref_t<decltype(rows.front().*field)>> v;
    v.reserve(rows.size());
    for (const BucketRecord& b : rows) v.push_back(b.*field);
    dataset_1d(g, name, v);
  };
  column("rank", &BucketRecord::rank);
  column("step", &BucketRecord::step);
  column("chunk", &BucketRecord::chunk);
  column("index", &BucketRecord::index);
  column("kind", &BucketRecord::kind);
  column("bytes", &BucketRecord::bytes);
  column("launch_s", &BucketRecord::launch_s);
  column("end_s", &BucketRecord::end_s);
  column("exposed_s", &BucketRecord::exposed_s);
}

// tensor ranks and their collectives, the gradient synchronisation.
void write_rank_grid(hid_t g, const RunResult& r, std::size_t P) {
  if (r.spec.tensor_parallel > 1) {
    dataset_1d(g, "tensor_rank", r.tensor_rank);
    if (!r.tensor_comm_s.empty()) dataset_2d(g, "tensor_comm_s", r.tensor_comm_s, P);
  }
  if (r.spec.context_parallel > 1) dataset_1d(g, "context_rank", r.context_rank);
  if (r.spec.grad_group() > 1 || r.spec.tensor_parallel > 1) {
    dataset_1d(g, "pipeline_rank", r.pipeline_rank);
    dataset_1d(g, "data_rank", r.data_rank);
    if (!r.node.empty()) dataset_1d(g, "node", r.node);
  }
  if (r.spec.grad_group() <= 1) return;
  if (!r.grad_sync_bytes.empty()) dataset_1d(g, "grad_sync_bytes", r.grad_sync_bytes);
  if (r.grad_sync_s.empty()) return;
  dataset_2d(g, "grad_sync_start_s", r.grad_sync_start_s, P);
  dataset_2d(g, "grad_sync_s", r.grad_sync_s, P);
  dataset_2d(g, "grad_sync_exposed_s", r.grad_sync_exposed_s, P);
  // Derived (metrics.hpp grad_sync_bus_bandwidth), written for readers; not read back.
  std::vector<std::vector<double>> busbw(r.grad_sync_s.size());
  for (std::size_t k = 0; k < busbw.size(); ++k)
    for (std::size_t i = 0; i < r.grad_sync_s[k].size(); ++i) busbw[k].push_back(grad_sync_bus_bandwidth(r, k, i));
  dataset_2d(g, "grad_sync_bus_bandwidth", busbw, P);
  write_grad_buckets(g, r.grad_buckets);
}

void write_run(hid_t runs, const RunResult& r, const EventStore* store) {
  Hid g(H5_CHECK(H5Gcreate2(runs, r.spec.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
  attr_string(g, "status", std::string(to_string(r.status)));
  attr_string(g, "failure_kind", r.failure_kind == FailureKind::none ? "" : std::string(to_string(r.failure_kind)));
  attr_string(g, "failure_message", r.failure_message);
  attr_scalar<std::int64_t>(g, "failing_rank", r.failing_rank);
  attr_string(g, "mode", std::string(to_string(r.spec.mode)));
  attr_scalar<std::int64_t>(g, "pipeline_size", r.spec.pipeline_size);
  attr_scalar<std::int64_t>(g, "micro_batch_size", r.spec.micro_batch_size);
  attr_scalar<std::int64_t>(g, "num_microbatches", r.spec.num_microbatches);
  attr_string(g, "schedule", r.schedule_name);
  attr_scalar<std::int64_t>(g, "virtual_stages_per_rank", r.spec.virtual_stages_per_rank);
  attr_scalar<std::int64_t>(g, "data_parallel", r.spec.data_parallel);
  if (r.spec.context_parallel > 1) {  // absent: 1 (files before context parallelism too)
    attr_scalar<std::int64_t>(g, "context_parallel", r.spec.context_parallel);
    attr_string(g, "cp_comm", std::string(to_string(r.spec.cp_comm)));
  }
  attr_string(g, "optimizer_sharding", std::string(to_string(r.spec.optimizer_sharding)));
  if (r.spec.optimizer_sharding == OptimizerSharding::fsdp)  // resolved: 1 reshards after the forward
    attr_scalar<std::int64_t>(g, "fsdp_reshard_after_forward", reshard_after_forward(r.spec) ? 1 : 0);
  attr_string(g, "grad_sync", std::string(to_string(r.spec.grad_sync)));
  attr_scalar<std::int64_t>(g, "grad_bucket_bytes", r.spec.grad_bucket_bytes);  // 0: the default rule
  attr_string(g, "rank_order", std::string(to_string(r.spec.rank_order)));
  if (r.spec.tensor_parallel > 1) {  // absent: 1 (files from before tensor parallelism too)
    attr_scalar<std::int64_t>(g, "tensor_parallel", r.spec.tensor_parallel);
    attr_scalar<std::int64_t>(g, "sequence_parallel", r.spec.sequence_parallel ? 1 : 0);
  }
  if (r.spec.recompute != Recompute::none) attr_string(g, "recompute", std::string(to_string(r.spec.recompute)));
  attr_array<int>(g, "layers_per_stage", r.layers_per_stage);
  attr_array<int>(g, "stage_rank", r.stage_rank);
  attr_scalar<std::int64_t>(g, "layers_per_stage_origin", r.spec.layers_per_stage_origin);
  attr_string(g, "backend", std::string(to_string(r.backend)));
  attr_string(g, "dtype", std::string(to_string(r.dtype)));
  attr_scalar<std::int64_t>(g, "warmup", r.warmup);
  attr_scalar<std::int64_t>(g, "repeats", r.repeats);
  attr_scalar<std::int64_t>(g, "max_repeats", r.max_repeats);
  attr_scalar<std::int64_t>(g, "repeats_extended", r.repeats_extended);
  attr_string(g, "baseline", r.baseline);
  attr_scalar(g, "speedup", r.speedup);
  attr_scalar(g, "speedup_low", r.speedup_low);
  attr_scalar(g, "speedup_high", r.speedup_high);
  attr_scalar<std::int64_t>(g, "speedup_per_sample", r.speedup_per_sample ? 1 : 0);
  attr_string(g, "workload", r.workload);
  attr_string(g, "workload_fingerprint", r.workload_fingerprint);
  attr_scalar(g, "bubble_analytic", r.bubble_analytic);
  attr_scalar(g, "bubble_simulated", r.bubble_simulated);
  attr_scalar(g, "step_time_median_s", r.step_time.median);
  attr_scalar(g, "step_time_min_s", r.step_time.min);
  attr_scalar(g, "step_time_max_s", r.step_time.max);
  attr_scalar(g, "step_time_p90_s", r.step_time.p90);
  attr_scalar(g, "step_time_cv", r.step_time.cv);
  attr_scalar(g, "step_time_slope_s_per_step", r.step_time.slope);
  attr_scalar(g, "slowest_stage_median_s", r.slowest_stage_median_s);
  attr_scalar(g, "bubble_measured_median", r.bubble_measured_median);
  attr_scalar(g, "imbalance_median", r.imbalance_median);
  attr_scalar(g, "throughput_samples_per_s", r.throughput_samples_per_s);
  attr_scalar<std::uint64_t>(g, "peak_mem_max_bytes", r.peak_mem_max_bytes);
  attr_scalar(g, "loss_max_rel_dev", r.loss_max_rel_dev);
  attr_string(g, "decision", r.decision);
  attr_strings(g, "decision_reasons", r.decision_reasons);

  const std::size_t P = r.peak_mem_bytes.size();
  dataset_1d(g, "step_time_s", r.step_time_s);
  dataset_1d(g, "is_warmup", r.is_warmup);
  dataset_1d(g, "loss", r.loss);
  dataset_2d(g, "busy_s", r.busy_s, P);
  dataset_2d(g, "comm_wait_s", r.comm_wait_s, P);
  dataset_2d(g, "comm_transfer_s", r.comm_transfer_s, P);
  dataset_2d(g, "idle_s", r.idle_s, P);
  dataset_2d(g, "forward_s", r.forward_s, P);
  dataset_2d(g, "backward_s", r.backward_s, P);
  dataset_2d(g, "optimizer_s", r.optimizer_s, P);
  dataset_1d(g, "slowest_stage_s", r.slowest_stage_s);
  dataset_1d(g, "imbalance", r.imbalance);
  dataset_1d(g, "bubble_measured", r.bubble_measured);
  dataset_1d(g, "grad_norm", r.grad_norm);
  dataset_1d(g, "clipped", r.clipped);
  dataset_1d(g, "peak_mem_bytes", r.peak_mem_bytes);
  for (int c = 0; c < kNumMemCategories; ++c)
    dataset_1d(g, fmt::format("peak_mem_{}_bytes", to_string(static_cast<MemCategory>(c))).c_str(),
               r.peak_mem_by_category[static_cast<std::size_t>(c)]);
  dataset_1d(g, "memory_capacity_bytes", r.memory_capacity_bytes);
  dataset_1d(g, "stage_params", r.stage_params);
  dataset_1d(g, "peak_live_activations", r.peak_live_activations);
  dataset_1d(g, "device_mem_used_before_bytes", r.device_used_before_bytes);
  dataset_1d(g, "device_mem_used_peak_bytes", r.device_used_peak_bytes);
  std::vector<std::vector<int>> layers;
  for (const auto& l : r.stage_layers) layers.push_back({l[0], l[1]});
  dataset_2d(g, "stage_layers", layers, 2);
  write_rank_grid(g, r, P);
  dataset_2d(g, "microbatch_latency_s", r.microbatch_latency_s, static_cast<std::size_t>(r.spec.num_microbatches));

  if (!(r.events.empty() && store && store->copy_to(g, r.spec.name))) write_events(g, r.events);
}
}  // namespace

std::string default_results_path(const std::string& base_dir, const std::string& job_name, const std::string& label,
                                 const std::string& utc_stamp, const std::string& id) {
  std::filesystem::path p(base_dir);
  p /= job_name;
  if (!label.empty()) p /= label;
  p /= fmt::format("{}-{}.h5", utc_stamp, id);
  return p.string();
}

namespace {

// Runs `write`, which writes `path`; its ResultsError is rethrown naming
// `what` and `path` and, where the OS gave one, its reason ("No space left
// on device"). HDF5's own error stack is not printed.
template <typename Write>
void writing(const char* what, const std::string& path, Write&& write) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  errno = 0;
  try {
    write();
  } catch (const ResultsError& e) {
    const int err = errno;
    if (err != 0) throw ResultsError(fmt::format("cannot write {} {}: {} ({})", what, path, std::strerror(err), e.what()));
    throw ResultsError(fmt::format("cannot write {} {}: {}", what, path, e.what()));
  }
}

// `result` as a complete file at `path` (truncated first), flushed and
// fsynced, with the events `store` holds for its runs.
void write_file(const std::string& path, const JobResult& result, const EventStore* store) {
  writing("results file", path, [&] {
    {
      Hid file(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
      attr_scalar<std::int64_t>(file, "schema_version", kResultsSchemaVersion);
      for (const auto& [k, v] : result.root_attrs) attr_string(file, k.c_str(), v);
      attr_strings(file, "overrides", result.overrides);
      if (result.root_attrs.count("reproduces_id")) attr_strings(file, "deviations", result.deviations);
      attr_string(file, "evidence_level", result.evidence_level);
      attr_string(file, "status", result.status);
      attr_string(file, "launch_status", result.launch_status);
      {
        Hid prov(H5_CHECK(H5Gcreate2(file, "provenance", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
        for (const auto& [k, v] : result.provenance_attrs) attr_string(prov, k.c_str(), v);
        attr_strings(prov, "hostnames", result.hostnames);
        attr_array(prov, "pids", result.pids);
      }
      // Track creation order so readers list runs in the job's order.
      Hid gcpl(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)), H5Pclose);
      H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
      Hid runs(H5_CHECK(H5Gcreate2(file, "runs", H5P_DEFAULT, gcpl, H5P_DEFAULT)), H5Gclose);
      for (const auto& r : result.runs) write_run(runs, r, store);
      if (result.probe) write_probe(file, *result.probe);
      H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    }
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      errno = err;
      throw ResultsError(fmt::format("fsync: {}", std::strerror(err)));
    }
    close(fd);
  });
}

}  // namespace

ResultsWriter::ResultsWriter(const std::string& requested_path) {
  namespace fs = std::filesystem;
  const fs::path requested(requested_path);
  std::error_code ec;
  if (!requested.parent_path().empty()) fs::create_directories(requested.parent_path(), ec);
  if (ec)
    throw ResultsError(fmt::format("cannot create results folder {}: {}", requested.parent_path().string(), ec.message()));
  // Claim a name no other launch holds (two launches of one Slurm job in the
  // same second ask for the same one): NAME.claim created exclusively, with
  // neither NAME nor its checkpoint there, else NAME-1, NAME-2, ... The claim
  // lives as long as the writer; a killed launch's stale claim is skipped.
  const fs::path stem = requested.parent_path() / requested.stem();
  for (int i = 0;; ++i) {
    const std::string candidate = i == 0 ? requested_path : fmt::format("{}-{}.h5", stem.string(), i);
    if (fs::exists(candidate, ec) || fs::exists(candidate + ".partial", ec)) continue;
    const int fd = open((candidate + ".claim").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) throw ResultsError(fmt::format("cannot write results file {}: {}", candidate, std::strerror(errno)));
    close(fd);
    final_ = candidate;
    break;
  }
  claim_ = final_ + ".claim";
  partial_ = final_ + ".partial";
  tmp_ = final_ + ".partial.tmp";
  events_path_ = final_ + ".events.tmp";
  const int fd = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    const int err = errno;
    unlink(claim_.c_str());
    throw ResultsError(fmt::format("cannot write results file {}: {}", tmp_, std::strerror(err)));
  }
  close(fd);
}

ResultsWriter::~ResultsWriter() {
  if (!finished_) unlink(tmp_.c_str());  // FINAL.partial stays: the last checkpoint
  unlink(claim_.c_str());
}

EventStore& ResultsWriter::event_store() {
  if (!events_) events_ = std::make_unique<EventStore>(events_path_);
  return *events_;
}

void ResultsWriter::append_events(const std::string& run, const EventRecord* events, std::size_t n) {
  writing("results scratch file", events_path_, [&] { event_store().append(run, events, n); });
}

void ResultsWriter::end_events(const std::string& run) {
  writing("results scratch file", events_path_, [&] { event_store().end(run); });
}

void ResultsWriter::checkpoint(const JobResult& result) {
  write_file(tmp_, result, events_.get());
  if (std::rename(tmp_.c_str(), partial_.c_str()) != 0)
    throw ResultsError(fmt::format("cannot rename {} to {}: {}", tmp_, partial_, std::strerror(errno)));
}

bool ResultsWriter::record_write_failure(const std::string& why) noexcept {
  // What the failed writes took, back for the mark: the half-written
  // checkpoint and the (already unlinked) events scratch file.
  unlink(tmp_.c_str());
  events_.reset();
  return mark_unwritten_runs(partial_, why);
}

std::string ResultsWriter::finish(const JobResult& result) {
  write_file(tmp_, result, events_.get());
  // Publish without ever replacing an existing file: link() fails on EEXIST.
  const std::filesystem::path fp(final_);
  const std::filesystem::path stem = fp.parent_path() / fp.stem();
  for (int i = 0;; ++i) {
    const std::string candidate = i == 0 ? final_ : fmt::format("{}-{}.h5", stem.string(), i);
    if (link(tmp_.c_str(), candidate.c_str()) == 0) {
      unlink(tmp_.c_str());
      unlink(partial_.c_str());
      finished_ = true;
      return candidate;
    }
    if (errno != EEXIST)
      throw ResultsError(fmt::format("cannot create results file {}: {}", candidate, std::strerror(errno)));
  }
}

bool mark_unwritten_runs(const std::string& checkpoint, const std::string& why) noexcept {
  try {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    if (access(checkpoint.c_str(), F_OK) != 0) return false;
    bool marked = false;
    {
      Hid file(H5_CHECK(H5Fopen(checkpoint.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)), H5Fclose);
      Hid runs(H5_CHECK(H5Gopen2(file, "runs", H5P_DEFAULT)), H5Gclose);
      std::vector<std::string> names;
      H5_CHECK(H5Literate(runs, H5_INDEX_CRT_ORDER, H5_ITER_INC, nullptr, collect_name, &names));
      const std::string message = "not measured: its results could not be written (" + why + ")";
      for (const auto& name : names) {
        Hid g(H5_CHECK(H5Gopen2(runs, name.c_str(), H5P_DEFAULT)), H5Gclose);
        if (!has_attr(g, "failure_kind") || read_attr_string(g, "failure_kind") != "interrupted") continue;
        for (const char* a : {"failure_kind", "failure_message", "decision", "decision_reasons"})
          if (has_attr(g, a)) H5_CHECK(H5Adelete(g, a));
        attr_string(g, "failure_kind", "error");
        attr_string(g, "failure_message", message);
        attr_string(g, "decision", "inconclusive");
        attr_strings(g, "decision_reasons", {message + "; free space or choose another -o, then rerun it"});
        marked = true;
      }
      H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    }
    const int fd = open(checkpoint.c_str(), O_RDONLY);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
    return marked;
  } catch (...) {
    return false;
  }
}

bool publish_partial(const char* partial, const char* final_path) noexcept {
  if (link(partial, final_path) != 0) return false;
  unlink(partial);
  return true;
}

std::string write_results(const std::string& path, const JobResult& result) {
  ResultsWriter writer(path);
  return writer.finish(result);
}

}  // namespace pipebench
