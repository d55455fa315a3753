// Plan: everything pipebench can say about a run without devices (SPEC §5
// `pipebench plan`): partition, per-stage memory estimate, schedule, analytic
// bubble, unit-cost and cost-weighted simulations. The runner builds the same
// RunPlan before it executes, so the plan is the single source of truth for
// what each rank builds and runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/model/time_model.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/context_exchange.hpp"
#include "pipebench/parallel/grad_buckets.hpp"
#include "pipebench/plan/partition.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/send_slots.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/sync_actions.hpp"

namespace pipebench {

// Fraction of memory capacity above which a stage is flagged (seed 000:
// peaks must not approach the capacity).
inline constexpr double kMemoryWarnFraction = 0.90;

// Data parallelism (docs/parallel.md): one rank's gradient all-reduce over
// its replicas, as plan_grad_sync models it. Times are into the step, on the
// cost-weighted simulation's clock.
// Sharded (zero1, zero2, fsdp): the gradients are reduce-scattered
// ((d−1)/d · bytes each bucket) and the parameters all-gathered: after the
// optimizer (gather_s, exposed whole, outside step_s as the optimizer is),
// or inside the next step's first forwards (`gathers`, gather_wait_s).
struct GradSyncPlan {
  // One reduce-grad action (RunPlan::sync) as planned: its chunk, launch,
  // bytes, its buckets' ring time alone, and its end on the rank's link.
  struct Reduce {
    int chunk = 0;
    double launch_s = 0.0;  // its first bucket's
    std::int64_t bytes = 0;
    double ring_s = 0.0;
    double end_s = 0.0;
    // grad_sync = "overlap": each bucket's launch and ring time alone, in order.
    std::vector<double> bucket_launch_s, bucket_ring_s;
  };
  std::vector<Reduce> reduce;  // in launch order
  // grad_sync = "overlap": each chunk's buckets in launch order (the runtime
  // launches these); empty otherwise.
  std::vector<std::vector<parallel::GradBucket>> buckets;
  // The parameter all-gathers inside the step's first forwards
  // (gathers_in_first_forward), in launch order: the chunks in the order of
  // their first forward, each chunk's buckets in gather order
  // (parallel::param_gathers), all launched at the step's start one after
  // another on the link, before the reductions; empty otherwise.
  struct Gather {
    int chunk = 0;
    parallel::ParamGather bucket;  // which of the chunk's buckets, and where its forward waits for it
    std::uint64_t bytes = 0;       // the parameters it gathers
    double ring_s = 0.0, end_s = 0.0;
  };
  std::vector<Gather> gathers;
  double gather_ring_s = 0.0;  // their ring time alone
  double gather_wait_s = 0.0;  // what the rank's first forwards waited for them
  std::int64_t bytes = 0;  // the rank's gradients, reduced every step
  double launch_s = 0.0;   // the first bucket's launch (with gathers in the forward: the step's start)
  double end_s = 0.0;      // the last bucket's end
  double gather_s = 0.0;   // the parameter all-gather after the optimizer (sharded, no gathers in the forward; else 0)
  double exposed_s = 0.0;  // of the reduction, past the rank's last action (after_flush: all of it)
  bool inter_node = false; // its data group spans nodes: the inter-node link (device.ranks_per_node)
  // As the runtime records them (grad_sync_s, grad_sync_exposed_s).
  double sync_s() const { return end_s - launch_s + gather_s; }
  double recorded_exposed_s() const { return exposed_s + gather_s + gather_wait_s; }
  // Of the synchronisation's ring time alone, what was hidden behind the
  // rank's compute and the pipeline's waits: the reductions' before its last
  // action ended, and the parameter gathers' inside the forwards that no
  // forward waited for.
  double hidden_s() const {
    double ring = 0.0;
    for (const Reduce& r : reduce) ring += r.ring_s;
    return std::max(0.0, ring - exposed_s) + std::max(0.0, gather_ring_s - gather_wait_s);
  }
};

// One rank's share of a run: its model chunks (one for most schedules; v for
// interleaved 1F1B, 2 for ZB-V) and their memory.
struct StagePlan {
  int stage = 0;                            // the rank
  std::vector<StageRange> chunks;           // chunk c = virtual stage schedule.virtual_stage(rank, c)
  Cost cost;                                // all chunks, per micro-batch of this run
  std::int64_t params_bytes = 0;
  std::int64_t grads_bytes = 0;             // 0 for inference
  std::int64_t optimizer_bytes = 0;         // 0 for inference
  std::int64_t activation_bytes_per_microbatch = 0;  // one micro-batch through every chunk
  int peak_live_activations = 0;            // from the schedule (micro-batch x chunk pairs)
  // Training: the most activation bytes held at once, from the schedule's
  // order and each chunk's bytes per micro-batch. Inference: one
  // micro-batch's bytes (an upper bound of the forward working set).
  std::int64_t activations_peak_bytes = 0;
  std::int64_t comm_bytes = 0;              // boundary buffers (ModelDesc::comm_bytes, send_slots.hpp)
  std::int64_t workspace_bytes = 0;         // ModelDesc::workspace_bytes of the backend (sim: 0)
  std::int64_t total_bytes = 0;             // params + grads + optimizer + activations + comm + workspace
  double capacity_fraction = 0.0;           // total / memory_capacity
  GradSyncPlan grad_sync;                   // zeros without replicas or for inference
  double optimizer_s = 0.0;                 // optimizer_seconds of the state it steps (0 for inference)
};

// One split rule applied to a run, for comparison (`pipebench plan` prints
// them side by side): the layers per virtual stage and its slowest piece.
struct PartitionAlternative {
  std::string rule;                 // partition key value: remainder-first, remainder-last, balanced-cost, balanced-params
  std::vector<int> layers_per_stage;
  double slowest_flops = 0.0;       // the largest forward+backward FLOPs of a piece, per micro-batch
  std::int64_t largest_params = 0;  // the largest parameter count of a piece
  bool chosen = false;              // the run's own rule (false for all with an explicit split)
};

// The four rules on `run` (pieces = run.model_stages()).
std::vector<PartitionAlternative> partition_alternatives(const ModelDesc& model, const RunSpec& run);

struct RunPlan {
  RunSpec run;
  DType storage_dtype = DType::fp32;   // the dtype memory is counted in
  Partition partition;                 // one range per virtual stage, model order
  std::vector<PartitionAlternative> partition_alternatives;
  std::vector<Cost> stage_costs;       // per virtual stage, per micro-batch
  std::uint64_t grad_bucket_bytes = 0;  // grad_sync = "overlap": the bucket size used (0 otherwise)
  Schedule schedule;
  // With replicas (training): each rank's reduce-grad actions beside the
  // schedule (schedule/sync_actions.hpp), validated; the executor launches
  // them. Empty otherwise.
  SyncSchedule sync;
  std::vector<StagePlan> stages;
  double bubble_analytic = 0.0;        // the schedule's closed form (analytic_bubble), NaN if none
  SimResult unit;                      // unit costs: steps and slots
  SimCosts costs;                      // seconds, from model FLOPs and [device] speeds
  SimResult simulated;                 // with `costs`
  // The step without the optimizer: simulated.makespan, or with replicas the
  // latest of every rank's last action and its gradient all-reduce.
  double step_s = 0.0;
  // The whole step as the runner measures it (the latest rank's end): step_s,
  // then — every rank waits for the global gradient norm (clipping) — the
  // longest optimizer step and ZeRO-1 all-gather of any rank. Inference: step_s.
  double iteration_s = 0.0;
  std::vector<std::string> warnings;
};

struct JobPlan {
  const Job* job = nullptr;
  std::vector<RunPlan> runs;
};

// The dtype the backend stores and computes in: fp32 on the cpu backend
// (which says so in a warning), else model.dtype.
DType storage_dtype(const Job& job);

// Model-based per-virtual-stage costs in seconds (action_seconds below), one
// transfer = latency + boundary bytes / bandwidth on the run's pipeline link
// (parallel::pipeline_link). With
// `split_backward`, B (input gradient) and W (weight gradient) are half the
// backward each (as the sim backend models them), else W = 0. With a tensor
// split (`model.split()`), each adds its collectives over the tensor group's
// link: the slowest any replica's group of the virtual stage's rank
// (`placement` says which rank holds it) rides (parallel::stage_tensor_link,
// tensor_comm_s), and a selective recomputation's attention forward is B's.
// `run` places the groups.
SimCosts model_costs(const Job& job, const RunSpec& run, const ModelDesc& model, const Partition& partition,
                     bool split_backward = false, Placement placement = Placement::looped);

// The seconds of one piece-sum's work on the sim backend's model: its F, B
// (input gradient, or the whole backward when not `split`) and W, each its
// compute plus its tensor-parallel collectives on `link`. The compute: with
// a device preset the hardware time model's terms (model/time_model.hpp;
// selective recomputation's attention forward in B), else FLOPs at
// sim_flops_per_s (B and W half the backward FLOPs each, the recomputed
// FLOPs in B). One rule for the planner (model_costs) and the sim backend.
struct ActionSeconds {
  double forward = 0.0, backward = 0.0, weight = 0.0;
  // Of each, the tensor-parallel collectives' part.
  double forward_comm = 0.0, backward_comm = 0.0, weight_comm = 0.0;
  // Of forward and backward, the context-parallel K/V exchange's exposed part
  // (parallel/context_exchange.hpp; B carries the backward's).
  double forward_context = 0.0, backward_context = 0.0;
  PieceTime terms;  // with a device preset: the compute by term (zeros without)
};
// `context`: the stage's context group (degree 1: none).
ActionSeconds action_seconds(const Job& job, const ModelDesc& model, int micro_batch, const StageRange& range,
                             const parallel::Link& link, bool split, const parallel::ContextGroup& context = {});
// The FLOP-rate rule alone, for a Cost (no preset).
ActionSeconds action_seconds(const Job& job, const Cost& cost, int tensor_parallel, const parallel::Link& link, bool split);

// One optimizer step over `params` parameters stored in `dtype`: with a
// device preset TimeModel::optimizer_s, else AdamW 12 and SGD 2 FLOPs per
// parameter at sim_flops_per_s. One rule for the planner and the sim backend.
double optimizer_seconds(const Job& job, DType dtype, std::int64_t params);

// The model FLOPs of one step of the whole run (every rank, every
// micro-batch): forward + backward, without recomputation; `hardware`: with
// it (the forward twice with recompute = "full", the attention core's
// forward again with "selective").
double step_flops(const RunPlan& plan, bool hardware = false);

// Data parallelism: every rank's gradient all-reduce (StagePlan::grad_sync)
// and the step (RunPlan::step_s), from the cost-weighted simulation: chunk
// c's gradients launch at the rank's last action's end (grad_sync =
// "after_flush") or at the end of c's last B (W with a split backward)
// ("after_chunk"), cut into kGradBucketBytes buckets; or ("overlap") in the
// buckets of parallel/grad_buckets.hpp, each launched inside that last B (W)
// at the share of the action's FLOPs done when its layers' gradients are
// final. The buckets follow one another on the sim link, each ring_time_s
// (parallel/collectives.hpp) — the sim backend's model exactly. Without
// replicas or for inference: step_s = makespan, nothing else.
void plan_grad_sync(const Job& job, RunPlan& plan);

// FSDP resharding after the forward (docs/parallel.md, "Parameter
// gathers"): what each forward and each backward (B) of the chunk at `range`
// waits for its layers' parameter all-gathers (parallel::
// prefetched_gather_wait), its compute `forward_s` / `backward_s` shared
// among its layers by their FLOPs, each layer's parameters (`param_bytes`
// each) gathered over `replicas` on `link`; and the gathers' ring time of
// one action. The planner and the sim backend time them with this one function.
struct ReshardWaits {
  double forward_s = 0.0, backward_s = 0.0, gathers_s = 0.0;
};
ReshardWaits reshard_gather_waits(const ModelDesc& model, int micro_batch, const StageRange& range, double forward_s,
                                  double backward_s, int replicas, int param_bytes, const parallel::Link& link);

// The bubble of `s` as a fraction of the step in closed form, with unit costs
// per chunk (F = B (= W) = 1/v): (p-1)/(m+p-1) for gpipe, 1f1b and
// eager-1f1b; (p-1)/(v m + p-1) for interleaved 1F1B (Narayanan et al. 2021);
// (p-1)/(3m + p-1) for ZB-H1 (Qi et al. 2024, F = B = W); (p-1)/(6m + p-1)
// for ZB-V with m >= 2p (its construction, F = B = W = 1/2 per chunk; see
// make_zb_v), and the same for DualPipeV (its construction's measured
// bubble: make_dualpipev); (p-1)/(v m + p-1) for looped BFS and (p-1)/(3 v m + p-1) for
// interleaved zero bubble (F = B = W = 1/v), both with m >= p; NaN where none
// is known (ZB-V with m < 2p, looped BFS and interleaved zero bubble with
// m < p, file schedules: the simulated bubble stands instead).
double analytic_bubble(const Schedule& s);
// The same with its formula ("(p-1)/(3m+p-1)"; "" and NaN where none).
struct ClosedForm {
  const char* formula;
  double value;
};
ClosedForm bubble_closed_form(const Schedule& s);
// The same from a schedule's name ("1f1b", "zb-v", ...), p, m and v.
ClosedForm bubble_closed_form(std::string_view schedule_name, int p, int m, int v);

// The schedule of `run`: a built-in one (make_schedule) or its file schedule;
// throws ScheduleError when a file schedule does not match the run.
Schedule run_schedule(const RunSpec& run);

// Plans one run; validates its schedule (throws ScheduleError if invalid).
RunPlan plan_run(const Job& job, const RunSpec& run);

// The memory part of plan_run for a given schedule and partition (what
// `pipebench tune` re-evaluates per micro-batch size without simulating):
// per-virtual-stage costs, one StagePlan per rank, and the capacity warnings.
// Throws ConfigError when the sizes overflow 64-bit counts.
struct StageMemory {
  std::vector<Cost> stage_costs;
  std::vector<StagePlan> stages;
  std::vector<std::string> warnings;
};
StageMemory plan_memory(const Job& job, const RunSpec& run, const Schedule& schedule, const Partition& partition);

// What plan_memory reads of a schedule beside its per-size peaks, each a pass
// over every action: a caller probing one schedule at many sizes (tune) keeps
// them.
struct ScheduleLiveness {
  std::vector<int> peak_live;  // peak_live_activations(schedule)
  bool split = false;          // schedule.split_backward()
  std::vector<RankSendSlots> send_pools;  // send_slot_pools(schedule): the comm buffers
  explicit ScheduleLiveness(const Schedule& schedule);
};
StageMemory plan_memory(const Job& job, const RunSpec& run, const Schedule& schedule, const Partition& partition,
                        const ScheduleLiveness& liveness);

// plan_run for a run whose schedule (run_schedule(run)) the caller has built,
// with its liveness: the same plan without building either again (tune plans
// each fitting layout at a size whose schedule it already probed).
RunPlan plan_run(const Job& job, const RunSpec& run, const Schedule& schedule, const ScheduleLiveness& liveness);

// Plans the selected runs (all when `run_names` is empty); throws
// ConfigError for a name that is not a run of the job.
JobPlan plan_job(const Job& job, const std::vector<std::string>& run_names = {});

}  // namespace pipebench
