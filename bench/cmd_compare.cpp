// `pipebench compare REFERENCE CANDIDATE... -o DIR [--tolerance 5%]
//  [--fail-on-difference] [--references FILE]`: the reproducibility report
// (docs/reproduce.md). No MPI needed.
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/report/compare.hpp"
#include "pipebench/runtime/provenance.hpp"

namespace pipebench::cli {

namespace {
struct CompareCmdOptions {
  CompareOptions compare;
  std::string out_dir, tolerance = "5%";
  bool fail_on_difference = false, no_index = false;
};

// "5%" or "0.05" -> 0.05. A bare number is a fraction and at most 1: "5"
// is almost always meant as 5%, and read as a fraction it would be ±500%.
// Sets `why` and returns nullopt when the text is neither form or out of range.
std::optional<double> parse_tolerance(const std::string& text, std::string& why) {
  std::string s = text;
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s.pop_back();
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || !std::isfinite(v)) {
    why = "expected a percentage in (0, 1000%] or a fraction in (0, 1] (5% or 0.05)";
    return std::nullopt;
  }
  if (!percent && v > 1) {
    why = fmt::format("a bare number is a fraction of at most 1 ({} would be ±{:g}%): write {}% for a percentage, or a fraction "
                      "such as 0.05", s, 100 * v, s);
    return std::nullopt;
  }
  if (percent) v /= 100;
  if (v <= 0 || v > 10) {
    why = "expected a percentage in (0, 1000%] or a fraction in (0, 1] (5% or 0.05)";
    return std::nullopt;
  }
  return v;
}

}  // namespace

bool references_file_ok(const std::string& path) {
  if (path.empty()) return true;
  try {
    load_references(path);
    return true;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pipebench: invalid references file: {}\n", e.what());
    return false;
  }
}

Handler add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Reproducibility report: does each CANDIDATE results file reproduce REFERENCE (environment, numerics, "
                 "performance, per-system references), with an artifact description");
  cmd->add_option("reference", o->compare.reference, "the results file (.h5) to reproduce")->required()->check(CLI::ExistingFile);
  cmd->add_option("candidates", o->compare.candidates, "results files that claim to reproduce it")->required();
  cmd->add_option("-o,--output", o->out_dir, "folder for index.html, report.md, compare.json, artifact.md")->required();
  cmd->add_option("--tolerance", o->tolerance,
                  "relative band every performance ratio's 95% interval must lie in: a percentage (5%) or a fraction of at most 1 "
                  "(0.05); default 5%");
  cmd->add_flag("--fail-on-difference", o->fail_on_difference, "exit 9 when any run is not reproduced");
  cmd->add_option("--references", o->compare.references_path, "references.toml: per-system expected figures (docs/reproduce.md)")
      ->check(CLI::ExistingFile);
  add_index_options(cmd, o->compare.index_path, o->no_index,
                    "the reference's folder's .pipebench-index.sqlite when there is one",
                    "files it knows unchanged are read without the isolated pre-read and the hash");
  return [o]() -> int {
    std::string why;
    const auto tolerance = parse_tolerance(o->tolerance, why);
    if (!tolerance) {
      fmt::print(stderr, "pipebench: compare: --tolerance {}: {}\n", printable(o->tolerance), why);
      return kUsageError;
    }
    o->compare.tolerance = *tolerance;
    if (!references_file_ok(o->compare.references_path)) return kInvalidWorkload;
    for (const auto& c : o->compare.candidates)
      if (!std::filesystem::exists(c)) {
        fmt::print(stderr, "pipebench: compare: no such file: {}\n", printable(c));
        return kUsageError;
      }
    if (!make_output_folder("compare", o->out_dir)) return kUsageError;
    o->compare.index_writer = build_git_sha();
    o->compare.use_index = !o->no_index;
    CompareData d;
    try {
      d = load_compare(o->compare);
    } catch (const ResultsError& e) {
      fmt::print(stderr, "pipebench: compare: cannot read the reference: {}\n", e.what());
      return kInternalError;
    }
    for (const auto& n : d.index_notes) fmt::print(stderr, "pipebench compare: {}\n", n);
    for (const auto& s : d.skipped) fmt::print(stderr, "pipebench compare: skipped {}: {}\n", s.path, s.reason);
    std::vector<std::string> inputs = o->compare.candidates;
    inputs.push_back(o->compare.reference);
    if (!o->compare.references_path.empty()) inputs.push_back(o->compare.references_path);
    const std::filesystem::path dir(o->out_dir);
    write_text_output(dir / "index.html", render_compare_html(d), inputs);
    write_text_output(dir / "report.md", render_compare_markdown(d), inputs);
    write_text_output(dir / "compare.json", render_compare_json(d), inputs);
    write_text_output(dir / "artifact.md", render_artifact_description(d), inputs);
    for (const auto& c : d.candidates)
      for (const auto& r : c.runs) {
        fmt::print("  {}: {} / {}\n", r.verdict, c.file.path, r.run);
        for (const auto& reason : r.reasons) fmt::print("      {}\n", reason);
      }
    fmt::print("compare: {} (tolerance ±{:.3g}%)\ncompare: {}\n", d.verdict, 100 * d.options.tolerance,
               (dir / "index.html").string());
    if (o->fail_on_difference && d.any_not_reproduced()) {
      fmt::print(stderr, "pipebench compare: exit 9 (--fail-on-difference): not reproduced\n");
      return kNotReproducedExit;
    }
    return kOk;
  };
}

}  // namespace pipebench::cli
