#include "pipebench/core/job.hpp"

#include <fmt/format.h>

namespace pipebench {

std::string_view to_string(Attention v) { return v == Attention::flash ? "flash" : "materialized"; }

std::string_view to_string(ModelKind v) {
  return v == ModelKind::gpt ? "gpt" : v == ModelKind::llama ? "llama" : "mlp";
}

std::int64_t llama_ffn_hidden(std::int64_t hidden, double ffn_dim_multiplier, std::int64_t multiple_of) {
  std::int64_t f = 2 * (4 * hidden) / 3;
  if (ffn_dim_multiplier != 1.0) f = static_cast<std::int64_t>(ffn_dim_multiplier * static_cast<double>(f));
  return multiple_of * ((f + multiple_of - 1) / multiple_of);
}

std::string_view to_string(DType v) {
  switch (v) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
  }
  return "?";
}

std::string_view to_string(OptimizerKind v) { return v == OptimizerKind::sgd ? "sgd" : "adamw"; }

std::string_view to_string(TransportKind v) {
  switch (v) {
    case TransportKind::automatic: return "auto";
    case TransportKind::mpi: return "mpi";
    case TransportKind::nccl: return "nccl";
  }
  return "?";
}

std::string_view to_string(SimClock v) { return v == SimClock::wall ? "wall" : "virtual"; }

std::string_view to_string(BackendKind v) {
  switch (v) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::sim: return "sim";
    case BackendKind::cuda: return "cuda";
  }
  return "?";
}

std::string_view to_string(ScheduleKind v) {
  switch (v) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::eager_one_f_one_b: return "eager-1f1b";
    case ScheduleKind::interleaved_one_f_one_b: return "interleaved-1f1b";
    case ScheduleKind::zb_h1: return "zb-h1";
    case ScheduleKind::zb_v: return "zb-v";
    case ScheduleKind::looped_bfs: return "looped-bfs";
    case ScheduleKind::interleaved_zb: return "interleaved-zb";
    case ScheduleKind::dualpipev: return "dualpipev";
    case ScheduleKind::file: return "file";
  }
  return "?";
}

bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::zb_h1 || k == ScheduleKind::zb_v || k == ScheduleKind::interleaved_zb ||
         k == ScheduleKind::dualpipev;
}

bool any_virtual_stages(ScheduleKind k) {
  return k == ScheduleKind::interleaved_one_f_one_b || k == ScheduleKind::looped_bfs ||
         k == ScheduleKind::interleaved_zb || k == ScheduleKind::file;
}

int fixed_virtual_stages(ScheduleKind k) { return k == ScheduleKind::zb_v || k == ScheduleKind::dualpipev ? 2 : 1; }

std::string schedule_microbatch_problem(ScheduleKind k, int p, int m) {
  if (k == ScheduleKind::interleaved_one_f_one_b && m % p != 0) {
    const int below = m / p * p;
    return fmt::format("interleaved-1f1b runs micro-batches in groups of pipeline_size = {}, so num_microbatches must "
                       "be a multiple of it (got {}; use {}{})",
                       p, m, below > 0 ? fmt::format("{} or ", below) : "", below + p);
  }
  if (k == ScheduleKind::dualpipev && m < 2 * p)
    return fmt::format("dualpipev needs num_microbatches >= 2 x pipeline_size = {} (its 2 p stages each hold a "
                       "micro-batch before the first backward; got {})",
                       2 * p, m);
  if (k == ScheduleKind::interleaved_zb) {
    auto fits = [p](int n) { return n >= 1 && n % std::max(1, n / p) == 0; };
    if (!fits(m)) {
      int below = m - 1, above = m + 1;
      while (!fits(below)) --below;  // n < p always fits
      while (!fits(above)) ++above;
      return fmt::format("interleaved-zb runs micro-batches in max(1, m / pipeline_size) = {} rounds of equal size, so "
                         "num_microbatches must be a multiple of {} (got {}; use {} or {})",
                         std::max(1, m / p), std::max(1, m / p), m, below, above);
    }
  }
  return "";
}

std::string_view to_string(RunMode v) { return v == RunMode::train ? "train" : "inference"; }
std::string_view to_string(Recompute v) {
  switch (v) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}
std::string tensor_parallel_problem(const ModelSpec& m, int t, bool sequence_parallel) {
  if (t <= 1) return "";
  const auto part = [t](const char* what, int n) {
    return n % t == 0 ? std::string()
                      : fmt::format("{} does not divide model.{} = {} (each tensor-parallel rank holds an equal part of it)",
                                    t, what, n);
  };
  std::string why;
  if (m.kind != ModelKind::mlp) why = part("heads", m.heads);
  if (why.empty() && m.kind == ModelKind::llama) why = part("kv_heads", m.kv_heads);
  if (why.empty()) why = part("ffn_hidden", m.ffn_hidden);
  if (why.empty() && sequence_parallel && m.seq_len % t != 0)
    why = fmt::format("tensor_parallel = {} does not divide model.seq_len = {} (each rank holds an equal part of the "
                      "sequence)",
                      t, m.seq_len);
  return why;
}

std::string not_executed(const RunSpec& run, BackendKind backend, const ModelSpec& model) {
  if (run.context_parallel > 1 && backend == BackendKind::cuda)
    return fmt::format("context_parallel = {}: the cuda backend does not exchange K/V between ranks yet (the cpu "
                       "backend does; the planner and the sim backend model it)",
                       run.context_parallel);
  if (model.attention == Attention::flash && backend == BackendKind::cuda && model.kind != ModelKind::mlp &&
      model.hidden / model.heads > kCudaFlashMaxHeadDim)
    return fmt::format("model.attention = \"flash\" with heads of width {}: the cuda backend's flash kernels take at "
                       "most {} (the cpu backend computes it; the sim backend and the planner model it)",
                       model.hidden / model.heads, kCudaFlashMaxHeadDim);
  if (model.dropout > 0.0 && run.mode == RunMode::train && backend != BackendKind::sim)
    return fmt::format("model.dropout = {:g}: the {} backend has no dropout kernels yet (the sim backend and the planner "
                       "model dropout's memory and time)",
                       model.dropout, to_string(backend));
  if (run.data_parallel <= 1) return "";
  if (backend == BackendKind::cuda && shards_optimizer(run) && run.optimizer_sharding != OptimizerSharding::zero1)
    return fmt::format("data_parallel = {} with optimizer_sharding = \"{}\": the cuda backend shards only its optimizer "
                       "state yet (zero1; zero2 and fsdp on the cpu and sim backends)",
                       run.data_parallel, to_string(run.optimizer_sharding));
  if (backend == BackendKind::cuda && gathers_in_first_forward(run))
    return fmt::format("data_parallel = {} with optimizer_sharding = \"zero1\" and grad_sync = \"overlap\": the cuda "
                       "backend gathers the parameters after the optimizer, not inside the forward, yet (grad_sync = "
                       "\"after_chunk\" runs; the cpu and sim backends gather inside the forward)",
                       run.data_parallel);
  if (backend == BackendKind::cpu && reshards_every_action(run))
    return fmt::format("data_parallel = {} with optimizer_sharding = \"fsdp\" and fsdp_reshard_after_forward = true: the cpu "
                       "backend keeps a chunk's gathered parameters for the step (set it false; the sim backend and the "
                       "planner model resharding)",
                       run.data_parallel);
  return "";
}

bool shards_optimizer(const RunSpec& run) {
  return run.optimizer_sharding != OptimizerSharding::none && run.grad_group() > 1 && run.mode == RunMode::train;
}

bool reshard_after_forward(const RunSpec& run) {
  return run.fsdp_reshard_after_forward.value_or(run.pipeline_size == 1);
}

bool reshards_every_action(const RunSpec& run) {
  return shards_optimizer(run) && run.optimizer_sharding == OptimizerSharding::fsdp && reshard_after_forward(run);
}

bool gathers_in_first_forward(const RunSpec& run) {
  if (!shards_optimizer(run)) return false;
  if (run.optimizer_sharding == OptimizerSharding::fsdp) return !reshard_after_forward(run);
  return run.grad_sync == GradSync::overlap;
}

std::string_view to_string(OptimizerSharding v) {
  switch (v) {
    case OptimizerSharding::none: return "none";
    case OptimizerSharding::zero1: return "zero1";
    case OptimizerSharding::zero2: return "zero2";
    case OptimizerSharding::fsdp: return "fsdp";
  }
  return "?";
}
std::string_view to_string(CpComm v) { return v == CpComm::allgather ? "allgather" : "ring"; }

std::string_view to_string(GradSync v) {
  switch (v) {
    case GradSync::after_flush: return "after_flush";
    case GradSync::after_chunk: return "after_chunk";
    case GradSync::overlap: return "overlap";
  }
  return "?";
}
std::string_view to_string(RankOrder v) { return v == RankOrder::tp_pp_dp ? "tp-pp-dp" : "tp-dp-pp"; }

std::string_view to_string(Remainder v) {
  switch (v) {
    case Remainder::first: return "first";
    case Remainder::last: return "last";
    case Remainder::balanced: return "balanced";
  }
  return "?";
}

std::string_view to_string(BalanceBy v) { return v == BalanceBy::flops ? "flops" : "params"; }

int dtype_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

const RunSpec* Job::find_run(std::string_view run_name) const {
  for (const auto& r : runs)
    if (r.name == run_name) return &r;
  return nullptr;
}

}  // namespace pipebench
