#include "pipebench/schedule/send_slots.hpp"

#include <algorithm>
#include <functional>
#include <utility>

namespace pipebench {

namespace {

constexpr int kNever = -1;  // released only by the end of the step

// Where every rank's actions are, for the cross-rank lookups of the rule.
class SlotPlanner {
 public:
  explicit SlotPlanner(const Schedule& s)
      : s_(s), p_(s.num_ranks), m_(s.num_microbatches), C_(s.chunks_per_rank), V_(s.num_virtual_stages()) {
    const auto P = static_cast<std::size_t>(p_);
    f_at_.assign(P, std::vector<int>(static_cast<std::size_t>(C_) * static_cast<std::size_t>(m_), -1));
    b_at_ = f_at_;
    unit_start_.resize(P);
    sends_to_.resize(P);
    for (int r = 0; r < p_; ++r) {
      const auto& list = s.actions[static_cast<std::size_t>(r)];
      auto& starts = unit_start_[static_cast<std::size_t>(r)];
      starts.resize(list.size());
      for (std::size_t i = 0; i < list.size();) {
        const std::size_t n = unit_size(list, i);
        for (std::size_t k = 0; k < n; ++k) starts[i + k] = static_cast<int>(i);
        i += n;
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.kind == ActionKind::W) continue;
        (a.kind == ActionKind::F ? f_at_ : b_at_)[static_cast<std::size_t>(r)][key(a.microbatch, a.chunk)] =
            static_cast<int>(i);
      }
    }
    // Each rank's sends to another rank in issue order (action order: a
    // unit's sends follow all its receives), with the action receiving each.
    for (int q = 0; q < p_; ++q) {
      const auto& list = s.actions[static_cast<std::size_t>(q)];
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const int to_v = target(q, a);
        if (to_v < 0) continue;
        const int dest = s.rank_of(to_v);
        if (dest == q) continue;
        const int at = position(dest, a.kind, a.microbatch, s.chunk_of(to_v));
        if (at >= 0) sends_to(q, dest).sends.emplace_back(static_cast<int>(i), at);
      }
      // For each action index, the first of those sends issued there or later.
      for (auto& [dest, to] : sends_to_[static_cast<std::size_t>(q)]) {
        to.from.assign(list.size() + 1, static_cast<int>(to.sends.size()));
        std::size_t k = to.sends.size();
        for (std::size_t i = list.size(); i-- > 0;) {
          if (k > 0 && to.sends[k - 1].first == static_cast<int>(i)) --k;
          to.from[i] = static_cast<int>(k);
        }
      }
    }
  }

  RankSendSlots plan(int r, bool detail) const {
    RankSendSlots out;
    const auto C = static_cast<std::size_t>(C_), M = static_cast<std::size_t>(m_);
    out.f_pool.assign(C, 0);
    out.b_pool.assign(C, 0);
    const auto& list = s_.actions[static_cast<std::size_t>(r)];
    if (detail) {
      out.f_slot.assign(C, std::vector<std::int32_t>(M, -1));
      out.b_slot = out.f_slot;
      out.releases.resize(list.size());
    }
    // Slots waiting for their release unit, chained per unit start (flat
    // arrays: no allocation per action), and each pool's free slots as a
    // min-heap (the lowest is taken).
    struct Pending {
      int pool, slot, next;
    };
    std::vector<Pending> pending;
    std::vector<int> first_pending(list.size(), -1);  // [unit start] -> index in pending
    std::vector<std::vector<int>> free_slots(2 * C);  // pool = 2 chunk + (B ? 1 : 0)
    std::vector<int> used(2 * C, 0);
    for (std::size_t i = 0; i < list.size();) {
      const std::size_t n = unit_size(list, i);
      for (int e = first_pending[i]; e >= 0; e = pending[static_cast<std::size_t>(e)].next) {
        auto& pool_free = free_slots[static_cast<std::size_t>(pending[static_cast<std::size_t>(e)].pool)];
        pool_free.push_back(pending[static_cast<std::size_t>(e)].slot);
        std::push_heap(pool_free.begin(), pool_free.end(), std::greater<>{});
      }
      for (std::size_t k = 0; k < n; ++k) {
        const Action& a = list[i + k];
        const int to_v = target(r, a);
        if (to_v < 0) continue;
        const int pool = 2 * a.chunk + (a.kind == ActionKind::B ? 1 : 0);
        auto& pool_free = free_slots[static_cast<std::size_t>(pool)];
        int slot = 0;
        if (pool_free.empty()) {
          slot = used[static_cast<std::size_t>(pool)]++;
        } else {
          std::pop_heap(pool_free.begin(), pool_free.end(), std::greater<>{});
          slot = pool_free.back();
          pool_free.pop_back();
        }
        const int dest = s_.rank_of(to_v);
        const int at = release_unit(r, a, to_v, static_cast<int>(i));
        if (at != kNever) {
          pending.push_back(Pending{pool, slot, first_pending[static_cast<std::size_t>(at)]});
          first_pending[static_cast<std::size_t>(at)] = static_cast<int>(pending.size()) - 1;
          if (detail)
            out.releases[static_cast<std::size_t>(at)].push_back(
                SendRelease{a.kind, a.microbatch, a.chunk, dest == r ? -1 : dest});
        }
        if (detail)
          (a.kind == ActionKind::F ? out.f_slot : out.b_slot)[static_cast<std::size_t>(a.chunk)]
                                                             [static_cast<std::size_t>(a.microbatch)] = slot;
      }
      i += n;
    }
    for (std::size_t c = 0; c < C; ++c) {
      out.f_pool[c] = used[2 * c];
      out.b_pool[c] = used[2 * c + 1];
    }
    return out;
  }

 private:
  std::size_t key(int mb, int chunk) const {
    return static_cast<std::size_t>(chunk) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb);
  }

  // The virtual stage action `a` of rank r sends to, or -1.
  int target(int r, const Action& a) const {
    const int v = s_.virtual_stage(r, a.chunk);
    if (a.kind == ActionKind::F) return v + 1 < V_ ? v + 1 : -1;
    if (a.kind == ActionKind::B) return v > 0 ? v - 1 : -1;
    return -1;
  }

  int position(int r, ActionKind kind, int mb, int chunk) const {
    if (mb < 0 || mb >= m_ || chunk < 0 || chunk >= C_) return -1;
    return (kind == ActionKind::F ? f_at_ : b_at_)[static_cast<std::size_t>(r)][key(mb, chunk)];
  }

  int unit_of(int r, int index) const { return unit_start_[static_cast<std::size_t>(r)][static_cast<std::size_t>(index)]; }

  // Rank q's sends to one other rank.
  struct SendsTo {
    std::vector<std::pair<int, int>> sends;  // (action index on q, receiving action index on dest), in issue order
    std::vector<int> from;                   // [action index i on q] -> the first of `sends` issued at i or later
  };
  SendsTo& sends_to(int q, int dest) {
    for (auto& [d, to] : sends_to_[static_cast<std::size_t>(q)])
      if (d == dest) return to;
    return sends_to_[static_cast<std::size_t>(q)].emplace_back(dest, SendsTo{}).second;
  }
  const SendsTo* sends_to(int q, int dest) const {
    for (const auto& [d, to] : sends_to_[static_cast<std::size_t>(q)])
      if (d == dest) return &to;
    return nullptr;
  }

  // The unit of rank r (its start index) from which the buffer of the send
  // made by action `a` (in the unit starting at `acquired`) is free, or
  // kNever (send_slots.hpp: the rule).
  int release_unit(int r, const Action& a, int to_v, int acquired) const {
    const int dest = s_.rank_of(to_v), to_chunk = s_.chunk_of(to_v);
    int at = -1;
    if (dest == r) {
      at = position(r, a.kind, a.microbatch, to_chunk);
    } else if (a.kind == ActionKind::F) {
      if (s_.retains_activations) at = position(r, ActionKind::B, a.microbatch, a.chunk);
    } else {
      // q's B(v-1, mb) received the gradient; the first tensor q sends to r
      // from that unit on proves it arrived.
      const int got = position(dest, ActionKind::B, a.microbatch, to_chunk);
      const SendsTo* to = got < 0 ? nullptr : sends_to(dest, r);
      if (to) {
        const auto k = static_cast<std::size_t>(to->from[static_cast<std::size_t>(unit_of(dest, got))]);
        if (k < to->sends.size()) at = to->sends[k].second;
      }
    }
    if (at < 0) return kNever;
    at = unit_of(r, at);
    return at > acquired ? at : kNever;
  }

  const Schedule& s_;
  const int p_, m_, C_, V_;
  std::vector<std::vector<int>> f_at_, b_at_;  // [rank][chunk * m + mb] -> action index
  std::vector<std::vector<int>> unit_start_;   // [rank][action index] -> its unit's first index
  std::vector<std::vector<std::pair<int, SendsTo>>> sends_to_;  // [rank q] -> (dest, its sends there)
};

}  // namespace

std::vector<RankSendSlots> send_slot_pools(const Schedule& schedule) {
  const SlotPlanner planner(schedule);
  std::vector<RankSendSlots> out;
  out.reserve(static_cast<std::size_t>(schedule.num_ranks));
  for (int r = 0; r < schedule.num_ranks; ++r) out.push_back(planner.plan(r, false));
  return out;
}

RankSendSlots send_slots(const Schedule& schedule, int rank) { return SlotPlanner(schedule).plan(rank, true); }

}  // namespace pipebench
