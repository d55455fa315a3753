// The compute_comms CSV form: its checks (csv_cells.hpp, validate_comms) and
// its writer (schedule_csv.hpp, schedule_to_comms_csv).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "csv_cells.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule_csv.hpp"

namespace pipebench {

namespace {

// A boundary tensor between two ranks: activations (F) into stage `stage`, or
// gradients (B) into stage `stage`, of one micro-batch. The checks and the
// writer both name transfers by it.
struct Message {
  bool gradient = false;
  int stage = 0;  // the stage that consumes it
  int microbatch = 0;
  auto key() const { return std::tuple(gradient, stage, microbatch); }
  friend bool operator==(const Message& a, const Message& b) { return a.key() == b.key(); }
  friend bool operator<(const Message& a, const Message& b) { return a.key() < b.key(); }
};

}  // namespace

namespace csv {

namespace {

std::string describe(const Message& m) {
  return fmt::format("{} stage {} micro-batch {}", m.gradient ? "the gradient into" : "the activation into", m.stage,
                     m.microbatch);
}

// The stages a cell's transfer connects, and the peer rank; -1 when the cell
// moves nothing.
struct Transfer {
  int peer = -1;
  Message message;
};

class CommsCheck {
 public:
  CommsCheck(const Rows& rows, const std::vector<int>& stage_rank, const std::string& source)
      : rows_(rows), stage_rank_(stage_rank), source_(source), stages_(static_cast<int>(stage_rank.size())) {}

  void run() {
    structure();
    if (errors_.empty()) matching();
    if (errors_.empty()) deadlock();
    if (errors_.empty()) return;
    std::string text = fmt::format("{}: the schedule's communication is invalid (compute_comms form, docs/schedules.md):",
                                   source_);
    for (const auto& e : errors_) text += "\n  " + e;
    throw ScheduleError(text);
  }

 private:
  int rank_of(int stage) const { return stage >= 0 && stage < stages_ ? stage_rank_[static_cast<std::size_t>(stage)] : -1; }
  // The cell's transfer: SEND_F s -> s+1, SEND_B s -> s-1; RECV_F s <- s-1, RECV_B s <- s+1.
  Transfer transfer(const Cell& c) const {
    switch (c.kind) {
      case CellKind::send_f: return {rank_of(c.stage + 1), {false, c.stage + 1, c.microbatch}};
      case CellKind::send_b: return {rank_of(c.stage - 1), {true, c.stage - 1, c.microbatch}};
      case CellKind::recv_f: return {rank_of(c.stage - 1), {false, c.stage, c.microbatch}};
      case CellKind::recv_b: return {rank_of(c.stage + 1), {true, c.stage, c.microbatch}};
      default: return {};
    }
  }
  // What a compute cell receives from another rank (peer -1: nothing).
  Transfer input(const Cell& c, int rank) const {
    if (c.kind == CellKind::F && rank_of(c.stage - 1) >= 0 && rank_of(c.stage - 1) != rank)
      return {rank_of(c.stage - 1), {false, c.stage, c.microbatch}};
    if ((c.kind == CellKind::B || c.kind == CellKind::I) && rank_of(c.stage + 1) >= 0 && rank_of(c.stage + 1) != rank)
      return {rank_of(c.stage + 1), {true, c.stage, c.microbatch}};
    return {};
  }
  std::string where(int rank, std::size_t i) const {
    return fmt::format("rank {} cell {} ({})", rank, i + 1, to_text(rows_[static_cast<std::size_t>(rank)][i]));
  }

  // Per rank, in order: a send after the compute that produces it, to a peer
  // on another rank; a receive from another rank before the compute that
  // consumes it; each once.
  void structure() {
    for (int r = 0; r < static_cast<int>(rows_.size()); ++r) {
      std::set<std::tuple<CellKind, int, int>> seen;
      std::set<Message> received;
      const auto& row = rows_[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < row.size(); ++i) {
        const Cell& c = row[i];
        if (is_compute(c.kind)) {
          seen.insert({c.kind, c.stage, c.microbatch});
          if (const Transfer in = input(c, r); in.peer >= 0 && !received.count(in.message))
            errors_.push_back(fmt::format("{}: needs {} from rank {}, but no {} receives it before", where(r, i),
                                          describe(in.message), in.peer,
                                          in.message.gradient ? fmt::format("{}RECV_B{}", c.stage, c.microbatch)
                                                              : fmt::format("{}RECV_F{}", c.stage, c.microbatch)));
          continue;
        }
        const Transfer t = transfer(c);
        if (c.kind == CellKind::unshard || c.kind == CellKind::reshard || c.kind == CellKind::reduce_grad) continue;
        if (!seen.insert({c.kind, c.stage, c.microbatch}).second)
          errors_.push_back(fmt::format("{}: appears twice", where(r, i)));
        if (t.peer < 0) {
          errors_.push_back(fmt::format("{}: stage {} has no neighbour that way", where(r, i), c.stage));
        } else if (t.peer == r) {
          errors_.push_back(fmt::format("{}: the neighbouring stage is on this rank too: nothing crosses ranks", where(r, i)));
        } else if (c.kind == CellKind::send_f && !seen.count({CellKind::F, c.stage, c.microbatch})) {
          errors_.push_back(fmt::format("{}: sends before {}F{} has computed it", where(r, i), c.stage, c.microbatch));
        } else if (c.kind == CellKind::send_b && !seen.count({CellKind::B, c.stage, c.microbatch}) &&
                   !seen.count({CellKind::I, c.stage, c.microbatch})) {
          errors_.push_back(fmt::format("{}: sends before the backward of stage {} micro-batch {} has computed it",
                                        where(r, i), c.stage, c.microbatch));
        } else if (c.kind == CellKind::recv_f || c.kind == CellKind::recv_b) {
          received.insert(t.message);
        }
      }
    }
  }

  // NCCL matches the point-to-point operations between two ranks in the order
  // they are issued: rank a's k-th send to b must be b's k-th receive from a.
  void matching() {
    std::map<std::pair<int, int>, std::vector<Message>> sent, received;  // (from, to)
    for (int r = 0; r < static_cast<int>(rows_.size()); ++r)
      for (const Cell& c : rows_[static_cast<std::size_t>(r)]) {
        const Transfer t = transfer(c);
        if (c.kind == CellKind::send_f || c.kind == CellKind::send_b) sent[{r, t.peer}].push_back(t.message);
        if (c.kind == CellKind::recv_f || c.kind == CellKind::recv_b) received[{t.peer, r}].push_back(t.message);
      }
    std::set<std::pair<int, int>> pairs;
    for (const auto& [k, v] : sent) pairs.insert(k);
    for (const auto& [k, v] : received) pairs.insert(k);
    for (const auto& [from, to] : pairs) {
      const auto& s = sent[{from, to}];
      const auto& r = received[{from, to}];
      // First what has no partner at all (a deleted SEND or RECV cell): said
      // as itself, not as the order mismatch it causes further on.
      const std::multiset<Message> s_set(s.begin(), s.end()), r_set(r.begin(), r.end());
      bool unpaired = false;
      for (const Message& m : r)
        if (!s_set.count(m)) {
          errors_.push_back(fmt::format("rank {} receives {} from rank {}, which never sends it (no {} cell on rank {})", to,
                                        describe(m), from, m.gradient ? "SEND_B" : "SEND_F", from));
          unpaired = true;
        }
      for (const Message& m : s)
        if (!r_set.count(m)) {
          errors_.push_back(fmt::format("rank {} sends {} to rank {}, which never receives it (no {} cell on rank {})", from,
                                        describe(m), to, m.gradient ? "RECV_B" : "RECV_F", to));
          unpaired = true;
        }
      if (unpaired) continue;  // the order is judged once every transfer has its partner
      for (std::size_t k = 0; k < s.size(); ++k) {
        if (s[k] == r[k]) continue;
        errors_.push_back(fmt::format("rank {} -> rank {}: transfer {} is {} on the sender but {} on the receiver "
                                      "(NCCL matches point-to-point operations between two ranks in the order they are "
                                      "issued)",
                                      from, to, k + 1, describe(s[k]), describe(r[k])));
        break;  // one mismatch per pair: the rest follow from it
      }
    }
  }

  // The cells run in order, one per rank per step; sends and receives never
  // block, a compute waits for its input's send (and its own rank's earlier
  // stages). A step where no rank moves with cells left is a deadlock.
  void deadlock() {
    const std::size_t p = rows_.size();
    std::vector<std::size_t> next(p, 0);
    std::set<std::tuple<int, CellKind, int>> done;  // (stage, kind, micro-batch) computed
    std::set<Message> posted;                       // sends issued
    std::vector<std::vector<std::string>> grid;     // [step][rank]
    for (;;) {
      std::vector<std::string> step(p, ".");
      std::vector<std::string> waits(p);
      bool moved = false, left = false;
      std::vector<std::tuple<int, CellKind, int>> computed;
      std::vector<Message> sends;
      for (std::size_t r = 0; r < p; ++r) {
        const auto& row = rows_[r];
        if (next[r] >= row.size()) continue;
        left = true;
        const Cell& c = row[next[r]];
        if (const std::string w = waits_for(c, static_cast<int>(r), done, posted); !w.empty()) {
          waits[r] = fmt::format("rank {}: {} waits for {}", r, to_text(c), w);
          continue;
        }
        if (is_compute(c.kind)) computed.push_back({c.stage, c.kind, c.microbatch});
        if (c.kind == CellKind::send_f || c.kind == CellKind::send_b) sends.push_back(transfer(c).message);
        step[r] = to_text(c);
        ++next[r];
        moved = true;
      }
      if (!left) return;
      if (!moved) {
        errors_.push_back("deadlock: no rank can run its next cell");
        for (const auto& w : waits)
          if (!w.empty()) errors_.push_back("  " + w);
        errors_.push_back(render(grid));
        return;
      }
      done.insert(computed.begin(), computed.end());  // seen by the others from the next step on
      posted.insert(sends.begin(), sends.end());
      grid.push_back(std::move(step));
    }
  }

  // What compute cell `c` on `rank` still waits for ("" when it can run).
  std::string waits_for(const Cell& c, int rank, const std::set<std::tuple<int, CellKind, int>>& done,
                        const std::set<Message>& posted) const {
    if (!is_compute(c.kind)) return "";
    if (const Transfer in = input(c, rank); in.peer >= 0)
      return posted.count(in.message) ? "" : fmt::format("{} from rank {} (its send)", describe(in.message), in.peer);
    auto local = [&](int stage, CellKind k) -> std::string {
      return done.count({stage, k, c.microbatch}) ? "" : fmt::format("{}{}{} on this rank", stage, kind_name(k), c.microbatch);
    };
    const bool split = c.kind == CellKind::I;
    switch (c.kind) {
      case CellKind::F: return c.stage > 0 ? local(c.stage - 1, CellKind::F) : "";
      case CellKind::B:
      case CellKind::I:
        if (const std::string f = local(c.stage, CellKind::F); !f.empty()) return f;
        return c.stage + 1 < stages_ ? local(c.stage + 1, split ? CellKind::I : CellKind::B) : "";
      case CellKind::W: return local(c.stage, CellKind::I);
      default: return "";
    }
  }

  // The last steps before the deadlock, one line per rank.
  static std::string render(const std::vector<std::vector<std::string>>& grid) {
    constexpr std::size_t kShown = 24;
    const std::size_t first = grid.size() > kShown ? grid.size() - kShown : 0;
    std::size_t width = 4;
    for (std::size_t s = first; s < grid.size(); ++s)
      for (const auto& cell : grid[s]) width = std::max(width, cell.size());
    std::string out = fmt::format("what ran, one cell per rank per step (step x rank{}):\n  step",
                                  first > 0 ? fmt::format(", the last {} steps", kShown) : "");
    for (std::size_t s = first; s < grid.size(); ++s) out += fmt::format(" {:>{}}", s, width);
    const std::size_t p = grid.empty() ? 0 : grid.front().size();
    for (std::size_t r = 0; r < p; ++r) {
      out += fmt::format("\n    r{}", r);
      for (std::size_t s = first; s < grid.size(); ++s) out += fmt::format(" {:>{}}", grid[s][r], width);
    }
    return out;
  }

  const Rows& rows_;
  const std::vector<int>& stage_rank_;
  const std::string& source_;
  const int stages_;
  std::vector<std::string> errors_;
};

}  // namespace

void validate_comms(const Rows& rows, const std::vector<int>& stage_rank, const std::string& source) {
  CommsCheck(rows, stage_rank, source).run();
}

}  // namespace csv

namespace {

// Where a receive goes on its rank: before compute action `action`, then by
// sender and by the transfer's place in that sender's sends.
struct Position {
  std::size_t action = 0;
  int from = 0;
  std::size_t order = 0;
  friend bool operator<(const Position& a, const Position& b) {
    return std::tie(a.action, a.from, a.order) < std::tie(b.action, b.from, b.order);
  }
};

using Cells = std::vector<std::vector<std::vector<csv::Cell>>>;  // [rank][action] -> cells

// The sends after the computes that produce them (and the REDUCE_GRAD cells
// after their actions); `sent` gets every transfer, (from, to) -> send order.
Cells sends_after(const Schedule& s, const std::vector<std::vector<ReduceGrad>>& reduce,
                  std::map<std::pair<int, int>, std::vector<Message>>& sent) {
  const int p = s.num_ranks, V = s.num_virtual_stages();
  Cells after(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto& list = s.actions[static_cast<std::size_t>(r)];
    auto& out = after[static_cast<std::size_t>(r)];
    out.resize(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const int v = s.virtual_stage(r, a.chunk);
      if (a.kind == ActionKind::F && v + 1 < V && s.rank_of(v + 1) != r) {
        out[i].push_back({v, csv::CellKind::send_f, a.microbatch});
        sent[{r, s.rank_of(v + 1)}].push_back({false, v + 1, a.microbatch});
      }
      if (a.kind == ActionKind::B && v > 0 && s.rank_of(v - 1) != r) {
        out[i].push_back({v, csv::CellKind::send_b, a.microbatch});
        sent[{r, s.rank_of(v - 1)}].push_back({true, v - 1, a.microbatch});
      }
    }
  }
  for (int r = 0; r < p && r < static_cast<int>(reduce.size()); ++r)
    for (const ReduceGrad& g : reduce[static_cast<std::size_t>(r)])
      after[static_cast<std::size_t>(r)].at(static_cast<std::size_t>(g.after))
          .push_back({s.virtual_stage(r, g.chunk), csv::CellKind::reduce_grad, -1});
  return after;
}

// The receives, in each sender's order (NCCL's matching), each posted no
// later than the compute that consumes it: walking a sender's transfers
// backwards, a receive goes before its consumer or before the next receive,
// whichever comes first.
std::vector<std::map<Position, csv::Cell>> receives_before(const Schedule& s,
                                                           const std::map<std::pair<int, int>, std::vector<Message>>& sent) {
  std::vector<std::map<Position, csv::Cell>> before(static_cast<std::size_t>(s.num_ranks));
  for (const auto& [pair, transfers] : sent) {
    const auto [from, to] = pair;
    const auto& list = s.actions[static_cast<std::size_t>(to)];
    std::map<Message, std::size_t> consumer;  // what each action receives -> its index
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i].kind != ActionKind::W)
        consumer[{list[i].kind == ActionKind::B, s.virtual_stage(to, list[i].chunk), list[i].microbatch}] = i;
    std::size_t latest = list.size();
    for (std::size_t k = transfers.size(); k-- > 0;) {
      const Message& t = transfers[k];
      latest = std::min(latest, consumer.at(t));
      before[static_cast<std::size_t>(to)][{latest, from, k}] = {
          t.stage, t.gradient ? csv::CellKind::recv_b : csv::CellKind::recv_f, t.microbatch};
    }
  }
  return before;
}

}  // namespace

std::string schedule_to_comms_csv(const Schedule& s, const std::vector<std::vector<ReduceGrad>>& reduce) {
  const bool split = s.split_backward();
  std::map<std::pair<int, int>, std::vector<Message>> sent;
  const Cells after = sends_after(s, reduce, sent);
  const auto before = receives_before(s, sent);
  std::string out;
  for (int r = 0; r < s.num_ranks; ++r) {
    std::string line;
    auto put = [&](const csv::Cell& c) { line += (line.empty() ? "" : ",") + csv::to_text(c); };
    const auto& list = s.actions[static_cast<std::size_t>(r)];
    const auto& receives = before[static_cast<std::size_t>(r)];
    auto pending = receives.begin();
    // Unit by unit (schedule.hpp, unit_size): the receives of its actions,
    // its compute cell, the sends after its actions.
    for (std::size_t i = 0; i < list.size();) {
      const std::size_t end = i + unit_size(list, i);
      for (; pending != receives.end() && pending->first.action < end; ++pending) put(pending->second);
      line += (line.empty() ? "" : ",") + csv::unit_text(s, r, list, i, split);
      for (; i < end; ++i)
        for (const csv::Cell& c : after[static_cast<std::size_t>(r)][i]) put(c);
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace pipebench
