// The cuda backend's own kernels: everything but the GEMMs (cuBLAS, in
// backend_cuda.cpp). The same layers and conventions as the cpu kernels
// (cpu_kernels.hpp), so the cpu backend is their numerical reference:
//   - buffers of the storage dtype are passed as void* with a DType
//     (fp32 | bf16 | fp16); every kernel computes in fp32; parameter
//     gradients and LayerNorm statistics are float* whatever the dtype;
//   - parameter-gradient outputs ACCUMULATE (+=), input-gradient outputs are
//     overwritten unless a function says otherwise;
//   - every reduction runs in a fixed order (no atomics), so a run repeats
//     bit for bit on the same device.
// All launches go to `stream` and return at once.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "pipebench/core/job.hpp"

namespace pipebench::gpu {

// Throws pipebench::Error naming the kernel when a launch failed.
void check_launch(const char* what);

// out[b·s + t] = wte[tokens[b·s + t]] + wpe[t]; channels C. wpe null (llama): wte only.
void embedding_forward(DType dt, const std::int32_t* tokens, const void* wte, const void* wpe, void* out, int T, int s,
                       int C, cudaStream_t stream);
// A micro-batch's positions grouped by token id (device int32 arrays; the
// host builds them, embedding_order() in backend_cuda.cpp): segment u is
// order[seg[u] .. seg[u+1]), ascending positions of token seg_token[u].
struct EmbeddingOrder {
  const std::int32_t* order = nullptr;
  const std::int32_t* seg = nullptr;
  const std::int32_t* seg_token = nullptr;
  int segments = 0;
};
// dwte[token] += dout[i] over that token's positions i, dwpe[i % s] +=
// dout[i], each sum in position order (parallel over tokens/positions and
// channels, no atomics). dwpe null (llama): the token table only.
void embedding_backward(DType dt, const void* dout, const EmbeddingOrder& order, float* dwte, float* dwpe, int T, int s,
                        int C, cudaStream_t stream);

// Per row: out = (x - mean)·rstd·gamma + beta (eps 1e-5); mean and rstd saved.
void layernorm_forward(DType dt, const void* x, const void* gamma, const void* beta, void* out, float* mean, float* rstd,
                       int T, int C, cudaStream_t stream);
// The backward in its two parts (a split backward runs them at B and at W;
// one launch each, independent): dx += ... (input gradient), and
// dgamma += ..., dbeta += ... (weight gradients).
void layernorm_backward_input(DType dt, const void* dout, const void* x, const void* gamma, const float* mean,
                              const float* rstd, void* dx, int T, int C, cudaStream_t stream);
void layernorm_backward_weight(DType dt, const void* dout, const void* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int T, int C, cudaStream_t stream);

// GELU (tanh approximation) and its backward (din may alias dout).
void gelu_forward(DType dt, const void* in, void* out, std::int64_t n, cudaStream_t stream);
void gelu_backward(DType dt, const void* in, const void* dout, void* din, std::int64_t n, cudaStream_t stream);

// dst[r·ld_dst + c] = src[r·cols + c] in the storage dtype (an fp32 sum written back once).
void store_rows(DType dt, const float* src, void* dst, int rows, int cols, int ld_dst, cudaStream_t stream);

// y[t, c] += b[c].
void add_bias(DType dt, void* y, const void* b, int T, int C, cudaStream_t stream);
// db[c] += Σ_t dy[t, c], t in order.
void bias_backward(DType dt, const void* dy, float* db, int T, int C, cudaStream_t stream);

// Each of `matrices` row-major [s, s] score matrices (already scaled) becomes
// its causal softmax in place: row i over columns 0..i, zero above.
void causal_softmax(DType dt, void* scores, int s, std::int64_t matrices, cudaStream_t stream);
// dP becomes dS = P ⊙ (dP − rowsum(P ⊙ dP)), zero above the diagonal.
void causal_softmax_backward(DType dt, const void* probs, void* dp, int s, std::int64_t matrices, cudaStream_t stream);

// Flash attention (model.attention = "flash"; kernels_flash.cu): causal
// attention of qkv [B·s, C + 2·kv_heads·d] (q | k | v per row, query head i
// reading K/V head i / (heads / kv_heads)) into out [B·s, C], each row's
// fp32 log-sum-exp into lse [B, heads, s]; d = C / heads at most
// kCudaFlashMaxHeadDim (job.hpp).
void flash_attention_forward(DType dt, const void* qkv, void* out, float* lse, int B, int s, int C, int heads,
                             int kv_heads, cudaStream_t stream);
// dqkv (overwritten, qkv's shape) from dout [B·s, C], the forward's out and lse.
void flash_attention_backward(DType dt, const void* qkv, const void* out, const void* dout, const float* lse, void* dqkv,
                              int B, int s, int C, int heads, int kv_heads, cudaStream_t stream);

// logits[T, V] become softmax probabilities in place; losses[t] (fp32) gets
// −log p[target] computed from the fp32 softmax.
void softmax_crossentropy_forward(DType dt, void* logits, const std::int32_t* targets, float* losses, int T, int V,
                                  cudaStream_t stream);
// probs become (probs − onehot(target))·scale in place. Tensor-parallel:
// `probs` holds vocabulary columns first .. first + V - 1 (a target outside
// them subtracts nothing).
void softmax_crossentropy_backward(DType dt, void* probs, const std::int32_t* targets, int T, int V, float scale,
                                   cudaStream_t stream, int first = 0);

// AdamW / SGD on n parameters with gradients times grad_scale. `master` is
// the fp32 master copy for bf16/fp16 (the update runs on it and p gets its
// rounding); null for fp32, where p is updated in place.
void adamw_update(DType dt, void* p, const float* g, float* master, float* m, float* v, std::int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t, float grad_scale, cudaStream_t stream);
void sgd_update(DType dt, void* p, const float* g, float* master, std::int64_t n, float lr, float grad_scale,
                cudaStream_t stream);

// ---- the llama block (kernels_llama.cu; cpu_kernels.hpp has the same
// functions in fp32, the numerical reference) ----

// Per row: out = x·r·gamma with r = 1/sqrt(mean(x²) + eps), r saved (fp32).
void rmsnorm_forward(DType dt, const void* x, const void* gamma, void* out, float* rrms, int T, int C, float eps,
                     cudaStream_t stream);
// dx += r·(gamma⊙dout) − x·r³·mean(gamma⊙dout⊙x); dgamma += Σ_t dout·x·r
// (column sums in the fixed order of layernorm_backward_weight).
void rmsnorm_backward_input(DType dt, const void* dout, const void* x, const void* gamma, const float* rrms, void* dx,
                            int T, int C, cudaStream_t stream);
void rmsnorm_backward_weight(DType dt, const void* dout, const void* x, const float* rrms, float* dgamma, int T, int C,
                             cudaStream_t stream);
// Rotates in place the first `heads` heads of d columns of each of T rows of
// `ld` elements (row t at position t % s), pairs (2i, 2i+1) by the angle of
// `table` (cpu::rope_table's fp32 layout: cos [s, d/2], then sin [s, d/2],
// on the device); `inverse` rotates back (RoPE's backward).
void rope_apply(DType dt, void* x, const float* table, int T, int s, int heads, int d, int ld, bool inverse,
                cudaStream_t stream);
// pre[T, 2f] = W1·x | W3·x: u[T, f] = silu(W1·x) ⊙ W3·x; its backward writes
// dpre[T, 2f] (overwritten) from du.
void swiglu_forward(DType dt, const void* pre, void* u, int T, int f, cudaStream_t stream);
void swiglu_backward(DType dt, const void* pre, const void* du, void* dpre, int T, int f, cudaStream_t stream);

// ---- tensor parallelism (kernels_tensor.cu; docs/tensor-parallel.md). The
// group's collectives run between them, on fp32 buffers, by the backend. ----

// A rank's fp32 part of the embedding's output: out[b·s + t] = wte[token −
// first] where rows first .. first + rows − 1 hold the token, else 0, plus
// wpe[t] when wpe is given (the lead rank's position table; null: none).
// Summed over the group it is embedding_forward's value.
void embedding_forward_partial(DType dt, const std::int32_t* tokens, const void* wte, const void* wpe, float* out,
                               int T, int s, int C, int first, int rows, cudaStream_t stream);
// y[t, c] = sum[t, c] (+ residual[t, c]) (+ bias[c]) in the storage dtype:
// a row-parallel layer's output, or a column-parallel layer's input
// gradient, after the group's fp32 sum. bias / residual may be null;
// residual may be y.
void sum_to_storage(DType dt, const float* sum, const void* bias, const void* residual, void* y, int T, int C,
                    cudaStream_t stream);
// The cross-entropy over a vocabulary split by columns, the logits never
// gathered (cpu_kernels.hpp vocab_parallel_*). Each rank holds logits[T, V]
// of columns first .. first + V − 1, `valid` of them real (the rest padding):
// 1. row_max[t] = the max of the rank's real columns; the group's max next;
// 2. sum_target[2t] = Σ exp(x − max), sum_target[2t + 1] = the target's
//    x − max where the rank holds it, else 0; the group's sums next;
// 3. logits become probabilities (padding 0), losses[t] = log Σ − (x_target − max).
void vocab_parallel_row_max(DType dt, const void* logits, float* row_max, int T, int V, int valid, cudaStream_t stream);
void vocab_parallel_sums(DType dt, const void* logits, const float* row_max, const std::int32_t* targets, int first,
                         float* sum_target, int T, int V, int valid, cudaStream_t stream);
void vocab_parallel_finish(DType dt, void* logits, const float* row_max, const float* sum_target, float* losses, int T,
                           int V, int valid, cudaStream_t stream);

// partials[k] += Σ x² over a fixed k-th share of the fp32 gradients x,
// k < kSumSquaresSlots, in double; the host sums the slots in order.
inline constexpr int kSumSquaresSlots = 256;
void sum_squares_accumulate(const float* x, std::int64_t n, double* partials, cudaStream_t stream);

}  // namespace pipebench::gpu
