// The llama block on the cpu backend (docs/model.md, "llama"; docs/cpu-backend.md):
// RMSNorm → q, k, v in one GEMM [h, h + 2kv] → RoPE on q and k → causal
// grouped-query attention → o [h,h] + residual → RMSNorm → W1 | W3 in one
// GEMM [h, 2f] → silu(W1·x) ⊙ W3·x → W2 [f,h] + residual. No biases. Tensors
// (stage_layout.cpp): gamma1, Wqkv, Wo, gamma2, W13, W2; activations LlamaActs.
#include <cstring>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_kernels.hpp"

namespace pipebench {

// Tensor-parallel (docs/tensor-parallel.md): q | k | v, o's input, W1 | W3
// and W2's input hold the rank's heads and columns (widths ht_, kvt_, ft_);
// o's and W2's outputs, and in the backward the gradients at the norms'
// outputs, are sums over the group (backend_cpu_tensor.cpp). With sequence
// parallelism x, x2, the norms and their gradients are the rank's ts_ tokens.
void CpuBackend::forward_llama(const Chunk& c, const Piece& p, int mb, float* out) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), Ts = static_cast<int>(ts_), h = ms.hidden, f = static_cast<int>(ft_);
  const int s = seq_local_, d = h / ms.heads;  // RoPE's rows: the rank's positions (rope_)
  const int ht = static_cast<int>(ht_), kv = static_cast<int>(kv_width()), ldq = ht + 2 * kv;
  const float eps = static_cast<float>(ms.norm_eps);
  const LlamaActs a(T, h, kv, f, 4, ht, Ts);
  auto A = [&](std::int64_t off) { return act(c, mb, p, off); };
  auto w = [&](std::size_t t) { return weight(c, p, t); };
  float* x = A(a.x);
  float* qkv = A(a.qkv);
  cpu::rmsnorm_forward(x, w(0), A(a.n1), A(a.rrms1), Ts, h, eps);
  cpu::linear_forward(gathered(A(a.n1)), w(1), nullptr, qkv, T, h, ldq);
  cpu::rope_apply(qkv, rope_.data(), T, s, at_, d, ldq, false);
  cpu::rope_apply(qkv + ht, rope_.data(), T, s, kvheads_t_, d, ldq, false);
  attention_core_forward(c, mb, p, a.probs, qkv, A(a.attn), kvheads_t_);
  float* x2 = A(a.x2);
  row_parallel_out(A(a.attn), w(2), nullptr, x, x2, ht);
  cpu::rmsnorm_forward(x2, w(3), A(a.n2), A(a.rrms2), Ts, h, eps);
  cpu::linear_forward(gathered(A(a.n2)), w(4), nullptr, A(a.pre13), T, h, 2 * f);
  cpu::swiglu_forward(A(a.pre13), A(a.u), T, f);
  row_parallel_out(A(a.u), w(5), nullptr, x2, out, f);
}

// As backward_gpt: Pass::full computes input and weight gradients now;
// Pass::input saves in `st` the output gradients W needs (W2 out [T,h],
// W1|W3 out [T,2f], norm2 out, o out [T,h], qkv [T,h+2kv], norm1 out [T,h]:
// split_stash_elements); Pass::weight computes the weight gradients from them.
void CpuBackend::backward_llama(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* st) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), Ts = static_cast<int>(ts_), h = ms.hidden, f = static_cast<int>(ft_);
  const int s = seq_local_, d = h / ms.heads;  // RoPE's rows: the rank's positions (rope_)
  const int ht = static_cast<int>(ht_), kv = static_cast<int>(kv_width()), ldq = ht + 2 * kv;
  const std::int64_t Th = static_cast<std::int64_t>(T) * h, Tf = static_cast<std::int64_t>(T) * f;
  const std::int64_t Tq = static_cast<std::int64_t>(T) * ldq, Tht = static_cast<std::int64_t>(T) * ht;
  const std::int64_t Tsh = static_cast<std::int64_t>(Ts) * h;
  const LlamaActs a(T, h, kv, f, 4, ht, Ts);
  auto A = [&](std::int64_t off) { return act(c, mb, p, off); };
  auto w = [&](std::size_t t) { return weight(c, p, t); };
  auto g = [&](std::size_t t) { return grad(c, p, t); };
  // Output gradients: in the stash (split) or the workspace (ModelDesc::cpu_workspace_bytes).
  float* ws = workspace_.data();
  const bool split = pass != Pass::full, sp = sequence_parallel();
  float* d_w2 = split ? st : nullptr;  // full: dy, gathered
  float* d_13 = split ? st + Th : ws + Tf;
  float* d_n2 = split ? st + Th + 2 * Tf : ws + 3 * Tf;
  // o's output gradient: the rank's tokens (d_x2), and whole (d_x2_all; the same buffer without sequence parallelism).
  float* d_x2 = split && !sp ? st + Th + 2 * Tf + Tsh : ws + 3 * Tf + Th;
  float* d_x2_all = split ? st + Th + 2 * Tf + Tsh : sp ? sp_gathered() : d_x2;
  float* d_qkv = split ? st + 2 * Th + 2 * Tf + Tsh : ws + 3 * Tf + 2 * Th + Tht;
  float* d_n1 = split ? st + 2 * Th + 2 * Tf + Tsh + Tq : ws + 3 * Tf;  // full: d_n2's place, free by then
  float* d_u = ws;                     // no weights: never stashed
  float* d_attn = ws + 3 * Tf + 2 * Th;
  if (pass == Pass::weight) {
    cpu::linear_backward_weight(A(a.u), d_w2, g(5), nullptr, T, f, h);
    cpu::linear_backward_weight(gathered(A(a.n2)), d_13, g(4), nullptr, T, h, 2 * f);
    cpu::rmsnorm_backward_weight(d_n2, A(a.x2), A(a.rrms2), g(3), Ts, h);
    cpu::linear_backward_weight(A(a.attn), d_x2_all, g(2), nullptr, T, ht, h);
    cpu::linear_backward_weight(gathered(A(a.n1)), d_qkv, g(1), nullptr, T, h, ldq);
    cpu::rmsnorm_backward_weight(d_n1, A(a.x), A(a.rrms1), g(0), Ts, h);
    return;
  }
  const bool full = !split;
  if (split) gather_into(dy, d_w2);
  const float* w2_out = split ? d_w2 : gathered(dy);
  if (full) cpu::linear_backward_weight(A(a.u), w2_out, g(5), nullptr, T, f, h);
  cpu::linear_backward_input(w(5), w2_out, d_u, T, f, h);
  cpu::swiglu_backward(A(a.pre13), d_u, d_13, T, f);
  if (full) cpu::linear_backward_weight(gathered(A(a.n2)), d_13, g(4), nullptr, T, h, 2 * f);
  column_input_grad(w(4), d_13, d_n2, 2 * f);
  std::memcpy(d_x2, dy, sizeof(float) * static_cast<std::size_t>(Tsh));
  if (full) cpu::rmsnorm_backward_weight(d_n2, A(a.x2), A(a.rrms2), g(3), Ts, h);
  cpu::rmsnorm_backward_input(d_n2, A(a.x2), w(3), A(a.rrms2), d_x2, Ts, h);
  if (d_x2_all != d_x2) gather_into(d_x2, d_x2_all);
  if (full) cpu::linear_backward_weight(A(a.attn), d_x2_all, g(2), nullptr, T, ht, h);
  cpu::linear_backward_input(w(2), d_x2_all, d_attn, T, ht, h);
  attention_core_backward(c, mb, p, a.probs, A(a.qkv), A(a.attn), d_attn, d_qkv, kvheads_t_);
  // RoPE's backward: the inverse rotation of the gradients at q and k.
  cpu::rope_apply(d_qkv, rope_.data(), T, s, at_, d, ldq, true);
  cpu::rope_apply(d_qkv + ht, rope_.data(), T, s, kvheads_t_, d, ldq, true);
  if (full) cpu::linear_backward_weight(gathered(A(a.n1)), d_qkv, g(1), nullptr, T, h, ldq);
  column_input_grad(w(1), d_qkv, d_n1, ldq);
  std::memcpy(dx, d_x2, sizeof(float) * static_cast<std::size_t>(Tsh));
  if (full) cpu::rmsnorm_backward_weight(d_n1, A(a.x), A(a.rrms1), g(0), Ts, h);
  cpu::rmsnorm_backward_input(d_n1, A(a.x), w(0), A(a.rrms1), dx, Ts, h);
}

}  // namespace pipebench
