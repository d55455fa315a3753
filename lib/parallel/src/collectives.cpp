#include "pipebench/parallel/collectives.hpp"

#include "pipebench/parallel/rank_grid.hpp"

namespace pipebench::parallel {

double bus_factor(Collective c, int group_size) {
  if (group_size <= 1) return 0.0;
  const double d = group_size;
  return (c == Collective::all_reduce ? 2.0 : 1.0) * (d - 1.0) / d;
}

double ring_time_s(Collective c, std::uint64_t bytes, int group_size, double latency_s, double gbps) {
  if (group_size <= 1) return 0.0;
  return latency_s + bus_factor(c, group_size) * 8.0 * static_cast<double>(bytes) / (gbps * 1e9);
}

double bus_bandwidth(Collective c, std::uint64_t bytes, int group_size, double seconds) {
  if (!(seconds > 0.0)) return 0.0;
  return bus_factor(c, group_size) * static_cast<double>(bytes) / seconds;
}

Link intra_node_link(const DeviceSpec& device) { return {device.sim_link_latency_us * 1e-6, device.sim_link_gbps, false}; }

Link inter_node_link(const DeviceSpec& device) {
  Link l = intra_node_link(device);
  l.inter_node = true;
  if (device.sim_inter_node_latency_us >= 0.0) l.latency_s = device.sim_inter_node_latency_us * 1e-6;
  if (device.sim_inter_node_gbps > 0.0) l.gbps = device.sim_inter_node_gbps;
  return l;
}

namespace {

// The sim link when `group` is on one node, else the inter-node link.
Link link_of(const DeviceSpec& device, const RankGrid& grid, const std::vector<int>& group) {
  return grid.within_one_node(group) ? intra_node_link(device) : inter_node_link(device);
}

}  // namespace

Link data_group_link(const DeviceSpec& device, const RunSpec& run, int rank) {
  const RankGrid grid = run_grid(run, device);
  return link_of(device, grid, grid.gradient_group(rank));
}

Link tensor_group_link(const DeviceSpec& device, const RunSpec& run, int rank) {
  const RankGrid grid = run_grid(run, device);
  return link_of(device, grid, grid.tensor_group(rank));
}

Link stage_tensor_link(const DeviceSpec& device, const RunSpec& run, int pipeline_rank) {
  const RankGrid grid = run_grid(run, device);
  for (int d = 0; d < grid.shape().data; ++d) {
    const std::vector<int> group = grid.tensor_group(grid.rank({pipeline_rank, d, 0}));
    if (!grid.within_one_node(group)) return inter_node_link(device);
  }
  return intra_node_link(device);
}

Link stage_context_link(const DeviceSpec& device, const RunSpec& run, int pipeline_rank) {
  const RankGrid grid = run_grid(run, device);
  for (int d = 0; d < grid.shape().data; ++d)
    for (int t = 0; t < grid.shape().tensor; ++t)
      if (!grid.within_one_node(grid.context_group(grid.rank({pipeline_rank, d, t, 0})))) return inter_node_link(device);
  return intra_node_link(device);
}

Link pipeline_link(const DeviceSpec& device, const RunSpec& run) {
  const RankGrid grid = run_grid(run, device);
  return link_of(device, grid, grid.pipeline_group(0));
}

double transfer_s(const Link& link, std::uint64_t bytes) {
  return link.latency_s + 8.0 * static_cast<double>(bytes) / (link.gbps * 1e9);
}

double tensor_comm_s(int calls, std::int64_t wire_bytes, int group_size, const Link& link) {
  if (group_size <= 1 || calls == 0) return 0.0;
  // An all-gather's factor, (t−1)/t: wire_bytes counts an all-reduce's buffer twice already.
  return calls * link.latency_s +
         bus_factor(Collective::all_gather, group_size) * 8.0 * static_cast<double>(wire_bytes) / (link.gbps * 1e9);
}

}  // namespace pipebench::parallel
