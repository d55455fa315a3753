#include "pipebench/runtime/grad_sync.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/parallel/collectives.hpp"

namespace pipebench {

GradientSync::GradientSync(RunComm& comm, Backend& backend, RunClock& clock, const DeviceSpec& link, bool modelled)
    : comm_(comm), backend_(backend), clock_(clock), link_(link), modelled_(modelled) {}

void GradientSync::begin_step(double t0) {
  t0_ = t0;
  buckets_.clear();
  first_launch_ = last_end_ = 0.0;
  bytes_ = 0;
}

void GradientSync::launch(int chunk) {
  const GradRegion g = backend_.gradients(chunk);
  const double at = clock_.now() - t0_;
  if (buckets_.empty()) first_launch_ = at;
  bytes_ += g.logical_bytes;
  if (modelled_) {
    // Buckets as the real ones would be: parallel::kGradBucketBytes of logical bytes each.
    for (std::uint64_t off = 0; off < g.logical_bytes; off += parallel::kGradBucketBytes) {
      Bucket& b = buckets_.emplace_back();
      b.logical_bytes = std::min(parallel::kGradBucketBytes, g.logical_bytes - off);
      b.launch_at = at;
      PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &b.launch_at, 1, MPI_DOUBLE, MPI_MAX, comm_.data(), &b.req));
    }
    return;
  }
  const std::size_t per_bucket = parallel::kGradBucketBytes / sizeof(float);
  for (std::size_t off = 0; off < g.count; off += per_bucket) {
    Bucket& b = buckets_.emplace_back();
    const std::size_t n = std::min(per_bucket, g.count - off);
    b.logical_bytes = n * sizeof(float);
    PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, g.data + off, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                       comm_.data(), &b.req));
  }
}

void GradientSync::progress() {
  for (Bucket& b : buckets_) {
    if (b.req == MPI_REQUEST_NULL) continue;
    int done = 0;
    PIPEBENCH_MPI_CHECK(MPI_Test(&b.req, &done, MPI_STATUS_IGNORE));
  }
}

void GradientSync::abandon() {
  bool pending = false;
  for (Bucket& b : buckets_) {
    if (b.req == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);  // not checked: the run has failed already
    pending = pending || !done;
  }
  if (!pending) return;
  new std::deque<Bucket>(std::move(buckets_));  // deliberately never destroyed; the elements do not move
  buckets_.clear();
  if (!modelled_) backend_.abandon_gradients();
}

double GradientSync::complete() {
  const double start = clock_.now();
  parallel::LinkChain chain;  // modelled: the buckets one after another on the link, into the step
  for (Bucket& b : buckets_) {
    if (b.req != MPI_REQUEST_NULL) comm_.wait(b.req, "the gradient all-reduce of the data-parallel group");
    if (!modelled_) continue;
    chain.add(b.launch_at, link_.sim_load * parallel::ring_time_s(parallel::Collective::all_reduce, b.logical_bytes,
                                                                  comm_.replicas(), link_.sim_link_latency_us * 1e-6,
                                                                  link_.sim_link_gbps));
  }
  if (modelled_ && !buckets_.empty()) clock_.sleep_until(t0_ + chain.end());
  last_end_ = clock_.now() - t0_;
  if (buckets_.empty()) first_launch_ = last_end_;
  return clock_.now() - start;
}

}  // namespace pipebench
