// Schedules as CSV, in the compute-only form PyTorch's
// torch.distributed.pipelining reads and writes (`_load_csv` / `_dump_csv`):
//
//   one line per rank, rank 0 first; one cell per action, in order;
//   a cell is STAGE KIND MICROBATCH with no separators, where STAGE is the
//   global (virtual) stage index and KIND is
//     F  forward
//     B  full backward (input and weight gradients)
//     I  backward for the input gradient only   (split backward)
//     W  backward for the weight gradient only  (split backward)
//   e.g. "0F0,0F1,0B0,0B1". Empty cells (idle slots) are skipped; spaces
//   around a cell are ignored.
//
// Which rank holds which stage is read from the file: stage s must be on
// rank s mod p (looped, as interleaved 1F1B) or, with 2 stages per rank, on
// ranks in a V (rank r holds r and 2p-1-r, as ZB-V). A schedule either splits
// every backward (I and W) or none (B). PyTorch's communication and FSDP
// actions (SEND_F, RECV_B, UNSHARD, ...) are not accepted: pipebench derives
// the transfers from the dependencies (schedule.hpp). Loading does not
// validate order or completeness; validate_schedule does, with its deadlock
// diagnosis.
#pragma once

#include <string>
#include <string_view>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// The CSV text of `s` (a trailing newline after every line).
std::string schedule_to_csv(const Schedule& s);

// Reads `text` for a run of `p` ranks and `m` micro-batches; `source` names
// the file in errors and in the schedule's name ("file:SOURCE"). Throws ScheduleError with the line and cell of the
// first problem.
Schedule schedule_from_csv(std::string_view text, int p, int m, const std::string& source);

}  // namespace pipebench
