#include "pipebench/plan/time_breakdown.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"

namespace pipebench {

namespace {

PassTime scaled(PassTime p, double n) { return p *= n; }

constexpr std::array<Stream, kStreams> kEveryStream = {Stream::norms,    Stream::softmax,   Stream::activation,
                                                       Stream::residual, Stream::dropout,   Stream::rope,
                                                       Stream::embedding, Stream::cross_entropy};

void pass_json(JsonWriter& w, std::string_view name, const PassTime& p) {
  w.key(name).begin_object();
  w.field("gemm_s", p.gemm_s).field("gemm_accumulate_read_s", p.accumulate_read_s);
  w.field("attention_s", p.attention_s).field("elementwise_s", p.elementwise_s);
  w.key("elementwise").begin_object();
  for (Stream s : kEveryStream) w.field(fmt::format("{}_s", to_string(s)), p.stream(s));
  w.end_object();
  w.field("launch_s", p.launch_s).field("kernels", p.kernels).field("total_s", p.total());
  w.end_object();
}

// "norms 1.2 ms, softmax 0.3 ms, ...": the element-wise kernels that cost anything.
std::string streams_text(const PassTime& p) {
  std::string out;
  for (Stream s : kEveryStream)
    if (p.stream(s) > 0.0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", to_string(s), format_seconds(p.stream(s)));
  return out;
}

std::string pass_text(const PassTime& p) {
  const std::string streams = streams_text(p);
  const std::string read =
      p.accumulate_read_s > 0.0 ? fmt::format(" [accumulate read {}]", format_seconds(p.accumulate_read_s)) : "";
  return fmt::format("{} (gemm {}{}, attention {}, element-wise {}{}, launch {})", format_seconds(p.total()),
                     format_seconds(p.gemm_s), read, format_seconds(p.attention_s), format_seconds(p.elementwise_s),
                     streams.empty() ? "" : " [" + streams + "]", format_seconds(p.launch_s));
}

}  // namespace

TimeBreakdown time_breakdown(const Job& job, const RunPlan& plan) {
  if (!job.device.preset) throw Error("the time breakdown needs a device preset ([device] preset)");
  const RunSpec& run = plan.run;
  const ModelDesc model(job.model, plan.storage_dtype, tensor_split(run));
  const DevicePreset device = device_model(job.device);
  const TimeModel tm(device, plan.storage_dtype);
  // The one-layer figures on stage 0's link; each rank's on its own stage's.
  const parallel::Link link = parallel::stage_tensor_link(job.device, run, 0);
  const int b = run.micro_batch_size, t = run.tensor_parallel;
  const double m = run.num_microbatches;
  const bool train = run.mode == RunMode::train, full = train && run.recompute == Recompute::full;
  TimeBreakdown out;
  out.device = device;
  out.own_figures = own_device_figures(job.device);
  out.name = device_model_name(job.device);
  out.intra_node = parallel::intra_node_link(job.device);
  out.inter_node = parallel::inter_node_link(job.device);
  out.layer = tm.block(model, b);
  const Cost layer = model.block(b);
  const auto comm_s = [&](const TensorComm& c) { return parallel::tensor_comm_s(c.calls, c.wire_bytes, t, link); };
  out.layer_tp_forward_s = comm_s(layer.tp_forward);
  out.layer_tp_input_grad_s = comm_s(layer.tp_input_grad);
  out.layer_tp_weight_grad_s = comm_s(layer.tp_weight_grad);
  out.layer_tp_comm_s = out.layer_tp_forward_s + out.layer_tp_input_grad_s + out.layer_tp_weight_grad_s;
  out.layer_forward_s = out.layer.forward.total() + out.layer_tp_forward_s;
  if (train)
    out.layer_backward_s = out.layer.input_grad.total() + out.layer.weight_grad.total() + out.layer.recompute.total() +
                           out.layer_tp_input_grad_s + out.layer_tp_weight_grad_s + (full ? out.layer_forward_s : 0.0);
  out.transfer_s = plan.costs.transfer;
  for (const StagePlan& sp : plan.stages) {
    RankStepTime r;
    r.stage = sp.stage;
    int sends = 0;
    const parallel::Link stage_link = parallel::stage_tensor_link(job.device, run, sp.stage);
    const parallel::ContextGroup context = parallel::stage_context_group(job.device, run, sp.stage);
    for (const StageRange& range : sp.chunks) {
      const ActionSeconds a = action_seconds(job, model, b, range, stage_link, false, context);
      r.forward += scaled(a.terms.forward, m);
      r.tp_comm_s += m * (a.forward_comm + (train ? a.backward_comm : 0.0) + (full ? a.forward_comm : 0.0));
      r.cp_exposed_s +=
          m * (a.forward_context + (train ? a.backward_context : 0.0) + (full ? a.forward_context : 0.0));
      if (train) {
        r.input_grad += scaled(a.terms.input_grad, m);
        r.weight_grad += scaled(a.terms.weight_grad, m);
        r.recompute += scaled(a.terms.recompute, m);
        if (full) r.recompute += scaled(a.terms.forward, m);
      }
      sends += (range.has_head ? 0 : 1) + (train && !range.has_embedding ? 1 : 0);
    }
    r.pp_transfer_s = m * sends * out.transfer_s;
    r.dp_sync_s = sp.grad_sync.sync_s();
    r.dp_exposed_s = sp.grad_sync.recorded_exposed_s();
    r.dp_hidden_s = sp.grad_sync.hidden_s();
    r.optimizer_s = sp.optimizer_s;
    r.gather_s = sp.grad_sync.gather_s;
    r.busy_s = plan.simulated.busy.at(static_cast<std::size_t>(sp.stage));
    out.ranks.push_back(r);
  }
  out.iteration_s = plan.iteration_s;
  out.bubble = plan.simulated.bubble;
  out.model_flops = step_flops(plan);
  if (out.iteration_s > 0.0) out.mfu = out.model_flops / (out.iteration_s * run.ranks() * tm.peak_flops());
  return out;
}

std::string time_breakdown_text(const TimeBreakdown& t) {
  std::string out = fmt::format("time model ({}; docs/time-model.md): one layer, one micro-batch: forward {}; input "
                                "gradients {}; weight gradients {}",
                                t.name, pass_text(t.layer.forward), pass_text(t.layer.input_grad),
                                pass_text(t.layer.weight_grad));
  if (t.layer.recompute.total() > 0.0) out += fmt::format("; recomputed attention {}", pass_text(t.layer.recompute));
  out += fmt::format("; tensor collectives {}; the block as run, collectives included: forward {}", format_seconds(t.layer_tp_comm_s),
                     format_seconds(t.layer_forward_s));
  out += t.layer_backward_s > 0.0 ? fmt::format(", backward {}\n", format_seconds(t.layer_backward_s)) : "\n";
  out += fmt::format("  {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "rank", "forward", "input grad",
                     "weight grad", "recompute", "tp comm", "pp sends", "dp exposed", "optimizer");
  for (const RankStepTime& r : t.ranks)
    out += fmt::format("  {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", r.stage,
                       format_seconds(r.forward.total()), format_seconds(r.input_grad.total()),
                       format_seconds(r.weight_grad.total()), format_seconds(r.recompute.total()),
                       format_seconds(r.tp_comm_s), format_seconds(r.pp_transfer_s), format_seconds(r.dp_exposed_s),
                       format_seconds(r.optimizer_s));
  if (std::any_of(t.ranks.begin(), t.ranks.end(), [](const RankStepTime& r) { return r.cp_exposed_s > 0.0; })) {
    out += "  context-parallel K/V exchange exposed, beside the columns above:";
    for (const RankStepTime& r : t.ranks) out += fmt::format(" rank {} {}", r.stage, format_seconds(r.cp_exposed_s));
    out += "\n";
  }
  out += fmt::format("  iteration {} (bubble {:.4f}); {:.4g} model TFLOP per step; MFU {:.1f}%\n",
                     format_seconds(t.iteration_s), t.bubble, t.model_flops / 1e12, 100.0 * t.mfu);
  return out;
}

void time_breakdown_json(JsonWriter& w, const TimeBreakdown& t) {
  w.key("time_model").begin_object();
  w.field("preset", t.device.name);
  // The figures every term below is computed from (docs/time-model.md; a
  // workload's own gemm_efficiency, hbm_efficiency and kernel_launch_us in
  // place of the preset's).
  w.key("device").begin_object();
  w.field("matrix_flops_16bit", t.device.matrix_flops_16bit).field("fp32_flops", t.device.fp32_flops);
  w.field("sms", t.device.sms).field("hbm_bytes_per_s", t.device.hbm_bytes_per_s);
  w.field("hbm_efficiency", t.device.hbm_efficiency).field("kernel_launch_us", t.device.kernel_launch_s * 1e6);
  w.field("gemm_accumulate_serial", t.device.gemm_accumulate_serial);
  w.field("intra_node_gbps", t.intra_node.gbps).field("intra_node_latency_us", t.intra_node.latency_s * 1e6);
  w.field("inter_node_gbps", t.inter_node.gbps).field("inter_node_latency_us", t.inter_node.latency_s * 1e6);
  w.key("own_figures").begin_array();
  for (std::string_view k : t.own_figures) w.value(k);
  w.end_array();
  w.key("gemm_efficiency").begin_array();
  for (const GemmEfficiencyPoint& p : t.device.gemm_efficiency) w.begin_array().value(p.k).value(p.efficiency).end_array();
  w.end_array();
  w.end_object();
  w.key("layer").begin_object();
  pass_json(w, "forward", t.layer.forward);
  pass_json(w, "input_grad", t.layer.input_grad);
  pass_json(w, "weight_grad", t.layer.weight_grad);
  pass_json(w, "recompute", t.layer.recompute);
  w.field("tp_comm_s", t.layer_tp_comm_s);
  w.key("tp_comm").begin_object();
  w.field("forward_s", t.layer_tp_forward_s).field("input_grad_s", t.layer_tp_input_grad_s);
  w.field("weight_grad_s", t.layer_tp_weight_grad_s);
  w.end_object();
  w.field("forward_s", t.layer_forward_s).field("backward_s", t.layer_backward_s);
  w.end_object();
  w.field("transfer_s", t.transfer_s);
  w.key("ranks").begin_array();
  for (const RankStepTime& r : t.ranks) {
    w.begin_object().field("stage", r.stage);
    pass_json(w, "forward", r.forward);
    pass_json(w, "input_grad", r.input_grad);
    pass_json(w, "weight_grad", r.weight_grad);
    pass_json(w, "recompute", r.recompute);
    w.field("tp_comm_s", r.tp_comm_s).field("cp_exposed_s", r.cp_exposed_s).field("pp_transfer_s", r.pp_transfer_s);
    w.field("dp_sync_s", r.dp_sync_s).field("dp_exposed_s", r.dp_exposed_s).field("dp_hidden_s", r.dp_hidden_s);
    w.field("optimizer_s", r.optimizer_s).field("gather_s", r.gather_s).field("busy_s", r.busy_s);
    w.end_object();
  }
  w.end_array();
  w.field("iteration_s", t.iteration_s).field("bubble", t.bubble);
  w.field("model_flops", t.model_flops).field("mfu", t.mfu);
  w.end_object();
}

}  // namespace pipebench
