// Subcommands of the `pipebench` executable. Each registers its options on
// the CLI11 app and returns the handler to run when it was selected.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace pipebench::cli {

// Exit codes (docs/cli.md). Library errors map to these in main.cpp.
enum ExitCode : int {
  kOk = 0,
  kInternalError = 1,    // a bug or an unexpected failure
  kUsageError = 2,       // bad command line
  kInvalidWorkload = 3,  // the workload file or an override is invalid
  kInvalidSchedule = 4,  // a schedule failed validation
  kRunFailed = 5,        // a run failed (OOM, NaN, timeout, error); results were written
  kRegression = 6,       // report --fail-on-regression: a run regressed
  kDeviceUnavailable = 7,  // run --backend cuda: no usable GPU (none, driver too old, built without CUDA, shared with NCCL)
};

using Handler = std::function<int()>;

Handler add_plan_command(CLI::App& app);
// `command_line` is recorded in the results.
Handler add_run_command(CLI::App& app, const std::string& command_line);
Handler add_report_command(CLI::App& app);
Handler add_probe_command(CLI::App& app);

}  // namespace pipebench::cli
