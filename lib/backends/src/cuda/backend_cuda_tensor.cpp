// The cuda backend's tensor parallelism (cuda_backend.hpp, "Tensor
// parallelism"; docs/tensor-parallel.md): the group's fp32 sums and
// sequence-parallel gathers and reduce-scatters over NCCL or host-staged over
// MPI, the row-parallel outputs and column-parallel input gradients built on
// them, the vocabulary-parallel embedding and cross-entropy, and selective
// recomputation's probabilities. The cpu
// backend's backend_cpu_tensor.cpp is the reference; unlike it, the partial
// products are summed in fp32 whatever the storage dtype (and only then
// rounded), and at t = 1 every helper launches exactly the unsplit layers.
#include <utility>

#include <cstring>

#include <cuda_runtime.h>

#include "cuda_backend.hpp"
#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/backends/gemm_layout.hpp"

namespace pipebench::gpu {

namespace {

// The host-staged reductions: the device buffer to pinned memory, the MPI
// group's reduction there, and back, in stream order.
template <typename Reduce>
void staged(float* data, std::int64_t n, HostBuffer& host, cudaStream_t stream, const char* what, Reduce reduce) {
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  auto* h = static_cast<float*>(host.data());
  cuda_check(cudaMemcpyAsync(h, data, bytes, cudaMemcpyDeviceToHost, stream), kWho, what);
  cuda_check(cudaStreamSynchronize(stream), kWho, what);
  reduce(h, n);
  cuda_check(cudaMemcpyAsync(data, h, bytes, cudaMemcpyHostToDevice, stream), kWho, what);
}

}  // namespace

double CudaBackend::take_tensor_comm_s() {
  double s = tensor_ ? tensor_->take_seconds() : 0.0;
  if (device_tensor_) s += device_tensor_->take_seconds();
  return s;
}

void CudaBackend::tp_sum(float* data, std::int64_t n) {
  if (tp_ == 1) return;
  if (device_tensor_) return device_tensor_->sum(data, n, stream_);
  staged(data, n, *tp_host_, stream_, "a host-staged tensor-parallel sum",
         [&](float* h, std::int64_t k) { tensor_->sum(h, k); });
}

void CudaBackend::tp_max(float* data, std::int64_t n) {
  if (tp_ == 1) return;
  if (device_tensor_) return device_tensor_->max(data, n, stream_);
  staged(data, n, *tp_host_, stream_, "a host-staged tensor-parallel maximum",
         [&](float* h, std::int64_t k) { tensor_->max(h, k); });
}

float* CudaBackend::summed_rows(float* whole) {
  const std::int64_t h = job_.model.hidden;
  if (!sequence_parallel()) {
    tp_sum(whole, tokens_ * h);
    return whole;
  }
  // In place: the rank's rows are where its part of the sum belongs.
  float* part = whole + spec_.tensor_rank * ts_ * h;
  if (device_tensor_) {
    device_tensor_->reduce_scatter(whole, part, ts_ * h, stream_);
    return part;
  }
  const auto whole_bytes = static_cast<std::size_t>(tokens_ * h) * sizeof(float);
  auto* host_whole = static_cast<float*>(tp_host_->data());
  float* host_part = host_whole + tokens_ * h;
  const char* what = "a host-staged sequence-parallel reduce-scatter";
  cuda_check(cudaMemcpyAsync(host_whole, whole, whole_bytes, cudaMemcpyDeviceToHost, stream_), kWho, what);
  cuda_check(cudaStreamSynchronize(stream_), kWho, what);
  tensor_->reduce_scatter(host_whole, host_part, ts_ * h);
  cuda_check(cudaMemcpyAsync(part, host_part, static_cast<std::size_t>(ts_ * h) * sizeof(float), cudaMemcpyHostToDevice,
                             stream_),
             kWho, what);
  return part;
}

const void* CudaBackend::gathered(const void* part) {
  if (!sequence_parallel()) return part;
  gather_into(part, sp_gathered());
  return sp_gathered();
}

void CudaBackend::gather_into(const void* part, void* whole) {
  const std::int64_t part_bytes = ts_ * job_.model.hidden * e_;
  if (!sequence_parallel()) return copy_on_device(whole, part, static_cast<std::uint64_t>(part_bytes));
  if (device_tensor_) return device_tensor_->all_gather(part, whole, part_bytes, stream_);
  auto* host_part = static_cast<std::byte*>(tp_host_->data());
  std::byte* host_whole = host_part + part_bytes;
  const char* what = "a host-staged sequence-parallel all-gather";
  cuda_check(cudaMemcpyAsync(host_part, part, static_cast<std::size_t>(part_bytes), cudaMemcpyDeviceToHost, stream_),
             kWho, what);
  cuda_check(cudaStreamSynchronize(stream_), kWho, what);
  tensor_->all_gather_bytes(host_part, host_whole, part_bytes);
  cuda_check(cudaMemcpyAsync(whole, host_whole, static_cast<std::size_t>(part_bytes * tp_), cudaMemcpyHostToDevice,
                             stream_),
             kWho, what);
}

void CudaBackend::row_parallel_out(const void* in, const void* W, const void* b, const void* residual, void* y,
                                   int in_dim) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden;
  if (tp_ == 1) {
    copy_on_device(y, residual, static_cast<std::uint64_t>(tokens_ * h * e_));
    linear_forward(in, W, b, y, T, in_dim, h, true);
    return;
  }
  float* sum = tp_sum_buffer();
  gemm(gemm::linear_forward(T, in_dim, h, false), in, W, sum, true);
  gpu::sum_to_storage(dt_, summed_rows(sum), b, residual, y, static_cast<int>(ts_), h, stream_);
}

void CudaBackend::column_input_grad(const void* W, const void* d, void* dst, int out_dim, bool accumulate) {
  const int T = static_cast<int>(tokens_), h = job_.model.hidden;
  if (tp_ == 1) return linear_backward_input(W, d, dst, T, h, out_dim, accumulate);
  float* sum = tp_sum_buffer();
  gemm(gemm::linear_input_grad(T, h, out_dim, false), d, W, sum, true);
  gpu::sum_to_storage(dt_, summed_rows(sum), nullptr, accumulate ? dst : nullptr, dst, static_cast<int>(ts_), h, stream_);
}

// The norms' gradients are sums over the rank's tokens only with sequence
// parallelism (TensorSlot::sequence_partial): once the step's last backward
// of the chunk is queued, their sums over the group.
void CudaBackend::backward_done(Chunk& c) {
  if (!sequence_parallel() || ++c.backwards_done < spec_.num_microbatches) return;
  if (std::exchange(c.partials_summed, false)) return;  // piece by piece already (piece_final)
  for (const Piece& p : c.pieces) sum_sequence_partials(p);
}

void CudaBackend::sum_sequence_partials(const Piece& p) {
  for (std::size_t t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].sequence_partial) tp_sum(g(p, t), p.tensors[t].size);
}

void CudaBackend::piece_final(int ci, Chunk& c, const Piece& p, int done) {
  if (!hook_ || ci != hook_chunk_) return;
  if (sequence_parallel()) {
    sum_sequence_partials(p);
    c.partials_summed = true;
  }
  hook_(done);
}

void CudaBackend::head_loss(void* logits, const std::int32_t* targets) {
  const int T = static_cast<int>(tokens_), V = static_cast<int>(vocab_local_);
  if (tp_ == 1) return gpu::softmax_crossentropy_forward(dt_, logits, targets, token_losses(), T, V, stream_);
  float* row_max = tp_stats();
  float* sum_target = row_max + tokens_;
  gpu::vocab_parallel_row_max(dt_, logits, row_max, T, V, vocab_valid_, stream_);
  tp_max(row_max, tokens_);
  gpu::vocab_parallel_sums(dt_, logits, row_max, targets, vocab_first_, sum_target, T, V, vocab_valid_, stream_);
  tp_sum(sum_target, 2 * tokens_);
  gpu::vocab_parallel_finish(dt_, logits, row_max, sum_target, token_losses(), T, V, vocab_valid_, stream_);
}

void CudaBackend::embedding_out(const std::int32_t* tokens, const void* wte, const void* wpe, void* out) {
  const int T = static_cast<int>(tokens_), s = job_.model.seq_len, h = job_.model.hidden;
  if (tp_ == 1) return gpu::embedding_forward(dt_, tokens, wte, wpe, out, T, s, h, stream_);
  // The lead rank adds the position table: the group's sum holds it once.
  float* sum = tp_sum_buffer();
  gpu::embedding_forward_partial(dt_, tokens, wte, spec_.tensor_rank == 0 ? wpe : nullptr, sum, T, s, h, vocab_first_,
                                 static_cast<int>(vocab_local_), stream_);
  gpu::sum_to_storage(dt_, summed_rows(sum), nullptr, nullptr, out, static_cast<int>(ts_), h, stream_);
}

// The forward's scores and causal softmax of the rank's heads, as
// forward_piece / forward_llama compute them (the same launches, so the
// same bits), into selective_probs().
void CudaBackend::attention_probs_again(const std::byte* qkv) {
  const ModelSpec& ms = job_.model;
  const int s = ms.seq_len, B = spec_.micro_batch_size, ht = static_cast<int>(ht_);
  std::byte* probs = selective_probs();
  if (llama()) {
    const gemm::GroupedAttention at(s, ht, at_, kvheads_t_);
    const std::int64_t ldq = ht_ + 2 * kvt_;
    for (int bi = 0; bi < B; ++bi)
      for (int grp = 0; grp < kvheads_t_; ++grp) {
        const std::byte* seq = qkv + std::int64_t{bi} * s * ldq * e_;
        gemm(at.scores(), seq + at.q_offset(grp * at.group) * e_, seq + at.k_offset(grp) * e_,
             probs + (std::int64_t{bi} * at_ + grp * at.group) * at.ss() * e_);
      }
  } else {
    const gemm::Attention at(s, ht, at_);
    for (int bi = 0; bi < B; ++bi) {
      const std::byte* q = qkv + std::int64_t{bi} * s * 3 * ht_ * e_;
      gemm(at.scores(), q, q + ht_ * e_, probs + std::int64_t{bi} * at_ * at.ss() * e_);
    }
  }
  gpu::causal_softmax(dt_, probs, s, std::int64_t{B} * at_, stream_);
}

}  // namespace pipebench::gpu
