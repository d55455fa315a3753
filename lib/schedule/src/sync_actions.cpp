#include "pipebench/schedule/sync_actions.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {

// A chunk's last gradient action: W with a split backward, else B.
ActionKind last_gradient_kind(const Schedule& s) { return s.split_backward() ? ActionKind::W : ActionKind::B; }

// Per chunk, the index of its last `last_kind` action on `rank` (-1: none).
// The kind is the caller's, found once: split_backward() per rank made a
// tune search quadratic in the ranks (a third of `tune --ranks 4096`).
std::vector<int> last_gradient_actions(const Schedule& s, int rank, ActionKind last_kind) {
  std::vector<int> last(static_cast<std::size_t>(s.chunks_per_rank), -1);
  const auto& actions = s.actions[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const auto c = static_cast<std::size_t>(actions[i].chunk);
    if (actions[i].kind == last_kind && c < last.size()) last[c] = static_cast<int>(i);
  }
  return last;
}

}  // namespace

SyncSchedule make_sync_schedule(const Schedule& s, bool overlap, bool inside) {
  SyncSchedule sync;
  sync.overlap = overlap;
  const ActionKind last_kind = last_gradient_kind(s);
  if (!s.file_reduce_grad.empty()) {
    sync.reduce = s.file_reduce_grad;  // the file's REDUCE_GRAD cells (validate_sync_schedule judges them)
    // Bucketed inside the actions the cells follow when every cell follows
    // its chunk's last gradient action (as `plan --export-schedule
    // csv-comms` writes an overlap run's); else after them, as the file says.
    bool at_last = true;
    for (int r = 0; r < s.num_ranks && r < static_cast<int>(sync.reduce.size()); ++r) {
      const std::vector<int> last = last_gradient_actions(s, r, last_kind);
      for (const ReduceGrad& g : sync.reduce[static_cast<std::size_t>(r)])
        at_last = at_last && g.chunk >= 0 && g.chunk < s.chunks_per_rank && g.after == last[static_cast<std::size_t>(g.chunk)];
    }
    sync.inside = overlap && inside && at_last;
    return sync;
  }
  sync.inside = overlap && inside;
  sync.reduce.resize(static_cast<std::size_t>(s.num_ranks));
  for (int r = 0; r < s.num_ranks; ++r) {
    const std::vector<int> last = last_gradient_actions(s, r, last_kind);
    const int end = static_cast<int>(s.actions[static_cast<std::size_t>(r)].size()) - 1;
    auto& out = sync.reduce[static_cast<std::size_t>(r)];
    for (int c = 0; c < s.chunks_per_rank; ++c) out.push_back({c, overlap ? last[static_cast<std::size_t>(c)] : end});
    // Launch order: the order the rank finishes its chunks (stable: chunk order on ties).
    std::stable_sort(out.begin(), out.end(), [](const ReduceGrad& a, const ReduceGrad& b) { return a.after < b.after; });
  }
  return sync;
}

std::vector<std::string> check_sync_schedule(const Schedule& s, const SyncSchedule& sync) {
  std::vector<std::string> bad;
  if (sync.reduce.size() != static_cast<std::size_t>(s.num_ranks))
    return {fmt::format("{} reduce-grad lists for {} ranks", sync.reduce.size(), s.num_ranks)};
  const ActionKind last_kind = last_gradient_kind(s);
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& actions = s.actions[static_cast<std::size_t>(r)];
    const int n = static_cast<int>(actions.size());
    const std::vector<int> last = last_gradient_actions(s, r, last_kind);
    std::vector<int> seen(static_cast<std::size_t>(s.chunks_per_rank), 0);
    int prev = -1;
    for (const ReduceGrad& g : sync.reduce[static_cast<std::size_t>(r)]) {
      const std::string what = fmt::format("rank {}: R{}", r, g.chunk);
      if (g.chunk < 0 || g.chunk >= s.chunks_per_rank) {
        bad.push_back(fmt::format("{}: no such chunk (the rank holds {})", what, s.chunks_per_rank));
        continue;
      }
      ++seen[static_cast<std::size_t>(g.chunk)];
      if (g.after < 0 || g.after >= n) {
        bad.push_back(fmt::format("{}: launched after action {} of {}", what, g.after, n));
        continue;
      }
      const int final_at = last[static_cast<std::size_t>(g.chunk)];
      if (g.after < final_at)
        bad.push_back(fmt::format("{}: launched after {}, before the chunk's last gradient action {}", what,
                                  to_string(actions[static_cast<std::size_t>(g.after)]),
                                  to_string(actions[static_cast<std::size_t>(final_at)])));
      if (sync.inside && g.after != final_at)
        bad.push_back(fmt::format("{}: its buckets are launched inside {}, not inside the chunk's last gradient action {}",
                                  what, to_string(actions[static_cast<std::size_t>(g.after)]),
                                  to_string(actions[static_cast<std::size_t>(final_at)])));
      if (!sync.overlap && g.after != n - 1)
        bad.push_back(fmt::format("{}: after_flush launches after the rank's last action, not after {}", what,
                                  to_string(actions[static_cast<std::size_t>(g.after)])));
      if (g.after < prev) bad.push_back(fmt::format("{}: out of launch order", what));
      prev = std::max(prev, g.after);
    }
    for (int c = 0; c < s.chunks_per_rank; ++c)
      if (seen[static_cast<std::size_t>(c)] != 1)
        bad.push_back(fmt::format("rank {}: chunk {} has {} reduce-grad actions, not 1", r, c, seen[static_cast<std::size_t>(c)]));
  }
  return bad;
}

void validate_sync_schedule(const Schedule& s, const SyncSchedule& sync) {
  const std::vector<std::string> bad = check_sync_schedule(s, sync);
  if (bad.empty()) return;
  std::string msg = fmt::format("schedule {}: its gradient synchronisation is invalid:", s.name);
  for (const auto& b : bad) msg += "\n  " + b;
  throw ScheduleError(msg);
}

std::vector<std::vector<SyncLaunch>> sync_launch_times(const Schedule& s, const SimResult& sim, const SyncSchedule& sync) {
  std::vector<std::vector<SyncLaunch>> out(static_cast<std::size_t>(s.num_ranks));
  std::size_t at = 0;  // the timeline is rank-major, each rank's actions in order
  for (int r = 0; r < s.num_ranks; ++r) {
    const std::size_t n = s.actions[static_cast<std::size_t>(r)].size();
    for (const ReduceGrad& g : sync.reduce[static_cast<std::size_t>(r)]) {
      const TimedAction& a = sim.timeline.at(at + static_cast<std::size_t>(g.after));
      out[static_cast<std::size_t>(r)].push_back({g.chunk, a.start, a.end});
    }
    at += n;
  }
  return out;
}

std::string sync_actions_text(const Schedule& s, const SyncSchedule& sync, int rank) {
  std::string out;
  const auto& actions = s.actions[static_cast<std::size_t>(rank)];
  for (const ReduceGrad& g : sync.reduce[static_cast<std::size_t>(rank)])
    out += fmt::format("{}R{} {} {}", out.empty() ? "" : ", ", g.chunk, sync.inside ? "inside" : "after",
                       to_string(actions[static_cast<std::size_t>(g.after)]));
  return out + ", then O";
}

}  // namespace pipebench
