// Model description: parameter counts, FLOPs and activation bytes of every
// piece of a `gpt`, `llama` or `mlp` model, as functions of the [model] keys, the
// micro-batch size and the storage dtype. The planner reads these now; the
// backends must allocate exactly these sizes (docs/model.md has the formulas).
//
// A model is a sequence of pieces: embedding, blocks 0..L-1, head. The
// embedding lives on the first stage; the head (final LayerNorm, LM head,
// softmax cross-entropy) on the last. Embedding and LM head are untied, so the
// model is the same whatever the split. Every piece keeps its own input for
// backward; nothing is counted twice across a stage boundary.
#pragma once

#include <cstdint>

#include "pipebench/core/checked.hpp"
#include "pipebench/core/job.hpp"

namespace pipebench {

// How a run splits each stage over its tensor-parallel group
// (docs/tensor-parallel.md): `degree` t ranks, each holding 1/t of every
// block's attention heads and FFN columns and of the vocabulary; with
// `sequence_parallel` the norms' regions (and the boundary tensors) hold
// 1/t of the tokens; `selective_recompute` (recompute = "selective"): the
// attention probabilities are not kept but recomputed in the backward.
struct TensorSplit {
  int degree = 1;
  bool sequence_parallel = false;
  bool selective_recompute = false;
  // A training run: the model's dropout (model.dropout, gpt) applies.
  bool training = false;
  // Context parallelism (docs/context-parallel.md): each sequence's tokens
  // split over `context` ranks, a rank's queries attending every key, the
  // K/V exchanged as `context_comm` says.
  int context = 1;
  CpComm context_comm = CpComm::ring;
};
// A run's split (selective recomputation in training only).
TensorSplit tensor_split(const RunSpec& run);

// The cpu backend's flash attention tiles (cpu_flash_attention.hpp): 64
// query rows x 64 keys, 16 KiB of fp32 scores each, so a tile, its q, k and
// v rows (d = 64) and the probabilities stay in a core's L2.
inline constexpr int kCpuFlashTile = 64;
// Its scratch: two tiles and two rows of statistics (the model's attention
// blocks only: gpt and llama).
inline constexpr std::int64_t kCpuFlashScratchFloats = 2 * kCpuFlashTile * kCpuFlashTile + 2 * kCpuFlashTile;
// Context parallelism on the cpu backend (ModelDesc::cpu_workspace_bytes):
// all-gathered, three buffers of every context rank's K/V (gathered, in
// sequence order, their gradients) beside the rank's own packed K/V; on the
// ring, four of one rank's (the K/V held and arriving, their gradients
// likewise) and one chunk's partial output and log-sum-exp of a head.
inline constexpr int kCpuContextBuffers = 3;
inline constexpr int kCpuRingBuffers = 4;
inline bool cpu_flash_tiles(const ModelSpec& m) { return m.attention == Attention::flash && m.kind != ModelKind::mlp; }

// The collectives of one tensor-parallel group for one piece and one
// micro-batch, in one pass: how many, and their summed ring traffic in
// units of the buffer (an all-reduce of B bytes counts 2B, an all-gather or
// reduce-scatter of B bytes — the whole buffer — B). On a ring of t ranks
// they take calls·latency + (t−1)/t · wire_bytes / bandwidth
// (parallel/collectives.hpp's formula); none when t = 1.
struct TensorComm {
  int calls = 0;
  std::int64_t wire_bytes = 0;
  TensorComm& operator+=(const TensorComm& o) {
    calls += o.calls;
    wire_bytes = (CheckedInt(wire_bytes) + o.wire_bytes).value();
    return *this;
  }
};

// What one piece (or a sum of pieces) costs for one micro-batch. Integer
// figures are computed in checked arithmetic: a model too large for 64-bit
// counts throws ArithmeticOverflow (core/checked.hpp), never wraps.
struct Cost {
  std::int64_t params = 0;              // trainable parameters (elements)
  double forward_flops = 0.0;           // matmul FLOPs (2 per multiply-add)
  double backward_flops = 0.0;          // input + weight gradients: 2x forward
  std::int64_t activation_bytes = 0;    // kept from forward until backward
  // A split backward (zero-bubble schedules): the output gradients the
  // weight-gradient pass (W) needs, kept from B to W on top of the
  // activations (docs/model.md, "Split backward").
  std::int64_t split_stash_bytes = 0;
  // recompute = "selective": the attention core's forward FLOPs run again in
  // the backward (not model FLOPs; docs/model.md, "Conventions").
  double recompute_flops = 0.0;
  // Tensor parallelism: the collectives of the forward, of the input
  // gradients (B) and of the weight gradients (W, or B when not split: the
  // re-gathers of sequence-parallel inputs).
  TensorComm tp_forward, tp_input_grad, tp_weight_grad;

  Cost& operator+=(const Cost& o) {
    params = (CheckedInt(params) + o.params).value();
    forward_flops += o.forward_flops;
    backward_flops += o.backward_flops;
    activation_bytes = (CheckedInt(activation_bytes) + o.activation_bytes).value();
    split_stash_bytes = (CheckedInt(split_stash_bytes) + o.split_stash_bytes).value();
    recompute_flops += o.recompute_flops;
    tp_forward += o.tp_forward;
    tp_input_grad += o.tp_input_grad;
    tp_weight_grad += o.tp_weight_grad;
    return *this;
  }
};

// Bytes per parameter held by each training state, by optimizer and dtype.
// fp32: params 4, grads 4, AdamW m+v 8, SGD 0.
// bf16/fp16: params 2, grads 4 (accumulated in fp32), AdamW fp32
// master+m+v 12, SGD fp32 master 4.
struct StateBytes {
  int params;
  int grads;
  int optimizer;
};
StateBytes state_bytes_per_param(OptimizerKind opt, DType dtype);

// Of a stage's `params` parameters, how many a rank keeps optimizer state
// (AdamW m, v and the fp32 master copy) for: all of them, or with
// optimizer_sharding = "zero1" over d = grad_group() ranks (the replicas, times the context ranks) its shard,
// ceil(params / d) — the stage's flat buffer cut into d equal shards, the
// last padded (docs/parallel.md, "Memory").
std::int64_t optimizer_shard_params(const RunSpec& run, std::int64_t params);

// The training state one rank holds at its step's peak for its chunks'
// `params` parameters (P), by category, as the systems each mode follows
// document it (docs/parallel.md, "Memory"); S = optimizer_shard_params,
// p, g, k = state_bytes_per_param's params, grads, optimizer:
//   none   P·p, P·g, P·k
//   zero1  P·p, P·g, S·k   (Megatron-LM's distributed optimizer: the fp32
//                           gradient buffer whole, reduce-scattered in place)
//   zero2  P·p, P·p + S·4, S·k
//   fsdp   S·4 + U·p, U·p + S·4, S·(k − m)
// zero2 and fsdp follow PyTorch FSDP2 with torch.distributed.pipelining:
// the unsharded gradients accumulate over the step's micro-batches in the
// parameters' dtype (requires_gradient_sync only for the last backward) and
// are reduce-scattered in fp32 (reduce_dtype) into the rank's shard; fsdp
// resharding after the forward (FSDP2 without pipelining) reduce-scatters
// each layer's as its backward produces them, so only U·p are held. fsdp's
// parameters are the fp32 shard (which is also the master copy: m = 4 bytes
// of k with a 16-bit dtype, else 0) and the unsharded copy U of the
// parameters in use: all P without resharding after the forward, else the
// `largest_unit` (the largest layer's parameters) twice — the one running
// and the one gathered ahead.
struct TrainingState {
  std::int64_t params = 0, grads = 0, optimizer = 0;
};
// `sharding`: the run's mode where it shards (shards_optimizer), else none.
TrainingState training_state_bytes(OptimizerSharding sharding, int replicas, bool reshard_after_forward,
                                   std::int64_t params, StateBytes per, std::int64_t largest_unit);
// The same for a run (inference: the parameters alone).
TrainingState training_state_bytes(const RunSpec& run, std::int64_t params, StateBytes per, std::int64_t largest_unit);

// The vocabulary rows the embedding and the LM head hold over a tensor
// group of t: `vocab`, and with t > 1 padded up to a multiple of 128·t
// (Megatron-LM's --make-vocab-size-divisible-by 128, times t) so that every
// rank holds the same number of rows; the padding rows are never looked up
// and their logits are masked out of the softmax.
std::int64_t padded_vocab(const ModelSpec& spec, int tensor_parallel);
inline constexpr int kVocabPadMultiple = 128;

// Every figure is one rank's: with a tensor split, one tensor-parallel
// rank's share of the piece (docs/tensor-parallel.md).
class ModelDesc {
 public:
  // `dtype` is the storage dtype actually used (the cpu backend: fp32).
  ModelDesc(const ModelSpec& spec, DType dtype, TensorSplit split = {});

  const ModelSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }
  const TensorSplit& split() const { return split_; }
  // Whether dropout runs: model.dropout > 0 in a training run (gpt).
  bool dropout() const { return spec_.dropout > 0.0 && split_.training; }
  // Tokens of one micro-batch a rank holds in the norms' regions: T, or T/t
  // with sequence parallelism.
  std::int64_t region_tokens(int micro_batch) const;
  // The tokens of a micro-batch this rank computes: b·s, or b·s/c with
  // context parallelism (the rows of every per-token activation but the
  // sequence-parallel regions', region_tokens).
  std::int64_t tokens(int micro_batch) const;
  // Context parallelism: the K/V one block of this rank holds for a
  // micro-batch, e·tokens·2kv/t bytes (gpt: kv = h) — what the ring passes
  // on at each step, and the rank's part of an all-gather.
  std::int64_t context_kv_bytes(int micro_batch) const;
  // The attention core's model FLOPs of one block (QKᵀ and P·V over all
  // s x s pairs of the rank's heads; 1/c of them with context parallelism).
  double attention_core_flops(int micro_batch) const;

  Cost embedding(int micro_batch) const;
  Cost block(int micro_batch) const;   // all blocks of a model are identical
  Cost head(int micro_batch) const;

  // Sum of the pieces a stage holds: blocks [first, first+count), plus the
  // embedding and/or head.
  Cost stage(int micro_batch, int num_layers, bool has_embedding, bool has_head) const;
  // The most parameters one of those pieces holds (FSDP's gather unit).
  std::int64_t largest_piece_params(int num_layers, bool has_embedding, bool has_head) const;

  // One stage-boundary tensor (activation forward, its gradient backward):
  // micro_batch x seq_len x hidden elements (with sequence parallelism the
  // rank's 1/t of the tokens; without, each tensor rank sends the whole
  // tensor to its counterpart on the next stage).
  std::int64_t boundary_bytes(int micro_batch) const;

  // Full activation recomputation, one piece a checkpoint (Megatron-LM's
  // per-layer checkpoints; docs/model.md): what a chunk keeps per micro-batch
  // from F to B instead of its activations — every piece's input: the token
  // ids for the embedding, one boundary-sized tensor (the rank's region
  // tokens) for each block and for the head.
  std::int64_t recompute_kept_bytes(int micro_batch, int num_layers, bool has_embedding, bool has_head) const;
  // ... and the activations of the one piece that runs at a time, while F
  // runs it and while B recomputes it and runs its backward: the chunk's
  // largest piece's (the backends' recomputation slab).
  std::int64_t recompute_piece_bytes(int micro_batch, int num_layers, bool has_embedding, bool has_head) const;

  // The whole model's (not a rank's: no tensor split, no vocabulary padding).
  std::int64_t total_params() const;

  // Communication buffers of one chunk (the runner's design, docs/runner.md,
  // "Boundary buffers"): with a previous stage one activation receive buffer
  // and, training, `prev_send_slots` gradient send buffers; with a next stage,
  // training, one gradient receive buffer and `next_send_slots` activation
  // send buffers (inference: the send buffers only). The slot counts are the
  // schedule's (schedule/send_slots.hpp: a send buffer is reused once the
  // rank knows its tensor arrived).
  std::int64_t comm_bytes(int micro_batch, int prev_send_slots, int next_send_slots, bool has_prev, bool has_next,
                          bool train) const;

  // The cpu backend's backward temporaries (training only), allocated once
  // per stage: tokens·(ffn_hidden + 7·hidden) + seq_len² elements (gradients
  // through GELU, a hidden-sized buffer, the residual, q/k/v, two ping-pong
  // stage gradients, one attention score matrix). The sim backend has none.
  // llama: 4·s·(h/heads) bytes of rotary table (inference too) + in training
  // tokens·(3·ffn_hidden + 6·hidden + 2·kv) + seq_len² elements (docs/model.md).
  // Tensor-parallel (docs/tensor-parallel.md): the rank's widths; with
  // selective recomputation the rank's attention probabilities; with t > 1
  // 12·tokens bytes of cross-entropy statistics and with sequence
  // parallelism two [tokens, hidden] buffers (both in inference too).
  std::int64_t cpu_workspace_bytes(int micro_batch, bool train) const;
  // llama: the rotary table both real backends keep, fp32 cos and sin of
  // seq_len x d/2 each (4·seq_len·d bytes, d = hidden/heads); 0 for gpt.
  std::int64_t rope_table_bytes() const;

  // The cuda backend's workspace, allocated once per stage: always
  // kCudaNormSlotsBytes of gradient-norm partial sums, 4·tokens bytes of
  // fp32 per-token losses and (llama) the rotary table; in training then the
  // embedding backward's token order (cuda_embedding_order_bytes) and the
  // cpu backend's temporaries with one attention score matrix per head
  // (gpt tokens·(ffn_hidden + 7·hidden), llama tokens·(3·ffn_hidden +
  // 6·hidden + 2·kv), + heads·seq_len² elements). Tensor-parallel: the
  // rank's widths and heads; with selective recomputation the attention
  // probabilities of the micro-batch's heads of the rank (b·heads/t·seq_len²
  // elements); with t > 1, also in inference, an fp32 [tokens, hidden]
  // buffer for the group's sums and 12·tokens bytes of cross-entropy
  // statistics, and with sequence parallelism a [tokens, hidden] buffer of
  // the storage dtype (the parallel regions' gathered inputs).
  static constexpr std::int64_t kCudaNormSlotsBytes = 256 * 8;
  std::int64_t cuda_workspace_bytes(int micro_batch, bool train) const;
  // int32: the positions sorted by token id, the segment starts and the
  // segments' token ids (at most 3·tokens + 1), padded: 4·(3·tokens + 4).
  std::int64_t cuda_embedding_order_bytes(int micro_batch) const;

  // The workspace of `backend` (sim: none).
  std::int64_t workspace_bytes(BackendKind backend, int micro_batch, bool train) const;

 private:
  ModelSpec spec_;
  DType dtype_;
  TensorSplit split_;
};

}  // namespace pipebench
