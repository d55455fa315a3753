// The micro-batch probe (SPEC §9, seed 000, docs/probe.md): find the largest
// micro_batch_size one run can execute by bisection over short trial runs,
// each a separate process, and recommend ~80% of it.
//
// A trial is OOM only if its output carries an out-of-memory signature; a
// non-zero exit without one is an error (a typo is not a memory limit); a
// NaN/Inf loss is a numerical failure (it ran, so memory fitted); a trial
// past --trial-timeout is killed. The search checks `lo` first, bisects while
// lo + 1 < hi, and stops on convergence, a timeout, an error, or two
// consecutive failures that mix OOM and non-OOM. When every trial fitted,
// `hi` itself is tried.
#pragma once

#include <functional>
#include <string>

#include "pipebench/results/probe_records.hpp"

namespace pipebench {

// Classifies a finished trial from its exit status and output.
TrialOutcome classify_trial(int exit_code, bool timed_out, const std::string& output);

// The command line of one trial (shell syntax; arguments quoted).
std::string trial_command(const ProbeOptions& o, int micro_batch_size);

// Runs the search; `on_trial` (optional) sees each trial as it finishes.
ProbeResult run_probe(const ProbeOptions& options, const std::function<void(const ProbeTrial&)>& on_trial = {});

// Runs `command` with /bin/sh in its own process group, kills the group
// after `timeout_s`; returns the exit code (128 + signal when killed) and
// the combined output.
struct ProcessResult {
  int exit_code = 0;
  bool timed_out = false;
  double seconds = 0.0;
  std::string output;
};
ProcessResult run_process(const std::string& command, double timeout_s);

}  // namespace pipebench
