// The gradient buckets of grad_sync = "overlap" (docs/parallel.md, "Bucketed
// overlap"): a chunk's gradients grouped, in the order its backward produces
// them (the head's first, then the blocks from the last, the embedding's
// last), into buckets of at least grad_bucket_bytes; each bucket's collective
// is launched as soon as the chunk's last gradient action (the last
// micro-batch's B, or W with a split backward) has passed the bucket's
// earliest layer, and overlaps the rest of that action. Megatron-Core's
// distributed data parallelism (overlap_grad_reduce) and PyTorch's DDP
// bucket the same way. One layout for the planner and the runtime.
#pragma once

#include <cstdint>
#include <vector>

namespace pipebench::parallel {

// Megatron-Core's default bucket (DistributedDataParallelConfig.bucket_size
// unset): max(40,000,000, 1,000,000 × d) parameters, "larger DP sizes need
// larger buckets to ensure collectives do not become latency-bound"
// (docs.nvidia.com/megatron-core/developer-guide/latest/apidocs/core/
// core.distributed.distributed_data_parallel_config.html), here in bytes at
// `grad_bytes` per gradient element.
std::uint64_t default_grad_bucket_bytes(int data_parallel, int grad_bytes);

// One layer of a chunk, in backward order: its parameters and the cost of its
// part of the gradient action (any unit: only ratios are used).
struct GradLayer {
  std::int64_t params = 0;
  double cost = 0.0;
};

struct GradBucket {
  int first = 0, last = 0;  // the layers it holds (indices into the backward-order list)
  std::int64_t params = 0;  // gradient elements
  std::uint64_t bytes = 0;  // params × grad_bytes
  // How far into the gradient action its gradients are final: the cost
  // before the action's layers (`lead`, e.g. full recomputation's forward)
  // plus the layers' through `last`, over the action's whole cost.
  double ready = 1.0;
};

// The buckets of one chunk in launch order: whole layers (a layer is never
// split, as Megatron-Core never splits a parameter), a bucket closed once it
// holds at least `bucket_bytes`, the last one with what is left. Layers with
// no parameters join the next bucket. `lead`: the action's cost before its
// first layer's gradients begin (same unit as the layers'). Empty when no
// layer has parameters.
std::vector<GradBucket> grad_buckets(const std::vector<GradLayer>& layers, std::uint64_t bucket_bytes, int grad_bytes,
                                     double lead = 0.0);

// ZeRO's parameter all-gathers inside the step's first forward of a chunk
// (docs/parallel.md, "Parameter gathers"): the gradient buckets again, now in
// forward order (the last bucket, which holds the chunk's first layers,
// first), each gathered before the forward reaches its earliest layer.
struct ParamGather {
  int bucket = 0;   // index into the chunk's buckets (grad_buckets)
  double at = 0.0;  // the share of the forward's cost before the bucket's earliest layer
};
// `forward_costs`: the chunk's layers in forward order (the reverse of the
// buckets' backward-order list), any unit. In gather order, `at` ascending.
std::vector<ParamGather> param_gathers(const std::vector<GradBucket>& buckets, const std::vector<double>& forward_costs);

// FSDP resharding after the forward (optimizer_sharding = "fsdp",
// fsdp_reshard_after_forward = true): every forward and backward gathers
// its layers' parameters again, one layer (FSDP unit: torchtitan wraps each
// transformer block) at a time. One action over its layers in the order it
// runs them: each layer's compute seconds and its all-gather's ring time.
// Layer 0's gather is issued at the action's start, each next one when the
// layer before it starts computing (FSDP2's one-ahead prefetch), after the
// previous gather on the link; a layer computes once its gather has ended.
// Returns the seconds the compute waits for the gathers in all (the link
// taken as free for them: the gradient reductions in flight are not counted).
double prefetched_gather_wait(const std::vector<double>& compute_s, const std::vector<double>& gather_s);

}  // namespace pipebench::parallel
