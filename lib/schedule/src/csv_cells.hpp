// The cells of a schedule CSV (schedule_csv.hpp), as read, before they become
// a Schedule: shared by the reader (schedule_csv.cpp) and the compute_comms
// form's checks and writer (schedule_csv_comms.cpp). Private to lib/schedule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench::csv {

// PyTorch's action types (torch.distributed.pipelining, _ComputationType) in
// their CSV spelling: the compute-only form has the first four; the
// compute_comms form adds the rest.
enum class CellKind : std::uint8_t { F, B, I, W, send_f, recv_f, send_b, recv_b, unshard, reshard, reduce_grad };

// "F", "SEND_F", "REDUCE_GRAD", ...
std::string_view kind_name(CellKind k);
inline bool is_compute(CellKind k) { return k <= CellKind::W; }
// Whether the cell names a micro-batch (the FSDP and gradient cells do not).
inline bool has_microbatch(CellKind k) { return k < CellKind::unshard; }

struct Cell {
  int stage = 0;         // the global (virtual) stage index
  CellKind kind = CellKind::F;
  int microbatch = -1;   // -1: none (UNSHARD, RESHARD, REDUCE_GRAD)
  // The F of an OVERLAP_F_B cell "(0F4;3B2)OVERLAP_F_B": it and the next
  // cell, its backward, are one overlapped action (schedule.hpp).
  bool overlaps_next = false;
};

// "3SEND_F12", "0REDUCE_GRAD".
std::string to_text(const Cell& c);

// The text of the unit (schedule.hpp, unit_size) at list[i] of rank `rank`
// of `s`: one compute cell (its global stage; F, W, and B as I when the
// schedule splits its backward: `split`, s.split_backward()), or for an
// overlapped forward-backward PyTorch's "(0F4;3I2)OVERLAP_F_B".
std::string unit_text(const Schedule& s, int rank, const std::vector<Action>& list, std::size_t i, bool split);

using Rows = std::vector<std::vector<Cell>>;  // [rank] -> cells in order

// The compute_comms form's rules (docs/schedules.md, "CSV with
// communication"), checked on rows read from `source` whose stage s is on rank
// stage_rank[s]: every transfer sent once after the compute that produces it
// and received once, before the compute that consumes it, by the rank that
// holds the next (activations) or previous (gradients) stage; between two
// ranks the sends and receives in the same order (NCCL matches point-to-point
// operations in issue order); and no deadlock when sends never block and a
// compute waits for its input's send. Throws ScheduleError with every
// violation, or, for a deadlock, what each stuck rank waits for and the step x
// rank grid of the cells that ran.
void validate_comms(const Rows& rows, const std::vector<int>& stage_rank, const std::string& source);

}  // namespace pipebench::csv
