// The cuda backend (backend_cuda.hpp). Structure follows the cpu backend
// piece for piece (backend_cpu.cpp): the same tensor table, the same slab
// layouts (in elements of the storage dtype), the same order of operations,
// so that in fp32 the two agree to rounding and the cpu backend is the
// reference the GPU tests compare against.
#include "pipebench/backends/backend_cuda.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cublas_api.hpp"
#include "cuda_backend.hpp"
#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/backends/gemm_layout.hpp"
#include "pipebench/backends/stage_layout.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/model/synthetic.hpp"

namespace pipebench::gpu {

namespace {

void cublas_check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemoryError(fmt::format("out of memory: cuBLAS {}: CUBLAS_STATUS_ALLOC_FAILED", what));
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cuda backend: cuBLAS {}: {} ({})", what, gpu::cublas().status_string(st), gpu::cublas().status_name(st)));
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::fp32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Host-side rounding of fp32 weights to the storage dtype (round to nearest even).
void round_on_host(DType dt, const float* src, void* dst, std::size_t n) {
  if (dt == DType::fp32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if (dt == DType::bf16) {
    auto* d = static_cast<__nv_bfloat16*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = __float2bfloat16(src[i]);
  } else {
    auto* d = static_cast<__half*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = __float2half(src[i]);
  }
}

}  // namespace

std::uint64_t CudaBackend::device_capacity(const Job& job) {
  (void)cuda_device_count();  // DeviceUnavailableError when there is none
  std::size_t free_b = 0, total_b = 0;
  cuda_check(cudaMemGetInfo(&free_b, &total_b), kWho, "cudaMemGetInfo");
  return std::min<std::uint64_t>(job.device.memory_capacity_bytes, total_b);
}

CudaBackend::CudaBackend(const Job& job, int rank)
    : job_(job), memory_(rank, device_capacity(job)) {
  note_device_memory();  // creates the context first: its own memory counts as "before"
  device_used_before_ = device_used_peak_;
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), kWho, "cudaStreamCreate");
  cublas_check(gpu::cublas().create(&cublas_), "cublasCreate");
  cublas_check(gpu::cublas().set_stream(cublas_, stream_), "cublasSetStream");
  // fp32 GEMMs stay fp32 (no TF32), as the cpu reference computes them.
  cublas_check(gpu::cublas().set_math_mode(cublas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  cuda_check(cudaEventCreate(&ev_start_), kWho, "cudaEventCreate");
  cuda_check(cudaEventCreate(&ev_end_), kWho, "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&ev_host_, cudaEventDisableTiming), kWho, "cudaEventCreate");
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  chunks_.clear();  // the device blocks, before the stream and the handles go
  if (ev_start_) cudaEventDestroy(ev_start_);
  if (ev_end_) cudaEventDestroy(ev_end_);
  if (ev_host_) cudaEventDestroy(ev_host_);
  if (cublas_) gpu::cublas().destroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

namespace {

// The fp32 norm statistics and the head's int32 targets sit among fp16/bf16
// activations in the slab: each must be 4-byte aligned.
// Tensor-parallel: the rank's widths (t = tensor_parallel), `Ts` the tokens of the norms' regions.
void check_slab_alignment(const std::vector<PieceLayout>& pieces, const ModelSpec& ms, std::int64_t tokens, DType dt,
                          int t, std::int64_t Ts) {
  const int e = dtype_bytes(dt);
  const bool rms = ms.kind == ModelKind::llama;
  const std::int64_t kv = std::int64_t{ms.kv_heads / t} * (ms.hidden / ms.heads), ht = ms.hidden / t;
  const std::int64_t ft = ms.ffn_hidden / t, vocab = padded_vocab(ms, t) / t;
  for (const PieceLayout& p : pieces) {
    std::vector<std::pair<const char*, std::int64_t>> at;
    if (p.kind == PieceKind::gpt) {
      const GptActs a(tokens, ms.hidden, ft, e, ht, Ts);
      at = {{"LayerNorm statistics", a.mean1}, {"LayerNorm statistics", a.mean2}};
    } else if (p.kind == PieceKind::llama) {
      const LlamaActs a(tokens, ms.hidden, kv, ft, e, ht, Ts);
      at = {{"RMSNorm statistics", a.rrms1}, {"RMSNorm statistics", a.rrms2}};
    } else if (p.kind == PieceKind::head) {
      const HeadActs a(tokens, ms.hidden, vocab, e, rms, Ts);
      at = {{rms ? "RMSNorm statistics" : "LayerNorm statistics", a.mean}, {"targets", a.targets}};
    }
    for (const auto& [what, elements] : at)
      if ((p.act_offset + elements * e) % 4 != 0)
        throw Error(fmt::format("cuda backend: the {} of piece {} would sit at slab offset {}, not 4-byte aligned, "
                                "with dtype {}: use an even seq_len or micro_batch_size",
                                what, p.id, p.act_offset + elements * e, to_string(dt)));
  }
}

}  // namespace

void CudaBackend::build(const StageSpec& spec) {
  spec_ = spec;
  dt_ = spec.dtype;
  e_ = dtype_bytes(dt_);
  set_tensor_widths(spec);
  // bf16/fp16 GEMMs on tensor cores, but their reductions in fp32, as the
  // docs promise: cuBLAS's default would allow reduced-precision reductions.
  if (dt_ != DType::fp32)
    cublas_check(gpu::cublas().set_math_mode(cublas_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                 "cublasSetMathMode");
  const ModelSpec& ms = job_.model;
  const ModelDesc model(ms, dt_, spec.tensor);
  const int b = spec.micro_batch_size;
  tokens_ = std::int64_t{b} * ms.seq_len;
  const bool train = spec.mode == RunMode::train;
  layers_ = {spec.chunks.front().first_layer, spec.chunks.back().last_layer()};
  if (dt_ == DType::fp16) grad_unscale_ = 1.0 / (static_cast<double>(tokens_) * spec.step_microbatches());
  // The chunks' tensor tables, one after the other in the flat buffers.
  chunks_.resize(static_cast<std::size_t>(spec.num_chunks()));
  std::vector<std::int64_t> slab_bytes;
  num_params_ = 0;
  for (int ci = 0; ci < spec.num_chunks(); ++ci) {
    const StageLayout layout =
        stage_layout(ms, dt_, spec.chunks[static_cast<std::size_t>(ci)], b, "cuda", spec.tensor, spec.tensor_rank);
    check_slab_alignment(layout.pieces, ms, tokens_, dt_, tp_, ts_);
    Chunk& c = chunk(ci);
    c.pieces = layout.pieces;
    for (Piece& p : c.pieces)
      for (TensorSlot& t : p.tensors) t.offset += num_params_;
    c.grad_begin = num_params_;
    c.grad_count = layout.params;
    num_params_ += layout.params;
    c.checkpointed = spec.recompute && train;  // one piece a checkpoint (stage_layout.hpp)
    if (c.checkpointed) c.kept_offsets.assign(layout.kept_offsets.begin(), layout.kept_offsets.end());
    slab_bytes.push_back(c.checkpointed ? layout.largest_piece_bytes : layout.activation_bytes);
  }
  if (train) embedding_order_bytes_ = model.cuda_embedding_order_bytes(b);

  const auto n = static_cast<std::uint64_t>(num_params_);
  const StateBytes per_param = state_bytes_per_param(job_.train.optimizer, dt_);
  if (spec.shard_optimizer && (spec.sharding != OptimizerSharding::zero1 || spec.gradients_in_device_memory))
    throw ConfigError("cuda backend: only optimizer_sharding = \"zero1\" is executed, its gradients host-staged "
                      "(docs/cuda-backend.md)");
  owned_ = spec.shard_optimizer ? parallel::shard_of(num_params_, spec.grad_group(), spec.grad_rank())
                                : parallel::Span{0, num_params_};
  // The optimizer state: every element, or the shard padded to ceil(n / d) (the planner's bytes).
  const auto state = static_cast<std::uint64_t>(spec.shard_optimizer ? parallel::shard_size(num_params_, spec.grad_group())
                                                                     : num_params_);
  params_ = DeviceBuffer(memory_, MemCategory::params, n * static_cast<std::uint64_t>(per_param.params), "parameters");
  if (train) {
    grads_ = DeviceBuffer(memory_, MemCategory::grads, n * static_cast<std::uint64_t>(per_param.grads), "gradients");
    if (dt_ != DType::fp32) master_ = DeviceBuffer(memory_, MemCategory::optimizer, state * 4, "fp32 master weights");
    if (job_.train.optimizer == OptimizerKind::adamw) {
      adam_m_ = DeviceBuffer(memory_, MemCategory::optimizer, state * 4, "AdamW first moments");
      adam_v_ = DeviceBuffer(memory_, MemCategory::optimizer, state * 4, "AdamW second moments");
    }
  }
  if (train && spec.grad_group() > 1) {
    sync_grads_ = true;
    if (!spec.gradients_in_device_memory)
      for (const Chunk& c : chunks_) host_grads_.emplace_back(static_cast<std::size_t>(c.grad_count) * 4);
    if (spec.shard_optimizer)
      for (const Chunk& c : chunks_) host_params_.emplace_back(static_cast<std::size_t>(c.grad_count) * 4);
  }
  const int m = spec.num_microbatches;
  for (int ci = 0; ci < spec.num_chunks(); ++ci) {
    Chunk& c = chunk(ci);
    build_chunk(c, ci, model);
    if (c.checkpointed)
      c.kept = SlotPool(memory_, c.kept_offsets.back(), m, "inputs of micro-batch {} kept to recompute it");
    c.slabs = SlotPool(memory_, static_cast<std::uint64_t>(slab_bytes[static_cast<std::size_t>(ci)]), m,
                       "activations of micro-batch {}");
  }
  // The rotary table (llama) is part of ModelDesc::cuda_workspace_bytes, in a buffer of its own.
  const std::int64_t rope_bytes = model.rope_table_bytes();
  workspace_ = DeviceBuffer(memory_, MemCategory::workspace,
                            static_cast<std::uint64_t>(model.cuda_workspace_bytes(b, train) - rope_bytes), "workspace");
  if (rope_bytes > 0) {
    std::vector<float> table(static_cast<std::size_t>(rope_bytes / 4));
    cpu::rope_table(table.data(), ms.seq_len, ms.hidden / ms.heads, ms.rope_theta);
    rope_ = DeviceBuffer(memory_, MemCategory::workspace, static_cast<std::uint64_t>(rope_bytes), "rotary table", false);
    cuda_check(cudaMemcpy(rope_.data(), table.data(), static_cast<std::size_t>(rope_bytes), cudaMemcpyHostToDevice), kWho,
               "uploading the rotary table");
  }
  loss_.assign(static_cast<std::size_t>(m), 0.0);
  host_losses_.assign(static_cast<std::size_t>(tokens_), 0.0f);
  // The host-staged collectives' copies: a [T,h] fp32 sum (and, sequence
  // parallel, the rank's rows of one, or a gather's part and whole), the
  // cross-entropy's 2T.
  if (tp_ > 1 && !device_tensor_) {
    const std::int64_t floats = std::max(tokens_ * ms.hidden * (sequence_parallel() ? 2 : 1), 2 * tokens_);
    tp_host_.emplace(static_cast<std::size_t>(floats) * sizeof(float));
  }

  upload_initial_weights();
  cuda_check(cudaDeviceSynchronize(), kWho, "build");
}

// Initial weights: the cpu backend's values (seed, piece, tensor, element),
// rounded to the storage dtype; the fp32 master keeps them exactly.
void CudaBackend::upload_initial_weights() {
  const ModelSpec& ms = job_.model;
  std::vector<float> host;
  std::vector<std::byte> rounded;
  for (const Chunk& c : chunks_)
    for (const Piece& p : c.pieces)
      for (std::size_t t = 0; t < p.tensors.size(); ++t) {
        const TensorSlot& tt = p.tensors[t];
        host.resize(static_cast<std::size_t>(tt.size));
        initial_values(ms, p, t, host.data());
        rounded.resize(host.size() * static_cast<std::size_t>(e_));
        round_on_host(dt_, host.data(), rounded.data(), host.size());
        cuda_check(cudaMemcpy(w(p, t), rounded.data(), rounded.size(), cudaMemcpyHostToDevice), kWho, "uploading weights");
        // The master: the tensor's part of the shard this replica steps (all of it unsharded).
        const parallel::Span part = parallel::intersect(owned_, {tt.offset, tt.offset + tt.size});
        if (master_.bytes() && part.size() > 0)
          cuda_check(cudaMemcpy(master_.data() + (part.begin - owned_.begin) * 4, host.data() + (part.begin - tt.offset),
                                static_cast<std::size_t>(part.size()) * 4, cudaMemcpyHostToDevice),
                     kWho, "uploading master weights");
      }
}

// The rank's share of the layers (cuda_backend.hpp, "Tensor parallelism").
void CudaBackend::set_tensor_widths(const StageSpec& spec) {
  const ModelSpec& ms = job_.model;
  tp_ = std::max(1, spec.tensor.degree);
  if (tp_ > 1 && (!tensor_ || tensor_->size() != tp_ || tensor_->rank() != spec.tensor_rank))
    throw Error(fmt::format("cuda backend: tensor_parallel = {} needs its tensor group (set_tensor_group) before build", tp_));
  ht_ = ms.hidden / tp_;
  ft_ = ms.ffn_hidden / tp_;
  at_ = ms.heads / tp_;
  kvheads_t_ = ms.kv_heads / tp_;
  kvt_ = std::int64_t{kvheads_t_} * (ms.hidden / ms.heads);
  vocab_local_ = padded_vocab(ms, tp_) / tp_;
  vocab_first_ = static_cast<int>(spec.tensor_rank * vocab_local_);
  vocab_valid_ = static_cast<int>(std::clamp<std::int64_t>(ms.vocab - vocab_first_, 0, vocab_local_));
  ts_ = ModelDesc(ms, spec.dtype, spec.tensor).region_tokens(spec.micro_batch_size);
}

// Chunk ci's boundary buffers (ModelDesc::comm_bytes: one receive buffer per
// neighbour, one send buffer per micro-batch, also between two chunks of this
// rank), their host staging, and the stash pool (the kept-input pool: build).
void CudaBackend::build_chunk(Chunk& c, int ci, const ModelDesc& model) {
  const bool train = spec_.mode == RunMode::train;
  const int b = spec_.micro_batch_size, m = spec_.num_microbatches;
  const auto boundary = static_cast<std::uint64_t>(model.boundary_bytes(b));
  c.receives = spec_.receives(ci);
  c.sends = spec_.sends(ci);
  if (c.receives) c.recv_prev = DeviceBuffer(memory_, MemCategory::comm, boundary, "activation receive buffer");
  if (c.sends && train) c.recv_next = DeviceBuffer(memory_, MemCategory::comm, boundary, "gradient receive buffer");
  if (c.sends)
    for (int i = 0; i < spec_.send_pool(ActionKind::F, ci); ++i)
      c.send_next.emplace_back(memory_, MemCategory::comm, boundary, "activation send buffer");
  if (c.receives && train)
    for (int i = 0; i < spec_.send_pool(ActionKind::B, ci); ++i)
      c.send_prev.emplace_back(memory_, MemCategory::comm, boundary, "gradient send buffer");
  if (!spec_.transport_uses_device_memory) {
    if (c.recv_prev.bytes()) c.host_recv_prev.emplace(boundary);
    if (c.recv_next.bytes()) c.host_recv_next.emplace(boundary);
    for (std::size_t i = 0; i < c.send_next.size(); ++i) c.host_send_next.emplace_back(boundary);
    for (std::size_t i = 0; i < c.send_prev.size(); ++i) c.host_send_prev.emplace_back(boundary);
  }
  if (spec_.split_backward) {
    std::int64_t elements = 0;
    for (const Piece& p : c.pieces) elements += stash_elements(p);
    c.stash = SlotPool(memory_, static_cast<std::uint64_t>(elements * e_), m,
                       "output gradients of micro-batch {} kept for its weight gradient");
  }
}

void CudaBackend::copy_on_device(void* dst, const void* src, std::uint64_t bytes) const {
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
}

void CudaBackend::gemm(const gemm::RowMajor& g, const void* A, const void* B, void* C, bool fp32_out) const {
  const gemm::ColumnMajor c = gemm::to_column_major(g);
  const cublasOperation_t first = c.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second = c.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t type = cuda_type(dt_);
  // bf16/fp16 inputs with an fp32 output under CUBLAS_COMPUTE_32F: one of
  // cublasGemmEx's documented type combinations.
  const cudaDataType_t c_type = fp32_out ? CUDA_R_32F : type;
  if (c.batch == 1)
    cublas_check(gpu::cublas().gemm_ex(cublas_, first, second, c.m, c.n, c.k, &c.alpha, B, type, c.ld_first, A, type, c.ld_second,
                              &c.beta, C, c_type, c.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "GemmEx");
  else
    cublas_check(gpu::cublas().gemm_strided_batched_ex(cublas_, first, second, c.m, c.n, c.k, &c.alpha, B, type, c.ld_first,
                                            c.stride_first, A, type, c.ld_second, c.stride_second, &c.beta, C, c_type,
                                            c.ldc, c.stride_c, c.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "GemmStridedBatchedEx");
}

void CudaBackend::linear_forward(const void* x, const void* W, const void* b, void* y, int T, int in, int out,
                                 bool accumulate) const {
  gemm(gemm::linear_forward(T, in, out, accumulate), x, W, y);
  if (b) gpu::add_bias(dt_, y, b, T, out, stream_);
}

void CudaBackend::linear_backward_weight(const void* x, const void* dy, float* dW, float* db, int T, int in,
                                         int out) const {
  gemm(gemm::linear_weight_grad(T, in, out), x, dy, dW, true);
  if (db) gpu::bias_backward(dt_, dy, db, T, out, stream_);
}

void CudaBackend::linear_backward_input(const void* W, const void* dy, void* dx, int T, int in, int out,
                                        bool accumulate) const {
  gemm(gemm::linear_input_grad(T, in, out, accumulate), dy, W, dx);
}

void CudaBackend::upload_tokens(int mb, std::int32_t* dst, bool targets) {
  std::vector<std::int32_t> tok, tgt;
  synthetic_batch(job_.model, step_, spec_.first_sample(mb), spec_.micro_batch_size, tok, tgt);
  const auto& src = targets ? tgt : tok;
  // An id outside the vocabulary would index past the embedding (or the
  // logits) on the device, silently: checked here, where it is cheap.
  for (std::size_t i = 0; i < src.size(); ++i)
    if (src[i] < 0 || src[i] >= job_.model.vocab)
      throw Error(fmt::format("cuda backend: {} {} of micro-batch {} is {}, outside the vocabulary [0, {})",
                              targets ? "target" : "token", i, mb, src[i], job_.model.vocab));
  cuda_check(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream_), kWho,
             "uploading tokens");
  wait_for_host_copy("uploading tokens");  // `src` dies here
}

// The stream up to here (a host copy's source about to be freed) has passed.
// Under full recomputation an upload comes mid-action, behind tensor-parallel
// collectives already queued: the wait polls the run's aborts and NCCL's
// errors like the action's end (issue 72: a blocking synchronise hung there
// until the hard watchdog when a tensor peer was gone).
void CudaBackend::wait_for_host_copy(const char* what) {
  cuda_check(cudaEventRecord(ev_host_, stream_), kWho, "cudaEventRecord");
  if (device_tensor_) device_tensor_->wait(ev_host_, what);
  cuda_check(cudaEventSynchronize(ev_host_), kWho, what);
}

// A boundary tensor the MPI transport received into host staging, to the
// device, queued before the action's start event (docs/cuda-backend.md, Timing).
void CudaBackend::upload_staged(Chunk& c, ActionKind kind) {
  const bool fwd = kind == ActionKind::F;
  bool& staged = fwd ? c.staged_prev : c.staged_next;
  if (!staged) return;
  const DeviceBuffer& dst = fwd ? c.recv_prev : c.recv_next;
  const HostBuffer& src = (fwd ? c.host_recv_prev : c.host_recv_next).value();
  cuda_check(cudaMemcpyAsync(dst.data(), src.data(), dst.bytes(), cudaMemcpyHostToDevice, stream_), kWho,
             fwd ? "staging the received activation" : "staging the received gradient");
  staged = false;
}
// The embedding backward's segments (kernels.hpp EmbeddingOrder): the
// micro-batch's positions sorted by (token id, position), the start of each
// token's run and its id, uploaded to the workspace before the backward.
// Tensor-parallel: the positions of the rank's vocabulary rows only, the
// segments' rows counted from its first.
void CudaBackend::upload_embedding_order(int mb) {
  std::vector<std::int32_t> tok, tgt;
  synthetic_batch(job_.model, step_, spec_.first_sample(mb), spec_.micro_batch_size, tok, tgt);
  std::vector<std::int32_t> ints(3 * tok.size() + 1);
  std::int32_t* order = ints.data();
  std::int32_t T = 0;
  for (std::size_t i = 0; i < tok.size(); ++i)
    if (tok[i] >= vocab_first_ && tok[i] - vocab_first_ < vocab_local_) order[T++] = static_cast<std::int32_t>(i);
  std::stable_sort(order, order + T, [&](std::int32_t x, std::int32_t y) { return tok[x] < tok[y]; });
  std::vector<std::int32_t> seg, seg_token;
  for (std::int32_t k = 0; k < T; ++k)
    if (k == 0 || tok[order[k]] != tok[order[k - 1]]) {
      seg.push_back(k);
      seg_token.push_back(tok[order[k]] - vocab_first_);
    }
  const auto U = static_cast<std::int32_t>(seg_token.size());
  seg.push_back(T);
  std::copy(seg.begin(), seg.end(), ints.begin() + T);
  std::copy(seg_token.begin(), seg_token.end(), ints.begin() + T + U + 1);
  std::int32_t* dev = embedding_order_ints();
  cuda_check(cudaMemcpyAsync(dev, ints.data(), static_cast<std::size_t>(T + U + 1 + U) * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice, stream_),
             kWho, "uploading the embedding's token order");
  wait_for_host_copy("uploading the embedding's token order");  // `ints` dies here
  embedding_order_ = {dev, dev + T, dev + T + U + 1, U};
}

// The head's per-token losses to the host, after the action's events.
void CudaBackend::read_loss(int mb) {
  cuda_check(cudaMemcpyAsync(host_losses_.data(), token_losses(), host_losses_.size() * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             kWho, "reading losses");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "reading losses");
  double sum = 0.0;
  for (float l : host_losses_) sum += static_cast<double>(l);
  loss_[static_cast<std::size_t>(mb)] = sum / static_cast<double>(tokens_);
}

// Tensor-parallel: the rank's heads and columns (widths ht_, ft_, its
// vocabulary part); row-parallel outputs through row_parallel_out.
void CudaBackend::forward_piece(const Chunk& c, const Piece& p, int mb, const std::byte* in, std::byte* out) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = static_cast<int>(ft_), s = ms.seq_len;
  const int ht = static_cast<int>(ht_), V = static_cast<int>(vocab_local_);
  const int B = spec_.micro_batch_size, Ts = static_cast<int>(ts_);
  auto A = [&](std::int64_t elements) { return act(c, mb, p, elements); };
  auto S = [&](std::int64_t elements) { return stat(c, mb, p, elements); };
  // Every piece but the embedding keeps its input at the start of its slab
  // region; only a chunk's first piece gets it from elsewhere (the receive
  // buffer, or a kept input): the rank's Ts tokens.
  if (p.kind != PieceKind::embedding && in != A(0)) copy_on_device(A(0), in, static_cast<std::uint64_t>(ts_ * h * e_));
  switch (p.kind) {
    case PieceKind::llama: forward_llama(c, p, mb, out); break;
    case PieceKind::embedding: {
      const auto* tokens = reinterpret_cast<const std::int32_t*>(A(0));  // uploaded (or recomputation's kept copy)
      const void* wpe = p.tensors.size() > 1 ? w(p, 1) : nullptr;      // llama: no position table
      embedding_out(tokens, w(p, 0), wpe, out);
      break;
    }
    case PieceKind::gpt: {
      const GptActs a(T, h, f, static_cast<int>(e_), ht, Ts);
      std::byte* x = A(a.x);
      gpu::layernorm_forward(dt_, x, w(p, 0), w(p, 1), A(a.ln1), S(a.mean1), S(a.rstd1), Ts, h, stream_);
      linear_forward(gathered(A(a.ln1)), w(p, 2), w(p, 3), A(a.qkv), T, h, 3 * ht, false);
      if (flash()) {
        gpu::flash_attention_forward(dt_, A(a.qkv), A(a.attn), flash_lse(c, mb, p, a.probs), B, s, ht, at_, at_, stream_);
      } else {
        // Attention, per sequence: scores = Q·Kᵀ/√d for all the rank's heads at once, causal softmax, out = P·V.
        const gemm::Attention at(s, ht, at_);
        std::byte* probs = attention_probs(c, mb, p, a.probs);
        for (int bi = 0; bi < B; ++bi) {
          const std::byte* q = A(a.qkv + std::int64_t{bi} * s * 3 * ht);
          gemm(at.scores(), q, q + ht * e_, probs + bi * at.heads * at.ss() * e_);
        }
        gpu::causal_softmax(dt_, probs, s, std::int64_t{B} * at.heads, stream_);
        for (int bi = 0; bi < B; ++bi) {
          const std::byte* q = A(a.qkv + std::int64_t{bi} * s * 3 * ht);
          gemm(at.values(), probs + bi * at.heads * at.ss() * e_, q + 2 * ht * e_, A(a.attn + std::int64_t{bi} * s * ht));
        }
      }
      std::byte* x2 = A(a.x2);
      row_parallel_out(A(a.attn), w(p, 4), w(p, 5), x, x2, ht);
      gpu::layernorm_forward(dt_, x2, w(p, 6), w(p, 7), A(a.ln2), S(a.mean2), S(a.rstd2), Ts, h, stream_);
      linear_forward(gathered(A(a.ln2)), w(p, 8), w(p, 9), A(a.pre), T, h, f, false);
      gpu::gelu_forward(dt_, A(a.pre), A(a.gelu), std::int64_t{T} * f, stream_);
      row_parallel_out(A(a.gelu), w(p, 10), w(p, 11), x2, out, f);
      break;
    }
    case PieceKind::mlp: {
      std::byte* x = A(0);
      std::byte* pre = A(std::int64_t{Ts} * h);
      std::byte* gl = A(std::int64_t{Ts} * h + std::int64_t{T} * f);
      linear_forward(gathered(x), w(p, 0), w(p, 1), pre, T, h, f, false);
      gpu::gelu_forward(dt_, pre, gl, std::int64_t{T} * f, stream_);
      row_parallel_out(gl, w(p, 2), w(p, 3), x, out, f);
      break;
    }
    case PieceKind::head: {
      const HeadActs a = head_acts();  // llama: RMSNorm [h] and the LM head at tensor 1
      if (llama())
        gpu::rmsnorm_forward(dt_, A(a.x), w(p, 0), A(a.ln), S(a.rstd), Ts, h, static_cast<float>(ms.norm_eps), stream_);
      else
        gpu::layernorm_forward(dt_, A(a.x), w(p, 0), w(p, 1), A(a.ln), S(a.mean), S(a.rstd), Ts, h, stream_);
      std::byte* probs = A(a.probs);
      linear_forward(gathered(A(a.ln)), w(p, llama() ? 1 : 2), nullptr, probs, T, h, V, false);
      head_loss(probs, reinterpret_cast<const std::int32_t*>(A(a.targets)));  // targets uploaded; read_loss()
      break;
    }
  }
}

// The chunk's pieces in order, from `in` (null for the embedding, which
// reads the token ids in its slab) to `last_out` (null for the head).
void CudaBackend::forward_pieces(const Chunk& c, int mb, const std::byte* in, std::byte* last_out) {
  for (std::size_t i = 0; i < c.pieces.size(); ++i) {
    std::byte* out = i + 1 < c.pieces.size() ? act(c, mb, c.pieces[i + 1], 0) : last_out;  // the next piece's input
    forward_piece(c, c.pieces[i], mb, in, out);
    in = out;
  }
}

// With recomputation one piece after another in the slab's one-piece space,
// each piece's input kept as it runs (the embedding's: the token ids), its
// output through the workspace. The head's targets go to the device as the
// head runs (the pieces before it use the same space).
void CudaBackend::forward_checkpointed(Chunk& c, int mb, const std::byte* in, std::byte* last_out) {
  std::byte* kept = c.kept.get(mb);
  for (std::size_t i = 0; i < c.pieces.size(); ++i) {
    const Piece& p = c.pieces[i];
    if (p.kind == PieceKind::head) upload_tokens(mb, targets_at(c, mb), true);
    std::byte* out = i + 1 < c.pieces.size() ? workspace_ping() : last_out;
    forward_piece(c, p, mb, in, out);
    copy_on_device(kept + c.kept_offsets[i], act(c, mb, p, 0), kept_size(c, i));
    in = out;
  }
}

void CudaBackend::acquire_slab(Chunk& c, int mb) {
  if (c.slabs.get(mb)) --live_;  // a forward again without backward: acquire releases it
  c.slabs.acquire(mb);
  ++live_;
  peak_live_ = std::max(peak_live_, live_);
}

void CudaBackend::release_slab(Chunk& c, int mb) {
  if (c.slabs.release(mb)) --live_;
}

void CudaBackend::start_action() { cuda_check(cudaEventRecord(ev_start_, stream_), kWho, "cudaEventRecord"); }

// With NCCL tensor collectives in the action, a peer that is gone would
// hold them (and the event) forever: the group's wait polls for it.
void CudaBackend::finish_action() {
  cuda_check(cudaEventRecord(ev_end_, stream_), kWho, "cudaEventRecord");
  if (device_tensor_) device_tensor_->wait(ev_end_, "an action's tensor-parallel collectives");
  cuda_check(cudaEventSynchronize(ev_end_), kWho, "an action on the device");
  float ms = 0.0f;
  cuda_check(cudaEventElapsedTime(&ms, ev_start_, ev_end_), kWho, "cudaEventElapsedTime");
  last_action_s_ = static_cast<double>(ms) * 1e-3;
}

// F: what it reads from the host first (the staged activation, the tokens,
// the targets), then the pieces between the action's events. With
// recomputation every piece's input is kept (forward_checkpointed) and the
// slab goes at the end: the micro-batch is still held, as its inputs.
void CudaBackend::forward(int /*step*/, int mb, int ci) {
  Chunk& c = chunk(ci);
  acquire_slab(c, mb);
  std::byte* kept = c.checkpointed ? c.kept.acquire(mb) : nullptr;
  upload_staged(c, ActionKind::F);
  if (c.embedding()) upload_tokens(mb, tokens_at(c, mb), false);
  if (c.head() && !kept) upload_tokens(mb, targets_at(c, mb), true);  // checkpointed: as the head runs
  start_action();
  const std::byte* in = c.embedding() ? nullptr : c.recv_prev.data();
  std::byte* out = c.sends ? c.send_next[spec_.send_slot(ActionKind::F, mb, ci)].data() : nullptr;
  if (kept) forward_checkpointed(c, mb, in, out);
  else forward_pieces(c, mb, in, out);
  finish_action();
  if (c.head()) read_loss(mb);
  if (kept) {
    release_slab(c, mb);
    ++live_;
  }
  if (spec_.mode == RunMode::inference) release_slab(c, mb);
}

// Tensor-parallel: each piece's sum over the group, a tensor every rank
// holds whole (`shared`) counted on the lead rank only.
void CudaBackend::grad_sq_norm_by_piece(std::vector<double>& per_piece) const {
  double* partials = norm_partials();
  std::vector<double> host(gpu::kSumSquaresSlots);
  std::vector<double> mine(per_piece.size(), 0.0);
  for (const Chunk& c : chunks_)
    for (const Piece& p : c.pieces) {
      cuda_check(cudaMemsetAsync(partials, 0, sizeof(double) * host.size(), stream_), kWho, "memset");
      for (std::size_t t = 0; t < p.tensors.size(); ++t) {
        // ZeRO-1: the part of the shard this replica's sums cover (the runtime sums them over the replicas).
        const TensorSlot& tt = p.tensors[t];
        const parallel::Span part = parallel::intersect(owned_, {tt.offset, tt.offset + tt.size});
        if (part.size() > 0 && (!tt.shared || spec_.tensor_rank == 0))
          gpu::sum_squares_accumulate(reinterpret_cast<const float*>(grads_.data()) + part.begin, part.size(), partials,
                                      stream_);
      }
      cuda_check(cudaMemcpyAsync(host.data(), partials, sizeof(double) * host.size(), cudaMemcpyDeviceToHost, stream_),
                 kWho, "reading gradient norms");
      cuda_check(cudaStreamSynchronize(stream_), kWho, "reading gradient norms");
      double sum = 0.0;
      for (double x : host) sum += x;
      mine.at(static_cast<std::size_t>(p.id)) += sum * grad_unscale_ * grad_unscale_;
    }
  if (tp_ > 1) tensor_->sum(mine.data(), static_cast<std::int64_t>(mine.size()));
  for (std::size_t i = 0; i < mine.size(); ++i) per_piece[i] += mine[i];
}

void CudaBackend::note_device_memory() const {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return;  // a query, never a failure of the run
  device_used_peak_ = std::max(device_used_peak_, static_cast<std::int64_t>(total - free));
}

void CudaBackend::optimizer_step(int /*step*/, double grad_scale) {
  ++optimizer_steps_;
  const auto lr = static_cast<float>(job_.train.learning_rate);
  const auto scale = static_cast<float>(grad_scale * grad_unscale_);
  for (const Chunk& c : chunks_)
    for (const Piece& p : c.pieces)
      for (std::size_t t = 0; t < p.tensors.size(); ++t) {
        const TensorSlot& tt = p.tensors[t];
        // The tensor's part of the shard this replica steps (ZeRO-1; all of it unsharded).
        const parallel::Span part = parallel::intersect(owned_, {tt.offset, tt.offset + tt.size});
        if (part.size() == 0) continue;
        const std::int64_t state = part.begin - owned_.begin;
        void* weights = elem(params_, part.begin);
        const float* grad = reinterpret_cast<const float*>(grads_.data()) + part.begin;
        float* master = master_.bytes() ? reinterpret_cast<float*>(master_.data()) + state : nullptr;
        if (job_.train.optimizer == OptimizerKind::adamw)
          gpu::adamw_update(dt_, weights, grad, master, reinterpret_cast<float*>(adam_m_.data()) + state,
                            reinterpret_cast<float*>(adam_v_.data()) + state, part.size(), lr, kAdamBeta1, kAdamBeta2,
                            kAdamEps, tt.matrix ? kAdamWeightDecay : 0.0f, optimizer_steps_, scale, stream_);
        else
          gpu::sgd_update(dt_, weights, grad, master, part.size(), lr, scale, stream_);
      }
  cuda_check(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_), kWho, "clearing gradients");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "the optimizer step");
  note_device_memory();
}

// The chunk's gradients, final once its last backward was queued: after the
// stream's work so far (so after that backward), in place on the device for
// NCCL, or copied to the chunk's host staging.
FlatRegion CudaBackend::gradients(int ci) {
  if (!sync_grads_) return Backend::gradients(ci);  // no replicas: throws
  const Chunk& c = chunk(ci);
  if (host_grads_.empty()) {
    // In device memory: NCCL's stream follows this one's kernels (DeviceAllReduce::post's
    // `after`, device_stream()), so the host does not wait — a bucket may be posted inside the
    // backward that writes the rest of these gradients.
    return {reinterpret_cast<float*>(grads_.data()) + c.grad_begin, static_cast<std::size_t>(c.grad_count),
            static_cast<std::uint64_t>(c.grad_count) * 4};
  }
  HostBuffer& h = host_grads_.at(static_cast<std::size_t>(ci));
  cuda_check(cudaMemcpyAsync(h.data(), reinterpret_cast<float*>(grads_.data()) + c.grad_begin, h.bytes(),
                             cudaMemcpyDeviceToHost, stream_),
             kWho, "staging gradients for the data-parallel reduction");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "staging gradients for the data-parallel reduction");
  staged_grads_.push_back(ci);
  return {static_cast<float*>(h.data()), static_cast<std::size_t>(c.grad_count), h.bytes()};
}

void CudaBackend::gradients_synchronised() {
  for (int ci : staged_grads_) {
    const Chunk& c = chunk(ci);
    const HostBuffer& h = host_grads_.at(static_cast<std::size_t>(ci));
    cuda_check(cudaMemcpyAsync(reinterpret_cast<float*>(grads_.data()) + c.grad_begin, h.data(), h.bytes(),
                               cudaMemcpyHostToDevice, stream_),
               kWho, "the replicas' summed gradients");
  }
  cuda_check(cudaStreamSynchronize(stream_), kWho, "the replicas' summed gradients");
  staged_grads_.clear();
}

FlatRegion CudaBackend::parameters(int ci) {
  if (host_params_.empty()) return Backend::parameters(ci);  // not sharded: throws
  const Chunk& c = chunk(ci);
  HostBuffer& h = host_params_.at(static_cast<std::size_t>(ci));
  // This replica's part of the chunk, in fp32: the master of a 16-bit dtype, else the parameters.
  const parallel::Span part = parallel::intersect(owned_, {c.grad_begin, c.grad_begin + c.grad_count});
  if (part.size() > 0) {
    const std::byte* from = master_.bytes() ? master_.data() + (part.begin - owned_.begin) * 4 : elem(params_, part.begin);
    cuda_check(cudaMemcpyAsync(static_cast<float*>(h.data()) + (part.begin - c.grad_begin), from,
                               static_cast<std::size_t>(part.size()) * 4, cudaMemcpyDeviceToHost, stream_),
               kWho, "staging the parameter shard for the all-gather");
  }
  cuda_check(cudaStreamSynchronize(stream_), kWho, "staging the parameter shard for the all-gather");
  return {static_cast<float*>(h.data()), static_cast<std::size_t>(c.grad_count), h.bytes()};
}

void CudaBackend::parameters_gathered() {
  std::vector<std::byte> rounded;
  for (std::size_t ci = 0; ci < host_params_.size(); ++ci) {
    const Chunk& c = chunk(static_cast<int>(ci));
    const HostBuffer& h = host_params_[ci];
    const auto count = static_cast<std::size_t>(c.grad_count);
    rounded.resize(count * static_cast<std::size_t>(e_));
    round_on_host(dt_, static_cast<const float*>(h.data()), rounded.data(), count);
    cuda_check(cudaMemcpy(elem(params_, c.grad_begin), rounded.data(), rounded.size(), cudaMemcpyHostToDevice), kWho,
               "uploading the gathered parameters");
  }
}

// A collective may still write the staging after a failure: never freed.
void CudaBackend::abandon_gradients() {
  new std::vector<HostBuffer>(std::move(host_params_));  // an all-gather's: deliberately never destroyed
  host_params_.clear();
  new std::vector<HostBuffer>(std::move(host_grads_));  // deliberately never destroyed
  host_grads_.clear();
  staged_grads_.clear();
}

// F: where the activation lands / B: the gradient. With host staging the
// transport writes the host copy, uploaded before the action (upload_staged).
Buffer CudaBackend::recv_buffer(ActionKind kind, int /*mb*/, int ci) {
  Chunk& c = chunk(ci);
  const bool fwd = kind == ActionKind::F;
  if (!spec_.transport_uses_device_memory) {
    HostBuffer& hb = (fwd ? c.host_recv_prev : c.host_recv_next).value();
    (fwd ? c.staged_prev : c.staged_next) = true;
    return {hb.data(), hb.bytes(), hb.bytes()};
  }
  DeviceBuffer& b = fwd ? c.recv_prev : c.recv_next;
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

Buffer CudaBackend::send_buffer(ActionKind kind, int mb, int ci) {
  Chunk& c = chunk(ci);
  const bool fwd = kind == ActionKind::F;
  const std::size_t slot = spec_.send_slot(kind, mb, ci);
  DeviceBuffer& b = (fwd ? c.send_next : c.send_prev).at(slot);
  if (!spec_.transport_uses_device_memory) {
    HostBuffer& hb = (fwd ? c.host_send_next : c.host_send_prev).at(slot);
    cuda_check(cudaMemcpy(hb.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost), kWho, "staging a boundary tensor");
    return {hb.data(), hb.bytes(), hb.bytes()};
  }
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

// The turn of a V: device to device on the stream, before the receiving
// action (and never through host staging).
void CudaBackend::hand_over(ActionKind kind, int mb, int from_chunk, int to_chunk) {
  const bool fwd = kind == ActionKind::F;
  const Chunk& from = chunk(from_chunk);
  Chunk& to = chunk(to_chunk);
  const DeviceBuffer& src = (fwd ? from.send_next : from.send_prev).at(spec_.send_slot(kind, mb, from_chunk));
  const DeviceBuffer& dst = fwd ? to.recv_prev : to.recv_next;
  copy_on_device(dst.data(), src.data(), dst.bytes());
  (fwd ? to.staged_prev : to.staged_next) = false;
}

}  // namespace pipebench::gpu

namespace pipebench {

std::unique_ptr<Backend> make_cuda_backend(const Job& job, int rank) { return std::make_unique<gpu::CudaBackend>(job, rank); }

}  // namespace pipebench
