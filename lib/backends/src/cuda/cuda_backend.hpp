// The cuda backend's class (make_cuda_backend, backend_cuda.hpp), shared by
// its sources: backend_cuda.cpp (build, the actions, the embedding, gpt/mlp
// blocks and the head), backend_cuda_backward.cpp, backend_cuda_llama.cpp
// (the llama block) and backend_cuda_tensor.cpp (tensor parallelism's
// collectives and split layers). Internal to lib/backends/src/cuda.
#pragma once

#include <cstdint>
#include <optional>
#include <functional>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device_memory.hpp"
#include "kernels.hpp"
#include "pipebench/backends/backend.hpp"
#include "pipebench/backends/gemm_layout.hpp"
#include "pipebench/backends/stage_layout.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/shards.hpp"

namespace pipebench::gpu {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Job& job, int rank);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  bool computes_loss() const override { return true; }
  void build(const StageSpec& spec) override;
  std::pair<int, int> built_layers() const override { return layers_; }
  std::int64_t built_params() const override { return num_params_; }
  void set_tensor_group(TensorGroup* group) override { tensor_ = group; }
  void set_device_tensor_group(DeviceTensorGroup* group) override { device_tensor_ = group; }
  // grad_sync = "overlap" over NCCL (gradients in device memory): the hook
  // is called after each piece's final gradient kernels are enqueued, and
  // the buckets' all-reduces follow them on the NCCL stream (device_stream).
  // Host-staged gradients (ranks sharing a GPU) are copied whole after the
  // action: no hook there, the buckets are posted at the action's end.
  void set_gradient_hook(int chunk, std::function<void(int pieces)> on_final) override {
    hook_chunk_ = chunk;
    hook_ = host_grads_.empty() ? std::move(on_final) : nullptr;
  }
  void* device_stream() override { return stream_; }
  double take_tensor_comm_s() override;
  void begin_step(int step, double /*deadline_s*/) override {
    step_ = step;
    for (Chunk& c : chunks_) c.backwards_done = 0;
    note_device_memory();
  }
  void forward(int step, int microbatch, int chunk) override;
  void backward(int step, int microbatch, int chunk) override;
  void weight_grad(int step, int microbatch, int chunk) override;
  double loss(int microbatch) const override { return loss_[static_cast<std::size_t>(microbatch)]; }
  void grad_sq_norm_by_piece(std::vector<double>& per_piece) const override;
  void optimizer_step(int step, double grad_scale) override;
  // Data parallelism (docs/cuda-backend.md): the chunk's fp32 gradients in
  // place on the device for NCCL (spec.gradients_in_device_memory), or
  // host-staged — copied to pinned host memory for the MPI collective, and
  // the sums copied back before the gradient norm.
  FlatRegion gradients(int chunk) override;
  void gradients_synchronised() override;
  void abandon_gradients() override;
  // ZeRO-1 (optimizer_sharding = "zero1", host-staged over MPI): the
  // optimizer state (AdamW m and v, the fp32 master of a 16-bit dtype)
  // covers this replica's shard of the rank's parameters (`owned_`,
  // parallel/shards.hpp), padded to ceil(n / d); the update runs on it, and
  // the parameters are all-gathered in fp32 through pinned host staging —
  // parameters() copies the shard's fp32 values (the master, or fp32 the
  // parameters) into the chunk's staging, parameters_gathered() uploads every
  // replica's, rounded to the storage dtype on the host as the initial
  // weights are, so every replica holds the same bits.
  FlatRegion parameters(int chunk) override;
  void parameters_gathered() override;
  Buffer recv_buffer(ActionKind kind, int microbatch, int chunk) override;
  Buffer send_buffer(ActionKind kind, int microbatch, int chunk) override;
  void hand_over(ActionKind kind, int microbatch, int from_chunk, int to_chunk) override;
  double last_action_device_s() const override { return last_action_s_; }
  const MemoryTracker& memory() const override { return memory_; }
  int peak_live_activations() const override { return peak_live_; }
  std::int64_t device_used_before_bytes() const override { return device_used_before_; }
  std::int64_t device_used_peak_bytes() const override {
    note_device_memory();
    return device_used_peak_;
  }

 private:
  using Piece = PieceLayout;  // stage_layout.hpp

  // One model chunk (virtual stage spec_.chunk_stage[c]): its pieces, whose
  // tensor offsets point into the rank's flat parameter buffers (chunk after
  // chunk), its boundary buffers and its per-micro-batch device blocks.
  struct Chunk {
    std::vector<Piece> pieces;
    bool receives = false, sends = false;  // from / to a neighbouring virtual stage
    std::int64_t grad_begin = 0, grad_count = 0;  // its fp32 gradients: elements of grads_
    DeviceBuffer recv_prev, recv_next;
    std::vector<DeviceBuffer> send_prev, send_next;  // per slot (StageSpec::send_slot)
    // Host staging for a transport that moves host memory (MPI). A receive
    // buffer handed to the transport (recv_buffer) is marked staged and
    // uploaded before the action that reads it.
    std::optional<HostBuffer> host_recv_prev, host_recv_next;
    std::vector<HostBuffer> host_send_prev, host_send_next;  // per slot
    bool staged_prev = false, staged_next = false;
    SlotPool slabs;  // activations, from F to B (to W with a split backward)
    SlotPool stash;  // split backward: output gradients from B to W (split_stash_elements)
    // Recomputation (docs/model.md), one piece a checkpoint: every piece's
    // input from F to B (piece i's from kept_offsets[i]); the slab holds one
    // piece's activations at a time (`checkpointed`: each at its start).
    SlotPool kept;
    bool checkpointed = false;
    std::vector<std::uint64_t> kept_offsets;  // StageLayout::kept_offsets
    int backwards_done = 0;  // the step's backwards finished so far (B, or W with a split backward)
    bool partials_summed = false;  // sequence parallelism: piece by piece already (piece_final)
    bool embedding() const { return pieces.front().kind == PieceKind::embedding; }
    bool head() const { return pieces.back().kind == PieceKind::head; }
  };
  // Pass::full: input and weight gradients at B. A split backward: the input
  // gradient at B (Pass::input), saving the output gradients W needs in the
  // stash; the weight gradients at W from them (Pass::weight).
  enum class Pass { full, input, weight };

  static std::uint64_t device_capacity(const Job& job);
  void set_tensor_widths(const StageSpec& spec);
  void upload_initial_weights();
  void build_chunk(Chunk& c, int ci, const ModelDesc& model);
  Chunk& chunk(int c) { return chunks_.at(static_cast<std::size_t>(c)); }
  std::byte* act(const Chunk& c, int mb, const Piece& p, std::int64_t elements) const {
    return c.slabs.get(mb) + (c.checkpointed ? 0 : p.act_offset) + elements * e_;
  }
  std::byte* elem(const DeviceBuffer& b, std::int64_t elements) const { return b.data() + elements * e_; }
  void* w(const Piece& p, std::size_t t) const { return elem(params_, p.tensors[t].offset); }
  // Gradients are fp32 whatever the dtype (docs/cuda-backend.md, dtypes).
  float* g(const Piece& p, std::size_t t) const { return reinterpret_cast<float*>(grads_.data()) + p.tensors[t].offset; }
  // A LayerNorm's fp32 mean or 1/std at slab element offset `elements`.
  float* stat(const Chunk& c, int mb, const Piece& p, std::int64_t elements) const {
    return reinterpret_cast<float*>(act(c, mb, p, elements));
  }
  std::int32_t* tokens_at(const Chunk& c, int mb) const { return reinterpret_cast<std::int32_t*>(act(c, mb, c.pieces.front(), 0)); }
  bool llama() const { return job_.model.kind == ModelKind::llama; }
  // The head's slab offsets (llama: one RMSNorm statistic), of the rank's vocabulary columns.
  HeadActs head_acts() const { return {tokens_, job_.model.hidden, vocab_local_, static_cast<int>(e_), llama(), ts_}; }
  std::int32_t* targets_at(const Chunk& c, int mb) const {
    return reinterpret_cast<std::int32_t*>(act(c, mb, c.pieces.back(), head_acts().targets));
  }
  // llama: the rank's K/V width kv_heads/t · h/heads (q, k, v rows are h/t + 2·kv_width()).
  std::int64_t kv_width() const { return kvt_; }
  std::int64_t stash_elements(const Piece& p) const {
    return split_stash_elements(p.kind, tokens_, job_.model.hidden, ft_, kvt_, ht_, ts_);
  }
  // Workspace layout (ModelDesc::cuda_workspace_bytes): norm partial sums,
  // per-token losses, the embedding's token order (train), with t > 1 the
  // fp32 [T,h] buffer of the group's sums and the cross-entropy's 3T fp32
  // statistics (tp_sum_buffer, tp_stats), with sequence parallelism a
  // [T,h] buffer of the storage dtype (sp_gathered), then the backward's temporaries
  // (aligned: cudaMalloc returns 256-byte-aligned memory and the parts
  // before them are multiples of 4 bytes).
  double* norm_partials() const { return reinterpret_cast<double*>(workspace_.data()); }
  float* token_losses() const { return reinterpret_cast<float*>(workspace_.data() + ModelDesc::kCudaNormSlotsBytes); }
  std::int32_t* embedding_order_ints() const {
    return reinterpret_cast<std::int32_t*>(workspace_.data() + ModelDesc::kCudaNormSlotsBytes + 4 * tokens_);
  }
  // The backward's temporaries: a block's output gradients (gpt: dgelu
  // [T,f], dh, dx2, dqkv [T,3h]; llama: du [T,f], dW1|dW3 [T,2f], dnorm,
  // dx2, dattn [T,h], dqkv [T,h+2kv]), then two ping-pong gradients [T,h]
  // (pieces hand their input gradients through them; a recomputed forward
  // writes its output there), then the heads' score matrices.
  // Tensor-parallel: the rank's widths (gpt dgelu [T,f/t], dh, dx2 [T,h],
  // dqkv [T,3h/t]; llama du [T,f/t], dW1|dW3 [T,2f/t], dnorm, dx2 [T,h],
  // dattn [T,h/t], dqkv [T,(h+2kv)/t]), and the score matrices of its heads.
  float* tp_sum_buffer() const {
    return reinterpret_cast<float*>(workspace_.data() + ModelDesc::kCudaNormSlotsBytes + 4 * tokens_ + embedding_order_bytes_);
  }
  float* tp_stats() const { return tp_sum_buffer() + tokens_ * job_.model.hidden; }
  std::byte* sp_gathered() const { return reinterpret_cast<std::byte*>(tp_stats() + 3 * tokens_); }
  std::int64_t tp_workspace_bytes() const {
    if (tp_ == 1) return 0;
    const std::int64_t Th = tokens_ * job_.model.hidden;
    return 4 * Th + 12 * tokens_ + (sequence_parallel() ? e_ * Th : 0);
  }
  std::byte* temporaries() const {
    return workspace_.data() + ModelDesc::kCudaNormSlotsBytes + 4 * tokens_ + embedding_order_bytes_ + tp_workspace_bytes();
  }
  std::int64_t block_temporaries() const {  // elements before the ping-pong gradients
    const std::int64_t h = job_.model.hidden;
    return llama() ? tokens_ * (3 * ft_ + 2 * h + 2 * ht_ + 2 * kvt_) : tokens_ * (ft_ + 2 * h + 3 * ht_);
  }
  std::byte* workspace_ping() const { return temporaries() + block_temporaries() * e_; }
  std::byte* score_scratch() const { return workspace_ping() + 2 * tokens_ * job_.model.hidden * e_; }
  // Selective recomputation: the attention probabilities of the micro-batch
  // being computed, [B, heads/t, s, s], after the score scratch — made at F
  // and again at B, never kept.
  std::byte* selective_probs() const {
    const std::int64_t s = job_.model.seq_len;
    return score_scratch() + std::int64_t{at_} * s * s * e_;
  }
  bool selective() const { return spec_.tensor.selective_recompute; }
  bool flash() const { return job_.model.attention == Attention::flash; }
  // model.attention = "flash" (kernels_flash.cu): a block's fp32 log-sum-exp
  // per row of each of its heads, at slab element `slab_offset` (where the
  // materialized attention keeps its probabilities).
  float* flash_lse(const Chunk& c, int mb, const Piece& p, std::int64_t slab_offset) const {
    std::byte* at = act(c, mb, p, slab_offset);
    if (reinterpret_cast<std::uintptr_t>(at) % alignof(float) != 0)
      throw Error("cuda backend: a block's flash attention log-sum-exp is not 4-byte aligned in its slab (a layout bug)");
    return reinterpret_cast<float*>(at);
  }
  // llama, groups of several query heads per K/V head: the fp32 sums of a
  // group's dV and dK, [2, s, h/heads], after the score scratch (and the
  // selective probabilities), 16-byte aligned (ModelDesc::cuda_workspace_bytes).
  float* gqa_grad_sums() const {
    const std::int64_t s = job_.model.seq_len;
    const std::int64_t after = (selective() ? std::int64_t{spec_.micro_batch_size} * at_ * s * s * e_ : 0);
    const auto end = reinterpret_cast<std::uintptr_t>(selective_probs() + after);
    return reinterpret_cast<float*>((end + 15) & ~std::uintptr_t{15});
  }
  // Where a block's probabilities are: at slab element `slab_offset`, or (selective) the workspace.
  std::byte* attention_probs(const Chunk& c, int mb, const Piece& p, std::int64_t slab_offset) const {
    return selective() ? selective_probs() : act(c, mb, p, slab_offset);
  }
  void copy_on_device(void* dst, const void* src, std::uint64_t bytes) const;

  // Runs the row-major product `g` (gemm_layout.hpp) through cuBLAS; C in
  // the storage dtype, or fp32 for a weight gradient (`fp32_out`).
  void gemm(const gemm::RowMajor& g, const void* A, const void* B, void* C, bool fp32_out = false) const;
  void linear_forward(const void* x, const void* W, const void* b, void* y, int T, int in, int out, bool accumulate) const;
  // dW += xᵀ·dy (fp32), db += Σ_t dy (when db); dx = dy·W (+= when accumulate).
  void linear_backward_weight(const void* x, const void* dy, float* dW, float* db, int T, int in, int out) const;
  void linear_backward_input(const void* W, const void* dy, void* dx, int T, int in, int out, bool accumulate) const;
  void forward_piece(const Chunk& c, const Piece& p, int mb, const std::byte* in, std::byte* out);
  void forward_pieces(const Chunk& c, int mb, const std::byte* in, std::byte* last_out);
  void forward_checkpointed(Chunk& c, int mb, const std::byte* in, std::byte* last_out);
  static std::uint64_t kept_size(const Chunk& c, std::size_t i) { return c.kept_offsets[i + 1] - c.kept_offsets[i]; }
  void backward_pieces(Chunk& c, int ci, int mb, Pass pass, std::byte* stash);
  void backward_piece(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass, std::byte* st);
  void backward_gpt(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass, std::byte* st);
  // The llama block (backend_cuda_llama.cpp).
  void forward_llama(const Chunk& c, const Piece& p, int mb, std::byte* out);
  void backward_llama(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass, std::byte* st);
  void backward_mlp(const Chunk& c, const Piece& p, int mb, const std::byte* dy, std::byte* dx, Pass pass, std::byte* st);
  void backward_head(const Chunk& c, const Piece& p, int mb, std::byte* dx, Pass pass, std::byte* st);
  void acquire_slab(Chunk& c, int mb);
  void release_slab(Chunk& c, int mb);
  void upload_tokens(int mb, std::int32_t* dst, bool targets);
  void upload_staged(Chunk& c, ActionKind kind);
  void upload_embedding_order(int mb);
  void wait_for_host_copy(const char* what);
  void read_loss(int mb);
  void start_action();
  void finish_action();

  // Tensor parallelism (backend_cuda_tensor.cpp; docs/tensor-parallel.md).
  // Column-parallel layers (qkv / W1|W3, fc1, the LM head) hold the rank's
  // output columns, row-parallel ones (proj / o, fc2 / W2) its input rows;
  // a row-parallel output and a column-parallel input gradient are partial
  // products, written in fp32 to tp_sum_buffer(), summed over the group in
  // fp32 (reduce-scattered to the rank's ts_ tokens with sequence
  // parallelism) and then rounded to the storage dtype with the bias and
  // residual (every rank holds those whole). With sequence parallelism x,
  // x2, the norms and their gradients are the rank's ts_ tokens, and a
  // column-parallel layer reads its input gathered whole. At t = 1 every
  // helper is the unsplit layers' launches, bit for bit. The group's
  // collectives run over NCCL on the device (device_tensor_) or, without
  // it, on pinned host copies over the MPI group (tensor_).
  bool sequence_parallel() const { return spec_.tensor.sequence_parallel; }
  void tp_sum(float* data, std::int64_t n);
  void tp_max(float* data, std::int64_t n);
  // fp32 `whole` [T,h], each rank's partial sum: summed over the group in
  // place, or reduce-scattered (sequence parallelism); the rank's rows of the sum.
  float* summed_rows(float* whole);
  // The rank's [ts_, h] `part` gathered whole into sp_gathered() (returned),
  // or `part` itself without sequence parallelism.
  const void* gathered(const void* part);
  // The same into `whole` (a copy without sequence parallelism).
  void gather_into(const void* part, void* whole);
  // y [ts_,h] = Σ_group in·W (+ b) + residual; `in` [T, in_dim] the rank's columns.
  void row_parallel_out(const void* in, const void* W, const void* b, const void* residual, void* y, int in_dim);
  // dst [ts_,h] = Σ_group d·Wᵀ (+ dst's own values when `accumulate`); `d` [T, out_dim].
  void column_input_grad(const void* W, const void* d, void* dst, int out_dim, bool accumulate);
  // After a chunk's backward of one micro-batch: at the step's last, with
  // sequence parallelism, the norms' token-partial gradients summed over the group.
  void backward_done(Chunk& c);
  // grad_sync = "overlap": piece `p` of chunk `ci` has its final gradients
  // enqueued (`done` pieces so far in backward order): its sequence-parallel
  // partial sums first, then the hook (set_gradient_hook).
  void piece_final(int ci, Chunk& c, const Piece& p, int done);
  void sum_sequence_partials(const Piece& p);
  std::function<void(int)> hook_;
  int hook_chunk_ = -1;
  // The head's token losses (token_losses()) and probabilities in place of
  // the logits of the rank's vocabulary columns.
  void head_loss(void* logits, const std::int32_t* targets);
  // The embedding's output for the rank's vocabulary rows, summed over the group.
  void embedding_out(const std::int32_t* tokens, const void* wte, const void* wpe, void* out);
  // Selective recomputation: the block's attention probabilities again, into selective_probs().
  void attention_probs_again(const std::byte* qkv);

  const Job& job_;
  MemoryTracker memory_;
  StageSpec spec_;
  DType dt_ = DType::fp32;
  std::int64_t e_ = 4;  // bytes per element
  std::vector<Chunk> chunks_;
  std::pair<int, int> layers_{-1, -1};
  std::int64_t num_params_ = 0, tokens_ = 0;
  // cudaMemGetInfo's used bytes before the backend allocated, and the most since.
  std::int64_t device_used_before_ = -1;
  mutable std::int64_t device_used_peak_ = -1;
  void note_device_memory() const;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t ev_start_ = nullptr, ev_end_ = nullptr;
  cudaEvent_t ev_host_ = nullptr;  // a host upload's end (wait_for_host_copy)
  double last_action_s_ = -1.0;
  // fp16 keeps gradients in range with a static loss scale: d(loss)/d(logits)
  // is not divided by tokens × micro-batches; the norm and the optimizer
  // divide instead (grad_unscale_ = 1 / that product; 1 for fp32 and bf16).
  double grad_unscale_ = 1.0;
  DeviceBuffer params_, grads_, master_, adam_m_, adam_v_, workspace_;
  DeviceBuffer rope_;  // llama: the rotary table, fp32 (cpu::rope_table), counted as workspace
  // Data parallelism: whether gradients() hands them out (replicas,
  // training); host-staged, each chunk's gradients in pinned host memory (not
  // device memory: outside the tracker), and the chunks handed out this step.
  bool sync_grads_ = false;
  std::vector<HostBuffer> host_grads_;
  std::vector<int> staged_grads_;
  // ZeRO-1: the elements of the flat buffers this replica's optimizer steps
  // ([0, n) unsharded; the state buffers index them from owned_.begin), and
  // each chunk's fp32 parameter staging for the all-gather (pinned host).
  parallel::Span owned_;
  std::vector<HostBuffer> host_params_;
  std::vector<double> loss_;
  std::vector<float> host_losses_;
  // The embedding backward's token order (workspace, train only): its bytes
  // and the current micro-batch's segments, uploaded before the action that
  // runs the embedding's weight gradient (B, or W of a split backward).
  std::int64_t embedding_order_bytes_ = 0;
  gpu::EmbeddingOrder embedding_order_;
  int optimizer_steps_ = 0, step_ = 0;
  int live_ = 0, peak_live_ = 0;
  // Tensor parallelism: the groups (not owned), this rank's widths h/t, f/t,
  // kv/t, heads/t, kv_heads/t and vocabulary columns (the padded
  // vocabulary's 1/t from vocab_first_, vocab_valid_ of them real); at t = 1
  // the whole model's. tp_host_: the host-staged sums' pinned copy.
  TensorGroup* tensor_ = nullptr;
  DeviceTensorGroup* device_tensor_ = nullptr;
  int tp_ = 1, at_ = 0, kvheads_t_ = 0, vocab_first_ = 0, vocab_valid_ = 0;
  std::int64_t ht_ = 0, ft_ = 0, kvt_ = 0, vocab_local_ = 0;
  std::int64_t ts_ = 0;  // the tokens of the norms' regions: T, or T/t with sequence parallelism
  std::optional<HostBuffer> tp_host_;
};

}  // namespace pipebench::gpu
