#include "pipebench/schedule/p2p_groups.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {

// A tensor's identity, the same on both sides: sender, kind, micro-batch, chunk.
using TensorKey = std::tuple<int, ActionKind, int, int>;

TensorKey key_of(const P2pTransfer& t, int self) { return {t.sender(self), t.kind, t.microbatch, t.chunk}; }

std::string tensor_text(ActionKind kind, int microbatch, int chunk) {
  return to_string(Action{kind, microbatch, chunk});
}

// One tensor crossing a pair: where its sender and its receiver call it.
struct Crossing {
  TensorKey key;
  int at_from = 0, at_to = 0;  // positions in rank_transfers of the sender and of the receiver
};

// The tensors `from` sends to `to`, in the order `to` receives them (its
// receives block, so its order rules; a send can wait for its group), with
// where each side calls its transfer. ScheduleError unless the two sides move
// the same tensors.
std::vector<Crossing> crossings(int from, int to, const std::vector<P2pTransfer>& tf, const std::vector<P2pTransfer>& tt) {
  std::map<TensorKey, int> sent;  // tensor -> the sender's call
  for (int i = 0; i < static_cast<int>(tf.size()); ++i)
    if (const P2pTransfer& t = tf[static_cast<std::size_t>(i)]; t.peer == to && t.send) sent[key_of(t, from)] = i;
  auto mismatch = [&](const TensorKey& k, bool sent_only) {
    return ScheduleError(fmt::format("ranks {} and {} do not move the same tensors: {} from rank {} is {} by rank {}, "
                                     "never {} by rank {}",
                                     std::min(from, to), std::max(from, to),
                                     tensor_text(std::get<1>(k), std::get<2>(k), std::get<3>(k)), from,
                                     sent_only ? "sent" : "expected", sent_only ? from : to,
                                     sent_only ? "received" : "sent", sent_only ? to : from));
  };
  std::vector<Crossing> out;
  for (int i = 0; i < static_cast<int>(tt.size()); ++i) {
    const P2pTransfer& t = tt[static_cast<std::size_t>(i)];
    if (t.peer != from || t.send) continue;
    const auto it = sent.find(key_of(t, to));
    if (it == sent.end()) throw mismatch(key_of(t, to), false);
    out.push_back({it->first, it->second, i});
    sent.erase(it);
  }
  if (!sent.empty()) throw mismatch(sent.begin()->first, true);
  return out;
}

// One side's group: the positions of its transfers.
struct SideGroup {
  int peer = 0, index = 0;
  std::vector<int> positions;
};

// Cuts pair (a, b)'s crossings into groups of at most one tensor each way,
// in one order for both sides: x, the next tensor a -> b, and y, the next
// b -> a, go together when each side sends its own before receiving the
// other's (1F1B's crossing), else the one both sides reach first goes alone.
// Both sides receiving first is a deadlock on any transport.
void cut_pair(int a, int b, const std::vector<P2pTransfer>& ta, const std::vector<P2pTransfer>& tb,
              std::vector<SideGroup>& ga, std::vector<SideGroup>& gb) {
  std::vector<Crossing> xs = crossings(a, b, ta, tb), ys = crossings(b, a, tb, ta);
  for (Crossing& y : ys) std::swap(y.at_from, y.at_to);  // both now (at_a, at_b)
  std::size_t i = 0, j = 0;
  for (int k = 0; i < xs.size() || j < ys.size(); ++k) {
    std::vector<const Crossing*> group;
    if (j == ys.size()) group = {&xs[i++]};
    else if (i == xs.size()) group = {&ys[j++]};
    else {
      const Crossing &x = xs[i], &y = ys[j];
      const bool a_x_first = x.at_from < y.at_from, b_x_first = x.at_to < y.at_to;
      if (a_x_first && !b_x_first) group = {&xs[i++], &ys[j++]};
      else if (a_x_first == b_x_first) group = {a_x_first ? &xs[i++] : &ys[j++]};
      else
        throw ScheduleError(fmt::format("ranks {} and {} each receive before they send: rank {} waits for \"{}\" "
                                        "before sending \"{}\", and rank {} the other way round",
                                        a, b, a, to_string(ta[static_cast<std::size_t>(y.at_from)]),
                                        to_string(ta[static_cast<std::size_t>(x.at_from)]), b));
    }
    SideGroup side_a{b, k, {}}, side_b{a, k, {}};
    for (const Crossing* c : group) {
      side_a.positions.push_back(c->at_from);  // (at_a, at_b), see above
      side_b.positions.push_back(c->at_to);
    }
    for (SideGroup* g : {&side_a, &side_b}) std::sort(g->positions.begin(), g->positions.end());
    ga.push_back(std::move(side_a));
    gb.push_back(std::move(side_b));
  }
}

// When each group is posted: at the call of its last transfer, or later if
// the pair's previous group is posted later (groups of a pair go out in
// order). A group's receive must be its posting call: the next action needs
// the tensor, so nothing later may hold the group back.
RankP2pPlan assemble(int self, std::vector<P2pTransfer> transfers, std::vector<SideGroup> side_groups) {
  std::vector<int> post_at(side_groups.size());
  std::map<int, int> last_post;  // peer -> posting call of its previous group
  for (std::size_t g = 0; g < side_groups.size(); ++g) {  // in pair order (index) within each peer
    const SideGroup& sg = side_groups[g];
    const int own = sg.positions.back();
    const auto prev = last_post.find(sg.peer);
    post_at[g] = prev == last_post.end() ? own : std::max(own, prev->second);
    last_post[sg.peer] = post_at[g];
    for (int pos : sg.positions)
      if (!transfers[static_cast<std::size_t>(pos)].send && pos != post_at[g])
        throw ScheduleError(fmt::format("rank {}: the transfers with rank {} cannot be grouped for NCCL: \"{}\" would wait "
                                        "for a group posted later",
                                        self, sg.peer, to_string(transfers[static_cast<std::size_t>(pos)])));
  }
  std::vector<std::size_t> order(side_groups.size());
  for (std::size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return post_at[x] < post_at[y]; });

  RankP2pPlan plan;
  plan.group_of.assign(transfers.size(), -1);
  plan.posted_after.assign(transfers.size(), 0);
  for (std::size_t n = 0; n < order.size(); ++n) {
    const SideGroup& sg = side_groups[order[n]];
    P2pGroup group{sg.peer, sg.index, {}};
    for (int pos : sg.positions) {
      group.transfers.push_back(transfers[static_cast<std::size_t>(pos)]);
      plan.group_of[static_cast<std::size_t>(pos)] = static_cast<int>(n);
    }
    plan.groups.push_back(std::move(group));
    plan.posted_after[static_cast<std::size_t>(post_at[order[n]])] = static_cast<int>(n) + 1;
  }
  for (std::size_t t = 1; t < transfers.size(); ++t)
    plan.posted_after[t] = std::max(plan.posted_after[t], plan.posted_after[t - 1]);
  plan.transfers = std::move(transfers);
  return plan;
}

}  // namespace

std::string to_string(const P2pTransfer& t) {
  return fmt::format("{} {} {} {}", t.send ? "send" : "recv", tensor_text(t.kind, t.microbatch, t.chunk),
                     t.send ? "to" : "from", t.peer);
}

std::vector<P2pTransfer> rank_transfers(const Schedule& s, int rank) {
  std::vector<P2pTransfer> out;
  const int V = s.num_virtual_stages();
  auto remote = [&](int v) { return s.rank_of(v) != rank; };
  const auto& list = s.actions[static_cast<std::size_t>(rank)];
  // Unit by unit (schedule.hpp, unit_size), as the executor calls them: the
  // receives of the unit's actions, then their sends.
  for (std::size_t i = 0; i < list.size();) {
    const std::size_t end = i + unit_size(list, i);
    for (std::size_t k = i; k < end; ++k) {
      const Action& a = list[k];
      const int v = s.virtual_stage(rank, a.chunk);
      if (a.kind == ActionKind::F && v > 0 && remote(v - 1))
        out.push_back({false, s.rank_of(v - 1), ActionKind::F, a.microbatch, s.chunk_of(v - 1)});
      if (a.kind == ActionKind::B && v < V - 1 && remote(v + 1))
        out.push_back({false, s.rank_of(v + 1), ActionKind::B, a.microbatch, s.chunk_of(v + 1)});
    }
    for (; i < end; ++i) {
      const Action& a = list[i];
      const int v = s.virtual_stage(rank, a.chunk);
      if (a.kind == ActionKind::F && v < V - 1 && remote(v + 1))
        out.push_back({true, s.rank_of(v + 1), ActionKind::F, a.microbatch, a.chunk});
      if (a.kind == ActionKind::B && v > 0 && remote(v - 1))
        out.push_back({true, s.rank_of(v - 1), ActionKind::B, a.microbatch, a.chunk});
    }
  }
  return out;
}

std::vector<RankP2pPlan> p2p_groups(const Schedule& s) {
  const int p = s.num_ranks;
  std::vector<std::vector<P2pTransfer>> transfers;
  for (int r = 0; r < p; ++r) transfers.push_back(rank_transfers(s, r));
  std::vector<std::vector<SideGroup>> groups(static_cast<std::size_t>(p));
  for (int a = 0; a < p; ++a)
    for (int b = a + 1; b < p; ++b)
      cut_pair(a, b, transfers[static_cast<std::size_t>(a)], transfers[static_cast<std::size_t>(b)],
               groups[static_cast<std::size_t>(a)], groups[static_cast<std::size_t>(b)]);
  std::vector<RankP2pPlan> plans;
  for (int r = 0; r < p; ++r)
    plans.push_back(assemble(r, std::move(transfers[static_cast<std::size_t>(r)]), std::move(groups[static_cast<std::size_t>(r)])));
  return plans;
}

void check_p2p_progress(const std::vector<RankP2pPlan>& plans) {
  const int p = static_cast<int>(plans.size());
  // NCCL runs a pair's k-th groups against each other: they run once both
  // sides posted them, after the pair's earlier groups, and only if they move
  // the same tensors (two sends, say, would both wait for ever).
  struct PairState {
    std::vector<std::set<TensorKey>> posted[2];
    std::size_t ran = 0;
  };
  std::map<std::pair<int, int>, PairState> pairs;
  std::set<std::tuple<int, int, ActionKind, int, int>> headers;  // sender, receiver, kind, mb, chunk
  std::vector<std::size_t> pc(static_cast<std::size_t>(p), 0);
  std::vector<int> posted(static_cast<std::size_t>(p), 0);  // groups each rank has posted

  auto pair_of = [&](int self, int peer) -> PairState& { return pairs[{std::min(self, peer), std::max(self, peer)}]; };
  auto post_until = [&](int self, int upto) {
    const RankP2pPlan& plan = plans[static_cast<std::size_t>(self)];
    for (int& n = posted[static_cast<std::size_t>(self)]; n < upto; ++n) {
      const P2pGroup& g = plan.groups[static_cast<std::size_t>(n)];
      PairState& ps = pair_of(self, g.peer);
      auto& mine = ps.posted[self < g.peer ? 0 : 1];
      if (static_cast<int>(mine.size()) != g.index)
        throw ScheduleError(fmt::format("rank {}: group {} with rank {} posted out of order", self, g.index, g.peer));
      std::set<TensorKey> keys;
      for (const P2pTransfer& t : g.transfers) keys.insert(key_of(t, self));
      mine.push_back(std::move(keys));
      while (ps.ran < std::min(ps.posted[0].size(), ps.posted[1].size()) && ps.posted[0][ps.ran] == ps.posted[1][ps.ran])
        ++ps.ran;
    }
  };

  // Each rank makes its calls in order: a send posts its header; a receive
  // waits for the sender's header; a call posts the groups its plan says;
  // a receive then waits for its group to run.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const RankP2pPlan& plan = plans[static_cast<std::size_t>(r)];
      std::size_t& at = pc[static_cast<std::size_t>(r)];
      while (at < plan.transfers.size()) {
        const P2pTransfer& t = plan.transfers[at];
        if (t.send) headers.insert({r, t.peer, t.kind, t.microbatch, t.chunk});
        else if (!headers.count({t.peer, r, t.kind, t.microbatch, t.chunk})) break;
        post_until(r, plan.posted_after[at]);
        const P2pGroup& g = plan.groups[static_cast<std::size_t>(plan.group_of[at])];
        if (!t.send && pair_of(r, t.peer).ran <= static_cast<std::size_t>(g.index)) break;
        ++at;
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    const RankP2pPlan& plan = plans[static_cast<std::size_t>(r)];
    const std::size_t at = pc[static_cast<std::size_t>(r)];
    if (at == plan.transfers.size()) continue;
    const P2pGroup& g = plan.groups[static_cast<std::size_t>(plan.group_of[at])];
    stuck += fmt::format("{}rank {} at \"{}\" (group {} with rank {})", stuck.empty() ? "" : "; ", r,
                         to_string(plan.transfers[at]), g.index, g.peer);
  }
  if (!stuck.empty()) throw ScheduleError("the grouped NCCL transfers of this schedule would stall: " + stuck);
}

}  // namespace pipebench
