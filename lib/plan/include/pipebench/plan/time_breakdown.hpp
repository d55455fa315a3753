// A planned run through the hardware time model (docs/time-model.md): what
// each rank's step is made of, term by term, for `pipebench plan` (text and
// `--format json`), `tune` and bench/fidelity. Only with a device preset.
#pragma once

#include <string>
#include <vector>

#include "pipebench/core/json.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/plan/plan.hpp"

namespace pipebench {

// One rank's step: its chunks' compute by pass and term over every
// micro-batch (full recomputation: the forward once more, in `recompute`),
// its tensor-parallel collectives, its pipeline transfers (sends), its
// gradient reduction and what of it is exposed, its optimizer step and
// ZeRO-1's all-gather.
struct RankStepTime {
  int stage = 0;
  PassTime forward, input_grad, weight_grad, recompute;
  double tp_comm_s = 0.0;
  double cp_exposed_s = 0.0;  // context parallelism: the K/V exchange's exposed part (ActionSeconds)
  double pp_transfer_s = 0.0;
  double dp_sync_s = 0.0, dp_exposed_s = 0.0;
  double dp_hidden_s = 0.0;  // the synchronisation's ring time under the rank's compute (GradSyncPlan::hidden_s)
  double optimizer_s = 0.0, gather_s = 0.0;
  double busy_s = 0.0;  // the schedule simulation's busy time (compute + tensor collectives)
};

struct TimeBreakdown {
  // The modelled device: the job's preset with the figures the workload set
  // in their place (device_model); its table views the job's: use while the job lives.
  DevicePreset device{};
  std::vector<std::string_view> own_figures;  // own_device_figures(job.device): the figures the workload set itself
  std::string name;                           // device_model_name(job.device)
  // The two link levels as the job sets them (the preset's unless its
  // sim_link_* / sim_inter_node_* keys say otherwise).
  parallel::Link intra_node, inter_node;
  PieceTime layer;               // one transformer block, one micro-batch
  double layer_tp_comm_s = 0.0;  // its tensor-parallel collectives, all passes
  // ... by pass: the forward's, the input-gradient pass's, the weight-gradient
  // pass's (sequence parallelism's second all-gather of the input among them).
  double layer_tp_forward_s = 0.0, layer_tp_input_grad_s = 0.0, layer_tp_weight_grad_s = 0.0;
  // The block's forward and backward as the run executes them, collectives
  // included: the backward with both gradient passes and the run's
  // recomputation (selective: the attention core; full: the forward and its
  // collectives again). What Korthikanti et al. 2022's Table 4 measures for
  // one layer (docs/fidelity.md).
  double layer_forward_s = 0.0, layer_backward_s = 0.0;
  double transfer_s = 0.0;       // one pipeline transfer
  std::vector<RankStepTime> ranks;
  double iteration_s = 0.0;      // RunPlan::iteration_s
  double bubble = 0.0;           // the cost-weighted simulation's
  double model_flops = 0.0;      // step_flops: forward + backward, every rank
  // Model FLOP utilisation: model_flops / (iteration_s · ranks · the
  // preset's matrix peak for the dtype) — Chowdhery et al. 2022's
  // convention, recomputation not counted.
  double mfu = 0.0;
};

// Throws Error when the job has no device preset.
TimeBreakdown time_breakdown(const Job& job, const RunPlan& plan);
// Lines for `plan`'s text: the per-layer terms, then per rank one row.
std::string time_breakdown_text(const TimeBreakdown& t);
// The "time_model" object of `plan --format json` (docs/plan.md).
void time_breakdown_json(JsonWriter& w, const TimeBreakdown& t);

}  // namespace pipebench
