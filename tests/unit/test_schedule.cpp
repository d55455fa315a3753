// Schedules: generators' invariants over the whole acceptance range, the text
// form, and the validator's verdicts on broken schedules.
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/validate.hpp"

using namespace pipebench;

namespace {
double analytic_bubble(int p, int m) { return static_cast<double>(p - 1) / (m + p - 1); }
}  // namespace

TEST_CASE("unit costs, p in 1..12, m in 1..40: steps, bubble, peak live activations", "[schedule]") {
  for (int p = 1; p <= 12; ++p)
    for (int m = 1; m <= 40; ++m) {
      INFO("p = " << p << ", m = " << m);
      // Forward-only: p+m-1 steps, (stage, micro) exactly once at step stage+micro.
      const Schedule fwd = make_forward_only(p, m);
      REQUIRE(check_schedule(fwd).empty());
      const SimResult f = simulate(fwd, SimCosts::unit(fwd));
      REQUIRE(f.completed);
      CHECK(f.makespan == p + m - 1);
      CHECK(f.bubble == Approx(analytic_bubble(p, m)).margin(1e-12));
      CHECK(f.timeline.size() == static_cast<std::size_t>(p * m));
      std::vector<int> seen(static_cast<std::size_t>(p * m), 0);
      for (const auto& a : f.timeline) {
        CHECK(a.action.kind == ActionKind::F);
        CHECK(a.start == a.rank + a.action.microbatch);
        ++seen[static_cast<std::size_t>(a.rank * m + a.action.microbatch)];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      CHECK(f.peak_live_activations == std::vector<int>(static_cast<std::size_t>(p), 0));

      for (const Schedule& s : {make_gpipe(p, m), make_1f1b(p, m), make_eager_1f1b(p, m)}) {
        INFO(s.name);
        REQUIRE(check_schedule(s).empty());
        const SimResult r = simulate(s, SimCosts::unit(s));
        REQUIRE(r.completed);
        CHECK(r.makespan == 2 * (m + p - 1));
        CHECK(r.bubble == Approx(analytic_bubble(p, m)).margin(1e-12));
      }
      const auto gpipe_peaks = peak_live_activations(make_gpipe(p, m));
      const auto ofob_peaks = peak_live_activations(make_1f1b(p, m));
      for (int s = 0; s < p; ++s) {
        CHECK(gpipe_peaks[static_cast<std::size_t>(s)] == m);
        CHECK(ofob_peaks[static_cast<std::size_t>(s)] == std::min(p - s, m));
      }
    }
}

TEST_CASE("1f1b: warm-up forwards, then alternation, then cool-down", "[schedule]") {
  const Schedule s = make_1f1b(4, 6);
  CHECK(to_text(s.actions[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(to_text(s.actions[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than warm-up slots: all forwards, then all backwards.
  CHECK(to_text(make_1f1b(4, 2).actions[0]) == "F0 F1 B0 B1");
}

TEST_CASE("gpipe and forward-only lists", "[schedule]") {
  CHECK(to_text(make_gpipe(2, 3)) == "r0: F0 F1 F2 B0 B1 B2\nr1: F0 F1 F2 B0 B1 B2\n");
  CHECK(to_text(make_forward_only(2, 2)) == "r0: F0 F1\nr1: F0 F1\n");
  CHECK_FALSE(make_forward_only(2, 2).retains_activations);
  CHECK(make_schedule(ScheduleKind::gpipe, RunMode::inference, 3, 4).name == "forward-only");
  CHECK(make_schedule(ScheduleKind::eager_one_f_one_b, RunMode::train, 3, 4).name == "eager-1f1b");
}

TEST_CASE("action text form round-trips, chunk as prefix", "[schedule]") {
  for (const Action a : {Action{ActionKind::F, 3, 0}, Action{ActionKind::B, 0, 0}, Action{ActionKind::W, 12, 0},
                         Action{ActionKind::F, 2, 1}, Action{ActionKind::B, 7, 3}}) {
    CHECK(parse_action(to_string(a)) == a);
  }
  CHECK(to_string(Action{ActionKind::F, 3, 0}) == "F3");
  CHECK(to_string(Action{ActionKind::B, 2, 1}) == "1B2");
  for (const char* bad : {"", "F", "X3", "F-1", "Fa", "3", "F3x"}) CHECK_THROWS_AS(parse_action(bad), ScheduleError);
}

namespace {
Schedule from_text(int p, int m, std::vector<std::string> lines, bool retains = true) {
  Schedule s;
  s.name = "handmade";
  s.num_ranks = p;
  s.num_microbatches = m;
  s.retains_activations = retains;
  for (const auto& line : lines) {
    s.actions.emplace_back();
    std::size_t pos = 0;
    while (pos < line.size()) {
      const auto end = line.find(' ', pos);
      const auto tok = line.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      if (!tok.empty()) s.actions.back().push_back(parse_action(tok));
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  return s;
}

std::string all_errors(const Schedule& s) {
  std::string out;
  for (const auto& e : check_schedule(s)) out += e + "\n";
  return out;
}
}  // namespace

TEST_CASE("validator: missing, duplicated and out-of-range actions", "[schedule][validate]") {
  CHECK_THAT(all_errors(from_text(2, 2, {"F0 F1 B0 B1", "F0 B0 F1"})),
             Catch::Contains("stage 1 (rank 1) micro-batch 1: B appears 0 times"));
  CHECK_THAT(all_errors(from_text(2, 2, {"F0 F0 F1 B0 B1", "F0 B0 F1 B1"})),
             Catch::Contains("stage 0 (rank 0) micro-batch 0: F appears 2 times"));
  CHECK_THAT(all_errors(from_text(2, 2, {"F0 F1 B0 B1", "F0 B0 F1 B1 F2"})),
             Catch::Contains("outside 2 micro-batches"));
  CHECK_THAT(all_errors(from_text(2, 2, {"F0 F1 B0 B1", "F0 F1 B0 B1", "F0"})), Catch::Contains("3 action lists for 2 ranks"));
  CHECK_THAT(all_errors(from_text(1, 1, {"F0 B0"}, false)), Catch::Contains("forward-only schedule has backward"));
}

TEST_CASE("validator: B before its F, W before its B", "[schedule][validate]") {
  CHECK_THAT(all_errors(from_text(1, 2, {"F0 B1 F1 B0"})),
             Catch::Contains("micro-batch 1: B at position 1 comes before its F at position 2"));
  CHECK_THAT(all_errors(from_text(1, 1, {"F0 W0 B0"})), Catch::Contains("W at position 1 comes before its B"));
  CHECK(check_schedule(from_text(1, 1, {"F0 B0 W0"})).empty());
}

TEST_CASE("validator: cross-stage order that deadlocks is reported with a grid", "[schedule][validate]") {
  // Rank 1 wants micro-batch 1 first, but rank 0 waits for B0 from rank 1
  // before sending F1: each waits for the other.
  const Schedule s = from_text(2, 2, {"F0 B0 F1 B1", "F1 B1 F0 B0"});
  const auto errors = check_schedule(s);
  REQUIRE_FALSE(errors.empty());
  CHECK_THAT(all_errors(s), Catch::Contains("deadlock"));
  CHECK_THAT(all_errors(s), Catch::Contains("rank 0: B0 waits for B0 of stage 1 (rank 1)"));
  CHECK_THAT(all_errors(s), Catch::Contains("rank 1: F1 waits for F1 of stage 0 (rank 0)"));
  try {
    validate_schedule(s);
    FAIL("validate_schedule accepted a deadlocking schedule");
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("step x rank"));
    CHECK_THAT(msg, Catch::Contains("  r0  F0\n  r1   .\n"));  // what could run before the deadlock
  }
}

TEST_CASE("validator accepts every generated schedule", "[schedule][validate]") {
  for (int p : {1, 2, 5, 9})
    for (int m : {1, 3, 17}) {
      CHECK_NOTHROW(validate_schedule(make_forward_only(p, m)));
      CHECK_NOTHROW(validate_schedule(make_gpipe(p, m)));
      CHECK_NOTHROW(validate_schedule(make_1f1b(p, m)));
      CHECK_NOTHROW(validate_schedule(make_eager_1f1b(p, m)));
    }
}

TEST_CASE("grid: one row per rank, '.' for idle steps", "[schedule][grid]") {
  const Schedule s = make_1f1b(2, 2);
  const std::string grid = render_grid(s, simulate(s, SimCosts::unit(s)));
  CHECK(grid ==
        "step   0  1  2  3  4  5\n"
        "  r0  F0 F1  . B0  . B1\n"
        "  r1   . F0 B0 F1 B1  .\n");
}

TEST_CASE("chunks: two model chunks per rank follow virtual-stage dependencies", "[schedule]") {
  // 2 ranks x 2 chunks = 4 virtual stages (v = chunk * 2 + rank), one
  // micro-batch: F flows r0c0 -> r1c0 -> r0c1 -> r1c1, B flows back.
  Schedule s = from_text(2, 1, {"F0 1F0 1B0 B0", "F0 1F0 1B0 B0"});
  s.chunks_per_rank = 2;
  REQUIRE(check_schedule(s).empty());
  const SimResult r = simulate(s, SimCosts::unit(s));
  CHECK(r.makespan == 8);
  CHECK(r.peak_live_activations == std::vector<int>{2, 2});
}

TEST_CASE("boundary_links: one per neighbouring pair and direction, gradients only in training", "[schedule]") {
  using L = BoundaryLink;
  const auto F = ActionKind::F, B = ActionKind::B;
  CHECK(boundary_links(make_1f1b(1, 4), true).empty());
  CHECK(boundary_links(make_1f1b(3, 4), true) ==
        std::vector<L>{{0, 1, F}, {1, 0, B}, {1, 2, F}, {2, 1, B}});
  CHECK(boundary_links(make_forward_only(3, 4), false) == std::vector<L>{{0, 1, F}, {1, 2, F}});
  // Two chunks per rank (virtual stages 0..3 on ranks 0,1,0,1): the wrap 1 -> 0 carries
  // activations too, and 0 -> 1 gradients; each directed (link, kind) once.
  Schedule two_chunks = make_gpipe(2, 2);
  two_chunks.chunks_per_rank = 2;
  CHECK(boundary_links(two_chunks, true) == std::vector<L>{{0, 1, F}, {0, 1, B}, {1, 0, F}, {1, 0, B}});
}
