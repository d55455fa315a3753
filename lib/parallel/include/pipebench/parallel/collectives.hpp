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

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench::parallel {

// Gradients are reduced in buckets of at most this many bytes (PyTorch
// DDP's default, bucket_cap_mb = 25), each chunk's cut in order.
inline constexpr std::uint64_t kGradBucketBytes = 25ull << 20;

// Collectives in flight on one link one after another: each starts at the
// later of its launch and the previous one's end. One rule for the planner
// and the sim backend.
class LinkChain {
 public:
  // Adds one that is launched at `launch_s` and takes `cost_s`; returns its end.
  double add(double launch_s, double cost_s) {
    end_ = std::max(end_, launch_s) + cost_s;
    return end_;
  }
  double end() const { return end_; }

 private:
  double end_ = 0.0;
};

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

// A modelled link: what ring_time_s needs.
struct Link {
  double latency_s = 0.0;
  double gbps = 0.0;
  bool inter_node = false;
};

// The modelled machine's two link levels: the sim link (within a node) and
// the inter-node link (device.sim_inter_node_*, each the sim link's where unset).
Link intra_node_link(const DeviceSpec& device);
Link inter_node_link(const DeviceSpec& device);

// The link the gradient group of run rank `rank` (its replicas and context
// ranks, RankGrid::gradient_group) reduces over on the modelled machine (run_grid: device.ranks_per_node): the sim link when the
// group is on one node, the inter-node link (device.sim_inter_node_*, each
// the sim link's where unset) when it spans nodes. One rule for the planner
// and the sim backend.
Link data_group_link(const DeviceSpec& device, const RunSpec& run, int rank);
// The same for the tensor-parallel group of run rank `rank` (on one node
// unless ranks_per_node is below tensor_parallel, or a group straddles a node
// boundary: t 4 at 6 ranks per node puts replica 1's group on nodes 0 and 1).
Link tensor_group_link(const DeviceSpec& device, const RunSpec& run, int rank);
// The same for the context-parallel group of pipeline stage `pipeline_rank`
// (its K/V exchange), the slowest over its replicas and tensor ranks.
Link stage_context_link(const DeviceSpec& device, const RunSpec& run, int pipeline_rank);
// The slowest link any tensor group of pipeline stage `pipeline_rank` rides,
// over every replica: the inter-node link when one of them spans nodes. The
// planner prices a stage's tensor collectives on it (the replicas meet at the
// gradient synchronisation, so the step waits for the slowest one), as the
// sim backend times each rank's on its own group's (tensor_group_link).
Link stage_tensor_link(const DeviceSpec& device, const RunSpec& run, int pipeline_rank);

// The link a run's pipeline transfers (boundary activations and their
// gradients) ride: the sim link when run rank 0's pipeline group is on one
// node, else the inter-node link for every transfer (one figure per run: the
// planner's SimCosts::transfer and the sim transport's LinkModel).
Link pipeline_link(const DeviceSpec& device, const RunSpec& run);
// One point-to-point transfer of `bytes` on `link`: latency + bytes / bandwidth.
double transfer_s(const Link& link, std::uint64_t bytes);

// Seconds of `calls` ring collectives over a group of `group_size` whose
// summed traffic is `wire_bytes` in units of their buffers (an all-reduce's
// buffer counted twice; model.hpp's TensorComm): calls · latency +
// (t−1)/t · wire_bytes / bandwidth — the sum of ring_time_s over the calls.
double tensor_comm_s(int calls, std::int64_t wire_bytes, int group_size, const Link& link);

}  // namespace pipebench::parallel
