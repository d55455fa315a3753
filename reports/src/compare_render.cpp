// The reproducibility report's pages (report/compare.hpp): index.html,
// report.md and compare.json from one CompareData, and the artifact
// description. The tables are built once (CompareTables) and rendered twice,
// so the HTML and the Markdown show the same rows.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/json.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/report/compare.hpp"
#include "pipebench/results/metrics.hpp"
#include "report_common.hpp"

namespace pipebench {

using namespace report_detail;

namespace {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;  // per row: "differs", "failed" or ""
};

std::string verdict_class(const std::string& v) {
  return v == kReproduced ? "reproduced" : v == kNotReproduced ? "not-reproduced" : v == kInconclusive ? "inconclusive" : "";
}

std::string join(const std::vector<std::string>& v, const char* sep) { return fmt::format("{}", fmt::join(v, sep)); }

// The verdict of one group of checks: numerics (loss, gradient norm,
// clipping), memory, performance.
std::string aspect(const RunComparison& r, const char* which) {
  std::vector<std::string> v;
  const std::string w = which;
  for (const auto& n : r.numerics)
    if ((w == "memory") == n.what.starts_with("memory")) v.push_back(n.verdict);
  if (w == "performance") {
    v.clear();
    for (const auto& f : r.performance) v.push_back(f.verdict);
  }
  return v.empty() ? "-" : worst_verdict(v);
}

Table verdict_table(const CompareData& d) {
  Table t{{"candidate", "run", "verdict", "numerics", "memory", "performance", "why"}, {}, {}};
  for (const auto& c : d.candidates)
    for (const auto& r : c.runs) {
      t.rows.push_back({c.file.path, r.run, r.verdict, aspect(r, "numerics"), aspect(r, "memory"), aspect(r, "performance"),
                        r.reasons.empty() ? "every check reproduced" : join(r.reasons, "; ")});
      t.classes.push_back(r.verdict == kNotReproduced ? "failed" : "");
    }
  for (const auto& s : d.skipped) {
    t.rows.push_back({s.path, "(all)", kNotReproduced, "-", "-", "-", "unreadable: " + s.reason});
    t.classes.push_back("failed");
  }
  return t;
}

Table environment_table(const CandidateComparison& c) {
  Table t{{"", "reference", "candidate"}, {}, {}};
  for (const auto& e : c.environment) {
    t.rows.push_back({e.name + (e.differs ? " (differs)" : ""), e.reference, e.candidate});
    t.classes.push_back(e.differs ? "differs" : "");
  }
  return t;
}

Table workload_table(const RunComparison& r) {
  Table t{{"workload key", "reference", "candidate"}, {}, {}};
  t.rows.push_back({"fingerprint", r.workload_fingerprint_reference, r.workload_fingerprint_candidate});
  t.classes.push_back(r.workload_fingerprint_reference != r.workload_fingerprint_candidate ? "differs" : "");
  for (const auto& w : r.workload) {
    t.rows.push_back({w.name, w.reference, w.candidate});
    t.classes.push_back("differs");
  }
  return t;
}

Table numerics_table(const RunComparison& r) {
  Table t{{"check", "verdict", "evidence"}, {}, {}};
  for (const auto& n : r.numerics) {
    t.rows.push_back({n.what, n.verdict, n.evidence});
    t.classes.push_back(n.verdict == kNotReproduced ? "differs" : "");
  }
  return t;
}

Table memory_table(const RunComparison& r) {
  constexpr std::size_t kShown = 64;
  Table t{{"rank", "category", "reference", "candidate", "difference"}, {}, {}};
  for (std::size_t i = 0; i < r.memory.size() && i < kShown; ++i) {
    const MemoryDifference& m = r.memory[i];
    t.rows.push_back({std::to_string(m.rank), m.category, fmt::format("{} B", m.reference), fmt::format("{} B", m.candidate),
                      format_byte_change(m.reference, m.candidate)});
    t.classes.push_back("differs");
  }
  if (r.memory.size() > kShown) t.rows.push_back({"...", fmt::format("{} more", r.memory.size() - kShown), "", "", ""});
  return t;
}

std::string value_text(double v, const std::string& unit) {
  if (unit == "B") {  // the exact count beside, where it is one (a damaged file's 2^63 is not an int64)
    if (std::isnan(v)) return "-";
    const bool count = v >= 0.0 && v < 9.2e18 && std::floor(v) == v;
    return count ? fmt::format("{} ({})", format_bytes(v), group_digits(static_cast<std::int64_t>(v))) : format_bytes(v);
  }
  if (unit == "samples/s") return std::isnan(v) ? "-" : fmt::format("{:.4g} samples/s", v);
  return format_value(v, unit);
}

Table performance_table(const RunComparison& r, double tolerance) {
  Table t{{"figure", "reference", "candidate", "ratio", "95% interval", fmt::format("verdict (±{:.3g}%)", 100 * tolerance),
           "evidence"}, {}, {}};
  for (const auto& f : r.performance) {
    const bool has = std::isfinite(f.ratio.estimate);
    t.rows.push_back({f.figure, value_text(f.reference, f.unit), value_text(f.candidate, f.unit),
                      has ? fmt::format("{:.4g}", f.ratio.estimate) : "-",
                      has ? fmt::format("{:.4g} to {:.4g}", f.ratio.low, f.ratio.high) : "-", f.verdict, f.evidence});
    t.classes.push_back(f.verdict == kNotReproduced ? "differs" : "");
  }
  return t;
}

Table references_table(const std::vector<ReferenceCheck>& checks) {
  ReferenceTable r = reference_table(checks);
  return {std::move(r.header), std::move(r.rows), std::move(r.classes)};
}

std::string colour_verdicts(std::string html) {
  for (const char* v : {kNotReproduced, kReproduced, kInconclusive})
    for (std::size_t pos = 0; (pos = html.find(std::string("<td>") + v + "</td>", pos)) != std::string::npos; pos += 4)
      html.replace(pos, 4, "<td class=\"verdict-" + verdict_class(v) + "\">");
  return html;
}

std::string html_table(const Table& t) { return colour_verdicts(table(t.header, t.rows, t.classes)); }
std::string markdown_table(const Table& t) { return md_table(t.header, t.rows); }

// What a candidate says of itself: when it was made, by which command, what
// it reproduces and with which deviations.
std::string candidate_meta(const CandidateComparison& c) {
  const auto& root = c.file.result.root_attrs;
  std::string s = fmt::format("sha256 {}; created {}; command line: {}", c.file.sha256, attr(root, "created_utc"),
                              attr(root, "command_line"));
  if (const std::string id = attr(root, "reproduces_id"); !id.empty())
    s += fmt::format("; a rerun of results_id {} (sha256 {}), deviations: {}", id, attr(root, "reproduces_sha256"),
                     c.file.result.deviations.empty() ? "none" : "--set " + join(c.file.result.deviations, " --set "));
  return s;
}

std::string headline(const CompareData& d) {
  std::size_t runs = 0, bad = 0;
  for (const auto& c : d.candidates)
    for (const auto& r : c.runs) runs += 1, bad += r.verdict == kNotReproduced;
  return fmt::format("{}: {} candidate file(s), {} run(s) compared, {} not reproduced{}", d.verdict, d.candidates.size(),
                     runs, bad, d.skipped.empty() ? "" : fmt::format(", {} unreadable", d.skipped.size()));
}

std::string meta_line(const CompareData& d) {
  return fmt::format("generated {} by pipebench {}; reference {} (sha256 {}); tolerance ±{:.3g}% on every performance "
                     "ratio; numerics and memory exact{}",
                     utc_iso8601(), PIPEBENCH_VERSION, d.reference.path, d.reference.sha256, 100 * d.options.tolerance,
                     d.options.references_path.empty() ? "" : "; references " + d.options.references_path);
}

}  // namespace

std::string render_compare_html(const CompareData& d) {
  std::string s = html_page_start("pipebench compare", "pipebench reproducibility report");
  s += "<p class=\"meta\">" + html_escape(meta_line(d)) + "</p>";
  s += "<div class=\"answer " + verdict_class(d.verdict) + "\" id=\"verdict\">" + html_escape(headline(d)) + "</div>";
  s += "<h2 id=\"verdicts\">Verdicts</h2>" + html_table(verdict_table(d));
  if (!d.reference_references.empty())
    s += "<h3>The reference against references.toml</h3>" + html_table(references_table(d.reference_references));
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const CandidateComparison& c = d.candidates[i];
    s += fmt::format("<h2 id=\"candidate-{}\">Candidate {}: {}</h2>", i, html_escape(c.file.path), html_escape(c.verdict));
    s += "<p class=\"meta\">" + html_escape(candidate_meta(c)) + "</p>";
    s += "<h3>Environment</h3>" + html_table(environment_table(c));
    for (const auto& r : c.runs) {
      s += fmt::format("<h3>Run {}: <span class=\"verdict-{}\">{}</span></h3>", html_escape(r.run), verdict_class(r.verdict),
                       html_escape(r.verdict));
      s += "<p>reference " + html_escape(r.reference_status) + ", candidate " + html_escape(r.candidate_status) + "</p>";
      if (!r.reasons.empty()) {
        s += "<ul>";
        for (const auto& why : r.reasons) s += "<li>" + html_escape(why) + "</li>";
        s += "</ul>";
      }
      s += html_table(workload_table(r));
      if (!r.numerics.empty()) s += "<h4>Numerics</h4>" + html_table(numerics_table(r));
      if (!r.memory.empty()) s += "<h4>Memory differences</h4>" + html_table(memory_table(r));
      if (!r.performance.empty()) s += "<h4>Performance</h4>" + html_table(performance_table(r, d.options.tolerance));
      if (!r.references.empty()) s += "<h4>References</h4>" + html_table(references_table(r.references));
    }
  }
  s += "<h2 id=\"artifact\">Artifact description</h2><p>Also in artifact.md, for a paper's reproducibility appendix.</p><pre>" +
       html_escape(render_artifact_description(d)) + "</pre>";
  return s + "</body></html>\n";
}

std::string render_compare_markdown(const CompareData& d) {
  std::string s = "# pipebench reproducibility report\n\n" + md_text(meta_line(d)) + "\n\n**" + md_text(headline(d)) + "**\n\n";
  s += "## Verdicts\n\n" + markdown_table(verdict_table(d)) + "\n";
  if (!d.reference_references.empty())
    s += "### The reference against references.toml\n\n" + markdown_table(references_table(d.reference_references)) + "\n";
  for (const auto& c : d.candidates) {
    s += fmt::format("## Candidate {}: {}\n\n{}\n\n", md_text(c.file.path), c.verdict, md_text(candidate_meta(c)));
    s += "### Environment\n\n" + markdown_table(environment_table(c)) + "\n";
    for (const auto& r : c.runs) {
      s += fmt::format("### Run {}: {}\n\nreference {}, candidate {}\n\n", md_text(r.run), r.verdict, md_text(r.reference_status),
                       md_text(r.candidate_status));
      for (const auto& why : r.reasons) s += "- " + md_text(why) + "\n";
      s += (r.reasons.empty() ? "" : "\n") + markdown_table(workload_table(r)) + "\n";
      if (!r.numerics.empty()) s += "#### Numerics\n\n" + markdown_table(numerics_table(r)) + "\n";
      if (!r.memory.empty()) s += "#### Memory differences\n\n" + markdown_table(memory_table(r)) + "\n";
      if (!r.performance.empty()) s += "#### Performance\n\n" + markdown_table(performance_table(r, d.options.tolerance)) + "\n";
      if (!r.references.empty()) s += "#### References\n\n" + markdown_table(references_table(r.references)) + "\n";
    }
  }
  return s + "\n" + render_artifact_description(d);
}

namespace {

void json_run(JsonWriter& w, const RunComparison& r) {
  w.begin_object().field("run", r.run).field("verdict", r.verdict).array("reasons", r.reasons);
  w.field("reference_status", r.reference_status).field("candidate_status", r.candidate_status);
  w.field("workload_fingerprint_reference", r.workload_fingerprint_reference);
  w.field("workload_fingerprint_candidate", r.workload_fingerprint_candidate);
  w.key("workload_differences").begin_array();
  for (const auto& k : r.workload) w.begin_object().field("key", k.name).field("reference", k.reference).field("candidate", k.candidate).end_object();
  w.end_array().key("numerics").begin_array();
  for (const auto& n : r.numerics) {
    w.begin_object().field("check", n.what).field("verdict", n.verdict).field("evidence", n.evidence);
    w.field("first_differing_step", n.first_differing_step).field("max_rel_diff", n.max_rel_diff).end_object();
  }
  w.end_array().key("memory_differences").begin_array();
  for (const auto& m : r.memory)
    w.begin_object().field("rank", m.rank).field("category", m.category).field("reference_bytes", m.reference).field("candidate_bytes", m.candidate).end_object();
  w.end_array().key("performance").begin_array();
  for (const auto& f : r.performance) {
    w.begin_object().field("figure", f.figure).field("unit", f.unit).field("reference", f.reference).field("candidate", f.candidate);
    w.field("ratio", f.ratio.estimate).field("ratio_low", f.ratio.low).field("ratio_high", f.ratio.high);
    w.field("verdict", f.verdict).field("evidence", f.evidence).end_object();
  }
  w.end_array().key("references");
  write_reference_checks(w, r.references);
  w.end_object();
}
}  // namespace

std::string render_compare_json(const CompareData& d) {
  JsonWriter w;
  w.begin_object().field("tool", "pipebench compare").field("tool_version", PIPEBENCH_VERSION).field("generated_utc", utc_iso8601());
  w.field("verdict", d.verdict).field("tolerance", d.options.tolerance).field("references_file", d.options.references_path);
  w.key("reference").begin_object().field("file", d.reference.path).field("sha256", d.reference.sha256);
  w.field("results_id", attr(d.reference.result.root_attrs, "results_id")).field("job", job_name(d.reference)).end_object();
  w.key("reference_references");
  write_reference_checks(w, d.reference_references);
  w.key("skipped").begin_array();
  for (const auto& k : d.skipped) w.begin_object().field("path", k.path).field("reason", k.reason).end_object();
  w.end_array().key("candidates").begin_array();
  for (const auto& c : d.candidates) {
    w.begin_object().field("file", c.file.path).field("sha256", c.file.sha256);
    w.field("results_id", attr(c.file.result.root_attrs, "results_id"));
    w.field("reproduces_id", attr(c.file.result.root_attrs, "reproduces_id")).array("deviations", c.file.result.deviations);
    w.field("verdict", c.verdict).key("environment").begin_array();
    for (const auto& e : c.environment)
      w.begin_object().field("name", e.name).field("reference", e.reference).field("candidate", e.candidate).field("differs", e.differs).end_object();
    w.end_array().key("runs").begin_array();
    for (const auto& r : c.runs) json_run(w, r);
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.str() + "\n";
}

}  // namespace pipebench
