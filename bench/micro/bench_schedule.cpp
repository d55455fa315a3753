// Cost of the planner's schedule machinery: generation, validation (which
// includes a unit-cost simulation for deadlock detection) and simulation, for
// p from 4 to 1024 stages and m up to 1024 micro-batches; and a whole `plan`
// of 8 to 1024 stages; every rank's send-buffer pools. Items processed =
// schedule actions: time per item should stay flat as p grows (the simulator
// is linear in the actions).
#include <cstdio>
#include <string>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "pipebench/core/config.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/send_slots.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/validate.hpp"

namespace {

using pipebench::ScheduleKind;

template <ScheduleKind Kind>
void BM_GenerateValidateSimulate(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  std::size_t actions = 0;
  for (auto _ : state) {
    auto s = pipebench::make_schedule(Kind, pipebench::RunMode::train, p, m);
    pipebench::validate_schedule(s);
    auto r = pipebench::simulate(s, pipebench::SimCosts::unit(s));
    benchmark::DoNotOptimize(r.makespan);
    actions = s.total_actions();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * actions));
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int p : {4, 16, 64})
    for (int m : {8, 128, 1024}) b->Args({p, m});
  b->Args({1024, 1024});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_GenerateValidateSimulate<ScheduleKind::gpipe>)->Name("gpipe")->Apply(Sizes);
BENCHMARK(BM_GenerateValidateSimulate<ScheduleKind::one_f_one_b>)->Name("1f1b")->Apply(Sizes);
BENCHMARK(BM_GenerateValidateSimulate<ScheduleKind::eager_one_f_one_b>)->Name("eager-1f1b")->Apply(Sizes);

// The whole `pipebench plan --format json` work for one run, the JSON streamed
// as the command streams it (to /dev/null: no file I/O); a third argument d
// replicates the pipeline (the gradient synchronisation's actions are planned
// too: they were quadratic in p, 1.94 s for p 1024 x d 2, m 1024, now 0.23 s).
void BM_PlanWholeRun(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const int d = state.range(2) > 0 ? static_cast<int>(state.range(2)) : 1;
  const std::string toml = fmt::format(R"(schema = 1
[job]
name = "bench"
[model]
hidden = 1024
layers = {}
heads = 16
seq_len = 1024
vocab = 32000
[device]
backend = "sim"
memory_capacity = "80GiB"
[[run]]
name = "big"
pipeline_size = {}
num_microbatches = {}
schedule = "1f1b"
data_parallel = {}
)", p, p, m, d);
  const pipebench::Job job = pipebench::parse_job(toml, "bench.toml");
  // Streamed as the command writes it, to /dev/null.
  std::FILE* sink = std::fopen("/dev/null", "w");
  if (!sink) {
    state.SkipWithError("cannot open /dev/null");
    return;
  }
  std::size_t actions = 0;
  for (auto _ : state) {
    const auto plan = pipebench::plan_job(job);
    pipebench::write_plan_json(plan, sink);
    actions = plan.runs[0].schedule.total_actions();
  }
  std::fclose(sink);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * actions));
}
BENCHMARK(BM_PlanWholeRun)
    ->Args({8, 64, 1})
    ->Args({8, 1024, 1})
    ->Args({8, 4096, 1})
    ->Args({64, 1024, 1})
    ->Args({64, 4096, 1})
    ->Args({1024, 1024, 1})
    ->Args({1024, 4096, 1})
    ->Args({64, 1024, 2})
    ->Args({1024, 1024, 2})
    ->Unit(benchmark::kMillisecond);

// Every rank's send-buffer pools (send_slot_pools): what plan_memory charges
// and `tune` computes for each schedule it probes (the 1T search on 3072 GPUs
// builds thousands: interleaved p 32, v 4, m 256 is one of them). Items =
// schedule actions; arguments p, m, v (v = 1: 1f1b).
void BM_SendSlotPools(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1)),
            v = static_cast<int>(state.range(2));
  const auto s = pipebench::make_schedule(v > 1 ? ScheduleKind::interleaved_one_f_one_b : ScheduleKind::one_f_one_b,
                                          pipebench::RunMode::train, p, m, v);
  for (auto _ : state) {
    const auto pools = pipebench::send_slot_pools(s);
    benchmark::DoNotOptimize(pools.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * s.total_actions()));
}
BENCHMARK(BM_SendSlotPools)
    ->Name("send_slot_pools")
    ->Args({8, 64, 1})
    ->Args({64, 512, 1})
    ->Args({32, 256, 4})
    ->Args({64, 1024, 2})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
