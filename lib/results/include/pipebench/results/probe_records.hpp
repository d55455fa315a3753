// What `pipebench probe` records (SPEC §9, docs/probe.md): the search's
// options, every trial and the result. Plain values, so the results file
// (/probe, results.hpp) and the report can hold them without the probe
// itself (lib/probe/), which is a layer above.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipebench {

enum class TrialOutcome { ok, oom, error, nan, timeout };
std::string_view to_string(TrialOutcome o);

struct ProbeOptions {
  std::string job_path;
  std::string run_name;
  int ranks = 1;  // a trial's: pipeline_size x tensor_parallel, substituted for {ranks} in the launcher
  int lo = 1, hi = 256;
  // > 0 (`pipebench tune --confirm`): the planner's predicted limit. The
  // search tries it and the size above first and stops after those two
  // trials when they agree (fits, out of memory); otherwise it bisects on
  // the side they point to.
  int predicted = 0;
  int steps = 3;                  // counted steps per trial (no warm-up)
  double trial_timeout_s = 900.0;
  std::string launcher = "mpirun -np {ranks}";  // the trial command's prefix
  std::string pipebench = "pipebench";          // the executable the launcher starts
  std::vector<std::string> overrides;           // --set arguments passed to every trial
  std::string trial_dir;                        // where trials write their results files
};

struct ProbeTrial {
  int micro_batch_size = 0;
  TrialOutcome outcome = TrialOutcome::error;
  int exit_code = 0;
  double seconds = 0.0;
  std::vector<std::uint64_t> peak_mem_bytes;  // per rank, when the trial wrote a results file
  std::string results_path;                    // "" when none
  std::string output_tail;                     // last lines of stdout+stderr
  std::string command;
};

struct ProbeResult {
  ProbeOptions options;
  std::vector<ProbeTrial> trials;
  int max_micro_batch = 0;          // 0: even lo does not fit
  int recommended_micro_batch = 0;  // max(1, floor(0.8 * max)), 0 when max is 0
  std::string stop_reason;
};

}  // namespace pipebench
