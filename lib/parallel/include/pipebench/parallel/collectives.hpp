// The cost model of the data-parallel collectives (docs/parallel.md): ring
// algorithms, as nccl-tests reports them. One formula for the planner's step
// time and the sim backend's modelled synchronisation:
//   time = latency + factor · bytes / bandwidth,
//   factor (the "bus factor") = 2(d−1)/d for an all-reduce, (d−1)/d for a
//   reduce-scatter or an all-gather,
// and the bus bandwidth of a measured collective = factor · bytes / time
// (nccl-tests' busbw: algbw · factor), comparable with the link's speed
// whatever d is.
#pragma once

#include <cstdint>

namespace pipebench::parallel {

enum class Collective { all_reduce, reduce_scatter, all_gather };

// 0 for a group of one (nothing moves).
double bus_factor(Collective c, int group_size);

// Seconds for `bytes` (the whole buffer: an all-reduce's input, a
// reduce-scatter's input, an all-gather's output) over a group of
// `group_size` on a link of `latency_s` and `gbps` gigabits per second; 0 for
// a group of one.
double ring_time_s(Collective c, std::uint64_t bytes, int group_size, double latency_s, double gbps);

// nccl-tests' bus bandwidth in bytes per second; 0 when nothing was timed.
double bus_bandwidth(Collective c, std::uint64_t bytes, int group_size, double seconds);

}  // namespace pipebench::parallel
