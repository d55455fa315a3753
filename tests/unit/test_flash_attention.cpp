// model.attention = "flash" in the planner (issue 69, docs/model.md
// "Attention", docs/time-model.md "Flash attention"): the key, the
// activation bytes without the s x s terms (the log-sum-exp instead), the
// time model's fused core over the causal tiles at the preset's flash
// efficiency, and the backends that do not compute it yet saying so.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/device_preset.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/model/time_model.hpp"
#include "pipebench/plan/plan.hpp"

using namespace pipebench;

namespace {

const std::string kJob = R"(schema = 1
[job]
name = "flash"
[model]
kind = "llama"
hidden = 1024
layers = 4
heads = 16
kv_heads = 4
seq_len = 4096
vocab = 1000
dtype = "bf16"
[device]
backend = "sim"
preset = "h100-80gb"
[[run]]
name = "r"
micro_batch_size = 2
num_microbatches = 2
)";

ModelSpec model_with(Attention a, ModelKind kind = ModelKind::llama) {
  ModelSpec m = parse_job(kJob, "w.toml").model;
  m.kind = kind;
  m.kv_heads = kind == ModelKind::llama ? 4 : m.heads;
  m.attention = a;
  return m;
}

}  // namespace

TEST_CASE("flash attention: the key, its fingerprint, the backends that compute it", "[flash]") {
  const Job flash = parse_job(kJob, "w.toml");
  CHECK(flash.model.attention == Attention::flash);  // the default since the cpu backend computes it
  const Job plain = parse_job(kJob, "w.toml", {"model.attention=\"materialized\""});
  CHECK(plain.model.attention == Attention::materialized);
  // A workload that says materialized keeps the fingerprint it had before
  // the key existed (its series goes on); flash starts a series of its own.
  CHECK(workload_keys(flash, flash.runs[0]).at("model.attention") == "flash");
  CHECK(workload_keys(plain, plain.runs[0]).count("model.attention") == 0);
  // mlp has no attention: the key is refused, and its default is inert.
  const std::string mlp = testing::replaced(testing::replaced(kJob, "kind = \"llama\"", "kind = \"mlp\""), "kv_heads = 4\n", "");
  CHECK(parse_job(mlp, "w.toml").model.attention == Attention::materialized);
  CHECK_THAT(testing::error_of(mlp, {"model.attention=\"flash\""}), Catch::Contains("no attention"));
  CHECK_THAT(testing::error_of(kJob, {"model.attention=\"mla\""}), Catch::Contains("not modelled yet"));
  CHECK_THAT(testing::error_of(kJob, {"model.attention=\"sparse\""}), Catch::Contains("flash"));
  CHECK(not_executed(flash.runs[0], BackendKind::sim, flash.model).empty());
  CHECK(not_executed(flash.runs[0], BackendKind::cpu, flash.model).empty());
  CHECK(not_executed(flash.runs[0], BackendKind::cuda, flash.model).empty());
  // The cuda kernels take heads up to kCudaFlashMaxHeadDim wide; wider is skipped with the reason.
  const Job wide = parse_job(kJob, "w.toml", {"model.hidden=4096", "model.heads=16"});
  CHECK_THAT(not_executed(wide.runs[0], BackendKind::cuda, wide.model), Catch::Contains("heads of width 256"));
  CHECK(not_executed(wide.runs[0], BackendKind::cpu, wide.model).empty());
}

TEST_CASE("flash attention: no s x s activation, the log-sum-exp instead", "[flash]") {
  for (const ModelKind kind : {ModelKind::llama, ModelKind::gpt}) {
    INFO(to_string(kind));
    const ModelSpec flash = model_with(Attention::flash, kind), plain = model_with(Attention::materialized, kind);
    const std::int64_t b = 2, s = plain.seq_len, heads = plain.heads, e = 2;
    for (const bool selective : {false, true}) {
      const TensorSplit split{1, false, selective, true};
      const Cost f = ModelDesc(flash, DType::bf16, split).block(static_cast<int>(b));
      const Cost m = ModelDesc(plain, DType::bf16, split).block(static_cast<int>(b));
      // The materialized path keeps the probabilities unless selective recomputation drops them.
      const std::int64_t probs = selective ? 0 : e * b * heads * s * s;
      CHECK(m.activation_bytes - f.activation_bytes == probs - 4 * b * heads * s);
      CHECK(f.recompute_flops == 0.0);  // nothing of the core left to recompute
      CHECK(f.forward_flops == m.forward_flops);  // the model's FLOPs are the same
      if (selective) CHECK(m.recompute_flops > 0.0);
    }
  }
}

TEST_CASE("flash attention: the fused core over the causal tiles at the preset's efficiency", "[flash]") {
  CHECK(flash_tile_fraction(128) == 1.0);
  CHECK(flash_tile_fraction(256) == Approx(0.75));   // 3 of 4 tiles
  CHECK(flash_tile_fraction(4096) == Approx(33.0 / 64.0));
  const DevicePreset& h100 = *find_device_preset("h100-80gb");
  CHECK(h100.flash_attention_efficiency == 0.35);
  CHECK(find_device_preset("a100-80gb")->flash_attention_efficiency == 0.50);
  const TimeModel tm(h100, DType::bf16);
  const ModelSpec flash = model_with(Attention::flash), plain = model_with(Attention::materialized);
  const PieceTime f = tm.block(ModelDesc(flash, DType::bf16), 2), m = tm.block(ModelDesc(plain, DType::bf16), 2);
  const double s = 4096, dh = 64, batch = 2.0 * 16;
  const double forward = 4.0 * s * s * dh * batch * flash_tile_fraction(s) / (989.4e12 * 0.35);
  CHECK(f.forward.attention_s == Approx(forward));
  CHECK(f.input_grad.attention_s == Approx(2.5 * forward));
  // No softmax pass over the scores; the GEMMs and the rest as materialized.
  CHECK(f.forward.streams[static_cast<std::size_t>(Stream::softmax)] == 0.0);
  CHECK(m.forward.streams[static_cast<std::size_t>(Stream::softmax)] > 0.0);
  CHECK(f.forward.gemm_s == Approx(m.forward.gemm_s));
  // At 4096 tokens the fused core beats the materialized one with its s x s traffic.
  CHECK(f.forward.total() < m.forward.total());
  CHECK(f.input_grad.total() < m.input_grad.total());
}

TEST_CASE("flash attention: the plan's memory and step", "[flash]") {
  const Job plain = parse_job(kJob, "w.toml", {"model.attention=\"materialized\""});
  const Job flash = parse_job(kJob, "w.toml");
  const RunPlan p = plan_run(plain, plain.runs[0]), f = plan_run(flash, flash.runs[0]);
  CHECK(f.stages[0].activations_peak_bytes < p.stages[0].activations_peak_bytes);
  CHECK(f.iteration_s < p.iteration_s);
  CHECK(f.stages[0].params_bytes == p.stages[0].params_bytes);
}
