// Schedules as CSV, in the two forms PyTorch's torch.distributed.pipelining
// reads and writes (`_load_csv` / `_dump_csv`). The compute-only form:
//
//   one line per rank, rank 0 first; one cell per action, in order;
//   a cell is STAGE KIND MICROBATCH with no separators, where STAGE is the
//   global (virtual) stage index and KIND is
//     F  forward
//     B  full backward (input and weight gradients)
//     I  backward for the input gradient only   (split backward)
//     W  backward for the weight gradient only  (split backward)
//   e.g. "0F0,0F1,0B0,0B1". Empty cells (idle slots) are skipped; spaces
//   around a cell are ignored. An overlapped forward-backward (DualPipeV) is
//   one cell "(0F4;3B2)OVERLAP_F_B": a forward and then a backward (B or I),
//   run as one action (schedule.hpp).
//
// Which rank holds which stage is read from the file: stage s must be on
// rank s mod p (looped, as interleaved 1F1B) or, with 2 stages per rank, on
// ranks in a V (rank r holds r and 2p-1-r, as ZB-V). A file with any I or W
// splits its backward: each of its B cells reads as the B with its W right
// after it (PyTorch writes B where such a schedule computes both at once);
// pipebench writes I and W cells instead, never B, in such a file.
//
// The compute_comms form adds, in the same cell syntax, SEND_F / RECV_F /
// SEND_B / RECV_B with a micro-batch (SEND_F s: the activation of stage s to
// stage s+1's rank; RECV_F s: stage s's input from stage s-1's rank; SEND_B
// s: the input gradient of stage s to stage s-1's rank; RECV_B s: stage s's
// output gradient from stage s+1's rank) and UNSHARD s, RESHARD s,
// REDUCE_GRAD s without one. A file with any of them is read in that form:
// its transfers are checked (csv_cells.hpp, validate_comms: matched, in
// NCCL's order, deadlock-free) before anything runs; then pipebench runs the
// compute cells in order and moves the tensors itself (schedule.hpp), so the
// transfer cells only have to be right. UNSHARD and RESHARD (FSDP) are
// accepted and ignored; REDUCE_GRAD places the chunk's gradient
// synchronisation with data parallelism (Schedule::file_reduce_grad) and is
// ignored without it. Loading does not validate the compute order or
// completeness; validate_schedule does, with its deadlock diagnosis.
#pragma once

#include <string>
#include <string_view>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// The CSV text of `s` (a trailing newline after every line).
std::string schedule_to_csv(const Schedule& s);

// The compute_comms form of `s`: its compute cells with a SEND_F / SEND_B
// right after each compute whose output crosses ranks, a RECV_F / RECV_B
// before each compute that consumes one — in the sender's order, posted
// early where that order needs it — and, with `reduce` (data parallelism's
// reduce-grad actions, sync_actions.hpp), a REDUCE_GRAD after the action
// that launches it. It reads back to the same action lists.
std::string schedule_to_comms_csv(const Schedule& s, const std::vector<std::vector<ReduceGrad>>& reduce = {});

// Reads `text` for a run of `p` ranks and `m` micro-batches; `source` names
// the file in errors and in the schedule's name ("file:SOURCE"). Throws ScheduleError with the line and cell of the
// first problem.
Schedule schedule_from_csv(std::string_view text, int p, int m, const std::string& source);

}  // namespace pipebench
