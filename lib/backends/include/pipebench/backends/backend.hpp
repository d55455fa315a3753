// The compute side of one pipeline stage on one rank. The executor
// (runtime/executor.hpp) drives it action by action; the sim (src/sim), cpu
// (src/cpu) and cuda (src/cuda) backends implement it without the executor
// changing.
//
// Contract, per step: begin_step; then for each schedule action in order,
// forward / backward / weight_grad of (micro-batch, chunk), with the boundary tensors
// moved by the Transport through recv_buffer()/send_buffer(); then
// grad_sq_norm_by_piece() and optimizer_step(). Every byte a backend holds is
// accounted in its MemoryTracker, in the sizes of the model description.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipebench/backends/tensor_group.hpp"
#include "pipebench/parallel/context_exchange.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/plan/memory.hpp"
#include "pipebench/plan/partition.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/send_slots.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

// A stage-boundary tensor as the transport sees it. `data` may be null with
// `bytes` 0 when the backend models the tensor without holding it (sim);
// `logical_bytes` is always the size the model says it has.
struct Buffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::uint64_t logical_bytes = 0;
};

// What a rank must build: its model chunks (one for most schedules; several
// for interleaved and V schedules), each a contiguous range of the model
// that is virtual stage chunk_stage[c] of num_virtual_stages.
struct StageSpec {
  int rank = 0;                 // rank in the run
  int num_stages = 1;           // ranks in the run (pipeline_size)
  std::vector<StageRange> chunks;  // layers, embedding, head of each chunk
  std::vector<int> chunk_stage;    // the virtual stage of each chunk, increasing
  int num_virtual_stages = 1;
  int micro_batch_size = 1;
  int num_microbatches = 1;     // per replica
  // Data parallelism (docs/parallel.md): this rank's replica of `replicas`.
  // Replica r's micro-batch j is micro-batch r·m + j of the step's d·m (its
  // data stream), and every replica scales its loss gradient by 1/(d·m·T), so
  // that the replicas' summed gradients are the single-replica run's on the
  // same d·m micro-batches.
  int replica = 0;
  int replicas = 1;
  // Context parallelism (docs/context-parallel.md): this rank's place in its
  // context group of `context` ranks, and the group's exchange. The
  // gradients are reduced, and the optimizer state sharded, over the
  // replicas' context ranks: grad_rank() of grad_group().
  int context_rank = 0, context = 1;
  parallel::ContextGroup context_group;
  int grad_rank() const { return replica * context + context_rank; }
  int grad_group() const { return replicas * context; }
  // optimizer_sharding other than "none" with replicas (training): the
  // optimizer state and step cover this replica's shard only (parallel/shards.hpp).
  bool shard_optimizer = false;
  // Its mode (none unless shard_optimizer) and, for fsdp, whether a layer's
  // gathered parameters are freed after its forward (model.hpp
  // training_state_bytes: what the rank holds of each).
  OptimizerSharding sharding = OptimizerSharding::none;
  bool reshard_after_forward = false;
  // Tensor parallelism (docs/tensor-parallel.md): this rank's place in its
  // tensor group of `tensor.degree`, and the link the group's collectives
  // ride (parallel::tensor_group_link; the sim backend times them on it).
  TensorSplit tensor;
  int tensor_rank = 0;
  parallel::Link tensor_link;
  // Data parallelism: the link the data group's collectives ride
  // (parallel::data_group_link; the sim backend times FSDP's per-layer
  // gathers on it, sharding fsdp with reshard_after_forward).
  parallel::Link data_link;
  RunMode mode = RunMode::train;
  DType dtype = DType::fp32;    // storage dtype
  bool split_backward = false;  // the schedule has W actions: B is input-grad only
  // Full activation recomputation (training), one piece a checkpoint: F keeps
  // only each piece's input per micro-batch; B runs each piece's forward
  // again before its backward (docs/model.md).
  bool recompute = false;
  // The transport reads and writes device memory itself (NCCL). When false,
  // a device backend hands the transport host copies of its boundary tensors.
  bool transport_uses_device_memory = false;
  // The data-parallel synchronisation reads and writes device memory itself
  // (NCCL over the data group, runtime/data_group_nccl.hpp): gradients()
  // hands out the device's own buffer. When false, a device backend hands
  // it host copies (pinned staging, summed over MPI).
  bool gradients_in_device_memory = false;
  // The send buffers and their reuse (schedule/send_slots.hpp). Left empty
  // (tests building one_chunk specs): one send buffer per micro-batch.
  RankSendSlots send_slots;

  int num_chunks() const { return static_cast<int>(chunks.size()); }
  // The micro-batch of the step's data that this replica's micro-batch `mb` is.
  int data_microbatch(int mb) const { return replica * num_microbatches + mb; }
  // The global position in the step's batch of this micro-batch's first
  // sample: the data is keyed by it (model/synthetic.hpp), so any split of one
  // global batch over micro-batches and replicas sees the same samples.
  std::int64_t first_sample(int mb) const {
    return static_cast<std::int64_t>(data_microbatch(mb)) * micro_batch_size;
  }
  // Micro-batches per optimizer step over every replica: the loss's divisor.
  // With context parallelism each rank holds 1/c of every micro-batch's
  // tokens: its loss is scaled by 1/(d·m·c·T) too, T its own tokens.
  int step_microbatches() const { return num_microbatches * replicas * context; }
  // One chunk per rank (tests, benchmarks): `range` is virtual stage `rank`
  // of `num_stages`; set rank and num_stages first.
  void one_chunk(const StageRange& range) {
    chunks = {range};
    chunk_stage = {rank};
    num_virtual_stages = num_stages;
  }
  // Chunk c takes an activation from the previous virtual stage / gives one
  // to the next (whichever rank holds it: a neighbour on the same rank still
  // goes through the boundary buffers, copied by the executor).
  bool receives(int c) const { return chunk_stage[static_cast<std::size_t>(c)] > 0; }
  bool sends(int c) const { return chunk_stage[static_cast<std::size_t>(c)] + 1 < num_virtual_stages; }
  // Chunk c's send buffers of activations (F) or gradients (B), and the one
  // the send of (kind, mb, c) uses.
  int send_pool(ActionKind kind, int c) const {
    if (send_slots.f_pool.empty()) return num_microbatches;
    return (kind == ActionKind::F ? send_slots.f_pool : send_slots.b_pool)[static_cast<std::size_t>(c)];
  }
  std::size_t send_slot(ActionKind kind, int mb, int c) const {
    return static_cast<std::size_t>(send_slots.f_slot.empty() ? mb : send_slots.slot(kind, mb, c));
  }
};

// A chunk's flat fp32 buffer as the data-parallel synchronisation sees it:
// its accumulated gradients (summed over the replicas in place), or with
// ZeRO-1 its parameters (all-gathered): `count` elements at `data` (host
// memory; device memory where StageSpec::gradients_in_device_memory); `data`
// null and `count` 0 where the backend models them (sim). `logical_bytes`:
// their size in the model's dtype for it, what a collective moves.
struct FlatRegion {
  float* data = nullptr;
  std::size_t count = 0;
  std::uint64_t logical_bytes = 0;
};

// What pipeline rank `rank` of replica `replica` (tensor rank `tensor_rank`)
// of `plan` builds: its chunks of the partition, the run's micro-batching,
// mode and storage dtype, split backward when the schedule has W, its tensor
// split (the link is the caller's to set).
StageSpec stage_spec(const RunPlan& plan, int rank, int replica, bool transport_uses_device_memory, int tensor_rank = 0,
                     int context_rank = 0);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether forward on the last stage produces a real loss value.
  virtual bool computes_loss() const = 0;

  // Allocates and initialises the stage (parameters, gradients, optimizer
  // state, communication buffers). May throw OutOfMemoryError.
  virtual void build(const StageSpec& spec) = 0;
  // Tensor parallelism (spec.tensor.degree > 1), before build: the group
  // whose collectives the layers call. A backend that executes tensor
  // parallelism keeps it (not owned); the others model the collectives
  // (sim) or refuse the run (runner.cpp's not_executed).
  virtual void set_tensor_group(TensorGroup* /*group*/) {}
  // Context parallelism (spec.context > 1), before build: the group over
  // which the attention's K/V are all-gathered and their gradients
  // reduce-scattered (the same collectives as a tensor group's).
  virtual void set_context_group(TensorGroup* /*group*/) {}
  // The cuda backend with NCCL: the same group on device memory, before
  // build (null: its layers reduce host-staged copies over the group above).
  virtual void set_device_tensor_group(DeviceTensorGroup* /*group*/) {}
  // The seconds spent in tensor-parallel collectives since the last call
  // (the executor takes it once per step): measured (cpu, cuda) or modelled (sim).
  virtual double take_tensor_comm_s() { return 0.0; }
  // The layers actually built, 0-based inclusive, and their parameter count.
  virtual std::pair<int, int> built_layers() const = 0;
  virtual std::int64_t built_params() const = 0;

  // `deadline_s` (now_s() clock) is when the step times out; long actions
  // must not run past it (they throw StepTimeoutError).
  virtual void begin_step(int step, double deadline_s) = 0;
  // Actions on chunk `chunk` (0 .. num_chunks-1) of this rank.
  virtual void forward(int step, int microbatch, int chunk) = 0;
  virtual void backward(int step, int microbatch, int chunk) = 0;
  virtual void weight_grad(int step, int microbatch, int chunk) = 0;
  // grad_sync = "overlap" (parallel/grad_buckets.hpp): during the following
  // gradient actions on chunk `chunk` (B, or W with a split backward),
  // `on_final(pieces)` once each piece's gradients for the step are final,
  // pieces counted in backward order (the head's first), so that the
  // replicas' buckets launch inside the action. Set before the chunk's last
  // gradient action, cleared (an empty function) after it. A backend that
  // cannot tell inside an action (sim: modelled; cuda) never calls it, and
  // the executor posts the buckets at the action's end. (cuda: it calls it
  // as each piece's kernels are enqueued, where the gradients are reduced in
  // device memory; the reduction follows them on the device, device_stream.)
  virtual void set_gradient_hook(int /*chunk*/, std::function<void(int pieces)> /*on_final*/) {}
  // Sharded parameters gathered inside the step's first forwards
  // (docs/parallel.md, "Parameter gathers"), for the next forward of chunk
  // `chunk` only. A backend that computes (cpu) calls `before(piece)` before
  // each piece's forward (pieces in forward order, the embedding's first),
  // which returns once the piece's parameters are there; cleared with an
  // empty function. A modelled one (sim) is given the gates instead
  // (schedule/simulate.hpp: `ready` on the run's clock) and waits at them as
  // the planner's simulation does (gated_end). Either way the action's time
  // in them is the backend's take_gate_wait_s() after it, per gate in
  // gate_waits(). The default refuses: the backend cannot gather.
  virtual void set_forward_hook(int chunk, std::function<void(int piece)> before);
  virtual void set_forward_gates(int chunk, std::vector<Gate> gates);
  // The last forward's seconds waiting at its gates (modelled), each gate's; 0 and none after.
  virtual double take_gate_wait_s() { return 0.0; }
  virtual const std::vector<double>& gate_waits() const;
  // The stream the backend's kernels run on (cuda: a cudaStream_t), which
  // a collective on device memory must follow; null on host backends.
  virtual void* device_stream() { return nullptr; }
  // The rank holding the last virtual stage, after its forward(mb): that
  // micro-batch's loss.
  virtual double loss(int microbatch) const = 0;
  // Adds the sum of squares of each of this stage's pieces' accumulated
  // gradients at per_piece[piece id] (0 embedding, 1+i block i, layers+1
  // head; the vector has layers+2 entries). Reducing these per-piece sums
  // across ranks is exact (one contributor per entry), and summing them in
  // piece order makes the global norm bit-identical for every split.
  virtual void grad_sq_norm_by_piece(std::vector<double>& per_piece) const = 0;
  // Data parallelism: chunk `chunk`'s gradients, for the replicas to sum
  // (runtime/grad_sync.hpp) between the last backward and the gradient norm.
  // The default throws ConfigError: the backend cannot synchronise.
  virtual FlatRegion gradients(int chunk);
  // After a failure with a collective still pending on them (MPI cannot
  // cancel a collective; a peer may still complete it): the gradient and
  // parameter memory (a sharded run's all-gathers write the parameters) must
  // outlive the backend, so it is never freed (one set per failed run).
  virtual void abandon_gradients() {}
  // After the synchronisation completed (every region gradients() returned
  // this step now holds the replicas' sum): a backend that handed out host
  // copies of its gradients (cuda: pinned host staging) takes the sums back.
  virtual void gradients_synchronised() {}
  // Sharded: chunk `chunk`'s parameters, for the replicas to all-gather after
  // their sharded optimizer steps (the same fields as gradients()).
  virtual FlatRegion parameters(int chunk);
  // After that all-gather (every region parameters() returned this step now
  // holds every replica's part): a backend that handed out host copies
  // (cuda: fp32 staging) takes them back.
  virtual void parameters_gathered() {}
  // zero2 and fsdp (model.hpp training_state_bytes): where the rank keeps
  // its shard of chunk `chunk`'s reduced gradients (zero2, fsdp) and of its
  // parameters, the copy its optimizer steps (fsdp) — element i of the
  // chunk's shard part at data[i], `count` of them. Null data: the shard
  // lives in place, in gradients() / parameters() (zero1; every backend
  // that does not keep them apart).
  virtual FlatRegion gradient_shard(int /*chunk*/) { return {}; }
  virtual FlatRegion parameter_shard(int /*chunk*/) { return {}; }
  // Applies the step's update with gradients multiplied by `grad_scale`
  // (clipping), then clears the gradients.
  virtual void optimizer_step(int step, double grad_scale) = 0;

  // F: where the activation from the previous stage lands (recv) / the output
  // activation to send; B: the gradient from the next stage (recv) / the
  // input gradient to send.
  virtual Buffer recv_buffer(ActionKind kind, int microbatch, int chunk) = 0;
  virtual Buffer send_buffer(ActionKind kind, int microbatch, int chunk) = 0;
  // A boundary tensor between two chunks of this rank (the turn of a V), no
  // transport: `kind`'s send buffer of (microbatch, from_chunk) into the
  // receive buffer of `to_chunk`, before to_chunk's action. The default
  // copies host memory; a device backend copies on its device.
  virtual void hand_over(ActionKind kind, int microbatch, int from_chunk, int to_chunk);

  // Device time of the latest forward/backward/weight_grad measured by the
  // backend itself (CUDA events), or a negative value when it has no such
  // clock (the executor then uses its host clock).
  virtual double last_action_device_s() const { return -1.0; }

  virtual const MemoryTracker& memory() const = 0;
  // Micro-batches whose activations are held at once, at most, so far.
  virtual int peak_live_activations() const = 0;
  // Device memory in use as the driver reports it (cudaMemGetInfo: total -
  // free, the whole device, other processes on it included), beside the
  // tracker's own count: before this backend allocated anything, and the most
  // seen since (after the build, at each step's start and optimizer step,
  // and when asked). -1 on backends without a device.
  virtual std::int64_t device_used_before_bytes() const { return -1; }
  virtual std::int64_t device_used_peak_bytes() const { return -1; }

  // The clock this rank's run is timed on (core/clock.hpp): the wall clock,
  // or the sim backend's virtual clock (device.sim_clock = "virtual"), which
  // its actions advance. The executor and the transport read and advance the
  // same clock.
  RunClock& clock() { return clock_; }

 protected:
  RunClock clock_ = RunClock::wall();
};

// The backend named by job.device.backend for `rank`; throws ConfigError for
// one this build does not have (e.g. cuda without a CUDA build).
std::unique_ptr<Backend> make_backend(const Job& job, int rank);

}  // namespace pipebench
