// `pipebench plan JOB.toml [--run NAME]... [--set k=v]... [--format text|json]`
// Needs no MPI and no devices.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"

namespace pipebench::cli {

namespace {
struct PlanOptions {
  std::string job_path;
  std::vector<std::string> runs;
  std::vector<std::string> overrides;
  std::string format = "text";
};
}  // namespace

Handler add_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Show how a workload would run: partition, memory per stage, bubbles, schedule timeline (no MPI needed)");
  cmd->add_option("job", opts->job_path, "workload file (jobs/*.toml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--run", opts->runs, "only this run (repeatable; default: all runs)");
  cmd->add_option("--set", opts->overrides, "override a key before validation: dotted.key=value, run.NAME.key=value (repeatable)");
  cmd->add_option("--format", opts->format, "output format")->check(CLI::IsMember({"text", "json"}));
  return [opts] {
    const Job job = load_job(opts->job_path, opts->overrides);
    const JobPlan plan = plan_job(job, opts->runs);
    const std::string out = opts->format == "json" ? format_plan_json(plan) : format_plan_text(plan);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kOk;
  };
}

}  // namespace pipebench::cli
