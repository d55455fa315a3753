// Flash attention on the GPU (model.attention = "flash"; kernels.hpp):
// FlashAttention-2's arithmetic (Tri Dao 2023, arXiv 2307.08691,
// Algorithms 1 and 2) in a plain form — one thread per query row (forward,
// dQ) or key row (dK, dV), the other side's rows staged through shared
// memory kFlashTile at a time, every sum in fp32 and in a fixed order (no
// atomics: a run repeats bit for bit). The forward keeps each row's running
// maximum and sum (the online softmax) and writes the normalised output and
// the row's log-sum-exp; the backward recomputes P = exp(S − L) from it and
// never holds an s x s matrix. Causal: a row reads the keys at or before it
// (a key row the queries at or after it). Not tuned for speed: written to be
// right first (tools/gpu-check.sh times it against PyTorch's SDPA).
#include "kernel_common.cuh"
#include "kernels.hpp"

namespace pipebench::gpu {

namespace {

using namespace kernel;

// Rows a block stages (and threads it runs: one row each), and the widest head.
constexpr int kFlashTile = 32;
constexpr int kFlashMaxHeadDim = kCudaFlashMaxHeadDim;

// qkv [B·s, ld]: per row q (heads·d) | k (kv_heads·d) | v (kv_heads·d).
struct Shape {
  int s, C, heads, kv_heads, d, ld;
  float scale;
  __device__ std::int64_t row(int b, int i) const { return static_cast<std::int64_t>(b) * s + i; }
  __device__ int k_col(int kv_head) const { return C + kv_head * d; }
  __device__ int v_col(int kv_head) const { return C + (kv_heads + kv_head) * d; }
};

// Rows j0 .. j0 + kFlashTile − 1 of columns [col, col + d) into tile[r][c] (0 past s).
template <typename T>
__device__ void stage(float (*tile)[kFlashMaxHeadDim], const T* rows, int ld, int col, int j0, const Shape& z, int b) {
  for (int idx = threadIdx.x; idx < kFlashTile * z.d; idx += blockDim.x) {
    const int r = idx / z.d, c = idx % z.d, j = j0 + r;
    tile[r][c] = j < z.s ? to_f(rows[z.row(b, j) * ld + col + c]) : 0.0f;
  }
}

// Grid (query tiles, heads, B); thread x: query row i.
template <typename T>
__global__ void flash_forward_k(const T* qkv, T* out, float* lse, Shape z) {
  __shared__ float ks[kFlashTile][kFlashMaxHeadDim], vs[kFlashTile][kFlashMaxHeadDim];
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kFlashTile, i = i0 + threadIdx.x;
  const int kvh = h / (z.heads / z.kv_heads), d = z.d;
  const bool row = i < z.s;
  float q[kFlashMaxHeadDim], o[kFlashMaxHeadDim];
  for (int c = 0; c < d; ++c) {
    q[c] = row ? to_f(qkv[z.row(b, i) * z.ld + h * d + c]) * z.scale : 0.0f;
    o[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(i0 + kFlashTile, z.s) - 1;  // the block's last query: no key past it is read
  for (int j0 = 0; j0 <= last; j0 += kFlashTile) {
    __syncthreads();  // the previous tile is read by every thread
    stage(ks, qkv, z.ld, z.k_col(kvh), j0, z, b);
    stage(vs, qkv, z.ld, z.v_col(kvh), j0, z, b);
    __syncthreads();
    const int keys = row ? min(kFlashTile, i - j0 + 1) : 0;
    for (int jj = 0; jj < keys; ++jj) {
      float score = 0.0f;
      for (int c = 0; c < d; ++c) score += q[c] * ks[jj][c];
      const float m_new = fmaxf(m, score);
      const float alpha = expf(m - m_new), p = expf(score - m_new);  // m = −inf before the first key: alpha 0
      l = l * alpha + p;
      for (int c = 0; c < d; ++c) o[c] = o[c] * alpha + p * vs[jj][c];
      m = m_new;
    }
  }
  if (!row) return;
  const float inv = 1.0f / l;
  T* dst = out + z.row(b, i) * z.C + h * d;
  for (int c = 0; c < d; ++c) dst[c] = from_f<T>(o[c] * inv);
  lse[(static_cast<std::int64_t>(b) * z.heads + h) * z.s + i] = m + logf(l);
}

// dQ. Grid (query tiles, heads, B); thread x: query row i:
// dq = scale · Σ_j P_ij (dO_i·v_j − D_i) k_j, D_i = dO_i·O_i.
template <typename T>
__global__ void flash_backward_dq_k(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv, Shape z) {
  __shared__ float ks[kFlashTile][kFlashMaxHeadDim], vs[kFlashTile][kFlashMaxHeadDim];
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kFlashTile, i = i0 + threadIdx.x;
  const int kvh = h / (z.heads / z.kv_heads), d = z.d;
  const bool row = i < z.s;
  float q[kFlashMaxHeadDim], g[kFlashMaxHeadDim], dq[kFlashMaxHeadDim];
  float D = 0.0f;
  for (int c = 0; c < d; ++c) {
    q[c] = row ? to_f(qkv[z.row(b, i) * z.ld + h * d + c]) : 0.0f;
    g[c] = row ? to_f(dout[z.row(b, i) * z.C + h * d + c]) : 0.0f;
    if (row) D += g[c] * to_f(out[z.row(b, i) * z.C + h * d + c]);
    dq[c] = 0.0f;
  }
  const float L = row ? lse[(static_cast<std::int64_t>(b) * z.heads + h) * z.s + i] : 0.0f;
  const int last = min(i0 + kFlashTile, z.s) - 1;
  for (int j0 = 0; j0 <= last; j0 += kFlashTile) {
    __syncthreads();
    stage(ks, qkv, z.ld, z.k_col(kvh), j0, z, b);
    stage(vs, qkv, z.ld, z.v_col(kvh), j0, z, b);
    __syncthreads();
    const int keys = row ? min(kFlashTile, i - j0 + 1) : 0;
    for (int jj = 0; jj < keys; ++jj) {
      float score = 0.0f, dp = 0.0f;
      for (int c = 0; c < d; ++c) {
        score += q[c] * ks[jj][c];
        dp += g[c] * vs[jj][c];
      }
      const float ds = expf(score * z.scale - L) * (dp - D);
      for (int c = 0; c < d; ++c) dq[c] += ds * ks[jj][c];
    }
  }
  if (!row) return;
  T* dst = dqkv + z.row(b, i) * z.ld + h * d;
  for (int c = 0; c < d; ++c) dst[c] = from_f<T>(dq[c] * z.scale);
}

// dK and dV of one K/V head. Grid (key tiles, kv_heads, B); thread x: key
// row j, summing over its group's query heads in head order and over the
// queries at or after it: dv = Σ P_ij dO_i, dk = scale · Σ P_ij (dO_i·v_j − D_i) q_i.
template <typename T>
__global__ void flash_backward_dkv_k(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv, Shape z) {
  __shared__ float qs[kFlashTile][kFlashMaxHeadDim], gs[kFlashTile][kFlashMaxHeadDim];
  __shared__ float Ds[kFlashTile], Ls[kFlashTile];
  const int b = blockIdx.z, kvh = blockIdx.y, j0 = blockIdx.x * kFlashTile, j = j0 + threadIdx.x;
  const int group = z.heads / z.kv_heads, d = z.d;
  const bool row = j < z.s;
  float k[kFlashMaxHeadDim], v[kFlashMaxHeadDim], dk[kFlashMaxHeadDim], dv[kFlashMaxHeadDim];
  for (int c = 0; c < d; ++c) {
    k[c] = row ? to_f(qkv[z.row(b, j) * z.ld + z.k_col(kvh) + c]) : 0.0f;
    v[c] = row ? to_f(qkv[z.row(b, j) * z.ld + z.v_col(kvh) + c]) : 0.0f;
    dk[c] = dv[c] = 0.0f;
  }
  for (int h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int i0 = j0; i0 < z.s; i0 += kFlashTile) {  // the queries at or after the block's first key
      __syncthreads();
      {  // thread r stages query row i0 + r: q, dO, D = dO·O, L
        const int r = threadIdx.x, i = i0 + r;
        float D = 0.0f;
        for (int c = 0; c < d; ++c) {
          const bool in = i < z.s;
          qs[r][c] = in ? to_f(qkv[z.row(b, i) * z.ld + h * d + c]) : 0.0f;
          gs[r][c] = in ? to_f(dout[z.row(b, i) * z.C + h * d + c]) : 0.0f;
          if (in) D += gs[r][c] * to_f(out[z.row(b, i) * z.C + h * d + c]);
        }
        Ds[r] = D;
        Ls[r] = i < z.s ? lse[(static_cast<std::int64_t>(b) * z.heads + h) * z.s + i] : 0.0f;
      }
      __syncthreads();
      if (!row) continue;
      for (int r = 0; r < kFlashTile; ++r) {
        const int i = i0 + r;
        if (i < j || i >= z.s) continue;
        float score = 0.0f, dp = 0.0f;
        for (int c = 0; c < d; ++c) {
          score += qs[r][c] * k[c];
          dp += gs[r][c] * v[c];
        }
        const float p = expf(score * z.scale - Ls[r]), ds = p * (dp - Ds[r]);
        for (int c = 0; c < d; ++c) {
          dv[c] += p * gs[r][c];
          dk[c] += ds * qs[r][c];
        }
      }
    }
  if (!row) return;
  T* dst = dqkv + z.row(b, j) * z.ld;
  for (int c = 0; c < d; ++c) {
    dst[z.k_col(kvh) + c] = from_f<T>(dk[c] * z.scale);
    dst[z.v_col(kvh) + c] = from_f<T>(dv[c]);
  }
}

Shape shape_of(int s, int C, int heads, int kv_heads) {
  const int d = C / heads;
  return {s, C, heads, kv_heads, d, C + 2 * kv_heads * d, 1.0f / sqrtf(static_cast<float>(d))};
}

}  // namespace

void flash_attention_forward(DType dt, const void* qkv, void* out, float* lse, int B, int s, int C, int heads,
                             int kv_heads, cudaStream_t st) {
  const Shape z = shape_of(s, C, heads, kv_heads);
  const dim3 grid((s + kFlashTile - 1) / kFlashTile, heads, B);
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    flash_forward_k<T><<<grid, kFlashTile, 0, st>>>(as<T>(qkv), as<T>(out), lse, z);
  });
  check_launch("flash_attention_forward");
}

void flash_attention_backward(DType dt, const void* qkv, const void* out, const void* dout, const float* lse, void* dqkv,
                              int B, int s, int C, int heads, int kv_heads, cudaStream_t st) {
  const Shape z = shape_of(s, C, heads, kv_heads);
  const unsigned tiles = static_cast<unsigned>((s + kFlashTile - 1) / kFlashTile);
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    flash_backward_dq_k<T><<<dim3(tiles, heads, B), kFlashTile, 0, st>>>(as<T>(qkv), as<T>(out), as<T>(dout), lse,
                                                                       as<T>(dqkv), z);
    flash_backward_dkv_k<T><<<dim3(tiles, kv_heads, B), kFlashTile, 0, st>>>(as<T>(qkv), as<T>(out), as<T>(dout), lse,
                                                                           as<T>(dqkv), z);
  });
  check_launch("flash_attention_backward");
}

}  // namespace pipebench::gpu
