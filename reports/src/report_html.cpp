// index.html: one self-contained page (inline CSS and SVG, no scripts, no
// network). Every string from a file (workload, hosts, environment, messages)
// goes through html_escape.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/results/metrics.hpp"
#include "report_common.hpp"
#include "svg.hpp"

namespace pipebench {

using namespace report_detail;

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

constexpr const char* kForward = "#4c78a8";
constexpr const char* kBackward = "#f58518";
constexpr const char* kWeight = "#b279a2";
constexpr const char* kWait = "#9d9da0";
constexpr const char* kIdle = "#e8e8e8";
constexpr const char* kTail = "#8cc084";
constexpr const char* kSync = "#d62728";  // data parallelism's gradient synchronisation
constexpr const char* kRunColor = "#4c78a8";
constexpr const char* kRunBandColor = "#c9d6e5";  // kRunColor, light: a spread behind its line
constexpr const char* kBaseColor = "#9d9da0";
constexpr const char* kRollingColor = "#e45756";
const char* const kMemColors[kNumMemCategories] = {"#4c78a8", "#72b7b2", "#54a24b", "#f58518", "#e45756", "#b279a2"};


// The legend entries of a Gantt chart: forward; backward in training; W only
// when the schedule splits its backward.
std::vector<std::pair<std::string, std::string>> action_legend(RunMode mode, bool split) {
  std::vector<std::pair<std::string, std::string>> l{{"forward", kForward}};
  if (mode == RunMode::train) l.emplace_back(split ? "backward (input gradient)" : "backward", kBackward);
  if (split) l.emplace_back("weight gradient (W)", kWeight);
  return l;
}

std::string sync_name(const RunResult& r) {
  if (!shards_optimizer(r.spec)) return "gradient all-reduce";
  return gathers_in_first_forward(r.spec) ? "all-gathers in the forward, reduce-scatter"
                                          : "reduce-scatter, optimizer, all-gather";
}

// Data parallelism: a row under the ranks for each stage's (replica 0's)
// gradient synchronisation of step k, from its first launch to its end (it
// runs beside the compute when overlapped). False without replicas.
bool gradient_sync_rows(const RunResult& r, int k, svg::Gantt& g) {
  const auto step = static_cast<std::size_t>(k);
  if (step >= r.grad_sync_s.size() || step >= r.grad_sync_start_s.size()) return false;
  const int P = r.spec.pipeline_size;
  for (int stage = 0; stage < P; ++stage) {
    const std::size_t i = r.rank_index(stage);
    const int row = P + stage;
    g.rows.push_back(fmt::format("sync {}", stage));  // rank {stage}'s, short enough for the label column
    if (i >= r.grad_sync_s[step].size()) continue;
    const double start = r.grad_sync_start_s[step][i], took = r.grad_sync_s[step][i];
    if (!(took > 0.0)) continue;
    g.bars.push_back({row, start, start + took, kSync, "",
                      fmt::format("{} {:.6f}-{:.6f} s, {:.6f} s exposed; bus bandwidth {}/s", sync_name(r), start,
                                  start + took, r.grad_sync_exposed_s[step][i],
                                  format_bytes(grad_sync_bus_bandwidth(r, step, i)))});
  }
  return true;
}

// A Gantt's rows, one per pipeline stage: "rank i" when the run is one
// pipeline (rank i is stage i), else "stage i" (replica 0's, tensor rank 0's
// events, as the title says: gantt_whose).
void stage_rows(const RunResult& r, svg::Gantt& g) {
  const bool grid = r.spec.data_parallel > 1 || r.spec.tensor_parallel > 1;
  for (int i = 0; i < r.spec.pipeline_size; ++i) g.rows.push_back(fmt::format("{} {}", grid ? "stage" : "rank", i));
}
std::string gantt_whose(const RunResult& r) {
  if (r.spec.data_parallel <= 1 && r.spec.tensor_parallel <= 1) return "rank timelines";
  return fmt::format("stage timelines: {}", r.spec.tensor_parallel > 1 ? "replica 0, tensor rank 0" : "replica 0");
}

// Measured Gantt of one counted step: compute bars, the wait for input before
// actions that receive, idle gaps, and the end of step (gradient reduction,
// optimizer, waiting; inference: waiting) after the last action.
std::string measured_gantt(const RunView& v, const Schedule* sched) {
  const RunResult& r = *v.run;
  const int P = r.spec.pipeline_size, k = v.gantt_step;
  bool split = false;
  svg::Gantt g;
  g.title = fmt::format("{}: measured step {} ({})", r.spec.name, k + 1, gantt_whose(r));
  g.x_label = "time since the step barrier (s)";
  stage_rows(r, g);
  g.t_end = r.step_time_s[static_cast<std::size_t>(k)];
  // Inference has no gradients: its step ends when the others are done.
  const bool train = r.spec.mode == RunMode::train;
  const std::string tail = train ? "gradient reduction, optimizer, waiting for the others" : "waiting for the others";
  std::vector<std::vector<const EventRecord*>> per_rank(static_cast<std::size_t>(P));
  for (const auto& e : v.gantt_events)
    if (e.step == k && e.rank < P) per_rank[static_cast<std::size_t>(e.rank)].push_back(&e);
  for (int rank = 0; rank < P; ++rank) {
    double t = 0.0;
    for (const EventRecord* e : per_rank[static_cast<std::size_t>(rank)]) {
      // Whether the action waits for a tensor from another rank (its virtual stage's neighbour).
      const int vs = sched ? sched->virtual_stage(rank, e->chunk) : rank;
      const int V = sched ? sched->num_virtual_stages() : P;
      const int from = e->kind == ActionKind::F ? vs - 1 : vs + 1;
      const bool receives = e->kind != ActionKind::W && from >= 0 && from < V && (sched ? sched->rank_of(from) : from) != rank;
      split |= e->kind == ActionKind::W;
      // The recorded receive wait ends at the action's start; before it the
      // rank idled. Files without recorded waits: the whole gap by whether
      // the action receives.
      const double wait_from = std::isnan(e->wait_s) ? (receives ? t : e->start_s) : wait_start_s(*e, t);
      if (wait_from > t)
        g.bars.push_back({rank, t, wait_from, kIdle, "", fmt::format("idle {:.6f}-{:.6f} s", t, wait_from)});
      if (e->start_s > wait_from)
        g.bars.push_back({rank, wait_from, e->start_s, kWait, "",
                          fmt::format("waiting for input {:.6f}-{:.6f} s", wait_from, e->start_s)});
      const char* color = e->kind == ActionKind::F ? kForward : e->kind == ActionKind::B ? kBackward : kWeight;
      const std::string name = to_string(Action{e->kind, e->microbatch, e->chunk});
      g.bars.push_back({rank, e->start_s, e->end_s, color, name, fmt::format("{} {:.6f}-{:.6f} s", name, e->start_s, e->end_s)});
      t = e->end_s;
    }
    if (g.t_end > t) g.bars.push_back({rank, t, g.t_end, kTail, "", "end of step: " + tail});
  }
  g.legend = action_legend(r.spec.mode, split);
  for (const auto& l : std::vector<std::pair<std::string, std::string>>{
           {"waiting for input", kWait}, {"idle", kIdle}, {train ? "reduction + optimizer" : "end of step", kTail}})
    g.legend.push_back(l);
  if (gradient_sync_rows(r, k, g)) g.legend.emplace_back(sync_name(r), kSync);
  return svg::gantt(g);
}

// The same run's schedule simulated with its per-action medians.
std::string simulated_gantt(const RunView& v, const Schedule& s) {
  const RunResult& r = *v.run;
  const int P = r.spec.pipeline_size;
  const SimResult sim = simulate(s, *v.measured_costs);
  svg::Gantt g;
  g.title = fmt::format("{}: {} simulated with measured medians (bubble {:.3f})", r.spec.name, s.name, sim.bubble);
  g.x_label = "simulated time (s)";
  stage_rows(r, g);
  g.t_end = sim.makespan;
  for (const auto& a : sim.timeline) {
    const std::string name = to_string(a.action);
    const char* color = a.action.kind == ActionKind::F ? kForward : a.action.kind == ActionKind::B ? kBackward : kWeight;
    g.bars.push_back({a.rank, a.start, a.end, color, name, fmt::format("{} {:.6f}-{:.6f} s", name, a.start, a.end)});
  }
  g.legend = action_legend(r.spec.mode, s.split_backward());
  // Data parallelism: each rank's median exposed synchronisation after its
  // last action, as bubble_simulated counts it (docs/results-format.md).
  if (!r.grad_sync_exposed_s.empty()) {
    for (int stage = 0; stage < P && static_cast<std::size_t>(stage) < sim.last_end.size(); ++stage) {
      const double exposed = counted_median(r.grad_sync_exposed_s, r.is_warmup, r.rank_index(stage));
      const double from = sim.last_end[static_cast<std::size_t>(stage)];
      if (!(exposed > 0.0)) continue;
      g.bars.push_back({stage, from, from + exposed, kSync, "",
                        fmt::format("{}: {:.6f} s exposed (measured median)", sync_name(r), exposed)});
      g.t_end = std::max(g.t_end, from + exposed);
    }
    g.title = fmt::format("{}: {} simulated with measured medians and the exposed synchronisation (bubble {:.3f})",
                          r.spec.name, s.name, r.bubble_simulated);
    g.legend.emplace_back("exposed " + sync_name(r), kSync);
  }
  return svg::gantt(g);
}

std::string memory_chart(const RunResult& r) {
  svg::StackedBars c;
  c.title = fmt::format("{}: peak memory per rank by category", r.spec.name);
  for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i) {
    c.categories.push_back(fmt::format("rank {}", i));
    c.limit.push_back(static_cast<double>(r.memory_capacity_bytes[i]));
  }
  for (int cat = 0; cat < kNumMemCategories; ++cat) {
    svg::Series s{std::string(to_string(static_cast<MemCategory>(cat))), kMemColors[cat], {}, {}, {}};
    for (auto v : r.peak_mem_by_category[static_cast<std::size_t>(cat)]) s.y.push_back(static_cast<double>(v));
    c.stacks.push_back(s);
  }
  c.limit_label = "capacity";
  return svg::stacked_bars(c);
}

svg::Series per_step(const std::vector<double>& values, const char* color, const std::string& name) {
  svg::Series s{name, color, {}, {}, {}};
  for (std::size_t k = 0; k < values.size(); ++k) {
    s.x.push_back(static_cast<double>(k + 1));
    s.y.push_back(values[k]);
  }
  return s;
}

// A rolling mean over the counted steps, at their step numbers.
svg::Series rolling(const RunView& v, const std::vector<double>& values, const char* color) {
  svg::Series s{fmt::format("mean of the last {} counted steps", kRollingWindow), color, {}, {}, {}};
  for (std::size_t j = 0; j < values.size() && j < v.counted_step_index.size(); ++j) {
    s.x.push_back(static_cast<double>(v.counted_step_index[j] + 1));
    s.y.push_back(values[j]);
  }
  return s;
}

std::string step_chart(const RunView& v) {
  const RunResult& r = *v.run;
  svg::LineChart c;
  c.title = fmt::format("{}: step time per step", r.spec.name);
  c.x_label = "step";
  c.y_label = "step time (s)";
  c.zero_based = true;
  c.series.push_back(per_step(r.step_time_s, kRunColor, r.spec.name));
  if (v.baseline) c.series.push_back(per_step(v.baseline->step_time_s, kBaseColor, v.baseline->spec.name));
  if (!v.rolling_step_time_s.empty()) c.series.push_back(rolling(v, v.rolling_step_time_s, kRollingColor));
  c.shade_x_to = r.warmup > 0 ? r.warmup + 0.5 : -1.0;
  c.shade_label = "warm-up";
  c.integer_x = true;
  return svg::line_chart(c);
}

std::string loss_chart(const RunView& v) {
  const RunResult& r = *v.run;
  if (std::none_of(r.loss.begin(), r.loss.end(), [](double x) { return std::isfinite(x); })) return "";
  svg::LineChart c;
  const bool identical = v.baseline && r.loss == v.baseline->loss;
  c.title = fmt::format("{}: loss per step{}", r.spec.name,
                        !v.baseline ? "" : identical ? " (identical to the baseline: the lines coincide)" : " (pipeline over baseline)");
  c.x_label = "step";
  c.y_label = "loss (nats: mean token cross-entropy)";
  if (v.baseline) c.series.push_back(per_step(v.baseline->loss, kBaseColor, v.baseline->spec.name));
  c.series.push_back(per_step(r.loss, kRunColor, r.spec.name));
  if (!v.rolling_loss.empty()) c.series.push_back(rolling(v, v.rolling_loss, kRollingColor));
  c.shade_x_to = r.warmup > 0 ? r.warmup + 0.5 : -1.0;
  c.shade_label = "warm-up";
  c.integer_x = true;
  return svg::line_chart(c);
}

std::string run_section(const FileView& f, const RunView& v) {
  const RunResult& r = *v.run;
  std::string s = fmt::format("<h3 id=\"{}\">Run {}{}</h3>", html_escape(job_name(f) + "-" + r.spec.name), html_escape(r.spec.name),
                              v.baseline ? " vs baseline " + html_escape(v.baseline->spec.name) : "");
  if (r.status != RunStatus::ok) {
    s += fmt::format("<p class=\"notice\">status <b>{}</b>{}: {}</p>", to_string(r.status),
                     r.status == RunStatus::failed ? fmt::format(" ({})", failure_origin(r)) : "",
                     html_escape(r.failure_message));
  }
  if (!v.comparison.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& c : v.comparison)
      rows.push_back({c.metric, format_value(c.baseline, c.unit), format_value(c.pipeline, c.unit),
                      format_delta(c.baseline, c.pipeline, c.unit), c.note});
    s += table({"metric", "single-stage baseline", "pipeline", "Δ", "note"}, rows, {}, {false, true, true, true, false});
  }
  s += fmt::format("<div class=\"decision {}\"><b>Decision: {}</b><ul>", html_escape(r.decision), html_escape(r.decision));
  for (const auto& why : r.decision_reasons) s += "<li>" + html_escape(why) + "</li>";
  s += "</ul>";
  if (!v.advice.empty()) {
    s += "<b>Next actions</b><ul>";
    for (const auto& a : v.advice) s += "<li>" + html_escape(a) + "</li>";
    s += "</ul>";
  }
  s += "</div>";
  if (v.prediction) {
    s += fmt::format("<p>The plan beside the measurement (the step predicted from {}):</p>", html_escape(v.prediction->basis));
    s += table({"figure", "planned", "measured", "error of the plan"}, prediction_cells(*v.prediction), {},
               {false, true, true, true});
  }
  // The schedule as planned from the file's workload (any schedule, a file
  // schedule included); without it the charts that need it are left out.
  const auto& plan = v.plan;
  const Schedule* sched = plan && plan_matches(*plan, r) ? &plan->schedule : nullptr;
  if (r.status != RunStatus::skipped && !r.peak_mem_bytes.empty()) {
    s += "<div class=\"charts\">";
    if (v.gantt_step >= 0)
      s += measured_gantt(v, sched) + (sched && v.measured_costs ? simulated_gantt(v, *sched) : std::string());
    s += memory_chart(r);
    if (!r.step_time_s.empty()) s += step_chart(v) + loss_chart(v);
    s += "</div>";
  }
  if (plan) {
    s += "<details><summary>Partition table</summary>";
    std::vector<bool> numeric{true, false, true, true, true, true, false};
    if (plan->schedule.chunks_per_rank > 1) numeric.insert(numeric.begin() + 1, false);  // rank.chunk
    s += table(partition_table_header(*plan), partition_table_rows(*plan), {}, numeric);
    s += "</details>";
  }
  return s;
}

// One point per results file, oldest first, evenly spaced (as asv and
// conbench space commits), ticks labelled with the file's date; hovering a
// point shows its date, git sha and file; the band is the min-max of the
// file's counted steps. What the verdict judged is drawn with it: the
// history's median (pooled counted steps of the earlier files) as a dashed
// line, the change a verdict needs (the rule's bar) as a band around it, and
// the judged file ringed with its verdict. The y axis is not from zero (a
// 10% regression would be a bump of a few pixels): it spans at least twice
// the bar on each side of the median, and its label says where it starts.
std::string trend_chart(const Trend& t) {
  svg::LineChart c;
  c.title = fmt::format("{} / {}: median step time per results file", t.job, t.run);
  c.x_label = "results file, by creation time (UTC, month-day hour:minute)";
  c.integer_x = true;
  svg::Series s{"median step time", kRunColor, {}, {}, {}};
  svg::Band band{"min-max of the counted steps", kRunBandColor, {}, {}, {}};
  std::vector<std::string> created;
  std::vector<double> history;
  for (std::size_t i = 0; i < t.points.size(); ++i) {
    const TrendPoint& p = t.points[i];
    const double x = static_cast<double>(i + 1);
    s.x.push_back(x);
    s.y.push_back(p.step_time_median_s);
    const auto [lo, hi] = std::minmax_element(p.counted_step_times.begin(), p.counted_step_times.end());
    const bool spread = lo != p.counted_step_times.end();
    band.x.push_back(x);
    band.lo.push_back(spread ? *lo : NAN);
    band.hi.push_back(spread ? *hi : NAN);
    created.push_back(p.created_utc);
    if (i + 1 < t.points.size()) history.insert(history.end(), p.counted_step_times.begin(), p.counted_step_times.end());
    s.hover.push_back(fmt::format("{}  git {}  median {}{}\n{}", p.created_utc, p.git_sha.empty() ? "unrecorded" : p.git_sha.substr(0, 12),
                                  format_seconds(p.step_time_median_s),
                                  spread ? fmt::format(" (min {}, max {}, {} steps)", format_seconds(*lo), format_seconds(*hi),
                                                       p.counted_step_times.size())
                                         : "",
                                  p.path));
  }
  const double median = history.empty() ? NAN : compute_stats(history).median;
  if (std::isfinite(median) && median > 0.0 && !t.history_only) {
    const double bar = t.bar > 0.0 ? t.bar : 0.05;
    c.hbands.push_back({fmt::format("history median ±{:.1f}% (the change a verdict needs)", 100 * bar), "#f3e6c4",
                        median * (1.0 - bar), median * (1.0 + bar)});
    c.hbands.push_back({fmt::format("history median {}", format_seconds(median)), "#8a6d1f", median, median});
    c.y_from = median * (1.0 - 2.0 * bar);
    c.y_to = median * (1.0 + 2.0 * bar);
    const bool flagged = t.verdict == "regression" || t.verdict == "improvement";
    c.markers.push_back({static_cast<double>(t.points.size()), t.points.back().step_time_median_s,
                         t.history < 1 || t.verdict == "insufficient history"
                             ? fmt::format("judged: {} ({} earlier file(s))", t.verdict, t.history)
                             : fmt::format("{} {:+.1f}%", flagged ? t.verdict : "judged: " + t.verdict, 100 * t.change),
                         t.verdict == "regression" ? "#c62828" : t.verdict == "improvement" ? "#2e7d32" : "#333333"});
  } else {
    c.zero_based = true;
  }
  c.x_names = svg::date_tick_labels(created);
  c.bands.push_back(band);
  c.series.push_back(s);
  // Where the axis starts, in its label (it is not 0).
  c.y_label = c.zero_based ? "step time (s)"
                           : fmt::format("step time (s), axis from {:.4g} s", svg::y_axis_start(c));
  return svg::line_chart(c);
}

// A table's cells that are exactly "regression" or "improvement", coloured.
std::string colour_trend_verdicts(std::string tbl) {
  for (const char* v : {"regression", "improvement"})
    for (std::size_t pos = 0; (pos = tbl.find(std::string("<td>") + v + "</td>", pos)) != std::string::npos; pos += 4)
      tbl.replace(pos, 4, std::string("<td class=\"verdict-") + v + "\">");
  return tbl;
}

}  // namespace

std::string render_html(const ReportData& d) {
  std::string s = html_page_start("pipebench report", "pipebench report");
  const RegressionRule& rule = d.options.rule;
  s += fmt::format("<p class=\"meta\">generated {} by pipebench {} from {} results file(s){}; regression rule: at least "
                   "{} earlier files, Mann-Whitney U p &lt; {}, a median change above {:.0f}% and above {} &times; the "
                   "night-to-night spread, the newest run no noisier than {} &times; its history</p>",
                   utc_iso8601(), PIPEBENCH_VERSION, d.files.size(),
                   d.skipped.empty() ? "" : fmt::format(", {} skipped", d.skipped.size()), rule.min_history, rule.alpha,
                   100 * rule.threshold, rule.noise_k, rule.cv_factor);
  // The answer first: every run's verdict, failures and missing results first (in red).
  if (const VerdictTable v = verdict_table(d); !v.rows.empty())
    s += "<h2 id=\"verdicts\">Verdicts</h2><div class=\"verdicts\">" +
         colour_trend_verdicts(table(v.header, v.rows, v.row_classes, {false, false, false, false, false, true, true, true, true, false})) +
         "</div>";
  if (!d.options.references_path.empty()) {
    const ReferenceTable t = reference_table(d.reference_checks, d.reference_check_files);
    s += "<h2 id=\"references\">References (" + html_escape(d.options.references_path) + ")</h2>" +
         (t.rows.empty() ? std::string("<p>No job file with a completed run to judge.</p>") : table(t.header, t.rows, t.classes));
  }
  if (!d.missing_jobs.empty()) {
    s += "<div class=\"notice\" id=\"missing\"><b>Missing results</b> (expected jobs without a results file: the job "
         "failed before writing one, was cancelled, or never ran)<ul>";
    for (const auto& m : d.missing_jobs) s += "<li>" + html_escape(m) + "</li>";
    s += "</ul></div>";
  }
  if (!d.skipped.empty()) {
    s += "<div class=\"notice\" id=\"skipped\"><b>Skipped files</b><ul>";
    for (const auto& k : d.skipped) s += "<li><span class=\"path\">" + html_escape(k.path) + "</span>: " + html_escape(k.reason) + "</li>";
    s += "</ul></div>";
  }
  if (!d.trends.empty()) {
    s += "<h2 id=\"trends\">Trends and regressions</h2>";
    const std::vector<std::vector<std::string>> rows = trend_table_rows(d);
    std::string tbl = table(trend_table_header(), rows, std::vector<std::string>(rows.size()),
                            {false, false, false, false, true, true, true, true, false, false});
    s += colour_trend_verdicts(std::move(tbl));
    s += "<div class=\"charts\">";
    for (const auto& t : d.trends)
      if (shown_in_trends(t) && t.points.size() > 1) s += trend_chart(t);
    s += "</div>";
  }
  for (const auto& f : d.files) {
    s += fmt::format("<h2>Job {}</h2>", html_escape(job_name(f)));
    if (f.job && !f.job->description.empty()) s += "<p>" + html_escape(f.job->description) + "</p>";
    if (const std::string best = best_run_summary(f.result.runs); !best.empty())
      s += "<p class=\"best\"><b>" + html_escape(best) + "</b></p>";
    if (!f.job_error.empty()) s += "<p class=\"notice\">recorded workload not readable: " + html_escape(f.job_error) + "</p>";
    // The answer first (best run, the run table with speedups and decisions), then where it came from.
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> classes;
    for (const auto& v : f.runs) {
      rows.push_back(run_table_row(v));
      classes.push_back(v.run->status == RunStatus::ok ? "" : std::string(to_string(v.run->status)));
    }
    if (f.result.probe) {
      s += "<h3>Micro-batch probe</h3><p>" + html_escape(probe_summary(*f.result.probe)) + "</p>";
      s += table(probe_header(), probe_rows(*f.result.probe), {}, {true, false, true, true, false});
    }
    if (!f.runs.empty()) {
      // A column no run fills ("-" or empty in every row: no replicas, no
      // tensor ranks, no failure) is left out, so that the decision stays
      // within a 1400-px window (report.chromium measures it).
      std::vector<std::string> header = run_table_header();
      // run, status, mode | layout, micro-batch x m, global batch | schedule | the figures | speedup (words in
      // it: may wrap), decision, failure
      std::vector<bool> numeric{false, false, false, true, true, true, false, true, true, true, true, true, true, true, false};
      numeric.resize(header.size(), false);
      for (std::size_t c = header.size(); c-- > 0;) {
        const bool filled = std::any_of(rows.begin(), rows.end(), [c](const auto& row) {
          return c < row.size() && !row[c].empty() && row[c] != "-";
        });
        if (filled) continue;
        header.erase(header.begin() + static_cast<std::ptrdiff_t>(c));
        numeric.erase(numeric.begin() + static_cast<std::ptrdiff_t>(c));
        for (auto& row : rows)
          if (c < row.size()) row.erase(row.begin() + static_cast<std::ptrdiff_t>(c));
      }
      s += "<h3 id=\"runs-" + std::to_string(&f - d.files.data()) + "\">Runs</h3><table class=\"runs\"" +
           table(header, rows, classes, numeric).substr(std::string("<table").size());
    }
    const std::size_t index = static_cast<std::size_t>(&f - d.files.data());
    if (const std::string trace = report_trace_name(d, index); !trace.empty())
      s += fmt::format("<p>Timeline of every measured event, with its simulation beside it: <a href=\"{0}\">{0}</a> "
                       "(Trace Event Format: open it in ui.perfetto.dev or chrome://tracing)</p>",
                       html_escape(trace));
    std::vector<std::vector<std::string>> prov;
    for (const auto& [k, v] : provenance_rows(f)) prov.push_back({k, v});
    s += "<details><summary>Provenance</summary>" + table({"", ""}, prov) + "</details>";
    for (const auto& v : f.runs) s += run_section(f, v);
  }
  return s + "</body></html>\n";
}

}  // namespace pipebench
