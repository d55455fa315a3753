// The data-parallel gradient synchronisation of one rank's step
// (docs/parallel.md): each chunk's gradients summed over the rank's
// data-parallel group (RunComm::data()), in buckets of at most
// kGradBucketBytes, by non-blocking MPI all-reduces waited on like every
// other wait of a run (abort notices, the step deadline: a lost replica is a
// recorded failure, never a hang). The backends scale their loss gradient by
// 1/(d·m) (StageSpec::step_microbatches), so the sum is the step's gradient.
//
// A backend that models its gradients (sim) moves no data: each bucket's
// all-reduce is then a one-number MAX reduction of the replicas' launch
// times into the step, and the bucket completes at
//   max(the group's launch, the previous bucket's end) + ring_time_s
// (parallel/collectives.hpp: LinkChain, the sim link, × sim_load) on the
// run's clock — the same instant on every replica, on the wall clock (slept)
// or the virtual one; the planner's plan_grad_sync, to the second.
//
// A backend whose gradients are in device memory with one GPU per rank
// (cuda with the nccl transport, StageSpec::gradients_in_device_memory)
// hands them to `device` instead (runtime/data_group_nccl.hpp): the same
// buckets, each an ncclAllReduce in place, completed when the group's stream
// has run them (polled like every other wait).
//
// ZeRO-1 (optimizer_sharding = "zero1", `sharded`): each bucket is
// reduce-scattered instead (MPI_Ireduce_scatter in place, each replica's sum
// moved to its shard's place; parallel/shards.hpp), the backend steps its
// shard, and gather_parameters() all-gathers the parameters
// (MPI_Iallgatherv in place), on the sim link (d−1)/d · bytes each.
//
// Deterministic: the buckets of a chunk are posted in order, the chunks in the
// order the schedule finishes them, the same on every replica of a stage;
// MPI's reduction order is fixed for a given group and size, so a run
// repeats bit for bit.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include <mpi.h>

#include "pipebench/backends/backend.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/grad_buckets.hpp"
#include "pipebench/parallel/shards.hpp"
#include "pipebench/runtime/data_group_nccl.hpp"
#include "pipebench/results/records.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

class GradientSync {
 public:
  // `modelled`: the backend holds no gradients (sim); `link` (the data
  // group's, parallel::data_group_link) then times the buckets, × the
  // device's sim_load. `sharded`: ZeRO-1 over the rank's `chunks` chunks.
  // `on_device` (not owned; null: MPI on host memory): the NCCL group the
  // buckets are reduced by; not with `modelled` or `sharded`.
  GradientSync(RunComm& comm, Backend& backend, RunClock& clock, const DeviceSpec& device, parallel::Link link,
               bool modelled, bool sharded = false, int chunks = 1, DeviceAllReduce* on_device = nullptr);

  // Per step, before the first launch: the step's start on the run's clock.
  // `gathers_from_start`: the step's synchronisation starts with it
  // (parameters gathered inside the forwards: FSDP resharding, or
  // post_gathers), not at its first reduction.
  void begin_step(double t0, bool gathers_from_start = false);
  // Posts chunk `chunk`'s buckets (once per step and chunk): kGradBucketBytes
  // pieces in order at once, or (grad_sync = "overlap") `buckets` (the plan's,
  // parallel/grad_buckets.hpp) of the action that ran from `action_start_s`
  // to `action_end_s` (into the step): the gradients from the end of the
  // chunk's flat region backwards (the layers in backward order), a modelled
  // bucket launched at action_start_s + ready × the action's time, as the
  // planner times it. A real backend's buckets not posted inside the action
  // already (launch_ready) are posted now, at its end.
  void launch(int chunk, const std::vector<parallel::GradBucket>* buckets = nullptr, double action_start_s = 0.0,
              double action_end_s = 0.0);
  // Inside the chunk's last gradient action, once `pieces` of its layers (in
  // backward order) have final gradients (Backend::set_gradient_hook): posts
  // every bucket of `buckets` that holds none but those, then lets the posted
  // collectives progress. Real backends only.
  void launch_ready(int chunk, const std::vector<parallel::GradBucket>& buckets, int pieces);
  // Lets posted collectives progress without blocking (MPI progresses a
  // non-blocking collective only inside MPI calls).
  void progress();
  // Waits for every posted bucket. Returns the seconds this rank was blocked.
  double complete();
  // Sharded, after the sharded optimizer step: every replica's parameters
  // from their shards' owners. Returns the seconds it took.
  double gather_parameters(int chunks);
  // Sharded with the gathers inside the step's first forwards
  // (GradSyncPlan::gathers, docs/parallel.md "Parameter gathers"): right
  // after begin_step, every gather in order — bucket `bucket` of chunk
  // `chunk`'s `buckets` (the plan's), the parameters from their shards'
  // owners (MPI_Iallgatherv in place) or, modelled, one after another on
  // the link from the step's start (every replica launches them there, so
  // no message is needed), before the step's reductions on the same link.
  struct ForwardGather {
    int chunk = 0, bucket = 0;
    double at = 0.0;      // where the chunk's forward waits for it (ParamGather::at)
    int first_piece = 0;  // the forward's first piece that needs it (the embedding's is 0)
    std::uint64_t bytes = 0;  // the parameters' (modelled: what the link moves)
  };
  void post_gathers(const std::vector<ForwardGather>& gathers,
                    const std::vector<std::vector<parallel::GradBucket>>& buckets);
  // Real: waits for chunk `chunk`'s gathers whose first piece is at or
  // before `piece`. Returns the seconds blocked (each gather's in its record).
  double wait_gathers(int chunk, int piece);
  // Modelled: chunk `chunk`'s gates for its first forward, `ready` on the run's clock.
  std::vector<Gate> gates(int chunk) const;
  // Modelled, after that forward: what it waited at each gate (Backend::gate_waits).
  void gated(int chunk, const std::vector<double>& waits);
  // After a failure: collectives still pending cannot be cancelled and may
  // yet write into their buffers, so those buffers are never freed: the
  // buckets (a modelled one's launch time) and the backend's gradients
  // (Backend::abandon_gradients). Over NCCL the communicator is aborted
  // instead (its kernels end).
  void abandon();

  // Of the step: from the first launch to the last bucket's end, and the
  // gradient bytes the group reduced.
  double sync_s() const { return last_end_ - first_launch_; }
  double start_s() const { return first_launch_; }
  bool modelled() const { return modelled_; }
  std::uint64_t bytes() const { return bytes_; }
  // The collectives completed since the last call (results/records.hpp
  // BucketRecord), stamped with `step`, appended to `out`.
  void take_records(int step, std::vector<BucketRecord>& out);

 private:
  struct Bucket {
    MPI_Request req = MPI_REQUEST_NULL;
    parallel::Collective kind = parallel::Collective::all_reduce;
    std::uint64_t logical_bytes = 0;
    double launch_at = 0.0;  // into the step; modelled: this rank's launch, then the group's latest
    double end_at = -1.0;    // into the step, once found complete
    int chunk = 0;
    bool piece = false;      // one of a reduce-grad action's (or gather's) kGradBucketBytes pieces: recorded as one
    float* data = nullptr;   // real: the bucket's first element
    std::int64_t offset = 0; // real: its index in the chunk's region
    std::vector<int> counts, displs;  // sharded: every replica's part of it
  };
  // The records of buckets_ (all complete), from a wait that started `wait_at` into the step.
  void record(double wait_at);
  std::vector<BucketRecord> records_;
  void split(int chunk, std::int64_t a, std::int64_t b, Bucket& out) const;
  // Where this replica's shard of chunk `chunk` starts in the chunk (zero2,
  // fsdp: element 0 of the backend's gradient_shard / parameter_shard).
  std::int64_t owned_begin(int chunk) const;
  // Real: posts `b` (elements [b.offset, +n) of chunk `chunk`'s parameters)
  // as the all-gather of every replica's part: in place, or from the
  // backend's parameter shard.
  void post_all_gather(int chunk, Bucket& b, std::int64_t n);
  double link_time(parallel::Collective c, std::uint64_t bytes) const;
  void post_modelled(int chunk, std::uint64_t logical_bytes, parallel::Collective kind);
  Bucket& post_modelled_bucket(int chunk, std::uint64_t logical_bytes, parallel::Collective kind, double at);
  // Elements [off, off + n) of chunk `chunk`'s gradients `g` as one bucket.
  Bucket& post_real(int chunk, const FlatRegion& g, std::int64_t off, std::int64_t n, parallel::Collective kind);
  // Chunk `chunk`'s buckets before index `upto` not posted yet, each as one
  // bucket from the end of `g` backwards.
  void post_buckets(int chunk, const FlatRegion& g, const std::vector<parallel::GradBucket>& buckets, std::size_t upto);
  double wait_all(const char* what);
  RunComm& comm_;
  Backend& backend_;
  DeviceAllReduce* device_ = nullptr;
  RunClock& clock_;
  double sim_load_ = 1.0;
  parallel::Link link_;
  bool modelled_, sharded_;
  std::vector<std::int64_t> chunk_base_;  // sharded, real: each chunk's first element in the rank's parameters
  std::int64_t total_ = 0;
  double t0_ = 0.0;
  // A deque: MPI holds a pointer to each modelled bucket's launch_at until
  // it completes, so the buckets must not move as more are posted.
  std::deque<Bucket> buckets_;
  // grad_sync = "overlap", real: per chunk, its buckets posted so far this
  // step and the end of the part of its region they left (from the end).
  struct Posted {
    std::size_t buckets = 0;
    std::int64_t end = -1;  // -1: none posted yet
  };
  std::vector<Posted> posted_;
  // The step's gathers inside the forwards, in posting order, and where
  // their chain on the link ends (modelled; the reductions follow it).
  struct Gathering {
    ForwardGather g;
    Bucket b;
    double waited = 0.0;
    bool done = false;
  };
  std::deque<Gathering> gathers_;
  double gathers_end_ = 0.0;
  bool from_start_ = false;
  double first_launch_ = 0.0, last_end_ = 0.0;
  std::uint64_t bytes_ = 0;
};

}  // namespace pipebench
