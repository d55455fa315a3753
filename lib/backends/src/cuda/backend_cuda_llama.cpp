// The llama block on the cuda backend: the cpu backend's forward_llama and
// backward_llama (backend_cpu_llama.cpp) launch for launch — RMSNorm → q, k,
// v in one GEMM [h, h + 2kv] → RoPE on q and k → causal grouped-query
// attention → o [h,h] + residual → RMSNorm → W1 | W3 in one GEMM [h, 2f] →
// silu(W1·x) ⊙ W3·x → W2 [f,h] + residual; no biases. The same slab layout
// (LlamaActs, in elements of the storage dtype), the same split-backward
// stash order (split_stash_elements), the attention as gemm::GroupedAttention's
// products (K/V broadcast over a group's query heads), the norms and RoPE in
// kernels_llama.cu. Tensor-parallel: the rank's query heads with their K/V
// heads, its W1|W3 columns and W2 rows (widths ht_, kvt_, ft_); o's and W2's
// outputs and the gradients at the norms' outputs summed over the group
// (backend_cuda_tensor.cpp), as the cpu backend's backend_cpu_llama.cpp;
// with sequence parallelism the norms' regions hold the rank's ts_ tokens.
#include <cuda_runtime.h>

#include "cuda_backend.hpp"

namespace pipebench::gpu {

void CudaBackend::forward_llama(const Chunk& c, const Piece& p, int mb, std::byte* out) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = static_cast<int>(ft_), s = ms.seq_len, d = h / ms.heads;
  const int ht = static_cast<int>(ht_), kv = static_cast<int>(kv_width()), ldq = ht + 2 * kv, B = spec_.micro_batch_size;
  const auto eps = static_cast<float>(ms.norm_eps);
  const int Ts = static_cast<int>(ts_);
  const LlamaActs a(T, h, kv, f, static_cast<int>(e_), ht, Ts);
  auto A = [&](std::int64_t elements) { return act(c, mb, p, elements); };
  auto S = [&](std::int64_t elements) { return stat(c, mb, p, elements); };
  const auto* rope = reinterpret_cast<const float*>(rope_.data());
  std::byte* x = A(a.x);
  std::byte* qkv = A(a.qkv);
  gpu::rmsnorm_forward(dt_, x, w(p, 0), A(a.n1), S(a.rrms1), Ts, h, eps, stream_);
  linear_forward(gathered(A(a.n1)), w(p, 1), nullptr, qkv, T, h, ldq, false);
  gpu::rope_apply(dt_, qkv, rope, T, s, at_, d, ldq, false, stream_);
  gpu::rope_apply(dt_, qkv + ht * e_, rope, T, s, kvheads_t_, d, ldq, false, stream_);
  if (flash()) {
    gpu::flash_attention_forward(dt_, qkv, A(a.attn), flash_lse(c, mb, p, a.probs), B, s, ht, at_, kvheads_t_, stream_);
  } else {
    // Per sequence and K/V group: the group's scores, then one causal softmax
    // over every head, then the group's P·V.
    const gemm::GroupedAttention at(s, ht, at_, kvheads_t_);
    std::byte* all_probs = attention_probs(c, mb, p, a.probs);
    auto seq = [&](int bi) { return A(a.qkv + std::int64_t{bi} * s * ldq); };
    auto probs = [&](int bi, int head) { return all_probs + (std::int64_t{bi} * at_ + head) * at.ss() * e_; };
    for (int bi = 0; bi < B; ++bi)
      for (int grp = 0; grp < kvheads_t_; ++grp)
        gemm(at.scores(), seq(bi) + at.q_offset(grp * at.group) * e_, seq(bi) + at.k_offset(grp) * e_,
             probs(bi, grp * at.group));
    gpu::causal_softmax(dt_, all_probs, s, std::int64_t{B} * at_, stream_);
    for (int bi = 0; bi < B; ++bi)
      for (int grp = 0; grp < kvheads_t_; ++grp)
        gemm(at.values(), probs(bi, grp * at.group), seq(bi) + at.v_offset(grp) * e_,
             A(a.attn + std::int64_t{bi} * s * ht + at.q_offset(grp * at.group)));
  }
  std::byte* x2 = A(a.x2);
  row_parallel_out(A(a.attn), w(p, 2), nullptr, x, x2, ht);
  gpu::rmsnorm_forward(dt_, x2, w(p, 3), A(a.n2), S(a.rrms2), Ts, h, eps, stream_);
  linear_forward(gathered(A(a.n2)), w(p, 4), nullptr, A(a.pre13), T, h, 2 * f, false);
  gpu::swiglu_forward(dt_, A(a.pre13), A(a.u), T, f, stream_);
  row_parallel_out(A(a.u), w(p, 5), nullptr, x2, out, f);
}

// As backward_gpt: Pass::full computes input and weight gradients now;
// Pass::input keeps in `st` the output gradients W needs (W2 out [T,h],
// W1|W3 out [T,2f], norm2 out, o out [T,h], qkv [T,h+2kv], norm1 out [T,h]);
// Pass::weight computes the weight gradients from them. With sequence
// parallelism dy, x, x2, the norms and their gradients are the rank's Ts
// tokens; W2's and o's output gradients are gathered whole (and kept so for W).
void CudaBackend::backward_llama(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass,
                                 std::byte* st) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = static_cast<int>(ft_), s = ms.seq_len, d = h / ms.heads;
  const int ht = static_cast<int>(ht_), kv = static_cast<int>(kv_width()), ldq = ht + 2 * kv, Ts = static_cast<int>(ts_);
  const std::int64_t Th = std::int64_t{T} * h, Tf = std::int64_t{T} * f, Tq = std::int64_t{T} * ldq;
  const std::int64_t Tht = std::int64_t{T} * ht, Tsh = std::int64_t{Ts} * h;
  const auto Tsh_bytes = static_cast<std::uint64_t>(Tsh * e_);
  const LlamaActs a(T, h, kv, f, static_cast<int>(e_), ht, Ts);
  auto A = [&](std::int64_t elements) { return act(c, mb, p, elements); };
  auto S = [&](std::int64_t elements) { return stat(c, mb, p, elements); };
  auto at = [&](std::byte* base, std::int64_t elements) { return base + elements * e_; };
  // Output gradients: in the stash (split) or the temporaries (block_temporaries()).
  std::byte* ws = temporaries();
  const bool split = pass != Pass::full, full = pass == Pass::full, sp = sequence_parallel();
  std::byte* d_w2 = split ? st : nullptr;  // full: dy, gathered
  std::byte* d_13 = split ? at(st, Th) : at(ws, Tf);
  std::byte* d_n2 = split ? at(st, Th + 2 * Tf) : at(ws, 3 * Tf);
  // o's output gradient: the rank's tokens (d_x2), and whole (d_x2_all; the same buffer without sequence parallelism).
  std::byte* d_x2 = split && !sp ? at(st, Th + 2 * Tf + Tsh) : at(ws, 3 * Tf + Th);
  std::byte* d_x2_all = split ? at(st, Th + 2 * Tf + Tsh) : sp ? sp_gathered() : d_x2;
  std::byte* d_qkv = split ? at(st, 2 * Th + 2 * Tf + Tsh) : at(ws, 3 * Tf + 2 * Th + Tht);
  std::byte* d_n1 = split ? at(st, 2 * Th + 2 * Tf + Tsh + Tq) : at(ws, 3 * Tf);  // full: d_n2's place, free by then
  std::byte* d_u = ws;                                                             // no weights: never stashed
  std::byte* d_attn = at(ws, 3 * Tf + 2 * Th);
  if (pass == Pass::weight) {
    linear_backward_weight(A(a.u), d_w2, g(p, 5), nullptr, T, f, h);
    linear_backward_weight(gathered(A(a.n2)), d_13, g(p, 4), nullptr, T, h, 2 * f);
    gpu::rmsnorm_backward_weight(dt_, d_n2, A(a.x2), S(a.rrms2), g(p, 3), Ts, h, stream_);
    linear_backward_weight(A(a.attn), d_x2_all, g(p, 2), nullptr, T, ht, h);
    linear_backward_weight(gathered(A(a.n1)), d_qkv, g(p, 1), nullptr, T, h, ldq);
    gpu::rmsnorm_backward_weight(dt_, d_n1, A(a.x), S(a.rrms1), g(p, 0), Ts, h, stream_);
    return;
  }
  if (split) gather_into(dy, d_w2);
  const void* w2_out = split ? d_w2 : gathered(dy);
  if (full) linear_backward_weight(A(a.u), w2_out, g(p, 5), nullptr, T, f, h);
  linear_backward_input(w(p, 5), w2_out, d_u, T, f, h, false);
  gpu::swiglu_backward(dt_, A(a.pre13), d_u, d_13, T, f, stream_);
  if (full) linear_backward_weight(gathered(A(a.n2)), d_13, g(p, 4), nullptr, T, h, 2 * f);
  column_input_grad(w(p, 4), d_13, d_n2, 2 * f, false);
  copy_on_device(d_x2, dy, Tsh_bytes);
  if (full) gpu::rmsnorm_backward_weight(dt_, d_n2, A(a.x2), S(a.rrms2), g(p, 3), Ts, h, stream_);
  gpu::rmsnorm_backward_input(dt_, d_n2, A(a.x2), w(p, 3), S(a.rrms2), d_x2, Ts, h, stream_);
  if (d_x2_all != d_x2) gather_into(d_x2, d_x2_all);
  if (full) linear_backward_weight(A(a.attn), d_x2_all, g(p, 2), nullptr, T, ht, h);
  linear_backward_input(w(p, 2), d_x2_all, d_attn, T, ht, h, false);
  // Attention backward per sequence and K/V group (gemm::GroupedAttention):
  // dP, dS through the softmax, dQ for the group at once; dV and dK summed
  // over the group's query heads in head order — in fp32 (gqa_grad_sums)
  // when a group has several heads, rounded to the storage dtype once, as
  // every other sum of the backend is (issue 72, item 8).
  // Flash: the kernels' (nothing recomputed first; dK and dV summed in fp32 inside them).
  if (flash())
    gpu::flash_attention_backward(dt_, A(a.qkv), A(a.attn), d_attn, flash_lse(c, mb, p, a.probs), d_qkv,
                                  spec_.micro_batch_size, s, ht, at_, kvheads_t_, stream_);
  if (!flash() && selective()) attention_probs_again(A(a.qkv));
  const std::byte* all_probs = attention_probs(c, mb, p, a.probs);
  const gemm::GroupedAttention ga(s, ht, at_, kvheads_t_);
  std::byte* dP = score_scratch();
  for (int bi = 0; bi < spec_.micro_batch_size && !flash(); ++bi) {
    const std::int64_t base = std::int64_t{bi} * s * ldq;
    const std::byte* q = A(a.qkv + base);
    std::byte* dq = at(d_qkv, base);
    const std::byte* P = all_probs + std::int64_t{bi} * at_ * ga.ss() * e_;
    const std::byte* dO = at(d_attn, std::int64_t{bi} * s * ht);
    for (int grp = 0; grp < kvheads_t_; ++grp) {
      const int first = grp * ga.group;
      std::byte* dS = at(dP, first * ga.ss());
      gemm(ga.dp(), dO + ga.q_offset(first) * e_, q + ga.v_offset(grp) * e_, dS);
      gpu::causal_softmax_backward(dt_, P + first * ga.ss() * e_, dS, s, ga.group, stream_);
      gemm(ga.dq(), dS, q + ga.k_offset(grp) * e_, dq + ga.q_offset(first) * e_);
      if (ga.group == 1) {
        gemm(ga.dv(true), P + first * ga.ss() * e_, dO + ga.q_offset(first) * e_, dq + ga.v_offset(grp) * e_);
        gemm(ga.dk(true), at(dP, first * ga.ss()), q + ga.q_offset(first) * e_, dq + ga.k_offset(grp) * e_);
        continue;
      }
      float* dv_sum = gqa_grad_sums();
      float* dk_sum = dv_sum + std::int64_t{s} * ga.d;
      for (int i = first; i < first + ga.group; ++i) {
        gemm(ga.dv(i == first, true), P + i * ga.ss() * e_, dO + ga.q_offset(i) * e_, dv_sum, true);
        gemm(ga.dk(i == first, true), at(dP, i * ga.ss()), q + ga.q_offset(i) * e_, dk_sum, true);
      }
      gpu::store_rows(dt_, dv_sum, dq + ga.v_offset(grp) * e_, s, ga.d, ldq, stream_);
      gpu::store_rows(dt_, dk_sum, dq + ga.k_offset(grp) * e_, s, ga.d, ldq, stream_);
    }
  }
  // RoPE's backward: the inverse rotation of the gradients at q and k.
  const auto* rope = reinterpret_cast<const float*>(rope_.data());
  gpu::rope_apply(dt_, d_qkv, rope, T, s, at_, d, ldq, true, stream_);
  gpu::rope_apply(dt_, d_qkv + ht * e_, rope, T, s, kvheads_t_, d, ldq, true, stream_);
  if (full) linear_backward_weight(gathered(A(a.n1)), d_qkv, g(p, 1), nullptr, T, h, ldq);
  column_input_grad(w(p, 1), d_qkv, d_n1, ldq, false);
  copy_on_device(dx, d_x2, Tsh_bytes);
  if (full) gpu::rmsnorm_backward_weight(dt_, d_n1, A(a.x), S(a.rrms1), g(p, 0), Ts, h, stream_);
  gpu::rmsnorm_backward_input(dt_, d_n1, A(a.x), w(p, 0), S(a.rrms1), dx, Ts, h, stream_);
}

}  // namespace pipebench::gpu
