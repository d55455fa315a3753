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

#include "pipebench/backends/cuda_check.hpp"
#include "cublas_api.hpp"
#include "kernels.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/backends/gemm_layout.hpp"
#include "pipebench/backends/stage_layout.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/model/synthetic.hpp"

namespace pipebench {

namespace {

constexpr const char* kWho = "cuda backend";

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

// cudaMalloc of `bytes` already reserved in `tracker`. When the device is
// fuller than the tracker knows and the allocation fails, the reservation is
// given back and the failure is an OutOfMemoryError with the tracker's
// signature ("out of memory"), so runs and the probe treat both alike.
void* cuda_malloc_or_oom(MemoryTracker& tracker, MemCategory cat, std::uint64_t bytes, std::string_view what) {
  void* ptr = nullptr;
  const cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaSuccess) return ptr;
  tracker.release(cat, bytes);
  (void)cudaGetLastError();
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  throw OutOfMemoryError(fmt::format(
      "out of memory: cudaMalloc of {} ({} bytes) for {} [{}] failed: {} ({}); the device has {} free of {}; the "
      "tracker had {} in use",
      format_bytes(static_cast<double>(bytes)), bytes, what, to_string(cat), cudaGetErrorString(rc), cudaGetErrorName(rc),
      format_bytes(static_cast<double>(free_b)), format_bytes(static_cast<double>(total_b)),
      format_bytes(static_cast<double>(tracker.current_total()))));
}

// A device allocation reserved in the tracker for its lifetime (reserved
// first: an over-capacity request allocates nothing). Zeroed unless asked not to.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryTracker& tracker, MemCategory cat, std::uint64_t bytes, std::string_view what, bool zero = true)
      : cat_(cat) {
    if (bytes == 0) return;
    tracker.reserve(cat, bytes, what);
    ptr_ = cuda_malloc_or_oom(tracker, cat, bytes, what);
    tracker_ = &tracker;
    bytes_ = bytes;
    if (zero) cuda_check(cudaMemset(ptr_, 0, bytes), kWho, "cudaMemset");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    reset();
    tracker_ = std::exchange(o.tracker_, nullptr);
    cat_ = o.cat_;
    bytes_ = std::exchange(o.bytes_, 0);
    ptr_ = std::exchange(o.ptr_, nullptr);
    return *this;
  }
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    if (tracker_ && bytes_) tracker_->release(cat_, bytes_);
    ptr_ = nullptr;
    tracker_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }
  std::uint64_t bytes() const { return bytes_; }

 private:
  MemoryTracker* tracker_ = nullptr;
  MemCategory cat_ = MemCategory::workspace;
  std::uint64_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// Pinned host memory (the MPI transport's staging copies); not tracked.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) cuda_check(cudaMallocHost(&ptr_, bytes), kWho, "cudaMallocHost (staging buffer)");
  }
  HostBuffer(HostBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  HostBuffer& operator=(HostBuffer&&) = delete;
  ~HostBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Job& job, int rank);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  bool computes_loss() const override { return true; }
  void build(const StageSpec& spec) override;
  std::pair<int, int> built_layers() const override { return layers_; }
  std::int64_t built_params() const override { return num_params_; }
  void begin_step(int step, double /*deadline_s*/) override {
    step_ = step;
    note_device_memory();
  }
  // One chunk per rank (unsupported_reason in backend.hpp): `chunk` is 0.
  void forward(int step, int microbatch, int chunk) override;
  void backward(int step, int microbatch, int chunk) override;
  void weight_grad(int, int, int) override {
    throw Error("cuda backend: split backward (W actions) is not implemented; B computes all gradients");
  }
  double loss(int microbatch) const override { return loss_[static_cast<std::size_t>(microbatch)]; }
  void grad_sq_norm_by_piece(std::vector<double>& per_piece) const override;
  void optimizer_step(int step, double grad_scale) override;
  Buffer recv_buffer(ActionKind kind, int microbatch, int chunk) override;
  Buffer send_buffer(ActionKind kind, int microbatch, int chunk) override;
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

  static std::uint64_t device_capacity(const Job& job);
  std::byte* act(int mb, const Piece& p, std::int64_t elements) const {
    return static_cast<std::byte*>(slabs_[static_cast<std::size_t>(mb)]) + p.act_offset + elements * e_;
  }
  std::byte* elem(const DeviceBuffer& b, std::int64_t elements) const { return b.data() + elements * e_; }
  void* w(const Piece& p, std::size_t t) const { return elem(params_, p.tensors[t].offset); }
  // Gradients are fp32 whatever the dtype (docs/cuda-backend.md, dtypes).
  float* g(const Piece& p, std::size_t t) const { return reinterpret_cast<float*>(grads_.data()) + p.tensors[t].offset; }
  // A LayerNorm's fp32 mean or 1/std at slab element offset `elements`.
  float* stat(int mb, const Piece& p, std::int64_t elements) const { return reinterpret_cast<float*>(act(mb, p, elements)); }
  // Workspace layout (ModelDesc::cuda_workspace_bytes): norm partial sums,
  // per-token losses, then the backward's temporaries (aligned: cudaMalloc
  // returns 256-byte-aligned memory and the first two parts are multiples of 4).
  double* norm_partials() const { return reinterpret_cast<double*>(workspace_.data()); }
  float* token_losses() const { return reinterpret_cast<float*>(workspace_.data() + ModelDesc::kCudaNormSlotsBytes); }
  std::int32_t* embedding_order_ints() const {
    return reinterpret_cast<std::int32_t*>(workspace_.data() + ModelDesc::kCudaNormSlotsBytes + 4 * tokens_);
  }
  std::byte* temporaries() const {
    return workspace_.data() + ModelDesc::kCudaNormSlotsBytes + 4 * tokens_ + embedding_order_bytes_;
  }

  // Runs the row-major product `g` (gemm_layout.hpp) through cuBLAS; C in
  // the storage dtype, or fp32 for a weight gradient (`fp32_out`).
  void gemm(const gemm::RowMajor& g, const void* A, const void* B, void* C, bool fp32_out = false) const;
  void linear_forward(const void* x, const void* W, const void* b, void* y, int T, int in, int out, bool accumulate) const;
  void linear_backward(const void* x, const void* W, const void* dy, void* dx, float* dW, float* db, int T, int in,
                       int out, bool accumulate_dx) const;
  void forward_piece(const Piece& p, int mb, const std::byte* in, std::byte* out);
  void backward_piece(const Piece& p, int mb, const std::byte* dy, std::byte* dx);
  void acquire_slab(int mb);
  void release_slab(int mb);
  void upload_tokens(int mb, std::int32_t* dst, bool targets);
  void upload_inputs(int mb);
  void upload_embedding_order(int mb);
  void read_loss(int mb);
  void start_action();
  void finish_action();

  const Job& job_;
  MemoryTracker memory_;
  StageSpec spec_;
  DType dt_ = DType::fp32;
  std::int64_t e_ = 4;  // bytes per element
  std::vector<Piece> pieces_;
  std::pair<int, int> layers_{-1, -1};
  std::int64_t num_params_ = 0, tokens_ = 0;
  // cudaMemGetInfo's used bytes before the backend allocated, and the most since.
  std::int64_t device_used_before_ = -1;
  mutable std::int64_t device_used_peak_ = -1;
  void note_device_memory() const;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t ev_start_ = nullptr, ev_end_ = nullptr;
  double last_action_s_ = -1.0;
  // fp16 keeps gradients in range with a static loss scale: d(loss)/d(logits)
  // is not divided by tokens × micro-batches; the norm and the optimizer
  // divide instead (grad_unscale_ = 1 / that product; 1 for fp32 and bf16).
  double grad_unscale_ = 1.0;
  DeviceBuffer params_, grads_, master_, adam_m_, adam_v_, workspace_;
  DeviceBuffer recv_prev_, recv_next_;
  std::vector<DeviceBuffer> send_prev_, send_next_;
  // Host staging for a transport that moves host memory (MPI).
  std::optional<HostBuffer> host_recv_prev_, host_recv_next_;
  std::vector<HostBuffer> host_send_prev_, host_send_next_;  // per micro-batch
  std::uint64_t slab_bytes_ = 0;
  // Activation slabs, cached like the cpu backend's: a slab is counted in the
  // tracker from its forward to its backward, its device memory then waits in
  // free_slabs_ for the next micro-batch (never returned until the end).
  std::vector<void*> slabs_, free_slabs_;
  std::vector<double> loss_;
  std::vector<float> host_losses_;
  // The embedding backward's token order (workspace, train only): its bytes
  // and the current micro-batch's segments, uploaded before each backward.
  std::int64_t embedding_order_bytes_ = 0;
  gpu::EmbeddingOrder embedding_order_;
  int optimizer_steps_ = 0, step_ = 0;
  int live_ = 0, peak_live_ = 0;
};

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
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (int mb = 0; mb < static_cast<int>(slabs_.size()); ++mb) release_slab(mb);
  for (void* slab : free_slabs_) cudaFree(slab);
  if (ev_start_) cudaEventDestroy(ev_start_);
  if (ev_end_) cudaEventDestroy(ev_end_);
  if (cublas_) gpu::cublas().destroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::build(const StageSpec& spec) {
  spec_ = spec;
  dt_ = spec.dtype;
  e_ = dtype_bytes(dt_);
  // bf16/fp16 GEMMs on tensor cores, but their reductions in fp32, as the
  // docs promise: cuBLAS's default would allow reduced-precision reductions.
  if (dt_ != DType::fp32)
    cublas_check(gpu::cublas().set_math_mode(cublas_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                 "cublasSetMathMode");
  const ModelSpec& ms = job_.model;
  const ModelDesc model(ms, dt_);
  const std::int64_t h = ms.hidden, V = ms.vocab;
  const int b = spec.micro_batch_size;
  tokens_ = std::int64_t{b} * ms.seq_len;
  const bool train = spec.mode == RunMode::train;
  if (spec.num_chunks() != 1) throw Error("cuda backend: one model chunk per rank only");
  const StageRange& range = spec.chunks.front();
  layers_ = {range.first_layer, range.last_layer()};

  const StageLayout layout = stage_layout(ms, dt_, range, b, "cuda");
  pieces_ = layout.pieces;
  const std::int64_t next_param = layout.params, next_act = layout.activation_bytes;
  num_params_ = next_param;
  if (dt_ == DType::fp16) grad_unscale_ = 1.0 / (static_cast<double>(tokens_) * spec.num_microbatches);
  // The fp32 LayerNorm statistics and the head's int32 targets sit among
  // fp16/bf16 activations in the slab: each must be 4-byte aligned.
  for (const Piece& p : pieces_) {
    std::vector<std::pair<const char*, std::int64_t>> at;
    if (p.kind == PieceKind::gpt) {
      const GptActs a(tokens_, h, ms.ffn_hidden, static_cast<int>(e_));
      at = {{"LayerNorm statistics", a.mean1}, {"LayerNorm statistics", a.mean2}};
    } else if (p.kind == PieceKind::head) {
      const HeadActs a(tokens_, h, V, static_cast<int>(e_));
      at = {{"LayerNorm statistics", a.mean}, {"targets", a.targets}};
    }
    for (const auto& [what, elements] : at)
      if ((p.act_offset + elements * e_) % 4 != 0)
        throw Error(fmt::format("cuda backend: the {} of piece {} would sit at slab offset {}, not 4-byte aligned, "
                                "with dtype {}: use an even seq_len or micro_batch_size",
                                what, p.id, p.act_offset + elements * e_, to_string(dt_)));
  }
  if (train) embedding_order_bytes_ = model.cuda_embedding_order_bytes(b);

  const auto n = static_cast<std::uint64_t>(next_param);
  const StateBytes per_param = state_bytes_per_param(job_.train.optimizer, dt_);
  params_ = DeviceBuffer(memory_, MemCategory::params, n * static_cast<std::uint64_t>(per_param.params), "parameters");
  if (train) {
    grads_ = DeviceBuffer(memory_, MemCategory::grads, n * static_cast<std::uint64_t>(per_param.grads), "gradients");
    if (dt_ != DType::fp32) master_ = DeviceBuffer(memory_, MemCategory::optimizer, n * 4, "fp32 master weights");
    if (job_.train.optimizer == OptimizerKind::adamw) {
      adam_m_ = DeviceBuffer(memory_, MemCategory::optimizer, n * 4, "AdamW first moments");
      adam_v_ = DeviceBuffer(memory_, MemCategory::optimizer, n * 4, "AdamW second moments");
    }
  }
  const bool has_prev = spec.rank > 0, has_next = spec.rank + 1 < spec.num_stages;
  const auto boundary = static_cast<std::uint64_t>(model.boundary_bytes(b));
  const auto m = static_cast<std::size_t>(spec.num_microbatches);
  const bool staging = !spec.transport_uses_device_memory;
  if (has_prev) recv_prev_ = DeviceBuffer(memory_, MemCategory::comm, boundary, "activation receive buffer");
  if (has_next && train) recv_next_ = DeviceBuffer(memory_, MemCategory::comm, boundary, "gradient receive buffer");
  for (std::size_t i = 0; i < m; ++i) {
    if (has_next) send_next_.emplace_back(memory_, MemCategory::comm, boundary, "activation send buffer");
    if (has_prev && train) send_prev_.emplace_back(memory_, MemCategory::comm, boundary, "gradient send buffer");
  }
  if (staging) {
    if (has_prev) host_recv_prev_.emplace(boundary);
    if (has_next && train) host_recv_next_.emplace(boundary);
    for (std::size_t i = 0; i < send_next_.size(); ++i) host_send_next_.emplace_back(boundary);
    for (std::size_t i = 0; i < send_prev_.size(); ++i) host_send_prev_.emplace_back(boundary);
  }
  workspace_ = DeviceBuffer(memory_, MemCategory::workspace,
                            static_cast<std::uint64_t>(model.cuda_workspace_bytes(b, train)), "workspace");
  slab_bytes_ = static_cast<std::uint64_t>(next_act);
  slabs_.assign(m, nullptr);
  loss_.assign(m, 0.0);
  host_losses_.assign(static_cast<std::size_t>(tokens_), 0.0f);

  // Initial weights: the cpu backend's values (seed, piece, tensor, element),
  // rounded to the storage dtype; the fp32 master keeps them exactly.
  std::vector<float> host;
  std::vector<std::byte> rounded;
  for (const Piece& p : pieces_) {
    for (std::size_t t = 0; t < p.tensors.size(); ++t) {
      const TensorSlot& tt = p.tensors[t];
      host.resize(static_cast<std::size_t>(tt.size));
      initial_values(ms, p, t, host.data());
      rounded.resize(host.size() * static_cast<std::size_t>(e_));
      round_on_host(dt_, host.data(), rounded.data(), host.size());
      cuda_check(cudaMemcpy(w(p, t), rounded.data(), rounded.size(), cudaMemcpyHostToDevice), kWho, "uploading weights");
      if (master_.bytes())
        cuda_check(cudaMemcpy(master_.data() + tt.offset * 4, host.data(), host.size() * 4, cudaMemcpyHostToDevice), kWho,
                   "uploading master weights");
    }
  }
  cuda_check(cudaDeviceSynchronize(), kWho, "build");
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

void CudaBackend::linear_backward(const void* x, const void* W, const void* dy, void* dx, float* dW, float* db, int T,
                                  int in, int out, bool accumulate_dx) const {
  gemm(gemm::linear_weight_grad(T, in, out), x, dy, dW, true);
  if (db) gpu::bias_backward(dt_, dy, db, T, out, stream_);
  if (dx) gemm(gemm::linear_input_grad(T, in, out, accumulate_dx), dy, W, dx);
}

void CudaBackend::upload_tokens(int mb, std::int32_t* dst, bool targets) {
  std::vector<std::int32_t> tok, tgt;
  synthetic_batch(job_.model, step_, mb, spec_.micro_batch_size, tok, tgt);
  const auto& src = targets ? tgt : tok;
  // An id outside the vocabulary would index past the embedding (or the
  // logits) on the device, silently: checked here, where it is cheap.
  for (std::size_t i = 0; i < src.size(); ++i)
    if (src[i] < 0 || src[i] >= job_.model.vocab)
      throw Error(fmt::format("cuda backend: {} {} of micro-batch {} is {}, outside the vocabulary [0, {})",
                              targets ? "target" : "token", i, mb, src[i], job_.model.vocab));
  cuda_check(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream_), kWho,
             "uploading tokens");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "uploading tokens");  // `src` dies here
}

// What a forward reads from the host, queued before its start event so that
// the event pair times GPU work only (docs/cuda-backend.md, Timing): the
// received activation's staging copy, the tokens, the targets.
void CudaBackend::upload_inputs(int mb) {
  if (host_recv_prev_)
    cuda_check(cudaMemcpyAsync(recv_prev_.data(), host_recv_prev_->data(), recv_prev_.bytes(), cudaMemcpyHostToDevice,
                               stream_),
               kWho, "staging the received activation");
  if (pieces_.front().kind == PieceKind::embedding)
    upload_tokens(mb, reinterpret_cast<std::int32_t*>(act(mb, pieces_.front(), 0)), false);
  if (pieces_.back().kind == PieceKind::head) {
    const HeadActs a(tokens_, job_.model.hidden, job_.model.vocab, static_cast<int>(e_));
    upload_tokens(mb, reinterpret_cast<std::int32_t*>(act(mb, pieces_.back(), a.targets)), true);
  }
}

// The embedding backward's segments (kernels.hpp EmbeddingOrder): the
// micro-batch's positions sorted by (token id, position), the start of each
// token's run and its id, uploaded to the workspace before the backward.
void CudaBackend::upload_embedding_order(int mb) {
  std::vector<std::int32_t> tok, tgt;
  synthetic_batch(job_.model, step_, mb, spec_.micro_batch_size, tok, tgt);
  const auto T = static_cast<std::int32_t>(tok.size());
  std::vector<std::int32_t> ints(static_cast<std::size_t>(3 * T + 1));
  std::int32_t* order = ints.data();
  for (std::int32_t i = 0; i < T; ++i) order[i] = i;
  std::stable_sort(order, order + T, [&](std::int32_t x, std::int32_t y) { return tok[x] < tok[y]; });
  std::vector<std::int32_t> seg, seg_token;
  for (std::int32_t k = 0; k < T; ++k)
    if (k == 0 || tok[order[k]] != tok[order[k - 1]]) {
      seg.push_back(k);
      seg_token.push_back(tok[order[k]]);
    }
  const auto U = static_cast<std::int32_t>(seg_token.size());
  seg.push_back(T);
  std::copy(seg.begin(), seg.end(), ints.begin() + T);
  std::copy(seg_token.begin(), seg_token.end(), ints.begin() + T + U + 1);
  std::int32_t* dev = embedding_order_ints();
  cuda_check(cudaMemcpyAsync(dev, ints.data(), static_cast<std::size_t>(T + U + 1 + U) * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice, stream_),
             kWho, "uploading the embedding's token order");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "uploading the embedding's token order");  // `ints` dies here
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

void CudaBackend::forward_piece(const Piece& p, int mb, const std::byte* in, std::byte* out) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = ms.ffn_hidden, s = ms.seq_len, V = ms.vocab;
  const int B = spec_.micro_batch_size;
  const std::size_t Th_bytes = static_cast<std::size_t>(tokens_ * h * e_);
  // Every piece but the embedding keeps its input at the start of its slab
  // region; only a stage's first piece gets it from elsewhere (the receive buffer).
  if (p.kind != PieceKind::embedding && in != act(mb, p, 0))
    cuda_check(cudaMemcpyAsync(act(mb, p, 0), in, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
  switch (p.kind) {
    case PieceKind::embedding: {
      const auto* tokens = reinterpret_cast<const std::int32_t*>(act(mb, p, 0));  // upload_inputs()
      gpu::embedding_forward(dt_, tokens, w(p, 0), w(p, 1), out, T, s, h, stream_);
      break;
    }
    case PieceKind::gpt: {
      const GptActs a(T, h, f, static_cast<int>(e_));
      std::byte* x = act(mb, p, a.x);
      gpu::layernorm_forward(dt_, x, w(p, 0), w(p, 1), act(mb, p, a.ln1), stat(mb, p, a.mean1), stat(mb, p, a.rstd1), T, h, stream_);
      linear_forward(act(mb, p, a.ln1), w(p, 2), w(p, 3), act(mb, p, a.qkv), T, h, 3 * h, false);
      // Attention, per sequence: scores = Q·Kᵀ/√d for all heads at once, causal softmax, out = P·V.
      const gemm::Attention at(s, h, ms.heads);
      for (int bi = 0; bi < B; ++bi) {
        const std::byte* q = act(mb, p, a.qkv + std::int64_t{bi} * s * 3 * h);
        gemm(at.scores(), q, q + h * e_, act(mb, p, a.probs + bi * at.heads * at.ss()));
      }
      gpu::causal_softmax(dt_, act(mb, p, a.probs), s, std::int64_t{B} * at.heads, stream_);
      for (int bi = 0; bi < B; ++bi) {
        const std::byte* q = act(mb, p, a.qkv + std::int64_t{bi} * s * 3 * h);
        gemm(at.values(), act(mb, p, a.probs + bi * at.heads * at.ss()), q + 2 * h * e_,
             act(mb, p, a.attn + std::int64_t{bi} * s * h));
      }
      std::byte* x2 = act(mb, p, a.x2);
      cuda_check(cudaMemcpyAsync(x2, x, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      linear_forward(act(mb, p, a.attn), w(p, 4), w(p, 5), x2, T, h, h, true);
      gpu::layernorm_forward(dt_, x2, w(p, 6), w(p, 7), act(mb, p, a.ln2), stat(mb, p, a.mean2), stat(mb, p, a.rstd2), T, h, stream_);
      linear_forward(act(mb, p, a.ln2), w(p, 8), w(p, 9), act(mb, p, a.pre), T, h, f, false);
      gpu::gelu_forward(dt_, act(mb, p, a.pre), act(mb, p, a.gelu), std::int64_t{T} * f, stream_);
      cuda_check(cudaMemcpyAsync(out, x2, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      linear_forward(act(mb, p, a.gelu), w(p, 10), w(p, 11), out, T, f, h, true);
      break;
    }
    case PieceKind::mlp: {
      std::byte* x = act(mb, p, 0);
      std::byte* pre = act(mb, p, std::int64_t{T} * h);
      std::byte* gl = act(mb, p, std::int64_t{T} * h + std::int64_t{T} * f);
      linear_forward(x, w(p, 0), w(p, 1), pre, T, h, f, false);
      gpu::gelu_forward(dt_, pre, gl, std::int64_t{T} * f, stream_);
      cuda_check(cudaMemcpyAsync(out, x, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      linear_forward(gl, w(p, 2), w(p, 3), out, T, f, h, true);
      break;
    }
    case PieceKind::head: {
      const HeadActs a(T, h, V, static_cast<int>(e_));
      std::byte* x = act(mb, p, a.x);
      gpu::layernorm_forward(dt_, x, w(p, 0), w(p, 1), act(mb, p, a.ln), stat(mb, p, a.mean), stat(mb, p, a.rstd), T, h, stream_);
      std::byte* probs = act(mb, p, a.probs);
      linear_forward(act(mb, p, a.ln), w(p, 2), nullptr, probs, T, h, V, false);
      const auto* targets = reinterpret_cast<const std::int32_t*>(act(mb, p, a.targets));  // upload_inputs()
      gpu::softmax_crossentropy_forward(dt_, probs, targets, token_losses(), T, V, stream_);  // read_loss()
      break;
    }
  }
}

void CudaBackend::acquire_slab(int mb) {
  void*& slab = slabs_[static_cast<std::size_t>(mb)];
  if (slab) release_slab(mb);  // a forward again without backward
  const std::string what = fmt::format("activations of micro-batch {}", mb);
  memory_.reserve(MemCategory::activations, slab_bytes_, what);
  if (!free_slabs_.empty()) {
    slab = free_slabs_.back();
    free_slabs_.pop_back();
  } else {
    slab = cuda_malloc_or_oom(memory_, MemCategory::activations, slab_bytes_, what);
  }
  ++live_;
  peak_live_ = std::max(peak_live_, live_);
}

void CudaBackend::release_slab(int mb) {
  void*& slab = slabs_[static_cast<std::size_t>(mb)];
  if (!slab) return;
  memory_.release(MemCategory::activations, slab_bytes_);
  free_slabs_.push_back(std::exchange(slab, nullptr));
  --live_;
}

void CudaBackend::start_action() { cuda_check(cudaEventRecord(ev_start_, stream_), kWho, "cudaEventRecord"); }

void CudaBackend::finish_action() {
  cuda_check(cudaEventRecord(ev_end_, stream_), kWho, "cudaEventRecord");
  cuda_check(cudaEventSynchronize(ev_end_), kWho, "an action on the device");
  float ms = 0.0f;
  cuda_check(cudaEventElapsedTime(&ms, ev_start_, ev_end_), kWho, "cudaEventElapsedTime");
  last_action_s_ = static_cast<double>(ms) * 1e-3;
}

void CudaBackend::forward(int /*step*/, int mb, int /*chunk*/) {
  acquire_slab(mb);
  upload_inputs(mb);
  start_action();
  const bool has_next = spec_.rank + 1 < spec_.num_stages;
  const std::byte* in = pieces_.front().kind == PieceKind::embedding ? nullptr : recv_prev_.data();
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    std::byte* out = nullptr;
    if (i + 1 < pieces_.size()) out = act(mb, pieces_[i + 1], 0);  // where the next piece keeps its input
    else if (has_next) out = send_next_[static_cast<std::size_t>(mb)].data();
    forward_piece(pieces_[i], mb, in, out);
    in = out;
  }
  finish_action();
  if (pieces_.back().kind == PieceKind::head) read_loss(mb);
  if (spec_.mode == RunMode::inference) release_slab(mb);
}

void CudaBackend::backward_piece(const Piece& p, int mb, const std::byte* dy, std::byte* dx) {
  const ModelSpec& ms = job_.model;
  const int T = static_cast<int>(tokens_), h = ms.hidden, f = ms.ffn_hidden, s = ms.seq_len, V = ms.vocab;
  const int B = spec_.micro_batch_size;
  const std::int64_t Th = std::int64_t{T} * h;
  const std::size_t Th_bytes = static_cast<std::size_t>(Th * e_);
  // Workspace carving (ModelDesc::cuda_workspace_bytes): dgelu [T,f], dh, dx2,
  // dqkv [T,3h], ping, pong, then the heads' score matrices.
  std::byte* dgelu = temporaries();
  std::byte* dh = dgelu + std::int64_t{T} * f * e_;
  std::byte* dx2 = dh + Th * e_;
  std::byte* dqkv = dx2 + Th * e_;
  std::byte* scratch = dqkv + 5 * Th * e_;
  switch (p.kind) {
    case PieceKind::embedding:
      gpu::embedding_backward(dt_, dy, embedding_order_, g(p, 0), g(p, 1), T, s, h, stream_);  // upload_embedding_order()
      break;
    case PieceKind::gpt: {
      const GptActs a(T, h, f, static_cast<int>(e_));
      linear_backward(act(mb, p, a.gelu), w(p, 10), dy, dgelu, g(p, 10), g(p, 11), T, f, h, false);
      gpu::gelu_backward(dt_, act(mb, p, a.pre), dgelu, dgelu, std::int64_t{T} * f, stream_);
      linear_backward(act(mb, p, a.ln2), w(p, 8), dgelu, dh, g(p, 8), g(p, 9), T, h, f, false);
      cuda_check(cudaMemcpyAsync(dx2, dy, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      gpu::layernorm_backward(dt_, dh, act(mb, p, a.x2), w(p, 6), stat(mb, p, a.mean2), stat(mb, p, a.rstd2), dx2, g(p, 6),
                              g(p, 7), T, h, stream_);
      linear_backward(act(mb, p, a.attn), w(p, 4), dx2, dh, g(p, 4), g(p, 5), T, h, h, false);
      // Attention backward per sequence, all heads at once (cpu_kernels attention_backward).
      const gemm::Attention at(s, h, ms.heads);
      for (int bi = 0; bi < B; ++bi) {
        const std::int64_t base = std::int64_t{bi} * s * 3 * h;
        const std::byte* q = act(mb, p, a.qkv + base);
        const std::byte* k = q + h * e_;
        const std::byte* v = q + 2 * h * e_;
        std::byte* dq = dqkv + base * e_;
        const std::byte* P = act(mb, p, a.probs + bi * at.heads * at.ss());
        const std::byte* dO = dh + std::int64_t{bi} * s * h * e_;
        gemm(at.dv(), P, dO, dq + 2 * h * e_);
        gemm(at.dp(), dO, v, scratch);
        gpu::causal_softmax_backward(dt_, P, scratch, s, at.heads, stream_);
        gemm(at.dq(), scratch, k, dq);
        gemm(at.dk(), scratch, q, dq + h * e_);
      }
      linear_backward(act(mb, p, a.ln1), w(p, 2), dqkv, dh, g(p, 2), g(p, 3), T, h, 3 * h, false);
      cuda_check(cudaMemcpyAsync(dx, dx2, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      gpu::layernorm_backward(dt_, dh, act(mb, p, a.x), w(p, 0), stat(mb, p, a.mean1), stat(mb, p, a.rstd1), dx, g(p, 0),
                              g(p, 1), T, h, stream_);
      break;
    }
    case PieceKind::mlp: {
      const std::byte* x = act(mb, p, 0);
      const std::byte* pre = act(mb, p, Th);
      const std::byte* gl = act(mb, p, Th + std::int64_t{T} * f);
      linear_backward(gl, w(p, 2), dy, dgelu, g(p, 2), g(p, 3), T, f, h, false);
      gpu::gelu_backward(dt_, pre, dgelu, dgelu, std::int64_t{T} * f, stream_);
      cuda_check(cudaMemcpyAsync(dx, dy, Th_bytes, cudaMemcpyDeviceToDevice, stream_), kWho, "copy");
      linear_backward(x, w(p, 0), dgelu, dx, g(p, 0), g(p, 1), T, h, f, true);
      break;
    }
    case PieceKind::head: {
      const HeadActs a(T, h, V, static_cast<int>(e_));
      std::byte* probs = act(mb, p, a.probs);
      const float scale = dt_ == DType::fp16 ? 1.0f : 1.0f / (static_cast<float>(T) * static_cast<float>(spec_.num_microbatches));
      gpu::softmax_crossentropy_backward(dt_, probs, reinterpret_cast<const std::int32_t*>(act(mb, p, a.targets)), T, V,
                                         scale, stream_);
      linear_backward(act(mb, p, a.ln), w(p, 2), probs, dh, g(p, 2), nullptr, T, h, V, false);
      cuda_check(cudaMemsetAsync(dx, 0, Th_bytes, stream_), kWho, "memset");
      gpu::layernorm_backward(dt_, dh, act(mb, p, a.x), w(p, 0), stat(mb, p, a.mean), stat(mb, p, a.rstd), dx, g(p, 0),
                              g(p, 1), T, h, stream_);
      break;
    }
  }
}

void CudaBackend::backward(int /*step*/, int mb, int /*chunk*/) {
  // Host inputs before the events: the staged gradient, the token order.
  if (host_recv_next_)
    cuda_check(cudaMemcpyAsync(recv_next_.data(), host_recv_next_->data(), recv_next_.bytes(), cudaMemcpyHostToDevice,
                               stream_),
               kWho, "staging the received gradient");
  if (pieces_.front().kind == PieceKind::embedding) upload_embedding_order(mb);
  start_action();
  const bool has_next = spec_.rank + 1 < spec_.num_stages, has_prev = spec_.rank > 0;
  const std::int64_t Th = tokens_ * job_.model.hidden;
  std::byte* ping = temporaries() + (tokens_ * job_.model.ffn_hidden + 5 * Th) * e_;
  std::byte* pong = ping + Th * e_;
  const std::byte* dy = has_next ? recv_next_.data() : nullptr;
  for (std::size_t k = pieces_.size(); k-- > 0;) {
    const Piece& p = pieces_[k];
    std::byte* dx = nullptr;
    if (p.kind != PieceKind::embedding) {
      if (k == 0) dx = has_prev ? send_prev_[static_cast<std::size_t>(mb)].data() : nullptr;
      else dx = (dy == ping) ? pong : ping;
    }
    backward_piece(p, mb, dy, dx);
    dy = dx;
  }
  finish_action();
  release_slab(mb);
}

void CudaBackend::grad_sq_norm_by_piece(std::vector<double>& per_piece) const {
  double* partials = norm_partials();
  std::vector<double> host(gpu::kSumSquaresSlots);
  for (const Piece& p : pieces_) {
    cuda_check(cudaMemsetAsync(partials, 0, sizeof(double) * host.size(), stream_), kWho, "memset");
    for (std::size_t t = 0; t < p.tensors.size(); ++t)
      gpu::sum_squares_accumulate(g(p, t), p.tensors[t].size, partials, stream_);
    cuda_check(cudaMemcpyAsync(host.data(), partials, sizeof(double) * host.size(), cudaMemcpyDeviceToHost, stream_), kWho,
               "reading gradient norms");
    cuda_check(cudaStreamSynchronize(stream_), kWho, "reading gradient norms");
    double sum = 0.0;
    for (double x : host) sum += x;
    per_piece.at(static_cast<std::size_t>(p.id)) += sum * grad_unscale_ * grad_unscale_;
  }
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
  for (const Piece& p : pieces_)
    for (std::size_t t = 0; t < p.tensors.size(); ++t) {
      const TensorSlot& tt = p.tensors[t];
      float* master = master_.bytes() ? reinterpret_cast<float*>(master_.data()) + tt.offset : nullptr;
      if (job_.train.optimizer == OptimizerKind::adamw)
        gpu::adamw_update(dt_, w(p, t), g(p, t), master, reinterpret_cast<float*>(adam_m_.data()) + tt.offset,
                          reinterpret_cast<float*>(adam_v_.data()) + tt.offset, tt.size, lr, kAdamBeta1, kAdamBeta2,
                          kAdamEps, tt.matrix ? kAdamWeightDecay : 0.0f, optimizer_steps_, scale, stream_);
      else
        gpu::sgd_update(dt_, w(p, t), g(p, t), master, tt.size, lr, scale, stream_);
    }
  cuda_check(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_), kWho, "clearing gradients");
  cuda_check(cudaStreamSynchronize(stream_), kWho, "the optimizer step");
  note_device_memory();
}

Buffer CudaBackend::recv_buffer(ActionKind kind, int /*mb*/, int /*chunk*/) {
  const bool fwd = kind == ActionKind::F;
  if (!spec_.transport_uses_device_memory) {
    HostBuffer& hb = (fwd ? host_recv_prev_ : host_recv_next_).value();
    return {hb.data(), hb.bytes(), hb.bytes()};
  }
  DeviceBuffer& b = fwd ? recv_prev_ : recv_next_;
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

Buffer CudaBackend::send_buffer(ActionKind kind, int mb, int /*chunk*/) {
  const bool fwd = kind == ActionKind::F;
  DeviceBuffer& b = (fwd ? send_next_ : send_prev_).at(static_cast<std::size_t>(mb));
  if (!spec_.transport_uses_device_memory) {
    HostBuffer& hb = (fwd ? host_send_next_ : host_send_prev_).at(static_cast<std::size_t>(mb));
    cuda_check(cudaMemcpy(hb.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost), kWho, "staging a boundary tensor");
    return {hb.data(), hb.bytes(), hb.bytes()};
  }
  return {b.data(), static_cast<std::size_t>(b.bytes()), b.bytes()};
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const Job& job, int rank) { return std::make_unique<CudaBackend>(job, rank); }

}  // namespace pipebench
