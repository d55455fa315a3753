// Schedule validator and the step x rank grid (SPEC §4).
//
// A valid schedule has one action list per rank and, for every virtual stage
// v and micro-batch mb: exactly one F; exactly one B when the schedule
// retains activations (training) and none otherwise; one W after its B when
// the schedule splits its backward (has any W), else none; on each rank F(v,mb) before B(v,mb) before W(v,mb); and the
// dependencies of schedule.hpp never deadlock (checked by simulating with
// unit costs, which is equivalent to the executor's non-blocking sends).
#pragma once

#include <string>
#include <vector>

#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

// Every violation found, as one line each; empty when the schedule is valid.
std::vector<std::string> check_schedule(const Schedule& s);

// Throws ScheduleError listing the violations and the step x rank grid of
// what could execute (with unit costs), for a human to read.
void validate_schedule(const Schedule& s);

// validate_schedule, returning the unit-cost simulation the deadlock check
// ran (with its timeline if `keep_timeline`, and peak_live_activations) and,
// from the same walk, the simulation with `costs` (no timeline; its
// peak_live_activations, the order's, are the unit one's): the planner needs both.
struct ValidatedSimulations {
  SimResult unit;
  SimResult costed;
};
ValidatedSimulations validate_and_simulate(const Schedule& s, const SimCosts& costs, bool keep_timeline);

// Step x rank grid of a unit-cost timeline: one row per rank, one column per
// unit step, "." where the rank idles. Actions with non-integral start times
// are placed at floor(start).
std::string render_grid(const Schedule& s, const SimResult& unit_result);

}  // namespace pipebench
