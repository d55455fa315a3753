// Send buffers and their reuse (schedule/send_slots.hpp): the pools of 1F1B
// no longer grow with m, GPipe and inference keep one per micro-batch, and —
// on every built-in schedule over a grid, in random orders of execution — a
// send's buffer is only freed once its receiver has the tensor, so the wait
// for it never waits on a peer.
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/send_slots.hpp"

using namespace pipebench;

TEST_CASE("send slots: 1F1B holds p - r activation and p - r + 1 gradient send buffers, whatever m", "[send_slots]") {
  for (int m : {6, 64, 1000}) {
    const Schedule s = make_1f1b(4, m);
    const auto pools = send_slot_pools(s);
    REQUIRE(pools.size() == 4);
    for (int r = 0; r < 4; ++r) {
      INFO("m " << m << ", rank " << r);
      const auto& pool = pools[static_cast<std::size_t>(r)];
      CHECK(pool.f_pool[0] == (r < 3 ? 4 - r : 0));
      CHECK(pool.b_pool[0] == (r > 0 ? 4 - r + 1 : 0));
    }
  }
}

TEST_CASE("send slots: GPipe and inference keep a send buffer per micro-batch", "[send_slots]") {
  // GPipe: every activation is sent before the first gradient comes back.
  const auto gpipe = send_slot_pools(make_gpipe(3, 5));
  CHECK(gpipe[0].f_pool[0] == 5);
  CHECK(gpipe[1].f_pool[0] == 5);
  // Inference: nothing comes back within the step.
  const auto serve = send_slot_pools(make_forward_only(3, 5));
  CHECK(serve[0].f_pool[0] == 5);
  CHECK(serve[1].b_pool[0] == 0);
  CHECK(serve[2].f_pool[0] == 0);
}

TEST_CASE("send slots: the detail of one rank (slots and releases) matches the pools", "[send_slots]") {
  const Schedule s = make_1f1b(4, 8);
  const RankSendSlots one = send_slots(s, 1);
  CHECK(one.f_pool == send_slot_pools(s)[1].f_pool);
  CHECK(one.b_pool == send_slot_pools(s)[1].b_pool);
  // Rank 1: F0 F1 F2 B0 F3 B1 ...: F0's buffer is free again at B0 (rank 2's
  // gradient of micro-batch 0 proves it has F0), and F3 takes it.
  CHECK(one.slot(ActionKind::F, 0, 0) == 0);
  CHECK(one.slot(ActionKind::F, 3, 0) == 0);
  const auto& at_b0 = one.releases[3];
  REQUIRE(at_b0.size() == 1);
  CHECK(at_b0[0].kind == ActionKind::F);
  CHECK(at_b0[0].microbatch == 0);
  CHECK(at_b0[0].peer == 2);
}

namespace {

// Every action of the schedule once, unit by unit, in a random order that
// respects the executor's dependencies (schedule.hpp). At each unit, after
// its receives, every send it releases must already have been received, and
// no send may take a slot whose tensor has not been released.
// Returns "" or what went wrong.
std::string random_execution(const Schedule& s, std::mt19937& rng) {
  const int p = s.num_ranks, m = s.num_microbatches, V = s.num_virtual_stages();
  std::vector<RankSendSlots> slots;
  for (int r = 0; r < p; ++r) slots.push_back(send_slots(s, r));
  const auto at = [&](int v, int mb) { return static_cast<std::size_t>(v * m + mb); };
  std::vector<char> done_f(static_cast<std::size_t>(V * m), 0), done_b(done_f.size(), 0);
  // received[kind][sender v * m + mb]: the tensor the sender's action made has arrived.
  std::vector<char> got_f(done_f.size(), 0), got_b(done_f.size(), 0);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  // The slots holding a tensor not yet released: (rank, kind, chunk, slot).
  std::set<std::tuple<int, int, int, int>> occupied;
  const auto ready = [&](const Action& a, int r) {
    const int v = s.virtual_stage(r, a.chunk);
    switch (a.kind) {
      case ActionKind::F: return v == 0 || done_f[at(v - 1, a.microbatch)] != 0;
      case ActionKind::B: return done_f[at(v, a.microbatch)] && (v == V - 1 || done_b[at(v + 1, a.microbatch)]);
      case ActionKind::W: return done_b[at(v, a.microbatch)] != 0;
    }
    return false;
  };
  for (;;) {
    std::vector<int> can;
    bool left = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = s.actions[static_cast<std::size_t>(r)];
      const std::size_t k = next[static_cast<std::size_t>(r)];
      if (k >= list.size()) continue;
      left = true;
      bool go = true;
      for (std::size_t i = k; i < k + unit_size(list, k); ++i) go = go && ready(list[i], r);
      if (go) can.push_back(r);
    }
    if (!left) return "";
    if (can.empty()) return "the schedule deadlocks";
    const int r = can[std::uniform_int_distribution<std::size_t>(0, can.size() - 1)(rng)];
    const auto& list = s.actions[static_cast<std::size_t>(r)];
    const std::size_t k = next[static_cast<std::size_t>(r)], n = unit_size(list, k);
    for (std::size_t i = k; i < k + n; ++i) {  // the unit's receives
      const Action& a = list[i];
      const int v = s.virtual_stage(r, a.chunk);
      if (a.kind == ActionKind::F && v > 0) got_f[at(v - 1, a.microbatch)] = 1;
      if (a.kind == ActionKind::B && v < V - 1) got_b[at(v + 1, a.microbatch)] = 1;
    }
    for (const SendRelease& rel : slots[static_cast<std::size_t>(r)].releases[k]) {
      const int v = s.virtual_stage(r, rel.chunk);
      const bool arrived = (rel.kind == ActionKind::F ? got_f : got_b)[at(v, rel.microbatch)] != 0;
      if (!arrived)
        return "rank " + std::to_string(r) + " frees the buffer of " + to_string(Action(rel.kind, rel.microbatch, rel.chunk)) +
               " at " + to_string(list[k]) + " before it arrived";
      occupied.erase({r, static_cast<int>(rel.kind), rel.chunk, slots[static_cast<std::size_t>(r)].slot(rel.kind, rel.microbatch, rel.chunk)});
    }
    for (std::size_t i = k; i < k + n; ++i) {
      const Action& a = list[i];
      const int v = s.virtual_stage(r, a.chunk);
      if (a.kind == ActionKind::F) done_f[at(v, a.microbatch)] = 1;
      if (a.kind == ActionKind::B) done_b[at(v, a.microbatch)] = 1;
      // Every send has a slot inside its pool.
      const int to = a.kind == ActionKind::F ? v + 1 : a.kind == ActionKind::B ? v - 1 : -1;
      if (to < 0 || to >= V) continue;
      const RankSendSlots& mine = slots[static_cast<std::size_t>(r)];
      const int slot = mine.slot(a.kind, a.microbatch, a.chunk);
      const int pool = (a.kind == ActionKind::F ? mine.f_pool : mine.b_pool)[static_cast<std::size_t>(a.chunk)];
      if (slot < 0 || slot >= pool) return "rank " + std::to_string(r) + ": " + to_string(a) + " has no slot in its pool";
      if (!occupied.insert({r, static_cast<int>(a.kind), a.chunk, slot}).second)
        return "rank " + std::to_string(r) + ": " + to_string(a) + " sends from slot " + std::to_string(slot) +
               ", which still holds an unreleased tensor";
    }
    next[static_cast<std::size_t>(r)] = k + n;
  }
}

}  // namespace

TEST_CASE("send slots: on every schedule a buffer is freed only after its tensor arrived, in any order", "[send_slots]") {
  std::mt19937 rng(2026);
  int schedules = 0;
  for (ScheduleKind kind : kBuiltinSchedules)
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 10; ++m)
        for (int v = 1; v <= 3; ++v) {
          Schedule s;
          try {
            s = make_schedule(kind, RunMode::train, p, m, v);
          } catch (const Error&) {
            continue;  // not a valid (p, m, v) for this schedule
          }
          ++schedules;
          for (int trial = 0; trial < 4; ++trial) {
            INFO(s.name << " p " << p << " m " << m << " v " << v << " trial " << trial);
            REQUIRE(random_execution(s, rng) == "");
          }
        }
  for (int p = 1; p <= 4; ++p) REQUIRE(random_execution(make_forward_only(p, 5), rng) == "");
  CHECK(schedules > 300);
}
