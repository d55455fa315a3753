// Helpers shared by the HTML, Markdown and JSON renderers, so that all three
// print the same numbers the same way. Internal to the report generator.
#pragma once

#include <string>
#include <vector>

#include "pipebench/core/json.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/report/report.hpp"

namespace pipebench::report_detail {

extern const char* const kReportCss;

// A value in its unit: seconds, bytes, fractions, rates; "-" for NaN.
std::string format_value(double v, const std::string& unit);
// Pipeline against baseline: "+12.3%" of the baseline, or for a fraction
// (unit "fraction": bubbles, shares of capacity) the difference in points,
// "+4.1 pts" (a relative change of a near-zero share means nothing); "" when
// undefined.
std::string format_delta(double baseline, double pipeline, const std::string& unit);

std::string job_name(const FileView& f);
// The file's created_utc root attribute ("" when absent).
std::string created_utc(const FileView& f);
// The indices of run `r`'s counted (not warm-up) steps.
std::vector<std::size_t> counted_steps(const RunResult& r);

// What the trends read of file `f` (FileDigest): the same figures whether
// the file is read now or its digest comes from the history index.
FileDigest digest_of(const FileView& f);
// The trends of `files` (the inputs) over `files` and `history`
// (report_trends.cpp).
std::vector<Trend> build_trends(const std::vector<FileView>& files, const std::vector<FileDigest>& history,
                                const ReportOptions& options);
std::string attr(const std::map<std::string, std::string>& m, const char* key);

// The run's plan recomputed from the file's recorded workload (partition
// table, schedule); null when the workload could not be parsed. Computed
// once per run at load: RunView::plan.
std::optional<RunPlan> plan_of(const FileView& f, const RunResult& r);
// The plan's prediction beside the run's measurement (RunView::prediction);
// null for a run that was not measured (not ok, no counted step) or whose
// plan is not the schedule it ran.
std::optional<Prediction> prediction_of(const FileView& f, const RunResult& r, const std::optional<RunPlan>& plan);
// Whether `plan`'s schedule is the one the run ran (ranks, micro-batches,
// chunks): the charts that replay it need that.
bool plan_matches(const RunPlan& plan, const RunResult& r);

// The trend that judged run `r` of file `f` (none for probe trials, failed runs and
// history files).
const Trend* trend_for(const ReportData& d, const FileView& f, const RunResult& r);

// The answer first: one row per run of every job file and per missing job,
// failures (failed, skipped, missing) first; `row_classes` "failed",
// "skipped" or "" per row.
struct VerdictTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_classes;
};
VerdictTable verdict_table(const ReportData& d);

// The columns of the run table, per run.
std::vector<std::string> run_table_header();
std::vector<std::string> run_table_row(const RunView& v);

// The micro-batch probe of a file: header and one row per trial.
std::vector<std::string> probe_header();
std::vector<std::vector<std::string>> probe_rows(const ProbeResult& p);
std::string probe_summary(const ProbeResult& p);

// A series' verdict for tables: "new series (micro_batch_size 2 → 4)" names
// what changed.
std::string verdict_text(const Trend& t);
// The figures behind it: the rule's reason, the bubble's change in points,
// memory and numerics alerts.
std::string trend_evidence(const Trend& t);

// The trends table (HTML and Markdown): one row per series — the newest
// judged file's trend, or the series shown as history only.
bool shown_in_trends(const Trend& t);
std::vector<std::string> trend_table_header();
std::vector<std::vector<std::string>> trend_table_rows(const ReportData& d);

// Provenance as (name, value) pairs, in a fixed order.
std::vector<std::pair<std::string, std::string>> provenance_rows(const FileView& f);

// Markdown that renders as the text given (no raw HTML, links or code
// spans get through; control characters become spaces), a table cell of
// it, and a table.
std::string md_text(const std::string& s);
std::string md_cell(const std::string& s);
std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// An HTML table, every cell escaped; `row_classes` per row, `numeric` per column.
std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::string>& row_classes = {}, const std::vector<bool>& numeric = {});

// Checks against references.toml as a table: run, figure, system (how it
// was matched), verdict, evidence; `files` (per check, may be empty) adds a
// first column naming the file. `classes`: "failed" for checks outside.
struct ReferenceTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;
};
ReferenceTable reference_table(const std::vector<ReferenceCheck>& checks, const std::vector<std::string>& files = {});

// The checks as a JSON array of objects (summary.json, compare.json); with
// `files`, each names its file.
void write_reference_checks(JsonWriter& w, const std::vector<ReferenceCheck>& checks,
                            const std::vector<std::string>& files = {});

// The start of a self-contained page: doctype, <head> with `title` and the
// inline report CSS, <body> and its <h1>heading</h1> (both escaped).
std::string html_page_start(const std::string& title, const std::string& heading);

}  // namespace pipebench::report_detail
