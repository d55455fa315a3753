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

// out[b·s + t] = wte[tokens[b·s + t]] + wpe[t]; channels C.
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
// channels, no atomics).
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

// y[t, c] += b[c].
void add_bias(DType dt, void* y, const void* b, int T, int C, cudaStream_t stream);
// db[c] += Σ_t dy[t, c], t in order.
void bias_backward(DType dt, const void* dy, float* db, int T, int C, cudaStream_t stream);

// Each of `matrices` row-major [s, s] score matrices (already scaled) becomes
// its causal softmax in place: row i over columns 0..i, zero above.
void causal_softmax(DType dt, void* scores, int s, std::int64_t matrices, cudaStream_t stream);
// dP becomes dS = P ⊙ (dP − rowsum(P ⊙ dP)), zero above the diagonal.
void causal_softmax_backward(DType dt, const void* probs, void* dp, int s, std::int64_t matrices, cudaStream_t stream);

// logits[T, V] become softmax probabilities in place; losses[t] (fp32) gets
// −log p[target] computed from the fp32 softmax.
void softmax_crossentropy_forward(DType dt, void* logits, const std::int32_t* targets, float* losses, int T, int V,
                                  cudaStream_t stream);
// probs become (probs − onehot(target))·scale in place.
void softmax_crossentropy_backward(DType dt, void* probs, const std::int32_t* targets, int T, int V, float scale,
                                   cudaStream_t stream);

// AdamW / SGD on n parameters with gradients times grad_scale. `master` is
// the fp32 master copy for bf16/fp16 (the update runs on it and p gets its
// rounding); null for fp32, where p is updated in place.
void adamw_update(DType dt, void* p, const float* g, float* master, float* m, float* v, std::int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t, float grad_scale, cudaStream_t stream);
void sgd_update(DType dt, void* p, const float* g, float* master, std::int64_t n, float lr, float grad_scale,
                cudaStream_t stream);

// partials[k] += Σ x² over a fixed k-th share of the fp32 gradients x,
// k < kSumSquaresSlots, in double; the host sums the slots in order.
inline constexpr int kSumSquaresSlots = 256;
void sum_squares_accumulate(const float* x, std::int64_t n, double* partials, cudaStream_t stream);

}  // namespace pipebench::gpu
