#include "pipebench/plan/plan_format.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/json.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/plan/time_breakdown.hpp"
#include "pipebench/schedule/validate.hpp"

namespace pipebench {

namespace {

std::string stage_notes(const StageRange& r) {
  if (r.has_embedding && r.has_head) return "embedding + LM head";
  if (r.has_embedding) return "embedding";
  if (r.has_head) return "final norm + LM head + loss";
  return "";
}

// A simple left-aligned table: header row, rule, rows.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const {
    std::vector<std::size_t> w(rows_[0].size(), 0);
    for (const auto& r : rows_)
      for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    std::string out;
    auto line = [&](const std::vector<std::string>& r) {
      std::string l = " ";
      for (std::size_t i = 0; i < r.size(); ++i) l += fmt::format(" {:<{}}", r[i], w[i]);
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out += l + '\n';
    };
    line(rows_[0]);
    std::vector<std::string> rule;
    for (auto x : w) rule.emplace_back(x, '-');
    line(rule);
    for (std::size_t i = 1; i < rows_.size(); ++i) line(rows_[i]);
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string partition_table(const RunPlan& rp) {
  Table t(partition_table_header(rp));
  for (auto& row : partition_table_rows(rp)) t.add(std::move(row));
  return t.str();
}

std::string memory_table(const RunPlan& rp) {
  Table t({"stage", "params", "grads", "optimizer", "act/micro-batch", "live", "act peak", "comm", "workspace", "total",
           "of capacity"});
  auto b = [](std::int64_t v) { return format_bytes(static_cast<double>(v)); };
  for (const auto& sp : rp.stages)
    t.add({std::to_string(sp.stage), b(sp.params_bytes), b(sp.grads_bytes), b(sp.optimizer_bytes),
           b(sp.activation_bytes_per_microbatch), std::to_string(sp.peak_live_activations), b(sp.activations_peak_bytes),
           b(sp.comm_bytes), b(sp.workspace_bytes), b(sp.total_bytes),
           fmt::format("{:.1f}%{}", 100.0 * sp.capacity_fraction, sp.capacity_fraction > kMemoryWarnFraction ? " !" : "")});
  return t.str();
}

// Per-rank summary of a unit-cost timeline too large for a grid.
std::string timeline_summary(const RunPlan& rp) {
  Table t({"rank", "actions", "first start", "last end", "idle steps", "peak live"});
  const auto& u = rp.unit;
  for (std::size_t r = 0; r < u.busy.size(); ++r)
    t.add({std::to_string(r), std::to_string(rp.schedule.actions[r].size()), fmt::format("{:.0f}", u.first_start[r]),
           fmt::format("{:.0f}", u.last_end[r]), fmt::format("{:.0f}", u.makespan - u.busy[r]),
           std::to_string(u.peak_live_activations[r])});
  return t.str();
}

// "(p-1)/(m+p-1) = 0.2000", with the closed form of the run's schedule.
std::string analytic_bubble_text(const RunPlan& rp) {
  const ClosedForm f = bubble_closed_form(rp.schedule);
  if (!std::isfinite(f.value)) return "none (no closed form for this schedule)";
  return fmt::format("{} = {:.4f}", f.formula, f.value);
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += fmt::format("{}{}", s.empty() ? "" : " ", x);
  return s;
}

// The tensor-parallel collectives of each stage's chunks, per micro-batch
// (model.hpp's TensorComm, plan.hpp's action_seconds): calls and seconds of
// the forward and of the backward (B and W together) on the tensor group's link.
struct StageTensorComm {
  int forward_calls = 0, backward_calls = 0;
  double forward_s = 0.0, backward_s = 0.0;
};
StageTensorComm stage_tensor_comm(const Job& job, const RunPlan& rp, const parallel::Link& link, int stage) {
  const Cost& c = rp.stages.at(static_cast<std::size_t>(stage)).cost;
  const ActionSeconds a = action_seconds(job, c, rp.run.tensor_parallel, link, false);
  return {c.tp_forward.calls, c.tp_input_grad.calls + c.tp_weight_grad.calls, a.forward_comm, a.backward_comm};
}

std::string tensor_parallel_text(const Job& job, const RunPlan& rp) {
  const RunSpec& r = rp.run;
  std::string out = fmt::format(
      "tensor parallel: {} ranks per stage{} ({} ranks in all, {}); vocabulary {} padded to {}; collectives per "
      "micro-batch on the link each stage's slowest tensor group rides:\n",
      r.tensor_parallel, r.sequence_parallel ? ", sequence parallel" : "", r.ranks(), to_string(r.rank_order),
      job.model.vocab, padded_vocab(job.model, r.tensor_parallel));
  for (int s = 0; s < r.pipeline_size; ++s) {
    const parallel::Link link = parallel::stage_tensor_link(job.device, r, s);
    const StageTensorComm t = stage_tensor_comm(job, rp, link, s);
    out += fmt::format("  stage {}: forward {} calls {}, backward {} calls {} ({})\n", s, t.forward_calls,
                       format_seconds(t.forward_s), t.backward_calls, format_seconds(t.backward_s),
                       link.inter_node ? "inter-node: a tensor group spans nodes" : "intra-node");
  }
  return out;
}

void tensor_parallel_json(JsonWriter& w, const Job& job, const RunPlan& rp) {
  w.field("padded_vocab", padded_vocab(job.model, rp.run.tensor_parallel));
  w.key("tensor_comm").begin_array();
  for (int s = 0; s < rp.run.pipeline_size; ++s) {
    const parallel::Link link = parallel::stage_tensor_link(job.device, rp.run, s);
    const StageTensorComm t = stage_tensor_comm(job, rp, link, s);
    w.begin_object().field("stage", s).field("inter_node", link.inter_node);
    w.field("forward_calls", t.forward_calls).field("forward_s", t.forward_s);
    w.field("backward_calls", t.backward_calls).field("backward_s", t.backward_s).end_object();
  }
  w.end_array();
}

// Context parallelism: per stage (its first chunk's blocks, one micro-batch)
// the K/V exchange's exposed seconds on F and B and the link it rides.
struct StageContext {
  parallel::ContextGroup group;
  double forward_s = 0.0, backward_s = 0.0;
};
StageContext stage_context(const Job& job, const RunPlan& rp, int s) {
  StageContext out{parallel::stage_context_group(job.device, rp.run, s)};
  const StageRange& range = rp.partition.stages.at(static_cast<std::size_t>(rp.schedule.virtual_stage(s, 0)));
  const ModelDesc model(job.model, rp.storage_dtype, tensor_split(rp.run));
  const ActionSeconds a = action_seconds(job, model, rp.run.micro_batch_size, range,
                                         parallel::stage_tensor_link(job.device, rp.run, s), false, out.group);
  out.forward_s = a.forward_context;
  out.backward_s = a.backward_context;
  return out;
}

std::string context_parallel_text(const Job& job, const RunPlan& rp) {
  const RunSpec& r = rp.run;
  const ModelDesc model(job.model, rp.storage_dtype, tensor_split(r));
  std::string out = fmt::format(
      "context parallel: {} ranks per sequence ({} chunks of {} tokens, rank i holds chunks i and {}-i), cp_comm {}; "
      "K/V {} per block and micro-batch a rank; exposed exchange per micro-batch of each stage's first chunk:\n",
      r.context_parallel, 2 * r.context_parallel, job.model.seq_len / (2 * r.context_parallel),
      2 * r.context_parallel - 1, to_string(r.cp_comm),
      format_bytes(static_cast<double>(model.context_kv_bytes(r.micro_batch_size))));
  for (int s = 0; s < r.pipeline_size; ++s) {
    const StageContext c = stage_context(job, rp, s);
    out += fmt::format("  stage {}: forward {}, backward {} ({})\n", s, format_seconds(c.forward_s),
                       format_seconds(c.backward_s), c.group.link.inter_node ? "inter-node" : "intra-node");
  }
  return out;
}

// The run's context_parallel; with c > 1 its cp_comm and context_comm.
void context_parallel_json(JsonWriter& w, const Job& job, const RunPlan& rp) {
  w.field("context_parallel", rp.run.context_parallel);
  if (rp.run.context_parallel <= 1) return;
  w.field("cp_comm", to_string(rp.run.cp_comm));
  w.key("context_comm").begin_array();
  for (int s = 0; s < rp.run.pipeline_size; ++s) {
    const StageContext c = stage_context(job, rp, s);
    w.begin_object().field("stage", s).field("inter_node", c.group.link.inter_node);
    w.field("forward_s", c.forward_s).field("backward_s", c.backward_s).end_object();
  }
  w.end_array();
}

// The split rules side by side: layers per piece and the slowest piece.
// "; buckets per chunk: 3, 4" for grad_sync = "overlap" ("" otherwise).
std::string bucket_counts(const GradSyncPlan& g) {
  if (g.buckets.empty()) return "";
  std::vector<std::size_t> n;
  for (const auto& chunk : g.buckets) n.push_back(chunk.size());
  return fmt::format("; buckets per chunk: {}", fmt::join(n, ", "));
}

// Data parallelism: each stage's gradient all-reduce and the step with it (plan_grad_sync).
std::string grad_sync_text(const Job& job, const RunPlan& rp) {
  const bool nodes = std::any_of(rp.stages.begin(), rp.stages.end(), [](const StagePlan& sp) { return sp.grad_sync.inter_node; });
  const std::string buckets =
      rp.sync.inside ? fmt::format("buckets of at least {} launched inside each chunk's last gradient action{}",
                                   format_bytes(static_cast<double>(rp.grad_bucket_bytes)),
                                   rp.run.grad_bucket_bytes > 0 ? "" : " (Megatron-Core's default: max(40M, 1M x d) parameters)")
                     : fmt::format("{} buckets", format_bytes(static_cast<double>(parallel::kGradBucketBytes)));
  std::string out = fmt::format("gradient synchronisation ({}, {}, ring on the sim link{}, {}):\n",
                                to_string(rp.run.grad_sync),
                                rp.run.context_parallel > 1
                                    ? fmt::format("{} replicas x {} context ranks", rp.run.data_parallel, rp.run.context_parallel)
                                    : fmt::format("{} replicas", rp.run.data_parallel),
                                nodes ? fmt::format(" within a node and the inter-node link across ({} ranks per node)",
                                                    job.device.ranks_per_node)
                                      : "",
                                buckets);
  for (const StagePlan& sp : rp.stages)
    out += fmt::format("  stage {}: {} in {}{}, {} exposed after its last action{}\n", sp.stage,
                       format_bytes(static_cast<double>(sp.grad_sync.bytes)), format_seconds(sp.grad_sync.sync_s()),
                       sp.grad_sync.inter_node ? " across nodes" : "", format_seconds(sp.grad_sync.recorded_exposed_s()),
                       sp.grad_sync.gather_s > 0.0
                           ? fmt::format(" (sharded: reduce-scatter, then {} of parameter all-gather after the optimizer)",
                                         format_seconds(sp.grad_sync.gather_s))
                       : !sp.grad_sync.gathers.empty()
                           ? fmt::format(" (sharded: {} parameter all-gathers of {} from the step's start, the first "
                                         "forwards waiting {} for them)",
                                         sp.grad_sync.gathers.size(), format_seconds(sp.grad_sync.gather_ring_s),
                                         format_seconds(sp.grad_sync.gather_wait_s))
                           : "") +
           fmt::format("    actions: {}{}\n", sync_actions_text(rp.schedule, rp.sync, sp.stage), bucket_counts(sp.grad_sync));
  out += fmt::format("  step without the optimizer: {} (makespan {} + the exposed all-reduce)\n", format_seconds(rp.step_s),
                     format_seconds(rp.simulated.makespan));
  return out;
}

std::string partition_alternatives_text(const RunPlan& rp) {
  if (rp.partition_alternatives.empty()) return "";
  std::string out = "split rules (slowest piece: forward+backward FLOPs per micro-batch; largest piece: parameters):\n";
  double least = std::numeric_limits<double>::infinity();
  for (const auto& a : rp.partition_alternatives) least = std::min(least, a.slowest_flops);
  for (const auto& a : rp.partition_alternatives)
    out += fmt::format("  {:<16} {:<24} slowest {:>10} FLOP ({:+6.1f}% vs least)  largest {:>10} params{}\n", a.rule,
                       join_ints(a.layers_per_stage), format_count(a.slowest_flops), 100.0 * (a.slowest_flops / least - 1.0),
                       format_count(static_cast<double>(a.largest_params)), a.chosen ? "  <- this run" : "");
  return out;
}

}  // namespace

std::vector<std::string> partition_table_header(const RunPlan& rp) {
  std::vector<std::string> h{"stage", fmt::format("layers ({}-based)", rp.run.layers_per_stage_origin), "count", "params",
                             "delta vs prev", "ratio vs prev", "notes"};
  if (rp.schedule.chunks_per_rank > 1) h.insert(h.begin() + 1, "rank.chunk");
  return h;
}

// One row per virtual stage (model order); with more than one chunk per
// rank, where it runs ("1.0": rank 1, chunk 0).
std::vector<std::vector<std::string>> partition_table_rows(const RunPlan& rp) {
  std::vector<std::vector<std::string>> rows;
  std::int64_t prev = 0;
  for (std::size_t v = 0; v < rp.partition.stages.size(); ++v) {
    const StageRange& range = rp.partition.stages[v];
    const std::int64_t params = rp.stage_costs[v].params;
    std::string delta = "-", ratio = "-";
    if (v > 0) {
      const auto d = params - prev;
      delta = fmt::format("{}{}", d > 0 ? "+" : "", group_digits(d));
      ratio = fmt::format("{:.3f}", static_cast<double>(params) / static_cast<double>(prev));
    }
    prev = params;
    std::vector<std::string> row{std::to_string(v), layer_range_text(range, rp.run.layers_per_stage_origin),
                                 std::to_string(range.num_layers), group_digits(params), delta, ratio, stage_notes(range)};
    if (rp.schedule.chunks_per_rank > 1) {
      const int vs = static_cast<int>(v);
      row.insert(row.begin() + 1, fmt::format("{}.{}", rp.schedule.rank_of(vs), rp.schedule.chunk_of(vs)));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string fold_sizes(const std::vector<int>& sizes, std::size_t width) {
  std::string s;
  for (std::size_t i = 0; i < sizes.size();) {
    std::size_t j = i;
    while (j < sizes.size() && sizes[j] == sizes[i]) ++j;
    s += (s.empty() ? "" : " ") + (j - i > 1 ? fmt::format("{}x{}", sizes[i], j - i) : std::to_string(sizes[i]));
    i = j;
  }
  return s.size() > width && width > 1 ? s.substr(0, width - 1) + "~" : s;
}

std::string plan_summary_text(const JobPlan& plan) {
  std::string out = fmt::format("\n== summary: {} runs side by side\n", plan.runs.size());
  out += fmt::format("  {:<24} {:>7} {:<22} {:>12} {:>9} {:>9} {:>9} {:>8}\n", "run", "stages", "layers per stage",
                     "largest mem", "bubble cf", "bubble sim", "live act", "warnings");
  const RunPlan* first_fit = nullptr;
  for (const auto& rp : plan.runs) {
    double worst = 0.0;
    int live = 0;
    for (const auto& sp : rp.stages) {
      worst = std::max(worst, sp.capacity_fraction);
      live = std::max(live, sp.peak_live_activations);
    }
    std::vector<int> layers;
    for (const auto& st : rp.partition.stages) layers.push_back(st.num_layers);
    const std::string stages = rp.schedule.chunks_per_rank > 1
                                   ? fmt::format("{}x{}", rp.run.pipeline_size, rp.schedule.chunks_per_rank)
                                   : std::to_string(rp.run.pipeline_size);
    out += fmt::format("  {:<24} {:>7} {:<22} {:>11.1f}% {:>9} {:>9.4f} {:>9} {:>8}\n", rp.run.name, stages,
                       fold_sizes(layers), 100.0 * worst,
                       std::isfinite(rp.bubble_analytic) ? fmt::format("{:.4f}", rp.bubble_analytic) : std::string("-"),
                       rp.simulated.bubble, live, rp.warnings.size());
    if (worst <= 1.0 && (!first_fit || rp.run.pipeline_size < first_fit->run.pipeline_size)) first_fit = &rp;
  }
  out += first_fit ? fmt::format("fewest stages that fit among these runs: {} (run {}); `pipebench tune` tries every size\n",
                                 first_fit->run.pipeline_size, first_fit->run.name)
                   : "none of these runs fits memory_capacity; `pipebench tune --ranks N` finds the sizes that do\n";
  return out;
}

std::string format_plan_text(const JobPlan& plan) {
  const Job& job = *plan.job;
  const auto& ms = job.model;
  std::string out;
  out += fmt::format("pipebench plan: job \"{}\" ({})\n", job.name, job.source_path);
  if (!job.description.empty()) out += fmt::format("  {}\n", job.description);
  const std::string llama = ms.kind == ModelKind::llama ? fmt::format(" kv_heads={} rope_theta={:g} norm_eps={:g}", ms.kv_heads,
                                                                      ms.rope_theta, ms.norm_eps)
                                                        : "";
  out += fmt::format("  model: {} hidden={} layers={} heads={}{} ffn_hidden={} seq_len={} vocab={} dtype={}; {} parameters\n",
                     to_string(ms.kind), ms.hidden, ms.layers, ms.heads, llama, ms.ffn_hidden, ms.seq_len, ms.vocab,
                     to_string(ms.dtype), group_digits(ModelDesc(ms, ms.dtype).total_params()));
  out += fmt::format("  device: backend={}{} memory_capacity={} {} link={} us + {} Gbit/s; optimizer={}\n",
                     to_string(job.device.backend),
                     job.device.preset ? fmt::format(" preset={}", job.device.preset->name) : "",
                     format_bytes(static_cast<double>(job.device.memory_capacity_bytes)),
                     job.device.preset ? std::string("compute=time model")
                                       : fmt::format("sim_flops_per_s={:.3g}", job.device.sim_flops_per_s),
                     job.device.sim_link_latency_us, job.device.sim_link_gbps, to_string(job.train.optimizer));
  for (const auto& o : job.overrides) out += fmt::format("  override: --set {}\n", o);
  for (const auto& w : job.warnings) out += fmt::format("  warning: {}\n", w);

  for (const auto& rp : plan.runs) {
    const auto& r = rp.run;
    const int p = r.pipeline_size, m = r.num_microbatches;
    out += fmt::format("\n== run {}: {}, pipeline_size={}, micro_batch_size={}, num_microbatches={}, schedule={}{}{}{}\n",
                       r.name, to_string(r.mode), p, r.micro_batch_size, m, rp.schedule.name,
                       rp.schedule.chunks_per_rank > 1 ? fmt::format(", virtual_stages_per_rank={}", rp.schedule.chunks_per_rank) : "",
                       r.recompute != Recompute::none ? fmt::format(", recompute={}", to_string(r.recompute)) : "",
                       r.baseline.empty() ? "" : fmt::format(", baseline={}", r.baseline));
    if (r.data_parallel > 1)
      out += fmt::format("data parallel: {} replicas x {} stages = {} ranks ({}); global batch {} = {} x {} x {}{}\n",
                         r.data_parallel, p, r.ranks(), to_string(r.rank_order), r.global_batch(), r.micro_batch_size,
                         m, r.data_parallel,
                         r.mode == RunMode::train
                             ? fmt::format("; optimizer_sharding={}, grad_sync={}", to_string(r.optimizer_sharding),
                                           to_string(r.grad_sync))
                             : "");
    if (r.tensor_parallel > 1) out += tensor_parallel_text(job, rp);
    if (r.context_parallel > 1) out += context_parallel_text(job, rp);
    out += fmt::format("partition ({}):\n",
                       rp.partition.explicit_split ? "explicit layers_per_stage"
                                                   : fmt::format("remainder = \"{}\"{}", to_string(r.remainder),
                                                                 r.remainder == Remainder::balanced
                                                                     ? fmt::format(", by {}", to_string(r.balance_by))
                                                                     : ""));
    out += partition_table(rp);
    out += partition_alternatives_text(rp);
    out += fmt::format("memory estimate per stage{} ({}, {}, capacity {}):\n",
                       r.tensor_parallel > 1 ? fmt::format(", one of its {} tensor ranks", r.tensor_parallel) : "",
                       to_string(rp.storage_dtype),
                       r.mode == RunMode::train ? std::string(to_string(job.train.optimizer)) : "inference: no grads/optimizer",
                       format_bytes(static_cast<double>(job.device.memory_capacity_bytes)));
    out += memory_table(rp);
    for (const auto& w : rp.warnings) out += fmt::format("  warning: {}\n", w);
    out += fmt::format("bubble: analytic {}; unit-cost simulated = {:.4f} over {:.0f} steps; "
                       "cost-weighted simulated = {:.4f}, makespan {}\n",
                       analytic_bubble_text(rp), rp.unit.bubble, rp.unit.makespan, rp.simulated.bubble,
                       format_seconds(rp.simulated.makespan));
    if (r.grad_group() > 1 && r.mode == RunMode::train) out += grad_sync_text(job, rp);
    if (job.device.preset) out += time_breakdown_text(time_breakdown(job, rp));
    out += fmt::format("peak live activations per stage: {}\n", join_ints(rp.unit.peak_live_activations));
    if (p <= kGridMaxRanks && rp.unit.makespan <= kGridMaxSteps) {
      out += "timeline (unit costs, step x rank):\n" + render_grid(rp.schedule, rp.unit);
    } else {
      out += fmt::format("timeline (unit costs): {:.0f} steps x {} ranks, too large for a grid; per rank:\n",
                         rp.unit.makespan, p);
      out += timeline_summary(rp);
    }
  }
  if (plan.runs.size() > 1) out += plan_summary_text(plan);
  return out;
}

namespace {

// `simulated.grad_sync`: per rank (stage) its synchronisation as planned,
// with its reduce-grad actions in launch order (the chunk, the action it
// follows, its launch, bytes, ring time alone and end on the link).
void grad_sync_json(JsonWriter& w, const RunPlan& rp) {
  w.key("grad_sync").begin_array();
  for (const auto& sp : rp.stages) {
    w.begin_object().field("bytes", sp.grad_sync.bytes).field("launch_s", sp.grad_sync.launch_s)
        .field("end_s", sp.grad_sync.end_s).field("sync_s", sp.grad_sync.sync_s())
        .field("exposed_s", sp.grad_sync.recorded_exposed_s()).field("gather_s", sp.grad_sync.gather_s)
        .field("gather_wait_s", sp.grad_sync.gather_wait_s).field("inter_node", sp.grad_sync.inter_node);
    // The parameter all-gathers inside the first forwards, in launch order (all at the step's start).
    w.key("param_gathers").begin_array();
    for (const GradSyncPlan::Gather& ga : sp.grad_sync.gathers)
      w.begin_object().field("chunk", ga.chunk).field("bucket", ga.bucket.bucket).field("at", ga.bucket.at)
          .field("bytes", ga.bytes).field("ring_s", ga.ring_s).field("end_s", ga.end_s).end_object();
    w.end_array();
    w.key("reduce_grad").begin_array();
    const auto& actions = rp.schedule.actions[static_cast<std::size_t>(sp.stage)];
    const auto& order = rp.sync.reduce[static_cast<std::size_t>(sp.stage)];
    for (std::size_t i = 0; i < order.size() && i < sp.grad_sync.reduce.size(); ++i) {
      const GradSyncPlan::Reduce& g = sp.grad_sync.reduce[i];
      w.begin_object().field("chunk", g.chunk).field(rp.sync.inside ? "inside" : "after",
                                                     to_string(actions[static_cast<std::size_t>(order[i].after)]));
      w.field("launch_s", g.launch_s).field("bytes", g.bytes).field("ring_s", g.ring_s).field("end_s", g.end_s);
      if (rp.sync.inside) {  // grad_sync = "overlap": its buckets, launched inside the action
        w.key("buckets").begin_array();
        const auto& bk = sp.grad_sync.buckets.at(static_cast<std::size_t>(g.chunk));
        for (std::size_t k = 0; k < g.bucket_launch_s.size() && k < bk.size(); ++k)
          w.begin_object().field("launch_s", g.bucket_launch_s[k]).field("bytes", bk[k].bytes)
              .field("ring_s", g.bucket_ring_s[k]).field("ready", bk[k].ready).end_object();
        w.end_array();
      }
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
}

void emit_plan_json(const JobPlan& plan, JsonWriter& w) {
  const Job& job = *plan.job;
  w.begin_object();
  w.field("tool", "pipebench plan").field("job", job.name).field("source", job.source_path);
  w.array("overrides", job.overrides).array("warnings", job.warnings);
  w.key("model").begin_object();
  w.field("kind", to_string(job.model.kind)).field("hidden", job.model.hidden).field("layers", job.model.layers);
  w.field("heads", job.model.heads).field("ffn_hidden", job.model.ffn_hidden).field("seq_len", job.model.seq_len);
  w.field("vocab", job.model.vocab).field("dtype", to_string(job.model.dtype));
  if (job.model.kind == ModelKind::llama)
    w.field("kv_heads", job.model.kv_heads).field("rope_theta", job.model.rope_theta).field("norm_eps", job.model.norm_eps);
  w.field("total_params", ModelDesc(job.model, job.model.dtype).total_params());
  w.end_object();
  w.key("runs").begin_array();
  for (const auto& rp : plan.runs) {
    const auto& r = rp.run;
    w.begin_object();
    w.field("name", r.name).field("mode", to_string(r.mode)).field("pipeline_size", r.pipeline_size);
    w.field("micro_batch_size", r.micro_batch_size).field("num_microbatches", r.num_microbatches);
    w.field("data_parallel", r.data_parallel).field("ranks", r.ranks()).field("global_batch", r.global_batch());
    w.field("optimizer_sharding", to_string(r.optimizer_sharding)).field("grad_sync", to_string(r.grad_sync));
    w.field("rank_order", to_string(r.rank_order));
    w.field("tensor_parallel", r.tensor_parallel).field("sequence_parallel", r.sequence_parallel);
    if (r.tensor_parallel > 1) tensor_parallel_json(w, job, rp);
    context_parallel_json(w, job, rp);
    w.field("schedule", rp.schedule.name).field("baseline", r.baseline);
    w.field("storage_dtype", to_string(rp.storage_dtype));
    w.field("virtual_stages_per_rank", rp.schedule.chunks_per_rank).field("recompute", to_string(r.recompute));
    std::vector<int> layers, stage_rank;
    for (std::size_t v = 0; v < rp.partition.stages.size(); ++v) {
      layers.push_back(rp.partition.stages[v].num_layers);
      stage_rank.push_back(rp.schedule.rank_of(static_cast<int>(v)));
    }
    std::vector<std::int64_t> params;
    for (const auto& sp : rp.stages) params.push_back(sp.cost.params);
    // Per virtual stage (model order): layers and the rank that runs it.
    w.array("layers_per_stage", layers).field("layers_per_stage_origin", r.layers_per_stage_origin);
    w.array("stage_rank", stage_rank);
    w.key("stage_layers").begin_array();
    for (const auto& range : rp.partition.stages) {
      w.begin_array().value(range.first_layer + r.layers_per_stage_origin)
          .value(range.last_layer() + r.layers_per_stage_origin).end_array();
    }
    w.end_array();
    w.array("stage_params", params);  // per rank, all its chunks
    w.key("partition_alternatives").begin_array();
    for (const auto& a : rp.partition_alternatives) {
      w.begin_object().field("rule", a.rule).array("layers_per_stage", a.layers_per_stage);
      w.field("slowest_flops", a.slowest_flops).field("largest_params", a.largest_params).field("chosen", a.chosen);
      w.end_object();
    }
    w.end_array();
    std::vector<std::int64_t> stage_activation_bytes;  // per virtual stage, one micro-batch
    for (const Cost& c : rp.stage_costs) stage_activation_bytes.push_back(c.activation_bytes);
    w.array("stage_activation_bytes", stage_activation_bytes);
    w.field("bubble_analytic", rp.bubble_analytic);
    w.key("unit").begin_object();
    w.field("time_steps", static_cast<std::int64_t>(std::llround(rp.unit.makespan)));
    w.field("bubble", rp.unit.bubble).array("peak_live_activations", rp.unit.peak_live_activations);
    w.end_object();
    w.key("simulated").begin_object();
    w.field("makespan_s", rp.simulated.makespan).field("bubble", rp.simulated.bubble);
    w.array("peak_live_activations", rp.simulated.peak_live_activations);
    w.array("busy_s", rp.simulated.busy);
    w.array("forward_s", rp.costs.forward).array("backward_s", rp.costs.backward).array("weight_s", rp.costs.weight);
    w.field("transfer_s", rp.costs.transfer);
    w.field("step_s", rp.step_s);  // the makespan, with replicas their gradient all-reduce too
    w.field("iteration_s", rp.iteration_s);  // the step as measured: with the optimizer
    std::vector<double> optimizer_s;
    for (const StagePlan& sp : rp.stages) optimizer_s.push_back(sp.optimizer_s);
    w.array("optimizer_s", optimizer_s);
    if (r.grad_group() > 1 && r.mode == RunMode::train) grad_sync_json(w, rp);
    w.end_object();
    if (job.device.preset) time_breakdown_json(w, time_breakdown(job, rp));
    w.key("memory").begin_array();
    for (const auto& sp : rp.stages) {
      w.begin_object();
      w.field("stage", sp.stage).field("params_bytes", sp.params_bytes).field("grads_bytes", sp.grads_bytes);
      w.field("optimizer_bytes", sp.optimizer_bytes);
      w.field("activation_bytes_per_microbatch", sp.activation_bytes_per_microbatch);
      w.field("peak_live_activations", sp.peak_live_activations);
      w.field("activations_peak_bytes", sp.activations_peak_bytes).field("comm_bytes", sp.comm_bytes);
      w.field("workspace_bytes", sp.workspace_bytes);
      w.field("total_bytes", sp.total_bytes);
      w.field("capacity_bytes", job.device.memory_capacity_bytes).field("capacity_fraction", sp.capacity_fraction);
      w.end_object();
    }
    w.end_array();
    w.key("schedule_text").begin_array();  // a rank at a time: the writer may stream
    for (const auto& list : rp.schedule.actions) w.value(to_text(list));
    w.end_array();
    w.array("warnings", rp.warnings);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace

std::string format_plan_json(const JobPlan& plan) {
  JsonWriter w;
  emit_plan_json(plan, w);
  std::string text = w.take();
  text += '\n';
  return text;
}

void write_plan_json(const JobPlan& plan, std::FILE* out) {
  JsonWriter w(out);
  emit_plan_json(plan, w);
  w.flush();
  if (std::fputc('\n', out) == EOF) throw Error("writing JSON: the output failed");
}

}  // namespace pipebench
