// Dry-run simulator: executes a Schedule's per-rank action lists as soon as
// their dependencies (schedule.hpp) allow, with given per-action costs, and
// reports makespan, bubble, per-rank busy time, peak live activations and the
// timeline. With unit costs and no transfer cost it reproduces seed 004's
// step-indexed timelines; with costs from the model (or from measured
// per-action medians) it predicts a step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// A wait inside an action for data that a collective beside the compute
// delivers (ZeRO's parameter all-gathers, docs/parallel.md "Parameter
// gathers inside the forward"): the part of the action after fraction `at`
// of its compute cannot run before `ready` (the collective's end, in the
// simulation's unit from the step's start).
struct Gate {
  double at = 0.0;
  double ready = 0.0;
};

// When an action that may start at `start` and computes for `cost` ends,
// waiting at each of `gates` (ascending `at`) for its data. The planner's
// simulation and the sim backend time a gated action with this one function.
// `waits` (optional): what it waited at each gate.
double gated_end(double start, double cost, const std::vector<Gate>& gates, std::vector<double>* waits = nullptr);

// Durations per virtual stage (index v = chunk * num_ranks + rank), in any
// time unit (the result uses the same one); finite and >= 0 (the simulator
// tells an action that has run by its end time).
struct SimCosts {
  std::vector<double> forward;
  std::vector<double> backward;
  std::vector<double> weight;   // W actions; unused when the schedule has none
  double transfer = 0.0;        // one boundary tensor between two ranks
  // Per virtual stage, the gates of its first forward in its rank's list
  // (the step's first use of the chunk's parameters); empty: no gates. A
  // gated action's busy time stays its cost: the wait is not compute.
  std::vector<std::vector<Gate>> first_forward_gates;
  // Per virtual stage, what every forward / backward (B) of it waits inside
  // for data beside the compute (FSDP's per-layer parameter gathers); empty:
  // none. Added to the action's time, not its busy time.
  std::vector<double> forward_wait, backward_wait;

  // F = B = W = 1, transfers free: seed 004's unit-step model.
  static SimCosts unit(const Schedule& s);
};

struct TimedAction {
  int rank = 0;
  Action action;
  double start = 0.0;
  double end = 0.0;
};

struct SimResult {
  bool completed = false;            // false: the schedule deadlocks (see `blocked`)
  double makespan = 0.0;             // last end time (first start is 0)
  double bubble = 0.0;               // 1 - sum(busy) / (num_ranks * makespan)
  std::vector<double> busy;          // per rank, sum of its action durations
  std::vector<double> first_start, last_end;  // per rank (0 and 0 for a rank that ran nothing)
  std::vector<int> peak_live_activations;  // per rank (see peak_live_activations())
  std::vector<TimedAction> timeline;       // every executed action, rank-major, in order (if asked for)
  std::vector<std::string> blocked;        // when !completed: each stuck rank and what it waits for
};

// Runs `s` with `costs`. Never throws for a deadlock: it returns what could
// run and why the rest could not. Throws ScheduleError when costs do not match
// the schedule's virtual stages. Time and memory are linear in the actions;
// `keep_timeline = false` leaves `timeline` empty (32 bytes per action less:
// the planner keeps it only where a grid can show it).
SimResult simulate(const Schedule& s, const SimCosts& costs, bool keep_timeline = true);

// The same result for a schedule that check_schedule's structural checks
// (validate.hpp) have passed, faster: it neither re-checks the actions'
// ranges nor reads a rank's own dependencies (an action's F, or B for a W,
// ran earlier on the same rank, so it has ended by the time the rank is free)
// and leaves `peak_live_activations` empty (a property of the order alone:
// peak_live_activations() below). On any other schedule its result is undefined.
SimResult simulate_checked(const Schedule& s, const SimCosts& costs, bool keep_timeline = true);

// simulate_checked with two sets of costs in one walk of the actions (with
// many ranks the walk, not the arithmetic, is most of the cost): the
// planner's unit-cost and model-cost simulations. Each result is what
// simulate_checked gives for its costs, the timeline only the first's.
std::pair<SimResult, SimResult> simulate_checked(const Schedule& s, const SimCosts& first, const SimCosts& second,
                                                 bool keep_first_timeline);

// Peak number of micro-batches whose activations a rank holds at once: F
// creates them, B (or W, when the schedule has W for that micro-batch)
// releases them. A property of the order alone, not of timing. 0 for every
// rank of a schedule that does not retain activations (forward-only).
std::vector<int> peak_live_activations(const Schedule& s);

// The same peak weighted by what each virtual stage keeps per micro-batch
// (`bytes[v]` from F; with a split backward also `stash[v]`, the gradients
// W needs, from B; both released by W): per rank, the most bytes held at once.
std::vector<std::int64_t> peak_live_activation_bytes(const Schedule& s, const std::vector<std::int64_t>& bytes,
                                                     const std::vector<std::int64_t>& stash = {});

// The same with full activation recomputation (no W): F holds `full[v]` on
// top of `kept[v]` while it runs (the planner: the largest piece's
// activations, one piece a checkpoint) and then keeps only `kept[v]` (the
// pieces' inputs); B holds `full[v]` again while it recomputes and runs, then
// releases the kept bytes too. Per rank, the most bytes held at once.
std::vector<std::int64_t> peak_recompute_activation_bytes(const Schedule& s, const std::vector<std::int64_t>& kept,
                                                          const std::vector<std::int64_t>& full);

}  // namespace pipebench
