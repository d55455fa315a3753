// Cost-weighted simulation: closed forms for balanced stages, the slowest
// stage bounding the step, transfer costs on the critical path.
#include <algorithm>
#include <cmath>

#include <catch2/catch.hpp>

#include "pipebench/backends/backend_sim.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"

using namespace pipebench;

namespace {
SimCosts uniform(const Schedule& s, double f, double b, double transfer = 0.0) {
  const auto V = static_cast<std::size_t>(s.num_virtual_stages());
  return {std::vector<double>(V, f), std::vector<double>(V, b), std::vector<double>(V, 0.0), transfer, {}, {}, {}};
}
}  // namespace

TEST_CASE("balanced stages: makespan (m+p-1)(tf+tb) for gpipe and 1f1b", "[simulate]") {
  for (int p : {1, 2, 4, 7})
    for (int m : {1, 4, 16}) {
      INFO("p = " << p << ", m = " << m);
      for (const Schedule& s : {make_gpipe(p, m), make_1f1b(p, m)}) {
        const SimResult r = simulate(s, uniform(s, 1.0, 2.0));
        CHECK(r.makespan == Approx(3.0 * (m + p - 1)));
        CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (m + p - 1)));
        for (double busy : r.busy) CHECK(busy == Approx(3.0 * m));
      }
    }
}

TEST_CASE("forward-only with transfers: latency of one micro-batch adds (p-1) transfers", "[simulate]") {
  const Schedule s = make_forward_only(4, 5);
  const SimResult r = simulate(s, uniform(s, 1.0, 0.0, 0.25));
  // Stage s starts micro-batch j at j + s*(1 + 0.25); the last ends at 4 + 3*1.25 + 1.
  CHECK(r.makespan == Approx(5.0 + 3 * 1.25));
}

TEST_CASE("a slow stage bounds the step: gpipe makespan with one slow stage", "[simulate]") {
  const Schedule s = make_gpipe(3, 8);
  SimCosts c = uniform(s, 1.0, 2.0);
  c.forward[1] = 3.0;
  c.backward[1] = 6.0;
  const SimResult r = simulate(s, c);
  // Forward: F0 reaches stage 1 at t=1, stage 1 then runs 8 x 3; the last F7 of stage 2
  // ends at 1 + 24 + 1 = 26. Backward mirrors: 2 + 8 x 6 + 2.
  CHECK(r.makespan == Approx(26.0 + 2.0 + 48.0 + 2.0));
  CHECK(r.busy[1] == Approx(72.0));
  CHECK(r.bubble == Approx(1.0 - (24.0 + 72.0 + 24.0) / (3 * 78.0)));
}

TEST_CASE("simulate rejects mismatched costs and out-of-range actions", "[simulate]") {
  const Schedule s = make_gpipe(2, 2);
  SimCosts c = SimCosts::unit(s);
  c.forward.pop_back();
  CHECK_THROWS_AS(simulate(s, c), ScheduleError);
  Schedule bad = s;
  bad.actions[0].push_back({ActionKind::F, 5, 0});
  CHECK_THROWS_AS(simulate(bad, SimCosts::unit(bad)), ScheduleError);
}

TEST_CASE("W releases activations when present", "[simulate]") {
  Schedule s = make_gpipe(1, 2);
  // F0 F1 B0 B1 W0 W1: B no longer frees; W does.
  s.actions[0].push_back({ActionKind::W, 0, 0});
  s.actions[0].push_back({ActionKind::W, 1, 0});
  CHECK(peak_live_activations(s) == std::vector<int>{2});
  Schedule t = make_gpipe(1, 2);
  t.actions[0] = {{ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::F, 1, 0},
                  {ActionKind::W, 0, 0}, {ActionKind::B, 1, 0}, {ActionKind::W, 1, 0}};
  CHECK(peak_live_activations(t) == std::vector<int>{2});
  const SimResult r = simulate(t, SimCosts::unit(t));
  CHECK(r.completed);
  CHECK(r.makespan == 6.0);
}

TEST_CASE("sim machine factor: sim_load x mean-1 log-normal jitter, reproducible per coordinate", "[simulate][jitter]") {
  DeviceSpec d;
  CHECK(sim_machine_factor(d, 0, 3, 1, 0) == 1.0);  // no load, no jitter
  d.sim_load = 2.0;
  CHECK(sim_machine_factor(d, 1, 3, 1, 0) == 2.0);
  d.sim_load = 1.0;
  d.sim_jitter = 0.1;
  d.sim_jitter_seed = 42;
  // The same coordinates give the same factor; any other coordinate another one.
  const double f = sim_machine_factor(d, 1, 3, 2, 0);
  CHECK(f == sim_machine_factor(d, 1, 3, 2, 0));
  CHECK(f != sim_machine_factor(d, 1, 3, 2, 1));
  CHECK(f != sim_machine_factor(d, 1, 4, 2, 0));
  CHECK(f != sim_machine_factor(d, 0, 3, 2, 0));
  DeviceSpec other = d;
  other.sim_jitter_seed = 43;
  CHECK(f != sim_machine_factor(other, 1, 3, 2, 0));
  // Over many draws: mean 1 and log-sd sigma (the noise slows nothing down on average).
  double sum = 0.0, sum_log = 0.0, sum_log2 = 0.0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = sim_machine_factor(d, i % 7, i / 7, i % 13, i % 4);
    sum += x;
    sum_log += std::log(x);
    sum_log2 += std::log(x) * std::log(x);
  }
  const double mean_log = sum_log / n;
  CHECK(sum / n == Approx(1.0).margin(0.002));
  CHECK(std::sqrt(sum_log2 / n - mean_log * mean_log) == Approx(0.1).margin(0.002));
}

TEST_CASE("sim backend on the virtual clock: actions advance the rank's clock by their modelled time, no sleeping",
          "[simulate][clock]") {
  Job job;
  job.model.hidden = 64;
  job.model.layers = 4;
  job.model.heads = 4;
  job.model.ffn_hidden = 256;
  job.model.seq_len = 16;
  job.model.vocab = 128;
  job.device.backend = BackendKind::sim;
  job.device.sim_flops_per_s = 1.0e6;  // seconds per action: slept, this test would take minutes
  job.device.sim_clock = SimClock::virtual_time;
  SimBackend sim(job, 0);
  REQUIRE(sim.clock().is_virtual());
  StageSpec spec;
  spec.one_chunk(StageRange{0, 4, true, true});
  spec.num_microbatches = 2;
  sim.build(spec);
  const Cost cost = ModelDesc(job.model, DType::fp32).stage(1, 4, true, true);
  const double wall0 = now_s();
  sim.begin_step(0, wall0 + 1.0);  // a real-time deadline the modelled seconds must not trip
  const double t0 = sim.clock().now();
  sim.forward(0, 0, 0);
  CHECK(sim.clock().now() - t0 == Approx(cost.forward_flops / 1.0e6));
  sim.backward(0, 0, 0);
  CHECK(sim.clock().now() - t0 == Approx((cost.forward_flops + cost.backward_flops) / 1.0e6));
  CHECK(sim.clock().now() - t0 > 1.0);
  CHECK(now_s() - wall0 < 0.5);
  // A receive that ends before the clock leaves it; a later one moves it.
  const double t1 = sim.clock().now();
  sim.clock().sleep_until(t1 - 1.0);
  CHECK(sim.clock().now() == t1);
  sim.clock().sleep_until(t1 + 2.5);
  CHECK(sim.clock().now() == t1 + 2.5);
  // The wall clock backend keeps sleeping (device.sim_clock = "wall", the default).
  job.device.sim_clock = SimClock::wall;
  CHECK_FALSE(SimBackend(job, 0).clock().is_virtual());
}

TEST_CASE("simulate_checked: the same times as simulate on every generated schedule, W and V shapes included",
          "[simulate]") {
  // Distinct costs per stage and kind, a transfer cost, so that an end read
  // from the wrong stage or a skipped own dependency would move some time.
  auto costs = [](const Schedule& s) {
    SimCosts c;
    for (int v = 0; v < s.num_virtual_stages(); ++v) {
      c.forward.push_back(1.0 + 0.37 * (v % 5));
      c.backward.push_back(2.0 + 0.61 * ((v * 3) % 7));
      c.weight.push_back(0.5 + 0.13 * (v % 3));
    }
    c.transfer = 0.21;
    return c;
  };
  struct Case {
    ScheduleKind kind;
    RunMode mode;
    int p, m, v;
  };
  for (const Case& k : {Case{ScheduleKind::gpipe, RunMode::train, 4, 7, 1}, Case{ScheduleKind::one_f_one_b, RunMode::train, 5, 9, 1},
                        Case{ScheduleKind::eager_one_f_one_b, RunMode::train, 4, 8, 1},
                        Case{ScheduleKind::interleaved_one_f_one_b, RunMode::train, 4, 8, 2},
                        Case{ScheduleKind::zb_h1, RunMode::train, 4, 8, 1}, Case{ScheduleKind::zb_v, RunMode::train, 4, 8, 2},
                        Case{ScheduleKind::gpipe, RunMode::inference, 3, 5, 1}}) {
    const Schedule s = make_schedule(k.kind, k.mode, k.p, k.m, k.v);
    INFO(s.name << " p = " << k.p << ", m = " << k.m);
    const SimCosts c = costs(s);
    const SimResult full = simulate(s, c), checked = simulate_checked(s, c);
    REQUIRE(checked.completed);
    CHECK(checked.makespan == full.makespan);
    CHECK(checked.bubble == full.bubble);
    CHECK(checked.busy == full.busy);
    CHECK(checked.first_start == full.first_start);
    CHECK(checked.last_end == full.last_end);
    REQUIRE(checked.timeline.size() == full.timeline.size());
    for (std::size_t i = 0; i < full.timeline.size(); ++i) {
      CHECK(checked.timeline[i].start == full.timeline[i].start);
      CHECK(checked.timeline[i].end == full.timeline[i].end);
    }
    CHECK(checked.peak_live_activations.empty());  // the order's property: peak_live_activations()

    // Two cost sets in one walk (the planner's unit and model costs): each
    // lane what its own simulation gives, the timeline only the first's.
    const SimCosts unit = SimCosts::unit(s);
    const SimResult unit_alone = simulate(s, unit);
    const auto [first, second] = simulate_checked(s, c, unit, true);
    CHECK(first.makespan == full.makespan);
    CHECK(first.busy == full.busy);
    CHECK(first.first_start == full.first_start);
    CHECK(first.last_end == full.last_end);
    REQUIRE(first.timeline.size() == full.timeline.size());
    for (std::size_t i = 0; i < full.timeline.size(); ++i) CHECK(first.timeline[i].end == full.timeline[i].end);
    CHECK(second.makespan == unit_alone.makespan);
    CHECK(second.bubble == unit_alone.bubble);
    CHECK(second.busy == unit_alone.busy);
    CHECK(second.first_start == unit_alone.first_start);
    CHECK(second.last_end == unit_alone.last_end);
    CHECK(second.timeline.empty());

    // Free forwards and transfers: F ends at 0 (the checked walk stores an F
    // negated, -0.0 here, and must still see it as run).
    SimCosts free_forward = c;
    std::fill(free_forward.forward.begin(), free_forward.forward.end(), 0.0);
    free_forward.transfer = 0.0;
    const SimResult zero_full = simulate(s, free_forward), zero_checked = simulate_checked(s, free_forward);
    REQUIRE(zero_checked.completed);
    CHECK(zero_checked.makespan == zero_full.makespan);
    CHECK(zero_checked.busy == zero_full.busy);
    CHECK(zero_checked.first_start == zero_full.first_start);
  }
}

TEST_CASE("simulate_checked with two cost sets reports a deadlock like simulate", "[simulate]") {
  // A structurally valid order that deadlocks: rank 0 runs B0 before F1,
  // and B0 needs rank 1's B0, which rank 1 runs only after F1.
  Schedule s = empty_schedule("crossed", 2, 2, true);
  s.actions[0] = {{ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::F, 1, 0}, {ActionKind::B, 1, 0}};
  s.actions[1] = {{ActionKind::F, 1, 0}, {ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::B, 1, 0}};
  const SimResult alone = simulate(s, SimCosts::unit(s));
  REQUIRE_FALSE(alone.completed);
  const auto [first, second] = simulate_checked(s, SimCosts::unit(s), SimCosts::unit(s), true);
  CHECK_FALSE(first.completed);
  CHECK_FALSE(second.completed);
  CHECK(first.blocked == alone.blocked);
  CHECK(first.timeline.size() == alone.timeline.size());
}
