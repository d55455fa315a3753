// `pipebench run JOB.toml [-o DIR] [--run NAME]... [--set k=v]... [--backend B]
//                  [--label L] [--dry-run]`, under mpirun / srun.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/runtime/runner.hpp"

namespace pipebench::cli {

namespace {
struct RunCmdOptions {
  std::string job_path;
  std::vector<std::string> overrides;
  std::string backend;
  int repeats = 0, warmup = -1;  // -n / -w: shorthands for --set train.repeats / train.warmup
  bool allow_idle_ranks = false;
  RunOptions run;
};
}  // namespace

Handler add_run_command(CLI::App& app, const std::string& command_line) {
  auto opts = std::make_shared<RunCmdOptions>();
  opts->run.command_line = command_line;
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a workload under mpirun/srun (one rank per stage, replica and tensor rank) and write an HDF5 results file");
  cmd->add_option("job", opts->job_path, "workload file (jobs/*.toml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", opts->run.output_dir, "results folder (default: results)");
  cmd->add_option("--run", opts->run.run_names, "only this run (repeatable; default: all runs)");
  cmd->add_option("--set", opts->overrides, "override a key before validation: dotted.key=value, run.NAME.key=value (repeatable)");
  cmd->add_option("--backend", opts->backend, "shorthand for --set device.backend=B")
      ->check(CLI::IsMember({"cpu", "sim", "cuda"}));
  cmd->add_option("-n,--repeats", opts->repeats, "counted steps per run: shorthand for --set train.repeats=N")
      ->check(CLI::Range(1, kMaxSteps));
  cmd->add_option("-w,--warmup", opts->warmup, "warm-up steps per run: shorthand for --set train.warmup=N")
      ->check(CLI::Range(0, kMaxSteps));
  cmd->add_option("--label", opts->run.label, "tag of a measurement campaign: results/<job>/<label>/...")
      ->check(label_validator());
  cmd->add_option("--system", opts->run.system,
                  "the system this machine is in references.toml (root attribute system; default $PIPEBENCH_SYSTEM)")
      ->check(system_name_validator());
  cmd->add_flag("--probe-trial", opts->run.probe_trial,
                "mark the file as a trial of `pipebench probe` (root attribute role): reports list it, never trend it");
  cmd->add_flag("--dry-run", opts->run.dry_run, "build every stage, check its layer range against the plan, print, exit");
  cmd->add_flag("--allow-idle-ranks", opts->allow_idle_ranks,
                "exit 0, not 8, when the launch has more ranks than any selected run uses (an allocation shared by "
                "jobs of different widths)");
  return [opts] {
    std::vector<std::string> overrides = opts->overrides;
    if (!opts->backend.empty()) overrides.push_back("device.backend=" + opts->backend);
    if (opts->repeats > 0) overrides.push_back(fmt::format("train.repeats={}", opts->repeats));
    if (opts->warmup >= 0) overrides.push_back(fmt::format("train.warmup={}", opts->warmup));
    const Job job = load_job(opts->job_path, overrides);
    const RunOutcome outcome = run_job(job, opts->run);
    if (outcome.any_failed) return kRunFailed;
    return outcome.ranks_idle && !opts->allow_idle_ranks ? kRanksIdle : kOk;
  };
}

}  // namespace pipebench::cli
