#include "pipebench/parallel/collectives.hpp"

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

}  // namespace pipebench::parallel
