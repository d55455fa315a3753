// DualPipeV (issue 39): PyTorch's order, the overlapped forward-backward as
// one action, the closed forms on a grid of (p, m), the validator's verdicts
// on misplaced or deadlocking overlaps, the transfer plan, and both CSV forms
// (round trip and PyTorch-written cells).
#include <algorithm>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/p2p_groups.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/schedule_csv.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/validate.hpp"

using namespace pipebench;

namespace {
// F = B (input) = W = 1/2 per chunk: a rank's work per micro-batch is 3, as
// for one-chunk schedules with unit costs.
SimCosts half_costs(const Schedule& s) {
  SimCosts c = SimCosts::unit(s);
  for (auto* v : {&c.forward, &c.backward, &c.weight}) std::fill(v->begin(), v->end(), 0.5);
  return c;
}
int overlapped_units(const std::vector<Action>& list) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [](const Action& a) { return a.overlaps_next; }));
}
}  // namespace

TEST_CASE("DualPipeV: PyTorch's order on 2 ranks", "[schedule][zoo][dualpipev]") {
  // ScheduleDualPipeV's steps for p = 2, m = 4 (F4+ 1B2: the overlapped pair; B then W at once: a full backward).
  const Schedule s = make_dualpipev(2, 4);
  CHECK(s.placement == Placement::v_shape);
  CHECK(s.chunks_per_rank == 2);
  CHECK(to_text(s.actions[0]) == "F0 F1 F2 1F0 1B0 1W0 1F1 F3+ 1B1 1W1 1F2+ B0 W0 1B2 1W2 1F3+ B1 W1 1B3 1W3 B2 W2 B3 W3");
  CHECK(to_text(s.actions[1]) == "F0 1F0 F1 1F1 F2 1B0 1W0 1F2+ B0 W0 F3+ 1B1 1W1 1F3+ B1 W1 1B2 1W2 B2 W2 1B3 B3 1W3 W3");
  CHECK(parse_action("1F3+") == Action(ActionKind::F, 3, 1, true));
  CHECK_THROWS_WITH(parse_action("1B3+"), Catch::Contains("malformed action \"1B3+\""));
}

TEST_CASE("DualPipeV: bubble (p-1)/(6m + p-1), 2p+1 chunk activations, on a grid", "[schedule][zoo][dualpipev]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p; m <= 6 * p; ++m) {
      INFO("p = " << p << ", m = " << m);
      const Schedule s = make_dualpipev(p, m);
      REQUIRE(check_schedule(s).empty());
      REQUIRE(s.split_backward());
      CHECK_NOTHROW(check_p2p_progress(p2p_groups(s)));
      const SimResult r = simulate(s, half_costs(s));
      REQUIRE(r.completed);
      // 3m of work per rank and (p-1)/2 idle: ZB-V's bubble, with the overlapped pairs run one after the other.
      CHECK(r.makespan == Approx(3.0 * m + 0.5 * (p - 1)).margin(1e-9));
      CHECK(r.bubble == Approx(static_cast<double>(p - 1) / (6 * m + p - 1)).margin(1e-9));
      // DualPipe's PP + 1 activations per device with PP = 2p stages: 2p+1 chunk micro-batches, on every rank.
      for (int x : peak_live_activations(s)) CHECK(x == 2 * p + 1);
      for (int rank = 0; rank < p; ++rank) {
        const auto& list = s.actions[static_cast<std::size_t>(rank)];
        CHECK(list.size() == 6 * static_cast<std::size_t>(m));
        // Steady state: two pairs per round of m-2p+r+1 (the last rank's first not overlapped), one per cool-down step.
        CHECK(overlapped_units(list) == 2 * (m - 2 * p + rank + 1) + (p - rank - 1) - (rank == p - 1 ? 1 : 0));
        for (std::size_t i = 0; i < list.size(); ++i)
          if (list[i].overlaps_next) {
            REQUIRE(i + 1 < list.size());
            CHECK(list[i + 1].kind == ActionKind::B);
            CHECK(list[i + 1].chunk != list[i].chunk);  // the pair's micro-batches travel in opposite directions
          }
      }
    }
  CHECK_THROWS_WITH(make_dualpipev(4, 7), Catch::Contains("dualpipev needs num_microbatches >= 2 x pipeline_size = 8"));
}

TEST_CASE("DualPipeV: an overlapped pair receives both inputs before it starts", "[schedule][zoo][dualpipev]") {
  // The pair's unit cost is F + B; a plain F then B of the same actions costs the same but the B may wait.
  const Schedule s = make_dualpipev(3, 6);
  Schedule plain = s;
  for (auto& list : plain.actions)
    for (auto& a : list) a.overlaps_next = false;
  REQUIRE(check_schedule(plain).empty());
  CHECK(simulate(plain, half_costs(plain)).makespan <= simulate(s, half_costs(s)).makespan + 1e-9);

  // Misplaced: an overlap flag on an F followed by an F.
  Schedule bad = s;
  bad.actions[0][0].overlaps_next = true;  // F0 then F1
  CHECK_THAT(check_schedule(bad).front(), Catch::Contains("overlapped forward-backward"));

  // Deadlock: on 2 ranks and 1 micro-batch, rank 1 overlaps stage 2's F0 with stage 2's B0, whose gradient comes
  // back from stage 3 only after stage 2's F0 has reached it.
  const Schedule planted =
      schedule_from_csv("0F0,3F0,3I0,3W0,0I0,0W0\n1F0,(2F0;2I0)OVERLAP_F_B,2W0,1I0,1W0\n", 2, 1, "d.csv");
  const auto errors = check_schedule(planted);
  REQUIRE_FALSE(errors.empty());
  CHECK_THAT(errors.front(), Catch::Contains("deadlock"));
}

TEST_CASE("DualPipeV: both CSV forms round-trip; PyTorch's full-backward cells are read", "[schedule][zoo][dualpipev][csv]") {
  for (const Schedule& s : {make_dualpipev(2, 4), make_dualpipev(3, 7), make_dualpipev(4, 8)}) {
    INFO("p = " << s.num_ranks << ", m = " << s.num_microbatches);
    const std::string csv = schedule_to_csv(s);
    CHECK(csv.find(")OVERLAP_F_B") != std::string::npos);
    for (const std::string& text : {csv, schedule_to_comms_csv(s)}) {
      const Schedule back = schedule_from_csv(text, s.num_ranks, s.num_microbatches, "x.csv");
      CHECK(back.actions == s.actions);
      CHECK(back.placement == Placement::v_shape);
      CHECK(simulate(back, half_costs(back)).makespan == simulate(s, half_costs(s)).makespan);
    }
    // PyTorch writes a full backward as B, also inside the overlapped cell: "(0F4;3B2)OVERLAP_F_B".
    std::string torch = std::regex_replace(csv, std::regex(R"((\d+)I(\d+)\)OVERLAP_F_B,\1W\2)"), "$1B$2)OVERLAP_F_B");
    torch = std::regex_replace(torch, std::regex(R"((^|,)(\d+)I(\d+),\2W\3(?=,|\n))"), "$1$2B$3");
    CHECK(torch != csv);
    CHECK(torch.find("B") != std::string::npos);
    CHECK(schedule_from_csv(torch, s.num_ranks, s.num_microbatches, "torch.csv").actions == s.actions);
  }
  // One rank holds both stages of the V: F1 1B0 is not overlapped (the last rank's first), 1F1 B0 is.
  CHECK(schedule_to_csv(make_dualpipev(1, 2)) == "0F0,1F0,0F1,1I0,1W0,(1F1;0I0)OVERLAP_F_B,0W0,1I1,1W1,0I1,0W1\n");
}

TEST_CASE("DualPipeV: malformed overlapped cells name the line and cell", "[schedule][zoo][dualpipev][csv]") {
  auto error = [](const std::string& text) {
    try {
      schedule_from_csv(text, 2, 1, "o.csv");
    } catch (const ScheduleError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("0F0,(3F0;3B0\n1F0\n"), Catch::Contains("o.csv:1: cell 2"));
  CHECK_THAT(error("0F0,(3B0;3F0)OVERLAP_F_B\n1F0\n"), Catch::Contains("o.csv:1: cell 2"));
  CHECK_THAT(error("0F0,(3F0;3B0;0B0)OVERLAP_F_B\n1F0\n"), Catch::Contains("o.csv:1: cell 2"));
  CHECK_THAT(error("0F0,(3F0;3B0)OVERLAP_X\n1F0\n"), Catch::Contains("o.csv:1: cell 2"));
  CHECK_THAT(error("0F0,(3F0;3W0)OVERLAP_F_B\n1F0\n"), Catch::Contains("o.csv:1: cell 2"));
}
