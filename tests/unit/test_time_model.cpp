// The hardware time model (issue 38, docs/time-model.md): device presets and
// the [device] keys they fill, the GEMM model (efficiency table, wave
// quantization, memory roofline), every piece's GEMM FLOPs equal to its
// Cost's, the planner and the sim backend sharing action_seconds and
// optimizer_seconds, and the iteration the plan predicts.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/device_preset.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/time_model.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/plan/time_breakdown.hpp"

using namespace pipebench;

namespace {

const std::string kJob = R"(schema = 1
[job]
name = "tm"
[model]
kind = "gpt"
hidden = 256
layers = 4
heads = 8
ffn_hidden = 1024
seq_len = 128
vocab = 1000
dtype = "fp16"
[device]
backend = "sim"
preset = "a100-80gb"
[[run]]
name = "pp2"
pipeline_size = 2
micro_batch_size = 2
num_microbatches = 4
)";

// A device on which every GEMM runs at its peak and memory is free: the GEMM
// terms are then FLOPs / peak exactly.
constexpr std::array<GemmEfficiencyPoint, 2> kIdeal{{{1, 1.0}, {1 << 20, 1.0}}};
const DevicePreset kIdealDevice{"ideal", "", 1ull << 40, 8, 1e15, 1e15, 1, 1e30, 1.0, 0.0, kIdeal, 0.0,
                                LinkPreset{1e11, 1e-5}, LinkPreset{1e10, 2e-5}, 1.0};

ModelSpec spec(ModelKind kind) {
  ModelSpec m;
  m.kind = kind;
  m.hidden = 256;
  m.layers = 4;
  m.heads = 8;
  m.kv_heads = kind == ModelKind::llama ? 4 : 8;
  m.ffn_hidden = 512;
  m.seq_len = 64;
  m.vocab = 1000;
  return m;
}

}  // namespace

TEST_CASE("device presets: known names, unknown refused with the list", "[time_model]") {
  REQUIRE(device_presets().size() == 3);
  for (const char* name : {"a100-80gb", "h100-80gb", "h200-141gb"}) {
    const DevicePreset* p = find_device_preset(name);
    REQUIRE(p != nullptr);
    CHECK(p->gpus_per_node == 8);
    CHECK(p->matrix_flops_16bit > p->fp32_flops);
    CHECK(p->intra_node.bus_bytes_per_s > p->inter_node.bus_bytes_per_s);
  }
  CHECK(find_device_preset("v100") == nullptr);
  const std::string e = testing::error_of(testing::replaced(kJob, "preset = \"a100-80gb\"", "preset = \"v100\""));
  CHECK_THAT(e, Catch::Contains("w.toml:15") && Catch::Contains("device.preset") && Catch::Contains("\"h200-141gb\""));
}

TEST_CASE("device presets fill the [device] keys the workload leaves unset", "[time_model]") {
  const Job job = parse_job(kJob, "w.toml");
  const DevicePreset& a100 = *find_device_preset("a100-80gb");
  REQUIRE(job.device.preset == &a100);
  CHECK(job.device.memory_capacity_bytes == 81920ull << 20);
  CHECK(job.device.ranks_per_node == 8);
  CHECK(job.device.sim_link_gbps == Approx(a100.intra_node.bus_bytes_per_s * 8e-9));
  CHECK(job.device.sim_inter_node_gbps == Approx(a100.inter_node.bus_bytes_per_s * 8e-9));
  CHECK(job.device.sim_inter_node_latency_us == Approx(20.0));
  // Set keys win, wherever they stand in the table.
  const Job own = parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"",
                                              "memory_capacity = \"40GiB\"\npreset = \"a100-80gb\"\nranks_per_node = 4"),
                            "w.toml");
  CHECK(own.device.memory_capacity_bytes == 40ull << 30);
  CHECK(own.device.ranks_per_node == 4);
  // The preset is part of the workload's identity (it changes every modelled time).
  const Job none = parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"\n", ""), "w.toml");
  CHECK(workload_keys(job, job.runs[0]).at("device.preset") == "a100-80gb");
  CHECK(workload_keys(none, none.runs[0]).count("device.preset") == 0);
}

TEST_CASE("GEMM model: efficiency table, wave quantization, memory roofline", "[time_model]") {
  const DevicePreset& a100 = *find_device_preset("a100-80gb");
  const TimeModel tm(a100, DType::fp16);
  CHECK(tm.peak_flops() == 312e12);
  CHECK(TimeModel(a100, DType::fp32).peak_flops() == 19.5e12);
  // The table's points, log-interpolated between them, clamped outside.
  CHECK(tm.k_efficiency(64) == Approx(0.55));
  CHECK(tm.k_efficiency(90.5) == Approx(0.55 + 0.5 * (0.68 - 0.55)).epsilon(1e-3));
  CHECK(tm.k_efficiency(1) == Approx(0.40));
  CHECK(tm.k_efficiency(1e6) == Approx(0.85));
  // 108 SMs: 109 tiles need two waves, the second nearly empty.
  CHECK(tm.wave_efficiency(108) == Approx(1.0));
  CHECK(tm.wave_efficiency(109) == Approx(109.0 / 216.0));
  // A large square GEMM is compute-bound: FLOPs / (peak · table · waves).
  const double n = 8192;
  const double tiles = (n / 256) * (n / 128);
  CHECK(tm.gemm_s(n, n, n) == Approx(2 * n * n * n / (312e12 * 0.85 * tm.wave_efficiency(tiles))));
  // K = 16: fewer FLOPs than bytes allow; the three matrices' streaming decides.
  const double bytes = 2.0 * (n * 16 + 16 * n + n * n);
  CHECK(tm.gemm_s(n, n, 16) == Approx(bytes / (2039e9 * 0.85)));
  CHECK(tm.gemm_s(0, n, n) == 0.0);
  // A weight gradient accumulates into its fp32 gradient (beta = 1): the
  // output is read and written, 8 bytes an element, whatever the dtype.
  const double accumulated = 2.0 * (n * 16 + 16 * n) + 8.0 * n * n;
  CHECK(tm.gemm_s(n, n, 16, 1.0, TimeModel::Output::accumulated_fp32) == Approx(accumulated / (2039e9 * 0.85)));
  // Compute-bound, the A100 still reads the output after the mainloop
  // (gemm_accumulate_serial = 1): 4 bytes an element added to the compute.
  CHECK(a100.gemm_accumulate_serial == 1.0);
  CHECK(tm.gemm_s(n, n, n, 1.0, TimeModel::Output::accumulated_fp32) ==
        Approx(tm.gemm_s(n, n, n) + 4.0 * n * n / (2039e9 * 0.85)));
  // fp32 on CUDA cores at K = 16 is compute-bound: its compute, then the read.
  const TimeModel fp32(a100, DType::fp32);
  const double fp32_compute = 2 * n * n * 16 / (19.5e12 * 0.40 * tm.wave_efficiency(tiles));
  REQUIRE(fp32_compute > (4.0 * (n * 16 + 16 * n) + 4.0 * n * n) / (2039e9 * 0.85));
  CHECK(fp32.gemm_s(n, n, 16, 1.0, TimeModel::Output::accumulated_fp32) ==
        Approx(fp32_compute + 4.0 * n * n / (2039e9 * 0.85)));
  // Where the read overlaps the math (the Hopper presets: 0), compute-bound,
  // the output's traffic changes nothing; memory-bound, all of it streams.
  const DevicePreset& h100 = *find_device_preset("h100-80gb");
  REQUIRE(h100.gemm_accumulate_serial == 0.0);
  const TimeModel hopper(h100, DType::fp16);
  CHECK(hopper.gemm_s(n, n, n, 1.0, TimeModel::Output::accumulated_fp32) == hopper.gemm_s(n, n, n));
  CHECK(hopper.gemm_s(n, n, 16, 1.0, TimeModel::Output::accumulated_fp32) == Approx(accumulated / (3350e9 * 0.85)));
}

TEST_CASE("GEMM calibration: a measured GEMM gives e(K) where compute-bound, the bandwidth where not", "[time_model]") {
  const DevicePreset& h200 = *find_device_preset("h200-141gb");
  const TimeModel tm(h200, DType::bf16);
  const double n = 8192, waves = tm.wave_efficiency((n / 256) * (n / 128));
  REQUIRE(waves == Approx(2048.0 / (16 * 132)));
  // The model's own time gives back its table; 10% slower, e(K) 10% lower.
  const auto own = tm.calibrate_gemm(n, n, 4096, tm.gemm_s(n, n, 4096));
  CHECK(own.compute_bound);
  CHECK(own.efficiency == Approx(0.80).epsilon(1e-12));
  CHECK(own.table_efficiency == Approx(0.80));
  CHECK(std::isnan(own.bandwidth_fraction));
  const double flops = 2 * n * n * 1024;
  const auto slower = tm.calibrate_gemm(n, n, 1024, 1.1 * tm.gemm_s(n, n, 1024));
  CHECK(slower.efficiency == Approx(0.83 * 0.80 / 0.85 / 1.1).epsilon(1e-12));
  CHECK(slower.efficiency == Approx(flops / (989.4e12 * waves * slower.model_s * 1.1)));
  // K = 128 on an H200 is memory-bound in the model whatever e(K) is (a GEMM
  // does fewer than K FLOPs a byte; the ridge is ~240 e(K) here): even a
  // measurement slower than the memory side calibrates the bandwidth, not e(K).
  const double bytes = 2.0 * (n * 128 + 128 * n + n * n);
  const auto low = tm.calibrate_gemm(n, n, 128, bytes / (0.8 * 4800e9));
  CHECK_FALSE(low.compute_bound);
  CHECK(std::isnan(low.efficiency));
  CHECK(low.bandwidth_fraction == Approx(0.8));
  CHECK(low.memory_s == Approx(bytes / (0.85 * 4800e9)));
  CHECK(low.model_s == Approx(low.memory_s));
  CHECK(low.compute_s < low.memory_s);
  CHECK(own.model_s == Approx(own.compute_s));
}

// The published maximum achievable matmul FLOP/s (MAMF) of each part: a
// brute-force search of bf16 torch.mm shapes, the mean of 100 runs after 50
// of warm-up (stas00/ml-engineering, compute/accelerator/README.md, "Maximum
// Achievable Matmul FLOPS comparison table": A100 SXM 271.2 TFLOP/s at
// 1024x10240x5120, torch 2.6.0+cu126; H100 SXM 794.5 at 2048x2048x13312,
// torch 2.7.0+cu126, "H200 is the same"). The efficiency tables are assumed in
// shape, but none may be faster than its part's measured maximum, and each
// reaches the same share of it (docs/time-model.md, "GEMM efficiency").
TEST_CASE("GEMM tables: under each part's published maximum, at one share of it", "[time_model]") {
  struct Mamf {
    const char* preset;
    double m, n, k, flops_per_s;
  };
  const Mamf published[] = {{"a100-80gb", 1024, 10240, 5120, 271.2e12},
                            {"h100-80gb", 2048, 2048, 13312, 794.5e12},
                            {"h200-141gb", 2048, 2048, 13312, 794.5e12}};
  for (const Mamf& p : published) {
    CAPTURE(p.preset);
    const TimeModel tm(*find_device_preset(p.preset), DType::bf16);
    const auto at = tm.calibrate_gemm(p.m, p.n, p.k, 2 * p.m * p.n * p.k / p.flops_per_s);
    REQUIRE(at.compute_bound);
    const double share = at.table_efficiency / at.efficiency;  // model's FLOP/s over the measured maximum
    CHECK(share < 1.0);
    CHECK(share == Approx(0.966).margin(0.002));
  }
}

TEST_CASE("device presets by GPU name: the SXM parts only", "[time_model]") {
  CHECK(device_preset_for_gpu("NVIDIA H200") == find_device_preset("h200-141gb"));
  CHECK(device_preset_for_gpu("NVIDIA H100 80GB HBM3") == find_device_preset("h100-80gb"));
  CHECK(device_preset_for_gpu("NVIDIA A100-SXM4-80GB") == find_device_preset("a100-80gb"));
  for (const char* other : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GH200 480GB",
                            "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-32GB", ""})
    CHECK(device_preset_for_gpu(other) == nullptr);
}

TEST_CASE("time model: a weight gradient pass pays for its fp32 accumulation where memory-bound", "[time_model]") {
  // A block whose W GEMMs have few tokens (K = T = 64) is bound by the fp32
  // gradient's read and write: W's GEMM time is the bytes of
  // 2·(in·T + T·out) + 8·in·out per linear layer at the achievable bandwidth.
  const DevicePreset& a100 = *find_device_preset("a100-80gb");
  const TimeModel tm(a100, DType::bf16);
  ModelSpec s = spec(ModelKind::mlp);
  s.hidden = 4096;
  s.ffn_hidden = 16384;  // seq_len 64
  const ModelDesc model(s, DType::bf16, TensorSplit{1, false, false});
  const PieceTime t = tm.block(model, 1);
  const double T = 64, h = 4096, f = 16384;
  const double expected = tm.stream_s(2.0 * (h * T + T * f) + 8.0 * h * f) + tm.stream_s(2.0 * (f * T + T * h) + 8.0 * f * h);
  CHECK(t.weight_grad.gemm_s == Approx(expected).epsilon(1e-12));
}

TEST_CASE("time model: the element-wise term by kernel, each its bytes, summing to the term", "[time_model]") {
  const DevicePreset& a100 = *find_device_preset("a100-80gb");
  const TimeModel tm(a100, DType::fp16);
  const double e = 2, b = 2, s = 64, T = b * s, h = 256, f = 512, t = 4, heads = 8.0 / t;
  const double scores = b * heads * s * s;
  auto bytes = [&](double x) { return tm.stream_s(e * x); };
  auto sum_is_total = [](const PassTime& p) {
    double sum = 0.0;
    for (double x : p.streams) sum += x;
    CHECK(sum == Approx(p.elementwise_s).epsilon(1e-12));
  };
  SECTION("gpt with sequence parallelism: the norms and residuals on T/t tokens, the rest on the rank's heads and columns") {
    const ModelDesc model(spec(ModelKind::gpt), DType::fp16, TensorSplit{4, true, true});
    const PieceTime blk = tm.block(model, 2);
    const double Ts = T / t;
    CHECK(blk.forward.stream(Stream::norms) == Approx(bytes(2 * 2 * Ts * h)));
    CHECK(blk.forward.stream(Stream::residual) == Approx(bytes(2 * 3 * Ts * h)));
    CHECK(blk.forward.stream(Stream::softmax) == Approx(bytes(2 * scores)));
    CHECK(blk.forward.stream(Stream::activation) == Approx(bytes(2 * T * f / t)));
    CHECK(blk.input_grad.stream(Stream::norms) == Approx(bytes(2 * 3 * Ts * h)));
    CHECK(blk.input_grad.stream(Stream::activation) == Approx(bytes(3 * T * f / t)));
    CHECK(blk.forward.stream(Stream::rope) == 0.0);
    CHECK(blk.forward.stream(Stream::dropout) == 0.0);  // no model.dropout
    // Selective recomputation runs the softmax again, nothing else memory-bound.
    CHECK(blk.recompute.elementwise_s == blk.recompute.stream(Stream::softmax));
    CHECK(blk.recompute.stream(Stream::softmax) == Approx(bytes(2 * scores)));
    for (const PassTime* p : {&blk.forward, &blk.input_grad, &blk.recompute}) sum_is_total(*p);
    const PieceTime head = tm.head(model, 2);
    CHECK(head.forward.stream(Stream::norms) == Approx(bytes(2 * Ts * h)));
    // The vocabulary padded as Megatron-LM pads it (1000 -> 1024 at t = 4), each rank a quarter.
    CHECK(head.forward.stream(Stream::cross_entropy) == Approx(bytes(3 * T * static_cast<double>(padded_vocab(spec(ModelKind::gpt), 4)) / t)));
    CHECK(tm.embedding(model, 2).weight_grad.stream(Stream::embedding) == Approx(bytes(3 * T * h)));
  }
  SECTION("llama: RoPE on q and k; SwiGLU reads two inputs") {
    const ModelDesc model(spec(ModelKind::llama), DType::fp16, TensorSplit{1, false, false});
    const PieceTime blk = tm.block(model, 2);
    const double kv = 4 * (h / 8);  // 4 K/V heads of 32
    CHECK(blk.forward.stream(Stream::rope) == Approx(bytes(2 * T * (h + kv))));
    CHECK(blk.forward.stream(Stream::activation) == Approx(bytes(3 * T * f)));
    CHECK(blk.input_grad.stream(Stream::activation) == Approx(bytes(5 * T * f)));
    sum_is_total(blk.forward);
    sum_is_total(blk.input_grad);
  }
  SECTION("a pass scaled n times scales every kernel") {
    const ModelDesc model(spec(ModelKind::gpt), DType::fp16, TensorSplit{1, false, false});
    PassTime p = tm.block(model, 2).forward;
    const double norms = p.stream(Stream::norms);
    p *= 3.0;
    CHECK(p.stream(Stream::norms) == Approx(3 * norms));
    sum_is_total(p);
  }
}

TEST_CASE("time model: every piece's GEMM FLOPs are its Cost's", "[time_model]") {
  const TimeModel tm(kIdealDevice, DType::fp16);
  for (ModelKind kind : {ModelKind::gpt, ModelKind::llama, ModelKind::mlp})
    for (TensorSplit split : {TensorSplit{1, false, false}, TensorSplit{2, false, false}, TensorSplit{4, true, true}}) {
      if (kind == ModelKind::mlp && split.selective_recompute) continue;
      CAPTURE(static_cast<int>(kind), split.degree, split.sequence_parallel);
      const ModelDesc model(spec(kind), DType::fp16, split);
      const Cost c = model.stage(3, 2, true, true);
      const PieceTime t = tm.stage(model, 3, 2, true, true);
      auto flops = [](const PassTime& p) { return (p.gemm_s + p.attention_s) * 1e15; };
      CHECK(flops(t.forward) == Approx(c.forward_flops).epsilon(1e-12));
      CHECK(flops(t.input_grad) + flops(t.weight_grad) == Approx(c.backward_flops).epsilon(1e-12));
      CHECK(flops(t.recompute) == Approx(c.recompute_flops).margin(1e-3));
      // Nothing moves on this device but the memory-bound kernels, which cost nothing here either.
      CHECK(t.forward.elementwise_s == Approx(0.0).margin(1e-20));
    }
}

TEST_CASE("time model: the planner's costs are the terms plus the collectives; the optimizer streams its state",
          "[time_model]") {
  const Job job = parse_job(kJob, "w.toml");
  const RunPlan plan = plan_run(job, job.runs[0]);
  const ModelDesc model(job.model, DType::fp16, tensor_split(job.runs[0]));
  const TimeModel tm(*job.device.preset, DType::fp16);
  for (std::size_t v = 0; v < plan.partition.stages.size(); ++v) {
    const StageRange& st = plan.partition.stages[v];
    const PieceTime t = tm.stage(model, 2, st.num_layers, st.has_embedding, st.has_head);
    CHECK(plan.costs.forward[v] == Approx(t.forward.total()));
    CHECK(plan.costs.backward[v] == Approx(t.input_grad.total() + t.weight_grad.total()));
  }
  // AdamW with fp16 storage: 38 bytes per parameter streamed, one kernel.
  const StagePlan& sp = plan.stages[0];
  CHECK(sp.optimizer_s == Approx(38.0 * static_cast<double>(sp.cost.params) / (2039e9 * 0.85) + 5e-6));
  // The iteration: the makespan, then (after the global gradient norm) the longest optimizer step.
  CHECK(plan.iteration_s == Approx(plan.step_s + std::max(plan.stages[0].optimizer_s, plan.stages[1].optimizer_s)));
  CHECK(plan.iteration_s > plan.step_s);
  // The breakdown reports the same figures, and MFU by its convention.
  const TimeBreakdown b = time_breakdown(job, plan);
  CHECK(b.ranks.size() == 2);
  CHECK(b.ranks[1].forward.total() == Approx(4 * plan.costs.forward[1]));
  CHECK(b.mfu == Approx(step_flops(plan) / (plan.iteration_s * 2 * 312e12)));
  CHECK_THAT(format_plan_json(plan_job(job)), Catch::Contains("\"time_model\"") && Catch::Contains("\"mfu\""));
  CHECK_THAT(format_plan_text(plan_job(job)), Catch::Contains("time model (a100-80gb"));
}

TEST_CASE("the block as run: forward and backward with their collectives and the run's recomputation",
          "[time_model]") {
  // Korthikanti et al.'s Table 4 measure (docs/fidelity.md): one layer's
  // forward, and its backward with whatever the run recomputes.
  const std::string tp = testing::replaced(testing::replaced(kJob, "[model]\n", "[model]\nattention = \"materialized\"\n"),
                                           "pipeline_size = 2", "pipeline_size = 2\ntensor_parallel = 2");
  const auto breakdown = [&](const std::string& recompute) {
    const Job job = parse_job(recompute.empty() ? tp : tp + "recompute = \"" + recompute + "\"\n", "w.toml");
    return time_breakdown(job, plan_run(job, job.runs[0]));
  };
  const TimeBreakdown none = breakdown(""), full = breakdown("full"), selective = breakdown("selective");
  REQUIRE(none.layer_tp_forward_s > 0.0);
  CHECK(none.layer_tp_comm_s ==
        Approx(none.layer_tp_forward_s + none.layer_tp_input_grad_s + none.layer_tp_weight_grad_s));
  CHECK(none.layer_forward_s == Approx(none.layer.forward.total() + none.layer_tp_forward_s));
  CHECK(none.layer_backward_s == Approx(none.layer.input_grad.total() + none.layer.weight_grad.total() +
                                        none.layer_tp_input_grad_s + none.layer_tp_weight_grad_s));
  // Full recomputation runs the forward, collectives included, again in the backward;
  // selective only the attention core, which has no collective.
  CHECK(full.layer_forward_s == Approx(none.layer_forward_s));
  CHECK(full.layer_backward_s == Approx(none.layer_backward_s + none.layer_forward_s));
  REQUIRE(selective.layer.recompute.total() > 0.0);
  CHECK(selective.layer_backward_s == Approx(none.layer_backward_s + selective.layer.recompute.total()));
  CHECK_THAT(format_plan_json(plan_job(parse_job(tp, "w.toml"))),
             Catch::Contains("\"tp_comm\": {") && Catch::Contains("\"input_grad_s\":") && Catch::Contains("\"backward_s\":"));
}

TEST_CASE("pipeline transfers ride the inter-node link when a pipeline spans nodes", "[time_model]") {
  Job job = parse_job(kJob, "w.toml");
  const RunSpec& run = job.runs[0];
  const std::uint64_t bytes = 1 << 20;
  const parallel::Link one_node = parallel::pipeline_link(job.device, run);  // 2 ranks on a node of 8
  CHECK_FALSE(one_node.inter_node);
  job.device.ranks_per_node = 1;
  const parallel::Link spread = parallel::pipeline_link(job.device, run);
  CHECK(spread.inter_node);
  CHECK(parallel::transfer_s(spread, bytes) == Approx(20e-6 + bytes / 23e9));
  CHECK(plan_run(job, run).costs.transfer == Approx(parallel::transfer_s(spread, 2 * 128 * 256 * 2)));
}

TEST_CASE("model.dropout: gpt only, below 1, in the fingerprint when set; the real backends skip it with the reason",
          "[time_model]") {
  const std::string with = testing::replaced(kJob, "dtype = \"fp16\"", "dtype = \"fp16\"\ndropout = 0.1");
  const Job job = parse_job(with, "w.toml");
  CHECK(job.model.dropout == 0.1);
  CHECK_THAT(workload_keys(job, job.runs[0]).at("model.dropout"), Catch::StartsWith("0.1"));
  const Job none = parse_job(kJob, "w.toml");
  CHECK(workload_keys(none, none.runs[0]).count("model.dropout") == 0);
  CHECK_THAT(testing::error_of(testing::replaced(with, "dropout = 0.1", "dropout = 1")),
             Catch::Contains("w.toml:13") && Catch::Contains("model.dropout") && Catch::Contains("below 1"));
  CHECK_THAT(testing::error_of(testing::replaced(with, "kind = \"gpt\"", "kind = \"llama\"\nkv_heads = 8")),
             Catch::Contains("model.dropout") && Catch::Contains("only kind = \"gpt\""));
  CHECK(not_executed(job.runs[0], BackendKind::sim, job.model).empty());
  CHECK_THAT(not_executed(job.runs[0], BackendKind::cpu, job.model),
             Catch::Contains("model.dropout = 0.1: the cpu backend has no dropout kernels yet"));
  CHECK_THAT(not_executed(job.runs[0], BackendKind::cuda, job.model), Catch::Contains("the cuda backend"));
  RunSpec inference = job.runs[0];
  inference.mode = RunMode::inference;
  CHECK(not_executed(inference, BackendKind::cpu, job.model).empty());
  // The time model streams the attention dropout and the hidden masks: a slower forward and backward.
  const RunPlan plain = plan_run(none, none.runs[0]), dropped = plan_run(job, job.runs[0]);
  CHECK(dropped.costs.forward[0] > plain.costs.forward[0]);
  CHECK(dropped.costs.backward[0] > plain.costs.backward[0]);
  CHECK(dropped.stages[0].activation_bytes_per_microbatch > plain.stages[0].activation_bytes_per_microbatch);
}

TEST_CASE("[device] gemm_efficiency, hbm_efficiency, kernel_launch_us: your own figures in place of the preset's",
          "[time_model]") {
  const Job preset = parse_job(kJob, "w.toml");
  const auto with = [](const std::string& keys) {
    return parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"", "preset = \"a100-80gb\"\n" + keys), "w.toml");
  };
  // bench_cuda_gemm's measured points, as tools/gpu_check_summary.py writes them, replace the table.
  const Job own = with("gemm_efficiency = [[256, 0.5], [4096, 0.6]]\nhbm_efficiency = 0.7\nkernel_launch_us = 8");
  REQUIRE(own.device.gemm_efficiency.size() == 2);
  const DevicePreset d = device_model(own.device);
  CHECK(d.name == "a100-80gb");
  CHECK(d.hbm_efficiency == 0.7);
  CHECK(d.kernel_launch_s == Approx(8e-6));
  CHECK(d.matrix_flops_16bit == 312e12);  // the rest is the preset's
  const TimeModel tm(d, DType::fp16), base(device_model(preset.device), DType::fp16);
  CHECK(tm.k_efficiency(4096) == Approx(0.6));
  CHECK(tm.k_efficiency(1024) == Approx(0.5 + (2.0 / 4.0) * 0.1));  // log2 interpolation
  CHECK(tm.k_efficiency(16) == Approx(0.5));                        // clamped
  const double n = 8192;
  CHECK(tm.gemm_s(n, n, n) == Approx(base.gemm_s(n, n, n) * 0.85 / 0.6));
  CHECK(tm.stream_s(1e9) == Approx(base.stream_s(1e9) * 0.85 / 0.7));
  // The plan times with them: every action slower than with the preset's figures.
  const RunPlan a = plan_run(preset, preset.runs[0]), b = plan_run(own, own.runs[0]);
  for (std::size_t v = 0; v < a.costs.forward.size(); ++v) CHECK(b.costs.forward[v] > a.costs.forward[v]);
  // Part of the workload's identity when set (they change every modelled time), absent otherwise.
  const auto keys = workload_keys(own, own.runs[0]);
  CHECK(keys.at("device.gemm_efficiency") == "[[256, 0.5], [4096, 0.59999999999999998]]");
  CHECK(keys.at("device.hbm_efficiency") == "0.69999999999999996");
  CHECK(keys.at("device.kernel_launch_us") == "8");
  for (const char* k : {"device.gemm_efficiency", "device.hbm_efficiency", "device.kernel_launch_us"})
    CHECK(workload_keys(preset, preset.runs[0]).count(k) == 0);
  // Said wherever the figures are: the plan's text and JSON name whose figures they are.
  CHECK(own_device_figures(own.device) == std::vector<std::string_view>{"gemm_efficiency", "hbm_efficiency", "kernel_launch_us"});
  CHECK(own_device_figures(preset.device).empty());
  CHECK_THAT(format_plan_text(plan_job(own)),
             Catch::Contains("time model (a100-80gb with the workload's own gemm_efficiency, hbm_efficiency, kernel_launch_us;"));
  CHECK_THAT(format_plan_text(plan_job(preset)), Catch::Contains("time model (a100-80gb;"));
  std::string json = format_plan_json(plan_job(own));
  std::erase_if(json, [](char c) { return c == ' ' || c == '\n'; });
  CHECK_THAT(json,
             Catch::Contains("\"own_figures\":[\"gemm_efficiency\",\"hbm_efficiency\",\"kernel_launch_us\"]") &&
                 Catch::Contains("\"gemm_efficiency\":[[256,0.5],[4096,0.6]]") &&
                 Catch::Contains("\"intra_node_gbps\":1600,\"intra_node_latency_us\":10,\"inter_node_gbps\":184,"
                                 "\"inter_node_latency_us\":20"));
  // Refused, each with the reason.
  const std::vector<std::pair<std::string, std::string>> bad{
      {"gemm_efficiency = [[4096, 0.6], [256, 0.5]]", "K must ascend"},
      {"gemm_efficiency = [[256, 1.2]]", "outside (0, 1]"},
      {"gemm_efficiency = [[256, 0]]", "outside (0, 1]"},
      {"gemm_efficiency = [[0.5, 0.7]]", "outside 1 to 1e9"},
      {"gemm_efficiency = [256, 0.7]", "expected a [K, efficiency] pair"},
      {"gemm_efficiency = [[256, \"0.7\"]]", "expected two numbers"},
      {"gemm_efficiency = []", "expected 1 to 64"},
      {"hbm_efficiency = 1.5", "at most 1"},
      {"hbm_efficiency = 0", "> 0"},
      {"kernel_launch_us = -1", ">= 0"},
  };
  for (const auto& [keys_text, why] : bad) {
    CAPTURE(keys_text);
    CHECK_THROWS_WITH(with(keys_text), Catch::Contains(why));
  }
  CHECK_THROWS_WITH(parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"", "hbm_efficiency = 0.8"), "w.toml"),
                    Catch::Contains("needs [device] preset"));
}

TEST_CASE("[device] gemm_accumulate_serial: the accumulating GEMMs' output read, a workload's own figure",
          "[time_model]") {
  const auto with = [](const std::string& keys) {
    return parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"", "preset = \"a100-80gb\"\n" + keys), "w.toml");
  };
  const Job preset = with(""), overlapped = with("gemm_accumulate_serial = 0"), half = with("gemm_accumulate_serial = 0.5");
  CHECK(device_model(preset.device).gemm_accumulate_serial == 1.0);
  CHECK(device_model(half.device).gemm_accumulate_serial == 0.5);
  const TimeModel a(device_model(preset.device), DType::fp16), none(device_model(overlapped.device), DType::fp16),
      mid(device_model(half.device), DType::fp16);
  // A compute-bound weight gradient: the read's time in full, in half, not at all.
  const double n = 8192, read = a.stream_s(4.0 * n * n);
  const auto w = [n](const TimeModel& tm) { return tm.gemm_s(n, n, n, 1.0, TimeModel::Output::accumulated_fp32); };
  CHECK(w(none) == Approx(a.gemm_s(n, n, n)));
  CHECK(w(mid) == Approx(a.gemm_s(n, n, n) + 0.5 * read));
  CHECK(w(a) == Approx(a.gemm_s(n, n, n) + read));
  // A pass reports the read as its own part of gemm_s: the weight gradients only.
  const ModelDesc model(preset.model, DType::fp16, tensor_split(preset.runs[0]));
  const PieceTime b1 = a.block(model, 2), b0 = none.block(model, 2);
  const double h = 256, f = 1024;  // kJob's QKV, projection, fc1, fc2: h x 3h, h x h, h x f, f x h
  CHECK(b1.weight_grad.accumulate_read_s == Approx(a.stream_s(4.0 * (3 * h * h + h * h + 2 * h * f))));
  CHECK(b1.weight_grad.gemm_s - b0.weight_grad.gemm_s == Approx(b1.weight_grad.accumulate_read_s));
  CHECK(b0.weight_grad.accumulate_read_s == 0.0);
  CHECK(b1.forward.accumulate_read_s == 0.0);
  CHECK(b1.input_grad.accumulate_read_s == 0.0);
  CHECK_THAT(format_plan_text(plan_job(preset)), Catch::Contains("[accumulate read "));
  // The plan's weight-gradient actions follow it; the other passes do not.
  const RunPlan p0 = plan_run(overlapped, overlapped.runs[0]), p1 = plan_run(preset, preset.runs[0]);
  CHECK(p1.costs.forward == p0.costs.forward);
  CHECK(p1.costs.backward[0] > p0.costs.backward[0]);
  CHECK(own_device_figures(overlapped.device) == std::vector<std::string_view>{"gemm_accumulate_serial"});
  CHECK(workload_keys(half, half.runs[0]).at("device.gemm_accumulate_serial") == "0.5");
  CHECK(workload_keys(preset, preset.runs[0]).count("device.gemm_accumulate_serial") == 0);
  std::string json = format_plan_json(plan_job(half));
  std::erase_if(json, [](char c) { return c == ' ' || c == '\n'; });
  CHECK_THAT(json, Catch::Contains("\"gemm_accumulate_serial\":0.5") && Catch::Contains("\"gemm_accumulate_read_s\":"));
  CHECK_THROWS_WITH(with("gemm_accumulate_serial = 1.5"), Catch::Contains("at most 1"));
  CHECK_THROWS_WITH(with("gemm_accumulate_serial = -0.1"), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(parse_job(testing::replaced(kJob, "preset = \"a100-80gb\"", "gemm_accumulate_serial = 1"), "w.toml"),
                    Catch::Contains("needs [device] preset"));
}
