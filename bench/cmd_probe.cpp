// `pipebench probe JOB.toml --run NAME [--lo 1] [--hi 256] [--steps 3]
//   [--trial-timeout S] [--launcher "mpirun -np {ranks}"] [--set k=v]... [-o DIR]`
// No MPI in this process: each trial is its own `pipebench run` launch.
#include <cmath>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <unistd.h>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/probe/probe.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/runtime/runner.hpp"

namespace pipebench::cli {

namespace {
struct ProbeCmdOptions {
  ProbeOptions probe;
  std::string output_dir = "results";
};
}  // namespace

std::string write_probe_results(const Job& job, const ProbeResult& result, const std::string& command,
                                const std::string& output_dir, const std::string& stamp) {
  JobResult jr;
  describe_job_result(jr, job, command, "probe", "probe");
  jr.status = result.max_micro_batch > 0 ? "ok" : "failed";
  jr.probe = result;
  return write_results(default_results_path(output_dir, job.name, "probe", stamp, std::to_string(getpid())), jr);
}

ProbeObserver console_probe_observer(std::FILE* out) {
  fmt::print(out, "  {:>6}  {:<8} {:>5} {:>10}  {}\n", "mbs", "outcome", "exit", "seconds", "peak memory per rank");
  std::fflush(out);
  ProbeObserver o;
  o.on_start = [out](const ProbeProgress& p) {
    fmt::print(out, "  trial {} of at most {}: micro_batch_size {} started{}\n", p.trial, p.expected, p.micro_batch_size,
               p.eta_s >= 0 ? fmt::format(" (the search: about {:.0f} s left)", p.eta_s) : "");
    std::fflush(out);
  };
  o.on_tick = [out](const ProbeProgress& p) {
    fmt::print(out, "    ... micro_batch_size {} running for {:.0f} s{}\n", p.micro_batch_size, p.elapsed_s,
               p.eta_s >= 0 ? fmt::format("; about {:.0f} s left in the search", p.eta_s) : "");
    std::fflush(out);
  };
  o.on_trial = [out](const ProbeTrial& t) {
    std::string peaks;
    for (auto b : t.peak_mem_bytes) peaks += (peaks.empty() ? "" : ", ") + format_bytes(static_cast<double>(b));
    fmt::print(out, "  {:>6}  {:<8} {:>5} {:>10.1f}  {}\n", t.micro_batch_size, to_string(t.outcome), t.exit_code, t.seconds,
               peaks.empty() ? "-" : peaks);
    if (t.outcome == TrialOutcome::error || t.outcome == TrialOutcome::timeout)
      fmt::print(out, "    output tail:\n{}\n", t.output_tail);
    std::fflush(out);
  };
  return o;
}

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "pipebench";
}

Handler add_probe_command(CLI::App& app) {
  auto opts = std::make_shared<ProbeCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "Find the largest micro_batch_size a run fits, by bisection over short trial runs (seed 000)");
  cmd->add_option("job", opts->probe.job_path, "workload file (jobs/*.toml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--run", opts->probe.run_name, "the run whose micro_batch_size is probed")->required();
  cmd->add_option("--lo", opts->probe.lo, "a micro-batch size expected to fit (default 1)")
      ->check(CLI::Range(1, kMaxMicroBatchSize));
  cmd->add_option("--hi", opts->probe.hi, "an upper bound to try (default 256)")->check(CLI::Range(1, kMaxMicroBatchSize));
  cmd->add_option("--steps", opts->probe.steps, "counted steps per trial (default 3)")->check(CLI::Range(1, kMaxSteps));
  cmd->add_option("--trial-timeout", opts->probe.trial_timeout_s, "seconds before a trial is killed (default 900)")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            double x = 0.0;
            try {
              x = std::stod(v);
            } catch (const std::exception&) {
              return "not a number";
            }
            return x > 0.0 && std::isfinite(x) ? "" : "must be a positive, finite number of seconds";
          },
          "SECONDS"));
  cmd->add_option("--launcher", opts->probe.launcher,
                  "command prefix of a trial; {ranks} becomes the run's pipeline_size x tensor_parallel (default \"mpirun -np {ranks}\"; "
                  "e.g. \"srun --mpi=pmix -n {ranks}\")");
  cmd->add_option("--set", opts->probe.overrides, "override for every trial: dotted.key=value (repeatable)");
  cmd->add_option("-o,--output", opts->output_dir, "results folder (default: results)");
  return [opts] {
    ProbeOptions& p = opts->probe;
    const Job job = load_job(p.job_path, p.overrides);
    const RunSpec* run = job.find_run(p.run_name);
    if (!run) throw ConfigError(fmt::format("{}: no run named \"{}\"", p.job_path, printable(p.run_name)));
    // The probe bisects one pipeline's micro-batch (docs/parallel.md): a
    // replica's activations do not depend on d.
    if (run->data_parallel > 1)
      throw ConfigError(fmt::format("{}: run \"{}\": data_parallel = {}: probe sizes the micro-batch of one pipeline; "
                                    "probe one replica (--set run.{}.data_parallel=1)",
                                    p.job_path, run->name, run->data_parallel, run->name));
    p.ranks = run->pipeline_size * run->tensor_parallel;  // one replica's
    p.pipebench = self_executable();
    const std::string stamp = utc_stamp();
    p.trial_dir = (std::filesystem::path(opts->output_dir) / job.name / "probe" / fmt::format("{}-{}-trials", stamp, getpid())).string();
    fmt::print("pipebench probe: job \"{}\", run \"{}\" ({} ranks), micro_batch_size in [{}, {}], {} steps per trial, "
               "trial timeout {:.0f} s\n  launcher: {}\n",
               job.name, p.run_name, p.ranks, p.lo, p.hi, p.steps, p.trial_timeout_s, p.launcher);
    const ProbeResult result = run_probe(p, console_probe_observer(stdout));
    fmt::print("\nmax_micro_batch = {}\nrecommended_micro_batch = {} (about 80% of the maximum, seed 000)\nstop: {}\n",
               result.max_micro_batch, result.recommended_micro_batch, result.stop_reason);
    // What the planner predicts at the limit, for comparison (docs/probe.md).
    if (result.max_micro_batch > 0) {
      for (int b : {result.max_micro_batch, result.max_micro_batch + 1}) {
        Job j = load_job(p.job_path, [&] {
          auto o = p.overrides;
          o.push_back(fmt::format("run.{}.micro_batch_size={}", p.run_name, b));
          return o;
        }());
        const RunPlan plan = plan_run(j, *j.find_run(p.run_name));
        double worst = 0.0;
        for (const auto& s : plan.stages) worst = std::max(worst, s.capacity_fraction);
        fmt::print("planner at micro_batch_size {}: largest stage estimate {:.1f}% of capacity\n", b, 100 * worst);
      }
    }
    const std::string path = write_probe_results(job, result, fmt::format("pipebench probe {} --run {}", p.job_path, p.run_name),
                                                 opts->output_dir, stamp);
    fmt::print("results: {}\n", path);
    return result.max_micro_batch > 0 ? kOk : kRunFailed;
  };
}

}  // namespace pipebench::cli
