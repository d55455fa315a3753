// The attention core of a gpt or llama block on the cpu backend, as
// model.attention asks (docs/model.md "Attention"): the materialized
// softmax(q·kᵀ/√d) rows (cpu_kernels.hpp) or flash attention
// (cpu_flash_attention.hpp).
#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_flash_attention.hpp"
#include "pipebench/backends/cpu_kernels.hpp"

namespace pipebench {

void CpuBackend::attention_core_forward(const Chunk& c, int mb, const Piece& p, std::int64_t kept, const float* qkv,
                                        float* attn, int kv_heads) {
  const int B = spec_.micro_batch_size, s = job_.model.seq_len, ht = static_cast<int>(ht_);
  if (cp_ > 1) {
    if (spec_.tensor.context_comm == CpComm::ring) ring_attention_forward(qkv, attn, act(c, mb, p, kept), kv_heads);
    else context_attention_forward(qkv, attn, act(c, mb, p, kept), kv_heads);
    return;
  }
  if (flash()) {
    cpu::flash_attention_forward(qkv, attn, act(c, mb, p, kept), flash_tiles_.data(), B, s, ht, at_, kv_heads);
    return;
  }
  float* probs = spec_.tensor.selective_recompute ? selective_probs() : act(c, mb, p, kept);
  cpu::attention_forward(qkv, probs, attn, B, s, ht, at_, kv_heads);
}

void CpuBackend::attention_core_backward(const Chunk& c, int mb, const Piece& p, std::int64_t kept, const float* qkv,
                                         float* attn, const float* d_attn, float* d_qkv, int kv_heads) {
  const int B = spec_.micro_batch_size, s = job_.model.seq_len, ht = static_cast<int>(ht_);
  if (cp_ > 1) {
    if (spec_.tensor.context_comm == CpComm::ring)
      ring_attention_backward(qkv, attn, act(c, mb, p, kept), d_attn, d_qkv, kv_heads);
    else
      context_attention_backward(qkv, attn, act(c, mb, p, kept), d_attn, d_qkv, kv_heads);
    return;
  }
  if (flash()) {  // nothing of it recomputed: selective recomputation keeps the log-sum-exp as flash does
    cpu::flash_attention_backward(d_attn, qkv, attn, act(c, mb, p, kept), d_qkv, flash_tiles_.data(), B, s, ht, at_,
                                  kv_heads);
    return;
  }
  const float* probs = act(c, mb, p, kept);
  if (spec_.tensor.selective_recompute) {  // the probabilities again (attn is rewritten with the same bits)
    cpu::attention_forward(qkv, selective_probs(), attn, B, s, ht, at_, kv_heads);
    probs = selective_probs();
  }
  cpu::attention_backward(d_attn, qkv, probs, d_qkv, score_scratch(), B, s, ht, at_, kv_heads);
}

}  // namespace pipebench
