// Optimizer sharding beyond ZeRO-1 and the parameter gathers (issue 68,
// docs/parallel.md): the keys and their defaults, each mode's memory per
// category as the systems it follows document it, the simulator's gates and
// per-action waits, the one-ahead prefetch's closed form, and the planner's
// gathers inside the forward against its gathers after the optimizer.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/grad_buckets.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"

using namespace pipebench;

namespace {

const std::string kJob = R"(schema = 1
[job]
name = "sharding"
[model]
hidden = 256
layers = 8
heads = 4
seq_len = 64
vocab = 512
dtype = "bf16"
[device]
backend = "sim"
sim_flops_per_s = 1.0e12
sim_link_gbps = 10
[[run]]
name = "r"
pipeline_size = 2
data_parallel = 4
micro_batch_size = 1
num_microbatches = 8
grad_sync = "overlap"
grad_bucket_bytes = "256KiB"
optimizer_sharding = "zero1"
)";

RunPlan plan_with(const std::vector<std::string>& overrides) {
  const Job job = parse_job(kJob, "w.toml", overrides);
  return plan_run(job, job.runs.at(0));
}

}  // namespace

TEST_CASE("sharding: the modes parse, fsdp's resharding defaults as torchtitan's", "[sharding]") {
  const Job zero2 = parse_job(kJob, "w.toml", {"run.r.optimizer_sharding=\"zero2\""});
  CHECK(zero2.runs[0].optimizer_sharding == OptimizerSharding::zero2);
  CHECK(zero2.warnings.empty());
  // Unset: true without pipeline parallelism, false with it.
  const Job fsdp = parse_job(kJob, "w.toml", {"run.r.optimizer_sharding=\"fsdp\""});
  CHECK_FALSE(fsdp.runs[0].fsdp_reshard_after_forward.has_value());
  CHECK_FALSE(reshard_after_forward(fsdp.runs[0]));
  CHECK(gathers_in_first_forward(fsdp.runs[0]));
  const Job p1 = parse_job(kJob, "w.toml", {"run.r.optimizer_sharding=\"fsdp\"", "run.r.pipeline_size=1"});
  CHECK(reshard_after_forward(p1.runs[0]));
  CHECK_FALSE(gathers_in_first_forward(p1.runs[0]));
  const Job set = parse_job(kJob, "w.toml", {"run.r.optimizer_sharding=\"fsdp\"", "run.r.fsdp_reshard_after_forward=true"});
  CHECK(reshard_after_forward(set.runs[0]));
  // zero1 and zero2 gather inside the forward only with grad_sync = "overlap" (Megatron's overlap_param_gather).
  CHECK(gathers_in_first_forward(parse_job(kJob, "w.toml").runs[0]));
  CHECK_FALSE(gathers_in_first_forward(parse_job(kJob, "w.toml", {"run.r.grad_sync=\"after_chunk\""}).runs[0]));
  // The key without fsdp is said to do nothing; a bad mode names the choices.
  const Job ignored = parse_job(kJob, "w.toml", {"run.r.fsdp_reshard_after_forward=true"});
  REQUIRE(ignored.warnings.size() == 1);
  CHECK_THAT(ignored.warnings[0], Catch::Contains("run.r.fsdp_reshard_after_forward: ignored"));
  CHECK_THAT(testing::error_of(kJob, {"run.r.optimizer_sharding=\"zero3\""}), Catch::Contains("fsdp"));
}

TEST_CASE("sharding: each mode's training state per category", "[sharding]") {
  RunSpec run;
  run.data_parallel = 4;
  run.pipeline_size = 2;
  const std::int64_t P = 1001, S = 251, largest = 100;
  const StateBytes bf16_adamw{2, 4, 12}, fp32_adamw{4, 4, 8}, bf16_sgd{2, 4, 4};
  auto state = [&](OptimizerSharding mode, StateBytes per, bool reshard) {
    return training_state_bytes(mode, run.data_parallel, reshard, P, per, largest);
  };
  TrainingState t = state(OptimizerSharding::none, bf16_adamw, false);
  CHECK((t.params == P * 2 && t.grads == P * 4 && t.optimizer == P * 12));
  t = state(OptimizerSharding::zero1, bf16_adamw, false);
  CHECK((t.params == P * 2 && t.grads == P * 4 && t.optimizer == S * 12));
  // zero2: the unsharded accumulation in the parameters' dtype and the fp32 reduced shard.
  t = state(OptimizerSharding::zero2, bf16_adamw, false);
  CHECK((t.params == P * 2 && t.grads == P * 2 + S * 4 && t.optimizer == S * 12));
  // fsdp: the fp32 parameter shard (the master copy) and the gathered parameters.
  t = state(OptimizerSharding::fsdp, bf16_adamw, false);
  CHECK((t.params == S * 4 + P * 2 && t.grads == P * 2 + S * 4 && t.optimizer == S * 8));
  t = state(OptimizerSharding::fsdp, bf16_adamw, true);
  CHECK(t.params == S * 4 + 2 * largest * 2);
  CHECK(t.grads == 2 * largest * 2 + S * 4);  // each layer's gradients reduce-scattered as they come
  CHECK(state(OptimizerSharding::fsdp, fp32_adamw, false).optimizer == S * 8);  // fp32: no master copy to drop
  CHECK(state(OptimizerSharding::fsdp, bf16_sgd, false).optimizer == 0);       // SGD's only state is the master
  // The run's overload: inference holds the parameters alone; one replica shards nothing.
  run.optimizer_sharding = OptimizerSharding::fsdp;
  run.data_parallel = 1;
  CHECK(training_state_bytes(run, P, bf16_adamw, largest).optimizer == P * 12);
  run.data_parallel = 4;
  run.mode = RunMode::inference;
  t = training_state_bytes(run, P, bf16_adamw, largest);
  CHECK((t.params == P * 2 && t.grads == 0 && t.optimizer == 0));
}

TEST_CASE("sharding: a gated action waits at each gate, its busy time its cost", "[sharding][simulate]") {
  CHECK(gated_end(1.0, 2.0, {}) == 3.0);
  std::vector<double> waits;
  // Half its compute runs, then it waits until 5 for the rest's data.
  CHECK(gated_end(1.0, 2.0, {{0.0, 0.5}, {0.5, 5.0}}, &waits) == Approx(6.0));
  REQUIRE(waits.size() == 2);
  CHECK(waits[0] == 0.0);
  CHECK(waits[1] == Approx(3.0));
  // In the simulator: only each chunk's first forward on its rank is gated.
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, RunMode::train, 2, 4);
  SimCosts costs = SimCosts::unit(s);
  const SimResult plain = simulate(s, costs);
  costs.first_forward_gates.assign(2, {});
  costs.first_forward_gates[0] = {{0.0, 3.0}};  // stage 0's parameters arrive at 3
  const SimResult gated = simulate(s, costs);
  CHECK(gated.makespan == Approx(plain.makespan + 3.0));
  CHECK(gated.busy == plain.busy);
  // Every forward and backward of a stage waiting inside: their time, not their busy time.
  SimCosts waiting = SimCosts::unit(s);
  waiting.forward_wait = {0.25, 0.25};
  waiting.backward_wait = {0.5, 0.5};
  const SimResult w = simulate(s, waiting);
  CHECK(w.busy == plain.busy);
  CHECK(w.makespan > plain.makespan);
  waiting.backward_wait.clear();
  CHECK_THROWS_AS(simulate(s, waiting), ScheduleError);
}

TEST_CASE("sharding: FSDP's one-ahead prefetch hides a gather behind the layer before it", "[sharding]") {
  // Gathers shorter than the compute: only the first is waited for.
  CHECK(parallel::prefetched_gather_wait({1.0, 1.0, 1.0}, {0.5, 0.5, 0.5}) == Approx(0.5));
  // Longer: layer l computes at 2l + 2 (each gather waits for the one before and its issue).
  CHECK(parallel::prefetched_gather_wait({1.0, 1.0, 1.0}, {2.0, 2.0, 2.0}) == Approx(4.0));
  CHECK(parallel::prefetched_gather_wait({1.0, 1.0}, {0.0, 0.0}) == 0.0);
}

TEST_CASE("sharding: the parameter gathers are the gradient buckets in forward order", "[sharding][grad_buckets]") {
  // Backward order: head (10 params), blocks 3..0 (100 each), embedding (50); forward costs in forward order.
  const std::vector<parallel::GradLayer> back{{10, 1.0}, {100, 2.0}, {100, 2.0}, {100, 2.0}, {100, 2.0}, {50, 1.0}};
  const auto buckets = parallel::grad_buckets(back, 200 * 4, 4);
  REQUIRE(buckets.size() == 3);
  const std::vector<double> forward{1.0, 2.0, 2.0, 2.0, 2.0, 1.0};  // embedding, blocks 0..3, head
  const auto gathers = parallel::param_gathers(buckets, forward);
  REQUIRE(gathers.size() == 3);
  CHECK(gathers[0].bucket == 2);  // the embedding's bucket first
  CHECK(gathers[0].at == 0.0);
  for (std::size_t k = 1; k < gathers.size(); ++k) CHECK(gathers[k].at > gathers[k - 1].at);
  // Bucket 0 holds the head and blocks 3 and 2 (closed at 210 parameters): the
  // forward reaches block 2 after the embedding and blocks 0 and 1, 5 of 10.
  CHECK(gathers[2].bucket == 0);
  CHECK(buckets[0].last == 2);
  CHECK(gathers[2].at == Approx(5.0 / 10.0));
}

TEST_CASE("sharding: gathers inside the forward leave the optimizer's all-gather out of the iteration", "[sharding]") {
  const RunPlan inside = plan_with({});
  const RunPlan after = plan_with({"run.r.grad_sync=\"after_chunk\""});
  for (const StagePlan& sp : inside.stages) {
    CHECK_FALSE(sp.grad_sync.gathers.empty());
    CHECK(sp.grad_sync.gather_s == 0.0);
    CHECK(sp.grad_sync.launch_s == 0.0);
    // Launched at the step's start one after another: each ends later than the one before.
    for (std::size_t k = 1; k < sp.grad_sync.gathers.size(); ++k)
      CHECK(sp.grad_sync.gathers[k].end_s > sp.grad_sync.gathers[k - 1].end_s);
  }
  for (const StagePlan& sp : after.stages) {
    CHECK(sp.grad_sync.gathers.empty());
    CHECK(sp.grad_sync.gather_s > 0.0);
  }
  // The first stage's first forward waits for its embedding's bucket at least.
  CHECK(inside.stages[0].grad_sync.gather_wait_s > 0.0);
  CHECK(inside.step_s >= inside.simulated.makespan);
  // FSDP resharding: every forward and backward waits; no gather after the optimizer.
  const RunPlan reshard = plan_with({"run.r.optimizer_sharding=\"fsdp\"", "run.r.fsdp_reshard_after_forward=true"});
  REQUIRE(reshard.costs.forward_wait.size() == 2);
  for (const StagePlan& sp : reshard.stages) {
    CHECK(sp.grad_sync.gather_s == 0.0);
    CHECK(sp.grad_sync.gather_wait_s > 0.0);
    CHECK(sp.grad_sync.gathers.empty());
  }
  CHECK(reshard.step_s > inside.step_s);
}
