// report.md (the same tables as the HTML, for CI logs and wikis) and
// summary.json (one record per run per file, for dashboards).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/json.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/results/metrics.hpp"
#include "report_common.hpp"

namespace pipebench {

using namespace report_detail;

namespace {


}  // namespace

std::string render_markdown(const ReportData& d) {
  std::string s = fmt::format("# pipebench report\n\nGenerated {} by pipebench {} from {} results file(s).\n\n", utc_iso8601(),
                              PIPEBENCH_VERSION, d.files.size());
  if (const VerdictTable v = verdict_table(d); !v.rows.empty()) s += "## Verdicts\n\n" + md_table(v.header, v.rows);
  if (!d.options.references_path.empty()) {
    const ReferenceTable t = reference_table(d.reference_checks, d.reference_check_files);
    s += "## References (" + md_text(d.options.references_path) + ")\n\n" +
         (t.rows.empty() ? std::string("No job file with a completed run to judge.\n") : md_table(t.header, t.rows)) + "\n";
  }
  if (!d.missing_jobs.empty()) {
    s += "**Missing results** (expected jobs without a results file)\n\n";
    for (const auto& m : d.missing_jobs) s += "- " + md_text(m) + "\n";
    s += "\n";
  }
  if (!d.skipped.empty()) {
    s += "**Skipped files**\n\n";
    for (const auto& k : d.skipped) s += fmt::format("- `{}`: {}\n", md_text(k.path), md_text(k.reason));
    s += "\n";
  }
  if (!d.trends.empty()) {
    s += "## Trends and regressions\n\n";
    s += md_table(trend_table_header(), trend_table_rows(d));
  }
  for (const auto& f : d.files) {
    s += fmt::format("## Job {}\n\n", md_text(job_name(f)));
    if (f.job && !f.job->description.empty()) s += md_text(f.job->description) + "\n\n";
    if (const std::string best = best_run_summary(f.result.runs); !best.empty()) s += "**" + md_text(best) + "**\n\n";
    std::vector<std::vector<std::string>> prov;
    for (const auto& [k, v] : provenance_rows(f))
      if (!v.empty() && k != "environment (allow-listed)") prov.push_back({k, v});
    s += md_table({"provenance", ""}, prov);
    if (f.result.probe)
      s += "### Micro-batch probe\n\n" + md_text(probe_summary(*f.result.probe)) + "\n\n" +
           md_table(probe_header(), probe_rows(*f.result.probe));
    std::vector<std::vector<std::string>> rows;
    for (const auto& v : f.runs) rows.push_back(run_table_row(v));
    if (!rows.empty()) s += "### Runs\n\n" + md_table(run_table_header(), rows);
    for (const auto& v : f.runs) {
      const RunResult& r = *v.run;
      if (v.comparison.empty() && r.decision_reasons.empty()) continue;
      s += fmt::format("### Run {}{}\n\n", md_text(r.spec.name), v.baseline ? " vs baseline " + md_text(v.baseline->spec.name) : "");
      if (!v.comparison.empty()) {
        std::vector<std::vector<std::string>> cmp;
        for (const auto& c : v.comparison)
          cmp.push_back({c.metric, format_value(c.baseline, c.unit), format_value(c.pipeline, c.unit),
                         format_delta(c.baseline, c.pipeline, c.unit), c.note});
        s += md_table({"metric", "single-stage baseline", "pipeline", "Δ", "note"}, cmp);
      }
      s += fmt::format("**Decision: {}**\n\n", md_text(r.decision));
      for (const auto& why : r.decision_reasons) s += "- " + md_text(why) + "\n";
      for (const auto& a : v.advice) s += "- next: " + md_text(a) + "\n";
      if (!v.rolling_step_time_s.empty()) {
        s += fmt::format("- mean of the last {} counted steps, first → last: step time {} → {}", kRollingWindow,
                         format_seconds(v.rolling_step_time_s.front()), format_seconds(v.rolling_step_time_s.back()));
        if (!v.rolling_loss.empty())
          s += fmt::format("; loss {:.6g} → {:.6g}", v.rolling_loss.front(), v.rolling_loss.back());
        s += "\n";
      }
      s += "\n";
      if (v.prediction)
        s += "The plan beside the measurement (the step predicted from " + md_text(v.prediction->basis) + "):\n\n" +
             md_table({"figure", "planned", "measured", "error of the plan"}, prediction_cells(*v.prediction));
      if (const auto& plan = v.plan) s += md_table(partition_table_header(*plan), partition_table_rows(*plan));
    }
  }
  return s;
}

namespace {

// Data parallelism: the slowest rank's median all-reduce, its exposed part
// and its bus bandwidth over the counted steps; null without replicas.
void grad_sync_record(JsonWriter& w, const RunResult& r) {
  w.key("grad_sync");
  if (r.grad_sync_s.empty()) {
    w.null();
    return;
  }
  const GradSyncSummary g = grad_sync_summary(r);
  w.begin_object().field("sync_median_s", g.sync_s).field("exposed_median_s", g.exposed_s);
  w.field("exposed_reduce_median_s", g.exposed_reduce_s).field("exposed_gather_median_s", g.exposed_gather_s);
  w.field("bus_bandwidth_bytes_per_s", g.bus_bandwidth).end_object();
}

// Tensor parallelism: the slowest rank's median time in its group's
// collectives per step over the counted steps; null with t = 1.
void tensor_comm_record(JsonWriter& w, const RunResult& r) {
  w.key("tensor_comm");
  if (r.tensor_comm_s.empty()) {
    w.null();
    return;
  }
  w.begin_object().field("median_s", tensor_comm_median_s(r)).end_object();
}

// Seed 004's record of one run (docs/reports.md, "summary.json"): workload,
// hardware, metrics (per rank and max), evidence level, failure, decision.
void seed004_record(JsonWriter& w, const FileView& f, const RunView& v) {
  const RunResult& r = *v.run;
  const RunSpec& s = r.spec;
  w.key("workload").begin_object();
  w.field("job", job_name(f)).field("run", s.name).field("mode", std::string(to_string(s.mode)));
  w.field("pipeline_size", s.pipeline_size).field("data_parallel", s.data_parallel);
  w.field("tensor_parallel", s.tensor_parallel).field("sequence_parallel", s.sequence_parallel);
  w.field("grad_sync", std::string(to_string(s.grad_sync)))
      .field("optimizer_sharding", std::string(to_string(s.optimizer_sharding)));
  w.field("micro_batch_size", s.micro_batch_size);
  w.field("num_microbatches", s.num_microbatches).field("global_batch", s.global_batch());
  w.field("schedule", r.schedule_name).field("virtual_stages_per_rank", s.virtual_stages_per_rank);
  w.field("recompute", std::string(to_string(s.recompute))).field("dtype", std::string(to_string(r.dtype)));
  w.array("layers_per_stage", r.layers_per_stage).array("stage_rank", r.stage_rank);
  w.field("warmup", r.warmup).field("repeats", r.repeats).field("fingerprint", r.workload_fingerprint);
  w.key("model");
  if (f.job) {
    const ModelSpec& m = f.job->model;
    w.begin_object().field("kind", std::string(to_string(m.kind))).field("hidden", m.hidden).field("layers", m.layers);
    w.field("heads", m.heads).field("ffn_hidden", m.ffn_hidden).field("seq_len", m.seq_len).field("vocab", m.vocab);
    if (m.kind == ModelKind::llama) w.field("kv_heads", m.kv_heads);
    w.end_object();
  } else {
    w.null();
  }
  w.end_object();

  w.key("hardware").begin_object();
  w.field("fingerprint", f.fingerprint).field("backend", std::string(to_string(r.backend)));
  w.field("world_size", static_cast<std::int64_t>(f.result.hostnames.size())).array("hostnames", f.result.hostnames);
  w.array("memory_capacity_bytes", r.memory_capacity_bytes);
  w.end_object();

  w.key("metrics").begin_object();
  w.field("counted_steps", static_cast<std::int64_t>(v.counted_step_index.size()));
  grad_sync_record(w, r);
  tensor_comm_record(w, r);
  w.key("step_time_s").begin_object().field("median", r.step_time.median).field("min", r.step_time.min);
  w.field("max", r.step_time.max).field("p90", r.step_time.p90).field("cv", r.step_time.cv).end_object();
  w.field("throughput_samples_per_s", r.throughput_samples_per_s).field("tokens_per_s", v.tokens_per_s);
  w.key("bubble").begin_object().field("measured", r.bubble_measured_median).field("analytic", r.bubble_analytic);
  w.field("simulated", r.bubble_simulated).end_object();
  w.key("slowest_stage").begin_object().field("rank", v.slowest_stage).field("median_s", r.slowest_stage_median_s);
  w.end_object();
  w.array("busy_median_s", v.busy_median_s);
  w.key("peak_mem_bytes").begin_object().field("max", r.peak_mem_max_bytes).array("per_rank", r.peak_mem_bytes);
  w.key("per_rank_by_category").begin_object();
  for (int c = 0; c < kNumMemCategories; ++c)
    w.array(to_string(static_cast<MemCategory>(c)), r.peak_mem_by_category[static_cast<std::size_t>(c)]);
  w.end_object().end_object();
  w.key("loss").begin_object().field("final", r.loss.empty() ? std::numeric_limits<double>::quiet_NaN() : r.loss.back());
  w.field("max_rel_dev_vs_baseline", r.loss_max_rel_dev).end_object();
  w.field("clip_rate", v.clip_rate).field("short_run", v.short_run);
  w.array("rolling_step_time_s", v.rolling_step_time_s).array("rolling_loss", v.rolling_loss);
  w.key("speedup").begin_object().field("median", r.speedup).field("low", r.speedup_low).field("high", r.speedup_high);
  w.field("per_sample", r.speedup_per_sample);
  w.end_object();
  w.end_object();

  w.field("evidence_level", f.result.evidence_level);
  w.key("failure");
  if (r.status == RunStatus::failed || r.status == RunStatus::skipped) {
    w.begin_object();
    w.field("kind", r.status == RunStatus::skipped ? std::string("skipped") : std::string(to_string(r.failure_kind)));
    w.field("rank", r.failing_rank).field("message", r.failure_message).end_object();
  } else {
    w.null();
  }
}

}  // namespace

std::string render_summary_json(const ReportData& d) {
  JsonWriter w;
  w.begin_object();
  w.field("tool", "pipebench report").field("tool_version", PIPEBENCH_VERSION).field("generated_utc", utc_iso8601());
  w.key("skipped").begin_array();
  for (const auto& k : d.skipped) w.begin_object().field("path", k.path).field("reason", k.reason).end_object();
  w.end_array();
  w.key("runs").begin_array();
  for (const auto& f : d.files)
    for (const auto& v : f.runs) {
      const RunResult& r = *v.run;
      w.begin_object();
      w.field("file", f.path).field("file_sha256", f.sha256).field("results_id", attr(f.result.root_attrs, "results_id"));
      w.field("job", job_name(f)).field("created_utc", attr(f.result.root_attrs, "created_utc"));
      w.field("label", attr(f.result.root_attrs, "label"));
      w.field("launch_status", f.result.launch_status);
      w.field("run", r.spec.name).field("status", std::string(to_string(r.status)));
      w.field("failure_kind", std::string(to_string(r.failure_kind))).field("failure_message", r.failure_message);
      w.field("mode", std::string(to_string(r.spec.mode))).field("pipeline_size", r.spec.pipeline_size);
      w.field("micro_batch_size", r.spec.micro_batch_size).field("num_microbatches", r.spec.num_microbatches);
      w.field("schedule", r.schedule_name).field("baseline", r.baseline);
      w.field("step_time_median_s", r.step_time.median).field("step_time_cv", r.step_time.cv);
      w.field("throughput_samples_per_s", r.throughput_samples_per_s).field("tokens_per_s", v.tokens_per_s);
      w.field("slowest_stage", v.slowest_stage).field("slowest_stage_median_s", r.slowest_stage_median_s);
      w.field("bubble_measured", r.bubble_measured_median).field("bubble_analytic", r.bubble_analytic);
      w.field("bubble_simulated", r.bubble_simulated).field("peak_mem_max_bytes", r.peak_mem_max_bytes);
      w.field("loss_max_rel_dev", r.loss_max_rel_dev).field("clip_rate", v.clip_rate);
      w.field("decision", r.decision).array("decision_reasons", r.decision_reasons).array("advice", v.advice);
      w.field("speedup", r.speedup).field("speedup_low", r.speedup_low).field("speedup_high", r.speedup_high);
      w.field("speedup_per_sample", r.speedup_per_sample);
      w.key("prediction");
      if (v.prediction) {
        w.begin_object().field("basis", v.prediction->basis).key("rows").begin_array();
        for (const PredictionRow& row : v.prediction->rows)
          w.begin_object().field("metric", row.metric).field("unit", row.unit).field("planned", row.planned)
              .field("measured", row.measured).end_object();
        w.end_array().end_object();
      } else {
        w.null();
      }
      seed004_record(w, f, v);
      if (const Trend* t = trend_for(d, f, r)) {
        w.key("trend").begin_object();
        w.field("files", static_cast<std::int64_t>(t->points.size())).field("verdict", t->verdict);
        w.field("judged_file", t->points.back().path).field("latest", t->latest);
        w.field("same_second_files", static_cast<std::int64_t>(t->same_second_files));
        w.field("later_files", static_cast<std::int64_t>(t->later_files));
        w.field("workload_fingerprint", t->workload_fingerprint).field("changes", t->changes);
        w.field("change", t->change).field("p_value", t->p_value).field("reason", t->reason);
        w.field("history_files", static_cast<std::int64_t>(t->history)).field("night_spread", t->night_spread);
        w.field("newest_cv", t->newest_cv).field("history_cv", t->history_cv);
        w.field("bubble_delta_pts", t->bubble_delta_pts).field("throughput_change", t->throughput_change);
        w.field("slowest_stage_change", t->slowest_stage_change).field("memory_increased", t->memory_increased);
        w.field("memory_decreased", t->memory_decreased).field("numerics_changed", t->numerics_changed);
        w.array("alerts", t->alerts);
        w.end_object();
      }
      w.end_object();
    }
  w.end_array();
  w.key("probes").begin_array();
  for (const auto& f : d.files) {
    if (!f.result.probe) continue;
    const ProbeResult& p = *f.result.probe;
    w.begin_object().field("file", f.path).field("job", job_name(f)).field("run", p.options.run_name);
    w.field("max_micro_batch", p.max_micro_batch).field("recommended_micro_batch", p.recommended_micro_batch);
    w.field("stop_reason", p.stop_reason).field("trials", static_cast<std::int64_t>(p.trials.size()));
    w.end_object();
  }
  w.end_array();
  w.array("missing_jobs", d.missing_jobs);
  w.field("references_file", d.options.references_path).key("references");
  write_reference_checks(w, d.reference_checks, d.reference_check_files);
  w.key("history_only_series").begin_array();
  for (const auto& t : d.trends) {
    if (!t.history_only) continue;
    w.begin_object().field("job", t.job).field("run", t.run).field("files", static_cast<std::int64_t>(t.points.size()));
    w.field("newest_file", t.points.back().path).end_object();
  }
  w.end_array();
  w.field("any_regression", d.any_regression()).field("any_failure", d.any_failure());
  w.end_object();
  return w.str() + "\n";
}

}  // namespace pipebench
