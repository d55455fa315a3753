// Trends (docs/reports.md, "Trends and regressions"): every job file of the
// inputs and the history grouped into series, each input file judged against
// the files of its series created before it, with the alerts beside the
// step-time verdict.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/results/robust_stats.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/regression.hpp"
#include "report_common.hpp"

namespace pipebench::report_detail {

namespace {


// The judged (last) point against all earlier ones: Mann-Whitney U on the
// counted step times, significant when p < alpha and the median moved by
// more than the threshold (results/regression.hpp).
void judge(Trend& t, const ReportOptions& options) {
  std::vector<std::vector<double>> history;
  for (std::size_t i = 0; i + 1 < t.points.size(); ++i) history.push_back(t.points[i].counted_step_times);
  const RegressionVerdict v = judge_regression(history, t.points.back().counted_step_times, options.rule);
  t.verdict = v.verdict;
  t.reason = v.reason;
  t.history = v.history;
  t.p_value = v.p_value;
  t.change = v.change;
  t.night_spread = v.night_spread;
  t.newest_cv = v.newest_cv;
  t.history_cv = v.history_cv;
  t.bar = v.bar > 0.0 ? v.bar : options.rule.threshold;  // before a verdict: the threshold alone
}

// The workload text and fingerprint of run `r`: as recorded, else computed
// from the file's job_toml, else unknown.
std::pair<std::string, std::string> workload_of(const FileView& f, const RunResult& r) {
  if (!r.workload_fingerprint.empty()) return {r.workload, r.workload_fingerprint};
  if (f.job)
    if (const RunSpec* spec = f.job->find_run(r.spec.name)) {
      const WorkloadKeys keys = workload_keys(*f.job, *spec);
      return {workload_text(keys), workload_fingerprint(keys)};
    }
  return {"", "unknown"};
}

// A relative change of the newest value against the median of the earlier
// ones (NaN when there is nothing finite to compare with).
double change_vs_history(const std::vector<TrendPoint>& points, double TrendPoint::*field) {
  std::vector<double> earlier;
  for (std::size_t i = 0; i + 1 < points.size(); ++i)
    if (std::isfinite(points[i].*field)) earlier.push_back(points[i].*field);
  const double newest = points.back().*field;
  if (earlier.empty() || !std::isfinite(newest)) return kNaN;
  const double m = compute_stats(earlier).median;
  return m > 0.0 ? newest / m - 1.0 : kNaN;
}

// Peak memory per rank of the newest point against the point before it: any
// change is an alert naming the rank (exact on every backend).
void memory_alerts(Trend& t, const TrendPoint& prev, const TrendPoint& last) {
  const auto alert = [&](std::string what, double before, double after) {
    (after > before ? t.memory_increased : t.memory_decreased) = true;
    // Byte-exact: a 4 KiB growth of a 2.83 MiB peak reads the same in MiB.
    t.alerts.push_back(fmt::format("memory change: {} {} → {} ({}, {:+.1f}%)", what, format_bytes(before),
                                   format_bytes(after), format_byte_change(before, after),
                                   100.0 * (after - before) / std::max(1.0, before)));
  };
  if (last.peak_mem_per_rank.size() != prev.peak_mem_per_rank.size()) {
    if (last.peak_mem_bytes != prev.peak_mem_bytes) alert("peak", prev.peak_mem_bytes, last.peak_mem_bytes);
    return;
  }
  for (std::size_t rank = 0; rank < last.peak_mem_per_rank.size(); ++rank)
    if (last.peak_mem_per_rank[rank] != prev.peak_mem_per_rank[rank])
      alert(fmt::format("rank {} peak", rank), static_cast<double>(prev.peak_mem_per_rank[rank]),
            static_cast<double>(last.peak_mem_per_rank[rank]));
}

// Memory, numerics, bubble, throughput and slowest stage of the newest point
// against the history (Trend).
void add_alerts(Trend& t) {
  t.bubble_delta_pts = t.throughput_change = t.slowest_stage_change = kNaN;
  if (t.points.size() < 2) return;
  const TrendPoint& last = t.points.back();
  const TrendPoint& prev = t.points[t.points.size() - 2];
  memory_alerts(t, prev, last);
  if (!last.loss.empty() && !prev.loss.empty()) {
    const std::size_t n = std::min(last.loss.size(), prev.loss.size());
    for (std::size_t i = 0; i < n; ++i)
      if (!(last.loss[i] == prev.loss[i]) && !(std::isnan(last.loss[i]) && std::isnan(prev.loss[i]))) {
        t.numerics_changed = true;
        t.alerts.push_back(fmt::format("numerics changed: loss at step {} {:.17g} → {:.17g}", i, prev.loss[i], last.loss[i]));
        break;
      }
  }
  std::vector<double> earlier;
  for (std::size_t i = 0; i + 1 < t.points.size(); ++i)
    if (std::isfinite(t.points[i].bubble_measured)) earlier.push_back(t.points[i].bubble_measured);
  if (!earlier.empty() && std::isfinite(last.bubble_measured))
    t.bubble_delta_pts = 100.0 * (last.bubble_measured - compute_stats(earlier).median);
  t.throughput_change = change_vs_history(t.points, &TrendPoint::throughput);
  t.slowest_stage_change = change_vs_history(t.points, &TrendPoint::slowest_stage_s);
}

// One measurement's identity (TrendPoint::identity): its launch and its run's
// step times, hashed.
std::string point_identity(const FileView& f, const RunResult& r) {
  std::string key = created_utc(f) + '\n' + r.spec.name + '\n';
  for (const auto& h : f.result.hostnames) key += h + ',';
  for (const auto pid : f.result.pids) key += fmt::format("{},", pid);
  for (const double t : r.step_time_s) key += fmt::format("{:a},", t);
  return fnv1a64(key);
}

// A series: every file of one job, run, hardware and workload, deduplicated
// by identity (an input's point wins), in the documented order: creation
// time, then path.
struct Series {
  std::string job, run, fingerprint, workload_fingerprint;
  std::vector<TrendPoint> points;
};
using SeriesKey = std::tuple<std::string, std::string, std::string, std::string>;  // job, run, hardware, workload

// A trend of series `s` with its identity and no points yet.
Trend trend_of_series(const Series& s) {
  Trend t;
  t.job = s.job;
  t.run = s.run;
  t.fingerprint = s.fingerprint;
  t.workload_fingerprint = s.workload_fingerprint;
  return t;
}

// What changed into series `s` (its points sorted) from the newest point
// before its first of another series of the same job, run and hardware (""
// when it is the first). Every trend of `s` starts at that first point.
std::string changes_into(const Series& s, const std::map<SeriesKey, Series>& all) {
  const TrendPoint* before = nullptr;
  for (const auto& [key, o] : all) {
    if (o.workload_fingerprint == s.workload_fingerprint || o.job != s.job || o.run != s.run || o.fingerprint != s.fingerprint)
      continue;
    for (const auto& p : o.points)
      if (p.created_utc < s.points.front().created_utc && (!before || p.created_utc > before->created_utc)) before = &p;
  }
  if (!before) return "";
  const std::string changed =
      describe_changes(parse_workload_text(before->workload), parse_workload_text(s.points.front().workload));
  return changed.empty() ? "configuration not recorded" : changed;
}

// The trend of the point `judged` of `s` (an input): the points created
// strictly before it, then it.
Trend trend_of(const Series& s, std::size_t judged, const ReportOptions& options) {
  Trend t = trend_of_series(s);
  const TrendPoint& j = s.points[judged];
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    if (i == judged) continue;
    const TrendPoint& p = s.points[i];
    if (p.created_utc < j.created_utc) t.points.push_back(p);
    else if (p.created_utc == j.created_utc) ++t.same_second_files;
    else ++t.later_files;
  }
  t.points.push_back(j);
  judge(t, options);
  std::string left_out;
  if (t.same_second_files > 0) left_out += fmt::format("{} file(s) created in the same second", t.same_second_files);
  if (t.later_files > 0) left_out += fmt::format("{}{} later file(s)", left_out.empty() ? "" : ", ", t.later_files);
  if (!left_out.empty()) t.reason += (t.reason.empty() ? "" : "; ") + ("not its history: " + left_out);
  return t;
}

}  // namespace

FileDigest digest_of(const FileView& f) {
  FileDigest d;
  d.path = f.path;
  d.role = f.role;
  d.job = job_name(f);
  d.fingerprint = f.fingerprint;
  d.created_utc = created_utc(f);
  d.git_sha = attr(f.result.root_attrs, "git_sha");
  if (f.role != "job") return d;  // probe trials and summaries are never trended
  for (const auto& r : f.result.runs) {
    if (r.status != RunStatus::ok) continue;
    auto [workload, workload_fp] = workload_of(f, r);
    TrendPoint p{d.created_utc, f.path, std::move(workload), r.step_time.median, r.bubble_measured_median,
                 static_cast<double>(r.peak_mem_max_bytes), r.peak_mem_bytes, {}, r.throughput_samples_per_s,
                 r.slowest_stage_median_s, r.backend == BackendKind::sim ? std::vector<double>{} : r.loss, d.git_sha, false,
                 point_identity(f, r)};
    for (auto i : counted_steps(r)) p.counted_step_times.push_back(r.step_time_s[i]);
    d.runs.push_back({r.spec.name, std::move(workload_fp), std::move(p)});
  }
  return d;
}

// Trends: every job file (inputs and history; not probe trials), grouped into
// series by job, run, hardware and workload fingerprint; each input file's
// point judged against the points before it. A series without an input file
// is shown as "history only", never judged.
std::vector<Trend> build_trends(const std::vector<FileView>& files, const std::vector<FileDigest>& history,
                                const ReportOptions& options) {
  std::map<SeriesKey, Series> groups;
  auto add_points = [&](const FileDigest& f, bool input) {
    for (const auto& r : f.runs) {
      Series& s = groups[{f.job, r.run, f.fingerprint, r.workload_fingerprint}];
      s.job = f.job;
      s.run = r.run;
      s.fingerprint = f.fingerprint;
      s.workload_fingerprint = r.workload_fingerprint;
      // One measurement counts once: inputs come first, so an input keeps its point.
      if (std::any_of(s.points.begin(), s.points.end(), [&](const TrendPoint& q) { return q.identity == r.point.identity; }))
        continue;
      s.points.push_back(r.point);
      s.points.back().path = f.path;
      s.points.back().input = input;
    }
  };
  for (const auto& f : files) add_points(digest_of(f), true);
  for (const auto& f : history) add_points(f, false);
  for (auto& [key, s] : groups)
    std::sort(s.points.begin(), s.points.end(), [](const TrendPoint& a, const TrendPoint& b) {
      return std::tie(a.created_utc, a.path) < std::tie(b.created_utc, b.path);
    });
  std::vector<Trend> trends;
  for (const auto& [key, s] : groups) {
    std::vector<std::size_t> inputs;
    for (std::size_t i = 0; i < s.points.size(); ++i)
      if (s.points[i].input) inputs.push_back(i);
    if (inputs.empty()) {
      Trend t = trend_of_series(s);
      t.points = s.points;
      t.history_only = true;
      t.latest = false;
      t.verdict = "history only";
      t.reason = "no file of this series among the results: shown, not judged";
      trends.push_back(std::move(t));
      continue;
    }
    const std::string changes = changes_into(s, groups);  // one answer for every trend of the series
    for (const std::size_t i : inputs) {
      Trend t = trend_of(s, i, options);
      t.latest = i == inputs.back();
      add_alerts(t);
      t.changes = changes;
      if (!t.changes.empty() && t.points.size() < 2) t.verdict = "new series";
      trends.push_back(std::move(t));
    }
  }
  return trends;
}

}  // namespace pipebench::report_detail
