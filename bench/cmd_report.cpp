// `pipebench report RESULTS... -o DIR [--history DIR]... [--threshold 0.05]
//  [--alpha 0.01] [--min-history 3] [--noise-k 3] [--fail-on-regression]`: no MPI needed.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/report/trace.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/runtime/provenance.hpp"

namespace pipebench::cli {

namespace {
struct ReportCmdOptions {
  ReportOptions report;
  std::string out_dir;
  bool fail_on_regression = false;
  bool fail_on_failure = false;
  bool no_index = false;
};
}  // namespace

// Through write_output_file, as the traces beside them: a file that cannot
// be written is an OutputError (exit 2, docs/cli.md) and leaves no partial file.
void write_text_output(const std::filesystem::path& path, const std::string& text, const std::vector<std::string>& inputs) {
  write_output_file(path.string(), inputs, [&](std::FILE* out) {
    if (std::fwrite(text.data(), 1, text.size(), out) != text.size()) throw std::runtime_error(std::strerror(errno));
  });
}

bool make_output_folder(const char* command, const std::string& dir) {
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (!made && std::filesystem::is_directory(dir)) return true;
  fmt::print(stderr, "pipebench: {}: cannot create the output folder {}: {}\n", command, printable(dir),
             made ? made.message() : "not a folder");
  return false;
}

void write_report(const ReportData& data, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  // Every file read, and every path given: none is written over.
  std::vector<std::string> inputs = data.options.inputs;
  inputs.insert(inputs.end(), data.options.history.begin(), data.options.history.end());
  for (const auto& f : data.files) inputs.push_back(f.path);
  for (const auto& s : data.skipped) inputs.push_back(s.path);
  write_text_output(dir / "index.html", render_html(data), inputs);
  write_text_output(dir / "report.md", render_markdown(data), inputs);
  write_text_output(dir / "summary.json", render_summary_json(data), inputs);
  for (std::size_t i = 0; i < data.files.size(); ++i)
    if (const std::string name = report_trace_name(data, i); !name.empty()) {
      const FileView& f = data.files[i];
      // The file again, for its events: a launch may have replaced it since
      // it was read; then there is no trace of it (and the report says so).
      const std::string now = current_path(f);
      try {
        if (now.empty()) throw ResultsError("replaced since it was read (a launch checkpointed it)");
        write_output_file((dir / name).string(), inputs, [&](std::FILE* out) {
          write_trace_json(now, f.result, f.job ? &*f.job : nullptr, TraceOptions{}, out);
        });
      } catch (const ResultsError& e) {
        fmt::print(stderr, "pipebench report: no {} for {}: {}\n", name, f.path, e.what());
      }
    }
}

namespace {
// Why --fail-on-regression fails, one clause per series: "nightly / pipe:
// regression +20.2%; nightly / pipe: memory grew (rank 1 peak +4096 B)".
std::string regression_causes(const ReportData& data) {
  std::string out;
  auto add = [&](const Trend& t, const std::string& what) {
    out += fmt::format("{}{} / {}: {}", out.empty() ? "" : "; ", t.job, t.run, what);
  };
  for (const auto& t : data.trends) {
    if (!t.latest || t.history_only) continue;
    if (t.verdict == "regression") add(t, fmt::format("regression {:+.1f}% median step time", 100 * t.change));
    for (const auto& alert : t.alerts)
      if ((t.memory_increased && alert.starts_with("memory change")) || alert.starts_with("numerics changed")) add(t, alert);
  }
  for (const auto& c : data.reference_checks)
    if (c.verdict == "outside")
      out += fmt::format("{}{} / {}: {} outside its reference on system {}: {}", out.empty() ? "" : "; ", c.job, c.run,
                         c.figure, c.system, c.evidence);
  return out;
}
}  // namespace

Handler add_report_command(CLI::App& app) {
  auto opts = std::make_shared<ReportCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Turn results files into index.html, report.md and summary.json, with trends and regression flags");
  cmd->add_option("results", opts->report.inputs, "results files or folders (searched recursively)")->required();
  cmd->add_option("-o,--output", opts->out_dir, "folder for index.html, report.md, summary.json")->required();
  cmd->add_option("--history", opts->report.history, "more results files or folders, for trends only (repeatable)");
  RegressionRule& rule = opts->report.rule;
  cmd->add_option("--threshold", rule.threshold, "relative median step-time change that counts (default 0.05)")
      ->check(number_in(0.0, 10.0));
  cmd->add_option("--alpha", rule.alpha, "Mann-Whitney p-value below which a change is significant (default 0.01; 0 would never flag one)")
      ->check(number_in(0.0, 1.0, true));
  cmd->add_option("--min-history", rule.min_history, "earlier files a series needs before any verdict (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--noise-k", rule.noise_k,
                  "a change must exceed K x the night-to-night spread of the history's medians (default 3)")
      ->check(number_in(0.0, 100.0));
  cmd->add_flag("--fail-on-regression", opts->fail_on_regression, "exit 6 when any run regressed (nightly jobs)");
  cmd->add_flag("--fail-on-failure", opts->fail_on_failure,
                "exit 5 when any run of a job failed or an --expect job has no results (checked before regressions)");
  cmd->add_option("--expect", opts->report.expected_jobs,
                  "a job name that must have a results file among the inputs; listed as missing otherwise (repeatable)");
  add_index_options(cmd, opts->report.index_path, opts->no_index, ".pipebench-index.sqlite in the first --history folder",
                    "unchanged history files are not read again");
  cmd->add_option("--references", opts->report.references_path,
                  "references.toml: judge every run against its system's expected figures (docs/reproduce.md); a "
                  "figure outside counts for --fail-on-regression")
      ->check(CLI::ExistingFile);
  return [opts]() -> int {
    // User errors (docs/cli.md, exit 2): an input that does not exist, an
    // output folder that cannot be made. With --expect (a nightly report) a
    // missing input is a job that wrote nothing (cancelled, failed before
    // its first checkpoint): listed as skipped, its job as missing results.
    if (opts->report.expected_jobs.empty())
      for (const auto& in : opts->report.inputs)
        if (!std::filesystem::exists(in)) {
          fmt::print(stderr, "pipebench: report: no such file or folder: {}\n", printable(in));
          return kUsageError;
        }
    if (!references_file_ok(opts->report.references_path)) return kInvalidWorkload;
    if (!make_output_folder("report", opts->out_dir)) return kUsageError;
    opts->report.index_writer = build_git_sha();
    opts->report.use_index = !opts->no_index;
    const ReportData data = load_report(opts->report);
    for (const auto& n : data.index_notes) fmt::print(stderr, "pipebench report: {}\n", n);
    for (const auto& s : data.skipped) fmt::print(stderr, "pipebench report: skipped {}: {}\n", s.path, s.reason);
    for (const auto& m : data.missing_jobs) fmt::print(stderr, "pipebench report: missing results of job {}\n", m);
    if (data.files.empty() && data.missing_jobs.empty()) throw Error("no readable results files among the inputs");
    const std::filesystem::path dir(opts->out_dir);
    write_report(data, dir);
    std::size_t runs = 0;
    for (const auto& f : data.files) runs += f.runs.size();
    fmt::print("report: {} file(s), {} run(s), {} skipped\n", data.files.size(), runs, data.skipped.size());
    for (const auto& t : data.trends) {
      if (!t.latest) continue;
      if (t.verdict == "regression" || t.verdict == "improvement")
        fmt::print("  {}: {} / {} median step time {:+.1f}% (p = {:.3g})\n", t.verdict, t.job, t.run, 100 * t.change, t.p_value);
      for (const auto& alert : t.alerts)  // memory and numerics (Trend::alerts holds no other)
        fmt::print("  {}: {} / {} {}\n", t.memory_increased || t.numerics_changed ? "alert" : "note", t.job, t.run, alert);
    }
    for (const auto& c : data.reference_checks)
      if (c.verdict == "outside" || c.verdict == "within")
        fmt::print("  reference: {} / {} {} {} on system {}: {}\n", c.job, c.run, c.figure, c.verdict, c.system, c.evidence);
    fmt::print("report: {}\n", (dir / "index.html").string());
    if (opts->fail_on_failure && data.any_failure()) {
      fmt::print(stderr, "pipebench report: a run failed or an expected job has no results (--fail-on-failure)\n");
      return kRunFailed;
    }
    if (opts->fail_on_regression && data.any_regression()) {
      fmt::print(stderr, "pipebench report: exit 6 (--fail-on-regression): {}\n", regression_causes(data));
      return kRegression;
    }
    return kOk;
  };
}

}  // namespace pipebench::cli
