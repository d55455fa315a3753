// The in-process pipeline driver (tests/support/in_process_pipeline.hpp),
// which the GPU tests use to cross-check the cuda backend's schedules against
// the cpu backend's, checked here on the cpu backend alone: every schedule of
// tests/data/runner/cpu_equivalence.toml — interleaved, ZB-H1, ZB-V (the turn
// of the V through hand_over), looped BFS, interleaved zero bubble,
// recomputation — trains bit for bit like its single-stage baseline, and each rank's memory peaks equal the plan's.
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/in_process_pipeline.hpp"
#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/core/config.hpp"

using namespace pipebench;

namespace {

Job equivalence_job() { return load_job(std::string(PIPEBENCH_SOURCE_DIR) + "/tests/data/runner/cpu_equivalence.toml"); }

std::vector<testing::InProcessStep> train(const Job& job, const RunPlan& plan, int steps,
                                          std::string* memory = nullptr) {
  testing::InProcessPipeline pipe(job, plan, [&](int r) { return std::make_unique<CpuBackend>(job, r); });
  std::vector<testing::InProcessStep> out;
  for (int s = 0; s < steps; ++s) out.push_back(pipe.step(s));
  if (memory)
    for (int r = 0; r < pipe.size(); ++r) *memory += testing::memory_vs_plan(plan, r, pipe.rank(r));
  return out;
}

}  // namespace

TEST_CASE("in-process pipeline: every cpu schedule trains bit for bit like the baseline", "[in_process]") {
  const Job job = equivalence_job();
  const JobPlan plan = plan_job(job);
  // Each run against its own baseline: looped BFS sums its gradients in
  // reverse micro-batch order, as its single-rank baseline_reverse does.
  std::map<std::string, std::vector<testing::InProcessStep>> baselines;
  for (const RunPlan& rp : plan.runs)
    if (rp.run.mode == RunMode::train && rp.run.pipeline_size == 1) baselines[rp.run.name] = train(job, rp, 3);
  REQUIRE(baselines.count("baseline"));
  CHECK(baselines["baseline"].back().loss < baselines["baseline"].front().loss);
  int checked = 0;
  for (const RunPlan& rp : plan.runs) {
    if (rp.run.mode != RunMode::train || rp.run.pipeline_size == 1) continue;
    INFO("run " << rp.run.name << " against " << rp.run.baseline);
    REQUIRE(baselines.count(rp.run.baseline));
    const auto& want = baselines[rp.run.baseline];
    std::string memory;
    const auto got = train(job, rp, 3, &memory);
    for (std::size_t s = 0; s < got.size(); ++s) {
      INFO("step " << s);
      CHECK(got[s].loss == want[s].loss);
      CHECK(got[s].grad_norm == want[s].grad_norm);
    }
    CHECK(memory == "");
    ++checked;
  }
  CHECK(checked >= 18);
}

TEST_CASE("in-process pipeline: a schedule that cannot progress is reported, not run", "[in_process]") {
  const Job job = equivalence_job();
  JobPlan plan = plan_job(job, {"p2_1f1b"});
  RunPlan& rp = plan.runs.at(0);
  // Rank 0 waits for B0 before it has sent F0's activation: a deadlock.
  auto& r0 = rp.schedule.actions.at(0);
  std::swap(r0.at(0), *std::find(r0.begin(), r0.end(), Action(ActionKind::B, 0, 0)));
  testing::InProcessPipeline pipe(job, rp, [&](int r) { return std::make_unique<CpuBackend>(job, r); });
  CHECK_THROWS_WITH(pipe.step(0), Catch::Contains("deadlocks"));
}

TEST_CASE("in-process pipeline: forward-only inference on 4 ranks gives the single rank's losses", "[in_process]") {
  const Job job = equivalence_job();
  const JobPlan plan = plan_job(job, {"baseline", "infer_base", "infer_p4"});
  const double train_loss = train(job, plan.runs.at(0), 1).front().loss;
  std::string memory;
  const auto single = train(job, plan.runs.at(1), 2, &memory), four = train(job, plan.runs.at(2), 2, &memory);
  CHECK(single[0].loss == train_loss);  // the training forward of step 0, same weights and data
  for (std::size_t s = 0; s < 2; ++s) {
    INFO("step " << s);
    CHECK(four[s].loss == single[s].loss);
  }
  CHECK(single[1].loss != single[0].loss);  // each step its own data
  CHECK(memory == "");
}
