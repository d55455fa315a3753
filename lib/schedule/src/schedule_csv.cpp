#include "pipebench/schedule/schedule_csv.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/core/units.hpp"
#include "csv_cells.hpp"

namespace pipebench {

namespace csv {

constexpr std::string_view kOverlapName = "OVERLAP_F_B";

std::string_view kind_name(CellKind k) {
  static constexpr std::string_view kNames[] = {"F",      "B",      "I",      "W",       "SEND_F",     "RECV_F",
                                                "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"};
  return kNames[static_cast<std::size_t>(k)];
}

std::string to_text(const Cell& c) {
  return c.microbatch < 0 ? fmt::format("{}{}", c.stage, kind_name(c.kind))
                          : fmt::format("{}{}{}", c.stage, kind_name(c.kind), c.microbatch);
}

namespace {
Cell compute_cell(const Schedule& s, int rank, const Action& a, bool split) {
  const CellKind kind = a.kind == ActionKind::F ? CellKind::F
                        : a.kind == ActionKind::W ? CellKind::W
                        : split                   ? CellKind::I
                                                  : CellKind::B;
  return {s.virtual_stage(rank, a.chunk), kind, a.microbatch};
}
}  // namespace

std::string unit_text(const Schedule& s, int rank, const std::vector<Action>& list, std::size_t i, bool split) {
  const std::string first = to_text(compute_cell(s, rank, list[i], split));
  if (unit_size(list, i) == 1) return first;
  return fmt::format("({};{}){}", first, to_text(compute_cell(s, rank, list[i + 1], split)), kOverlapName);
}

}  // namespace csv

namespace {

using csv::Cell;
using csv::CellKind;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// `digits` (all digits) as the `what` number of cell `text`: more than nine
// digits is out of range, said so (not "not an action").
int parse_number(std::string_view digits, std::string_view what, std::string_view text, const std::string& where) {
  int out = 0;
  if (digits.size() > 9)
    throw ScheduleError(fmt::format("{}: \"{}\": {} number {} is out of range (at most 999999999)", where,
                                    printable_excerpt(text), what, printable_excerpt(digits)));
  std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return out;
}

// "3F12" -> {3, F, 12}, "1SEND_B0", "0REDUCE_GRAD"; a ScheduleError naming
// `where` otherwise.
Cell parse_cell(std::string_view text, const std::string& where) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  Cell c;
  if (i == 0 || i >= text.size())
    throw ScheduleError(fmt::format("{}: \"{}\" is not an action (expected STAGE KIND MICROBATCH, e.g. 0F3, 1I0, 2W5, "
                                    "1SEND_F0)",
                                    where, printable_excerpt(text)));
  c.stage = parse_number(text.substr(0, i), "stage", text, where);
  const std::string_view rest = text.substr(i);
  const std::string_view name = rest.substr(0, rest.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_"));
  bool known = false;
  for (int k = 0; k <= static_cast<int>(CellKind::reduce_grad) && !known; ++k)
    if (name == csv::kind_name(static_cast<CellKind>(k))) c.kind = static_cast<CellKind>(k), known = true;
  if (!known && name == csv::kOverlapName)
    throw ScheduleError(fmt::format("{}: \"{}\": {} pairs two actions, written (FORWARD;BACKWARD){}, e.g. (0F4;3B2){}",
                                    where, printable_excerpt(text), csv::kOverlapName, csv::kOverlapName,
                                    csv::kOverlapName));
  if (!known)
    throw ScheduleError(fmt::format("{}: \"{}\": unknown action kind '{}' (expected F, B, I or W; with communication "
                                    "SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD)",
                                    where, printable_excerpt(text), printable_excerpt(name)));
  const std::string_view digits = rest.substr(name.size());
  if (!csv::has_microbatch(c.kind)) {
    if (!digits.empty())
      throw ScheduleError(fmt::format("{}: \"{}\": {} takes no micro-batch", where, printable_excerpt(text), name));
  } else if (!all_digits(digits)) {
    throw ScheduleError(fmt::format("{}: \"{}\" has no micro-batch number", where, printable_excerpt(text)));
  } else {
    c.microbatch = parse_number(digits, "micro-batch", text, where);
  }
  return c;
}

// A cell of the row: one action, or an overlapped forward-backward
// "(0F4;3B2)OVERLAP_F_B" as its two compute cells, the first marked.
void parse_unit(std::string_view text, const std::string& where, std::vector<Cell>& row) {
  if (!text.starts_with('(')) {
    row.push_back(parse_cell(text, where));
    return;
  }
  const auto close = text.find(')');
  const auto semicolon = text.find(';');
  if (close == std::string_view::npos || text.substr(close + 1) != csv::kOverlapName || semicolon > close)
    throw ScheduleError(fmt::format("{}: \"{}\" is not an overlapped action (expected (FORWARD;BACKWARD){}, e.g. "
                                    "(0F4;3B2){})",
                                    where, printable_excerpt(text), csv::kOverlapName, csv::kOverlapName));
  Cell f = parse_cell(trim(text.substr(1, semicolon - 1)), where);
  const Cell b = parse_cell(trim(text.substr(semicolon + 1, close - semicolon - 1)), where);
  if (f.kind != CellKind::F || (b.kind != CellKind::B && b.kind != CellKind::I))
    throw ScheduleError(fmt::format("{}: \"{}\": {} overlaps a forward (F) with the backward (B or I) after it", where,
                                    printable_excerpt(text), csv::kOverlapName));
  f.overlaps_next = true;
  row.push_back(f);
  row.push_back(b);
}

// The placement whose stage -> rank map matches what the rows hold.
Placement infer_placement(const std::vector<std::set<int>>& held, int p, int chunks, const std::string& source) {
  for (const Placement candidate : {Placement::looped, Placement::v_shape}) {
    if (candidate == Placement::v_shape && chunks != 2) continue;
    const std::vector<int> ranks = stage_ranks(candidate, p, chunks);
    bool match = true;
    for (int r = 0; r < p && match; ++r)
      for (const int stage : held[static_cast<std::size_t>(r)]) match &= ranks[static_cast<std::size_t>(stage)] == r;
    if (match) return candidate;
  }
  std::string layout;
  for (int r = 0; r < p; ++r) {
    std::string stages;
    for (const int st : held[static_cast<std::size_t>(r)]) stages += fmt::format("{}{}", stages.empty() ? "" : " ", st);
    layout += fmt::format("; rank {} holds {}", r, stages.empty() ? "nothing" : stages);
  }
  throw ScheduleError(fmt::format("{}: the stages are placed neither in a loop (stage s on rank s mod {}) nor in a V "
                                  "(2 stages per rank: r and {} - r){}",
                                  source, p, 2 * p - 1, layout));
}

}  // namespace

std::string schedule_to_csv(const Schedule& s) {
  // A B is I when the schedule splits its backward (it has a W for it).
  const bool split = s.split_backward();
  std::string out;
  for (int r = 0; r < s.num_ranks; ++r) {
    std::string line;
    const auto& list = s.actions[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < list.size(); i += unit_size(list, i))
      line += (line.empty() ? "" : ",") + csv::unit_text(s, r, list, i, split);
    out += line + "\n";
  }
  return out;
}

namespace {

// The CSV's lines as cells, one row per rank (exactly p).
csv::Rows read_rows(std::string_view text, int p, const std::string& source) {
  // A UTF-8 byte order mark (spreadsheet exports write one) is not a cell.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  csv::Rows rows;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (trim(line).empty() && text.empty()) break;  // a trailing blank line
    if (static_cast<int>(rows.size()) == p)
      throw ScheduleError(fmt::format("{}:{}: more than {} lines; the run has pipeline_size = {} (one line per rank)",
                                      source, line_no, p, p));
    std::vector<Cell> row;
    std::size_t column = 0;
    for (std::string_view rest = line;; ++column) {
      const auto comma = rest.find(',');
      const std::string_view cell = trim(rest.substr(0, comma));
      if (!cell.empty()) parse_unit(cell, fmt::format("{}:{}: cell {}", source, line_no, column + 1), row);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    rows.push_back(std::move(row));
  }
  if (static_cast<int>(rows.size()) != p)
    throw ScheduleError(fmt::format("{}: {} line(s) but the run has pipeline_size = {} (one line per rank)", source,
                                    rows.size(), p));
  return rows;
}

// The compute actions of the rows in order, and the REDUCE_GRAD cells as
// reduce-grad launches after the compute action before them. In a file that
// splits backwards (`split`: it has I or W cells), a full backward B is a B
// with its W at once (schedule.hpp).
void fill_actions(const csv::Rows& rows, Schedule& s, bool split, const std::string& source) {
  for (int r = 0; r < s.num_ranks; ++r) {
    auto& list = s.actions[static_cast<std::size_t>(r)];
    for (const Cell& c : rows[static_cast<std::size_t>(r)]) {
      if (c.kind == CellKind::reduce_grad) {
        if (list.empty())
          throw ScheduleError(fmt::format("{}: rank {}: {} before any compute action (its chunk's gradients are not "
                                          "computed yet)",
                                          source, r, csv::to_text(c)));
        if (s.file_reduce_grad.empty()) s.file_reduce_grad.resize(static_cast<std::size_t>(s.num_ranks));
        s.file_reduce_grad[static_cast<std::size_t>(r)].push_back({s.chunk_of(c.stage), static_cast<int>(list.size()) - 1});
      }
      if (!csv::is_compute(c.kind)) continue;
      const ActionKind kind = c.kind == CellKind::F ? ActionKind::F : c.kind == CellKind::W ? ActionKind::W : ActionKind::B;
      list.push_back({kind, c.microbatch, s.chunk_of(c.stage), c.overlaps_next});
      if (split && c.kind == CellKind::B) list.push_back({ActionKind::W, c.microbatch, s.chunk_of(c.stage)});
    }
  }
}

}  // namespace

Schedule schedule_from_csv(std::string_view text, int p, int m, const std::string& source) {
  const csv::Rows rows = read_rows(text, p, source);
  int stages = 0;
  bool split = false, comms = false;
  std::vector<std::set<int>> held(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    for (const Cell& c : rows[static_cast<std::size_t>(r)]) {
      stages = std::max(stages, c.stage + 1);
      held[static_cast<std::size_t>(r)].insert(c.stage);
      split |= c.kind == CellKind::I || c.kind == CellKind::W;
      comms |= !csv::is_compute(c.kind);
      if (c.microbatch >= m)
        throw ScheduleError(fmt::format("{}: rank {} runs micro-batch {} but the run has num_microbatches = {}", source, r,
                                        c.microbatch, m));
    }
  if (stages % p != 0)
    throw ScheduleError(fmt::format("{}: {} stages cannot be spread evenly over {} ranks", source, stages, p));
  const int chunks = std::max(1, stages / p);
  if (chunks > kMaxVirtualStagesPerRank)
    throw ScheduleError(fmt::format("{}: {} stages on {} ranks is {} per rank; at most {}", source, stages, p, chunks,
                                    kMaxVirtualStagesPerRank));
  const Placement placement = infer_placement(held, p, chunks, source);
  if (comms) csv::validate_comms(rows, stage_ranks(placement, p, chunks), source);

  Schedule s = empty_schedule("file:" + source, p, m, true, chunks, placement);
  fill_actions(rows, s, split, source);
  return s;
}

}  // namespace pipebench
