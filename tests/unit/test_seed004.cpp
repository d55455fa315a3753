// Seed 004's reference implementation and every one of its tests, ported.
// The set-based Python reference is transcribed below as the oracle; the
// library's schedules, run through the simulator with unit costs, must give
// exactly its timelines, bubbles and peak activation counts.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"

using namespace pipebench;

namespace {

using Event = std::tuple<char, int, int>;  // (direction, stage, micro)
using Timeline = std::vector<std::vector<Event>>;

// --- seed 004 reference (transcribed from the Python) ----------------------

Timeline seed_build_training_schedule(int p, int m, bool fill_drain) {
  std::set<Event> all_forward, all_backward, completed;
  for (int s = 0; s < p; ++s)
    for (int mb = 0; mb < m; ++mb) {
      all_forward.insert({'F', s, mb});
      all_backward.insert({'B', s, mb});
    }
  Timeline timeline;
  while (completed.size() < all_forward.size() + all_backward.size()) {
    std::vector<Event> step_events;
    bool forward_remaining = false;
    for (const auto& f : all_forward) forward_remaining |= !completed.count(f);
    for (int stage = 0; stage < p; ++stage) {
      std::vector<Event> ready_forward, ready_backward;
      for (int micro = 0; micro < m; ++micro) {
        if (!completed.count({'F', stage, micro}) && (stage == 0 || completed.count({'F', stage - 1, micro})))
          ready_forward.push_back({'F', stage, micro});
        if (!completed.count({'B', stage, micro}) && completed.count({'F', stage, micro}) &&
            (stage == p - 1 || completed.count({'B', stage + 1, micro})))
          ready_backward.push_back({'B', stage, micro});
      }
      const std::vector<Event>& candidates =
          fill_drain ? (forward_remaining ? ready_forward : ready_backward)
                     : (!ready_backward.empty() ? ready_backward : ready_forward);
      if (!candidates.empty()) step_events.push_back(candidates.front());
    }
    REQUIRE_FALSE(step_events.empty());
    completed.insert(step_events.begin(), step_events.end());
    timeline.push_back(step_events);
  }
  return timeline;
}

struct SeedSummary {
  int time_steps;
  double bubble_ratio;
  std::vector<int> peak_live_activations;
};

SeedSummary seed_summarize(int p, int m, bool fill_drain) {
  const Timeline timeline = seed_build_training_schedule(p, m, fill_drain);
  std::set<std::pair<int, int>> fwd, bwd;
  std::vector<int> peak(static_cast<std::size_t>(p), 0);
  int active = 0;
  for (const auto& step : timeline) {
    active += static_cast<int>(step.size());
    for (const auto& [dir, stage, micro] : step) (dir == 'F' ? fwd : bwd).insert({stage, micro});
    for (int stage = 0; stage < p; ++stage) {
      int live = 0;
      for (int micro = 0; micro < m; ++micro) live += fwd.count({stage, micro}) && !bwd.count({stage, micro});
      peak[static_cast<std::size_t>(stage)] = std::max(peak[static_cast<std::size_t>(stage)], live);
    }
  }
  const int total = static_cast<int>(timeline.size()) * p;
  return {static_cast<int>(timeline.size()), 1.0 - static_cast<double>(active) / total, peak};
}

// --- the library, in the seed's shapes ----------------------------------------

// Unit-cost simulation of `s`, as a step-indexed timeline with events in
// stage order inside each step (the seed's order).
Timeline library_timeline(const Schedule& s) {
  const SimResult r = simulate(s, SimCosts::unit(s));
  REQUIRE(r.completed);
  Timeline t(static_cast<std::size_t>(r.makespan));
  for (const auto& a : r.timeline) {
    REQUIRE(a.start == static_cast<double>(static_cast<int>(a.start)));
    t[static_cast<std::size_t>(a.start)].push_back(
        {a.action.kind == ActionKind::F ? 'F' : 'B', a.rank, a.action.microbatch});
  }
  for (auto& step : t) std::sort(step.begin(), step.end(), [](const Event& x, const Event& y) {
    return std::get<1>(x) < std::get<1>(y);
  });
  return t;
}

// build_pipeline_timeline(p, m): (stage, micro) per step.
std::vector<std::vector<std::pair<int, int>>> build_pipeline_timeline(int p, int m) {
  std::vector<std::vector<std::pair<int, int>>> out;
  for (const auto& step : library_timeline(make_forward_only(p, m))) {
    out.emplace_back();
    for (const auto& [dir, stage, micro] : step) out.back().push_back({stage, micro});
  }
  return out;
}

double compute_bubble_ratio(int p, int m) {
  const Schedule s = make_forward_only(p, m);
  return simulate(s, SimCosts::unit(s)).bubble;
}

}  // namespace

// --- seed 004's tests -------------------------------------------------------------

TEST_CASE("seed004: test_pipeline_bubble", "[seed004]") {
  const double ratio = compute_bubble_ratio(8, 32);
  const double expected = (8.0 - 1.0) / (32.0 + 8.0 - 1.0);
  CHECK(std::abs(ratio - expected) < 1e-12);
}

TEST_CASE("seed004: test_pipeline_timeline_structure", "[seed004]") {
  const auto timeline = build_pipeline_timeline(3, 5);
  REQUIRE(timeline.size() == 7);
  std::vector<std::pair<int, int>> pairs;
  for (const auto& step : timeline)
    for (const auto& [stage, micro] : step) {
      CHECK((0 <= stage && stage < 3 && 0 <= micro && micro < 5));
      pairs.push_back({stage, micro});
    }
  CHECK(pairs.size() == 15);
  CHECK(std::set<std::pair<int, int>>(pairs.begin(), pairs.end()).size() == 15);
  for (int i = 0; i < 5; ++i)
    CHECK(std::count_if(pairs.begin(), pairs.end(), [&](auto& x) { return x.second == i; }) == 3);
  for (int i = 0; i < 3; ++i)
    CHECK(std::count_if(pairs.begin(), pairs.end(), [&](auto& x) { return x.first == i; }) == 5);
}

TEST_CASE("seed004: test_pipeline_active_slots", "[seed004]") {
  std::size_t active = 0;
  for (const auto& step : build_pipeline_timeline(3, 5)) active += step.size();
  CHECK(active == 15);
}

TEST_CASE("seed004: test_pipeline_progression_order", "[seed004]") {
  const auto timeline = build_pipeline_timeline(4, 3);
  std::set<std::pair<int, int>> seen;
  int positions[4][3];
  for (std::size_t t = 0; t < timeline.size(); ++t)
    for (const auto& [stage, micro] : timeline[t]) {
      CHECK(seen.insert({stage, micro}).second);
      CHECK(static_cast<int>(t) == stage + micro);
      positions[stage][micro] = static_cast<int>(t);
    }
  for (int micro = 0; micro < 3; ++micro)
    for (int stage = 0; stage < 4; ++stage) CHECK(positions[stage][micro] == micro + stage);
}

TEST_CASE("seed004: test_pipeline_bubble_boundary", "[seed004]") {
  CHECK(compute_bubble_ratio(3, 8) <= compute_bubble_ratio(3, 4));
}

TEST_CASE("seed004: test_pipeline_input_contract", "[seed004]") {
  for (auto [p, m] : {std::pair{0, 4}, std::pair{3, 0}, std::pair{-1, 4}}) {
    CHECK_THROWS_AS(make_forward_only(p, m), ScheduleError);
    CHECK_THROWS_AS(compute_bubble_ratio(p, m), ScheduleError);
    CHECK_THROWS_AS(make_gpipe(p, m), ScheduleError);
    CHECK_THROWS_AS(make_1f1b(p, m), ScheduleError);
    CHECK_THROWS_AS(make_eager_1f1b(p, m), ScheduleError);
  }
}

TEST_CASE("seed004: test_training_schedule_dependencies", "[seed004]") {
  for (const Schedule& s : {make_gpipe(3, 4), make_eager_1f1b(3, 4), make_1f1b(3, 4)}) {
    INFO(s.name);
    const Timeline timeline = library_timeline(s);
    std::map<Event, int> positions;
    for (std::size_t t = 0; t < timeline.size(); ++t)
      for (const auto& e : timeline[t]) positions[e] = static_cast<int>(t);
    REQUIRE(positions.size() == 2 * 3 * 4);
    for (int stage = 0; stage < 3; ++stage)
      for (int micro = 0; micro < 4; ++micro) {
        CHECK(positions[{'F', stage, micro}] < positions[{'B', stage, micro}]);
        if (stage > 0) CHECK(positions[{'F', stage - 1, micro}] < positions[{'F', stage, micro}]);
        if (stage < 2) CHECK(positions[{'B', stage + 1, micro}] < positions[{'B', stage, micro}]);
      }
  }
}

TEST_CASE("seed004: test_schedule_activation_tradeoff", "[seed004]") {
  const auto fill_drain = peak_live_activations(make_gpipe(3, 6));
  const auto eager = peak_live_activations(make_eager_1f1b(3, 6));
  const auto one_f_one_b = peak_live_activations(make_1f1b(3, 6));
  for (int v : fill_drain) CHECK(v > 0);
  CHECK(*std::max_element(eager.begin(), eager.end()) <= *std::max_element(fill_drain.begin(), fill_drain.end()));
  CHECK(*std::max_element(one_f_one_b.begin(), one_f_one_b.end()) <=
        *std::max_element(fill_drain.begin(), fill_drain.end()));
}

// --- exact agreement with the reference, beyond the seed's own tests -------------

TEST_CASE("gpipe and eager-1f1b reproduce seed 004's fill_drain and 1f1b timelines exactly", "[seed004]") {
  for (int p = 1; p <= 7; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p = " << p << ", m = " << m);
      CHECK(library_timeline(make_gpipe(p, m)) == seed_build_training_schedule(p, m, true));
      CHECK(library_timeline(make_eager_1f1b(p, m)) == seed_build_training_schedule(p, m, false));
    }
}

TEST_CASE("summaries (steps, bubble, peak live activations) match seed 004's summarize_pipeline_schedule",
          "[seed004]") {
  for (int p = 1; p <= 7; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p = " << p << ", m = " << m);
      for (bool fill_drain : {true, false}) {
        const SeedSummary ref = seed_summarize(p, m, fill_drain);
        const Schedule s = fill_drain ? make_gpipe(p, m) : make_eager_1f1b(p, m);
        const SimResult r = simulate(s, SimCosts::unit(s));
        CHECK(r.makespan == ref.time_steps);
        CHECK(r.bubble == Approx(ref.bubble_ratio).margin(1e-12));
        CHECK(r.peak_live_activations == ref.peak_live_activations);
      }
    }
}

TEST_CASE("seed 004's greedy 1f1b holds more activations than Megatron 1F1B on early stages", "[seed004]") {
  // p = 4, m = 8: the greedy policy keeps forwarding on stage 0 until the
  // first backward arrives (2p-1 = 7 forwards), Megatron's stops at p.
  CHECK(seed_summarize(4, 8, false).peak_live_activations == std::vector<int>{7, 5, 3, 1});
  CHECK(peak_live_activations(make_eager_1f1b(4, 8)) == std::vector<int>{7, 5, 3, 1});
  CHECK(peak_live_activations(make_1f1b(4, 8)) == std::vector<int>{4, 3, 2, 1});
}
