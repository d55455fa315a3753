// The `cpu` backend: real fp32 training of the rank's model chunks (each a
// run of pieces: embedding, gpt/mlp blocks, head) with OpenBLAS
// (cpu_kernels.hpp); a split backward (B, then W from a stash of output
// gradients) and full activation recomputation (docs/cpu-backend.md).
//
// Memory, all through the tracker, in the model description's sizes:
//   params / grads: one flat buffer each, carved by a tensor table (llm.c);
//   optimizer: AdamW m and v (8 bytes/param), SGD none; with a sharded
//     optimizer (ZeRO-1) for the rank's shard only, ceil(n / d) elements;
//   activations: one slab per micro-batch of exactly Cost::activation_bytes,
//     carved per piece; reserved at forward(mb), released at backward(mb)
//     (training) or at the end of forward(mb) (inference);
//   comm: ModelDesc::comm_bytes (one receive buffer per neighbour, one send
//     buffer per micro-batch);
//   workspace: the backward's temporaries, sized once at build.
//
// Determinism: weights from (seed, piece, tensor, element), data from (seed,
// step, each sample's global position in the batch) (synthetic.hpp);
// gradients accumulate in the order the schedule runs backwards, which is
// micro-batch order for every shipped schedule but looped BFS; the gradient
// norm is reduced per piece (see grad_sq_norm_by_piece) so that every split
// computes it bit for bit alike.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "pipebench/backends/backend.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/stage_layout.hpp"
#include "pipebench/parallel/shards.hpp"

namespace pipebench {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Job& job, int rank);

  std::string_view name() const override { return "cpu"; }
  bool computes_loss() const override { return true; }
  void build(const StageSpec& spec) override;
  void set_tensor_group(TensorGroup* group) override { tensor_ = group; }
  void set_context_group(TensorGroup* group) override { context_ = group; }
  void set_gradient_hook(int chunk, std::function<void(int pieces)> on_final) override {
    hook_chunk_ = chunk;
    hook_ = std::move(on_final);
  }
  void set_forward_hook(int chunk, std::function<void(int piece)> before) override {
    chunks_.at(static_cast<std::size_t>(chunk)).before_piece = std::move(before);
  }
  double take_tensor_comm_s() override { return tensor_ ? tensor_->take_seconds() : 0.0; }
  std::pair<int, int> built_layers() const override { return layers_; }
  std::int64_t built_params() const override;
  void begin_step(int step, double deadline_s) override;
  void forward(int step, int microbatch, int chunk) override;
  void backward(int step, int microbatch, int chunk) override;
  void weight_grad(int step, int microbatch, int chunk) override;
  double loss(int microbatch) const override { return loss_[static_cast<std::size_t>(microbatch)]; }
  void grad_sq_norm_by_piece(std::vector<double>& per_piece) const override;
  void optimizer_step(int step, double grad_scale) override;
  FlatRegion gradients(int chunk) override;
  void abandon_gradients() override;
  FlatRegion parameters(int chunk) override;
  FlatRegion gradient_shard(int chunk) override;
  FlatRegion parameter_shard(int chunk) override;
  Buffer recv_buffer(ActionKind kind, int microbatch, int chunk) override;
  Buffer send_buffer(ActionKind kind, int microbatch, int chunk) override;
  const MemoryTracker& memory() const override { return memory_; }
  int peak_live_activations() const override { return peak_live_; }

  // For tests: the flat parameter and gradient buffers of the first chunk.
  float* params() { return chunks_.front().params.data(); }
  const float* grads() const { return chunks_.front().grads.data(); }
  // For tests: the last stage's softmax probabilities [T, vocab] of
  // micro-batch mb, between its forward and backward (training), or of its
  // latest forward (inference, when keep_probs_for_testing(true)).
  const float* probs(int microbatch) const;
  void keep_probs_for_testing(bool keep) { keep_probs_ = keep; }
  // Activation slabs allocated from the system so far (live + cached).
  std::size_t slabs_allocated() const { return slabs_allocated_; }

  using Piece = PieceLayout;  // stage_layout.hpp

 private:
  // One model chunk: its pieces, state, boundary buffers and activation
  // slabs. Activation slabs: the tracker counts a slab from its forward to
  // its backward; its memory then goes to a free list for the next
  // micro-batch, like PyTorch's caching allocator: the process holds as many
  // slabs as the schedule's peak, and the large allocations are not returned
  // to the OS (and page-faulted in again) every step.
  struct Chunk {
    std::vector<Piece> pieces;
    TrackedArray<float> params, grads, adam_m, adam_v;
    // The elements of params this rank steps: all of them, or with a
    // sharded optimizer its shard's part (adam_m/v hold just those).
    parallel::Span owned;
    // zero2, fsdp: the owned elements' reduced gradients and (fsdp) the
    // parameters the optimizer steps, in the rank's shard buffers (null: in
    // grads / params, at their place).
    float* shard_grads = nullptr;
    float* shard_params = nullptr;
    // Its next forward waits here before each piece (set_forward_hook).
    std::function<void(int piece)> before_piece;
    TrackedArray<float> recv_prev, recv_next;
    std::vector<TrackedArray<float>> send_prev, send_next;  // per micro-batch
    std::uint64_t slab_bytes = 0;
    std::vector<std::unique_ptr<std::byte[]>> slabs;  // per micro-batch; null when not live
    std::vector<std::unique_ptr<std::byte[]>> free_slabs;
    // Split backward: per micro-batch, the output gradients W needs (kept
    // allocated; tracked from B to W), stash_floats of them.
    std::int64_t stash_floats = 0;
    std::vector<std::unique_ptr<float[]>> stash;
    // Recomputation (docs/model.md), one piece a checkpoint: per micro-batch
    // every piece's input kept from F to B (piece i's in [kept_offsets[i],
    // kept_offsets[i + 1]): StageLayout's), and the slab holds one piece's
    // activations at a time (`checkpointed`: every piece's at the slab's start).
    bool checkpointed = false;
    std::vector<std::size_t> kept_offsets;
    std::size_t kept_bytes() const { return kept_offsets.empty() ? 0 : kept_offsets.back(); }
    std::vector<std::unique_ptr<std::byte[]>> kept;
    // The step's backwards finished so far (B, or W with a split backward).
    int backwards_done = 0;
    bool partials_summed = false;  // this step's sequence-partial sums done piece by piece (gradient hook)
  };
  enum class Pass { full, input, weight };
  float* act(const Chunk& c, int mb, const Piece& p, std::int64_t float_offset) const;
  void forward_piece(const Chunk& c, const Piece& p, int mb, const float* in, float* out);
  void forward_pieces(Chunk& c, int mb, const float* in, float* last_out);
  void forward_checkpointed(Chunk& c, int mb, const float* in, float* last_out);
  std::byte* acquire_kept(Chunk& c, int mb);
  // The backward workspace's two ping-pong gradients [T,h] (after dgelu
  // [T,f], dh, dx2 and dqkv [T,3h]; see build): pieces hand their input
  // gradients through them, and a recomputed forward writes its output there.
  // llama: after du [T,f], d(W1|W3) [T,2f], dnorm, dx2, dattn [T,h] and dqkv [T,h+2kv].
  // Tensor-parallel: the rank's widths (gpt: after dgelu [T,f/t], dh, dx2,
  // dqkv [T,3h/t]; llama: after du [T,f/t], d(W1|W3) [T,2f/t], dnorm, dx2,
  // dattn [T,h/t], dqkv [T,(h+2kv)/t]).
  float* workspace_ping() {
    const std::int64_t h = job_.model.hidden;
    if (job_.model.kind == ModelKind::llama) return workspace_.data() + tokens_ * (3 * ft_ + 2 * h + 2 * ht_ + 2 * kvt_);
    return workspace_.data() + tokens_ * (ft_ + 2 * h + 3 * ht_);
  }
  // After the ping-pong gradients: one s x s score scratch, then with
  // selective recomputation the attention probabilities of the rank's heads.
  float* score_scratch() { return workspace_ping() + 2 * tokens_ * job_.model.hidden; }
  float* selective_probs() {
    const std::int64_t s = job_.model.seq_len;
    return score_scratch() + s * s;
  }
  // A block's attention core (model.attention; backend_cpu_attention.cpp)
  // from its q|k|v rows to `attn`, `kept` its slab's offset for what the
  // backward keeps: materialized, the probabilities (selective
  // recomputation: none, they are made again in the backward in the
  // workspace); flash, each row's log-sum-exp. kv_heads: the rank's K/V
  // heads (gpt: at_).
  void attention_core_forward(const Chunk& c, int mb, const Piece& p, std::int64_t kept, const float* qkv, float* attn,
                              int kv_heads);
  // d_qkv (overwritten) from d_attn; `attn` is the forward's output.
  void attention_core_backward(const Chunk& c, int mb, const Piece& p, std::int64_t kept, const float* qkv, float* attn,
                               const float* d_attn, float* d_qkv, int kv_heads);
  bool flash() const { return job_.model.attention == Attention::flash; }
  // Context parallelism: flash attention of the rank's query rows against
  // every rank's K/V, all-gathered into sequence order; the backward's
  // dK/dV reduce-scattered back to their ranks (backend_cpu_attention.cpp).
  void context_attention_forward(const float* qkv, float* attn, float* lse, int kv_heads);
  void context_attention_backward(const float* qkv, const float* attn, const float* lse, const float* d_attn,
                                  float* d_qkv, int kv_heads);
  // Every context rank's K/V of `qkv` in sequence order, into cp_seq().
  void gather_sequence_kv(const float* qkv, int kv_heads);
  // K/V rows between rank-major order [c, b, s/c, 2kv] and sequence order [b, s, 2kv].
  void reorder_rows(float* ranks, float* seq, int kv_heads, bool to_sequence) const;
  // cp_comm = "ring": the K/V (and in the backward their gradients) passed
  // around the group, each step's transfer behind the attention of the
  // block held, the partial outputs merged by their log-sum-exp.
  void ring_attention_forward(const float* qkv, float* attn, float* lse, int kv_heads);
  void ring_attention_backward(const float* qkv, const float* attn, const float* lse, const float* d_attn, float* d_qkv,
                               int kv_heads);
  // The rank's K|V columns of `qkv` packed into `out` [T, 2kv].
  void pack_kv(const float* qkv, int kv_heads, float* out) const;
  // Runs f(row0 of a query chunk, its first position, row0 of a K/V chunk in
  // the buffer of rank r, that chunk's first position) for every pair of the
  // micro-batch where some key precedes some query (the rest is masked).
  template <class F>
  void for_each_visible_pair(int r, F&& f) const {
    const int L = seq_local_ / 2;
    for (std::int64_t bb = 0; bb < spec_.micro_batch_size; ++bb)
      for (int qk = 0; qk < 2; ++qk)
        for (int kc = 0; kc < 2; ++kc) {
          const int qpos = positions_[static_cast<std::size_t>(qk * L)], kpos = cp_position(r, kc * L);
          if (kpos > qpos + L - 1) continue;
          f(bb * seq_local_ + qk * L, qpos, bb * seq_local_ + kc * L, kpos);
        }
  }
  std::int64_t cp_kv_width(int kv_heads) const { return 2 * static_cast<std::int64_t>(kv_heads) * (ht_ / at_); }
  float* cp_packed() { return cp_buffers_.data(); }
  float* cp_gathered(int kv_heads) { return cp_packed() + tokens_ * cp_kv_width(kv_heads); }
  float* cp_seq(int kv_heads) { return cp_gathered(kv_heads) + cp_ * tokens_ * cp_kv_width(kv_heads); }
  float* cp_dseq(int kv_heads) { return cp_seq(kv_heads) + cp_ * tokens_ * cp_kv_width(kv_heads); }
  // The ring's: the K/V held (cp_packed), arriving, their gradients held and
  // arriving, then one chunk's partial output [L, d] and log-sum-exp [L].
  float* ring_buffer(int kv_heads, int i) { return cp_packed() + i * tokens_ * cp_kv_width(kv_heads); }
  // Sequence position of row j of context rank r's rows of a sequence.
  int cp_position(int r, int j) const;
  // The context group's degree, rank, positions (c = 1: the whole sequence).
  void setup_context(const StageSpec& spec);
  void build_workspace(const ModelDesc& model, bool train);
  // The micro-batch's rows as runs of consecutive positions: f(first row,
  // sequences, rows each, first position) — one call for the b sequences
  // of s rows, or with context parallelism one per chunk of each sequence.
  template <class F>
  void for_each_run(F&& f) const {
    const int b = spec_.micro_batch_size;
    if (cp_ == 1) {
      f(std::int64_t{0}, b, seq_local_, 0);
      return;
    }
    const int L = seq_local_ / 2;
    for (int bb = 0; bb < b; ++bb)
      for (int k = 0; k < 2; ++k) f(static_cast<std::int64_t>(bb) * seq_local_ + k * L, 1, L, positions_[k * L]);
  }
  // The rank's rows of each of the micro-batch's b sequences of `whole`
  // (b·s token ids) into `mine` (b·seq_local_).
  void select_rows(const std::vector<std::int32_t>& whole, std::int32_t* mine) const;
  // The rank's K/V width, kv_heads/t · h/heads (the whole kv at t = 1).
  std::int64_t kv_width() const { return kvt_; }

  // Tensor parallelism (docs/tensor-parallel.md): the group (t = 1: none is
  // called), this rank's widths h/t, f/t, kv/t, heads/t, kv_heads/t and its
  // vocabulary part (the padded vocabulary's 1/t; `vocab_valid_` of its
  // columns real). A row-parallel layer's partial outputs are summed over
  // the group; the lead rank (tensor rank 0) adds the bias and the residual
  // to its partial, so that at t = 1 the arithmetic is the unsplit model's.
  // With sequence parallelism a rank holds `ts_` = T/t of the tokens
  // outside the parallel regions (else ts_ = T) and two [T,h] buffers: a
  // region's gathered input and a partial output before its reduce-scatter
  // (backend_cpu_tensor.cpp has the helpers below).
  void tp_sum(float* x, std::int64_t n) {
    if (tp_ > 1) tensor_->sum(x, n);
  }
  bool lead() const { return spec_.tensor_rank == 0; }
  bool sequence_parallel() const { return spec_.tensor.sequence_parallel; }
  // After piece `p`'s gradients of chunk `chunk` are final in a hooked
  // action: its sequence-partial tensors summed over the tensor group first
  // (the replicas must reduce the sum), then the hook told `done` pieces.
  void piece_final(int chunk, Chunk& c, const Piece& p, int done);
  void sum_sequence_partials(Chunk& c, const Piece& p);
  int hook_chunk_ = -1;
  std::function<void(int)> hook_;
  float* sp_gathered() { return sp_buffers_.data(); }
  float* sp_partial() { return sp_buffers_.data() + tokens_ * job_.model.hidden; }
  // y = x on the lead rank, 0 elsewhere: the start of a row-parallel sum.
  void residual_start(float* y, const float* x, std::int64_t n) const;
  // The rank's [ts_, h] `part` gathered whole into sp_gathered() (returned),
  // or `part` itself without sequence parallelism.
  const float* gathered(const float* part);
  // The same into `whole` (a copy without sequence parallelism).
  void gather_into(const float* part, float* whole);
  // `whole` [T,h], a partial sum on every rank, summed over the group: into
  // `part` [ts_, h] (reduce-scatter), or in place (`part` == `whole`).
  void sum_over_group(float* whole, float* part);
  // A row-parallel layer: y [ts_, h] = Σ_group in·W + b + residual (`in`
  // [T, in_dim] the rank's columns, W its rows; b may be null).
  void row_parallel_out(const float* in, const float* W, const float* b, const float* residual, float* y, int in_dim);
  // A column-parallel layer's input gradient: dst [ts_, h] = Σ_group d·Wᵀ
  // (+ residual when given), `d` [T, out_dim] the rank's columns.
  void column_input_grad(const float* W, const float* d, float* dst, int out_dim, const float* residual = nullptr);
  // After a chunk's backward of one micro-batch: at the step's last, with
  // sequence parallelism, the norms' token-partial gradients summed over the group.
  void backward_done(Chunk& c);
  // The head's mean cross-entropy of the rank's vocabulary logits (in
  // place: the probabilities), reduced over the group without gathering them.
  double vocab_parallel_loss(float* logits, const std::int32_t* targets);
  TensorGroup* tensor_ = nullptr;
  int tp_ = 1, at_ = 0, kvheads_t_ = 0;
  std::int64_t ht_ = 0, ft_ = 0, kvt_ = 0, vocab_local_ = 0;
  int vocab_valid_ = 0;
  cpu::VocabPart vocab_part_;
  TrackedArray<float> tp_stats_;  // t > 1: each token's max, then sum and target exp (cross-entropy)
  TrackedArray<float> sp_buffers_;  // sequence parallelism: sp_gathered(), sp_partial()
  std::int64_t ts_ = 0;
  // The llama block (backend_cpu_llama.cpp).
  void forward_llama(const Chunk& c, const Piece& p, int mb, float* out);
  void backward_llama(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* stash);
  void backward_piece(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* stash);
  void backward_gpt(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* stash);
  void backward_mlp(Chunk& c, const Piece& p, int mb, const float* dy, float* dx, Pass pass, float* stash);
  void backward_head(Chunk& c, const Piece& p, int mb, float* dx, Pass pass, float* stash);
  std::int64_t stash_floats(const Piece& p) const;
  float* acquire_stash(Chunk& c, int mb);
  void release_stash(Chunk& c, int mb);
  const float* weight(const Chunk& c, const Piece& p, std::size_t t) const { return c.params.data() + p.tensors[t].offset; }
  float* grad(Chunk& c, const Piece& p, std::size_t t) { return c.grads.data() + p.tensors[t].offset; }
  float* piece_input(const Chunk& c, int mb, std::size_t piece_index) const;
  // Which elements of each chunk this rank's optimizer steps (Chunk::owned).
  void own_shards(const std::vector<StageLayout>& layouts);
  void keep_shards_apart();
  static parallel::Span owned_part(const Chunk& c, const TensorSlot& t);
  // The gradients and parameters of `part` (within c.owned) the optimizer uses.
  static const float* owned_grads(const Chunk& c, parallel::Span part);
  static float* owned_params(Chunk& c, parallel::Span part);
  void acquire_slab(Chunk& c, int mb);
  void release_slab(Chunk& c, int mb);

  const Job& job_;
  MemoryTracker memory_;
  StageSpec spec_;
  std::vector<Chunk> chunks_;
  std::pair<int, int> layers_{-1, -1};
  std::int64_t tokens_ = 0;  // T = micro_batch_size * seq_len (/ c with context parallelism)
  TrackedArray<float> workspace_;  // shared by the chunks
  TrackedArray<float> rope_;       // llama: the rotary table (cpu::rope_table)
  TrackedArray<float> flash_tiles_;  // flash attention's tiles (cpu::kFlashScratchFloats)
  // Context parallelism (docs/context-parallel.md, "cpu backend"): the
  // group, the rank's place in it, each sequence's rows this rank holds
  // (`positions_`, seq_local_ of them: chunks cp_rank and 2c−1−cp_rank), and
  // the K/V buffers: packed [T, 2kv], gathered [c, T, 2kv] (rank-major), in
  // sequence order [b, s, 2kv] and their gradients likewise.
  TensorGroup* context_ = nullptr;
  int cp_ = 1, cp_rank_ = 0, seq_local_ = 0;
  std::vector<int> positions_;
  TrackedArray<float> cp_buffers_;
  std::size_t slabs_allocated_ = 0;
  std::int64_t shard_padding_ = 0;  // the last shard's padding to ceil(n / d), held with chunk 0's state
  // zero2, fsdp: the rank's shard of the reduced gradients, and (fsdp) of the
  // parameters, padded to ceil(n / d) (model.hpp training_state_bytes).
  TrackedArray<float> shard_grads_, shard_params_;
  std::vector<double> loss_;
  bool keep_probs_ = false;
  std::vector<std::vector<float>> kept_probs_;  // untracked: tests only
  int step_ = 0, optimizer_steps_ = 0;
  int live_ = 0, peak_live_ = 0;
};

}  // namespace pipebench
