// Interleaved 1F1B, ZB-H1 and ZB-V (issue 15): each generator against its
// closed form on a grid of (p, m, v), the validator's verdicts, peak live
// activations, and the CSV form (round trip and malformed files).
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/schedule_csv.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/validate.hpp"

using namespace pipebench;

namespace {
// Unit costs per chunk: F = B (= W) = 1/v, so a rank's work per micro-batch
// is the same whatever v is.
SimCosts chunk_costs(const Schedule& s) {
  SimCosts c = SimCosts::unit(s);
  const double unit = 1.0 / s.chunks_per_rank;
  for (auto* v : {&c.forward, &c.backward, &c.weight}) std::fill(v->begin(), v->end(), unit);
  return c;
}
int max_of(const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); }
// `s` is valid, splits its backward or not as said, and completes with chunk costs.
SimResult valid_chunk_simulation(const Schedule& s, bool split) {
  REQUIRE(check_schedule(s).empty());
  REQUIRE(s.split_backward() == split);
  const SimResult r = simulate(s, chunk_costs(s));
  REQUIRE(r.completed);
  return r;
}
}  // namespace

TEST_CASE("placements: looped and V-shaped stage -> rank maps", "[schedule][zoo]") {
  CHECK(stage_ranks(Placement::looped, 4, 2) == std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(stage_ranks(Placement::v_shape, 4, 2) == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
  const Schedule v = make_zb_v(4, 8);
  for (int r = 0; r < 4; ++r) {
    CHECK(v.virtual_stage(r, 0) == r);
    CHECK(v.virtual_stage(r, 1) == 7 - r);
    CHECK(v.rank_of(v.virtual_stage(r, 1)) == r);
    CHECK(v.chunk_of(v.virtual_stage(r, 1)) == 1);
  }
}

TEST_CASE("interleaved 1F1B: unit bubble (p-1)/(v m + p-1) with chunk costs 1/v", "[schedule][zoo]") {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        INFO("p = " << p << ", v = " << v << ", m = " << m);
        const Schedule s = make_interleaved_1f1b(p, m, v);
        REQUIRE(check_schedule(s).empty());
        const SimResult r = simulate(s, chunk_costs(s));
        REQUIRE(r.completed);
        const double expected = static_cast<double>(p - 1) / (v * m + p - 1);
        CHECK(r.bubble == Approx(expected).margin(1e-9));
        CHECK(r.makespan == Approx(2.0 * m + 2.0 * (p - 1) / v).margin(1e-9));
        if (v == 1) CHECK(s.actions == make_1f1b(p, m).actions);  // one chunk is plain 1F1B
      }
}

TEST_CASE("interleaved 1F1B: Megatron's order and divisibility rule", "[schedule][zoo]") {
  const Schedule s = make_interleaved_1f1b(2, 4, 2);
  // Rank 0: 2(p-1) + (v-1)p = 4 warm-up forwards over chunk 0 then chunk 1, in groups of p.
  CHECK(to_text(s.actions[0]) == "F0 F1 1F0 1F1 F2 1B0 F3 1B1 1F2 B0 1F3 B1 1B2 1B3 B2 B3");
  CHECK(to_text(s.actions[1]) == "F0 F1 1F0 1B0 1F1 1B1 F2 B0 F3 B1 1F2 1B2 1F3 1B3 B2 B3");
  CHECK_THROWS_WITH(make_interleaved_1f1b(4, 6, 2), Catch::Contains("multiple of pipeline_size") &&
                                                        Catch::Contains("m = 4 or 8"));
}

TEST_CASE("ZB-H1: unit bubble (p-1)/(3m + p-1), peak memory of 1F1B's first rank", "[schedule][zoo]") {
  for (int p = 1; p <= 10; ++p)
    for (int m = 1; m <= 30; ++m) {
      INFO("p = " << p << ", m = " << m);
      const Schedule s = make_zb_h1(p, m);
      REQUIRE(check_schedule(s).empty());
      REQUIRE(s.split_backward());
      const SimResult r = simulate(s, SimCosts::unit(s));
      REQUIRE(r.completed);
      if (m >= p) {
        CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (3 * m + p - 1)).margin(1e-9));
        CHECK(r.makespan == 3 * m + p - 1);
      }
      // Held until W: never more than p micro-batches, and the peak over ranks is 1F1B's.
      const auto zb = peak_live_activations(s), ofob = peak_live_activations(make_1f1b(p, m));
      CHECK(max_of(zb) == max_of(ofob));
      for (int x : zb) CHECK(x <= std::min(p, m));
    }
}

TEST_CASE("ZB-V: V placement, split backward, bubble and memory", "[schedule][zoo]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 6 * p; ++m) {
      INFO("p = " << p << ", m = " << m);
      const Schedule s = make_zb_v(p, m);
      REQUIRE(check_schedule(s).empty());
      const SimResult r = simulate(s, chunk_costs(s));
      REQUIRE(r.completed);
      if (m >= 2 * p) {
        // F = B = W = 1/2 per chunk: 3m of work per rank, and the
        // construction idles (p-1)/2 per rank: bubble (p-1)/(6m + p-1), half
        // of ZB-H1's and a sixth of 1F1B's (not the paper's zero: the first
        // forward still has to reach the last rank).
        CHECK(r.makespan == Approx(3.0 * m + 0.5 * (p - 1)).margin(1e-9));
        CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (6 * m + p - 1)).margin(1e-9));
      }
      // In bytes (2 chunks of equal size): never above 1F1B's first rank.
      const auto zb = peak_live_activation_bytes(s, std::vector<std::int64_t>(static_cast<std::size_t>(2 * p), 1));
      const auto ofob = peak_live_activations(make_1f1b(p, m));
      CHECK(*std::max_element(zb.begin(), zb.end()) <= 2 * max_of(ofob));
    }
}

TEST_CASE("validator: a planted deadlock and missing W in split schedules", "[schedule][zoo][validate]") {
  // Rank 0 waits for B0 before sending F1; rank 1 waits for F1 before its B0.
  Schedule s = make_zb_h1(2, 2);
  s.actions[0] = {{ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::W, 0, 0},
                  {ActionKind::F, 1, 0}, {ActionKind::B, 1, 0}, {ActionKind::W, 1, 0}};
  s.actions[1] = {{ActionKind::F, 0, 0}, {ActionKind::F, 1, 0}, {ActionKind::B, 0, 0},
                  {ActionKind::B, 1, 0}, {ActionKind::W, 0, 0}, {ActionKind::W, 1, 0}};
  const auto errors = check_schedule(s);
  REQUIRE_FALSE(errors.empty());
  CHECK_THAT(errors.front(), Catch::Contains("deadlock"));
  Schedule missing = make_zb_h1(2, 2);
  missing.actions[0].pop_back();  // the last W
  CHECK_THAT(check_schedule(missing).front(), Catch::Contains("no W, but the schedule splits its backward"));
  Schedule dup = make_zb_v(2, 4);
  dup.actions[1].push_back(dup.actions[1].front());
  CHECK_THAT(check_schedule(dup).front(), Catch::Contains("F appears 2 times"));
}

TEST_CASE("CSV: every built-in schedule round-trips", "[schedule][zoo][csv]") {
  for (const Schedule& s : {make_gpipe(3, 5), make_1f1b(4, 6), make_eager_1f1b(3, 4), make_interleaved_1f1b(2, 4, 3),
                            make_zb_h1(4, 5), make_zb_v(3, 7)}) {
    INFO(s.name);
    const std::string csv = schedule_to_csv(s);
    const Schedule back = schedule_from_csv(csv, s.num_ranks, s.num_microbatches, "x.csv");
    CHECK(back.actions == s.actions);
    CHECK(back.chunks_per_rank == s.chunks_per_rank);
    CHECK(back.placement == s.placement);
    CHECK(check_schedule(back).empty());
  }
  CHECK(schedule_to_csv(make_1f1b(2, 2)) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  CHECK(schedule_to_csv(make_zb_h1(2, 1)) == "0F0,0I0,0W0\n1F0,1I0,1W0\n");
  // Idle slots (empty cells), spaces and CRLF are accepted.
  CHECK(schedule_from_csv(" 0F0 ,,0B0\r\n1F0,1B0\r\n", 2, 1, "x.csv").actions == make_1f1b(2, 1).actions);
  // A spreadsheet's UTF-8 byte order mark before the first cell (issue 33: refused, with an invisible character named).
  CHECK(schedule_from_csv("\xEF\xBB\xBF" "0F0,0B0\n1F0,1B0\n", 2, 1, "x.csv").actions == make_1f1b(2, 1).actions);
}

TEST_CASE("CSV: malformed files name the line and cell", "[schedule][zoo][csv]") {
  CHECK_THROWS_WITH(schedule_from_csv("0F0,0X0\n1F0\n", 2, 1, "a.csv"), Catch::Contains("a.csv:1: cell 2") &&
                                                                          Catch::Contains("unknown action kind 'X'"));
  CHECK_THROWS_WITH(schedule_from_csv("0F0,0SEND_X0\n1F0\n", 2, 1, "a.csv"), Catch::Contains("unknown action kind 'SEND_X'"));
  CHECK_THROWS_WITH(schedule_from_csv("0F0,0UNSHARD3\n1F0\n", 2, 1, "a.csv"), Catch::Contains("UNSHARD takes no micro-batch"));
  CHECK_THROWS_WITH(schedule_from_csv("0F0\n", 2, 1, "a.csv"), Catch::Contains("1 line(s) but the run has pipeline_size = 2"));
  CHECK_THROWS_WITH(schedule_from_csv("0F0\n1F0\n2F0\n", 2, 1, "a.csv"), Catch::Contains("a.csv:3: more than 2 lines"));
  CHECK_THROWS_WITH(schedule_from_csv("0F5\n1F0\n", 2, 2, "a.csv"), Catch::Contains("micro-batch 5"));
  // A split file may also name full backwards (PyTorch writes B where a schedule does not split): each reads as its
  // B followed at once by its W.
  CHECK(schedule_from_csv("0F0,0B0\n1F0,1I0,1W0\n", 2, 1, "a.csv").actions == make_zb_h1(2, 1).actions);
  CHECK_THROWS_WITH(schedule_from_csv("0F0,1F0\n2F0,3F0\n", 2, 1, "a.csv"), Catch::Contains("neither in a loop") &&
                                                                             Catch::Contains("rank 0 holds 0 1"));
  CHECK_THROWS_WITH(schedule_from_csv("F0\n1F0\n", 2, 1, "a.csv"), Catch::Contains("is not an action"));
  // Stage indices that would not fit an action's 16-bit chunk are refused, never wrapped onto a real chunk.
  CHECK_THROWS_WITH(schedule_from_csv("0F0,131072F0\n1F0\n", 2, 1, "a.csv"),
                    Catch::Contains("131073 stages on 2 ranks") || Catch::Contains("cannot be spread"));
  CHECK_THROWS_WITH(schedule_from_csv("0F0,131073F0\n1F0\n", 2, 1, "a.csv"),
                    Catch::Contains("131074 stages on 2 ranks is 65537 per rank; at most 64"));
  // Numbers past nine digits are said to be out of range (they read as "not an action" and "no micro-batch number").
  CHECK_THROWS_WITH(schedule_from_csv("0F0,99999999999F0\n1F0\n", 2, 1, "a.csv"),
                    Catch::Contains("a.csv:1: cell 2: \"99999999999F0\": stage number 99999999999 is out of range"));
  CHECK_THROWS_WITH(schedule_from_csv("0F2147483648\n1F0\n", 2, 1, "a.csv"),
                    Catch::Contains("micro-batch number 2147483648 is out of range"));
  CHECK_THROWS_WITH(schedule_from_csv("0F\n1F0\n", 2, 1, "a.csv"), Catch::Contains("\"0F\" has no micro-batch number"));
  CHECK_THROWS_WITH(schedule_from_csv("0OVERLAP_F_B1\n1F0\n", 2, 1, "a.csv"),
                    Catch::Contains("OVERLAP_F_B pairs two actions, written (FORWARD;BACKWARD)OVERLAP_F_B"));
  CHECK_THROWS_WITH(parse_action("70000F1"), Catch::Contains("malformed action \"70000F1\""));
  CHECK(parse_action("63F1") == Action(ActionKind::F, 1, 63));
}

TEST_CASE("recomputation: F holds the full activations then the input, B the full ones again", "[schedule][zoo]") {
  // 1F1B, p = 2, m = 3: rank 0 runs F0 F1 B0 F2 B1 B2; kept 1, full 10 bytes per micro-batch.
  const Schedule s = make_1f1b(2, 3);
  const std::vector<std::int64_t> kept{1, 1}, full{10, 10};
  const auto peaks = peak_recompute_activation_bytes(s, kept, full);
  // Rank 0: F0 (0+1+10) F1 (1+1+10 = 12) B0 (2+10 = 12) ...; rank 1: F0 B0 alternate: 1+10.
  CHECK(peaks == std::vector<std::int64_t>{12, 11});
  // Without recomputation the same order holds 2 full micro-batches on rank 0.
  CHECK(peak_live_activation_bytes(s, full) == std::vector<std::int64_t>{20, 10});
  CHECK_THROWS_WITH(peak_recompute_activation_bytes(make_zb_h1(2, 3), kept, full), Catch::Contains("split backward"));
}

TEST_CASE("looped BFS: PyTorch's order, unit bubble (p-1)/(v m + p-1), GPipe's memory", "[schedule][zoo]") {
  // Every forward of chunk 0, then of chunk 1; backwards from the last chunk, micro-batches in reverse.
  const Schedule two = make_looped_bfs(2, 2, 2);
  for (const auto& rank : two.actions) CHECK(to_text(rank) == "F0 F1 1F0 1F1 1B1 1B0 B1 B0");
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 4 * p; ++m) {
        INFO("p = " << p << ", v = " << v << ", m = " << m);
        const Schedule s = make_looped_bfs(p, m, v);
        const SimResult r = valid_chunk_simulation(s, false);
        if (m >= p) {
          CHECK(r.makespan == Approx(2.0 * m + 2.0 * (p - 1) / v).margin(1e-9));
          CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (v * m + p - 1)).margin(1e-9));
        } else {
          CHECK(r.makespan > 2.0 * m + 2.0 * (p - 1) / v - 1e-9);  // the loop stalls: never better
        }
        for (int x : peak_live_activations(s)) CHECK(x == v * m);
      }
  CHECK_THROWS_WITH(make_looped_bfs(2, 4, 0), Catch::Contains("virtual_stages_per_rank >= 1"));
}

TEST_CASE("interleaved zero bubble: PyTorch's order, unit bubble (p-1)/(3 v m + p-1)", "[schedule][zoo]") {
  // p = 2, m = 4, v = 2: rounds of 2; rank 0 warms up with (v-1) 2 + 1 forwards and never defers a W,
  // rank 1 with 2 forwards and one W deferred.
  const Schedule s24 = make_interleaved_zb(2, 4, 2);
  CHECK(to_text(s24.actions[0]) ==
        "F0 F1 1F0 1F1 1B0 1W0 F2 1B1 1W1 F3 B0 W0 1F2 B1 W1 1F3 1B2 1W2 1B3 1W3 B2 W2 B3 W3");
  CHECK(to_text(s24.actions[1]) ==
        "F0 F1 1F0 1B0 1F1 1B1 1W0 F2 B0 1W1 F3 B1 W0 1F2 1B2 W1 1F3 1B3 1W2 B2 1W3 B3 W2 W3");
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 4 * p; ++m) {
        INFO("p = " << p << ", v = " << v << ", m = " << m);
        if (!schedule_microbatch_problem(ScheduleKind::interleaved_zb, p, m).empty()) {
          CHECK_THROWS_WITH(make_interleaved_zb(p, m, v), Catch::Contains("rounds of equal size"));
          continue;
        }
        const Schedule s = make_interleaved_zb(p, m, v);
        const SimResult r = valid_chunk_simulation(s, true);
        if (m >= p) {
          // F = B = W = 1/v: 3m of work per rank and (p-1)/v idle, a third of interleaved 1F1B's in these units.
          CHECK(r.makespan == Approx(3.0 * m + static_cast<double>(p - 1) / v).margin(1e-9));
          CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (3 * v * m + p - 1)).margin(1e-9));
          if (v == 1) CHECK(s.actions == make_zb_h1(p, m).actions);  // one chunk is ZB-H1
        }
        // Held until W: (v-1) n + p chunk micro-batches on every rank (rounds of n; at most all v m):
        // with n = p, v p chunks, 1F1B's first rank in a stage's activations.
        const int n = m / std::max(1, m / p);
        for (int x : peak_live_activations(s)) CHECK(x == std::min(v * m, (v - 1) * n + p));
      }
  CHECK_THROWS_WITH(make_interleaved_zb(4, 9, 2), Catch::Contains("multiple of 2") && Catch::Contains("use 8 or 10"));
  CHECK(schedule_microbatch_problem(ScheduleKind::interleaved_zb, 4, 11) ==
        "interleaved-zb runs micro-batches in max(1, m / pipeline_size) = 2 rounds of equal size, so num_microbatches "
        "must be a multiple of 2 (got 11; use 10 or 12)");
}

TEST_CASE("CSV: looped BFS and interleaved zero bubble round-trip", "[schedule][zoo][csv]") {
  for (const Schedule& s : {make_looped_bfs(3, 5, 2), make_looped_bfs(2, 1, 4), make_interleaved_zb(3, 6, 2),
                            make_interleaved_zb(4, 3, 3)}) {
    INFO(s.name);
    const Schedule back = schedule_from_csv(schedule_to_csv(s), s.num_ranks, s.num_microbatches, "x.csv");
    CHECK(back.actions == s.actions);
    CHECK(back.chunks_per_rank == s.chunks_per_rank);
    CHECK(back.placement == Placement::looped);
    CHECK(simulate(back, chunk_costs(back)).makespan == simulate(s, chunk_costs(s)).makespan);
  }
}
