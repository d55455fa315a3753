#include "pipebench/schedule/simulate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/large_array.hpp"

namespace pipebench {

namespace {

// End times of every (kind, virtual stage, micro-batch), `Lanes` of them
// side by side (one per set of costs simulated in the same walk, which all
// run an action together).
//
// The unchecked walk (`Shared` false) keeps a table per kind, -1 = not run
// yet; W's only where the schedule has W actions (it reads a W's own B).
// The checked walk reads F(v, mb) only for F(v+1, mb) and B(v, mb) only for
// B(v-1, mb), and B(v, mb) runs only after F(v+1, mb) has read F(v, mb) (it
// waits for B(v+1, mb), which its rank runs after F(v+1, mb)): so F and B
// share one slot (`Shared`), B's end replacing F's. The first lane says
// which it holds: NaN nothing, sign bit set an F (stored negated, exactly:
// -0.0 for an end at 0), clear a B. Half the memory of two tables, and half
// the fresh rows a walk of many ranks touches.
//
// Micro-batch-major: a row holds one micro-batch's V stages. The simulator
// follows dependency chains — a rank's completed F wakes the next stage's
// rank, which reads that F and writes its own, F(v, mb) then F(v+1, mb), and
// B down the stages alike — so consecutive reads and writes are neighbours in
// one row at any p. (Rows along the pipeline's waves, F(v, mb) in row mb + v,
// put every step of such a chain a row, V doubles, further on: 1.1-1.35x
// slower at p = 64 to 1024 in bench_schedule.)
template <int Lanes, bool Shared>
class EndTimes {
 public:
  EndTimes(int stages, int microbatches, bool with_w)
      : stages_(static_cast<std::size_t>(stages)),
        rows_(static_cast<std::size_t>(microbatches)),
        ends_((Shared ? 1 : with_w ? 3 : 2) * rows_ * stages_ * Lanes, Shared ? kNothing : -1.0) {}
  // Whether (k, v, mb) has run; if so its end times, one per lane, into `out`.
  bool get(ActionKind k, int v, int mb, double (&out)[Lanes]) {
    const double* e = at(k, v, mb);
    if constexpr (Shared) {
      if (k == ActionKind::F ? !std::signbit(e[0]) : std::signbit(e[0]) || std::isnan(e[0])) return false;
      for (int l = 0; l < Lanes; ++l) out[l] = k == ActionKind::F ? -e[l] : e[l];
    } else {
      if (e[0] < 0.0) return false;
      for (int l = 0; l < Lanes; ++l) out[l] = e[l];
    }
    return true;
  }
  void set(ActionKind k, int v, int mb, const double (&end)[Lanes]) {
    double* e = at(k, v, mb);
    for (int l = 0; l < Lanes; ++l) e[l] = Shared && k == ActionKind::F ? -end[l] : end[l];
  }
  double* at(ActionKind k, int v, int mb) {
    const std::size_t table = Shared ? 0 : static_cast<std::size_t>(k);
    return &ends_[((table * rows_ + static_cast<std::size_t>(mb)) * stages_ + static_cast<std::size_t>(v)) * Lanes];
  }

 private:
  static constexpr double kNothing = std::numeric_limits<double>::quiet_NaN();  // sign bit clear
  std::size_t stages_, rows_;
  LargeArray<double> ends_;
};

char letter(ActionKind k) { return k == ActionKind::F ? 'F' : k == ActionKind::B ? 'B' : 'W'; }

}  // namespace

SimCosts SimCosts::unit(const Schedule& s) {
  const auto V = static_cast<std::size_t>(s.num_virtual_stages());
  return SimCosts{std::vector<double>(V, 1.0), std::vector<double>(V, 1.0), std::vector<double>(V, 1.0), 0.0, {}, {}, {}};
}

std::vector<std::int64_t> peak_live_activation_bytes(const Schedule& s, const std::vector<std::int64_t>& bytes,
                                                     const std::vector<std::int64_t>& stash) {
  const auto V = static_cast<std::size_t>(s.num_virtual_stages());
  if (bytes.size() != V || (!stash.empty() && stash.size() != V))
    throw ScheduleError(fmt::format("peak_live_activation_bytes: sizes for {} virtual stages, schedule has {}",
                                    bytes.size(), s.num_virtual_stages()));
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(s.num_ranks), 0);
  if (!s.retains_activations) return peaks;
  for (std::size_t r = 0; r < s.actions.size(); ++r) {
    const auto& list = s.actions[r];
    // Micro-batches (per chunk) whose activations are released by W, not B.
    std::vector<char> has_w(static_cast<std::size_t>(s.chunks_per_rank * s.num_microbatches), 0);
    for (const auto& a : list)
      if (a.kind == ActionKind::W) has_w[static_cast<std::size_t>(a.chunk * s.num_microbatches + a.microbatch)] = 1;
    std::int64_t live = 0;
    for (const auto& a : list) {
      const bool released_by_w = has_w[static_cast<std::size_t>(a.chunk * s.num_microbatches + a.microbatch)];
      const auto v = static_cast<std::size_t>(s.virtual_stage(static_cast<int>(r), a.chunk));
      const std::int64_t b = bytes[v], kept = stash.empty() || !released_by_w ? 0 : stash[v];
      if (a.kind == ActionKind::F) live += b;
      else if (a.kind == ActionKind::B) live += released_by_w ? kept : -b;
      else live -= b + kept;
      peaks[r] = std::max(peaks[r], live);
    }
  }
  return peaks;
}

std::vector<std::int64_t> peak_recompute_activation_bytes(const Schedule& s, const std::vector<std::int64_t>& kept,
                                                          const std::vector<std::int64_t>& full) {
  const auto V = static_cast<std::size_t>(s.num_virtual_stages());
  if (kept.size() != V || full.size() != V)
    throw ScheduleError(fmt::format("peak_recompute_activation_bytes: sizes for {} virtual stages, schedule has {}",
                                    kept.size(), V));
  const auto split = [] { return ScheduleError("recomputation with a split backward (W actions) is not supported"); };
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(s.num_ranks), 0);
  if (!s.retains_activations) {
    if (s.split_backward()) throw split();
    return peaks;
  }
  // The W check in the same pass (a separate split_backward() pass cost a
  // third of a large tune search).
  for (std::size_t r = 0; r < s.actions.size(); ++r) {
    std::int64_t live = 0;
    for (const auto& a : s.actions[r]) {
      const auto v = static_cast<std::size_t>(s.virtual_stage(static_cast<int>(r), a.chunk));
      if (a.kind == ActionKind::F) {
        peaks[r] = std::max(peaks[r], live + kept[v] + full[v]);
        live += kept[v];
      } else if (a.kind == ActionKind::B) {
        peaks[r] = std::max(peaks[r], live + full[v]);
        live -= kept[v];
      } else {
        throw split();
      }
    }
  }
  return peaks;
}

std::vector<int> peak_live_activations(const Schedule& s) {
  const auto counts =
      peak_live_activation_bytes(s, std::vector<std::int64_t>(static_cast<std::size_t>(s.num_virtual_stages()), 1));
  return {counts.begin(), counts.end()};
}

namespace {
// Costs for every virtual stage, actions inside the schedule's micro-batches
// and chunks (unless the structure check has seen them), one action list per
// rank; else ScheduleError.
void check_inputs(const Schedule& s, const SimCosts& costs, bool ranges_checked) {
  const int V = s.num_virtual_stages();
  const auto Vs = static_cast<std::size_t>(V);
  if (costs.forward.size() != Vs || costs.backward.size() != Vs || costs.weight.size() != Vs)
    throw ScheduleError(fmt::format("simulate: costs given for {} virtual stages, schedule has {}",
                                    costs.forward.size(), V));
  if (!costs.forward_wait.empty() && (costs.forward_wait.size() != Vs || costs.backward_wait.size() != Vs))
    throw ScheduleError(fmt::format("simulate: waits given for {} virtual stages, schedule has {}", costs.forward_wait.size(), V));
  if (!costs.first_forward_gates.empty() && costs.first_forward_gates.size() != Vs)
    throw ScheduleError(fmt::format("simulate: gates given for {} virtual stages, schedule has {}",
                                    costs.first_forward_gates.size(), V));
  for (std::size_t r = 0; r < s.actions.size() && !ranges_checked; ++r)
    for (const auto& a : s.actions[r])
      if (a.microbatch < 0 || a.microbatch >= s.num_microbatches || a.chunk < 0 || a.chunk >= s.chunks_per_rank)
        throw ScheduleError(fmt::format("simulate: rank {} action {} is outside {} micro-batches x {} chunks",
                                        r, to_string(a), s.num_microbatches, s.chunks_per_rank));
  if (s.actions.size() != static_cast<std::size_t>(s.num_ranks))
    throw ScheduleError(fmt::format("simulate: {} action lists for {} ranks", s.actions.size(), s.num_ranks));
}
// Ready times of `a` on rank r, one per lane, into `ready`; false when a
// dependency has not run yet, and then `why` names it. With `Checked` (the
// structure check passed: every B after its F and every W after its B in the
// same rank's list) a rank's own dependencies have run and ended by its
// free_at, so only the neighbour stage's end is read, written moments before:
// the table's older rows can leave the cache (perf of bench_schedule's 1f1b
// at p = 1024, m = 1024: the checked simulation 2.5x faster than the unchecked).
template <bool Checked, int Lanes>
[[gnu::always_inline]] inline bool ready_times(const Schedule& s, const SimCosts* const (&costs)[Lanes],
                                               EndTimes<Lanes, Checked>& ends, int r, const Action& a,
                                               std::string* why, double (&ready)[Lanes]) {
  const int v = s.virtual_stage(r, a.chunk), V = s.num_virtual_stages();
  for (double& t : ready) t = 0.0;
  // Dependency (k, dv): its ends (plus a transfer where it crosses ranks)
  // raise `ready`; false if it has not run.
  auto need = [&](ActionKind k, int dv, bool remote) __attribute__((always_inline)) -> bool {
    double e[Lanes];
    if (!ends.get(k, dv, a.microbatch, e)) {
      if (why) *why = fmt::format("{} waits for {}{} of stage {} (rank {})", to_string(a), letter(k), a.microbatch, dv, s.rank_of(dv));
      return false;
    }
    for (int l = 0; l < Lanes; ++l) ready[l] = std::max(ready[l], e[l] + (remote ? costs[l]->transfer : 0.0));
    return true;
  };
  switch (a.kind) {
    case ActionKind::F:
      return v == 0 || need(ActionKind::F, v - 1, s.rank_of(v - 1) != r);
    case ActionKind::B:
      if (!Checked && !need(ActionKind::F, v, false)) return false;
      return v == V - 1 || need(ActionKind::B, v + 1, s.rank_of(v + 1) != r);
    case ActionKind::W:
      return Checked || need(ActionKind::B, v, false);
  }
  return false;
}

// The index in rank r's list of each chunk's first forward (r * chunks + c;
// -1: none; first_forward_indices), where some lane gates first forwards; else empty.
template <int Lanes>
std::vector<std::ptrdiff_t> first_forwards(const Schedule& s, const SimCosts* const (&costs)[Lanes]) {
  bool gated = false;
  for (const SimCosts* c : costs) gated = gated || !c->first_forward_gates.empty();
  if (!gated) return {};
  std::vector<std::ptrdiff_t> first;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto rank = first_forward_indices(s, r);
    first.insert(first.end(), rank.begin(), rank.end());
  }
  return first;
}

inline double cost_of(const SimCosts& k, ActionKind kind, std::size_t v) {
  return kind == ActionKind::F ? k.forward[v] : kind == ActionKind::B ? k.backward[v] : k.weight[v];
}

// Ready times of the unit starting at list[i] (schedule.hpp, unit_size): an
// overlapped forward-backward starts when both its inputs are there.
template <bool Checked, int Lanes>
[[gnu::always_inline]] inline bool unit_ready(const Schedule& s, const SimCosts* const (&costs)[Lanes],
                                              EndTimes<Lanes, Checked>& ends, int r, const Action* list,
                                              std::size_t n, std::string* why, double (&ready)[Lanes]) {
  if (!ready_times<Checked, Lanes>(s, costs, ends, r, list[0], why, ready)) return false;
  if (n == 1) return true;
  double second[Lanes];
  if (!ready_times<Checked, Lanes>(s, costs, ends, r, list[1], why, second)) return false;
  for (int l = 0; l < Lanes; ++l) ready[l] = std::max(ready[l], second[l]);
  return true;
}

// One rank's walk through its list in half a cache line (one lane): with
// many ranks a visit touches it, the action and the ends it reads and
// writes, not six per-rank arrays. (A rank's last end is its free_at when
// it stops.)
template <int Lanes>
struct alignas(Lanes == 1 ? 32 : 16) Cursor {
  const Action* actions = nullptr;
  std::uint32_t size = 0;
  std::uint32_t next = 0;  // index of the next action to run (job.hpp bounds a list far below 2^32)
  double free_at[Lanes] = {}, busy[Lanes] = {};
};

// The walk's results from where the ranks stopped: each lane's busy and last
// end per rank, makespan and bubble; when not every action ran, what each
// stuck rank waits for and the first lane's timeline cut to what ran
// (rank-major: rank r's actions were at [first[r], first[r+1])).
template <bool Checked, int Lanes>
void finish(const Schedule& s, const SimCosts* const (&costs)[Lanes], EndTimes<Lanes, Checked>& ends,
            const std::vector<Cursor<Lanes>>& ranks, const std::vector<std::size_t>& first, bool completed,
            bool keep_timeline, std::array<SimResult, Lanes>& res) {
  std::vector<std::string> blocked;
  for (int r = 0; r < s.num_ranks && !completed; ++r) {
    const Cursor<Lanes>& c = ranks[static_cast<std::size_t>(r)];
    if (c.next >= c.size) continue;
    std::string why;
    double ignored[Lanes];
    const std::size_t n = c.actions[c.next].overlaps_next && c.next + 1 < c.size ? 2 : 1;
    unit_ready<Checked, Lanes>(s, costs, ends, r, c.actions + c.next, n, &why, ignored);
    blocked.push_back(fmt::format("rank {}: {}", r, why));
  }
  std::vector<TimedAction>& timeline = res[0].timeline;
  if (!completed && keep_timeline) {
    std::size_t kept = 0;
    for (std::size_t r = 0; r < ranks.size(); ++r)
      for (std::size_t i = 0; i < ranks[r].next; ++i) timeline[kept++] = timeline[first[r] + i];
    timeline.resize(kept);
  }
  for (int l = 0; l < Lanes; ++l) {
    SimResult& lane = res[static_cast<std::size_t>(l)];
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      lane.busy[r] = ranks[r].busy[l];
      lane.last_end[r] = ranks[r].next > 0 ? ranks[r].free_at[l] : 0.0;
    }
    lane.completed = completed;
    lane.blocked = blocked;
    for (double e : lane.last_end) lane.makespan = std::max(lane.makespan, e);
    double sum_busy = 0.0;
    for (double b : lane.busy) sum_busy += b;
    lane.bubble = lane.makespan > 0.0 ? 1.0 - sum_busy / (s.num_ranks * lane.makespan) : 0.0;
  }
}

// The walk: every lane's times in one pass over the actions (a lane's times
// depend only on its costs; when an action runs is the same in every lane).
// The timeline, if kept, is the first lane's.
template <bool Checked, int Lanes>
// long: the walk's state (cursors, end tables, the work list) stays local to
// one function so that the single-action loop keeps it in registers; the
// overlapped pair is its out-of-line lambda, run_pair.
std::array<SimResult, Lanes> simulate_impl(const Schedule& s, const SimCosts* const (&costs)[Lanes],
                                           bool keep_timeline) {
  for (const SimCosts* c : costs) check_inputs(s, *c, Checked);
  const int p = s.num_ranks, m = s.num_microbatches, V = s.num_virtual_stages();
  std::array<SimResult, Lanes> res;
  for (SimResult& lane : res) {
    lane.busy.assign(static_cast<std::size_t>(p), 0.0);
    lane.first_start.assign(static_cast<std::size_t>(p), 0.0);
    lane.last_end.assign(static_cast<std::size_t>(p), 0.0);
    if (!Checked) lane.peak_live_activations = peak_live_activations(s);
  }

  EndTimes<Lanes, Checked> ends(V, m, !Checked && s.split_backward());
  std::vector<Cursor<Lanes>> ranks(static_cast<std::size_t>(p));
  std::vector<char> queued(static_cast<std::size_t>(p), 1);  // in the worklist
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ranks[r].actions = s.actions[r].data();
    ranks[r].size = static_cast<std::uint32_t>(s.actions[r].size());
  }
  // The timeline is rank-major: rank r's actions at [first[r], first[r+1]).
  std::vector<std::size_t> first(static_cast<std::size_t>(p) + 1, 0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) first[r + 1] = first[r] + ranks[r].size;
  const std::vector<std::ptrdiff_t> first_f = first_forwards(s, costs);
  const auto C = static_cast<std::size_t>(s.chunks_per_rank);
  // When action `i` of rank r (virtual stage `v`) ends in lane l, started at `start` for `cost`.
  auto end_of = [&](int l, std::size_t r, std::size_t i, const Action& a, std::size_t v, double start, double cost) {
    const SimCosts& k = *costs[l];
    if (!k.forward_wait.empty()) [[unlikely]] {
      if (a.kind == ActionKind::F) start += k.forward_wait[v];
      if (a.kind == ActionKind::B) start += k.backward_wait[v];
    }
    if (first_f.empty()) [[likely]] return start + cost;
    const auto& gates = costs[l]->first_forward_gates;
    if (gates.empty() || first_f[r * C + static_cast<std::size_t>(a.chunk)] != static_cast<std::ptrdiff_t>(i))
      return start + cost;
    return gated_end(start, cost, gates[v]);
  };
  const std::size_t total = first.back();
  std::vector<TimedAction>& timeline = res[0].timeline;
  if (keep_timeline) timeline.resize(total);
  std::size_t done = 0;

  // A worklist of ranks whose next action may have become ready: each rank
  // runs as far as its dependencies allow, and every action it completes
  // puts back the ranks that may wait for it (its neighbour stages' ranks;
  // W waits on its own rank). Every action runs once and every readiness
  // check follows a completion, so the whole run is linear in the actions.
  // An action's times depend only on its predecessors, never on this order.
  std::vector<int> work;
  work.reserve(static_cast<std::size_t>(p));
  for (int r = p - 1; r >= 0; --r) work.push_back(r);
  // A visit to a rank starts with loading its next action, which with many
  // ranks has left the cache since the rank's last visit: a woken rank's next
  // action is fetched while the current rank runs on (bench_schedule, 5
  // interleaved runs: p = 1024, m = 4096 9% faster; p = 8 and 64, in cache
  // anyway, 2-6% slower).
  auto wake = [&](int r) {
    const Cursor<Lanes>& c = ranks[static_cast<std::size_t>(r)];
    if (!queued[static_cast<std::size_t>(r)]) {
      queued[static_cast<std::size_t>(r)] = 1;
      work.push_back(r);
      if (c.next < c.size) __builtin_prefetch(c.actions + c.next);
    }
  };
  // An overlapped forward-backward (schedule.hpp, unit_size): it starts when
  // both inputs are there, runs F then B, and both outputs leave at its end.
  // Out of line: the single-action walk below stays as tight as without it.
  auto run_pair = [&](Cursor<Lanes>& c, int r) __attribute__((noinline)) {
    const auto R = static_cast<std::size_t>(r);
    const Action* unit = c.actions + c.next;
    double ready[Lanes];
    if (!unit_ready<Checked, Lanes>(s, costs, ends, r, unit, 2, nullptr, ready)) return false;
    for (int l = 0; l < Lanes; ++l) c.free_at[l] = std::max(c.free_at[l], ready[l]);
    for (std::size_t k = 0; k < 2; ++k) {
      const Action& a = unit[k];
      const auto Vi = static_cast<std::size_t>(s.virtual_stage(r, a.chunk));
      for (int l = 0; l < Lanes; ++l) {
        const double start = c.free_at[l], cost = cost_of(*costs[l], a.kind, Vi);
        c.free_at[l] = end_of(l, R, c.next + k, a, Vi, start, cost);
        c.busy[l] += cost;
        if (c.next + k == 0) res[static_cast<std::size_t>(l)].first_start[R] = start;
        if (l == 0 && keep_timeline) timeline[first[R] + c.next + k] = {r, a, start, c.free_at[l]};
      }
    }
    for (std::size_t k = 0; k < 2; ++k) {
      const Action& a = unit[k];
      const int v = s.virtual_stage(r, a.chunk);
      if (!Checked || a.kind != ActionKind::W) ends.set(a.kind, v, a.microbatch, c.free_at);
      if (a.kind == ActionKind::F && v + 1 < V) wake(s.rank_of(v + 1));
      if (a.kind == ActionKind::B && v > 0) wake(s.rank_of(v - 1));
    }
    c.next += 2;
    done += 2;
    return true;
  };
  while (!work.empty()) {
    const int r = work.back();
    const auto R = static_cast<std::size_t>(r);
    work.pop_back();
    Cursor<Lanes>& c = ranks[R];
    queued[R] = 0;
    while (c.next < c.size) {
      const Action& a = c.actions[c.next];
      if (a.overlaps_next && c.next + 1 < c.size) [[unlikely]] {
        if (!run_pair(c, r)) break;
        continue;
      }
      double ready[Lanes];
      if (!ready_times<Checked, Lanes>(s, costs, ends, r, a, nullptr, ready)) break;
      const int v = s.virtual_stage(r, a.chunk);
      const auto Vi = static_cast<std::size_t>(v);
      const bool kept = !Checked || a.kind != ActionKind::W;  // the checked walk never reads a W's end
      // The row this rank most likely writes next: with many ranks each
      // visit writes a row no rank has touched (the pipeline's diagonal),
      // which costs a miss to memory unless fetched a sweep ahead
      // (bench_schedule's whole plan, 1024 x 4096: 639 -> 530 ms; p = 8 the same).
      if (kept && a.microbatch + 1 < m) __builtin_prefetch(ends.at(a.kind, v, a.microbatch + 1), 1);
      double ended[Lanes];
      for (int l = 0; l < Lanes; ++l) {
        const double cost = cost_of(*costs[l], a.kind, Vi);
        const double start = std::max(c.free_at[l], ready[l]);
        const double end = end_of(l, R, c.next, a, Vi, start, cost);
        ended[l] = end;
        c.free_at[l] = end;
        c.busy[l] += cost;
        if (c.next == 0) res[static_cast<std::size_t>(l)].first_start[R] = start;
        if (l == 0 && keep_timeline) timeline[first[R] + c.next] = {r, a, start, end};
      }
      if (kept) ends.set(a.kind, v, a.microbatch, ended);
      ++c.next;
      ++done;
      if (a.kind == ActionKind::F && v + 1 < V) wake(s.rank_of(v + 1));
      if (a.kind == ActionKind::B && v > 0) wake(s.rank_of(v - 1));
    }
  }
  finish<Checked, Lanes>(s, costs, ends, ranks, first, done == total, keep_timeline, res);
  return res;
}

}  // namespace

double gated_end(double start, double cost, const std::vector<Gate>& gates, std::vector<double>* waits) {
  double t = start, done = 0.0;
  if (waits) waits->clear();
  for (const Gate& g : gates) {
    const double reached = t + (g.at - done) * cost;
    t = std::max(reached, g.ready);
    if (waits) waits->push_back(t - reached);
    done = g.at;
  }
  return t + (1.0 - done) * cost;
}

SimResult simulate(const Schedule& s, const SimCosts& costs, bool keep_timeline) {
  const SimCosts* const lanes[1] = {&costs};
  return std::move(simulate_impl<false, 1>(s, lanes, keep_timeline)[0]);
}

SimResult simulate_checked(const Schedule& s, const SimCosts& costs, bool keep_timeline) {
  const SimCosts* const lanes[1] = {&costs};
  return std::move(simulate_impl<true, 1>(s, lanes, keep_timeline)[0]);
}

std::pair<SimResult, SimResult> simulate_checked(const Schedule& s, const SimCosts& first, const SimCosts& second,
                                                 bool keep_first_timeline) {
  const SimCosts* const lanes[2] = {&first, &second};
  auto both = simulate_impl<true, 2>(s, lanes, keep_first_timeline);
  return {std::move(both[0]), std::move(both[1])};
}

}  // namespace pipebench
