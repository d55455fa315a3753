// Renderings of a JobPlan for `pipebench plan` (docs/plan.md).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "pipebench/plan/plan.hpp"

namespace pipebench {

// Above these sizes the text output summarises the timeline per rank
// instead of printing an unreadable step x rank grid.
inline constexpr int kGridMaxRanks = 16;
inline constexpr int kGridMaxSteps = 64;

// Seed 000's per-stage partition record: header and one row per stage
// (stage, layer range in the run's origin, count, parameters, delta and
// ratio to the previous stage, notes). Shared by `plan` and the report.
std::vector<std::string> partition_table_header(const RunPlan& plan);
std::vector<std::vector<std::string>> partition_table_rows(const RunPlan& plan);

// "2 1x62 2": sizes with repeats folded ("NxK": N, K times), cut to
// `width` characters with a trailing "~".
std::string fold_sizes(const std::vector<int>& sizes, std::size_t width = 22);

// The runs side by side (multi-run plans end with it): per run stages,
// layer split, largest stage estimate as % of capacity, bubble closed form
// and cost-weighted simulated, peak live activations, warnings; and the
// fewest stages among the runs whose every stage fits.
std::string plan_summary_text(const JobPlan& plan);

// Human-readable report: per run the partition table, the memory estimate,
// bubbles, peak live activations and the timeline.
std::string format_plan_text(const JobPlan& plan);

// One JSON document (schema documented in docs/plan.md).
std::string format_plan_json(const JobPlan& plan);
// The same, written to `out` as it is produced (about 1 MiB at a time: the
// schedule text of 1024 ranks x 4096 micro-batches is ~50 MB), not built
// in memory first. Throws Error when a write fails.
void write_plan_json(const JobPlan& plan, std::FILE* out);

}  // namespace pipebench
