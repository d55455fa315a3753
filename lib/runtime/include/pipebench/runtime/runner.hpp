// `pipebench run`: executes a job's runs one after another in one MPI
// launch and writes one HDF5 file (SPEC §5-§7, docs/runner.md).
//
// Run rank r is stage r and world rank r: a run with pipeline_size p uses
// world ranks 0..p-1 (a sub-communicator); the others wait at a world
// barrier. A run that needs more ranks than the world has is recorded as
// skipped. Rank 0 prints the header, one line per step and a summary per
// run, gathers every rank's records and writes the file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/results/records.hpp"

namespace pipebench {

// What a `pipebench rerun` reproduces (docs/reproduce.md): root attributes
// reproduces_id, reproduces_sha256, reproduces_path and deviations (the
// --set overrides applied on top of the recorded workload).
struct Reproduction {
  std::string id;      // the original's results_id (its file name's stem when it records none)
  std::string sha256;  // of the original file's bytes
  std::string path;    // as given on the command line
  std::vector<std::string> deviations;
};

struct RunOptions {
  std::vector<std::string> run_names;  // empty: all runs
  std::string output_dir = "results";
  std::string label;                   // measurement campaign (seed 004's RUN_LABEL)
  bool dry_run = false;                // build every stage, check, print, no steps, no file
  bool probe_trial = false;            // a trial of `pipebench probe`: root attribute role = "probe-trial"
  std::string command_line;
  // The system the file is judged under against references (root attribute
  // `system`): --system, else $PIPEBENCH_SYSTEM, else "" (matched by hardware).
  std::string system;
  std::optional<Reproduction> reproduces;
};

struct RunOutcome {
  bool any_failed = false;   // some run has status failed
  bool ranks_idle = false;   // the launch has more ranks than any selected run uses (every rank knows)
  std::string results_path;  // on rank 0 when a file was written
};

// The identity of a results file of `job` (SPEC §7 root attributes: tool
// version, git sha, creation time, job name and effective TOML, command
// line, label, overrides, evidence level) and its role: "job" (a launch of
// `run`), "probe-trial" (a trial `pipebench probe` launched) or "probe" (the
// probe's summary). Reports trend only role "job". Used by `run` and `probe`.
// Also gives the file its results_id: 16 hex digits, unique per launch.
void describe_job_result(JobResult& jr, const Job& job, const std::string& command_line, const std::string& label,
                         const std::string& role);

// Collective over MPI_COMM_WORLD (MPI must be initialised). Throws
// ConfigError (same on every rank) for a workload the runner cannot execute.
RunOutcome run_job(const Job& job, const RunOptions& options);

}  // namespace pipebench
