// Tensor parallelism's keys, model and layout (issue 37, docs/tensor-parallel.md):
// validation with file:line, the per-rank costs against Korthikanti et al.
// 2022's activation formulas (their Table 2) and memory figures (Figure 1),
// the vocabulary padding, each rank's part of every tensor, and the
// planner's and sim backend's time for the collectives.
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/backends/stage_layout.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/plan/tune.hpp"

using namespace pipebench;

namespace {

// Line numbers matter: the error tests point at them.
const std::string kJob = R"(schema = 1
[job]
name = "tp"
[model]
kind = "llama"
hidden = 64
layers = 4
heads = 8
kv_heads = 4
ffn_hidden = 96
seq_len = 16
vocab = 200
[device]
backend = "cpu"
[[run]]
name = "base"
micro_batch_size = 2
num_microbatches = 4
[[run]]
name = "pp2_tp2"
pipeline_size = 2
tensor_parallel = 2
micro_batch_size = 2
num_microbatches = 4
)";

std::string error_of(const std::vector<std::string>& overrides) { return testing::error_of(kJob, overrides); }

// Korthikanti et al. 2022, Table 2: activation bytes per transformer layer
// (fp16, with dropout) for s, b, h, a and t.
struct Shape {
  double s, b, h, a;
};
double paper_no_recompute(const Shape& x, double t) { return x.s * x.b * x.h * (10 + 24 / t + 5 * x.a * x.s / (x.h * t)); }
double paper_selective(const Shape& x, double t) { return x.s * x.b * x.h * (10 + 24 / t); }
double paper_sp(const Shape& x, double t) { return x.s * x.b * x.h / t * (34 + 5 * x.a * x.s / x.h); }
double paper_sp_selective(const Shape& x, double t) { return x.s * x.b * x.h * 34 / t; }

ModelSpec gpt(int h, int layers, int heads, int vocab) {
  ModelSpec m;
  m.kind = ModelKind::gpt;
  m.hidden = h;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * h;
  m.seq_len = 2048;
  m.vocab = vocab;
  return m;
}

}  // namespace

TEST_CASE("tensor parallel: the keys, the ranks and the fingerprint", "[tensor_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  const RunSpec& run = *job.find_run("pp2_tp2");
  CHECK(run.ranks() == 4);
  CHECK(run.global_batch() == 8);  // tensor ranks share their micro-batches
  CHECK(run.baseline == "base");   // one rank: the implicit baseline
  CHECK(workload_keys(job, run).at("run.tensor_parallel") == "2");
  CHECK(workload_keys(job, *job.find_run("base")).count("run.tensor_parallel") == 0);  // older series keep theirs
  CHECK_THAT(testing::error_of(testing::replaced(kJob, "tensor_parallel = 2", "tensor_parallel = 3")),
             Catch::Contains("w.toml:22") && Catch::Contains("3 does not divide model.heads = 8"));
  CHECK_THAT(error_of({"run.pp2_tp2.tensor_parallel=8"}), Catch::Contains("8 does not divide model.kv_heads = 4"));
  CHECK_THAT(error_of({"model.ffn_hidden=99"}), Catch::Contains("2 does not divide model.ffn_hidden = 99"));
  CHECK_THAT(error_of({"run.pp2_tp2.tensor_parallel=0"}), Catch::Contains("expected a positive integer >= 1"));
  CHECK_THAT(error_of({"run.pp2_tp2.sequence_parallel=1"}), Catch::Contains("expected true or false"));
  CHECK_THAT(error_of({"run.pp2_tp2.sequence_parallel=true", "model.seq_len=15"}),
             Catch::Contains("tensor_parallel = 2 does not divide model.seq_len = 15"));
  CHECK_THAT(error_of({"run.pp2_tp2.recompute=\"some\""}), Catch::Contains("\"none\", \"selective\", \"full\""));
  // Keys that change nothing are said to.
  const Job sp1 = parse_job(kJob, "w.toml", {"run.base.sequence_parallel=true"});
  REQUIRE(sp1.warnings.size() == 1);
  CHECK_THAT(sp1.warnings[0], Catch::Contains("run.base.sequence_parallel: ignored: tensor_parallel = 1"));
  CHECK_FALSE(sp1.find_run("base")->sequence_parallel);
}

TEST_CASE("tensor parallel: the rank grid puts a stage's tensor ranks next to each other", "[tensor_parallel]") {
  RunSpec run;
  run.pipeline_size = 2;
  run.data_parallel = 2;
  run.tensor_parallel = 2;
  DeviceSpec device;
  device.ranks_per_node = 4;
  const parallel::RankGrid grid = parallel::run_grid(run, device);
  CHECK(grid.tensor_group(5) == std::vector<int>{4, 5});
  CHECK(grid.data_group(5) == std::vector<int>{5, 7});
  CHECK(grid.pipeline_group(5) == std::vector<int>{1, 5});
  CHECK_FALSE(parallel::tensor_group_link(device, run, 5).inter_node);
  device.ranks_per_node = 1;  // a tensor group across nodes rides the inter-node link
  device.sim_inter_node_gbps = 100;
  CHECK(parallel::tensor_group_link(device, run, 5).inter_node);
  CHECK(parallel::tensor_group_link(device, run, 5).gbps == 100);
}

TEST_CASE("tensor parallel: the vocabulary is padded to a multiple of 128 t, as Megatron-LM pads it", "[tensor_parallel]") {
  ModelSpec m = gpt(64, 2, 4, 200);
  CHECK(padded_vocab(m, 1) == 200);  // no split, no padding
  CHECK(padded_vocab(m, 2) == 256);
  m.vocab = 50257;  // GPT-2's
  CHECK(padded_vocab(m, 2) == 50432);
  CHECK(padded_vocab(m, 8) == 51200);
  m.vocab = 51200;  // Megatron's GPT convention: already a multiple of 1024
  CHECK(padded_vocab(m, 8) == 51200);
}

TEST_CASE("tensor parallel: each rank's part of a tensor is the whole tensor's elements", "[tensor_parallel]") {
  // gpt, h = 4, t = 2: qkv [4, 12] split into q | k | v column blocks of 2 per rank.
  ModelSpec m = gpt(4, 1, 2, 256);
  m.seq_len = 4;
  const TensorSplit split{2, false, false};
  StageRange all;
  all.first_layer = 0;
  all.num_layers = 1;
  all.has_embedding = all.has_head = true;
  const StageLayout r1 = stage_layout(m, DType::fp32, all, 1, "test", split, 1);
  const PieceLayout& block = r1.pieces.at(1);
  const TensorSlot& qkv = block.tensors.at(2);
  REQUIRE(qkv.shard);
  CHECK(qkv.size == 4 * 6);
  // Row 0 of rank 1: whole columns 2, 3 (q), 6, 7 (k), 10, 11 (v).
  for (int i = 0; i < 6; ++i) CHECK(qkv.shard->whole_index(i) == std::vector<int>{2, 3, 6, 7, 10, 11}[static_cast<std::size_t>(i)]);
  CHECK(qkv.shard->whole_index(6) == 12 + 2);  // row 1
  const TensorSlot& proj = block.tensors.at(4);  // [4, 4] by rows: rank 1 holds rows 2, 3
  CHECK(proj.shard->whole_index(0) == 8);
  CHECK_FALSE(block.tensors.at(0).shard);  // ln1's gain: whole on every rank, counted once
  CHECK(block.tensors.at(0).shared);
  // The padded vocabulary: 256 rows over 2 ranks; with vocab 200, rank 1's rows 128..255 hold 72 padding rows.
  ModelSpec v = m;
  v.vocab = 200;
  const StageLayout e1 = stage_layout(v, DType::fp32, all, 1, "test", split, 1);
  const TensorSlot& wte = e1.pieces.front().tensors.at(0);
  CHECK(wte.size == 128 * 4);
  CHECK(wte.shard->whole_index(0) == 128 * 4);  // row 128 of the whole [200, 4]
  CHECK(wte.shard->whole_index(72 * 4) == -1);  // row 200: padding
  std::vector<float> values(static_cast<std::size_t>(wte.size));
  initial_values(v, e1.pieces.front(), 0, values.data());
  CHECK(values[72 * 4] == 0.0f);
  // Rank 1's row 0 is the unsplit table's row 128.
  const StageLayout whole = stage_layout(v, DType::fp32, all, 1, "test");
  std::vector<float> unsplit(static_cast<std::size_t>(whole.pieces.front().tensors.at(0).size));
  initial_values(v, whole.pieces.front(), 0, unsplit.data());
  CHECK(values[1] == unsplit[128 * 4 + 1]);
}

TEST_CASE("tensor parallel: activations per layer beside Korthikanti et al.'s Table 2", "[tensor_parallel]") {
  // Their 22B shape, fp16. pipebench's gpt block keeps what its backward
  // reads and has no dropout: Table 2 less the dropout masks (sbh each after
  // attention and MLP, as^2 b/t after the softmax) and the dropout output
  // (2 as^2 b/t), plus each LayerNorm's fp32 mean and 1/std (8 bytes a token,
  // not in the paper).
  const ModelSpec m = gpt(6144, 48, 64, 51200);
  const Shape x{2048, 4, 6144, 64};
  const double sbh = x.s * x.b * x.h, as2b = x.a * x.s * x.s * x.b, sb = x.s * x.b;
  for (const int t : {1, 2, 4, 8}) {
    INFO("t = " << t);
    auto ours = [&](bool sp, bool selective) {
      return static_cast<double>(ModelDesc(m, DType::fp16, {t, sp, selective}).block(4).activation_bytes);
    };
    CHECK(ours(false, false) == Approx(paper_no_recompute(x, t) - 2 * sbh - 3 * as2b / t + 16 * sb).epsilon(1e-12));
    CHECK(ours(false, true) == Approx(paper_selective(x, t) - 2 * sbh + 16 * sb).epsilon(1e-12));
    CHECK(ours(true, false) == Approx(paper_sp(x, t) - (2 * sbh + 3 * as2b) / t + 16 * sb / t).epsilon(1e-12));
    CHECK(ours(true, true) == Approx(paper_sp_selective(x, t) - 2 * sbh / t + 16 * sb / t).epsilon(1e-12));
    // With model.dropout (a training run): the masks and the dropout output
    // too — Table 2 itself, plus the LayerNorms' statistics.
    auto dropped = [&](bool sp, bool selective) {
      ModelSpec d = m;
      d.dropout = 0.1;
      return static_cast<double>(ModelDesc(d, DType::fp16, {t, sp, selective, true}).block(4).activation_bytes);
    };
    CHECK(dropped(false, false) == Approx(paper_no_recompute(x, t) + 16 * sb).epsilon(1e-12));
    CHECK(dropped(false, true) == Approx(paper_selective(x, t) + 16 * sb).epsilon(1e-12));
    CHECK(dropped(true, false) == Approx(paper_sp(x, t) + 16 * sb / t).epsilon(1e-12));
    CHECK(dropped(true, true) == Approx(paper_sp_selective(x, t) + 16 * sb / t).epsilon(1e-12));
  }
  // Inference keeps nothing for a backward: no dropout there.
  ModelSpec d = m;
  d.dropout = 0.1;
  CHECK(ModelDesc(d, DType::fp16, {1, false, false, false}).block(4).activation_bytes ==
        ModelDesc(m, DType::fp16).block(4).activation_bytes);
}

TEST_CASE("tensor parallel: parameter and optimizer memory beside Korthikanti et al.'s Figure 1", "[tensor_parallel]") {
  // 18 bytes a parameter (fp16 weights, fp32 gradients, master and AdamW
  // m, v): their 45.56 GiB is the transformer layers' 12 L h^2 / (t p)
  // weights; the planner's blocks (biases and norms included) are within 0.1%
  // of it, for the 22B (t 8, p 1) and the 175B (t 8, p 8).
  const StateBytes per = state_bytes_per_param(OptimizerKind::adamw, DType::fp16);
  REQUIRE(per.params + per.grads + per.optimizer == 18);
  for (const auto& [model, p] : {std::pair{gpt(6144, 48, 64, 51200), 1}, std::pair{gpt(12288, 96, 96, 51200), 8}}) {
    const double layers_state =
        static_cast<double>(ModelDesc(model, DType::fp16, {8, false, false}).block(1).params) * model.layers / p * 18;
    CHECK(std::abs(layers_state / std::pow(2.0, 30) / 45.56 - 1.0) < 1e-3);
  }
}

TEST_CASE("tensor parallel: the collectives' count and traffic, and their time in the plan", "[tensor_parallel]") {
  const ModelSpec m = gpt(64, 2, 4, 256);
  const std::int64_t B = 2LL * 2048 * 64 * 2;  // one [T, h] tensor, bf16, micro-batch 2
  const Cost plain = ModelDesc(m, DType::bf16, {4, false, false}).block(2);
  CHECK(plain.tp_forward.calls == 2);  // an all-reduce after attention and after the MLP
  CHECK(plain.tp_forward.wire_bytes == 4 * B);
  CHECK(plain.tp_input_grad.calls == 2);
  CHECK(plain.tp_weight_grad.calls == 0);
  const Cost sp = ModelDesc(m, DType::bf16, {4, true, false}).block(2);
  CHECK(sp.tp_forward.calls == 4);  // all-gather and reduce-scatter around each region
  CHECK(sp.tp_forward.wire_bytes == 4 * B);
  CHECK(sp.tp_weight_grad.calls == 2);  // the re-gathers of the sequence-split inputs
  CHECK(ModelDesc(m, DType::bf16, {1, false, false}).block(2).tp_forward.calls == 0);
  // Time on a ring of t: calls x latency + (t-1)/t x traffic / bandwidth.
  parallel::Link link{5e-6, 800.0, false};
  CHECK(parallel::tensor_comm_s(2, 1000, 4, link) == Approx(2 * 5e-6 + 0.75 * 8000 / 800e9));
  CHECK(parallel::tensor_comm_s(2, 1000, 1, link) == 0.0);
  Job job;
  job.model = m;
  job.device.sim_flops_per_s = 1e12;
  const ActionSeconds a = action_seconds(job, plain, 4, link, true);
  CHECK(a.forward == Approx(plain.forward_flops / 1e12 + a.forward_comm));
  CHECK(a.forward_comm == Approx(parallel::tensor_comm_s(2, 4 * B, 4, link)));
  CHECK(a.weight_comm == 0.0);
  CHECK(a.backward + a.weight == Approx(plain.backward_flops / 1e12 + a.backward_comm));
  // Selective recomputation: B runs the attention core's forward again.
  const Cost sel = ModelDesc(m, DType::bf16, {4, false, true}).block(2);
  CHECK(sel.recompute_flops == Approx(4.0 * 2 * 2048.0 * 2048 * 64 / 4));
  CHECK(action_seconds(job, sel, 4, link, false).backward ==
        Approx(action_seconds(job, plain, 4, link, false).backward + sel.recompute_flops / 1e12));
}

TEST_CASE("tensor parallel: plan shows the tensor group and reads the cuda backend's refusal", "[tensor_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  const std::string text = format_plan_text(plan_job(job, {"pp2_tp2"}));
  CHECK_THAT(text, Catch::Contains("tensor parallel: 2 ranks per stage (4 ranks in all, tp-dp-pp); vocabulary 200 padded "
                                   "to 256"));
  CHECK_THAT(text, Catch::Contains("memory estimate per stage, one of its 2 tensor ranks"));
  const RunSpec& run = *job.find_run("pp2_tp2");
  CHECK(not_executed(run, BackendKind::cpu).empty());
  CHECK(not_executed(run, BackendKind::sim).empty());
  // Every backend executes (or models) the split, sequence parallelism and
  // selective recomputation.
  CHECK(not_executed(run, BackendKind::cuda).empty());
  RunSpec selective = *job.find_run("base");
  selective.recompute = Recompute::selective;
  CHECK(not_executed(selective, BackendKind::cuda).empty());
  CHECK(not_executed(selective, BackendKind::cpu).empty());
  RunSpec sp = run;
  sp.sequence_parallel = true;
  CHECK(not_executed(sp, BackendKind::cpu).empty());
  CHECK(not_executed(sp, BackendKind::sim).empty());
  CHECK(not_executed(sp, BackendKind::cuda).empty());
}

TEST_CASE("tensor parallel: tune searches t, and Korthikanti et al.'s published layouts rank first", "[tensor_parallel]") {
  // 22B on 8 GPUs, global batch 4: t 8 x p 1 (their Table 5 row); 175B on
  // 64 GPUs, global batch 64: t 8 x p 8, interleaved (v = 3).
  const std::string dir = std::string(PIPEBENCH_SOURCE_DIR) + "/jobs/korthikanti/";
  const Job j22 = load_job(dir + "gpt_22b_sim.toml", {"device.ranks_per_node=8"});
  TuneOptions o;
  o.max_ranks = 8;
  o.global_batch = 4;
  o.template_run = "tp8_sp_selective";
  // What their Megatron-LM could run: no optimizer sharding (with it, FSDP's
  // p 1 x d 2 x t 4 is predicted faster still: cli.tune_gpus_22b_sharded).
  o.shardings = {OptimizerSharding::none};
  const std::vector<int> degrees = tensor_degrees(j22, *j22.find_run("tp8_sp_selective"), o);
  CHECK(degrees == std::vector<int>{1, 2, 4, 8});  // every t <= 8 dividing 64 heads and 24576
  const TuneResult r22 = tune(j22, o);
  REQUIRE(r22.best());
  CHECK(r22.best()->layout() == "p 1 x t 8");
  CHECK(r22.best()->ranks() == 8);
  const TunedWorkload w22 = tuned_workload(j22, r22);
  CHECK_THAT(w22.toml, Catch::Contains("tensor_parallel = 8\nsequence_parallel = true\n"));
  CHECK(w22.ranks_needed == 8);

  const Job j175 = load_job(dir + "gpt_175b_sim.toml");
  o.max_ranks = 64;
  o.global_batch = 64;
  o.tensor_parallel = {4, 8};
  const TuneResult r175 = tune(j175, o);
  REQUIRE(r175.best());
  CHECK(r175.best()->layout() == "p 8 x t 8");
  CHECK(r175.best()->virtual_stages_per_rank == 3);
  // A degree the model does not allow is skipped with the reason.
  o.tensor_parallel = {5};
  const TuneResult bad = tune(j175, o);
  CHECK_FALSE(bad.best());
  CHECK_THAT(bad.candidates.front().why_not, Catch::Contains("5 does not divide model.heads = 96"));
}

// Issue 66 item 4: p 1 x d 3 x t 4 on 12 ranks at 6 per node puts replica
// 1's tensor group on nodes 0 and 1. The sim backend times that group's
// collectives on the inter-node link; the planner priced only replica 0's
// (intra-node) group, 0.81 s planned against 1.32 s simulated. Now each
// stage is priced on the slowest link any of its replicas' groups rides.
TEST_CASE("tensor parallel: a tensor group that straddles two nodes is priced on the inter-node link", "[tensor_parallel]") {
  const Job job = parse_job(kJob, "w.toml",
                            {"run.pp2_tp2.pipeline_size=1", "run.pp2_tp2.data_parallel=3", "run.pp2_tp2.tensor_parallel=4",
                             "device.backend=\"sim\"", "device.ranks_per_node=6", "device.sim_inter_node_gbps=25",
                             "device.sim_inter_node_latency_us=50"});
  const RunSpec& run = *job.find_run("pp2_tp2");
  int straddling = 0;
  for (int r = 0; r < run.ranks(); ++r) straddling += parallel::tensor_group_link(job.device, run, r).inter_node ? 1 : 0;
  CHECK(straddling == 4);  // one replica's group of four
  CHECK_FALSE(parallel::tensor_group_link(job.device, run, 0).inter_node);
  CHECK(parallel::stage_tensor_link(job.device, run, 0).inter_node);
  const RunPlan plan = plan_run(job, run);
  const ModelDesc model(job.model, plan.storage_dtype, tensor_split(run));
  const StageRange& stage = plan.partition.stages[0];
  const ActionSeconds across =
      action_seconds(job, model, run.micro_batch_size, stage, parallel::inter_node_link(job.device), false);
  const ActionSeconds within =
      action_seconds(job, model, run.micro_batch_size, stage, parallel::intra_node_link(job.device), false);
  CHECK(plan.costs.forward[0] == across.forward);
  CHECK(plan.costs.backward[0] == across.backward);
  CHECK(across.forward > within.forward);
  // Whole replicas on one node (12 per node): the intra-node link, as before.
  const Job one_node = parse_job(kJob, "w.toml",
                                 {"run.pp2_tp2.pipeline_size=1", "run.pp2_tp2.data_parallel=3",
                                  "run.pp2_tp2.tensor_parallel=4", "device.backend=\"sim\"", "device.ranks_per_node=12"});
  CHECK(plan_run(one_node, *one_node.find_run("pp2_tp2")).costs.forward[0] == within.forward);
  // plan's text says which stage's collectives ride which link.
  CHECK_THAT(format_plan_text(plan_job(job, {"pp2_tp2"})), Catch::Contains("(inter-node: a tensor group spans nodes)"));
}
