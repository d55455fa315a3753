#include "pipebench/parallel/context_exchange.hpp"

#include <algorithm>

namespace pipebench::parallel {

ContextExchange context_exchange(const ContextGroup& g, std::uint64_t kv_bytes, double attention_forward_s,
                                 double attention_backward_s) {
  ContextExchange x;
  const int c = g.degree;
  if (c <= 1) return x;
  if (g.mode == CpComm::allgather) {
    const std::uint64_t whole = kv_bytes * static_cast<std::uint64_t>(c);
    const double gather = ring_time_s(Collective::all_gather, whole, c, g.link.latency_s, g.link.gbps);
    x.forward_s = gather;
    x.backward_s = gather + ring_time_s(Collective::reduce_scatter, whole, c, g.link.latency_s, g.link.gbps);
    return x;
  }
  const double steps = c - 1;
  x.forward_s = steps * std::max(0.0, transfer_s(g.link, kv_bytes) - attention_forward_s / c);
  x.backward_s = steps * std::max(0.0, transfer_s(g.link, 2 * kv_bytes) - attention_backward_s / c) +
                 transfer_s(g.link, kv_bytes);
  return x;
}

ContextGroup stage_context_group(const DeviceSpec& device, const RunSpec& run, int pipeline_rank) {
  if (run.context_parallel <= 1) return {};
  return {run.context_parallel, run.cp_comm, stage_context_link(device, run, pipeline_rank)};
}

}  // namespace pipebench::parallel
