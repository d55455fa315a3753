#include "pipebench/schedule/schedule.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {

char kind_letter(ActionKind k) {
  switch (k) {
    case ActionKind::F: return 'F';
    case ActionKind::B: return 'B';
    case ActionKind::W: return 'W';
  }
  return '?';
}

void require_positive(int p, int m) {
  if (p < 1 || m < 1)
    throw ScheduleError(fmt::format("schedule needs p >= 1 and m >= 1 (got p = {}, m = {})", p, m));
}

Schedule empty_schedule(std::string name, int p, int m, bool retains) {
  require_positive(p, m);
  Schedule s;
  s.name = std::move(name);
  s.num_ranks = p;
  s.num_microbatches = m;
  s.retains_activations = retains;
  s.actions.resize(static_cast<std::size_t>(p));
  return s;
}

}  // namespace

std::string to_string(const Action& a) {
  return a.chunk == 0 ? fmt::format("{}{}", kind_letter(a.kind), a.microbatch)
                      : fmt::format("{}{}{}", a.chunk, kind_letter(a.kind), a.microbatch);
}

Action parse_action(std::string_view text) {
  auto bad = [&] { return ScheduleError(fmt::format("malformed action \"{}\" (expected e.g. F3, B0, 1F2)", text)); };
  const auto letter = text.find_first_of("FBW");
  if (letter == std::string_view::npos || letter + 1 >= text.size()) throw bad();
  Action a;
  a.kind = text[letter] == 'F' ? ActionKind::F : text[letter] == 'B' ? ActionKind::B : ActionKind::W;
  auto parse_int = [&](std::string_view digits, int& out) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || out < 0) throw bad();
  };
  if (letter > 0) parse_int(text.substr(0, letter), a.chunk);
  parse_int(text.substr(letter + 1), a.microbatch);
  return a;
}

std::size_t Schedule::total_actions() const {
  std::size_t n = 0;
  for (const auto& r : actions) n += r.size();
  return n;
}

Schedule make_forward_only(int p, int m) {
  Schedule s = empty_schedule("forward-only", p, m, false);
  for (auto& rank : s.actions)
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::F, mb, 0});
  return s;
}

Schedule make_gpipe(int p, int m) {
  Schedule s = empty_schedule("gpipe", p, m, true);
  for (auto& rank : s.actions) {
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::F, mb, 0});
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::B, mb, 0});
  }
  return s;
}

Schedule make_1f1b(int p, int m) {
  Schedule s = empty_schedule("1f1b", p, m, true);
  for (int r = 0; r < p; ++r) {
    auto& rank = s.actions[static_cast<std::size_t>(r)];
    const int warmup = std::min(p - r - 1, m);
    for (int mb = 0; mb < warmup; ++mb) rank.push_back({ActionKind::F, mb, 0});
    for (int i = 0; i < m - warmup; ++i) {
      rank.push_back({ActionKind::F, warmup + i, 0});
      rank.push_back({ActionKind::B, i, 0});
    }
    for (int mb = m - warmup; mb < m; ++mb) rank.push_back({ActionKind::B, mb, 0});
  }
  return s;
}

Schedule make_eager_1f1b(int p, int m) {
  Schedule s = empty_schedule("eager-1f1b", p, m, true);
  // Each stage runs its forwards, and its backwards, in increasing micro-batch
  // order (the lowest ready one is always the next one: an upstream stage
  // finishes F(mb) before F(mb+1), a downstream one B(mb) before B(mb+1)).
  // So readiness reduces to counters of completed actions per stage.
  const auto P = static_cast<std::size_t>(p);
  std::vector<int> done_f(P, 0), done_b(P, 0);  // as of the end of the previous step
  std::size_t remaining = 2 * P * static_cast<std::size_t>(m);
  while (remaining > 0) {
    const std::vector<int> prev_f = done_f, prev_b = done_b;
    std::size_t ran = 0;
    for (std::size_t st = 0; st < P; ++st) {
      const int nb = prev_b[st], nf = prev_f[st];
      const bool backward_ready = nb < nf && (st + 1 == P || prev_b[st + 1] > nb);
      const bool forward_ready = nf < m && (st == 0 || prev_f[st - 1] > nf);
      if (backward_ready) {
        s.actions[st].push_back({ActionKind::B, nb, 0});
        ++done_b[st];
      } else if (forward_ready) {
        s.actions[st].push_back({ActionKind::F, nf, 0});
        ++done_f[st];
      } else {
        continue;
      }
      ++ran;
    }
    if (ran == 0) throw ScheduleError("eager-1f1b: no stage can run an action (internal error)");
    remaining -= ran;
  }
  return s;
}

Schedule make_schedule(ScheduleKind kind, RunMode mode, int p, int m) {
  if (mode == RunMode::inference) return make_forward_only(p, m);
  switch (kind) {
    case ScheduleKind::gpipe: return make_gpipe(p, m);
    case ScheduleKind::one_f_one_b: return make_1f1b(p, m);
    case ScheduleKind::eager_one_f_one_b: return make_eager_1f1b(p, m);
  }
  throw ScheduleError("unknown schedule kind");
}

std::string to_text(const std::vector<Action>& actions) {
  std::string out;
  for (const auto& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

std::string to_text(const Schedule& s) {
  std::string out;
  for (std::size_t r = 0; r < s.actions.size(); ++r) out += fmt::format("r{}: {}\n", r, to_text(s.actions[r]));
  return out;
}

std::vector<BoundaryLink> boundary_links(const Schedule& s, bool train) {
  std::vector<BoundaryLink> links;
  for (int v = 0; v + 1 < s.num_virtual_stages(); ++v) {
    const int a = s.rank_of(v), b = s.rank_of(v + 1);
    if (a == b) continue;
    links.push_back({a, b, ActionKind::F});
    if (train) links.push_back({b, a, ActionKind::B});
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

}  // namespace pipebench
