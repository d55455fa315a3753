#include "pipebench/backends/backend_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/model/synthetic.hpp"

namespace pipebench {

CpuBackend::CpuBackend(const Job& job, int rank) : job_(job), memory_(rank, job.device.memory_capacity_bytes) {
  cpu::set_blas_threads(job.device.threads_per_rank);
}

void CpuBackend::build(const StageSpec& spec) {
  spec_ = spec;
  const ModelSpec& ms = job_.model;
  const ModelDesc model(ms, DType::fp32, spec.tensor);
  const std::int64_t h = ms.hidden;
  const int b = spec.micro_batch_size;
  tokens_ = model.tokens(b);
  setup_context(spec);
  tp_ = spec.tensor.degree;
  if (tp_ > 1 && (!tensor_ || tensor_->size() != tp_ || tensor_->rank() != spec.tensor_rank))
    throw Error(fmt::format("cpu backend: tensor_parallel = {} needs its tensor group (set_tensor_group) before build", tp_));
  ts_ = model.region_tokens(b);
  ht_ = h / tp_;
  ft_ = ms.ffn_hidden / tp_;
  at_ = ms.heads / tp_;
  kvheads_t_ = ms.kv_heads / tp_;
  kvt_ = static_cast<std::int64_t>(kvheads_t_) * (h / ms.heads);
  vocab_local_ = padded_vocab(ms, tp_) / tp_;
  const std::int64_t first_row = spec.tensor_rank * vocab_local_;
  vocab_part_ = tp_ > 1 ? cpu::VocabPart{static_cast<std::int32_t>(first_row), static_cast<std::int32_t>(vocab_local_)}
                        : cpu::VocabPart{};
  vocab_valid_ = static_cast<int>(std::clamp<std::int64_t>(ms.vocab - first_row, 0, vocab_local_));
  const bool train = spec.mode == RunMode::train;
  layers_ = {spec.chunks.front().first_layer, spec.chunks.back().last_layer()};
  const auto boundary = static_cast<std::size_t>(ts_ * h);  // the rank's tokens with sequence parallelism
  const auto m = static_cast<std::size_t>(spec.num_microbatches);
  chunks_.resize(static_cast<std::size_t>(spec.num_chunks()));
  std::vector<StageLayout> layouts;
  for (const StageRange& r : spec.chunks)
    layouts.push_back(stage_layout(ms, DType::fp32, r, b, "cpu", spec.tensor, spec.tensor_rank));
  own_shards(layouts);
  for (int ci = 0; ci < spec.num_chunks(); ++ci) {
    Chunk& c = chunks_[static_cast<std::size_t>(ci)];
    const StageLayout& layout = layouts[static_cast<std::size_t>(ci)];
    c.pieces = layout.pieces;
    const auto n = static_cast<std::size_t>(layout.params);
    c.params = TrackedArray<float>(memory_, MemCategory::params, n, "parameters");
    if (train) {
      c.grads = TrackedArray<float>(memory_, MemCategory::grads, n, "gradients");
      if (job_.train.optimizer == OptimizerKind::adamw) {
        // The shard's part of this chunk; the padding of the last shard with chunk 0's.
        const auto k = static_cast<std::size_t>(c.owned.size() + (ci == 0 ? shard_padding_ : 0));
        c.adam_m = TrackedArray<float>(memory_, MemCategory::optimizer, k, "AdamW first moments");
        c.adam_v = TrackedArray<float>(memory_, MemCategory::optimizer, k, "AdamW second moments");
      }
    }
    const bool has_prev = spec.receives(ci), has_next = spec.sends(ci);
    if (has_prev) c.recv_prev = TrackedArray<float>(memory_, MemCategory::comm, boundary, "activation receive buffer");
    if (has_next && train) c.recv_next = TrackedArray<float>(memory_, MemCategory::comm, boundary, "gradient receive buffer");
    if (has_next)
      for (int i = 0; i < spec.send_pool(ActionKind::F, ci); ++i)
        c.send_next.emplace_back(memory_, MemCategory::comm, boundary, "activation send buffer");
    if (has_prev && train)
      for (int i = 0; i < spec.send_pool(ActionKind::B, ci); ++i)
        c.send_prev.emplace_back(memory_, MemCategory::comm, boundary, "gradient send buffer");
    c.slab_bytes = static_cast<std::uint64_t>(layout.activation_bytes);
    c.slabs.resize(m);
    c.stash.resize(m);
    for (const Piece& p : c.pieces) c.stash_floats += stash_floats(p);
    if (spec.recompute && train) {  // one piece a checkpoint (stage_layout.hpp)
      c.checkpointed = true;
      c.slab_bytes = static_cast<std::uint64_t>(layout.largest_piece_bytes);
      c.kept_offsets.assign(layout.kept_offsets.begin(), layout.kept_offsets.end());
    }
    c.kept.resize(m);
    // Initial weights: a function of (seed, piece, tensor, element) only.
    for (const Piece& p : c.pieces)
      for (std::size_t t = 0; t < p.tensors.size(); ++t) initial_values(ms, p, t, c.params.data() + p.tensors[t].offset);
  }
  if (train) keep_shards_apart();
  build_workspace(model, train);
  loss_.assign(m, 0.0);
}

// The stage's workspace (ModelDesc::cpu_workspace_bytes): the rotary table,
// the context-parallel K/V buffers, the flash tiles, the tensor-parallel
// statistics and sequence-parallel buffers, and in training the backward's
// temporaries, shared by the chunks.
void CpuBackend::build_workspace(const ModelDesc& model, bool train) {
  const ModelSpec& ms = job_.model;
  const int b = spec_.micro_batch_size;
  const std::int64_t h = ms.hidden;
  if (ms.kind == ModelKind::llama) {
    const std::int64_t rope_floats = static_cast<std::int64_t>(seq_local_) * (ms.hidden / ms.heads);
    rope_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(rope_floats), "rotary table");
    cpu::rope_table(rope_.data(), seq_local_, ms.hidden / ms.heads, ms.rope_theta, positions_.data());
  }
  if (cp_ > 1) {
    const std::int64_t kv = model.context_kv_bytes(b) / static_cast<std::int64_t>(sizeof(float));
    const std::int64_t floats = spec_.tensor.context_comm == CpComm::ring
                                    ? kCpuRingBuffers * kv + (seq_local_ / 2) * (ms.hidden / ms.heads + 1)
                                    : (kCpuContextBuffers * cp_ + 1) * kv;
    cp_buffers_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(floats),
                                      "context-parallel K/V buffers");
  }
  if (cpu_flash_tiles(ms))
    flash_tiles_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(kCpuFlashScratchFloats),
                                       "flash attention tiles");
  if (tp_ > 1)
    tp_stats_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(3 * tokens_),
                                    "tensor-parallel cross-entropy statistics");
  if (sequence_parallel())
    sp_buffers_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(2 * tokens_ * h),
                                      "sequence-parallel gather and reduce-scatter buffers");
  if (train) {
    // Backward temporaries, shared by the chunks: dgelu [T,f], dh [T,h],
    // dx2 [T,h], dqkv [T,3h], two ping-pong gradients [T,h], one s x s
    // attention scratch and with selective recomputation the probabilities
    // (llama, tensor-parallel widths, flash: ModelDesc::cpu_workspace_bytes).
    const auto held = static_cast<std::int64_t>(rope_.size() + flash_tiles_.size() + cp_buffers_.size() +
                                                tp_stats_.size() + sp_buffers_.size());
    const std::int64_t ws = model.cpu_workspace_bytes(b, true) / static_cast<std::int64_t>(sizeof(float)) - held;
    workspace_ = TrackedArray<float>(memory_, MemCategory::workspace, static_cast<std::size_t>(ws), "backward workspace");
  } else if (spec_.tensor.selective_recompute) {
    throw Error("cpu backend: selective recomputation in inference");  // tensor_split() never asks for it
  }
}

std::int64_t CpuBackend::built_params() const {
  std::int64_t n = 0;
  for (const Chunk& c : chunks_) n += static_cast<std::int64_t>(c.params.size());
  return n;
}

void CpuBackend::begin_step(int step, double /*deadline_s*/) {
  step_ = step;
  for (Chunk& c : chunks_) c.backwards_done = 0;
}

float* CpuBackend::act(const Chunk& c, int mb, const Piece& p, std::int64_t float_offset) const {
  const std::int64_t piece = c.checkpointed ? 0 : p.act_offset;
  return reinterpret_cast<float*>(c.slabs[static_cast<std::size_t>(mb)].get() + piece) + float_offset;
}

// Where piece i keeps its input x (the previous piece writes it there).
float* CpuBackend::piece_input(const Chunk& c, int mb, std::size_t i) const {
  const Piece& p = c.pieces[i];
  return p.kind == PieceKind::embedding ? nullptr : act(c, mb, p, 0);
}

// Tensor-parallel (docs/tensor-parallel.md): a column-parallel layer reads
// its region's input (gathered from the ranks' tokens with sequence
// parallelism), a row-parallel layer's output is summed over the group
// (row_parallel_out, backend_cpu_tensor.cpp).
void CpuBackend::forward_piece(const Chunk& c, const Piece& p, int mb, const float* in, float* out) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), Ts = static_cast<int>(ts_), h = ms.hidden, V = ms.vocab;
  const int B = spec_.micro_batch_size;
  const float* W = c.params.data();
  auto act = [&](int m, const Piece& q, std::int64_t off) { return this->act(c, m, q, off); };
  auto w = [&](std::size_t t) { return W + p.tensors[t].offset; };
  // Every piece but the embedding keeps its input at the start of its slab
  // region; only a stage's first piece gets it from elsewhere (the receive buffer).
  if (p.kind != PieceKind::embedding && in != act(mb, p, 0))
    std::memcpy(act(mb, p, 0), in, sizeof(float) * static_cast<std::size_t>(Ts) * h);
  switch (p.kind) {
    case PieceKind::embedding: {
      auto* tokens = reinterpret_cast<std::int32_t*>(act(mb, p, 0));
      std::vector<std::int32_t> tok, tgt;
      synthetic_batch(ms, step_, spec_.first_sample(mb), B, tok, tgt);
      select_rows(tok, tokens);
      // Tensor-parallel: the rank's vocabulary rows; the position table added by the lead rank.
      float* whole = sequence_parallel() ? sp_partial() : out;
      const float* wpe = p.tensors.size() > 1 && lead() ? w(1) : nullptr;
      for_each_run([&](std::int64_t row0, int n, int len, int pos0) {
        cpu::embedding_forward(tokens + row0, w(0), wpe ? wpe + static_cast<std::int64_t>(pos0) * h : nullptr,
                               whole + row0 * h, n, len, h, vocab_part_);
      });
      sum_over_group(whole, out);
      break;
    }
    case PieceKind::gpt: {
      const int ht = static_cast<int>(ht_), ft = static_cast<int>(ft_);
      const GptActs a(T, h, ft, 4, ht, Ts);
      float* x = act(mb, p, a.x);
      cpu::layernorm_forward(x, w(0), w(1), act(mb, p, a.ln1), act(mb, p, a.mean1), act(mb, p, a.rstd1), Ts, h);
      cpu::linear_forward(gathered(act(mb, p, a.ln1)), w(2), w(3), act(mb, p, a.qkv), T, h, 3 * ht);
      attention_core_forward(c, mb, p, a.probs, act(mb, p, a.qkv), act(mb, p, a.attn), at_);
      float* x2 = act(mb, p, a.x2);
      row_parallel_out(act(mb, p, a.attn), w(4), w(5), x, x2, ht);
      cpu::layernorm_forward(x2, w(6), w(7), act(mb, p, a.ln2), act(mb, p, a.mean2), act(mb, p, a.rstd2), Ts, h);
      cpu::linear_gelu_forward(gathered(act(mb, p, a.ln2)), w(8), w(9), act(mb, p, a.pre), act(mb, p, a.gelu), T, h, ft);
      row_parallel_out(act(mb, p, a.gelu), w(10), w(11), x2, out, ft);
      break;
    }
    case PieceKind::llama: forward_llama(c, p, mb, out); break;
    case PieceKind::mlp: {
      const int ft = static_cast<int>(ft_);
      float* x = act(mb, p, 0);
      float* pre = x + static_cast<std::int64_t>(Ts) * h;
      float* gl = pre + static_cast<std::int64_t>(T) * ft;
      cpu::linear_gelu_forward(gathered(x), w(0), w(1), pre, gl, T, h, ft);
      row_parallel_out(gl, w(2), w(3), x, out, ft);
      break;
    }
    case PieceKind::head: {
      const bool rms = ms.kind == ModelKind::llama;  // RMSNorm [h], then the LM head
      const int Vl = static_cast<int>(vocab_local_);
      const HeadActs a(T, h, Vl, 4, rms, Ts);
      float* x = act(mb, p, a.x);
      if (rms) cpu::rmsnorm_forward(x, w(0), act(mb, p, a.ln), act(mb, p, a.rstd), Ts, h, static_cast<float>(ms.norm_eps));
      else cpu::layernorm_forward(x, w(0), w(1), act(mb, p, a.ln), act(mb, p, a.mean), act(mb, p, a.rstd), Ts, h);
      float* probs = act(mb, p, a.probs);
      cpu::linear_forward(gathered(act(mb, p, a.ln)), w(rms ? 1 : 2), nullptr, probs, T, h, Vl);
      auto* targets = reinterpret_cast<std::int32_t*>(act(mb, p, a.targets));
      std::vector<std::int32_t> tok, tgt;
      synthetic_batch(ms, step_, spec_.first_sample(mb), B, tok, tgt);
      select_rows(tgt, targets);
      loss_[static_cast<std::size_t>(mb)] = tp_ == 1 ? cpu::softmax_crossentropy_forward(probs, targets, T, V)
                                                     : vocab_parallel_loss(probs, targets);
      break;
    }
  }
}

void CpuBackend::acquire_slab(Chunk& c, int mb) {
  auto& slab = c.slabs[static_cast<std::size_t>(mb)];
  if (slab) release_slab(c, mb);  // a forward again without backward (tests, inference probes)
  memory_.reserve(MemCategory::activations, c.slab_bytes, [&] { return fmt::format("activations of micro-batch {}", mb); });
  if (!c.free_slabs.empty()) {
    slab = std::move(c.free_slabs.back());
    c.free_slabs.pop_back();
  } else {
    slab.reset(new std::byte[c.slab_bytes]);  // every byte is written by the forward
    ++slabs_allocated_;
  }
  ++live_;
  peak_live_ = std::max(peak_live_, live_);
}

void CpuBackend::release_slab(Chunk& c, int mb) {
  auto& slab = c.slabs[static_cast<std::size_t>(mb)];
  if (!slab) return;
  memory_.release(MemCategory::activations, c.slab_bytes);
  c.free_slabs.push_back(std::move(slab));
  --live_;
}

// The chunk's pieces in order, from `in` (null for the embedding, which
// reads the token ids itself) to `last_out` (null for the head).
void CpuBackend::forward_pieces(Chunk& c, int mb, const float* in, float* last_out) {
  for (std::size_t i = 0; i < c.pieces.size(); ++i) {
    float* out = i + 1 < c.pieces.size() ? piece_input(c, mb, i + 1) : last_out;
    if (c.before_piece) c.before_piece(static_cast<int>(i));
    forward_piece(c, c.pieces[i], mb, in, out);
    in = out;
  }
}

// With recomputation one piece after another in the slab's one-piece space,
// each piece's input kept as it runs, its output through the workspace.
void CpuBackend::forward_checkpointed(Chunk& c, int mb, const float* in, float* last_out) {
  std::byte* kept = c.kept[static_cast<std::size_t>(mb)].get();
  for (std::size_t i = 0; i < c.pieces.size(); ++i) {
    const Piece& p = c.pieces[i];
    float* out = i + 1 < c.pieces.size() ? workspace_ping() : last_out;
    if (c.before_piece) c.before_piece(static_cast<int>(i));
    forward_piece(c, p, mb, in, out);
    // Its input, at the start of its activations (the embedding: the token ids).
    std::memcpy(kept + c.kept_offsets[i], act(c, mb, p, 0), c.kept_offsets[i + 1] - c.kept_offsets[i]);
    in = out;
  }
}

void CpuBackend::forward(int /*step*/, int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  std::byte* kept = c.checkpointed ? acquire_kept(c, mb) : nullptr;
  acquire_slab(c, mb);
  const bool embedding = c.pieces.front().kind == PieceKind::embedding;
  const float* in = embedding ? nullptr : c.recv_prev.data();
  float* out = spec_.sends(chunk) ? c.send_next[spec_.send_slot(ActionKind::F, mb, chunk)].data() : nullptr;
  if (kept) {
    forward_checkpointed(c, mb, in, out);
    release_slab(c, mb);  // kept: the pieces' inputs only
    ++live_;              // the micro-batch is still held, as its inputs
  } else {
    forward_pieces(c, mb, in, out);
  }
  if (spec_.mode == RunMode::inference) {
    if (keep_probs_ && c.pieces.back().kind == PieceKind::head) {
      const float* p = act(c, mb, c.pieces.back(),
                           HeadActs(tokens_, job_.model.hidden, vocab_local_, 4, job_.model.kind == ModelKind::llama).probs);
      kept_probs_.resize(static_cast<std::size_t>(spec_.num_microbatches));
      kept_probs_[static_cast<std::size_t>(mb)].assign(p, p + tokens_ * vocab_local_);
    }
    release_slab(c, mb);
  }
}

std::byte* CpuBackend::acquire_kept(Chunk& c, int mb) {
  auto& slot = c.kept[static_cast<std::size_t>(mb)];
  memory_.reserve(MemCategory::activations, c.kept_bytes(),
                  [&] { return fmt::format("input of micro-batch {} kept to recompute it", mb); });
  if (!slot) slot.reset(new std::byte[c.kept_bytes()]);
  return slot.get();
}

const float* CpuBackend::probs(int mb) const {
  const Chunk& c = chunks_.back();
  const Piece& p = c.pieces.back();
  if (p.kind != PieceKind::head || c.checkpointed) return nullptr;  // checkpointed: the slab holds one piece
  if (spec_.mode == RunMode::inference)
    return static_cast<std::size_t>(mb) < kept_probs_.size() ? kept_probs_[static_cast<std::size_t>(mb)].data() : nullptr;
  if (!c.slabs[static_cast<std::size_t>(mb)]) return nullptr;
  return act(c, mb, p, HeadActs(tokens_, job_.model.hidden, vocab_local_, 4, job_.model.kind == ModelKind::llama).probs);
}

// Stash of piece p (split backward), in floats: split_stash_elements().
std::int64_t CpuBackend::stash_floats(const Piece& p) const {
  return split_stash_elements(p.kind, tokens_, job_.model.hidden, ft_, kvt_, ht_, ts_);
}

// The backward of one piece. Pass::full: input and weight gradients now.
// Pass::input (B of a split backward): the input gradient, saving in `st`
// (this piece's stash) what the weight gradients need. Pass::weight (W):
// the weight gradients from `st` and the activations. The kernels' fused
// forms are their input and weight parts, so the bits are the same either way.
void CpuBackend::backward_piece(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* st) {
  switch (p.kind) {
    case PieceKind::embedding: {
      const auto* tokens = reinterpret_cast<const std::int32_t*>(act(c, mb, p, 0));
      const int h = job_.model.hidden;
      if (pass == Pass::input) {
        std::memcpy(st, dy, sizeof(float) * static_cast<std::size_t>(ts_ * h));
        break;
      }
      const float* dout = gathered(pass == Pass::weight ? st : dy);  // sequence-parallel: the whole, gathered
      float* dwpe = p.tensors.size() > 1 ? grad(c, p, 1) : nullptr;
      for_each_run([&](std::int64_t row0, int n, int len, int pos0) {
        cpu::embedding_backward(tokens + row0, dout + row0 * h, grad(c, p, 0),
                                dwpe ? dwpe + static_cast<std::int64_t>(pos0) * h : nullptr, n, len, h, vocab_part_);
      });
      break;
    }
    case PieceKind::gpt: backward_gpt(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::llama: backward_llama(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::mlp: backward_mlp(c, p, mb, dy, dx, pass, st); break;
    case PieceKind::head: backward_head(c, p, mb, dx, pass, st); break;
  }
}

// Tensor-parallel (docs/tensor-parallel.md): qkv, proj's input, fc1 and
// fc2's input are the rank's columns; the input gradients of the
// column-parallel layers (at ln2's and ln1's outputs) are partial sums,
// summed over the group (in B: a split backward's W has no collective but
// the sequence-parallel re-gathers). With sequence parallelism dy, x, x2,
// the norms and their gradients are the rank's Ts tokens; the row-parallel
// layers' output gradients are gathered whole (and kept so for W).
void CpuBackend::backward_gpt(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* st) {
  const int T = static_cast<int>(tokens_), Ts = static_cast<int>(ts_), h = job_.model.hidden;
  const int f = static_cast<int>(ft_), ht = static_cast<int>(ht_);
  const std::int64_t Th = static_cast<std::int64_t>(T) * h, Tf = static_cast<std::int64_t>(T) * f;
  const std::int64_t Tht = static_cast<std::int64_t>(T) * ht, Tsh = static_cast<std::int64_t>(Ts) * h;
  const GptActs a(T, h, f, 4, ht, Ts);
  auto A = [&](std::int64_t off) { return act(c, mb, p, off); };
  auto w = [&](std::size_t t) { return weight(c, p, t); };
  auto g = [&](std::size_t t) { return grad(c, p, t); };
  // Output gradients: in the stash (split) or the workspace (see build).
  float* ws = workspace_.data();
  const bool split = pass != Pass::full, sp = sequence_parallel();
  float* d_fc2 = split ? st : nullptr;  // full: dy, gathered
  float* d_fc1 = split ? st + Th : ws;
  float* d_ln2 = split ? st + Th + Tf : ws + Tf;
  // proj's output gradient: the rank's tokens (d_proj), and whole (d_proj_all; the same buffer without sequence parallelism).
  float* d_proj = split && !sp ? st + Th + Tf + Tsh : ws + Tf + Th;
  float* d_proj_all = split ? st + Th + Tf + Tsh : sp ? sp_gathered() : d_proj;
  float* d_qkv = split ? st + 2 * Th + Tf + Tsh : ws + Tf + 2 * Th;
  float* d_ln1 = split ? st + 2 * Th + Tf + Tsh + 3 * Tht : ws + Tf;
  float* d_attn = ws + Tf;  // no weights: never stashed
  if (pass == Pass::weight) {  // weights: from the output gradients B kept
    cpu::linear_backward_weight(A(a.gelu), d_fc2, g(10), g(11), T, f, h);
    cpu::linear_backward_weight(gathered(A(a.ln2)), d_fc1, g(8), g(9), T, h, f);
    cpu::layernorm_backward_weight(d_ln2, A(a.x2), A(a.mean2), A(a.rstd2), g(6), g(7), Ts, h);
    cpu::linear_backward_weight(A(a.attn), d_proj_all, g(4), g(5), T, ht, h);
    cpu::linear_backward_weight(gathered(A(a.ln1)), d_qkv, g(2), g(3), T, h, 3 * ht);
    cpu::layernorm_backward_weight(d_ln1, A(a.x), A(a.mean1), A(a.rstd1), g(0), g(1), Ts, h);
    return;
  }
  const bool full = pass == Pass::full;
  if (split) gather_into(dy, d_fc2);
  const float* fc2_out = split ? d_fc2 : gathered(dy);
  if (full) cpu::linear_backward_weight(A(a.gelu), fc2_out, g(10), g(11), T, f, h);
  cpu::linear_backward_input(w(10), fc2_out, d_fc1, T, f, h);
  cpu::gelu_backward(A(a.pre), d_fc1, d_fc1, Tf);
  if (full) cpu::linear_backward_weight(gathered(A(a.ln2)), d_fc1, g(8), g(9), T, h, f);
  column_input_grad(w(8), d_fc1, d_ln2, f);
  std::memcpy(d_proj, dy, sizeof(float) * static_cast<std::size_t>(Tsh));
  if (full) cpu::layernorm_backward_weight(d_ln2, A(a.x2), A(a.mean2), A(a.rstd2), g(6), g(7), Ts, h);
  cpu::layernorm_backward_input(d_ln2, A(a.x2), w(6), A(a.mean2), A(a.rstd2), d_proj, Ts, h);
  if (d_proj_all != d_proj) gather_into(d_proj, d_proj_all);
  if (full) cpu::linear_backward_weight(A(a.attn), d_proj_all, g(4), g(5), T, ht, h);
  cpu::linear_backward_input(w(4), d_proj_all, d_attn, T, ht, h);
  attention_core_backward(c, mb, p, a.probs, A(a.qkv), A(a.attn), d_attn, d_qkv, at_);
  if (full) cpu::linear_backward_weight(gathered(A(a.ln1)), d_qkv, g(2), g(3), T, h, 3 * ht);
  column_input_grad(w(2), d_qkv, d_ln1, 3 * ht);
  std::memcpy(dx, d_proj, sizeof(float) * static_cast<std::size_t>(Tsh));
  if (full) cpu::layernorm_backward_weight(d_ln1, A(a.x), A(a.mean1), A(a.rstd1), g(0), g(1), Ts, h);
  cpu::layernorm_backward_input(d_ln1, A(a.x), w(0), A(a.mean1), A(a.rstd1), dx, Ts, h);
}

void CpuBackend::backward_mlp(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* st) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden, f = static_cast<int>(ft_);
  const std::int64_t Th = static_cast<std::int64_t>(T) * h, Tsh = ts_ * h;
  const float* x = act(c, mb, p, 0);
  const float* pre = x + Tsh;
  const float* gl = pre + static_cast<std::int64_t>(T) * f;
  const bool split = pass != Pass::full;
  float* d_fc2 = split ? st : nullptr;  // full: dy, gathered
  float* d_fc1 = split ? st + Th : workspace_.data();
  if (pass == Pass::weight) {
    cpu::linear_backward_weight(gl, d_fc2, grad(c, p, 2), grad(c, p, 3), T, f, h);
    cpu::linear_backward_weight(gathered(x), d_fc1, grad(c, p, 0), grad(c, p, 1), T, h, f);
    return;
  }
  if (split) gather_into(dy, d_fc2);
  const float* fc2_out = split ? d_fc2 : gathered(dy);
  if (!split) cpu::linear_backward_weight(gl, fc2_out, grad(c, p, 2), grad(c, p, 3), T, f, h);
  cpu::linear_backward_input(weight(c, p, 2), fc2_out, d_fc1, T, f, h);
  cpu::gelu_backward(pre, d_fc1, d_fc1, static_cast<std::int64_t>(T) * f);
  if (!split) cpu::linear_backward_weight(gathered(x), d_fc1, grad(c, p, 0), grad(c, p, 1), T, h, f);
  column_input_grad(weight(c, p, 0), d_fc1, dx, f, dy);  // the residual's gradient added
}

void CpuBackend::backward_head(Chunk& c, const Piece& p, int mb, float* dx, Pass pass, float* st) {
  const int T = static_cast<int>(tokens_), Ts = static_cast<int>(ts_), h = job_.model.hidden;
  const int V = static_cast<int>(vocab_local_);
  const bool rms = job_.model.kind == ModelKind::llama;  // RMSNorm [h] and the LM head at tensor 1
  const HeadActs a(T, h, V, 4, rms, Ts);
  const std::size_t lm = rms ? 1 : 2;
  auto A = [&](std::int64_t off) { return act(c, mb, p, off); };
  auto norm_weight = [&](const float* d_ln) {
    if (rms) cpu::rmsnorm_backward_weight(d_ln, A(a.x), A(a.rstd), grad(c, p, 0), Ts, h);
    else cpu::layernorm_backward_weight(d_ln, A(a.x), A(a.mean), A(a.rstd), grad(c, p, 0), grad(c, p, 1), Ts, h);
  };
  float* probs = A(a.probs);  // becomes d(logits) in place, kept in the slab until W
  float* d_ln = pass == Pass::full ? workspace_.data() + static_cast<std::int64_t>(T) * ft_ : st;
  if (pass == Pass::weight) {
    cpu::linear_backward_weight(gathered(A(a.ln)), probs, grad(c, p, lm), nullptr, T, h, V);
    norm_weight(d_ln);
    return;
  }
  // d(step loss)/d(logits): the step loss is the mean over micro-batches of the mean over tokens.
  const float scale = 1.0f / (static_cast<float>(T) * static_cast<float>(spec_.step_microbatches()));
  cpu::softmax_crossentropy_backward(probs, reinterpret_cast<const std::int32_t*>(A(a.targets)), T, V, scale, vocab_part_);
  if (pass == Pass::full) cpu::linear_backward_weight(gathered(A(a.ln)), probs, grad(c, p, lm), nullptr, T, h, V);
  column_input_grad(weight(c, p, lm), probs, d_ln, V);  // the vocabulary parts' sum
  std::memset(dx, 0, sizeof(float) * static_cast<std::size_t>(static_cast<std::int64_t>(Ts) * h));
  if (pass == Pass::full) norm_weight(d_ln);
  if (rms) cpu::rmsnorm_backward_input(d_ln, A(a.x), weight(c, p, 0), A(a.rstd), dx, Ts, h);
  else cpu::layernorm_backward_input(d_ln, A(a.x), weight(c, p, 0), A(a.mean), A(a.rstd), dx, Ts, h);
}

// B: the pieces from the last to the first, each handing its input gradient
// to the one before it; with a split backward each also fills its part of
// the micro-batch's stash, and the activations stay until W.
void CpuBackend::backward(int /*step*/, int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  const bool has_next = spec_.sends(chunk), has_prev = spec_.receives(chunk);
  const Pass pass = spec_.split_backward ? Pass::input : Pass::full;
  float* stash = pass == Pass::input ? acquire_stash(c, mb) : nullptr;
  const std::byte* kept = c.checkpointed ? c.kept[static_cast<std::size_t>(mb)].get() : nullptr;
  if (kept) {
    --live_;  // held as its inputs until now; acquire_slab counts it again
    acquire_slab(c, mb);
  }
  float* ping = workspace_ping();
  float* pong = ping + tokens_ * job_.model.hidden;
  const float* dy = has_next ? c.recv_next.data() : nullptr;  // the head starts from the loss
  std::int64_t offset = c.stash_floats;
  for (std::size_t k = c.pieces.size(); k-- > 0;) {
    const Piece& p = c.pieces[k];
    offset -= stash_floats(p);
    if (kept) {
      // Recomputation: the piece's forward again from its kept input (the
      // embedding makes its token ids again); its output goes to whichever
      // ping-pong buffer dy is not in (the one this piece's dx then takes).
      const float* in = p.kind == PieceKind::embedding ? nullptr : reinterpret_cast<const float*>(kept + c.kept_offsets[k]);
      forward_piece(c, p, mb, in, p.kind == PieceKind::head ? nullptr : (dy == ping ? pong : ping));
    }
    float* dx = nullptr;
    if (p.kind != PieceKind::embedding) {
      if (k == 0) dx = has_prev ? c.send_prev[spec_.send_slot(ActionKind::B, mb, chunk)].data() : nullptr;
      else dx = (dy == ping) ? pong : ping;
    }
    backward_piece(c, p, mb, dy, dx, pass, stash ? stash + offset : nullptr);
    if (pass == Pass::full) piece_final(chunk, c, p, static_cast<int>(c.pieces.size() - k));
    dy = dx;
  }
  if (kept) memory_.release(MemCategory::activations, c.kept_bytes());
  if (pass == Pass::full) {
    release_slab(c, mb);
    backward_done(c);
  }
}

// W: every piece's weight gradients from the stash B left, the pieces in
// backward order as B took them (each piece's alone: the order changes no
// value; the buckets of grad_sync = "overlap" fill in that order), then the
// micro-batch's activations and stash are released.
void CpuBackend::weight_grad(int /*step*/, int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  float* stash = c.stash[static_cast<std::size_t>(mb)].get();
  if (!spec_.split_backward || !stash)
    throw Error(fmt::format("cpu backend: W of micro-batch {} (chunk {}) without its B", mb, chunk));
  std::int64_t offset = c.stash_floats;
  for (std::size_t k = c.pieces.size(); k-- > 0;) {
    const Piece& p = c.pieces[k];
    offset -= stash_floats(p);
    backward_piece(c, p, mb, nullptr, nullptr, Pass::weight, stash + offset);
    piece_final(chunk, c, p, static_cast<int>(c.pieces.size() - k));
  }
  release_stash(c, mb);
  release_slab(c, mb);
  backward_done(c);
}

float* CpuBackend::acquire_stash(Chunk& c, int mb) {
  auto& slot = c.stash[static_cast<std::size_t>(mb)];
  const auto bytes = static_cast<std::uint64_t>(c.stash_floats) * sizeof(float);
  memory_.reserve(MemCategory::activations, bytes,
                  [&] { return fmt::format("output gradients of micro-batch {} kept for its weight gradient", mb); });
  if (!slot) slot.reset(new float[static_cast<std::size_t>(c.stash_floats)]);
  return slot.get();
}

void CpuBackend::release_stash(Chunk& c, int /*mb*/) {
  memory_.release(MemCategory::activations, static_cast<std::uint64_t>(c.stash_floats) * sizeof(float));
}

void CpuBackend::own_shards(const std::vector<StageLayout>& layouts) {
  std::int64_t total = 0;
  for (const StageLayout& l : layouts) total += l.params;
  const parallel::Span shard = spec_.shard_optimizer ? parallel::shard_of(total, spec_.grad_group(), spec_.grad_rank())
                                                     : parallel::Span{0, total};
  std::int64_t base = 0;
  for (std::size_t c = 0; c < layouts.size(); ++c) {
    const parallel::Span in = parallel::intersect(shard, {base, base + layouts[c].params});
    chunks_[c].owned = in.size() > 0 ? parallel::Span{in.begin - base, in.end - base} : parallel::Span{};
    base += layouts[c].params;
  }
  shard_padding_ = spec_.shard_optimizer ? parallel::shard_size(total, spec_.grad_group()) - shard.size() : 0;
}

// zero2 and fsdp: the shard buffers (after the chunks' parameters are
// initialised: fsdp's shard starts as their copy).
void CpuBackend::keep_shards_apart() {
  const bool grads = spec_.sharding == OptimizerSharding::zero2 || spec_.sharding == OptimizerSharding::fsdp;
  const bool params = spec_.sharding == OptimizerSharding::fsdp;
  if (!grads) return;
  std::int64_t owned = 0;
  for (const Chunk& c : chunks_) owned += c.owned.size();
  const auto n = static_cast<std::size_t>(owned + shard_padding_);
  shard_grads_ = TrackedArray<float>(memory_, MemCategory::grads, n, "reduced gradient shard");
  if (params) shard_params_ = TrackedArray<float>(memory_, MemCategory::params, n, "parameter shard");
  std::int64_t at = 0;
  for (Chunk& c : chunks_) {
    c.shard_grads = shard_grads_.data() + at;
    if (params) {
      c.shard_params = shard_params_.data() + at;
      std::memcpy(c.shard_params, c.params.data() + c.owned.begin, static_cast<std::size_t>(c.owned.size()) * sizeof(float));
    }
    at += c.owned.size();
  }
}

const float* CpuBackend::owned_grads(const Chunk& c, parallel::Span part) {
  return c.shard_grads ? c.shard_grads + (part.begin - c.owned.begin) : c.grads.data() + part.begin;
}

float* CpuBackend::owned_params(Chunk& c, parallel::Span part) {
  return c.shard_params ? c.shard_params + (part.begin - c.owned.begin) : c.params.data() + part.begin;
}

FlatRegion CpuBackend::gradient_shard(int chunk) {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  const auto n = static_cast<std::size_t>(c.owned.size());
  return c.shard_grads ? FlatRegion{c.shard_grads, n, n * sizeof(float)} : FlatRegion{};
}

FlatRegion CpuBackend::parameter_shard(int chunk) {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  const auto n = static_cast<std::size_t>(c.owned.size());
  return c.shard_params ? FlatRegion{c.shard_params, n, n * sizeof(float)} : FlatRegion{};
}

// The part of tensor `t` of chunk `c` this rank steps (empty, or within c.owned).
parallel::Span CpuBackend::owned_part(const Chunk& c, const TensorSlot& t) {
  const auto off = static_cast<std::int64_t>(t.offset);
  return parallel::intersect(c.owned, {off, off + static_cast<std::int64_t>(t.size)});
}

void CpuBackend::optimizer_step(int /*step*/, double grad_scale) {
  ++optimizer_steps_;
  const auto lr = static_cast<float>(job_.train.learning_rate);
  const auto scale = static_cast<float>(grad_scale);
  for (Chunk& c : chunks_) {
    for (const Piece& p : c.pieces)
      for (const TensorSlot& t : p.tensors) {
        const parallel::Span part = owned_part(c, t);
        if (part.size() == 0) continue;
        const std::int64_t n = part.size();
        float* w = owned_params(c, part);
        const float* g = owned_grads(c, part);
        const std::int64_t state = part.begin - c.owned.begin;  // in adam_m/v
        if (job_.train.optimizer == OptimizerKind::adamw)
          cpu::adamw_update(w, g, c.adam_m.data() + state, c.adam_v.data() + state, n, lr, kAdamBeta1, kAdamBeta2,
                            kAdamEps, t.matrix ? kAdamWeightDecay : 0.0f, optimizer_steps_, scale);
        else
          cpu::sgd_update(w, g, n, lr, scale);
      }
    std::memset(c.grads.data(), 0, c.grads.bytes());
  }
}

FlatRegion CpuBackend::parameters(int chunk) {
  TrackedArray<float>& p = chunks_.at(static_cast<std::size_t>(chunk)).params;
  return {p.data(), p.size(), p.bytes()};
}

FlatRegion CpuBackend::gradients(int chunk) {
  TrackedArray<float>& g = chunks_.at(static_cast<std::size_t>(chunk)).grads;
  return {g.data(), g.size(), g.bytes()};
}

void CpuBackend::abandon_gradients() {
  for (Chunk& c : chunks_) {  // deliberately never destroyed
    new TrackedArray<float>(std::move(c.grads));
    new TrackedArray<float>(std::move(c.params));
  }
  new TrackedArray<float>(std::move(shard_params_));  // an all-gather's send buffer
}

Buffer CpuBackend::recv_buffer(ActionKind kind, int /*mb*/, int chunk) {
  Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  TrackedArray<float>& b = kind == ActionKind::F ? c.recv_prev : c.recv_next;
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

Buffer CpuBackend::send_buffer(ActionKind kind, int mb, int chunk) {
  Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  TrackedArray<float>& b = (kind == ActionKind::F ? c.send_next : c.send_prev).at(spec_.send_slot(kind, mb, chunk));
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

}  // namespace pipebench
