// Pipeline schedules as data (SPEC §4, docs/schedules.md).
//
// A Schedule is, for each rank, the ordered list of actions that rank runs in
// one training (or inference) step. The same lists drive the simulator, the
// validator and the MPI executor; no schedule exists anywhere else as a loop.
//
// Model chunks and virtual stages. The model is cut into V virtual stages
// 0..V-1, in order; each rank holds `chunks_per_rank` of them (V = num_ranks
// x chunks_per_rank). `stage_rank[v]` is the rank holding virtual stage v,
// and chunk c of rank r is the c-th smallest virtual stage that rank holds.
// Two placements exist:
//   looped (interleaved 1F1B; 1 chunk per rank for every other schedule):
//     virtual stage v on rank v mod p, so chunk c of rank r is c*p + r;
//   V-shaped (ZB-V, 2 chunks): rank r holds stages r and 2p-1-r, so the
//     last stage is back on rank 0 and the forward pass goes down and up.
// Dependencies (the executor's contract, enforced by the validator):
//   F(v, mb)  needs F(v-1, mb)              (activation from rank_of(v-1)), v > 0
//   B(v, mb)  needs F(v, mb) on this rank, and B(v+1, mb)   (gradient from
//             rank_of(v+1)), v < V-1. B computes the input gradient and, when
//             the schedule has no W actions, also the weight gradient.
//   W(v, mb)  needs B(v, mb) on this rank: the weight gradient of a split
//             backward (zero-bubble schedules); then activations of (v, mb)
//             are kept until W, not B.
// After F(v, mb) with v < V-1 the executor sends the activation to
// rank_of(v+1); after B(v, mb) with v > 0 it sends the input gradient to
// rank_of(v-1). Nothing else crosses ranks inside a step.
// An overlapped forward-backward (PyTorch's OVERLAP_F_B, DualPipeV): an F
// marked `overlaps_next` and the B after it in the rank's list run as one
// action of two micro-batches. Its inputs are both received before it starts
// and its outputs both sent after it ends; in between, every backend runs
// the F and then the B (none overlaps their compute: the action costs F + B).
// A full backward in a schedule with W actions is a B with its W right after
// it (the same compute, order and memory as one B computing both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench {

enum class ActionKind : std::uint8_t { F, B, W };

// 8 bytes: a plan holds one per action (8.4 M for 1024 ranks x 4096
// micro-batches), so its size is the planner's memory and page faults.
struct Action {
  constexpr Action() = default;
  constexpr Action(ActionKind k, int mb, int c, bool overlapped = false)
      : kind(k), overlaps_next(overlapped), chunk(static_cast<std::int16_t>(c)), microbatch(mb) {}

  ActionKind kind = ActionKind::F;
  // On an F: it and the next action of the rank, a B, run as one overlapped
  // forward-backward (see above). False on every other action.
  bool overlaps_next = false;
  std::int16_t chunk = 0;  // model chunk on this rank (at most kMaxVirtualStagesPerRank)
  int microbatch = 0;

  friend bool operator==(const Action&, const Action&) = default;
};
static_assert(sizeof(Action) == 8);

// Text form: "F3", "B0", "W2"; a chunk other than 0 is a prefix: "1F3"; an F
// that overlaps the next action ends in '+': "F4+ 1B2".
std::string to_string(const Action& a);
// Inverse of to_string; throws ScheduleError on malformed text.
Action parse_action(std::string_view text);

enum class Placement : std::uint8_t { looped, v_shape };

// A reduce-grad action of data parallelism (sync_actions.hpp), R(chunk):
// launched when compute action `after` (an index into the rank's action list)
// ends.
struct ReduceGrad {
  int chunk = 0;
  int after = 0;
  friend bool operator==(const ReduceGrad&, const ReduceGrad&) = default;
};

// How many actions from list[i] on run as one: 2 for an overlapped
// forward-backward (an F marked overlaps_next with an action after it), else
// 1. The executor, the simulator and the transfer plans walk these units.
inline std::size_t unit_size(const std::vector<Action>& list, std::size_t i) {
  return list[i].overlaps_next && i + 1 < list.size() ? 2 : 1;
}

// The rank of virtual stage v of p ranks (see above, "Model chunks and
// virtual stages").
inline int placed_rank(Placement placement, int p, int v) {
  const int lap = v / p, offset = v % p;
  return placement == Placement::v_shape && lap % 2 == 1 ? p - 1 - offset : offset;
}

// Virtual stage -> rank for p ranks holding `chunks` chunks each (see above;
// v_shape needs chunks == 2).
std::vector<int> stage_ranks(Placement placement, int p, int chunks);

struct Schedule {
  std::string name;          // "gpipe", "1f1b", "eager-1f1b", "forward-only", ...
  int num_ranks = 1;         // p
  int num_microbatches = 1;  // m
  int chunks_per_rank = 1;
  Placement placement = Placement::looped;
  // true for training: F keeps the micro-batch's activations until its B (or
  // W). false for forward-only inference: nothing is kept between actions.
  bool retains_activations = true;
  std::vector<std::vector<Action>> actions;  // [rank] -> ordered actions
  // A compute_comms CSV's REDUCE_GRAD cells ([rank], in order), which place
  // the gradient synchronisation; empty for every other schedule.
  std::vector<std::vector<ReduceGrad>> file_reduce_grad;

  int num_virtual_stages() const { return num_ranks * chunks_per_rank; }
  int virtual_stage(int rank, int chunk) const {
    const int lap_start = chunk * num_ranks;
    return placement == Placement::v_shape && chunk % 2 == 1 ? lap_start + num_ranks - 1 - rank : lap_start + rank;
  }
  int rank_of(int vstage) const { return placed_rank(placement, num_ranks, vstage); }
  int chunk_of(int vstage) const { return vstage / num_ranks; }
  std::size_t total_actions() const;
  // Whether any action is a W: B then computes input gradients only.
  bool split_backward() const;
};

// A schedule with p empty action lists (the generators and the CSV reader
// fill them); ScheduleError unless p, m >= 1.
Schedule empty_schedule(std::string name, int p, int m, bool retains_activations, int chunks = 1,
                        Placement placement = Placement::looped);

// Forward-only (inference, seed 004's first timeline): every rank runs
// F0..F(m-1). With unit costs F(s, mb) runs at step s + mb; p+m-1 steps.
Schedule make_forward_only(int p, int m);

// GPipe / fill-drain: every rank runs F0..F(m-1), then B0..B(m-1).
// Peak live activations m on every rank.
Schedule make_gpipe(int p, int m);

// 1F1B, PipeDream-flush / Megatron non-interleaved: rank s runs
// w = min(p-s-1, m) warm-up forwards, then m-w pairs (F(w+i), B(i)), then
// the remaining w backwards. Peak live activations min(p-s, m).
Schedule make_1f1b(int p, int m);

// Seed 004's simplified greedy 1F1B: in every unit step each stage runs its
// lowest-numbered ready backward if any, else its lowest-numbered ready
// forward (readiness as of the end of the previous step). The per-rank orders
// are those of that unit-cost timeline, so simulating them with unit costs
// reproduces the seed's timeline and peak activation counts exactly.
Schedule make_eager_1f1b(int p, int m);

// Interleaved 1F1B (Megatron-LM's virtual pipeline; Narayanan et al. 2021):
// v chunks per rank, looped placement. Forwards run in groups of p
// micro-batches per chunk: the k-th forward of a rank is micro-batch
// (k / (p v)) p + k mod p of chunk (k mod (p v)) / p; backwards the same with
// the chunks in reverse. Rank r runs min(2 (p-r-1) + (v-1) p, m v) warm-up
// forwards (v = 1: p-r-1, plain 1F1B), then 1F1B pairs, then the remaining
// backwards. Requires m a
// multiple of p (ScheduleError otherwise). With chunk costs 1/v the unit
// bubble is (p-1)/(v m + p-1).
Schedule make_interleaved_1f1b(int p, int m, int v);

// ZB-H1 (Qi et al., ICLR 2024, "Zero Bubble Pipeline Parallelism"): 1F1B
// with the backward split into B (input gradient) and W (weight gradient).
// Rank r runs p-r-1 warm-up forwards; then r pairs (F, B) whose W waits;
// then (F, B, W) triples while forwards remain; then (B, W) pairs; then the
// waiting Ws. The first rank never defers a W. At most p micro-batches are
// held per rank (1F1B's first-rank peak); with F = B = W the bubble is
// (p-1)/(3m + p-1), a third of 1F1B's (p-1) (F + B + W).
Schedule make_zb_h1(int p, int m);

// ZB-V (the same paper, section 6): 2 chunks per rank in a V (rank r holds
// virtual stages r and 2p-1-r), split backward. Per rank: 2(p-r)-1 forwards
// of chunk 0; r pairs (F chunk 1, F chunk 0); p-r triples (F, B, W) of chunk
// 1; then, while forwards remain, (F, B, W) of chunk 0 and of chunk 1; then
// r pairs (B chunk 0, B chunk 1), p-r pairs (B, W) of chunk 0, and the
// remaining Ws (chunk 1 first). Built for max(m, 2p-1) micro-batches with
// the actions of micro-batches >= m removed. With F = B = W = 1/2 per chunk
// and m >= 2p the unit bubble is (p-1)/(6m + p-1): the first forward must
// still travel down the V before the last rank starts (the paper's "zero"
// counts only the steady state).
Schedule make_zb_v(int p, int m);

// Looped BFS (Lamy-Poirier 2022, "Breadth-First Pipeline Parallelism";
// PyTorch's ScheduleLoopedBFS): v chunks per rank, looped placement. Rank r
// runs every forward of chunk 0 (micro-batches in order), then every forward
// of chunk 1, ..., then the backwards: chunk v-1 first, each chunk's
// micro-batches in reverse order. Full backwards (no W). Every rank holds
// all v m chunk micro-batches before its first backward (GPipe's memory).
// With chunk costs 1/v and m >= p the unit bubble is (p-1)/(v m + p-1),
// interleaved 1F1B's; with m < p the forwards of a later chunk wait for the
// first micro-batch to come round the loop.
Schedule make_looped_bfs(int p, int m, int v);

// Interleaved zero bubble (ZB1P's deferred weight gradients on interleaved
// chunks; PyTorch's ScheduleInterleavedZeroBubble): v chunks per rank,
// looped placement, split backward. Micro-batches run in rounds of
// n = m / max(1, m / p) (m must be a multiple of the number of rounds,
// ScheduleError otherwise): the k-th forward of a rank is of chunk
// (k / n) mod v, the k-th backward of chunk v-1 - (k / n) mod v, each
// chunk's micro-batches in order. Rank r runs min((v-1) n + p-1-r, v m)
// warm-up forwards, then (F, B) pairs, each followed by a W once r Bs are
// waiting (the W of the oldest B), then the remaining Bs (each followed by a
// W the same way), then the waiting Ws. v = 1 is ZB-H1 (m >= p). Every rank
// holds min(v m, (v-1) n + p) chunk micro-batches at its peak (n = p: 1F1B's
// first rank). With F = B = W = 1/v per chunk and m >= p the unit bubble is
// (p-1)/(3 v m + p-1).
Schedule make_interleaved_zb(int p, int m, int v);

// DualPipeV (DeepSeek's DualPipe cut in a V, Sea AI Lab's form; PyTorch's
// ScheduleDualPipeV): 2 chunks per rank in a V (as ZB-V), m >= 2p
// (ScheduleError otherwise). Rank r runs, with "full" a B and its W at once,
// "input" a B whose W waits in a queue (oldest first), "overlap(F c, B c')"
// an F overlapped with a full backward (see above):
//   2(p-r-1) forwards of chunk 0; r+1 pairs (F chunk 0, F chunk 1);
//   p-r-1 times (input chunk 1, a waiting W, F chunk 1);
//   m-2p+r+1 times (overlap(F 0, B 1) — on the last rank the first is not
//   overlapped —, overlap(F 1, B 0));
//   p-r-1 times (full chunk 1, overlap(F 1, B 0));
//   r+1 times (B chunk 1, B chunk 0), full until the middle one, then input;
//   p-r-1 times (a waiting W, B chunk 0); then the waiting Ws.
// With F = B = W = 1/2 per chunk the bubble is ZB-V's, (p-1)/(6m + p-1),
// and every rank holds at most 2p+1 chunk micro-batches' activations
// (DualPipe's PP + 1 with PP = 2p stages); docs/schedules.md compares the
// bubble with DualPipe's closed form.
Schedule make_dualpipev(int p, int m);

// The schedule a run uses: forward-only for inference, else the run's
// `schedule` with its virtual_stages_per_rank. A `file:` schedule is read
// by load_schedule_csv (schedule_csv.hpp), not here.
// Per chunk of rank r, the index in its list of the chunk's first forward
// (-1: none): where the step first uses the chunk's parameters (the sharded
// parameter gathers' gates, docs/parallel.md).
std::vector<std::ptrdiff_t> first_forward_indices(const Schedule& s, int r);

Schedule make_schedule(const RunSpec& run);
Schedule make_schedule(ScheduleKind kind, RunMode mode, int p, int m, int v = 1);

// A directed stage-boundary link: tensors of `kind` (F: activations, B:
// gradients) travel from rank `src` to rank `dst`.
struct BoundaryLink {
  int src = 0, dst = 0;
  ActionKind kind = ActionKind::F;
  friend bool operator==(const BoundaryLink&, const BoundaryLink&) = default;
  friend auto operator<=>(const BoundaryLink&, const BoundaryLink&) = default;
};
// The links a schedule's boundary tensors use (virtual stage v -> v+1 for
// activations; v+1 -> v for gradients when `train`), each once, sorted.
// The NCCL transport builds one communicator per link.
std::vector<BoundaryLink> boundary_links(const Schedule& s, bool train);

// One rank's list: "F0 F1 B0 B1".
std::string to_text(const std::vector<Action>& actions);

// One line per rank: "r0: F0 F1 B0 B1".
std::string to_text(const Schedule& s);

}  // namespace pipebench
