#include "report_common.hpp"

#include <algorithm>
#include <cmath>

#include <limits>

#include <fmt/format.h>

#include "pipebench/core/device_preset.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/results/metrics.hpp"

namespace pipebench::report_detail {

std::string format_value(double v, const std::string& unit) {
  if (std::isnan(v)) return "-";
  if (unit == "s") return format_seconds(v);
  if (unit == "bytes") return format_bytes(v);
  if (unit == "fraction") return fmt::format("{:.2f}%", 100.0 * v);  // a share, as a percentage
  if (unit == "ratio") return fmt::format("{:.3g}", v);
  if (unit == "samples") return fmt::format("{:.0f}", v);
  return fmt::format("{:.1f} {}", v, unit);
}

std::string format_delta(double b, double p, const std::string& unit) {
  if (!std::isfinite(b) || !std::isfinite(p)) return "";
  if (unit == "fraction") return fmt::format("{:+.1f} pts", 100.0 * (p - b));  // a share: the difference, in points
  if (b == 0.0) return "";
  return fmt::format("{:+.1f}%", 100.0 * (p - b) / std::fabs(b));
}

std::string attr(const std::map<std::string, std::string>& m, const char* key) {
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

std::string created_utc(const FileView& f) { return attr(f.result.root_attrs, "created_utc"); }

std::vector<std::size_t> counted_steps(const RunResult& r) {
  std::vector<std::size_t> k;
  for (std::size_t i = 0; i < r.step_time_s.size() && i < r.is_warmup.size(); ++i)
    if (!r.is_warmup[i]) k.push_back(i);
  return k;
}

std::string job_name(const FileView& f) {
  const std::string n = attr(f.result.root_attrs, "job_name");
  return n.empty() ? "?" : n;
}

std::optional<RunPlan> plan_of(const FileView& f, const RunResult& r) {
  if (!f.job) return std::nullopt;
  const RunSpec* spec = f.job->find_run(r.spec.name);
  if (!spec) return std::nullopt;
  try {
    return plan_run(*f.job, *spec);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

// The compute rate a run measured itself: the FLOPs its actions executed per
// step (the plan's, recomputation included) over the seconds every rank
// spent in forward and backward per counted step; 0 when nothing was timed.
double measured_flops_per_s(const RunPlan& plan, const RunResult& r) {
  double seconds = 0.0;
  const std::vector<std::size_t> steps = counted_steps(r);
  for (const std::size_t k : steps)
    for (const auto* per_rank : {&r.forward_s, &r.backward_s})
      if (k < per_rank->size())
        for (const double s : (*per_rank)[k]) seconds += s;
  seconds /= static_cast<double>(steps.size());
  const double flops = step_flops(plan, true);
  return seconds > 0.0 && flops > 0.0 ? flops / seconds : 0.0;
}

}  // namespace

std::optional<Prediction> prediction_of(const FileView& f, const RunResult& r, const std::optional<RunPlan>& plan) {
  if (!plan || !f.job || r.status != RunStatus::ok || counted_steps(r).empty() || !plan_matches(*plan, r))
    return std::nullopt;
  const DeviceSpec& device = f.job->device;
  Prediction p;
  const RunPlan* basis = &*plan;
  std::optional<RunPlan> calibrated;
  if (device.preset) {
    p.basis = fmt::format("the hardware time model of {} (docs/time-model.md)", device_model_name(device));
  } else if (r.backend == BackendKind::sim) {
    p.basis = fmt::format("the sim backend's modelled speed, device.sim_flops_per_s = {:.3g} FLOP/s", device.sim_flops_per_s);
  } else if (const double rate = measured_flops_per_s(*plan, r); rate > 0.0) {
    // No device model describes this machine: sim_flops_per_s is a modelled
    // speed, and the step's error against it (-96% on the cpu default job)
    // measured that figure, not the planner. Planned again at the run's own
    // measured compute rate, what is left is the schedule's, the transfers'
    // and the optimizer's share: an error that means something.
    Job job = *f.job;
    job.device.sim_flops_per_s = rate;
    if (const RunSpec* spec = job.find_run(r.spec.name)) try {
        calibrated = plan_run(job, *spec);
        basis = &*calibrated;
      } catch (const std::exception&) {
      }
    p.basis = calibrated ? fmt::format("this run's own measured compute rate, {:.3g} FLOP/s per rank (its forward and "
                                       "backward FLOPs over their measured time; no device model describes this machine), "
                                       "so the step's error is the schedule's, the transfers' and the optimizer's",
                                       rate)
                         : "device.sim_flops_per_s, a modelled speed, not this machine's";
  } else {
    p.basis = fmt::format("device.sim_flops_per_s = {:.3g} FLOP/s, a modelled speed, not this machine's: the step's "
                          "error measures that figure (a GPU: set [device] preset for its time model)",
                          device.sim_flops_per_s);
  }
  std::int64_t peak = 0;
  for (const StagePlan& sp : basis->stages) peak = std::max(peak, sp.total_bytes);
  p.rows.push_back({"step time (median)", "s", basis->iteration_s, r.step_time.median});
  p.rows.push_back({"peak memory, largest rank", "bytes", static_cast<double>(peak), static_cast<double>(r.peak_mem_max_bytes)});
  if (r.spec.pipeline_size > 1) p.rows.push_back({"bubble", "fraction", basis->simulated.bubble, r.bubble_measured_median});
  return p;
}

bool plan_matches(const RunPlan& plan, const RunResult& r) {
  return plan.schedule.num_ranks == r.spec.pipeline_size && plan.schedule.num_microbatches == r.spec.num_microbatches &&
         plan.schedule.chunks_per_rank == r.spec.virtual_stages_per_rank;
}

const Trend* trend_for(const ReportData& d, const FileView& f, const RunResult& r) {
  // The file's own verdict: the trend that judged it.
  for (const auto& t : d.trends)
    if (!t.history_only && t.run == r.spec.name && t.points.back().path == f.path) return &t;
  return nullptr;
}

namespace {
// A verdict's reason on one line of at most about `most` characters, cut at a
// word (the whole message is in the job's section below).
std::string one_line(const std::string& text, std::size_t most = 100) {
  std::string s = text.substr(0, text.find('\n'));
  if (s.size() <= most) return s;
  std::size_t cut = s.rfind(' ', most);
  if (cut == std::string::npos || cut < most / 2) cut = most;
  while (cut > 0 && (s[cut - 1] == ',' || s[cut - 1] == ';' || s[cut - 1] == ':')) --cut;
  return s.substr(0, cut) + " …";
}
}  // namespace

VerdictTable verdict_table(const ReportData& d) {
  VerdictTable v;
  v.header = {"job", "run", "status", "decision", "why", "speedup vs baseline (95% interval)", "slowest stage (median busy)",
              "bubble measured (% of step)", "peak memory (% of capacity)", "trend"};
  std::vector<std::pair<int, std::size_t>> order;  // (0 failure, 1 other), row
  for (const auto& m : d.missing_jobs) {
    v.rows.push_back({m, "-", "missing", "-", "no results file: the job failed before writing one, was cancelled or never ran",
                      "-", "-", "-", "-", "-"});
    v.row_classes.push_back("failed");
    order.push_back({0, v.rows.size() - 1});
  }
  for (const auto& f : d.files) {
    if (f.role != "job") continue;
    for (const auto& rv : f.runs) {
      const RunResult& r = *rv.run;
      const std::string why = one_line(r.status == RunStatus::failed    ? fmt::format("{}: {}", failure_origin(r), r.failure_message)
                                       : r.status == RunStatus::skipped ? r.failure_message
                                                                        : decision_headline(r));
      const double worst = peak_capacity_fraction(r);
      const Trend* t = trend_for(d, f, r);
      v.rows.push_back({job_name(f), r.spec.name, std::string(to_string(r.status)), r.decision, why, format_speedup(r),
                        rv.slowest_stage < 0 ? "-"
                                             : fmt::format("rank {}: {}", rv.slowest_stage, format_seconds(r.slowest_stage_median_s)),
                        format_value(r.bubble_measured_median, "fraction"),
                        r.status == RunStatus::skipped || std::isnan(worst)
                            ? "-"
                            : fmt::format("{} ({:.0f}%)", format_bytes(static_cast<double>(r.peak_mem_max_bytes)), 100 * worst),
                        t ? verdict_text(*t) : "-"});
      v.row_classes.push_back(r.status == RunStatus::ok ? "" : std::string(to_string(r.status)));
      order.push_back({r.status == RunStatus::ok ? 1 : 0, v.rows.size() - 1});
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  VerdictTable sorted{v.header, {}, {}};
  for (const auto& [rank, i] : order) {
    sorted.rows.push_back(std::move(v.rows[i]));
    sorted.row_classes.push_back(v.row_classes[i]);
  }
  return sorted;
}

std::vector<std::string> run_table_header() {
  return {"run", "status", "mode", "stages × replicas (× tensor ranks)", "micro-batch (samples) × m", "global batch", "schedule",
          "step time (median)", "bubble measured (% of step)", "bubble simulated (%)", "bubble analytic (%)",
          "gradient all-reduce exposed (median, slowest rank)", "peak memory (max over ranks)",
          "tensor-parallel collectives (median, slowest rank)",
          "speedup vs baseline (95% interval)", "decision", "failure"};
}

std::vector<std::string> run_table_row(const RunView& v) {
  const RunResult& r = *v.run;
  std::string failure;
  if (r.status == RunStatus::failed)
    failure = fmt::format("{}: {}", failure_origin(r), r.failure_message);
  else if (r.status == RunStatus::skipped)
    failure = r.failure_message;
  const double exposed = grad_sync_summary(r).exposed_s;  // data parallelism only (else NaN)
  return {r.spec.name,
          std::string(to_string(r.status)),
          std::string(to_string(r.spec.mode)),
          r.spec.tensor_parallel > 1 ? fmt::format("{} × {} × {}{}", r.spec.pipeline_size, r.spec.data_parallel,
                                                   r.spec.tensor_parallel, r.spec.sequence_parallel ? " (SP)" : "")
          : r.spec.data_parallel > 1 ? fmt::format("{} × {}", r.spec.pipeline_size, r.spec.data_parallel)
                                     : std::to_string(r.spec.pipeline_size),
          fmt::format("{} × {}", r.spec.micro_batch_size, r.spec.num_microbatches),
          std::to_string(r.spec.global_batch()),
          r.schedule_name + (r.spec.virtual_stages_per_rank > 1 ? fmt::format(" (v = {})", r.spec.virtual_stages_per_rank)
                                                                : std::string()),
          format_value(r.step_time.median, "s"),
          format_value(r.bubble_measured_median, "fraction"),
          format_value(r.bubble_simulated, "fraction"),
          format_value(r.bubble_analytic, "fraction"),
          std::isnan(exposed) ? "-" : format_value(exposed, "s"),
          r.status == RunStatus::skipped ? "-" : format_bytes(static_cast<double>(r.peak_mem_max_bytes)),
          std::isnan(tensor_comm_median_s(r)) ? "-" : format_value(tensor_comm_median_s(r), "s"),
          format_speedup(r),
          r.decision,
          failure};
}

std::vector<std::string> probe_header() {
  return {"micro_batch_size", "outcome", "exit", "seconds", "peak memory per rank"};
}

std::vector<std::vector<std::string>> probe_rows(const ProbeResult& p) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : p.trials) {
    std::string peaks;
    for (auto b : t.peak_mem_bytes)
      if (b > 0) peaks += (peaks.empty() ? "" : ", ") + format_bytes(static_cast<double>(b));
    rows.push_back({std::to_string(t.micro_batch_size), std::string(to_string(t.outcome)), std::to_string(t.exit_code),
                    fmt::format("{:.1f}", t.seconds), peaks.empty() ? "-" : peaks});
  }
  return rows;
}

std::string probe_summary(const ProbeResult& p) {
  return fmt::format("run {}: max_micro_batch = {}, recommended_micro_batch = {} (about 80%); searched [{}, {}] with {} "
                     "step(s) per trial; stop: {}",
                     p.options.run_name, p.max_micro_batch, p.recommended_micro_batch, p.options.lo, p.options.hi,
                     p.options.steps, p.stop_reason);
}

std::vector<std::pair<std::string, std::string>> provenance_rows(const FileView& f) {
  const auto& root = f.result.root_attrs;
  const auto& p = f.result.provenance_attrs;
  std::string hosts;
  for (std::size_t i = 0; i < f.result.hostnames.size(); ++i)
    hosts += fmt::format("{}{} (pid {})", i ? ", " : "", f.result.hostnames[i], i < f.result.pids.size() ? f.result.pids[i] : 0);
  std::string overrides;
  for (const auto& o : f.result.overrides) overrides += (overrides.empty() ? "" : " ") + ("--set " + o);
  std::string reproduces;
  if (const std::string id = attr(root, "reproduces_id"); !id.empty()) {
    std::string deviations;
    for (const auto& o : f.result.deviations) deviations += " --set " + o;
    reproduces = fmt::format("{} (results_id {}, sha256 {}){}", attr(root, "reproduces_path"), id,
                             attr(root, "reproduces_sha256"), deviations.empty() ? "" : "; deviations:" + deviations);
  }
  return {{"file", f.path},
          {"sha256", f.sha256},
          {"results id", attr(root, "results_id")},
          {"reproduces", reproduces},
          {"system", attr(root, "system")},
          {"created (UTC)", attr(root, "created_utc")},
          {"status / evidence", f.result.status + " / " + f.result.evidence_level},
          {"launch", f.result.launch_status == "complete"
                         ? std::string("complete")
                         : "INCOMPLETE (" + f.result.launch_status +
                               "): the launch was interrupted, lost a rank or was killed; completed runs are kept"},
          {"label", attr(root, "label")},
          {"command line", attr(root, "command_line")},
          {"overrides", overrides},
          {"pipebench", attr(root, "tool_version") + " (git " + attr(root, "git_sha") + ")"},
          {"hosts (per rank)", hosts},
          {"CPU", attr(p, "cpu_model")},
          {"GPUs (per rank)", attr(p, "gpu_names")},
          {"GPU UUIDs / PCI bus ids",
           attr(p, "gpu_uuids").empty() ? "" : attr(p, "gpu_uuids") + " / " + attr(p, "gpu_pci_bus_ids")},
          {"transport", attr(p, "transport")},
          {"driver / CUDA / NCCL", attr(p, "driver_version") + " / " + attr(p, "cuda_version") + " / " + attr(p, "nccl_version")},
          {"MPI", attr(p, "mpi_library_version")},
          {"compiler", attr(p, "compiler") + " " + attr(p, "compiler_flags")},
          {"BLAS", attr(p, "blas")},
          {"Slurm job / nodes", attr(p, "slurm_job_id") + " " + attr(p, "slurm_job_nodelist")},
          {"environment (allow-listed)", attr(p, "environment")},
          {"hardware fingerprint", f.fingerprint}};
}

std::string trend_evidence(const Trend& t) {
  std::string s = t.reason;
  if (std::isfinite(t.bubble_delta_pts)) s += fmt::format("; bubble {:+.1f} pts", t.bubble_delta_pts);
  if (std::isfinite(t.throughput_change)) s += fmt::format("; throughput {:+.1f}%", 100.0 * t.throughput_change);
  if (std::isfinite(t.slowest_stage_change)) s += fmt::format("; slowest stage {:+.1f}%", 100.0 * t.slowest_stage_change);
  for (const auto& a : t.alerts) s += "; " + a;
  return s;
}

bool shown_in_trends(const Trend& t) { return t.latest || t.history_only; }

std::vector<std::string> trend_table_header() {
  return {"job", "run", "hardware", "workload", "files", "newest median step", "change", "p-value", "verdict", "evidence"};
}

std::vector<std::vector<std::string>> trend_table_rows(const ReportData& d) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : d.trends) {
    if (!shown_in_trends(t)) continue;
    const bool judged = t.points.size() > 1 && !t.history_only;
    rows.push_back({t.job, t.run, t.fingerprint, t.workload_fingerprint, std::to_string(t.points.size()),
                    format_seconds(t.points.back().step_time_median_s), judged ? fmt::format("{:+.1f}%", 100 * t.change) : "-",
                    judged ? fmt::format("{:.3g}", t.p_value) : "-", verdict_text(t), trend_evidence(t)});
  }
  return rows;
}

std::string verdict_text(const Trend& t) {
  std::string v = t.changes.empty() ? t.verdict : fmt::format("{} ({})", t.verdict, t.changes);
  // What fails a nightly besides the step time, beside its verdict: a
  // "no change" row must not hide a memory or numerics alert.
  if (t.memory_increased) v += "; memory grew";
  else if (t.memory_decreased) v += "; memory shrank";
  if (t.numerics_changed) v += "; numerics changed";
  return v;
}

// Text from results files (names, descriptions, messages, paths) as
// Markdown that renders as the same text: no raw HTML gets through (a
// renderer would run it), no backtick can close a code span, no bracket
// opens a link ("[x](javascript:...)" from a job string), and control
// characters (terminal escapes) become spaces. Newlines stay.
std::string md_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '`') out += "&#96;";
    // Link and image syntax: a job string "[x](javascript:...)" stays text.
    else if (c == '[' || c == ']') (out += '\\') += c;
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : md_text(s)) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += "<br>";
    else out += c;
  }
  return out;
}

std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "|";
  for (const auto& h : header) s += " " + md_cell(h) + " |";
  s += "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) s += " --- |";
  s += "\n";
  for (const auto& r : rows) {
    s += "|";
    for (const auto& c : r) s += " " + md_cell(c) + " |";
    s += "\n";
  }
  return s + "\n";
}

// An HTML table, every cell escaped.
std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::string>& row_classes, const std::vector<bool>& numeric) {
  std::string s = "<table><thead><tr>";
  for (const auto& h : header) s += "<th>" + html_escape(h) + "</th>";
  s += "</tr></thead><tbody>";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    s += i < row_classes.size() && !row_classes[i].empty() ? "<tr class=\"" + row_classes[i] + "\">" : "<tr>";
    for (std::size_t c = 0; c < rows[i].size(); ++c)
      s += (c < numeric.size() && numeric[c] ? "<td class=\"num\">" : "<td>") + html_escape(rows[i][c]) + "</td>";
    s += "</tr>";
  }
  return s + "</tbody></table>";
}

ReferenceTable reference_table(const std::vector<ReferenceCheck>& checks, const std::vector<std::string>& files) {
  ReferenceTable t;
  if (!files.empty()) t.header.push_back("file");
  for (const char* h : {"run", "figure", "system (matched by)", "verdict", "evidence"}) t.header.push_back(h);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ReferenceCheck& c = checks[i];
    std::vector<std::string> row;
    if (!files.empty()) row.push_back(i < files.size() ? files[i] : "");
    for (std::string cell : {c.job + " / " + c.run, c.figure.empty() ? std::string("-") : c.figure,
                             c.system.empty() ? std::string("-") : fmt::format("{} ({})", c.system, c.matched_by), c.verdict,
                             c.evidence})
      row.push_back(std::move(cell));
    t.rows.push_back(std::move(row));
    t.classes.push_back(c.verdict == "outside" ? "failed" : "");
  }
  return t;
}

void write_reference_checks(JsonWriter& w, const std::vector<ReferenceCheck>& checks, const std::vector<std::string>& files) {
  w.begin_array();
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ReferenceCheck& c = checks[i];
    w.begin_object();
    if (i < files.size()) w.field("file", files[i]);
    w.field("job", c.job).field("run", c.run).field("figure", c.figure).field("unit", c.unit);
    w.field("system", c.system).field("matched_by", c.matched_by).field("measured", c.measured);
    w.field("reference", c.reference.value).field("lower", c.reference.lower).field("upper", c.reference.upper);
    w.field("where", c.reference.where).field("verdict", c.verdict).field("evidence", c.evidence).end_object();
  }
  w.end_array();
}

std::string html_page_start(const std::string& title, const std::string& heading) {
  return "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<title>" + html_escape(title) + "</title><style>" + kReportCss + "</style></head><body><h1>" +
         html_escape(heading) + "</h1>";
}

}  // namespace pipebench::report_detail

namespace pipebench {

std::vector<std::vector<std::string>> prediction_cells(const Prediction& p) {
  using report_detail::format_delta;
  using report_detail::format_value;
  std::vector<std::vector<std::string>> rows;
  for (const PredictionRow& row : p.rows)
    rows.push_back({row.metric, format_value(row.planned, row.unit), format_value(row.measured, row.unit),
                    format_delta(row.measured, row.planned, row.unit)});
  return rows;
}

}  // namespace pipebench
