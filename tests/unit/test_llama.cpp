// The llama model kind (issue 35): its keys and their validation, Llama's
// SwiGLU width rule, the parameter counts of the published shapes to the
// parameter, the fingerprint, and the planner's heavier first and last stages.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"
#include <fmt/format.h>

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/plan/plan.hpp"

using namespace pipebench;

namespace {

// Line numbers matter: the error tests point at them.
const std::string kLlama = R"(schema = 1
[job]
name = "l"
[model]
kind = "llama"
hidden = 64
layers = 4
heads = 8
kv_heads = 2
seq_len = 16
vocab = 128
attention = "materialized"
[device]
backend = "sim"
[[run]]
name = "base"
pipeline_size = 1
micro_batch_size = 2
num_microbatches = 4
[[run]]
name = "pipe"
pipeline_size = 2
micro_batch_size = 2
num_microbatches = 4
)";

std::string edit(const std::string& from, const std::string& to) { return testing::replaced(kLlama, from, to); }

// kLlama as a gpt workload (no kv_heads).
std::string as_gpt() {
  std::string s = edit("kind = \"llama\"", "kind = \"gpt\"");
  return s.erase(s.find("kv_heads = 2\n"), 13);
}

using testing::error_of;

// A published shape as a workload's [model] on the sim backend.
ModelSpec shape(int hidden, int layers, int heads, int kv_heads, double multiplier, int multiple_of, int vocab) {
  const std::string toml = fmt::format(R"(schema = 1
[job]
name = "shape"
[model]
kind = "llama"
hidden = {}
layers = {}
heads = {}
kv_heads = {}
ffn_dim_multiplier = {}
multiple_of = {}
seq_len = 4096
vocab = {}
dtype = "bf16"
[device]
backend = "sim"
[[run]]
name = "r"
micro_batch_size = 1
num_microbatches = 1
)",
                                       hidden, layers, heads, kv_heads, multiplier, multiple_of, vocab);
  return parse_job(toml, "shape.toml").model;
}

}  // namespace

TEST_CASE("llama: defaults, and Llama's SwiGLU width rule", "[llama]") {
  const Job job = parse_job(kLlama, "w.toml");
  CHECK(job.model.kind == ModelKind::llama);
  CHECK(job.model.kv_heads == 2);
  CHECK(job.model.rope_theta == 10000.0);
  CHECK(job.model.norm_eps == 1e-5);
  CHECK_FALSE(job.model.tie_embeddings);
  CHECK(job.model.ffn_hidden == 256);  // 2/3 of 256 = 170, rounded up to 256
  CHECK(llama_ffn_hidden(4096, 1.0, 256) == 11008);     // Llama-2-7B
  CHECK(llama_ffn_hidden(4096, 1.3, 1024) == 14336);    // Llama-3-8B
  CHECK(llama_ffn_hidden(8192, 1.3, 4096) == 28672);    // Llama-3-70B
  CHECK(llama_ffn_hidden(16384, 1.2, 4096) == 53248);   // Llama-3.1-405B
  CHECK(parse_job(edit("kv_heads = 2\n", ""), "w.toml").model.kv_heads == 8);  // default: heads (MHA)
  CHECK(parse_job(kLlama, "w.toml", {"model.ffn_hidden=100"}).model.ffn_hidden == 100);
}

TEST_CASE("llama: the published shapes' parameter counts, to the parameter", "[llama]") {
  // Totals of Meta's released checkpoints (the sum of every tensor in their
  // safetensors files, as the Hugging Face model pages list them).
  CHECK(ModelDesc(shape(4096, 32, 32, 32, 1.0, 256, 32000), DType::bf16).total_params() == 6'738'415'616);     // Llama-2-7B
  CHECK(ModelDesc(shape(4096, 32, 32, 8, 1.3, 1024, 128256), DType::bf16).total_params() == 8'030'261'248);    // Llama-3-8B
  CHECK(ModelDesc(shape(8192, 80, 64, 8, 1.3, 4096, 128256), DType::bf16).total_params() == 70'553'706'496);   // Llama-3-70B
  CHECK(ModelDesc(shape(16384, 126, 128, 8, 1.2, 4096, 128256), DType::bf16).total_params() == 405'853'388'800);  // Llama-3.1-405B
}

TEST_CASE("llama: every key validated with file:line", "[llama]") {
  CHECK_THAT(error_of(edit("kv_heads = 2", "kv_heads = 3")), Catch::Contains("w.toml:9: model.kv_heads: heads (8) must be divisible by kv_heads (3)"));
  CHECK_THAT(error_of(edit("kv_heads = 2", "kv_heads = 16")), Catch::Contains("w.toml:9: model.kv_heads: expected at most 8"));
  CHECK_THAT(error_of(edit("kv_heads = 2", "kv_heads = 0")), Catch::Contains("w.toml:9: model.kv_heads"));
  CHECK_THAT(error_of(kLlama, {"model.rope_theta=0"}), Catch::Contains("model.rope_theta: expected a finite number > 0"));
  CHECK_THAT(error_of(kLlama, {"model.rope_theta=1e400"}), Catch::Contains("model.rope_theta"));
  CHECK_THAT(error_of(kLlama, {"model.norm_eps=1"}), Catch::Contains("model.norm_eps: expected a number below 1"));
  CHECK_THAT(error_of(kLlama, {"model.multiple_of=0"}), Catch::Contains("model.multiple_of"));
  CHECK_THAT(error_of(kLlama, {"model.ffn_dim_multiplier=-1"}), Catch::Contains("model.ffn_dim_multiplier"));
  CHECK_THAT(error_of(kLlama, {"model.tie_embeddings=true"}), Catch::Contains("model.tie_embeddings: tied input and output"));
  CHECK_THAT(error_of(kLlama, {"model.tie_embeddings=1"}), Catch::Contains("model.tie_embeddings: expected a boolean"));
  CHECK_THAT(error_of(edit("heads = 8", "heads = 6")), Catch::Contains("w.toml:8: model.heads: hidden (64) must be divisible by heads (6)"));
  // llama's keys are not gpt's.
  const std::string gpt = edit("kind = \"llama\"", "kind = \"gpt\"");
  CHECK_THAT(error_of(gpt), Catch::Contains("w.toml:9: model.kv_heads: a key of the llama block"));
  CHECK_THAT(error_of(as_gpt(), {"model.rope_theta=1"}), Catch::Contains("model.rope_theta: a key of the llama block"));
  // Every backend runs the block: the cuda backend too (its kernels are kernels_llama.cu).
  CHECK(parse_job(kLlama, "w.toml", {"device.backend=cuda"}).device.backend == BackendKind::cuda);
}

TEST_CASE("llama: the fingerprint holds its keys; gpt's keeps its keys", "[llama]") {
  const Job llama = parse_job(kLlama, "w.toml");
  const WorkloadKeys k = workload_keys(llama, llama.runs[0]);
  CHECK(k.at("model.kind") == "llama");
  CHECK(k.at("model.kv_heads") == "2");
  CHECK(k.count("model.rope_theta"));
  const Job other = parse_job(kLlama, "w.toml", {"model.kv_heads=4"});
  CHECK(workload_fingerprint(k) != workload_fingerprint(workload_keys(other, other.runs[0])));
  const Job gpt = parse_job(as_gpt(), "w.toml");
  const WorkloadKeys g = workload_keys(gpt, gpt.runs[0]);
  CHECK_FALSE(g.count("model.kv_heads"));
  CHECK_FALSE(g.count("model.rope_theta"));
}

TEST_CASE("llama: the formulas, and the heavier first and last stages", "[llama]") {
  const Job job = parse_job(kLlama, "w.toml");
  const ModelSpec& m = job.model;  // h 64, 8 heads of 8, 2 KV heads: kv = 16, f = 256
  const ModelDesc d(m, DType::fp32);
  const std::int64_t h = 64, kv = 16, f = 256, s = 16, v = 128, b = 2, T = b * s;
  CHECK(d.block(b).params == 2 * h + 2 * h * h + 2 * h * kv + 3 * h * f);
  CHECK(d.embedding(b).params == v * h);  // no position table: rotary positions
  CHECK(d.head(b).params == h + h * v);   // RMSNorm has no bias
  CHECK(d.block(b).activation_bytes == 4 * (T * (6 * h + 2 * kv + 3 * f) + b * 8 * s * s) + T * 4 * 2);
  CHECK(d.block(b).forward_flops == Approx(2.0 * T * (2 * h * h + 2 * h * kv + 3 * h * f) + 4.0 * b * s * s * h));
  CHECK(d.block(b).backward_flops == Approx(2 * d.block(b).forward_flops));
  // GQA: fewer KV heads, fewer parameters than the same shape with full MHA.
  const Job mha = parse_job(kLlama, "w.toml", {"model.kv_heads=8"});
  CHECK(ModelDesc(mha.model, DType::fp32).block(b).params - d.block(b).params == 2 * h * (h - kv));
  // The planner sees two vocab x hidden tables on the first and last stages.
  const JobPlan plan = plan_job(job);
  const auto& costs = plan.runs[1].stage_costs;
  REQUIRE(costs.size() == 2);
  CHECK(costs[0].params == v * h + 2 * d.block(b).params);
  CHECK(costs[1].params == 2 * d.block(b).params + h + h * v);
}

// The workspaces both real backends allocate for a llama stage (the memory
// tracker holds them to these bytes: mpi.cpu.equivalence_llama on cpu, the
// GPU tests on cuda): the fp32 rotary table, and in training the block's
// backward temporaries (du, dW1|dW3, dnorm, dx2, dattn, dqkv, two ping-pong
// gradients) with one score matrix (cpu) or one per head and the fp32 K/V
// gradient sums of a group (cuda).
TEST_CASE("llama: the cpu and cuda workspaces, rotary table included", "[llama]") {
  const Job job = parse_job(kLlama, "w.toml");
  const std::int64_t h = 64, kv = 16, f = 256, s = 16, heads = 8, d = h / heads, b = 2, T = b * s;
  for (const DType dt : {DType::fp32, DType::bf16}) {
    const ModelDesc m(job.model, dt);
    const std::int64_t e = dtype_bytes(dt), rope = 4 * s * d, temps = T * (3 * f + 6 * h + 2 * kv);
    CHECK(m.rope_table_bytes() == rope);
    CHECK(m.cpu_workspace_bytes(2, false) == rope);
    CHECK(m.cpu_workspace_bytes(2, true) == rope + e * (temps + s * s));
    const std::int64_t fixed = ModelDesc::kCudaNormSlotsBytes + 4 * T;
    CHECK(m.cuda_workspace_bytes(2, false) == rope + fixed);
    // Groups of 4 query heads per K/V head: the fp32 dV and dK sums of one group, aligned.
    const std::int64_t gqa = 8 * s * d + 16;
    CHECK(m.cuda_workspace_bytes(2, true) == rope + fixed + m.cuda_embedding_order_bytes(2) + e * (temps + heads * s * s) + gqa);
  }
  // gpt has no rotary table and keeps its temporaries.
  const ModelDesc g(parse_job(as_gpt(), "w.toml").model, DType::fp32);
  CHECK(g.rope_table_bytes() == 0);
  CHECK(g.cuda_workspace_bytes(2, true) ==
        ModelDesc::kCudaNormSlotsBytes + 4 * T + g.cuda_embedding_order_bytes(2) + 4 * (T * (f + 7 * h) + heads * s * s));

  // Tensor-parallel on cuda (cuda_backend.hpp's layout): the rank's widths
  // (f/t, h/t, kv/t) and score matrices of its heads, an fp32 [T, h] buffer
  // for the group's sums and 3 fp32 statistics a token (also in inference);
  // selective recomputation adds the micro-batch's probabilities of its heads.
  for (const DType dt : {DType::fp32, DType::bf16}) {
    const std::int64_t e = dtype_bytes(dt), rope = 4 * s * d, t = 2, ft = f / t, ht = h / t, kvt = kv / t;
    const std::int64_t temps = T * (3 * ft + 4 * h + 2 * ht + 2 * kvt), tensor = 4 * T * h + 12 * T;
    const std::int64_t fixed = ModelDesc::kCudaNormSlotsBytes + 4 * T;
    const ModelDesc m(job.model, dt, {2, false, false, true});
    CHECK(m.cuda_workspace_bytes(2, false) == rope + fixed + tensor);
    const std::int64_t train =
        rope + fixed + tensor + m.cuda_embedding_order_bytes(2) + e * (temps + heads / t * s * s) + 8 * s * d + 16;
    CHECK(m.cuda_workspace_bytes(2, true) == train);
    const ModelDesc sel(job.model, dt, {2, false, true, true});
    CHECK(sel.cuda_workspace_bytes(2, true) == train + e * b * heads / t * s * s);
    // Sequence parallelism: a gathered [T, h] of the storage dtype besides.
    const ModelDesc sp(job.model, dt, {2, true, false, true});
    CHECK(sp.cuda_workspace_bytes(2, true) == train + e * T * h);
    CHECK(sp.cuda_workspace_bytes(2, false) == rope + fixed + tensor + e * T * h);
  }
}
