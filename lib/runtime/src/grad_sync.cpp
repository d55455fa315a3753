#include "pipebench/runtime/grad_sync.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/parallel/collectives.hpp"

namespace pipebench {

GradientSync::GradientSync(RunComm& comm, Backend& backend, RunClock& clock, const DeviceSpec& device,
                           parallel::Link link, bool modelled,
                           bool sharded, int chunks, DeviceAllReduce* on_device)
    : comm_(comm), backend_(backend), device_(on_device), clock_(clock), sim_load_(device.sim_load), link_(link),
      modelled_(modelled), sharded_(sharded) {
  if (device_ && (modelled_ || sharded_))
    throw ConfigError("the gradient synchronisation reduces over NCCL only the plain (unsharded) gradients of a device");
  if (!sharded_ || modelled_) return;
  // Where each chunk starts in the rank's concatenated parameters (parallel/shards.hpp).
  std::int64_t base = 0;
  for (int c = 0; c < chunks; ++c) {
    chunk_base_.push_back(base);
    base += static_cast<std::int64_t>(backend_.gradients(c).count);
  }
  total_ = base;
}

void GradientSync::begin_step(double t0, bool gathers_from_start) {
  t0_ = t0;
  from_start_ = gathers_from_start;
  buckets_.clear();
  first_launch_ = last_end_ = 0.0;
  bytes_ = 0;
  posted_.clear();
  records_.clear();
  gathers_.clear();
  gathers_end_ = 0.0;
}

// Every replica's part of elements [a, b) of chunk `chunk`: counts and
// displacements from a (the shards in replica order, so contiguous).
void GradientSync::split(int chunk, std::int64_t a, std::int64_t b, Bucket& out) const {
  const std::int64_t base = chunk_base_[static_cast<std::size_t>(chunk)];
  int displ = 0;
  for (int q = 0; q < comm_.grad_size(); ++q) {
    const parallel::Span s = parallel::shard_of(total_, comm_.grad_size(), q);
    const auto n = static_cast<int>(parallel::intersect({s.begin - base, s.end - base}, {a, b}).size());
    out.counts.push_back(n);
    out.displs.push_back(displ);
    displ += n;
  }
}

std::int64_t GradientSync::owned_begin(int chunk) const {
  const std::int64_t base = chunk_base_[static_cast<std::size_t>(chunk)];
  return std::max<std::int64_t>(0, parallel::shard_of(total_, comm_.grad_size(), comm_.grad_rank()).begin - base);
}

void GradientSync::post_all_gather(int chunk, Bucket& b, std::int64_t n) {
  split(chunk, b.offset, b.offset + n, b);
  const FlatRegion shard = backend_.parameter_shard(chunk);
  const auto q = static_cast<std::size_t>(comm_.grad_rank());
  if (!shard.data) {
    PIPEBENCH_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.data, b.counts.data(), b.displs.data(),
                                        MPI_FLOAT, comm_.data(), &b.req));
    return;
  }
  const float* mine = shard.data + (b.offset + b.displs[q] - owned_begin(chunk));
  PIPEBENCH_MPI_CHECK(MPI_Iallgatherv(mine, b.counts[q], MPI_FLOAT, b.data, b.counts.data(), b.displs.data(), MPI_FLOAT,
                                      comm_.data(), &b.req));
}

double GradientSync::link_time(parallel::Collective c, std::uint64_t bytes) const {
  return sim_load_ * parallel::ring_time_s(c, bytes, comm_.grad_size(), link_.latency_s, link_.gbps);
}

// One modelled bucket (sim) launched `at` into the step: a MAX of the replicas' launch times.
GradientSync::Bucket& GradientSync::post_modelled_bucket(int chunk, std::uint64_t logical_bytes, parallel::Collective kind,
                                                         double at) {
  Bucket& b = buckets_.emplace_back();
  b.logical_bytes = logical_bytes;
  b.kind = kind;
  b.chunk = chunk;
  b.launch_at = at;
  PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &b.launch_at, 1, MPI_DOUBLE, MPI_MAX, comm_.data(), &b.req));
  return b;
}

// Modelled pieces (sim): kGradBucketBytes of logical bytes each, launched now.
void GradientSync::post_modelled(int chunk, std::uint64_t logical_bytes, parallel::Collective kind) {
  const double at = clock_.now() - t0_;
  for (std::uint64_t off = 0; off < logical_bytes; off += parallel::kGradBucketBytes)
    post_modelled_bucket(chunk, std::min(parallel::kGradBucketBytes, logical_bytes - off), kind, at).piece = true;
}

GradientSync::Bucket& GradientSync::post_real(int chunk, const FlatRegion& g, std::int64_t off, std::int64_t n,
                                              parallel::Collective kind) {
  Bucket& b = buckets_.emplace_back();
  b.kind = kind;
  b.chunk = chunk;
  b.launch_at = clock_.now() - t0_;
  b.logical_bytes = static_cast<std::uint64_t>(n) * sizeof(float);
  b.data = g.data + off;
  b.offset = off;
  if (device_) {
    device_->post(b.data, static_cast<std::size_t>(n), backend_.device_stream());
    return b;
  }
  if (!sharded_) {
    PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, b.data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_.data(), &b.req));
    return b;
  }
  // In place: the input is the whole bucket, this replica's sum lands at
  // its start (moved to its place in complete()).
  split(chunk, off, off + n, b);
  PIPEBENCH_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, b.data, b.counts.data(), MPI_FLOAT, MPI_SUM, comm_.data(), &b.req));
  return b;
}

void GradientSync::launch(int chunk, const std::vector<parallel::GradBucket>* buckets, double action_start_s,
                          double action_end_s) {
  const FlatRegion g = backend_.gradients(chunk);
  const double now = clock_.now() - t0_;
  const auto at = [&](const parallel::GradBucket& k) { return action_start_s + k.ready * (action_end_s - action_start_s); };
  if (buckets_.empty() && gathers_.empty() && !from_start_)
    first_launch_ = buckets && modelled_ && !buckets->empty() ? at(buckets->front()) : now;
  bytes_ += g.logical_bytes;
  const auto kind = sharded_ ? parallel::Collective::reduce_scatter : parallel::Collective::all_reduce;
  if (!buckets) {
    if (modelled_) return post_modelled(chunk, g.logical_bytes, kind);
    const auto per_bucket = static_cast<std::int64_t>(parallel::kGradBucketBytes / sizeof(float));
    const auto count = static_cast<std::int64_t>(g.count);
    for (std::int64_t off = 0; off < count; off += per_bucket)
      post_real(chunk, g, off, std::min(per_bucket, count - off), kind).piece = true;
    return;
  }
  if (modelled_) {
    for (const parallel::GradBucket& k : *buckets) post_modelled_bucket(chunk, k.bytes, kind, at(k));
    return;
  }
  post_buckets(chunk, g, *buckets, buckets->size());
}

void GradientSync::launch_ready(int chunk, const std::vector<parallel::GradBucket>& buckets, int pieces) {
  std::size_t ready = 0;
  while (ready < buckets.size() && buckets[ready].last < pieces) ++ready;
  if (buckets_.empty() && gathers_.empty() && !from_start_ && ready > 0) first_launch_ = clock_.now() - t0_;
  post_buckets(chunk, backend_.gradients(chunk), buckets, ready);
  progress();
}

// Posts chunk `chunk`'s buckets up to (not including) `upto` that are not
// posted yet: the layers in backward order sit at the end of the region.
void GradientSync::post_buckets(int chunk, const FlatRegion& g, const std::vector<parallel::GradBucket>& buckets,
                                std::size_t upto) {
  if (posted_.size() <= static_cast<std::size_t>(chunk)) posted_.resize(static_cast<std::size_t>(chunk) + 1);
  Posted& done = posted_[static_cast<std::size_t>(chunk)];
  if (done.end < 0) {
    std::int64_t total = 0;
    for (const parallel::GradBucket& k : buckets) total += k.params;
    if (total != static_cast<std::int64_t>(g.count))
      throw Error(fmt::format("rank {}: chunk {}'s gradient buckets hold {} elements, its gradients {}: the plan and the "
                              "backend disagree", comm_.rank(), chunk, total, g.count));
    done.end = total;
  }
  const auto kind = sharded_ ? parallel::Collective::reduce_scatter : parallel::Collective::all_reduce;
  for (; done.buckets < upto; ++done.buckets) {
    const parallel::GradBucket& k = buckets[done.buckets];
    post_real(chunk, g, done.end - k.params, k.params, kind);
    done.end -= k.params;
  }
}

void GradientSync::progress() {
  for (Gathering& g : gathers_) {
    if (g.b.req == MPI_REQUEST_NULL) continue;
    int done = 0;
    PIPEBENCH_MPI_CHECK(MPI_Test(&g.b.req, &done, MPI_STATUS_IGNORE));
    if (done && g.b.end_at < 0.0) g.b.end_at = clock_.now() - t0_;
  }
  for (Bucket& b : buckets_) {
    if (b.req == MPI_REQUEST_NULL) continue;
    int done = 0;
    PIPEBENCH_MPI_CHECK(MPI_Test(&b.req, &done, MPI_STATUS_IGNORE));
    if (done && !modelled_ && b.end_at < 0.0) b.end_at = clock_.now() - t0_;
  }
}

void GradientSync::record(double wait_at) {
  double running = wait_at;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    // A piece continues the record before it when that is the same action's.
    const bool joins = b.piece && i > 0 && buckets_[i - 1].piece && buckets_[i - 1].chunk == b.chunk &&
                       buckets_[i - 1].kind == b.kind && !records_.empty();
    if (!joins) {
      BucketRecord& r = records_.emplace_back();
      r.rank = comm_.run_rank();
      r.chunk = b.chunk;
      r.kind = static_cast<std::int32_t>(b.kind);
      r.launch_s = b.launch_at;
      r.end_s = b.end_at;
    }
    BucketRecord& r = records_.back();
    r.bytes += b.logical_bytes;
    r.end_s = std::max(r.end_s, b.end_at);
    const double exposed = std::max(0.0, b.end_at - running);
    r.exposed_s += exposed;
    running = std::max(running, b.end_at);
  }
}

void GradientSync::post_gathers(const std::vector<ForwardGather>& gathers,
                                const std::vector<std::vector<parallel::GradBucket>>& buckets) {
  if (!gathers.empty()) first_launch_ = 0.0;
  parallel::LinkChain chain;
  for (const ForwardGather& fg : gathers) {
    const auto& chunk = buckets.at(static_cast<std::size_t>(fg.chunk));
    const parallel::GradBucket& k = chunk.at(static_cast<std::size_t>(fg.bucket));
    Gathering& g = gathers_.emplace_back();
    g.g = fg;
    g.b.kind = parallel::Collective::all_gather;
    g.b.chunk = fg.chunk;
    g.b.launch_at = 0.0;
    if (modelled_) {
      g.b.logical_bytes = fg.bytes;
      g.b.end_at = chain.add(0.0, link_time(g.b.kind, g.b.logical_bytes));
      continue;
    }
    // The bucket's elements: the chunk's layers in backward order from the end of its region.
    const FlatRegion p = backend_.parameters(fg.chunk);
    std::int64_t end = static_cast<std::int64_t>(p.count);
    for (int j = 0; j < fg.bucket; ++j) end -= chunk[static_cast<std::size_t>(j)].params;
    const std::int64_t off = end - k.params;
    g.b.logical_bytes = static_cast<std::uint64_t>(k.params) * sizeof(float);
    g.b.launch_at = clock_.now() - t0_;
    g.b.data = p.data + off;
    g.b.offset = off;
    post_all_gather(fg.chunk, g.b, k.params);
  }
  gathers_end_ = chain.end();
}

double GradientSync::wait_gathers(int chunk, int piece) {
  double blocked = 0.0;
  for (Gathering& g : gathers_) {
    if (g.done || g.g.chunk != chunk || g.g.first_piece > piece) continue;
    const double at = clock_.now();
    if (g.b.req != MPI_REQUEST_NULL) comm_.wait(g.b.req, "the parameter all-gather of the data-parallel group");
    g.waited = clock_.now() - at;
    if (g.b.end_at < 0.0) g.b.end_at = clock_.now() - t0_;
    g.done = true;
    blocked += g.waited;
  }
  progress();
  return blocked;
}

std::vector<Gate> GradientSync::gates(int chunk) const {
  std::vector<Gate> out;
  for (const Gathering& g : gathers_)
    if (g.g.chunk == chunk) out.push_back({g.g.at, t0_ + g.b.end_at});
  return out;
}

void GradientSync::gated(int chunk, const std::vector<double>& waits) {
  std::size_t i = 0;
  for (Gathering& g : gathers_)
    if (g.g.chunk == chunk) {
      g.waited = i < waits.size() ? waits[i] : 0.0;
      g.done = true;
      ++i;
    }
}

void GradientSync::take_records(int step, std::vector<BucketRecord>& out) {
  // The gathers first: they were launched first.
  std::vector<BucketRecord> gathered;
  for (const Gathering& g : gathers_) {
    BucketRecord& r = gathered.emplace_back();
    r.rank = comm_.run_rank();
    r.chunk = g.b.chunk;
    r.kind = static_cast<std::int32_t>(g.b.kind);
    r.launch_s = g.b.launch_at;
    r.end_s = g.b.end_at;
    r.bytes = g.b.logical_bytes;
    r.exposed_s = g.waited;
  }
  gathers_.clear();
  records_.insert(records_.begin(), gathered.begin(), gathered.end());
  for (std::size_t i = 0; i < records_.size(); ++i) {
    records_[i].step = step;
    records_[i].index = static_cast<std::int32_t>(i);
    out.push_back(records_[i]);
  }
  records_.clear();
}

void GradientSync::abandon() {
  if (device_) {
    device_->abandon();  // NCCL: the communicator aborted, its kernels end; nothing more writes the gradients
    buckets_.clear();
    return;
  }
  bool pending = false;
  auto test = [&](MPI_Request& req) {
    if (req == MPI_REQUEST_NULL) return;
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);  // not checked: the run has failed already
    pending = pending || !done;
  };
  for (Bucket& b : buckets_) test(b.req);
  for (Gathering& g : gathers_) test(g.b.req);
  if (!pending) return;
  new std::deque<Bucket>(std::move(buckets_));  // deliberately never destroyed; the elements do not move
  new std::deque<Gathering>(std::move(gathers_));
  buckets_.clear();
  gathers_.clear();
  if (!modelled_) backend_.abandon_gradients();
}

double GradientSync::wait_all(const char* what) {
  const double start = clock_.now();
  parallel::LinkChain chain;  // modelled: the buckets one after another on the link, into the step
  chain.add(gathers_end_, 0.0);  // after the step's gathers
  const int q = comm_.grad_rank();
  if (device_ && !buckets_.empty()) {
    comm_.wait_for([&] { return device_->done(); }, what);
    for (Bucket& b : buckets_) b.end_at = clock_.now() - t0_;  // one event after them all
  }
  for (Bucket& b : buckets_) {
    if (b.req != MPI_REQUEST_NULL) comm_.wait(b.req, what);
    if (modelled_) {
      b.end_at = chain.add(b.launch_at, link_time(b.kind, b.logical_bytes));
      continue;
    }
    if (b.end_at < 0.0) b.end_at = clock_.now() - t0_;
    const auto qi = static_cast<std::size_t>(q);
    if (b.kind != parallel::Collective::reduce_scatter || b.counts[qi] == 0) continue;
    // This replica's sum, at the bucket's start: to its place in the
    // gradients, or in the backend's shard of them (zero2, fsdp).
    const FlatRegion shard = backend_.gradient_shard(b.chunk);
    const auto bytes = static_cast<std::size_t>(b.counts[qi]) * sizeof(float);
    if (shard.data) std::memcpy(shard.data + (b.offset + b.displs[qi] - owned_begin(b.chunk)), b.data, bytes);
    else if (b.displs[qi] > 0) std::memmove(b.data + b.displs[qi], b.data, bytes);
  }
  if (modelled_ && !buckets_.empty()) clock_.sleep_until(t0_ + chain.end());
  record(start - t0_);
  buckets_.clear();
  return clock_.now() - start;
}

double GradientSync::complete() {
  const double blocked = wait_all(sharded_ ? "the gradient reduce-scatter of the data-parallel group"
                                           : "the gradient all-reduce of the data-parallel group");
  last_end_ = clock_.now() - t0_;
  if (bytes_ == 0 && !from_start_) first_launch_ = last_end_;
  return blocked;
}

double GradientSync::gather_parameters(int chunks) {
  for (int c = 0; c < chunks; ++c) {
    const FlatRegion p = backend_.parameters(c);
    if (modelled_) {
      post_modelled(c, p.logical_bytes, parallel::Collective::all_gather);
      continue;
    }
    const auto per_bucket = static_cast<std::int64_t>(parallel::kGradBucketBytes / sizeof(float));
    const auto count = static_cast<std::int64_t>(p.count);
    for (std::int64_t off = 0; off < count; off += per_bucket) {
      Bucket& b = buckets_.emplace_back();
      const std::int64_t n = std::min(per_bucket, count - off);
      b.kind = parallel::Collective::all_gather;
      b.chunk = c;
      b.piece = true;
      b.launch_at = clock_.now() - t0_;
      b.data = p.data + off;
      b.offset = off;
      post_all_gather(c, b, n);
    }
  }
  const double took = wait_all("the parameter all-gather of the data-parallel group");
  if (!modelled_) backend_.parameters_gathered();
  return took;
}

}  // namespace pipebench
