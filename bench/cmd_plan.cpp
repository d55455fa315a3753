// `pipebench plan JOB.toml [--run NAME]... [--set k=v]... [--format text|json]
//                          [--export-schedule csv]`
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
#include "pipebench/schedule/schedule_csv.hpp"

namespace pipebench::cli {

namespace {
struct PlanOptions {
  std::string job_path;
  std::vector<std::string> runs;
  std::vector<std::string> overrides;
  std::string format = "text";
  std::string export_schedule;  // "csv": only the selected run's schedule, as CSV
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
  cmd->add_option("--export-schedule", opts->export_schedule,
                  "print only the schedule of the one selected run (--run NAME) in a form schedule = \"file:PATH\" "
                  "reads (docs/schedules.md), to start a schedule of your own from it: csv (compute only) or csv-comms "
                  "(PyTorch's compute_comms: with the sends, receives and, with replicas, REDUCE_GRAD)")
      ->check(CLI::IsMember({"csv", "csv-comms"}));
  return [opts] {
    const Job job = load_job(opts->job_path, opts->overrides);
    const JobPlan plan = plan_job(job, opts->runs);
    if (!opts->export_schedule.empty()) {
      if (plan.runs.size() != 1) {
        std::string names;
        for (const auto& r : plan.runs) names += (names.empty() ? "" : ", ") + r.run.name;
        fmt::print(stderr, "pipebench: --export-schedule writes one run's schedule; choose one with --run NAME (runs: {})\n",
                   names);
        return kUsageError;
      }
      const RunPlan& rp = plan.runs.front();
      const std::string csv = opts->export_schedule == "csv" ? schedule_to_csv(rp.schedule)
                                                             : schedule_to_comms_csv(rp.schedule, rp.sync.reduce);
      std::fwrite(csv.data(), 1, csv.size(), stdout);
      return kOk;
    }
    if (opts->format == "json") {
      write_plan_json(plan, stdout);
      return kOk;
    }
    const std::string out = format_plan_text(plan);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kOk;
  };
}

}  // namespace pipebench::cli
