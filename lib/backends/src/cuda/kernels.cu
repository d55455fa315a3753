// Own kernels of the cuda backend (kernels.hpp). One template per kernel over
// the storage type T (float, __nv_bfloat16, __half), fp32 arithmetic inside,
// dispatched on DType at the launcher. Gradients of parameters and the
// LayerNorm statistics are fp32 whatever T is. Deliberately plain: one
// thread per element, one warp per row; column sums (bias and LayerNorm
// parameter gradients) by blocks of 32 columns x 16 row lanes combined in
// lane order; fixed reduction orders, no atomics: bit-repeatable.
#include "kernels.hpp"
#include "kernel_common.cuh"

#include "pipebench/backends/cuda_device.hpp"

#include "pipebench/backends/cuda_check.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "pipebench/core/error.hpp"

namespace pipebench::gpu {

namespace {

using namespace kernel;

constexpr float kLnEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void embedding_forward_k(const std::int32_t* tokens, const T* wte, const T* wpe, T* out, int T_, int s, int C) {
  const std::int64_t n = std::int64_t{T_} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = i / C;
    const int c = static_cast<int>(i % C);
    const float pe = wpe ? to_f(wpe[(t % s) * C + c]) : 0.0f;  // llama: no learned positions
    out[i] = from_f<T>(to_f(wte[std::int64_t{tokens[t]} * C + c]) + pe);
  }
}

// dwpe[p, c] += the rows p, p + s, ... of dout, in order: one thread per
// (position, channel).
template <typename T>
__global__ void position_embedding_backward_k(const T* dout, float* dwpe, int T_, int s, int C) {
  const std::int64_t n = std::int64_t{s} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t pos = i / C, c = i % C;
    float sum = 0.0f;
    for (std::int64_t row = pos; row < T_; row += s) sum += to_f(dout[row * C + c]);
    dwpe[i] += sum;
  }
}

// dwte[token, c] += the rows of dout holding that token, in position order:
// one thread per (segment, channel); segment u is order[seg[u] .. seg[u+1]),
// the positions of token seg_token[u] (distinct tokens, so no two threads
// write one element).
template <typename T>
__global__ void token_embedding_backward_k(const T* dout, const std::int32_t* order, const std::int32_t* seg,
                                           const std::int32_t* seg_token, int segments, float* dwte, int C) {
  const std::int64_t n = std::int64_t{segments} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t u = i / C, c = i % C;
    float sum = 0.0f;
    for (int k = seg[u]; k < seg[u + 1]; ++k) sum += to_f(dout[std::int64_t{order[k]} * C + c]);
    dwte[std::int64_t{seg_token[u]} * C + c] += sum;
  }
}

// One warp per row.
template <typename T>
__global__ void layernorm_forward_k(const T* x, const T* gamma, const T* beta, T* out, float* mean, float* rstd, int T_,
                                    int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= T_) return;
  const T* xr = x + std::int64_t{row} * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_f(xr[c]);
  const float m = warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f(xr[c]) - m;
    var += d * d;
  }
  const float r = rsqrtf(warp_sum(var) / static_cast<float>(C) + kLnEps);
  T* o = out + std::int64_t{row} * C;
  for (int c = lane; c < C; c += 32) o[c] = from_f<T>((to_f(xr[c]) - m) * r * to_f(gamma[c]) + to_f(beta[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx, one warp per row.
template <typename T>
__global__ void layernorm_backward_dx_k(const T* dout, const T* x, const T* gamma, const float* mean, const float* rstd,
                                        T* dx, int T_, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= T_) return;
  const std::int64_t off = std::int64_t{row} * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.0f, b = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f(x[off + c]) - m) * r;
    const float dnorm = to_f(gamma[c]) * to_f(dout[off + c]);
    a += dnorm;
    b += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(a) / static_cast<float>(C), dnorm_norm_mean = warp_sum(b) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f(x[off + c]) - m) * r;
    const float dnorm = to_f(gamma[c]) * to_f(dout[off + c]);
    dx[off + c] = from_f<T>(to_f(dx[off + c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
  }
}

// dgamma, dbeta: column sums (kColTile x kRowLanes blocks, lanes added in order).
template <typename T>
__global__ void layernorm_backward_params_k(const T* dout, const T* x, const float* mean, const float* rstd, float* dgamma,
                                            float* dbeta, int T_, int C) {
  __shared__ float part_g[kRowLanes][kColTile + 1], part_b[kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float dg = 0.0f, db = 0.0f;
  if (c < C)
    for (int t = threadIdx.y; t < T_; t += kRowLanes) {
      const std::int64_t i = std::int64_t{t} * C + c;
      const float d = to_f(dout[i]);
      db += d;
      dg += (to_f(x[i]) - mean[t]) * rstd[t] * d;
    }
  part_g[threadIdx.y][threadIdx.x] = dg;
  part_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float g = 0.0f, b = 0.0f;
  for (int lane = 0; lane < kRowLanes; ++lane) {
    g += part_g[lane][threadIdx.x];
    b += part_b[lane][threadIdx.x];
  }
  dgamma[c] += g;
  dbeta[c] += b;
}

template <typename T>
__global__ void gelu_forward_k(const T* in, T* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const float x = to_f(in[i]);
    out[i] = from_f<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

template <typename T>
__global__ void gelu_backward_k(const T* in, const T* dout, T* din, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const float x = to_f(in[i]);
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = from_f<T>(to_f(dout[i]) * grad);
  }
}

template <typename T>
__global__ void store_rows_k(const float* src, T* dst, int rows, int cols, int ld) {
  const std::int64_t n = std::int64_t{rows} * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    dst[(i / cols) * ld + i % cols] = from_f<T>(src[i]);
}

template <typename T>
__global__ void add_bias_k(T* y, const T* b, int T_, int C) {
  const std::int64_t n = std::int64_t{T_} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = from_f<T>(to_f(y[i]) + to_f(b[i % C]));
}

// db: column sums of dy (kColTile x kRowLanes blocks, lanes added in order).
template <typename T>
__global__ void bias_backward_k(const T* dy, float* db, int T_, int C) {
  column_sum(db, T_, C, [&](int, std::int64_t i) { return to_f(dy[i]); });
}

// One warp per row of the [matrices · s, s] stack.
template <typename T>
__global__ void causal_softmax_k(T* scores, int s, std::int64_t rows) {
  const std::int64_t row = blockIdx.x * std::int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = static_cast<int>(row % s);
  T* r = scores + row * s;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, to_f(r[j]));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += 32) sum += expf(to_f(r[j]) - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < s; j += 32) r[j] = from_f<T>(j <= i ? expf(to_f(r[j]) - mx) * inv : 0.0f);
}

template <typename T>
__global__ void causal_softmax_backward_k(const T* probs, T* dp, int s, std::int64_t rows) {
  const std::int64_t row = blockIdx.x * std::int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = static_cast<int>(row % s);
  const T* p = probs + row * s;
  T* d = dp + row * s;
  float dot = 0.0f;
  for (int j = lane; j <= i; j += 32) dot += to_f(p[j]) * to_f(d[j]);
  dot = warp_sum(dot);
  for (int j = lane; j < s; j += 32) d[j] = from_f<T>(j <= i ? to_f(p[j]) * (to_f(d[j]) - dot) : 0.0f);
}

// One block per token row of V logits.
template <typename T>
__global__ void softmax_crossentropy_forward_k(T* logits, const std::int32_t* targets, float* losses, int V) {
  __shared__ float shared[kThreads / 32];
  T* row = logits + std::int64_t{blockIdx.x} * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, to_f(row[v]));
  mx = block_reduce(mx, [](float a, float b) { return fmaxf(a, b); }, shared);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_f(row[v]) - mx);
  sum = block_reduce(sum, [](float a, float b) { return a + b; }, shared);
  const float inv = 1.0f / sum;
  const int target = targets[blockIdx.x];
  __syncthreads();  // every thread has read row[target] below before it is overwritten
  const float logit_target = to_f(row[target]);
  __syncthreads();
  for (int v = threadIdx.x; v < V; v += blockDim.x) row[v] = from_f<T>(expf(to_f(row[v]) - mx) * inv);
  // Log-sum-exp: -log softmax = log(sum) - (logit - max), exact where the
  // probability itself underflows (no clamp).
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (logit_target - mx);
}

template <typename T>
__global__ void softmax_crossentropy_backward_k(T* probs, const std::int32_t* targets, int V, float scale, int first) {
  T* row = probs + std::int64_t{blockIdx.x} * V;
  const int target = targets[blockIdx.x] - first;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    row[v] = from_f<T>((to_f(row[v]) - (v == target ? 1.0f : 0.0f)) * scale);
}

template <typename T>
__global__ void adamw_k(T* p, const float* g, float* master, float* m, float* v, std::int64_t n, float lr, float beta1,
                        float beta2, float eps, float wd, float c1, float c2, float grad_scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float w = master ? master[i] : to_f(p[i]);
    w -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * w);
    if (master) master[i] = w;
    p[i] = from_f<T>(w);
  }
}

template <typename T>
__global__ void sgd_k(T* p, const float* g, float* master, std::int64_t n, float lr, float grad_scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    float w = master ? master[i] : to_f(p[i]);
    w -= lr * g[i] * grad_scale;
    if (master) master[i] = w;
    p[i] = from_f<T>(w);
  }
}

// Exactly kSumSquaresSlots blocks of kThreads: block k owns partials[k].
__global__ void sum_squares_k(const float* x, std::int64_t n, double* partials) {
  __shared__ double shared[kThreads / 32];
  double s = 0.0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const double xi = x[i];
    s += xi * xi;
  }
  s = block_reduce(s, [](double a, double b) { return a + b; }, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] += s;
}

__global__ void write_through_null_k(int* p) { *p = 1; }

}  // namespace

void check_launch(const char* what) { cuda_check(cudaGetLastError(), "CUDA kernel", what); }

void embedding_forward(DType dt, const std::int32_t* tokens, const void* wte, const void* wpe, void* out, int T_, int s,
                       int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    embedding_forward_k<T><<<blocks_for(std::int64_t{T_} * C), kThreads, 0, st>>>(tokens, as<T>(wte), as<T>(wpe), as<T>(out), T_, s, C);
  });
  check_launch("embedding_forward");
}

void embedding_backward(DType dt, const void* dout, const EmbeddingOrder& order, float* dwte, float* dwpe, int T_, int s,
                        int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    if (dwpe)
      position_embedding_backward_k<T><<<blocks_for(std::int64_t{s} * C), kThreads, 0, st>>>(as<T>(dout), dwpe, T_, s, C);
    token_embedding_backward_k<T><<<blocks_for(std::int64_t{order.segments} * C), kThreads, 0, st>>>(
        as<T>(dout), order.order, order.seg, order.seg_token, order.segments, dwte, C);
  });
  check_launch("embedding_backward");
}

void layernorm_forward(DType dt, const void* x, const void* gamma, const void* beta, void* out, float* mean, float* rstd,
                       int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    layernorm_forward_k<T><<<rows_blocks(T_), kThreads, 0, st>>>(as<T>(x), as<T>(gamma), as<T>(beta), as<T>(out), mean,
                                                                   rstd, T_, C);
  });
  check_launch("layernorm_forward");
}

void layernorm_backward_input(DType dt, const void* dout, const void* x, const void* gamma, const float* mean,
                              const float* rstd, void* dx, int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    layernorm_backward_dx_k<T><<<rows_blocks(T_), kThreads, 0, st>>>(as<T>(dout), as<T>(x), as<T>(gamma), mean, rstd,
                                                                       as<T>(dx), T_, C);
  });
  check_launch("layernorm_backward_input");
}

void layernorm_backward_weight(DType dt, const void* dout, const void* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    layernorm_backward_params_k<T><<<column_blocks(C), dim3(kColTile, kRowLanes), 0, st>>>(
        as<T>(dout), as<T>(x), mean, rstd, dgamma, dbeta, T_, C);
  });
  check_launch("layernorm_backward_weight");
}

void gelu_forward(DType dt, const void* in, void* out, std::int64_t n, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    gelu_forward_k<T><<<blocks_for(n), kThreads, 0, st>>>(as<T>(in), as<T>(out), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(DType dt, const void* in, const void* dout, void* din, std::int64_t n, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    gelu_backward_k<T><<<blocks_for(n), kThreads, 0, st>>>(as<T>(in), as<T>(dout), as<T>(din), n);
  });
  check_launch("gelu_backward");
}

void store_rows(DType dt, const float* src, void* dst, int rows, int cols, int ld_dst, cudaStream_t st) {
  const std::int64_t n = std::int64_t{rows} * cols;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    store_rows_k<T><<<blocks_for(n), kThreads, 0, st>>>(src, as<T>(dst), rows, cols, ld_dst);
  });
  check_launch("store_rows");
}

void add_bias(DType dt, void* y, const void* b, int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    add_bias_k<T><<<blocks_for(std::int64_t{T_} * C), kThreads, 0, st>>>(as<T>(y), as<T>(b), T_, C);
  });
  check_launch("add_bias");
}

void bias_backward(DType dt, const void* dy, float* db, int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    bias_backward_k<T><<<column_blocks(C), dim3(kColTile, kRowLanes), 0, st>>>(as<T>(dy), db, T_, C);
  });
  check_launch("bias_backward");
}

void causal_softmax(DType dt, void* scores, int s, std::int64_t matrices, cudaStream_t st) {
  const std::int64_t rows = matrices * s;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    causal_softmax_k<T><<<rows_blocks(rows), kThreads, 0, st>>>(as<T>(scores), s, rows);
  });
  check_launch("causal_softmax");
}

void causal_softmax_backward(DType dt, const void* probs, void* dp, int s, std::int64_t matrices, cudaStream_t st) {
  const std::int64_t rows = matrices * s;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    causal_softmax_backward_k<T><<<rows_blocks(rows), kThreads, 0, st>>>(as<T>(probs), as<T>(dp), s, rows);
  });
  check_launch("causal_softmax_backward");
}

void softmax_crossentropy_forward(DType dt, void* logits, const std::int32_t* targets, float* losses, int T_, int V,
                                  cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    softmax_crossentropy_forward_k<T><<<static_cast<unsigned>(T_), kThreads, 0, st>>>(as<T>(logits), targets, losses, V);
  });
  check_launch("softmax_crossentropy_forward");
}

void softmax_crossentropy_backward(DType dt, void* probs, const std::int32_t* targets, int T_, int V, float scale,
                                   cudaStream_t st, int first) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    softmax_crossentropy_backward_k<T><<<static_cast<unsigned>(T_), kThreads, 0, st>>>(as<T>(probs), targets, V, scale,
                                                                                       first);
  });
  check_launch("softmax_crossentropy_backward");
}

void adamw_update(DType dt, void* p, const float* g, float* master, float* m, float* v, std::int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t, float grad_scale, cudaStream_t st) {
  // The bias corrections as the cpu backend computes them (fp32 powf).
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    adamw_k<T><<<blocks_for(n), kThreads, 0, st>>>(as<T>(p), g, master, m, v, n, lr, beta1, beta2, eps, wd, c1, c2,
                                                   grad_scale);
  });
  check_launch("adamw_update");
}

void sgd_update(DType dt, void* p, const float* g, float* master, std::int64_t n, float lr, float grad_scale,
                cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    sgd_k<T><<<blocks_for(n), kThreads, 0, st>>>(as<T>(p), g, master, n, lr, grad_scale);
  });
  check_launch("sgd_update");
}

void sum_squares_accumulate(const float* x, std::int64_t n, double* partials, cudaStream_t st) {
  sum_squares_k<<<kSumSquaresSlots, kThreads, 0, st>>>(x, n, partials);
  check_launch("sum_squares");
}

}  // namespace pipebench::gpu

namespace pipebench {

void cuda_break_context_for_test() {
  gpu::write_through_null_k<<<1, 1>>>(nullptr);
  cudaDeviceSynchronize();
}

}  // namespace pipebench
