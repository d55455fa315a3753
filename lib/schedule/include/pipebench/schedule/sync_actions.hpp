// Data parallelism's actions beside a schedule's compute (docs/schedules.md,
// "Gradient synchronisation"): with d > 1 replicas every rank, besides its F,
// B and W actions, runs one reduce-grad action per model chunk — the chunk's
// gradients summed over the replicas (all-reduce, or ZeRO-1's
// reduce-scatter) — and then the optimizer step. PyTorch pipelining calls the
// first REDUCE_GRAD; Megatron-LM launches it from overlap_grad_reduce.
//
// A reduce-grad action is launched when a compute action of its rank ends:
//   after_flush  every chunk's after the rank's last action, chunks in order;
//   after_chunk  chunk c's after c's last gradient action (B, or W when the
//                schedule splits its backward), in the order the rank
//                finishes its chunks;
//   overlap      as after_chunk, but bucket by bucket inside that action
//                (`inside`): each bucket (parallel/grad_buckets.hpp) when the
//                action has produced its layers' gradients, the last at the
//                action's end.
// It runs beside the compute (the link, not the rank, is busy), one after
// another on the rank's link. The optimizer step (O) starts when the rank's
// last action and every one of its reduce-grad actions have ended.
//
// The executor launches what make_sync_schedule says, the planner times the
// same launches (sync_launch_times), and check_sync_schedule is the
// validator's rule for them: one source for all three.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

// R(chunk), ReduceGrad: schedule.hpp.

struct SyncSchedule {
  bool overlap = false;  // after_chunk or overlap: each R after its chunk's last gradient action
  bool inside = false;   // overlap: its buckets launched inside that action
  std::vector<std::vector<ReduceGrad>> reduce;  // [rank], in launch order
};

// The reduce-grad actions of `s` (a training schedule) for grad_sync
// after_flush (overlap = false), after_chunk (overlap) or overlap (overlap and
// inside); a compute_comms file's own (s.file_reduce_grad, its REDUCE_GRAD
// cells) where it has them — with `inside`, bucketed inside the actions they
// follow when each follows its chunk's last gradient action, else after them.
SyncSchedule make_sync_schedule(const Schedule& s, bool overlap, bool inside = false);

// Every violation, one line each (empty: valid): per rank exactly one R per
// chunk, launched after an existing action that is at or after the chunk's
// last gradient action (its gradients are final there), in launch order;
// after_flush launches every R after the rank's last action.
std::vector<std::string> check_sync_schedule(const Schedule& s, const SyncSchedule& sync);
// Throws ScheduleError listing them.
void validate_sync_schedule(const Schedule& s, const SyncSchedule& sync);

// Per rank, each R in launch order: its chunk and the span of the compute
// action it follows (or, `inside`, is launched within) in `sim`'s timeline
// (simulate(..., keep_timeline = true) of `s`).
struct SyncLaunch {
  int chunk = 0;
  double action_start = 0.0, action_end = 0.0;
};
std::vector<std::vector<SyncLaunch>> sync_launch_times(const Schedule& s, const SimResult& sim, const SyncSchedule& sync);

// "R1 after 1B3, R0 after B7, then O" for one rank ("R0 inside B7" with `inside`).
std::string sync_actions_text(const Schedule& s, const SyncSchedule& sync, int rank);

}  // namespace pipebench
