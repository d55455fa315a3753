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
#include <vector>

#include "pipebench/results/probe_records.hpp"

namespace pipebench {

// Classifies a finished trial from its exit status and output.
TrialOutcome classify_trial(int exit_code, bool timed_out, const std::string& output);

// `launcher` with {ranks} replaced, then `args`, each quoted for /bin/sh.
std::string launch_command(const std::string& launcher, int ranks, const std::vector<std::string>& args);

// The command line of one trial (shell syntax; arguments quoted).
std::string trial_command(const ProbeOptions& o, int micro_batch_size);

// Progress of a running search, for people watching it: a trial starting,
// and every `every_s` seconds while it runs (elapsed time, the trials so far
// and the number a bisection over the remaining bracket still needs, and an
// estimate of the time left from the mean trial time so far).
struct ProbeProgress {
  int micro_batch_size = 0;
  int trial = 0;              // 1-based number of the running trial
  int expected = 0;           // trials done + the most the search may still need
  double elapsed_s = 0.0;     // of the running trial
  double eta_s = -1.0;        // of the whole search; < 0 before the first trial ends
};
struct ProbeObserver {
  std::function<void(const ProbeTrial&)> on_trial;          // a trial finished
  std::function<void(const ProbeProgress&)> on_start;       // a trial started
  std::function<void(const ProbeProgress&)> on_tick;        // still running
  double every_s = 10.0;
};

// Runs the search; the observer (optional) sees each trial start, run and finish.
ProbeResult run_probe(const ProbeOptions& options, const ProbeObserver& observer = {});

// Runs `command` with /bin/sh in its own process group, kills the group
// after `timeout_s`; returns the exit code (128 + signal when killed) and
// the combined output. A terminating signal to this process while it waits
// (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU: a
// closed terminal, Slurm's time limit) stops the group first (SIGTERM, 5 s,
// SIGKILL), saying so with `what` ("trial", "verify launch"), then ends this
// process with that signal: nothing the command started outlives it.
struct ProcessResult {
  int exit_code = 0;
  bool timed_out = false;
  double seconds = 0.0;
  std::string output;
};
// `tick` (optional) is called with the elapsed seconds every `tick_every_s`.
ProcessResult run_process(const std::string& command, double timeout_s,
                          const std::function<void(double)>& tick = {}, double tick_every_s = 10.0,
                          const std::string& what = "trial");

}  // namespace pipebench
