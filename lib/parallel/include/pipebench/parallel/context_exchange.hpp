// Context parallelism's K/V exchange (docs/context-parallel.md): what one
// block's attention waits for, per micro-batch, on each pass. A plain
// function of the sizes and the link: one rule for the planner and the sim
// backend.
//
// ring (Megatron-LM / Transformer Engine): the c ranks pass K/V around a
// ring; at each of the c − 1 steps a rank sends its current block on while
// it computes the attention of the one it holds, so a step costs
// max(transfer, compute/c) and only the transfer's excess is exposed. The
// backward passes K/V and the dK/dV accumulated so far (twice the bytes) and
// sends the dK/dV home at the end (one transfer exposed).
// allgather (Llama 3, Dubey et al. 2024 §3.3.2): the K/V of the whole
// sequence all-gathered before the attention, nothing overlapped; the
// backward gathers them again (they are not kept) and reduce-scatters dK/dV.
#pragma once

#include <cstdint>

#include "pipebench/core/job.hpp"
#include "pipebench/parallel/collectives.hpp"

namespace pipebench::parallel {

// A stage's context group: its degree, how it exchanges, the link it rides.
struct ContextGroup {
  int degree = 1;
  CpComm mode = CpComm::ring;
  Link link;
};

// Seconds one block's attention waits for the exchange, per micro-batch.
struct ContextExchange {
  double forward_s = 0.0, backward_s = 0.0;
};

// `kv_bytes`: the K/V one rank holds for the block (ModelDesc::context_kv_bytes);
// `attention_forward_s` / `attention_backward_s`: the rank's attention core
// of the block on each pass, what a ring step hides behind (1/c of it a step).
ContextExchange context_exchange(const ContextGroup& group, std::uint64_t kv_bytes, double attention_forward_s,
                                 double attention_backward_s);

// The context group of run `run`'s pipeline stage `pipeline_rank`
// (stage_context_link: the slowest over its replicas and tensor ranks).
ContextGroup stage_context_group(const DeviceSpec& device, const RunSpec& run, int pipeline_rank);

}  // namespace pipebench::parallel
