// The NCCL transport's grouping of boundary transfers (p2p_groups.hpp, issue
// 18): the groups of a pair hold the same tensors on both sides, each can be
// posted by its last call, every generated schedule runs to the end under
// NCCL's in-order rules — and the same transfers issued one at a time (the
// transport before grouping) stall 1F1B, so the checker can fail.
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <catch2/catch.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/p2p_groups.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/schedule_csv.hpp"

using namespace pipebench;

namespace {

std::string texts(const P2pGroup& g) {
  std::string out;
  for (const P2pTransfer& t : g.transfers) out += (out.empty() ? "" : ", ") + to_string(t);
  return out;
}

// The same transfers with every one its own group: what issuing them one at
// a time on one communicator per pair amounts to.
std::vector<RankP2pPlan> one_at_a_time(const Schedule& s) {
  std::vector<RankP2pPlan> plans;
  for (int r = 0; r < s.num_ranks; ++r) {
    RankP2pPlan plan;
    plan.transfers = rank_transfers(s, r);
    std::map<int, int> next_index;  // peer -> groups so far
    for (const P2pTransfer& t : plan.transfers) {
      plan.group_of.push_back(static_cast<int>(plan.groups.size()));
      plan.groups.push_back({t.peer, next_index[t.peer]++, {t}});
      plan.posted_after.push_back(static_cast<int>(plan.groups.size()));
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

using Tensor = std::tuple<int, ActionKind, int, int>;
std::set<Tensor> tensors(const P2pGroup& g, int self) {
  std::set<Tensor> out;
  for (const P2pTransfer& t : g.transfers) out.insert({t.sender(self), t.kind, t.microbatch, t.chunk});
  return out;
}

}  // namespace

TEST_CASE("p2p groups: 1F1B on two ranks pairs each send with the peer's crossing receive", "[p2p]") {
  const auto plans = p2p_groups(make_1f1b(2, 4));
  REQUIRE(plans.size() == 2);
  CHECK(to_string(plans[0].transfers[0]) == "send F0 to 1");
  CHECK(to_string(plans[1].transfers[1]) == "send B0 to 0");
  REQUIRE(plans[0].groups.size() == 5);
  CHECK(texts(plans[0].groups[0]) == "send F0 to 1");
  CHECK(texts(plans[0].groups[1]) == "send F1 to 1, recv B0 from 1");
  CHECK(texts(plans[1].groups[1]) == "send B0 to 0, recv F1 from 0");
  CHECK(texts(plans[0].groups[3]) == "send F3 to 1, recv B2 from 1");
  CHECK(texts(plans[0].groups[4]) == "recv B3 from 1");
  CHECK(texts(plans[1].groups[4]) == "send B3 to 0");
  // The call that posts a group is its last: F1's send waits for B0's receive.
  CHECK(plans[0].posted_after[1] == 1);
  CHECK(plans[0].posted_after[2] == 2);
  CHECK_NOTHROW(check_p2p_progress(plans));
}

TEST_CASE("p2p groups: one at a time, 1F1B stalls and GPipe does not", "[p2p]") {
  CHECK_THROWS_WITH(check_p2p_progress(one_at_a_time(make_1f1b(2, 4))),
                    Catch::Contains("would stall") && Catch::Contains("rank 0 at \"recv B0 from 1\""));
  CHECK_NOTHROW(check_p2p_progress(one_at_a_time(make_gpipe(2, 4))));
  CHECK_NOTHROW(check_p2p_progress(p2p_groups(make_gpipe(2, 4))));
}

TEST_CASE("p2p groups: every generated schedule groups consistently and runs to the end", "[p2p]") {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      std::vector<Schedule> zoo{make_forward_only(p, m), make_gpipe(p, m), make_1f1b(p, m), make_eager_1f1b(p, m),
                                make_zb_h1(p, m), make_zb_v(p, m)};
      if (m % p == 0)
        for (int v : {2, 3}) zoo.push_back(make_interleaved_1f1b(p, m, v));
      for (const Schedule& s : zoo) {
        INFO(s.name << " p=" << p << " m=" << m << " chunks=" << s.chunks_per_rank);
        const auto plans = p2p_groups(s);
        std::map<std::tuple<int, int, int>, std::set<Tensor>> side;  // (self, peer, index) -> tensors
        std::size_t transfers = 0;
        for (int r = 0; r < p; ++r) {
          const RankP2pPlan& plan = plans[static_cast<std::size_t>(r)];
          transfers += plan.transfers.size();
          REQUIRE(plan.group_of.size() == plan.transfers.size());
          for (const P2pGroup& g : plan.groups) {
            side[{r, g.peer, g.index}] = tensors(g, r);
            for (std::size_t n = 0; n + 1 < g.transfers.size(); ++n) CHECK(g.transfers[n].send);
          }
        }
        for (const auto& [k, set] : side) CHECK(side.at({std::get<1>(k), std::get<0>(k), std::get<2>(k)}) == set);
        // Every boundary crossing moves two ways of one tensor: a send and its receive.
        CHECK(transfers % 2 == 0);
        CHECK_NOTHROW(check_p2p_progress(plans));
      }
    }
  }
}

TEST_CASE("p2p groups: tensors one side never moves, and a group that cannot be posted", "[p2p]") {
  // Rank 1 never runs F1: rank 0's send of F1 has no receive.
  Schedule lost = empty_schedule("lost", 2, 2, true);
  lost.actions[0] = {{ActionKind::F, 0, 0}, {ActionKind::F, 1, 0}, {ActionKind::B, 0, 0}};
  lost.actions[1] = {{ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}};
  CHECK_THROWS_WITH(p2p_groups(lost), Catch::Contains("do not move the same tensors: F1 from rank 0 is sent by rank 0, "
                                                      "never received by rank 1"));

  // Rank 1 wants F1 before F0, and rank 0 B0 before it sends F1: each waits
  // for the other (on any transport).
  Schedule crossed = empty_schedule("crossed", 2, 2, true);
  crossed.actions[0] = {{ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::F, 1, 0}, {ActionKind::B, 1, 0}};
  crossed.actions[1] = {{ActionKind::F, 1, 0}, {ActionKind::F, 0, 0}, {ActionKind::B, 0, 0}, {ActionKind::B, 1, 0}};
  CHECK_THROWS_WITH(p2p_groups(crossed), Catch::Contains("ranks 0 and 1 each receive before they send: rank 0 waits "
                                                         "for \"recv B0 from 1\" before sending \"send F1 to 1\""));
}
