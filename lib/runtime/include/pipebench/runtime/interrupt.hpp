// What a launch does when it is told to stop: SIGTERM and SIGINT (mpirun
// passes them on when it is interrupted; Slurm sends SIGTERM at the time
// limit) and SIGUSR1 (`sbatch --signal=USR1@60`). While armed, the handler
// publishes the results checkpoint (ResultsWriter's FINAL.partial) under its
// final name, says so on stderr, and ends the process with the signal's
// default action. The checkpoint already holds every completed run and the
// run in progress as failed/interrupted (docs/runner.md, "Interrupted
// launches"). Only async-signal-safe calls run in the handler.
#pragma once

#include <string>

namespace pipebench {

// Installs the handlers for SIGTERM, SIGINT and SIGUSR1 (once per process)
// and arms them for `partial` -> `final_path`; `claim` (the writer's name
// claim, ResultsWriter::claim_path) is removed after publishing.
void publish_results_on_signal(const std::string& partial, const std::string& final_path, const std::string& claim);
// Disarms (the launch published its file itself); the handlers then only end the process.
void stop_publishing_on_signal();
// What the handler does, for the watchdog before it ends the process:
// publishes the checkpoint when armed and says so. Async-signal-safe.
void publish_results_now(const char* why) noexcept;

}  // namespace pipebench
