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

}  // namespace

Schedule empty_schedule(std::string name, int p, int m, bool retains, int chunks, Placement placement) {
  require_positive(p, m);
  Schedule s;
  s.name = std::move(name);
  s.num_ranks = p;
  s.num_microbatches = m;
  s.chunks_per_rank = chunks;
  s.placement = placement;
  s.retains_activations = retains;
  s.actions.resize(static_cast<std::size_t>(p));
  return s;
}

std::vector<int> stage_ranks(Placement placement, int p, int chunks) {
  std::vector<int> ranks;
  for (int v = 0; v < p * chunks; ++v) ranks.push_back(placed_rank(placement, p, v));
  return ranks;
}

bool Schedule::split_backward() const {
  for (const auto& list : actions)
    for (const auto& a : list)
      if (a.kind == ActionKind::W) return true;
  return false;
}

namespace {
// Appends the text form of `a` (schedule.hpp) to `out`: what to_string and
// to_text write, without a format string to parse per action (the plan's
// JSON prints every action of every rank).
void append_action(std::string& out, const Action& a) {
  char num[16];  // an int's digits (GCC's -Wstringop-overflow doubted one shared buffer)
  if (a.chunk != 0) out.append(num, std::to_chars(num, num + sizeof num, a.chunk).ptr);
  out.push_back(kind_letter(a.kind));
  out.append(num, std::to_chars(num, num + sizeof num, a.microbatch).ptr);
  if (a.overlaps_next) out.push_back('+');
}
}  // namespace

std::string to_string(const Action& a) {
  std::string out;
  append_action(out, a);
  return out;
}

Action parse_action(std::string_view text) {
  const std::string_view whole = text;
  auto bad = [&] { return ScheduleError(fmt::format("malformed action \"{}\" (expected e.g. F3, B0, 1F2, F4+)", whole)); };
  Action a;
  if (text.ends_with('+')) {
    a.overlaps_next = true;
    text.remove_suffix(1);
  }
  const auto letter = text.find_first_of("FBW");
  if (letter == std::string_view::npos || letter + 1 >= text.size()) throw bad();
  a.kind = text[letter] == 'F' ? ActionKind::F : text[letter] == 'B' ? ActionKind::B : ActionKind::W;
  auto parse_int = [&](std::string_view digits, auto& out) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || out < 0) throw bad();
  };
  if (letter > 0) parse_int(text.substr(0, letter), a.chunk);  // from_chars refuses a chunk beyond int16
  parse_int(text.substr(letter + 1), a.microbatch);
  if (a.overlaps_next && a.kind != ActionKind::F) throw bad();
  return a;
}

std::size_t Schedule::total_actions() const {
  std::size_t n = 0;
  for (const auto& r : actions) n += r.size();
  return n;
}

Schedule make_forward_only(int p, int m) {
  Schedule s = empty_schedule("forward-only", p, m, false);
  for (auto& rank : s.actions) rank.reserve(static_cast<std::size_t>(m));
  for (auto& rank : s.actions)
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::F, mb, 0});
  return s;
}

Schedule make_gpipe(int p, int m) {
  Schedule s = empty_schedule("gpipe", p, m, true);
  for (auto& rank : s.actions) {
    rank.reserve(2 * static_cast<std::size_t>(m));
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::F, mb, 0});
    for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::B, mb, 0});
  }
  return s;
}

Schedule make_1f1b(int p, int m) {
  Schedule s = empty_schedule("1f1b", p, m, true);
  for (int r = 0; r < p; ++r) {
    auto& rank = s.actions[static_cast<std::size_t>(r)];
    rank.reserve(2 * static_cast<std::size_t>(m));
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

Schedule make_interleaved_1f1b(int p, int m, int v) {
  require_positive(p, m);
  if (v < 1) throw ScheduleError(fmt::format("interleaved-1f1b needs virtual_stages_per_rank >= 1 (got {})", v));
  if (m % p != 0)
    throw ScheduleError(fmt::format("interleaved-1f1b needs num_microbatches to be a multiple of pipeline_size (got m = "
                                    "{}, p = {}): micro-batches run in groups of p per chunk; use m = {} or {}",
                                    m, p, m / p * p > 0 ? m / p * p : p, (m / p + 1) * p));
  Schedule s = empty_schedule("interleaved-1f1b", p, m, true, v);
  const int total = m * v, group = p * v;
  auto forward = [&](int k) { return Action{ActionKind::F, k / group * p + k % p, k % group / p}; };
  auto backward = [&](int k) { return Action{ActionKind::B, k / group * p + k % p, v - 1 - k % group / p}; };
  for (int r = 0; r < p; ++r) {
    auto& rank = s.actions[static_cast<std::size_t>(r)];
    rank.reserve(2 * static_cast<std::size_t>(total));
    // One chunk is Megatron's non-interleaved path: plain 1F1B.
    const int warmup = std::min(v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) rank.push_back(forward(k));
    for (int i = 0; i < total - warmup; ++i) {
      rank.push_back(forward(warmup + i));
      rank.push_back(backward(i));
    }
    for (int k = total - warmup; k < total; ++k) rank.push_back(backward(k));
  }
  return s;
}

namespace {
// Per-chunk counters of the next F, B and W micro-batch, appending to one
// rank's list: the zero-bubble generators are written as phases of these.
struct PhaseWriter {
  std::vector<Action>& out;
  int m;
  std::vector<int> f, b, w;
  PhaseWriter(std::vector<Action>& list, int microbatches, int chunks)
      : out(list), m(microbatches), f(static_cast<std::size_t>(chunks)), b(f), w(f) {}
  bool forward_left(int c) const { return f[static_cast<std::size_t>(c)] < m; }
  void F(int c) { out.push_back({ActionKind::F, f[static_cast<std::size_t>(c)]++, c}); }
  void B(int c) { out.push_back({ActionKind::B, b[static_cast<std::size_t>(c)]++, c}); }
  void W(int c) { out.push_back({ActionKind::W, w[static_cast<std::size_t>(c)]++, c}); }
};
}  // namespace

Schedule make_zb_h1(int p, int m) {
  Schedule s = empty_schedule("zb-h1", p, m, true);
  for (int r = 0; r < p; ++r) {
    PhaseWriter x(s.actions[static_cast<std::size_t>(r)], m, 1);
    for (int i = 0; i < p - r - 1 && x.forward_left(0); ++i) x.F(0);
    for (int i = 0; i < r && x.forward_left(0); ++i) {
      x.F(0);
      x.B(0);
    }
    while (x.forward_left(0)) {
      x.F(0);
      x.B(0);
      x.W(0);
    }
    while (x.b[0] < m) {
      x.B(0);
      x.W(0);
    }
    while (x.w[0] < m) x.W(0);
  }
  return s;
}

Schedule make_zb_v(int p, int m) {
  // Built for n >= 2p - 1 micro-batches (the phases assume a full pipeline),
  // then cut back to m.
  const int n = std::max(m, 2 * p - 1);
  Schedule s = empty_schedule("zb-v", p, m, true, 2, Placement::v_shape);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> list;
    PhaseWriter x(list, n, 2);
    for (int i = 0; i < 2 * (p - r) - 1; ++i) x.F(0);
    for (int i = 0; i < r; ++i) {
      x.F(1);
      x.F(0);
    }
    for (int i = 0; i < p - r; ++i) {
      x.F(1);
      x.B(1);
      x.W(1);
    }
    while (x.f[1] < x.f[0] || x.forward_left(0)) {
      if (x.forward_left(0)) x.F(0);
      x.B(0);
      x.W(0);
      x.F(1);
      x.B(1);
      x.W(1);
    }
    for (int i = 0; i < r; ++i) {
      x.B(0);
      x.B(1);
    }
    for (int i = 0; i < p - r; ++i) {
      x.B(0);
      x.W(0);
    }
    while (x.w[1] < x.b[1]) x.W(1);
    while (x.w[0] < x.b[0]) x.W(0);
    for (const auto& a : list)
      if (a.microbatch < m) s.actions[static_cast<std::size_t>(r)].push_back(a);
  }
  return s;
}

Schedule make_looped_bfs(int p, int m, int v) {
  require_positive(p, m);
  if (v < 1) throw ScheduleError(fmt::format("looped-bfs needs virtual_stages_per_rank >= 1 (got {})", v));
  Schedule s = empty_schedule("looped-bfs", p, m, true, v);
  for (auto& rank : s.actions) {
    rank.reserve(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
    for (int c = 0; c < v; ++c)
      for (int mb = 0; mb < m; ++mb) rank.push_back({ActionKind::F, mb, c});
    for (int c = v - 1; c >= 0; --c)
      for (int mb = m - 1; mb >= 0; --mb) rank.push_back({ActionKind::B, mb, c});
  }
  return s;
}

Schedule make_interleaved_zb(int p, int m, int v) {
  require_positive(p, m);
  if (v < 1) throw ScheduleError(fmt::format("interleaved-zb needs virtual_stages_per_rank >= 1 (got {})", v));
  if (const std::string why = schedule_microbatch_problem(ScheduleKind::interleaved_zb, p, m); !why.empty())
    throw ScheduleError(why);
  const int per_round = m / std::max(1, m / p), total = m * v;
  Schedule s = empty_schedule("interleaved-zb", p, m, true, v);
  for (int r = 0; r < p; ++r) {
    auto& rank = s.actions[static_cast<std::size_t>(r)];
    rank.reserve(3 * static_cast<std::size_t>(total));
    std::vector<int> next_f(static_cast<std::size_t>(v)), next_b(next_f);
    std::vector<Action> backwards;  // in order: a W repeats its B's chunk and micro-batch
    auto forward = [&](int k) {
      const int c = k / per_round % v;
      rank.push_back({ActionKind::F, next_f[static_cast<std::size_t>(c)]++, c});
    };
    std::size_t weights = 0;
    auto weight = [&] {  // the W of the oldest B without one
      const Action& b = backwards[weights++];
      rank.push_back({ActionKind::W, b.microbatch, b.chunk});
    };
    auto backward = [&](int k) {  // the k-th backward; then a W once r of them wait
      const int c = v - 1 - k / per_round % v;
      backwards.push_back({ActionKind::B, next_b[static_cast<std::size_t>(c)]++, c});
      rank.push_back(backwards.back());
      if (k >= r) weight();
    };
    const int warmup = std::min((v - 1) * per_round + p - 1 - r, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int i = 0; i < total - warmup; ++i) {
      forward(warmup + i);
      backward(i);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
    while (weights < backwards.size()) weight();
  }
  return s;
}

Schedule make_dualpipev(int p, int m) {
  require_positive(p, m);
  if (const std::string why = schedule_microbatch_problem(ScheduleKind::dualpipev, p, m); !why.empty())
    throw ScheduleError(why);
  Schedule s = empty_schedule("dualpipev", p, m, true, 2, Placement::v_shape);
  for (int r = 0; r < p; ++r) {
    auto& list = s.actions[static_cast<std::size_t>(r)];
    list.reserve(6 * static_cast<std::size_t>(m));
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::vector<Action> waiting;  // the Ws of input-only backwards, oldest first
    std::size_t popped = 0;
    auto forward = [&](int c, bool overlapped = false) { list.push_back({ActionKind::F, next_f[c]++, c, overlapped}); };
    auto full = [&](int c) {  // a B and its W at once
      list.push_back({ActionKind::B, next_b[c], c});
      list.push_back({ActionKind::W, next_b[c]++, c});
    };
    auto input = [&](int c) {
      list.push_back({ActionKind::B, next_b[c], c});
      waiting.push_back({ActionKind::W, next_b[c]++, c});
    };
    auto waiting_w = [&] {
      if (popped < waiting.size()) list.push_back(waiting[popped++]);
    };
    auto overlap = [&](int fc, int bc) {
      forward(fc, true);
      full(bc);
    };
    for (int i = 0; i < 2 * (p - r - 1); ++i) forward(0);
    for (int i = 0; i < r + 1; ++i) {
      forward(0);
      forward(1);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      input(1);
      waiting_w();
      forward(1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {
      if (i == 0 && r == p - 1) {  // not overlapped: the last rank's first backward starts sooner
        forward(0);
        full(1);
      } else {
        overlap(0, 1);
      }
      overlap(1, 0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      full(1);
      overlap(1, 0);
    }
    bool split = false;  // the second half of the cool-down defers its Ws
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = true;
      split ? input(1) : full(1);
      if (i == (r + 1) / 2 && r % 2 == 0) split = true;
      split ? input(0) : full(0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      waiting_w();
      split ? input(0) : full(0);
    }
    while (popped < waiting.size()) waiting_w();
  }
  return s;
}

Schedule make_schedule(ScheduleKind kind, RunMode mode, int p, int m, int v) {
  if (mode == RunMode::inference) return make_forward_only(p, m);
  switch (kind) {
    case ScheduleKind::gpipe: return make_gpipe(p, m);
    case ScheduleKind::one_f_one_b: return make_1f1b(p, m);
    case ScheduleKind::eager_one_f_one_b: return make_eager_1f1b(p, m);
    case ScheduleKind::interleaved_one_f_one_b: return make_interleaved_1f1b(p, m, v);
    case ScheduleKind::zb_h1: return make_zb_h1(p, m);
    case ScheduleKind::zb_v: return make_zb_v(p, m);
    case ScheduleKind::looped_bfs: return make_looped_bfs(p, m, v);
    case ScheduleKind::interleaved_zb: return make_interleaved_zb(p, m, v);
    case ScheduleKind::dualpipev: return make_dualpipev(p, m);
    case ScheduleKind::file: throw ScheduleError("a file: schedule is read with load_schedule_csv");
  }
  throw ScheduleError("unknown schedule kind");
}

Schedule make_schedule(const RunSpec& run) {
  return make_schedule(run.schedule, run.mode, run.pipeline_size, run.num_microbatches, run.virtual_stages_per_rank);
}

std::string to_text(const std::vector<Action>& actions) {
  std::string out;
  out.reserve(actions.size() * 5);
  for (const auto& a : actions) {
    if (!out.empty()) out += ' ';
    append_action(out, a);
  }
  return out;
}

std::string to_text(const Schedule& s) {
  std::string out;
  for (std::size_t r = 0; r < s.actions.size(); ++r) out += fmt::format("r{}: {}\n", r, to_text(s.actions[r]));
  return out;
}

std::vector<BoundaryLink> boundary_links(const Schedule& s, bool train) {
  std::vector<BoundaryLink> links;  // (v -> v+1 on one rank, as V-shaped stages p-1 and p are, crosses nothing)
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

std::vector<std::ptrdiff_t> first_forward_indices(const Schedule& s, int r) {
  std::vector<std::ptrdiff_t> first(static_cast<std::size_t>(s.chunks_per_rank), -1);
  const auto& list = s.actions.at(static_cast<std::size_t>(r));
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto& f = first.at(static_cast<std::size_t>(list[i].chunk));
    if (list[i].kind == ActionKind::F && f < 0) f = static_cast<std::ptrdiff_t>(i);
  }
  return first;
}

}  // namespace pipebench
