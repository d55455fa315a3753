#include "pipebench/model/model.hpp"

#include <algorithm>

namespace pipebench {

namespace {
// Every integer below is a CheckedInt: + and * throw ArithmeticOverflow
// instead of wrapping (core/checked.hpp).
using I = CheckedInt;
constexpr std::int64_t kTokenIdBytes = 4;  // int32 token ids / targets
constexpr std::int64_t kLnStatsBytes = 8;  // one LayerNorm's fp32 mean and 1/std, per token
constexpr std::int64_t kRmsStatsBytes = 4; // one RMSNorm's fp32 1/rms, per token
constexpr std::int64_t kLseBytes = 4;      // flash attention's fp32 log-sum-exp, per row of each head

// One tensor-parallel collective of a `bytes` buffer over t ranks (none at t = 1).
TensorComm all_reduce(int t, const I& bytes) { return t > 1 ? TensorComm{1, (I(2) * bytes).value()} : TensorComm{}; }
// An all-gather or a reduce-scatter of the whole `bytes` buffer.
TensorComm gather(int t, const I& bytes) { return t > 1 ? TensorComm{1, bytes.value()} : TensorComm{}; }
TensorComm times(TensorComm c, int n) {
  c.calls *= n;
  c.wire_bytes = (I(c.wire_bytes) * n).value();
  return c;
}

// The collectives of a block with `regions` parallel regions (attention and
// MLP: 2; the mlp model's one) over a tensor group (docs/tensor-parallel.md):
// without sequence parallelism an all-reduce at the end of each region's
// forward and one of its input gradient; with it an all-gather in and a
// reduce-scatter out of each region, their conjugates in the backward, and
// the weight gradients' re-gather of each region's sequence-split input.
void block_comm(Cost& c, int regions, int t, bool sp, const I& boundary_full) {
  if (!sp) {
    c.tp_forward = times(all_reduce(t, boundary_full), regions);
    c.tp_input_grad = c.tp_forward;
    return;
  }
  c.tp_forward = times(gather(t, boundary_full), 2 * regions);
  c.tp_input_grad = c.tp_forward;
  c.tp_weight_grad = times(gather(t, boundary_full), regions);
}
}  // namespace

TensorSplit tensor_split(const RunSpec& run) {
  return {run.tensor_parallel, run.sequence_parallel,
          run.mode == RunMode::train && run.recompute == Recompute::selective, run.mode == RunMode::train,
          run.context_parallel, run.cp_comm};
}

std::int64_t padded_vocab(const ModelSpec& spec, int t) {
  if (t <= 1) return spec.vocab;
  const std::int64_t unit = (I(kVocabPadMultiple) * t).value();
  return (I((spec.vocab + unit - 1) / unit) * unit).value();
}

StateBytes state_bytes_per_param(OptimizerKind opt, DType dtype) {
  const bool fp32 = dtype == DType::fp32;
  const int p = dtype_bytes(dtype);
  // Gradients accumulate in fp32 whatever the storage dtype (the cuda
  // backend's cuBLAS weight gradients write fp32; docs/cuda-backend.md).
  if (opt == OptimizerKind::adamw) return {p, 4, fp32 ? 8 : 12};
  return {p, 4, fp32 ? 0 : 4};
}

std::int64_t optimizer_shard_params(const RunSpec& run, std::int64_t params) {
  if (!shards_optimizer(run)) return params;
  return (params + run.grad_group() - 1) / run.grad_group();
}

TrainingState training_state_bytes(OptimizerSharding sharding, int replicas, bool reshard, std::int64_t params,
                                   StateBytes per, std::int64_t largest_unit) {
  const CheckedInt P = params;
  const CheckedInt S = sharding == OptimizerSharding::none ? params : (params + replicas - 1) / replicas;
  TrainingState t{(P * per.params).value(), (P * per.grads).value(), (S * per.optimizer).value()};
  switch (sharding) {
    case OptimizerSharding::none:
    case OptimizerSharding::zero1: break;
    case OptimizerSharding::zero2: t.grads = (P * per.params + S * 4).value(); break;
    case OptimizerSharding::fsdp: {
      const CheckedInt unsharded = reshard ? CheckedInt(std::min(params, 2 * largest_unit)) : P;
      t.params = (S * 4 + unsharded * per.params).value();
      t.grads = (unsharded * per.params + S * 4).value();
      const int master = per.params == 4 ? 0 : 4;  // a 16-bit dtype's fp32 master copy is the shard itself
      t.optimizer = (S * std::max(0, per.optimizer - master)).value();
      break;
    }
  }
  return t;
}

TrainingState training_state_bytes(const RunSpec& run, std::int64_t params, StateBytes per, std::int64_t largest_unit) {
  if (run.mode != RunMode::train) return {(CheckedInt(params) * per.params).value(), 0, 0};
  return training_state_bytes(shards_optimizer(run) ? run.optimizer_sharding : OptimizerSharding::none, run.grad_group(),
                              reshard_after_forward(run), params, per, largest_unit);
}

ModelDesc::ModelDesc(const ModelSpec& spec, DType dtype, TensorSplit split) : spec_(spec), dtype_(dtype), split_(split) {
  if (split_.degree < 1) split_.degree = 1;
  if (split_.context < 1) split_.context = 1;
}

std::int64_t ModelDesc::tokens(int b) const { return (I(b) * (spec_.seq_len / split_.context)).value(); }

std::int64_t ModelDesc::region_tokens(int b) const {
  return split_.sequence_parallel ? tokens(b) / split_.degree : tokens(b);
}

double ModelDesc::attention_core_flops(int b) const {
  if (spec_.kind == ModelKind::mlp) return 0.0;
  const double s = spec_.seq_len;
  return 4.0 * b * s * s * spec_.hidden / split_.degree / split_.context;
}

std::int64_t ModelDesc::context_kv_bytes(int b) const {
  if (spec_.kind == ModelKind::mlp) return 0;
  const I h = spec_.hidden, t = split_.degree;
  const I kv = spec_.kind == ModelKind::llama ? I(spec_.kv_heads) * (spec_.hidden / spec_.heads) : h;
  return (I(dtype_bytes(dtype_)) * tokens(b) * I(2) * (kv.value() / t.value())).value();
}

// Token embedding [vocab, h] + position embedding [seq_len, h]. A gather
// forward (no matmul FLOPs); keeps the token ids for the scatter-add backward.
// llama: the token embedding only (rotary positions have no parameters).
// Tensor-parallel: the rank's 1/t of the padded vocabulary's rows (the
// position table whole); the partial outputs summed over the group
// (sequence parallelism: reduce-scattered, and the output gradient gathered
// back for the scatter-add).
Cost ModelDesc::embedding(int b) const {
  const int t = split_.degree;
  const I h = spec_.hidden, s = spec_.seq_len, v = padded_vocab(spec_, t) / t;
  const I tokens = this->tokens(b);
  const I e = dtype_bytes(dtype_);
  Cost c;
  c.params = spec_.kind == ModelKind::llama ? (v * h).value() : (v * h + s * h).value();
  c.activation_bytes = (tokens * kTokenIdBytes).value();
  // Its whole backward is W (a scatter-add): the gradient arriving at its output.
  c.split_stash_bytes = (e * I(region_tokens(b)) * h).value();
  const I full = e * tokens * h;
  if (split_.sequence_parallel) {
    c.tp_forward = gather(t, full);
    c.tp_weight_grad = gather(t, full);
  } else {
    c.tp_forward = all_reduce(t, full);
  }
  return c;
}

// The rank's share of a block (docs/model.md; docs/tensor-parallel.md for
// t > 1): column-parallel qkv (llama q, k, v) and fc1 (llama W1, W3),
// row-parallel proj (o) and fc2 (W2), whose biases and the norms every rank
// holds whole. Per token it keeps (x, the first norm's output, the residual
// sum, the second norm's output: `Ts` = region_tokens rows each; the rest T
// rows of the rank's columns) and the attention probabilities of its a/t
// heads unless they are recomputed (selective).
Cost ModelDesc::block(int b) const {
  const int t = split_.degree;
  const bool sp = split_.sequence_parallel;
  const I h = spec_.hidden, f = spec_.ffn_hidden, s = spec_.seq_len, a = spec_.heads;
  const I tokens = this->tokens(b), Ts = region_tokens(b);
  const I sq = s.value() / split_.context;  // the rank's queries of each sequence (context parallelism: s/c)
  const I e = dtype_bytes(dtype_);
  const I ht = h.value() / t, ft = f.value() / t, at = a.value() / t;
  const double td = static_cast<double>(tokens.value()), hd = static_cast<double>(spec_.hidden);
  const double fd = static_cast<double>(spec_.ffn_hidden), tt = t;
  const I full = e * tokens * h;  // one [T, h] tensor, what a collective moves
  // The attention's own activation: the probabilities of the rank's a/t heads
  // (materialized; none when selective recomputation drops them), or flash's
  // fp32 log-sum-exp per row (FlashAttention-2's L; nothing of s x s).
  const bool flash = spec_.attention == Attention::flash;
  const I probs = flash ? I(b) * at * sq * kLseBytes : split_.selective_recompute ? I(0) : e * I(b) * at * sq * s;
  const double attention_core = attention_core_flops(b);
  Cost c;
  if (spec_.kind == ModelKind::llama) {
    const I kvt = I(spec_.kv_heads / t) * (spec_.hidden / spec_.heads);
    const double kvd = static_cast<double>(kvt.value()) * tt;
    // gamma1 [h], q|k|v [h, (h + 2kv)/t], o [h/t, h], gamma2 [h], W1|W3 [h, 2f/t], W2 [f/t, h].
    c.params = (I(2) * h + h * (ht + I(2) * kvt) + ht * h + I(3) * h * ft).value();
    c.forward_flops = 2.0 * td * (2.0 * hd * hd + 2.0 * hd * kvd + 3.0 * hd * fd) / tt + attention_core;
    // x, norm1 out, x2, norm2 out (Ts rows); q and k after RoPE, v, attention
    // out, W1 out, W3 out, silu(W1 x)·W3 x (the rank's columns); 1/rms of
    // both norms in fp32.
    c.activation_bytes =
        (e * (Ts * I(4) * h + tokens * (ht + I(2) * kvt + ht + I(3) * ft)) + probs + Ts * kRmsStatsBytes * 2).value();
    // Split backward: the gradients at the outputs of W2 and o (T rows: the
    // row-parallel layers' weight gradients take them whole), W1 and W3, q,
    // k, v (the rank's columns), and of both norms (Ts rows).
    c.split_stash_bytes = (e * (tokens * (I(2) * h + ht + I(2) * kvt + I(2) * ft) + Ts * I(2) * h)).value();
  } else if (spec_.kind == ModelKind::gpt) {
    // ln1 [2h], qkv [h, 3h/t] + [3h/t], proj [h/t, h] + [h], ln2 [2h], fc1 [h, f/t] + [f/t], fc2 [f/t, h] + [h]
    c.params = (I(3) * h * ht + I(3) * ht + ht * h + I(6) * h + I(2) * h * ft + ft).value();
    c.forward_flops = 2.0 * td * (4.0 * hd * hd + 2.0 * hd * fd) / tt + attention_core;
    // x, ln1 out, x2, ln2 out (Ts rows); qkv, attention out, fc1
    // pre-activation and GELU out (the rank's columns); mean/rstd of both
    // LayerNorms in fp32.
    c.activation_bytes =
        (e * (Ts * I(4) * h + tokens * (I(4) * ht + I(2) * ft)) + probs + Ts * kLnStatsBytes * 2).value();
    // Split backward: the gradients at the outputs of fc2 and proj (T rows),
    // fc1 and qkv (the rank's columns), ln2 and ln1 (Ts rows).
    c.split_stash_bytes = (e * (tokens * (I(2) * h + ft + I(3) * ht) + Ts * I(2) * h)).value();
    // Dropout (docs/model.md, "Dropout"): the two hidden dropouts' 1-byte
    // masks (Ts rows) and, where the probabilities are kept, the attention
    // dropout's mask (1 byte each) and its output (the dropped probabilities).
    if (dropout()) {
      // Flash draws the attention dropout's mask again in the backward from the saved RNG state.
      const I scores = I(b) * at * sq * s;
      c.activation_bytes = (I(c.activation_bytes) + I(2) * Ts * h +
                            (split_.selective_recompute || flash ? I(0) : scores + e * scores))
                               .value();
    }
  } else {
    // fc1 [h, f/t] + [f/t], fc2 [f/t, h] + [h], residual around both.
    c.params = (I(2) * h * ft + ft + h).value();
    c.forward_flops = 2.0 * td * (2.0 * hd * fd) / tt;
    // x (fc1 input, Ts rows), fc1 pre-activation, GELU out (the rank's columns).
    c.activation_bytes = (e * (Ts * h + I(2) * tokens * ft)).value();
    // Split backward: the gradients at the outputs of fc2 (T rows) and fc1 (the rank's columns).
    c.split_stash_bytes = (e * tokens * (h + ft)).value();
  }
  // gpt and llama: attention and MLP; the mlp model: its MLP alone.
  const bool attention = spec_.kind != ModelKind::mlp;
  // Selective recomputation recomputes the attention core in B; flash keeps nothing of it to recompute.
  c.recompute_flops = attention && split_.selective_recompute && !flash ? attention_core : 0.0;
  block_comm(c, attention ? 2 : 1, t, sp, full);
  c.backward_flops = 2.0 * c.forward_flops;
  return c;
}

// Final LayerNorm [2h] (llama: RMSNorm [h]) + LM head [h, vocab] (no bias)
// + softmax cross-entropy. Tensor-parallel: the LM head's columns of the
// rank's 1/t of the padded vocabulary, the cross-entropy computed without
// gathering the logits (an all-reduce of each token's maximum, then one of
// its sum of exponentials and its target's); with sequence parallelism the
// norm's output gathered before the LM head (and again for its weight
// gradient), its input gradient reduce-scattered.
Cost ModelDesc::head(int b) const {
  const int t = split_.degree;
  const I h = spec_.hidden, v = padded_vocab(spec_, t) / t;
  const I tokens = this->tokens(b), Ts = region_tokens(b);
  const I e = dtype_bytes(dtype_);
  const bool llama = spec_.kind == ModelKind::llama;
  Cost c;
  c.params = ((llama ? h : I(2) * h) + h * v).value();
  c.forward_flops = 2.0 * static_cast<double>(tokens.value()) * static_cast<double>(spec_.hidden) *
                    static_cast<double>(v.value());
  c.backward_flops = 2.0 * c.forward_flops;
  // Per token: the norm's input and output (Ts rows), softmax probabilities
  // of the rank's vocabulary; the norm's fp32 statistics (LayerNorm: mean
  // and 1/std; RMSNorm: 1/rms); int32 targets.
  c.activation_bytes = (e * (Ts * I(2) * h + tokens * v) + Ts * (llama ? kRmsStatsBytes : kLnStatsBytes) +
                        tokens * kTokenIdBytes)
                           .value();
  // Split backward: the gradient at the LayerNorm's output (the LM head's
  // output gradient overwrites the probabilities in place and stays there).
  c.split_stash_bytes = (e * Ts * h).value();
  const I full = e * tokens * h;
  c.tp_forward = all_reduce(t, tokens * 4);
  c.tp_forward += all_reduce(t, tokens * 8);
  if (split_.sequence_parallel) {
    c.tp_forward += gather(t, full);
    c.tp_input_grad = gather(t, full);
    c.tp_weight_grad = gather(t, full);
  } else {
    c.tp_input_grad = all_reduce(t, full);
  }
  return c;
}

std::int64_t ModelDesc::largest_piece_params(int num_layers, bool has_embedding, bool has_head) const {
  std::int64_t most = num_layers > 0 ? block(1).params : 0;
  if (has_embedding) most = std::max(most, embedding(1).params);
  if (has_head) most = std::max(most, head(1).params);
  return most;
}

Cost ModelDesc::stage(int b, int num_layers, bool has_embedding, bool has_head) const {
  Cost total;
  if (has_embedding) total += embedding(b);
  const Cost one = block(b);
  for (int i = 0; i < num_layers; ++i) total += one;
  if (has_head) total += head(b);
  return total;
}

std::int64_t ModelDesc::recompute_kept_bytes(int b, int num_layers, bool has_embedding, bool has_head) const {
  I kept = I(num_layers + (has_head ? 1 : 0)) * boundary_bytes(b);
  if (has_embedding) kept = kept + I(tokens(b)) * kTokenIdBytes;
  return kept.value();
}

std::int64_t ModelDesc::recompute_piece_bytes(int b, int num_layers, bool has_embedding, bool has_head) const {
  std::int64_t piece = num_layers > 0 ? block(b).activation_bytes : 0;
  if (has_embedding) piece = std::max(piece, embedding(b).activation_bytes);
  if (has_head) piece = std::max(piece, head(b).activation_bytes);
  return piece;
}

std::int64_t ModelDesc::boundary_bytes(int b) const {
  return (I(region_tokens(b)) * spec_.hidden * dtype_bytes(dtype_)).value();
}

std::int64_t ModelDesc::total_params() const {
  if (split_.degree > 1) return ModelDesc(spec_, dtype_).total_params();
  return stage(1, spec_.layers, true, true).params;
}

std::int64_t ModelDesc::rope_table_bytes() const {
  if (spec_.kind != ModelKind::llama) return 0;
  // fp32 cos and sin, s x d/2 each (context parallelism: the rank's s/c positions').
  return (I(4) * (spec_.seq_len / split_.context) * (spec_.hidden / spec_.heads)).value();
}

// Per token, the backward's temporaries both real backends allocate: gpt
// dgelu [f], dh, dx2, q/k/v [3h], two ping-pong gradients [h] (f + 7h);
// llama du [f], dW1|dW3 [2f], dnorm, dx2, dattn [h], dqkv [h + 2kv], two
// ping-pong gradients [h] (3f + 6h + 2kv). Tensor-parallel: f, the
// attention's h and kv are the rank's 1/t (gpt f/t + 4h + 3h/t, llama
// 3f/t + 4h + 2h/t + 2kv/t).
static I backward_temporaries_per_token(const ModelSpec& m, int t) {
  const I h = m.hidden, ft = m.ffn_hidden / t, ht = m.hidden / t;
  if (m.kind != ModelKind::llama) return ft + I(4) * h + I(3) * ht;
  const I kvt = I(m.kv_heads / t) * (m.hidden / m.heads);
  return I(3) * ft + I(4) * h + I(2) * ht + I(2) * kvt;
}

std::int64_t ModelDesc::cpu_workspace_bytes(int b, bool train) const {
  const int t = split_.degree;
  const I s = spec_.seq_len;
  const I tokens = this->tokens(b);
  const I e = dtype_bytes(dtype_);
  I bytes = rope_table_bytes();  // also in inference
  // Tensor-parallel cross-entropy: each token's maximum, sum and target (fp32), also in inference.
  if (t > 1) bytes = bytes + tokens * 12;
  // Sequence parallelism: two [T, h] buffers, a region's gathered input and
  // its partial output before the reduce-scatter (also in inference).
  if (split_.sequence_parallel) bytes = bytes + I(2) * e * tokens * spec_.hidden;
  // Flash attention: its fp32 tiles (cpu_flash_attention.hpp), also in inference.
  const bool flash = spec_.attention == Attention::flash;
  if (cpu_flash_tiles(spec_)) bytes = bytes + I(4) * kCpuFlashScratchFloats;
  // Context parallelism's K/V (also in inference): the rank's packed, every
  // rank's gathered, in sequence order, and the gradients in sequence order
  // (docs/context-parallel.md, "cpu backend").
  if (split_.context > 1 && split_.context_comm == CpComm::allgather)
    bytes = bytes + I(kCpuContextBuffers) * split_.context * I(context_kv_bytes(b)) + I(context_kv_bytes(b));
  if (split_.context > 1 && split_.context_comm == CpComm::ring)
    bytes = bytes + I(kCpuRingBuffers) * I(context_kv_bytes(b)) +
            I(4) * (spec_.seq_len / (2 * split_.context)) * (spec_.hidden / spec_.heads + 1);
  if (!train) return bytes.value();
  // ... the temporaries and, materialized, one s x s score scratch and with
  // selective recomputation the attention probabilities of the rank's heads
  // (made at F and again at B, never kept).
  bytes = bytes + e * tokens * backward_temporaries_per_token(spec_, t);
  if (flash) return bytes.value();
  bytes = bytes + e * s * s;
  if (split_.selective_recompute) bytes = bytes + e * I(b) * (spec_.heads / t) * s * s;
  return bytes.value();
}

// The cuda backend's (cuda_backend.hpp, "Workspace layout"): the norm
// slots, fp32 token losses, the embedding's token order (train), the rotary
// table; tensor-parallel (also in inference) an fp32 [T, h] buffer for the
// group's sums and the cross-entropy's three fp32 statistics per token, and
// with sequence parallelism a [T, h] buffer of the storage dtype for the
// gathered inputs of the parallel regions.
std::int64_t ModelDesc::cuda_workspace_bytes(int b, bool train) const {
  const int t = split_.degree;
  const I s = spec_.seq_len, at = spec_.heads / t;
  const I tokens = I(b) * s;
  const I e = dtype_bytes(dtype_);
  // ... the temporaries with, materialized, one s x s score matrix per head
  // of the rank and, with selective recomputation, the probabilities of the
  // micro-batch's (flash attention: none of them, kernels_flash.cu).
  const bool materialized = spec_.attention != Attention::flash;
  I temporaries = train ? e * (tokens * backward_temporaries_per_token(spec_, t) + (materialized ? at * s * s : I(0)))
                        : I(0);
  if (train && materialized && split_.selective_recompute) temporaries = temporaries + e * I(b) * at * s * s;
  // llama with groups of several query heads, materialized: fp32 dV and dK
  // sums of one group, [2, s, h/heads], 16-byte aligned (CudaBackend::gqa_grad_sums).
  if (train && materialized && spec_.kind == ModelKind::llama && spec_.kv_heads < spec_.heads)
    temporaries = temporaries + I(8) * s * (spec_.hidden / spec_.heads) + I(16);
  I tensor = t > 1 ? I(4) * tokens * spec_.hidden + I(12) * tokens : I(0);
  if (split_.sequence_parallel) tensor = tensor + e * tokens * spec_.hidden;  // a gathered [T, h] of the storage dtype
  return (temporaries + tensor + I(rope_table_bytes()) + I(4) * tokens +
          (train ? I(cuda_embedding_order_bytes(b)) : I(0)) + kCudaNormSlotsBytes)
      .value();
}

std::int64_t ModelDesc::cuda_embedding_order_bytes(int b) const {
  return (I(4) * (I(3) * (I(b) * spec_.seq_len) + 4)).value();
}

std::int64_t ModelDesc::workspace_bytes(BackendKind backend, int b, bool train) const {
  switch (backend) {
    case BackendKind::cpu: return cpu_workspace_bytes(b, train);
    case BackendKind::cuda: return cuda_workspace_bytes(b, train);
    case BackendKind::sim: return 0;
  }
  return 0;
}

std::int64_t ModelDesc::comm_bytes(int b, int prev_send_slots, int next_send_slots, bool has_prev, bool has_next,
                                   bool train) const {
  const std::int64_t per_prev = 1 + (train ? std::int64_t{prev_send_slots} : 0);
  const std::int64_t per_next = (train ? 1 : 0) + std::int64_t{next_send_slots};
  return (I(boundary_bytes(b)) * ((has_prev ? per_prev : 0) + (has_next ? per_next : 0))).value();
}

}  // namespace pipebench
