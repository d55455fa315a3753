// Pipeline schedules as data (SPEC §4, docs/schedules.md).
//
// A Schedule is, for each rank, the ordered list of actions that rank runs in
// one training (or inference) step. The same lists drive the simulator, the
// validator and the MPI executor; no schedule exists anywhere else as a loop.
//
// Model chunks and virtual stages. Each rank holds `chunks_per_rank` model
// chunks (1 for every schedule shipped today; interleaved schedules will use
// more). Chunk c of rank r is virtual stage v = c * num_ranks + r, so virtual
// stages 0..V-1 (V = num_ranks * chunks_per_rank) form the model in order.
//
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
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench {

enum class ActionKind : std::uint8_t { F, B, W };

struct Action {
  ActionKind kind = ActionKind::F;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank

  friend bool operator==(const Action&, const Action&) = default;
};

// Text form: "F3", "B0", "W2"; a chunk other than 0 is a prefix: "1F3".
std::string to_string(const Action& a);
// Inverse of to_string; throws ScheduleError on malformed text.
Action parse_action(std::string_view text);

struct Schedule {
  std::string name;          // "gpipe", "1f1b", "eager-1f1b", "forward-only", ...
  int num_ranks = 1;         // p
  int num_microbatches = 1;  // m
  int chunks_per_rank = 1;
  // true for training: F keeps the micro-batch's activations until its B (or
  // W). false for forward-only inference: nothing is kept between actions.
  bool retains_activations = true;
  std::vector<std::vector<Action>> actions;  // [rank] -> ordered actions

  int num_virtual_stages() const { return num_ranks * chunks_per_rank; }
  int virtual_stage(int rank, int chunk) const { return chunk * num_ranks + rank; }
  int rank_of(int vstage) const { return vstage % num_ranks; }
  std::size_t total_actions() const;
};

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

// The schedule a run uses: forward-only for inference, else `kind`.
Schedule make_schedule(ScheduleKind kind, RunMode mode, int p, int m);

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
