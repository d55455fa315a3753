#include "pipebench/schedule/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {

// Counts and in-rank positions of one rank's (kind, chunk, micro-batch)s
// (a rank's list is far shorter than 2^32 actions: core/job.hpp limits).
struct Occurrence {
  std::uint32_t count = 0;
  std::uint32_t position = 0;  // index in that rank's list (last occurrence)
};

}  // namespace

namespace {

// check_schedule's structural checks (counts, order, ranges): the deadlock
// check, a unit-cost simulation, follows only when these pass. Rank by rank:
// a (virtual stage, micro-batch) belongs to one rank's list, so the counts
// need a table of one rank's chunks x micro-batches, reused, not one of every
// stage's (64 MB at p = 1024, m = 4096, filled with page faults).
std::vector<std::string> check_structure(const Schedule& s) {
  std::vector<std::string> errors;
  const int p = s.num_ranks, m = s.num_microbatches, chunks = s.chunks_per_rank;
  if (p < 1 || m < 1 || chunks < 1) {
    errors.push_back(fmt::format("needs num_ranks, num_microbatches and chunks_per_rank >= 1 (got {}, {}, {})",
                                 p, m, chunks));
    return errors;
  }
  if (s.actions.size() != static_cast<std::size_t>(p)) {
    errors.push_back(fmt::format("{} action lists for {} ranks", s.actions.size(), p));
    return errors;
  }
  const auto slots = static_cast<std::size_t>(chunks) * static_cast<std::size_t>(m);
  // W's table only where W actions exist (a W-less schedule's counts are 0).
  const bool any_w = s.split_backward();
  std::vector<Occurrence> seen[3] = {std::vector<Occurrence>(slots), std::vector<Occurrence>(slots),
                                     std::vector<Occurrence>(any_w ? slots : 0)};
  const Occurrence none{};
  // Actions out of range are reported alone (what is missing follows from them).
  std::vector<std::string> range_errors;
  for (int r = 0; r < p; ++r) {
    const auto& list = s.actions[static_cast<std::size_t>(r)];
    for (auto& table : seen) std::fill(table.begin(), table.end(), none);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.microbatch < 0 || a.microbatch >= m || a.chunk < 0 || a.chunk >= chunks) {
        range_errors.push_back(fmt::format("rank {} position {}: {} is outside {} micro-batches x {} chunks",
                                           r, i, to_string(a), m, chunks));
        continue;
      }
      if (a.overlaps_next && (a.kind != ActionKind::F || i + 1 == list.size() || list[i + 1].kind != ActionKind::B))
        errors.push_back(fmt::format("rank {} position {}: {} is an overlapped forward-backward, but {}", r, i,
                                     to_string(a),
                                     a.kind != ActionKind::F ? "only an F overlaps the B after it"
                                     : i + 1 == list.size() ? "it is the rank's last action"
                                                            : fmt::format("the next action {} is no B", to_string(list[i + 1]))));
      auto& o = seen[static_cast<int>(a.kind)][static_cast<std::size_t>(a.chunk) * static_cast<std::size_t>(m) +
                                                 static_cast<std::size_t>(a.microbatch)];
      ++o.count;
      o.position = static_cast<std::uint32_t>(i);
    }
    if (!range_errors.empty()) continue;
    for (int c = 0; c < chunks; ++c) {
      const int v = s.virtual_stage(r, c);
      for (int mb = 0; mb < m; ++mb) {
        const std::size_t k = static_cast<std::size_t>(c) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb);
        const Occurrence& f = seen[0][k];
        const Occurrence& b = seen[1][k];
        const Occurrence& w = any_w ? seen[2][k] : none;
        // Formatted only for an error (this loop visits every slot of a large plan).
        auto where = [&] { return fmt::format("stage {} (rank {}) micro-batch {}", v, r, mb); };
        if (f.count != 1) errors.push_back(fmt::format("{}: F appears {} times, expected once", where(), f.count));
        if (s.retains_activations) {
          if (b.count != 1) errors.push_back(fmt::format("{}: B appears {} times, expected once", where(), b.count));
        } else if (b.count + w.count != 0) {
          errors.push_back(fmt::format("{}: a forward-only schedule has backward actions", where()));
        }
        if (any_w && s.retains_activations && w.count == 0)
          errors.push_back(fmt::format("{}: no W, but the schedule splits its backward (every B needs its W)", where()));
        if (w.count > 1) errors.push_back(fmt::format("{}: W appears {} times, expected at most once", where(), w.count));
        if (f.count == 1 && b.count == 1 && b.position < f.position)
          errors.push_back(fmt::format("{}: B at position {} comes before its F at position {}", where(), b.position, f.position));
        if (w.count == 1 && b.count == 1 && w.position < b.position)
          errors.push_back(fmt::format("{}: W at position {} comes before its B at position {}", where(), w.position, b.position));
        if (w.count == 1 && b.count == 0)
          errors.push_back(fmt::format("{}: W without B", where()));
      }
    }
  }
  return range_errors.empty() ? errors : range_errors;
}

void add_deadlock(const SimResult& unit, std::vector<std::string>& errors) {
  if (unit.completed) return;
  errors.push_back("deadlock: no rank can run its next action");
  for (const auto& b : unit.blocked) errors.push_back("  " + b);
}

[[noreturn]] void throw_invalid(const Schedule& s, const std::vector<std::string>& errors) {
  std::string msg = fmt::format("invalid schedule \"{}\" (p = {}, m = {}):\n", s.name, s.num_ranks, s.num_microbatches);
  for (const auto& e : errors) msg += "  " + e + "\n";
  try {
    msg += "what can execute with unit costs (step x rank):\n" + render_grid(s, simulate(s, SimCosts::unit(s)));
  } catch (const ScheduleError&) {
    msg += "(no grid: actions out of range)\n";
  }
  throw ScheduleError(msg);
}

}  // namespace

std::vector<std::string> check_schedule(const Schedule& s) {
  std::vector<std::string> errors = check_structure(s);
  if (errors.empty()) add_deadlock(simulate_checked(s, SimCosts::unit(s), false), errors);  // completion only
  return errors;
}

ValidatedSimulations validate_and_simulate(const Schedule& s, const SimCosts& costs, bool keep_timeline) {
  std::vector<std::string> errors = check_structure(s);
  if (!errors.empty()) throw_invalid(s, errors);
  auto [unit, costed] = simulate_checked(s, SimCosts::unit(s), costs, keep_timeline);
  add_deadlock(unit, errors);
  if (!errors.empty()) throw_invalid(s, errors);
  unit.peak_live_activations = peak_live_activations(s);
  costed.peak_live_activations = unit.peak_live_activations;
  return {std::move(unit), std::move(costed)};
}

void validate_schedule(const Schedule& s) {
  const auto errors = check_schedule(s);
  if (!errors.empty()) throw_invalid(s, errors);
}

std::string render_grid(const Schedule& s, const SimResult& unit) {
  int steps = 0;
  std::size_t width = 1;
  for (const auto& t : unit.timeline) {
    steps = std::max(steps, static_cast<int>(std::ceil(t.end)));
    width = std::max(width, to_string(t.action).size());
  }
  const auto S = static_cast<std::size_t>(steps);
  std::vector<std::vector<std::string>> cells(static_cast<std::size_t>(s.num_ranks), std::vector<std::string>(S, "."));
  for (const auto& t : unit.timeline) {
    const auto step = static_cast<std::size_t>(std::floor(t.start));
    if (step < S) cells[static_cast<std::size_t>(t.rank)][step] = to_string(t.action);
  }
  const std::size_t label = std::max(fmt::format("r{}", s.num_ranks - 1).size(), std::size_t{4});
  width = std::max(width, fmt::format("{}", steps > 0 ? steps - 1 : 0).size());
  std::string out = fmt::format("{:>{}} ", "step", label);
  for (std::size_t t = 0; t < S; ++t) out += fmt::format(" {:>{}}", t, width);
  out += '\n';
  for (std::size_t r = 0; r < cells.size(); ++r) {
    out += fmt::format("{:>{}} ", fmt::format("r{}", r), label);
    for (const auto& c : cells[r]) out += fmt::format(" {:>{}}", c, width);
    out += '\n';
  }
  return out;
}

}  // namespace pipebench
