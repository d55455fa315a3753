// Data parallelism's reduce-grad actions beside a schedule
// (schedule/sync_actions.hpp): where each chunk's gradient synchronisation
// launches after the flush and overlapped, the validator's rule for them, and
// their launch times on a simulated timeline.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/simulate.hpp"
#include "pipebench/schedule/sync_actions.hpp"

using namespace pipebench;

namespace {

// The index of the last action of `kind` and `chunk` on `rank`.
int last_of(const Schedule& s, int rank, ActionKind kind, int chunk) {
  const auto& a = s.actions[static_cast<std::size_t>(rank)];
  for (int i = static_cast<int>(a.size()) - 1; i >= 0; --i)
    if (a[static_cast<std::size_t>(i)].kind == kind && a[static_cast<std::size_t>(i)].chunk == chunk) return i;
  return -1;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("sync actions: after the flush every chunk's reduce-grad follows the rank's last action", "[sync_actions]") {
  for (const Schedule& s : {make_1f1b(4, 8), make_interleaved_1f1b(2, 4, 3), make_zb_v(3, 6)}) {
    INFO(s.name);
    const SyncSchedule sync = make_sync_schedule(s, false);
    CHECK(check_sync_schedule(s, sync).empty());
    for (int r = 0; r < s.num_ranks; ++r) {
      const auto& red = sync.reduce[static_cast<std::size_t>(r)];
      REQUIRE(red.size() == static_cast<std::size_t>(s.chunks_per_rank));
      for (std::size_t c = 0; c < red.size(); ++c) {
        CHECK(red[c].chunk == static_cast<int>(c));  // chunk order
        CHECK(red[c].after == static_cast<int>(s.actions[static_cast<std::size_t>(r)].size()) - 1);
      }
    }
  }
}

TEST_CASE("sync actions: overlapped, a chunk's reduce-grad follows its last gradient action, in finishing order",
          "[sync_actions]") {
  // Interleaved 1F1B runs the chunks' backwards in reverse: chunk 1 finishes first.
  const Schedule il = make_interleaved_1f1b(2, 4, 2);
  const SyncSchedule a = make_sync_schedule(il, true);
  CHECK(check_sync_schedule(il, a).empty());
  for (int r = 0; r < 2; ++r) {
    const auto& red = a.reduce[static_cast<std::size_t>(r)];
    REQUIRE(red.size() == 2);
    CHECK(red[0] == ReduceGrad{1, last_of(il, r, ActionKind::B, 1)});
    CHECK(red[1] == ReduceGrad{0, last_of(il, r, ActionKind::B, 0)});
    CHECK(red[0].after < red[1].after);
  }
  CHECK(sync_actions_text(il, a, 0) == "R1 after 1B3, R0 after B3, then O");
  // A split backward: the weight gradient (W) is the last gradient action.
  for (const Schedule& s : {make_zb_h1(3, 6), make_zb_v(3, 6)}) {
    INFO(s.name);
    const SyncSchedule z = make_sync_schedule(s, true);
    CHECK(check_sync_schedule(s, z).empty());
    for (int r = 0; r < s.num_ranks; ++r)
      for (const ReduceGrad& g : z.reduce[static_cast<std::size_t>(r)])
        CHECK(g.after == last_of(s, r, ActionKind::W, g.chunk));
  }
}

TEST_CASE("sync actions: the validator names a reduce-grad launched too early, missing, doubled or misplaced",
          "[sync_actions]") {
  const Schedule s = make_interleaved_1f1b(2, 4, 2);
  const int last_b1 = last_of(s, 0, ActionKind::B, 1);
  SyncSchedule early = make_sync_schedule(s, true);
  early.reduce[0][0].after = last_b1 - 1;
  CHECK(mentions(check_sync_schedule(s, early), "rank 0: R1: launched after"));
  CHECK(mentions(check_sync_schedule(s, early), "before the chunk's last gradient action 1B3"));
  SyncSchedule missing = make_sync_schedule(s, true);
  missing.reduce[1].pop_back();
  CHECK(mentions(check_sync_schedule(s, missing), "rank 1: chunk 0 has 0 reduce-grad actions, not 1"));
  SyncSchedule twice = make_sync_schedule(s, true);
  twice.reduce[1][1].chunk = 1;
  CHECK(mentions(check_sync_schedule(s, twice), "rank 1: chunk 1 has 2 reduce-grad actions, not 1"));
  SyncSchedule flush = make_sync_schedule(s, false);
  flush.reduce[0][0].after = last_b1;
  CHECK(mentions(check_sync_schedule(s, flush), "after_flush launches after the rank's last action"));
  SyncSchedule outside = make_sync_schedule(s, true);
  outside.reduce[0][1].after = 1000;
  CHECK(mentions(check_sync_schedule(s, outside), "launched after action 1000 of"));
  CHECK_THROWS_AS(validate_sync_schedule(s, outside), ScheduleError);
  CHECK_NOTHROW(validate_sync_schedule(s, make_sync_schedule(s, true)));
}

TEST_CASE("sync actions: launch spans are the spans of the actions they follow", "[sync_actions]") {
  const Schedule s = make_interleaved_1f1b(2, 4, 2);
  const SimResult sim = simulate(s, SimCosts::unit(s), true);
  for (bool overlap : {false, true}) {
    const SyncSchedule sync = make_sync_schedule(s, overlap);
    const auto times = sync_launch_times(s, sim, sync);
    for (int r = 0; r < 2; ++r) {
      const auto& red = sync.reduce[static_cast<std::size_t>(r)];
      REQUIRE(times[static_cast<std::size_t>(r)].size() == red.size());
      for (std::size_t i = 0; i < red.size(); ++i) {
        const Action& after = s.actions[static_cast<std::size_t>(r)][static_cast<std::size_t>(red[i].after)];
        const auto it = std::find_if(sim.timeline.begin(), sim.timeline.end(),
                                     [&](const TimedAction& t) { return t.rank == r && t.action == after; });
        REQUIRE(it != sim.timeline.end());
        const SyncLaunch& l = times[static_cast<std::size_t>(r)][i];
        CHECK(l.chunk == red[i].chunk);
        CHECK(l.action_start == it->start);
        CHECK(l.action_end == it->end);
      }
      if (!overlap) CHECK(times[static_cast<std::size_t>(r)].front().action_end == sim.last_end[static_cast<std::size_t>(r)]);
    }
  }
}

TEST_CASE("sync actions: overlap launches each chunk's buckets inside its last gradient action", "[sync_actions]") {
  for (const Schedule& s : {make_interleaved_1f1b(2, 4, 2), make_zb_h1(3, 6)}) {
    INFO(s.name);
    const SyncSchedule after = make_sync_schedule(s, true), inside = make_sync_schedule(s, true, true);
    CHECK(!after.inside);
    CHECK(inside.inside);
    CHECK(inside.reduce == after.reduce);  // the same actions: inside them instead of after
    CHECK_NOTHROW(validate_sync_schedule(s, inside));
    CHECK(sync_actions_text(s, inside, 0).find("inside") != std::string::npos);
    // Inside any other action than the chunk's last gradient action: refused.
    SyncSchedule early = inside;
    early.reduce[0][0].after = static_cast<int>(s.actions[0].size()) - 1;
    if (early.reduce[0][0] != inside.reduce[0][0]) {
      const auto bad = check_sync_schedule(s, early);
      CHECK(std::any_of(bad.begin(), bad.end(), [](const std::string& b) { return b.find("inside") != std::string::npos; }));
    }
  }
  // after_flush never launches inside.
  CHECK(!make_sync_schedule(make_zb_h1(2, 4), false, true).inside);
}

TEST_CASE("sync actions: a file's REDUCE_GRAD cells are bucketed inside only where they follow the last gradient action",
          "[sync_actions]") {
  Schedule s = make_zb_h1(2, 4);
  s.file_reduce_grad = make_sync_schedule(s, true).reduce;  // as an overlap run's export writes them
  CHECK(make_sync_schedule(s, true, true).inside);
  CHECK_NOTHROW(validate_sync_schedule(s, make_sync_schedule(s, true, true)));
  CHECK(!make_sync_schedule(s, true, false).inside);
  // A cell after a later action: launched after it, as the file says.
  s.file_reduce_grad = make_sync_schedule(s, false).reduce;  // after the rank's last action
  if (s.file_reduce_grad != make_sync_schedule(make_zb_h1(2, 4), true).reduce) CHECK(!make_sync_schedule(s, true, true).inside);
}
