// The cuda backend's backward (backend_cuda.hpp): recomputation, B (the
// input gradients, or the whole backward without a split), W (the weight
// gradients from the stash) — piece for piece the cpu backend's
// (backend_cpu.cpp), in the same order of operations. The llama block's
// backward is in backend_cuda_llama.cpp.
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda_backend.hpp"
#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/backends/gemm_layout.hpp"

namespace pipebench::gpu {

// B: the pieces from the last to the first, each handing its input gradient
// to the one before it through the workspace's ping-pong buffers; with a
// split backward each also fills its part of the micro-batch's stash, and
// the activations stay until W.
void CudaBackend::backward(int /*step*/, int mb, int ci) {
  Chunk& c = chunk(ci);
  const Pass pass = spec_.split_backward ? Pass::input : Pass::full;
  std::byte* stash = pass == Pass::input ? c.stash.acquire(mb) : nullptr;
  if (c.checkpointed) {
    --live_;  // held as its inputs until now; acquire_slab counts it again
    acquire_slab(c, mb);
    if (c.head()) upload_tokens(mb, targets_at(c, mb), true);  // the head runs first
  }
  upload_staged(c, ActionKind::B);
  if (c.embedding() && pass == Pass::full) upload_embedding_order(mb);
  start_action();
  backward_pieces(c, ci, mb, pass, stash);
  if (pass == Pass::full) backward_done(c);  // inside the action: its collectives are the action's
  finish_action();
  if (c.checkpointed) c.kept.release(mb);
  if (pass == Pass::full) release_slab(c, mb);
}

void CudaBackend::backward_pieces(Chunk& c, int ci, int mb, Pass pass, std::byte* stash) {
  std::byte* ping = workspace_ping();
  std::byte* pong = ping + tokens_ * job_.model.hidden * e_;
  const std::byte* dy = c.sends ? c.recv_next.data() : nullptr;  // the head starts from the loss
  std::int64_t offset = 0;
  for (const Piece& p : c.pieces) offset += stash_elements(p);
  for (std::size_t k = c.pieces.size(); k-- > 0;) {
    const Piece& p = c.pieces[k];
    offset -= stash_elements(p);
    if (c.checkpointed) {
      // Recomputation: the piece's forward again from its kept input (the
      // embedding's token ids back at the slab's start); its output goes to
      // whichever ping-pong buffer dy is not in (the one its dx then takes).
      const std::byte* kept = c.kept.get(mb) + c.kept_offsets[k];
      if (p.kind == PieceKind::embedding) copy_on_device(tokens_at(c, mb), kept, kept_size(c, k));
      forward_piece(c, p, mb, p.kind == PieceKind::embedding ? nullptr : kept,
                    p.kind == PieceKind::head ? nullptr : (dy == ping ? pong : ping));
    }
    std::byte* dx = nullptr;
    if (p.kind != PieceKind::embedding) {
      if (k == 0) dx = c.receives ? c.send_prev[spec_.send_slot(ActionKind::B, mb, ci)].data() : nullptr;
      else dx = (dy == ping) ? pong : ping;
    }
    backward_piece(c, p, mb, dy, dx, pass, stash ? stash + offset * e_ : nullptr);
    if (pass == Pass::full) piece_final(ci, c, p, static_cast<int>(c.pieces.size() - k));
    dy = dx;
  }
}

// W: every piece's weight gradients from the stash B left, then the
// micro-batch's activations and stash are released.
void CudaBackend::weight_grad(int /*step*/, int mb, int ci) {
  Chunk& c = chunk(ci);
  std::byte* stash = spec_.split_backward ? c.stash.get(mb) : nullptr;
  if (!stash) throw Error(fmt::format("cuda backend: W of micro-batch {} (chunk {}) without its B", mb, ci));
  if (c.embedding()) upload_embedding_order(mb);
  start_action();
  // From the last piece, as B runs them, so that grad_sync = "overlap"'s
  // buckets (the head's first) launch as their layers finish; each piece's
  // weight gradients are its own, so the order changes no value.
  std::int64_t offset = 0;
  for (const Piece& p : c.pieces) offset += stash_elements(p);
  for (std::size_t k = c.pieces.size(); k-- > 0;) {
    const Piece& p = c.pieces[k];
    offset -= stash_elements(p);
    backward_piece(c, p, mb, nullptr, nullptr, Pass::weight, stash + offset * e_);
    piece_final(ci, c, p, static_cast<int>(c.pieces.size() - k));
  }
  backward_done(c);
  finish_action();
  c.stash.release(mb);
  release_slab(c, mb);
}

// The backward of one piece in `pass` (Pass): `st` is this piece's part of
// the stash. The input and weight parts are the same launches either way, so
// a split backward gives the full one's bits.
void CudaBackend::backward_piece(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass,
                                 std::byte* st) {
  switch (p.kind) {
    case PieceKind::llama: backward_llama(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::embedding: {
      const int s = job_.model.seq_len, h = job_.model.hidden;
      float* dwpe = p.tensors.size() > 1 ? g(p, 1) : nullptr;  // llama: no position table
      // Sequence parallelism: the rank's tokens kept, the whole output gradient gathered.
      if (pass == Pass::input) copy_on_device(st, dy, static_cast<std::uint64_t>(ts_ * h * e_));
      else gpu::embedding_backward(dt_, gathered(pass == Pass::weight ? st : dy), embedding_order_, g(p, 0), dwpe,
                                   static_cast<int>(tokens_), s, h, stream_);  // upload_embedding_order()
      break;
    }
    case PieceKind::gpt: backward_gpt(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::mlp: backward_mlp(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::head: backward_head(c, p, mb, dx, pass, st); break;
  }
}

// Tensor-parallel: as the cpu backend's backward_gpt — qkv, proj's input,
// fc1 and fc2's input are the rank's columns; the input gradients at ln2's
// and ln1's outputs are sums over the group (column_input_grad, in B). With
// sequence parallelism dy, x, x2, the norms and their gradients are the
// rank's Ts tokens; fc2's and proj's output gradients are gathered whole
// (and kept so for W), and W gathers the norms' outputs again.
void CudaBackend::backward_gpt(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass,
                               std::byte* st) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = static_cast<int>(ft_), s = ms.seq_len;
  const int ht = static_cast<int>(ht_), Ts = static_cast<int>(ts_);
  const std::int64_t Th = std::int64_t{T} * h, Tf = std::int64_t{T} * f, Tht = std::int64_t{T} * ht;
  const std::int64_t Tsh = std::int64_t{Ts} * h;
  const auto Tsh_bytes = static_cast<std::uint64_t>(Tsh * e_);
  const GptActs a(T, h, f, static_cast<int>(e_), ht, Ts);
  auto A = [&](std::int64_t elements) { return act(c, mb, p, elements); };
  auto S = [&](std::int64_t elements) { return stat(c, mb, p, elements); };
  // Output gradients: in the stash (split) or the temporaries (dgelu, dh,
  // dx2, dqkv, …; see temporaries()), at element offsets.
  std::byte* ws = temporaries();
  const bool split = pass != Pass::full, full = pass == Pass::full, sp = sequence_parallel();
  auto at = [&](std::byte* base, std::int64_t elements) { return base + elements * e_; };
  std::byte* d_fc2 = split ? st : nullptr;  // full: dy, gathered
  std::byte* d_fc1 = split ? at(st, Th) : ws;
  std::byte* d_ln2 = split ? at(st, Th + Tf) : at(ws, Tf);
  // proj's output gradient: the rank's tokens (d_proj), and whole (d_proj_all; the same buffer without sequence parallelism).
  std::byte* d_proj = split && !sp ? at(st, Th + Tf + Tsh) : at(ws, Tf + Th);
  std::byte* d_proj_all = split ? at(st, Th + Tf + Tsh) : sp ? sp_gathered() : d_proj;
  std::byte* d_qkv = split ? at(st, 2 * Th + Tf + Tsh) : at(ws, Tf + 2 * Th);
  std::byte* d_ln1 = split ? at(st, 2 * Th + Tf + Tsh + 3 * Tht) : at(ws, Tf);
  std::byte* d_attn = at(ws, Tf);  // no weights: never stashed
  std::byte* scratch = score_scratch();
  if (pass == Pass::weight) {
    linear_backward_weight(A(a.gelu), d_fc2, g(p, 10), g(p, 11), T, f, h);
    linear_backward_weight(gathered(A(a.ln2)), d_fc1, g(p, 8), g(p, 9), T, h, f);
    gpu::layernorm_backward_weight(dt_, d_ln2, A(a.x2), S(a.mean2), S(a.rstd2), g(p, 6), g(p, 7), Ts, h, stream_);
    linear_backward_weight(A(a.attn), d_proj_all, g(p, 4), g(p, 5), T, ht, h);
    linear_backward_weight(gathered(A(a.ln1)), d_qkv, g(p, 2), g(p, 3), T, h, 3 * ht);
    gpu::layernorm_backward_weight(dt_, d_ln1, A(a.x), S(a.mean1), S(a.rstd1), g(p, 0), g(p, 1), Ts, h, stream_);
    return;
  }
  if (split) gather_into(dy, d_fc2);
  const void* fc2_out = split ? d_fc2 : gathered(dy);
  if (full) linear_backward_weight(A(a.gelu), fc2_out, g(p, 10), g(p, 11), T, f, h);
  linear_backward_input(w(p, 10), fc2_out, d_fc1, T, f, h, false);
  gpu::gelu_backward(dt_, A(a.pre), d_fc1, d_fc1, Tf, stream_);
  if (full) linear_backward_weight(gathered(A(a.ln2)), d_fc1, g(p, 8), g(p, 9), T, h, f);
  column_input_grad(w(p, 8), d_fc1, d_ln2, f, false);
  copy_on_device(d_proj, dy, Tsh_bytes);
  if (full) gpu::layernorm_backward_weight(dt_, d_ln2, A(a.x2), S(a.mean2), S(a.rstd2), g(p, 6), g(p, 7), Ts, h, stream_);
  gpu::layernorm_backward_input(dt_, d_ln2, A(a.x2), w(p, 6), S(a.mean2), S(a.rstd2), d_proj, Ts, h, stream_);
  if (d_proj_all != d_proj) gather_into(d_proj, d_proj_all);
  if (full) linear_backward_weight(A(a.attn), d_proj_all, g(p, 4), g(p, 5), T, ht, h);
  linear_backward_input(w(p, 4), d_proj_all, d_attn, T, ht, h, false);
  // Attention backward per sequence, all the rank's heads at once (cpu_kernels
  // attention_backward); flash: the kernels' (nothing recomputed first).
  if (flash())
    gpu::flash_attention_backward(dt_, A(a.qkv), A(a.attn), d_attn, flash_lse(c, mb, p, a.probs), d_qkv,
                                  spec_.micro_batch_size, s, ht, at_, at_, stream_);
  if (!flash() && selective()) attention_probs_again(A(a.qkv));
  const std::byte* probs = attention_probs(c, mb, p, a.probs);
  const gemm::Attention att(s, ht, at_);
  for (int bi = 0; bi < spec_.micro_batch_size && !flash(); ++bi) {
    const std::int64_t base = std::int64_t{bi} * s * 3 * ht;
    const std::byte* q = A(a.qkv + base);
    const std::byte* k = q + ht * e_;
    const std::byte* v = q + 2 * ht * e_;
    std::byte* dq = at(d_qkv, base);
    const std::byte* P = probs + bi * att.heads * att.ss() * e_;
    const std::byte* dO = at(d_attn, std::int64_t{bi} * s * ht);
    gemm(att.dv(), P, dO, dq + 2 * ht * e_);
    gemm(att.dp(), dO, v, scratch);
    gpu::causal_softmax_backward(dt_, P, scratch, s, att.heads, stream_);
    gemm(att.dq(), scratch, k, dq);
    gemm(att.dk(), scratch, q, dq + ht * e_);
  }
  if (full) linear_backward_weight(gathered(A(a.ln1)), d_qkv, g(p, 2), g(p, 3), T, h, 3 * ht);
  column_input_grad(w(p, 2), d_qkv, d_ln1, 3 * ht, false);
  copy_on_device(dx, d_proj, Tsh_bytes);
  if (full) gpu::layernorm_backward_weight(dt_, d_ln1, A(a.x), S(a.mean1), S(a.rstd1), g(p, 0), g(p, 1), Ts, h, stream_);
  gpu::layernorm_backward_input(dt_, d_ln1, A(a.x), w(p, 0), S(a.mean1), S(a.rstd1), dx, Ts, h, stream_);
}

void CudaBackend::backward_mlp(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass,
                               std::byte* st) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden, f = static_cast<int>(ft_);
  const std::int64_t Th = std::int64_t{T} * h, Tsh = ts_ * h;
  const std::byte* x = act(c, mb, p, 0);  // the rank's Ts tokens (sequence parallelism)
  const std::byte* pre = act(c, mb, p, Tsh);
  const std::byte* gl = act(c, mb, p, Tsh + std::int64_t{T} * f);
  const bool split = pass != Pass::full;
  std::byte* d_fc2 = split ? st : nullptr;  // full: dy, gathered
  std::byte* d_fc1 = split ? st + Th * e_ : temporaries();
  if (pass == Pass::weight) {
    linear_backward_weight(gl, d_fc2, g(p, 2), g(p, 3), T, f, h);
    linear_backward_weight(gathered(x), d_fc1, g(p, 0), g(p, 1), T, h, f);
    return;
  }
  if (split) gather_into(dy, d_fc2);
  const void* fc2_out = split ? d_fc2 : gathered(dy);
  if (!split) linear_backward_weight(gl, fc2_out, g(p, 2), g(p, 3), T, f, h);
  linear_backward_input(w(p, 2), fc2_out, d_fc1, T, f, h, false);
  gpu::gelu_backward(dt_, pre, d_fc1, d_fc1, std::int64_t{T} * f, stream_);
  copy_on_device(dx, dy, static_cast<std::uint64_t>(Tsh * e_));
  if (!split) linear_backward_weight(gathered(x), d_fc1, g(p, 0), g(p, 1), T, h, f);
  column_input_grad(w(p, 0), d_fc1, dx, f, true);  // the residual's gradient, dy, added
}

// Sequence parallelism: x, the norm and its gradient the rank's Ts tokens,
// the LM head reading the norm's output gathered whole.
void CudaBackend::backward_head(const Chunk& c, const Piece& p, int mb, std::byte* dx, Pass pass, std::byte* st) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden, V = static_cast<int>(vocab_local_);
  const int Ts = static_cast<int>(ts_);
  const HeadActs a = head_acts();
  const std::size_t lm = llama() ? 1 : 2;  // llama: RMSNorm [h], then the LM head
  auto A = [&](std::int64_t elements) { return act(c, mb, p, elements); };
  auto S = [&](std::int64_t elements) { return stat(c, mb, p, elements); };
  auto norm_weight_grad = [&](const std::byte* d_ln) {
    if (llama()) gpu::rmsnorm_backward_weight(dt_, d_ln, A(a.x), S(a.rstd), g(p, 0), Ts, h, stream_);
    else gpu::layernorm_backward_weight(dt_, d_ln, A(a.x), S(a.mean), S(a.rstd), g(p, 0), g(p, 1), Ts, h, stream_);
  };
  std::byte* probs = A(a.probs);  // becomes d(logits) in place, kept in the slab until W
  std::byte* d_ln = pass == Pass::full ? temporaries() + std::int64_t{T} * ft_ * e_ : st;
  if (pass == Pass::weight) {
    linear_backward_weight(gathered(A(a.ln)), probs, g(p, lm), nullptr, T, h, V);
    norm_weight_grad(d_ln);
    return;
  }
  // d(step loss)/d(logits): the step loss is the mean over micro-batches of
  // the mean over tokens (fp16: not divided, see grad_unscale_).
  const float scale = dt_ == DType::fp16 ? 1.0f : 1.0f / (static_cast<float>(T) * static_cast<float>(spec_.step_microbatches()));
  gpu::softmax_crossentropy_backward(dt_, probs, reinterpret_cast<const std::int32_t*>(A(a.targets)), T, V, scale, stream_,
                                     vocab_first_);
  if (pass == Pass::full) linear_backward_weight(gathered(A(a.ln)), probs, g(p, lm), nullptr, T, h, V);
  column_input_grad(w(p, lm), probs, d_ln, V, false);  // the vocabulary parts' sum
  cuda_check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(std::int64_t{Ts} * h * e_), stream_), kWho, "memset");
  if (pass == Pass::full) norm_weight_grad(d_ln);
  if (llama()) gpu::rmsnorm_backward_input(dt_, d_ln, A(a.x), w(p, 0), S(a.rstd), dx, Ts, h, stream_);
  else gpu::layernorm_backward_input(dt_, d_ln, A(a.x), w(p, 0), S(a.mean), S(a.rstd), dx, Ts, h, stream_);
}

}  // namespace pipebench::gpu
