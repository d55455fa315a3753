// Context parallelism in the planner (issue 69, docs/context-parallel.md):
// the keys and their refusals, the rank grid's context coordinate and
// gradient group, a rank's share of the model, the K/V exchange's exposed
// time, and the published 128K Llama layout planned.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/context_exchange.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/plan/tune.hpp"

using namespace pipebench;

namespace {

const std::string kJob = R"(schema = 1
[job]
name = "cp"
[model]
kind = "llama"
hidden = 256
layers = 4
heads = 8
kv_heads = 2
seq_len = 4096
vocab = 1000
dtype = "bf16"
[device]
backend = "sim"
preset = "h100-80gb"
[[run]]
name = "r"
pipeline_size = 2
micro_batch_size = 1
num_microbatches = 4
context_parallel = 4
)";

}  // namespace

TEST_CASE("context parallelism: the keys, their refusals, the fingerprint, the backends", "[context]") {
  const Job job = parse_job(kJob, "w.toml");
  const RunSpec& r = job.runs[0];
  CHECK(r.context_parallel == 4);
  CHECK(r.cp_comm == CpComm::ring);
  CHECK(r.ranks() == 8);
  CHECK(r.grad_group() == 4);  // the context ranks hold the same parameters
  CHECK(parse_job(kJob, "w.toml", {"run.r.cp_comm=\"allgather\""}).runs[0].cp_comm == CpComm::allgather);
  const auto keys = workload_keys(job, r);
  CHECK(keys.at("run.context_parallel") == "4");
  CHECK(keys.at("run.cp_comm") == "ring");
  CHECK(workload_keys(job, parse_job(kJob, "w.toml", {"run.r.context_parallel=1"}).runs[0]).count("run.cp_comm") == 0);
  CHECK_THAT(testing::error_of(kJob, {"model.attention=\"materialized\""}), Catch::Contains("needs model.attention"));
  CHECK_THAT(testing::error_of(kJob, {"model.seq_len=4100"}), Catch::Contains("does not divide model.seq_len"));
  CHECK_THAT(testing::error_of(kJob, {"run.r.tensor_parallel=2", "run.r.sequence_parallel=true", "model.seq_len=4104"}),
             Catch::Contains("does not divide model.seq_len"));
  CHECK_THAT(testing::error_of(kJob, {"run.r.cp_comm=\"p2p\""}), Catch::Contains("allgather"));
  const Job one = parse_job(kJob, "w.toml", {"run.r.context_parallel=1", "run.r.cp_comm=\"allgather\""});
  REQUIRE(one.warnings.size() == 1);
  CHECK_THAT(one.warnings[0], Catch::Contains("cp_comm: ignored"));
  // Sharding keys apply with context ranks and one replica: d x c = 4 ranks share the state.
  const Job zero = parse_job(kJob, "w.toml", {"run.r.optimizer_sharding=\"zero1\""});
  CHECK(zero.runs[0].optimizer_sharding == OptimizerSharding::zero1);
  CHECK(shards_optimizer(zero.runs[0]));
  CHECK(optimizer_shard_params(zero.runs[0], 1001) == 251);
  CHECK(not_executed(r, BackendKind::sim, job.model).empty());
  CHECK_THAT(not_executed(r, BackendKind::cuda, job.model), Catch::Contains("does not exchange K/V"));
  CHECK(not_executed(r, BackendKind::cpu, job.model).empty());
}

TEST_CASE("context parallelism: the grid puts the context rank next to the tensor rank", "[context]") {
  using parallel::Coord;
  for (const RankOrder order : {RankOrder::tp_dp_pp, RankOrder::tp_pp_dp}) {
    const parallel::RankGrid g({2, 3, 2, 4}, order, 8);  // p 2, d 3, t 2, c 4
    REQUIRE(g.size() == 48);
    for (int rank = 0; rank < g.size(); ++rank) CHECK(g.rank(g.coord(rank)) == rank);
    // Tensor fastest, then context: a context group is t apart, c·t = 8 ranks on one node.
    CHECK(g.coord(1).tensor == 1);
    CHECK(g.coord(2).context == 1);
    CHECK(g.context_group(0) == std::vector<int>{0, 2, 4, 6});
    CHECK(g.within_one_node(g.context_group(0)));
    // The gradient group: every replica's context ranks, replica-major.
    const std::vector<int> grads = g.gradient_group(0);
    REQUIRE(grads.size() == 12);
    for (int rank : grads) {
      CHECK(g.coord(rank).pipeline == 0);
      CHECK(g.coord(rank).tensor == 0);
    }
    CHECK(grads[4] == g.rank(Coord{0, 1, 0, 0}));
  }
}

TEST_CASE("context parallelism: a rank holds s/c of every sequence and 1/c of the attention", "[context]") {
  const Job job = parse_job(kJob, "w.toml");
  const ModelDesc cp(job.model, DType::bf16, tensor_split(job.runs[0]));
  ModelSpec short_seq = job.model;
  short_seq.seq_len = job.model.seq_len / 4;
  const ModelDesc plain(short_seq, DType::bf16);
  CHECK(cp.tokens(1) == 1024);
  // Per token everything is a model at s/c: the activations (flash's
  // log-sum-exp included), the boundary, the head's logits.
  CHECK(cp.block(1).activation_bytes == plain.block(1).activation_bytes);
  CHECK(cp.head(1).activation_bytes == plain.head(1).activation_bytes);
  CHECK(cp.boundary_bytes(1) == plain.boundary_bytes(1));
  CHECK(cp.block(1).params == plain.block(1).params);
  // The queries of s/c tokens attend the whole sequence: c x the short model's core.
  CHECK(cp.attention_core_flops(1) == Approx(4.0 * plain.attention_core_flops(1)));
  CHECK(cp.attention_core_flops(1) == Approx(4.0 * 4096.0 * 4096.0 * 256.0 / 4.0));
  // K and V of the rank's 1024 tokens: 2 K/V heads of 32, bf16.
  CHECK(cp.context_kv_bytes(1) == 2 * 1024 * 2 * 64);
}

TEST_CASE("context parallelism: the exposed K/V exchange, ring and all-gather", "[context]") {
  parallel::ContextGroup ring{4, CpComm::ring, {1e-5, 100.0, false}};
  const std::uint64_t kv = 1'000'000;
  const double transfer = parallel::transfer_s(ring.link, kv), transfer2 = parallel::transfer_s(ring.link, 2 * kv);
  // Compute slower than the transfers: the ring hides every step but dK/dV's way home.
  parallel::ContextExchange x = parallel::context_exchange(ring, kv, 4 * 10 * transfer2, 4 * 10 * transfer2);
  CHECK(x.forward_s == 0.0);
  CHECK(x.backward_s == Approx(transfer));
  // No compute to hide behind: all c − 1 transfers exposed.
  x = parallel::context_exchange(ring, kv, 0.0, 0.0);
  CHECK(x.forward_s == Approx(3 * transfer));
  CHECK(x.backward_s == Approx(3 * transfer2 + transfer));
  // All-gather: the whole sequence's K/V gathered, then again with a reduce-scatter.
  parallel::ContextGroup gather = ring;
  gather.mode = CpComm::allgather;
  x = parallel::context_exchange(gather, kv, 1.0, 1.0);
  const double g = parallel::ring_time_s(parallel::Collective::all_gather, 4 * kv, 4, 1e-5, 100.0);
  CHECK(x.forward_s == Approx(g));
  CHECK(x.backward_s == Approx(2 * g));
  CHECK(parallel::context_exchange({1, CpComm::ring, {}}, kv, 0.0, 0.0).forward_s == 0.0);
}

TEST_CASE("context parallelism: the plan prices the exchange and counts every rank's FLOPs", "[context]") {
  const Job job = parse_job(kJob, "w.toml");
  const RunPlan p = plan_run(job, job.runs[0]);
  const Job one = parse_job(kJob, "w.toml", {"run.r.context_parallel=1"});
  const RunPlan q = plan_run(one, one.runs[0]);
  // The run's model FLOPs are the same whatever c: each of c ranks does 1/c.
  CHECK(step_flops(p) == Approx(step_flops(q)).epsilon(1e-12));
  CHECK(p.stages[0].activations_peak_bytes < q.stages[0].activations_peak_bytes);
  const std::string text = format_plan_text(plan_job(job));
  CHECK_THAT(text, Catch::Contains("context parallel: 4 ranks per sequence (8 chunks of 512 tokens"));
  CHECK_THAT(text, Catch::Contains("gradient synchronisation (after_flush, 1 replicas x 4 context ranks"));
  CHECK_THAT(format_plan_json(plan_job(job)), Catch::Contains("\"context_comm\": [") && Catch::Contains("\"cp_comm\": \"ring\""));
}

TEST_CASE("context parallelism: Llama-3.1-405B's 128K layout fits and is priced", "[context]") {
  const Job job = load_job(std::string(PIPEBENCH_SOURCE_DIR) + "/jobs/llama3_405b_128k_sim.toml");
  for (const RunSpec& run : job.runs) {
    INFO(run.name);
    REQUIRE(run.ranks() == 16384);
    const RunPlan p = plan_run(job, run);
    for (const StagePlan& sp : p.stages) CHECK(static_cast<std::uint64_t>(sp.total_bytes) < job.device.memory_capacity_bytes);
    CHECK(p.iteration_s > 0.0);
  }
}

TEST_CASE("context parallelism: tune tries c for a long sequence, within a node, and writes it", "[context][tune]") {
  // 32K tokens on nodes of 8: every c with c x t <= 8 whose 2c divides 32768.
  const Job job = parse_job(kJob, "w.toml",
                            {"model.seq_len=32768", "device.ranks_per_node=8", "run.r.context_parallel=1"});
  TuneOptions o;
  o.max_ranks = 16;
  o.tensor_parallel = {1, 2};
  CHECK(context_degrees(job, job.runs[0], o, 1) == std::vector<int>{1, 2, 4, 8});
  CHECK(context_degrees(job, job.runs[0], o, 2) == std::vector<int>{1, 2, 4});
  const TuneResult r = tune(job, o);
  bool any = false;
  for (const TuneCandidate& c : r.candidates) {
    CHECK(c.context_parallel * c.tensor_parallel <= 8);
    CHECK(c.ranks() <= 16);
    any = any || c.context_parallel > 1;
  }
  CHECK(any);
  // The written workload carries c and cp_comm, and runs as it says.
  const std::string toml = tuned_workload(job, r).toml;
  const Job written = parse_job(toml, "tuned.toml");
  for (const RunSpec& run : written.runs)
    if (run.context_parallel > 1) CHECK(run.cp_comm == job.runs[0].cp_comm);
  // A sequence of 8K or less, or the materialized attention: c stays the template's.
  const Job short_seq = parse_job(kJob, "w.toml", {"device.ranks_per_node=8"});
  CHECK(context_degrees(short_seq, short_seq.runs[0], o, 1) == std::vector<int>{4});
  const Job plain = parse_job(kJob, "w.toml", {"model.seq_len=32768", "device.ranks_per_node=8", "run.r.context_parallel=1",
                                               "model.attention=\"materialized\""});
  CHECK(context_degrees(plain, plain.runs[0], o, 1) == std::vector<int>{1});
  // Asked for: the ones the sequence allows.
  o.context_parallel = {3, 4, 5};
  CHECK(context_degrees(job, job.runs[0], o, 1) == std::vector<int>{4});
}
