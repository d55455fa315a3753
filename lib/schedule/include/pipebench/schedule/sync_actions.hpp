// Data parallelism's actions beside a schedule's compute (docs/schedules.md,
// "Gradient synchronisation"): with d > 1 replicas every rank, besides its F,
// B and W actions, runs one reduce-grad action per model chunk — the chunk's
// gradients summed over the replicas (all-reduce, or ZeRO-1's
// reduce-scatter) — and then the optimizer step. PyTorch pipelining calls the
// first REDUCE_GRAD; Megatron-LM launches it from overlap_grad_reduce.
//
// A reduce-grad action is launched when a compute action of its rank ends:
//   after_flush  every chunk's after the rank's last action, chunks in order;
//   overlap      chunk c's after c's last gradient action (B, or W when the
//                schedule splits its backward), in the order the rank
//                finishes its chunks.
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
  bool overlap = false;
  std::vector<std::vector<ReduceGrad>> reduce;  // [rank], in launch order
};

// The reduce-grad actions of `s` (a training schedule) for grad_sync
// after_flush (overlap = false) or overlap; a compute_comms file's own
// (s.file_reduce_grad, its REDUCE_GRAD cells) where it has them.
SyncSchedule make_sync_schedule(const Schedule& s, bool overlap);

// Every violation, one line each (empty: valid): per rank exactly one R per
// chunk, launched after an existing action that is at or after the chunk's
// last gradient action (its gradients are final there), in launch order;
// after_flush launches every R after the rank's last action.
std::vector<std::string> check_sync_schedule(const Schedule& s, const SyncSchedule& sync);
// Throws ScheduleError listing them.
void validate_sync_schedule(const Schedule& s, const SyncSchedule& sync);

// Per rank, (launch time, chunk) of each R in launch order: the end of the
// compute action it follows in `sim`'s timeline (simulate(..., keep_timeline
// = true) of `s`).
std::vector<std::vector<std::pair<double, int>>> sync_launch_times(const Schedule& s, const SimResult& sim,
                                                                    const SyncSchedule& sync);

// "R1 after 1B3, R0 after B7, then O" for one rank.
std::string sync_actions_text(const Schedule& s, const SyncSchedule& sync, int rank);

}  // namespace pipebench
