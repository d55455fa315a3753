// Renderings of a JobPlan for `pipebench plan` (docs/plan.md).
#pragma once

#include <string>

#include "pipebench/plan.hpp"

namespace pipebench {

// Above these sizes the text output summarises the timeline per rank
// instead of printing an unreadable step x rank grid.
inline constexpr int kGridMaxRanks = 16;
inline constexpr int kGridMaxSteps = 64;

// Human-readable report: per run the partition table, the memory estimate,
// bubbles, peak live activations and the timeline.
std::string format_plan_text(const JobPlan& plan);

// One JSON document (schema documented in docs/plan.md).
std::string format_plan_json(const JobPlan& plan);

}  // namespace pipebench
