// Send buffers of a step, and when each may be reused (docs/runner.md,
// "Boundary buffers").
//
// After F(v, mb) a rank sends the activation to the rank of v+1; after
// B(v, mb) the input gradient to the rank of v-1 (schedule.hpp). The tensor
// sits in a send buffer until the send has completed, and a send only
// completes once the receiver has it. Waiting for that at an arbitrary point
// could stall a rank on a peer, so a send buffer is reused only where the
// rank already *knows* the tensor arrived — where it has received a message
// that its peer sent after receiving the tensor:
//   * an activation F(v, mb) sent to another rank: at this rank's B(v, mb),
//     whose input gradient the peer computed from it; in inference, never
//     within the step;
//   * an input gradient B(v, mb) sent to rank q: at this rank's first
//     receive of a tensor q sent after q's B(v-1, mb) had received it (in
//     issue order: the sends of q's unit holding that B and every later
//     one); when q sends nothing more to this rank, never within the step;
//   * a tensor for a chunk of this rank (the turn of a V): at the action that
//     receives it, which copies it out (Backend::hand_over).
// Waiting for such a send never blocks on the peer, so buffers reused this
// way add no wait and cannot deadlock a valid schedule. Every transfer still
// completes by the end of the step (Transport::complete_sends).
//
// Slots: walking the rank's units (schedule.hpp, unit_size) in order, a
// unit first frees the slots released at it (after its receives), then each
// of its sends takes the lowest free slot of its pool — one pool per chunk
// and direction. A pool's size is the most slots it holds at once: with 1F1B,
// a rank's activation pool is its peak of live micro-batches (p - r), not m.
#pragma once

#include <cstdint>
#include <vector>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// One send of this rank whose buffer is free from a unit on: the tensor
// (kind F: activation, B: gradient) of (microbatch, chunk of this rank), sent
// to `peer` (-1: a chunk of this rank, nothing to wait for).
struct SendRelease {
  ActionKind kind = ActionKind::F;
  int microbatch = 0;
  int chunk = 0;
  int peer = -1;
};

struct RankSendSlots {
  // [chunk] buffers of the pool of activation (F) and gradient (B) sends.
  std::vector<int> f_pool, b_pool;
  // With detail (send_slots): [chunk][microbatch] the slot of the send, -1
  // where that action sends nothing.
  std::vector<std::vector<std::int32_t>> f_slot, b_slot;
  // With detail: [action index] the sends released at the unit starting
  // there (empty for every other index).
  std::vector<std::vector<SendRelease>> releases;

  int slot(ActionKind kind, int microbatch, int chunk) const {
    const auto& table = kind == ActionKind::F ? f_slot : b_slot;
    return table[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(microbatch)];
  }
};

// Every rank's pool sizes (no detail): what the planner charges.
std::vector<RankSendSlots> send_slot_pools(const Schedule& schedule);

// One rank's pools, slots and releases: what a backend and the executor use.
RankSendSlots send_slots(const Schedule& schedule, int rank);

}  // namespace pipebench
