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

Link data_group_link(const DeviceSpec& device, const RunSpec& run, int rank) {
  const RankGrid grid = run_grid(run, device);
  Link l{device.sim_link_latency_us * 1e-6, device.sim_link_gbps, false};
  if (grid.within_one_node(grid.data_group(rank))) return l;
  l.inter_node = true;
  if (device.sim_inter_node_latency_us >= 0.0) l.latency_s = device.sim_inter_node_latency_us * 1e-6;
  if (device.sim_inter_node_gbps > 0.0) l.gbps = device.sim_inter_node_gbps;
  return l;
}

}  // namespace pipebench::parallel
