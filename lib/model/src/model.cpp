#include "pipebench/model/model.hpp"

namespace pipebench {

namespace {
// Every integer below is a CheckedInt: + and * throw ArithmeticOverflow
// instead of wrapping (core/checked.hpp).
using I = CheckedInt;
constexpr std::int64_t kTokenIdBytes = 4;  // int32 token ids / targets
constexpr std::int64_t kLnStatsBytes = 8;  // one LayerNorm's fp32 mean and 1/std, per token
constexpr std::int64_t kRmsStatsBytes = 4; // one RMSNorm's fp32 1/rms, per token

// The llama block (docs/model.md, "llama"): RMSNorm, q [h,h], k and v
// [h, kv] with kv = kv_heads·h/heads, o [h,h], RMSNorm, W1 and W3 [h,f], W2 [f,h]; no biases.
Cost llama_block(const ModelSpec& m, int b, std::int64_t e) {
  const I h = m.hidden, f = m.ffn_hidden, s = m.seq_len, a = m.heads;
  const I kv = I(m.kv_heads) * (m.hidden / m.heads);
  const I tokens = I(b) * s;
  const double t = static_cast<double>(tokens.value()), hd = m.hidden, fd = m.ffn_hidden, sd = m.seq_len;
  const double kvd = static_cast<double>(kv.value());
  Cost c;
  c.params = (I(2) * h + I(2) * h * h + I(2) * h * kv + I(3) * h * f).value();
  // q, k, v, o, W1, W3, W2 GEMMs + QK^T and softmax(QK^T)V over all s x s
  // pairs (every query head against its group's K/V: the FLOPs of full MHA).
  c.forward_flops = 2.0 * t * (2.0 * hd * hd + 2.0 * hd * kvd + 3.0 * hd * fd) + 4.0 * static_cast<double>(b) * sd * sd * hd;
  // Per token: x, norm1 out, q and k after RoPE, v (h + 2kv), attention out,
  // x + attn, norm2 out (6h + 2kv), W1 out, W3 out, silu(W1 x)·W3 x (3f);
  // the attention probabilities [b, heads, s, s]; 1/rms of both norms in fp32.
  c.activation_bytes = (I(e) * (tokens * (I(6) * h + I(2) * kv + I(3) * f) + I(b) * a * s * s) +
                        tokens * kRmsStatsBytes * 2).value();
  // Split backward: the gradients at the outputs of W2 (h), W1 and W3 (2f),
  // norm2 (h), o (h), q, k, v (h + 2kv) and norm1 (h).
  c.split_stash_bytes = (I(e) * tokens * (I(5) * h + I(2) * kv + I(2) * f)).value();
  return c;
}
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
  if (run.optimizer_sharding != OptimizerSharding::zero1 || run.data_parallel <= 1) return params;
  return (params + run.data_parallel - 1) / run.data_parallel;
}

ModelDesc::ModelDesc(const ModelSpec& spec, DType dtype) : spec_(spec), dtype_(dtype) {}

// Token embedding [vocab, h] + position embedding [seq_len, h]. A gather
// forward (no matmul FLOPs); keeps the token ids for the scatter-add backward.
// llama: the token embedding only (rotary positions have no parameters).
Cost ModelDesc::embedding(int b) const {
  const I h = spec_.hidden, s = spec_.seq_len, v = spec_.vocab;
  const I tokens = I(b) * s;
  Cost c;
  c.params = spec_.kind == ModelKind::llama ? (v * h).value() : (v * h + s * h).value();
  c.activation_bytes = (tokens * kTokenIdBytes).value();
  // Its whole backward is W (a scatter-add): the gradient arriving at its output.
  c.split_stash_bytes = (I(dtype_bytes(dtype_)) * tokens * h).value();
  return c;
}

Cost ModelDesc::block(int b) const {
  const I h = spec_.hidden, f = spec_.ffn_hidden, s = spec_.seq_len, a = spec_.heads;
  const I tokens = I(b) * s;
  const I e = dtype_bytes(dtype_);
  const double t = static_cast<double>(tokens.value());
  const double hd = static_cast<double>(spec_.hidden), fd = static_cast<double>(spec_.ffn_hidden);
  const double sd = static_cast<double>(spec_.seq_len);
  Cost c;
  if (spec_.kind == ModelKind::llama) {
    c = llama_block(spec_, b, e.value());
  } else if (spec_.kind == ModelKind::gpt) {
    // ln1 [2h] + qkv [h,3h]+[3h] + proj [h,h]+[h] + ln2 [2h] + fc1 [h,f]+[f] + fc2 [f,h]+[h]
    c.params = (I(4) * h * h + I(2) * h * f + I(9) * h + f).value();
    // qkv, proj, fc1, fc2 GEMMs + QK^T and softmax(QK^T)V over all s x s pairs
    c.forward_flops = 2.0 * t * (4.0 * hd * hd + 2.0 * hd * fd) + 4.0 * static_cast<double>(b) * sd * sd * hd;
    // Per token: x, ln1 out, qkv (3h), attention out, x + attn, ln2 out (8h total),
    // fc1 pre-activation and GELU out (2f); plus the attention probabilities
    // [b, heads, s, s]; and mean/rstd of both LayerNorms in fp32 (4 x 4 bytes).
    c.activation_bytes = (e * (tokens * (I(8) * h + I(2) * f) + I(b) * a * s * s) + tokens * kLnStatsBytes * 2).value();
    // Split backward: the gradients at the outputs of fc2 (h), fc1 (f), ln2
    // (h), proj (h), qkv (3h) and ln1 (h).
    c.split_stash_bytes = (e * tokens * (I(7) * h + f)).value();
  } else {
    // fc1 [h,f]+[f] + fc2 [f,h]+[h], residual around both.
    c.params = (I(2) * h * f + f + h).value();
    c.forward_flops = 2.0 * t * (2.0 * hd * fd);
    // Per token: x (fc1 input), fc1 pre-activation, GELU out.
    c.activation_bytes = (e * tokens * (h + I(2) * f)).value();
    // Split backward: the gradients at the outputs of fc2 (h) and fc1 (f).
    c.split_stash_bytes = (e * tokens * (h + f)).value();
  }
  c.backward_flops = 2.0 * c.forward_flops;
  return c;
}

// Final LayerNorm [2h] (llama: RMSNorm [h]) + LM head [h, vocab] (no bias)
// + softmax cross-entropy.
Cost ModelDesc::head(int b) const {
  const I h = spec_.hidden, s = spec_.seq_len, v = spec_.vocab;
  const I tokens = I(b) * s;
  const I e = dtype_bytes(dtype_);
  const bool llama = spec_.kind == ModelKind::llama;
  Cost c;
  c.params = ((llama ? h : I(2) * h) + h * v).value();
  c.forward_flops = 2.0 * static_cast<double>(tokens.value()) * static_cast<double>(spec_.hidden) *
                    static_cast<double>(spec_.vocab);
  c.backward_flops = 2.0 * c.forward_flops;
  // Per token: the norm's input and output, softmax probabilities; the
  // norm's fp32 statistics (LayerNorm: mean and 1/std; RMSNorm: 1/rms); int32 targets.
  c.activation_bytes =
      (e * tokens * (I(2) * h + v) + tokens * ((llama ? kRmsStatsBytes : kLnStatsBytes) + kTokenIdBytes)).value();
  // Split backward: the gradient at the LayerNorm's output (the LM head's
  // output gradient overwrites the probabilities in place and stays there).
  c.split_stash_bytes = (e * tokens * h).value();
  return c;
}

Cost ModelDesc::stage(int b, int num_layers, bool has_embedding, bool has_head) const {
  Cost total;
  if (has_embedding) total += embedding(b);
  const Cost one = block(b);
  for (int i = 0; i < num_layers; ++i) total += one;
  if (has_head) total += head(b);
  return total;
}

std::int64_t ModelDesc::recompute_kept_bytes(int b, bool has_embedding) const {
  if (has_embedding) return (I(b) * spec_.seq_len * kTokenIdBytes).value();
  return boundary_bytes(b);
}

std::int64_t ModelDesc::boundary_bytes(int b) const {
  return (I(b) * spec_.seq_len * spec_.hidden * dtype_bytes(dtype_)).value();
}

std::int64_t ModelDesc::total_params() const {
  return stage(1, spec_.layers, true, true).params;
}

std::int64_t ModelDesc::rope_table_bytes() const {
  if (spec_.kind != ModelKind::llama) return 0;
  return (I(4) * spec_.seq_len * (spec_.hidden / spec_.heads)).value();  // fp32 cos and sin, s x d/2 each
}

// Per token, the backward's temporaries both real backends allocate: gpt
// dgelu [f], dh, dx2, q/k/v [3h], two ping-pong gradients [h] (f + 7h);
// llama du [f], dW1|dW3 [2f], dnorm, dx2, dattn [h], dqkv [h + 2kv], two
// ping-pong gradients [h] (3f + 6h + 2kv).
static I backward_temporaries_per_token(const ModelSpec& m) {
  const I h = m.hidden, f = m.ffn_hidden;
  if (m.kind != ModelKind::llama) return f + I(7) * h;
  const I kv = I(m.kv_heads) * (m.hidden / m.heads);
  return I(3) * f + I(6) * h + I(2) * kv;
}

std::int64_t ModelDesc::cpu_workspace_bytes(int b, bool train) const {
  const I s = spec_.seq_len;
  const I tokens = I(b) * s;
  const I rope = rope_table_bytes();  // also in inference
  if (!train) return rope.value();
  // ... and one s x s score scratch.
  return (rope + I(dtype_bytes(dtype_)) * (tokens * backward_temporaries_per_token(spec_) + s * s)).value();
}

std::int64_t ModelDesc::cuda_workspace_bytes(int b, bool train) const {
  const I s = spec_.seq_len, a = spec_.heads;
  const I tokens = I(b) * s;
  // ... with one s x s score matrix per head.
  const I temporaries =
      train ? I(dtype_bytes(dtype_)) * (tokens * backward_temporaries_per_token(spec_) + a * s * s) : I(0);
  return (temporaries + I(rope_table_bytes()) + I(4) * tokens + (train ? I(cuda_embedding_order_bytes(b)) : I(0)) +
          kCudaNormSlotsBytes)
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

std::int64_t ModelDesc::comm_bytes(int b, int m, bool has_prev, bool has_next, bool train) const {
  const std::int64_t per_prev = train ? std::int64_t{m} + 1 : 1;
  const std::int64_t per_next = train ? std::int64_t{m} + 1 : m;
  return (I(boundary_bytes(b)) * ((has_prev ? per_prev : 0) + (has_next ? per_next : 0))).value();
}

}  // namespace pipebench
