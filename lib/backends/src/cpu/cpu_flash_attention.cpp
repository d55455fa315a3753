#include "pipebench/backends/cpu_flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <cblas.h>

#include "pipebench/backends/cpu_simd.hpp"

namespace pipebench::cpu {

namespace {

constexpr int kTile = kCpuFlashTile;
constexpr float kNoKey = -std::numeric_limits<float>::infinity();

// How many of a tile's keys (first at position k0, `cols` of them) the
// query at position q sees under the causal mask: those at positions <= q.
int visible_keys(int q, int k0, int cols) { return std::clamp(q - k0 + 1, 0, cols); }

// S = scale · q[i0, i0 + rows) · k[j0, j0 + cols)ᵀ into s (stride kTile).
void tile_scores(QueryRows q, KeyRows kv, int d, float scale, int i0, int rows, int j0, int cols, float* s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, scale, q.q + static_cast<std::int64_t>(i0) * q.ld,
              q.ld, kv.k + static_cast<std::int64_t>(j0) * kv.ld, kv.ld, 0.0f, s, kTile);
}

// The first key tile past the last one query tile [i0, i1) sees (the tiles
// from there on lie wholly above the diagonal).
int key_tiles_end(QueryRows q, KeyRows kv, int i1) {
  return std::clamp(q.pos0 + i1 - kv.pos0, 0, kv.rows);
}

}  // namespace

void flash_forward_block(QueryRows q, KeyRows kv, int d, float scale, float* out, int ldo, float* lse, float* scratch) {
  const SimdKernels& kernels = simd_kernels();
  float* S = scratch;  // scores, then the tile's unnormalised probabilities
  float* m = scratch + 2 * kTile * kTile;
  float* l = m + kTile;
  for (int i0 = 0; i0 < q.rows; i0 += kTile) {
    const int rows = std::min(kTile, q.rows - i0);
    std::fill(m, m + rows, kNoKey);
    std::fill(l, l + rows, 0.0f);
    for (int r = 0; r < rows; ++r) std::fill_n(out + static_cast<std::int64_t>(i0 + r) * ldo, d, 0.0f);
    const int keys = key_tiles_end(q, kv, i0 + rows);
    for (int j0 = 0; j0 < keys; j0 += kTile) {
      const int cols = std::min(kTile, keys - j0);
      tile_scores(q, kv, d, scale, i0, rows, j0, cols, S);
      for (int r = 0; r < rows; ++r) {
        float* srow = S + static_cast<std::int64_t>(r) * kTile;
        const int seen = visible_keys(q.pos0 + i0 + r, kv.pos0 + j0, cols);
        if (seen == 0) {  // this row's keys all follow it: nothing to add
          std::fill(srow, srow + cols, 0.0f);
          continue;
        }
        float mx = m[r];
        for (int j = 0; j < seen; ++j) mx = std::max(mx, srow[j]);
        const float sum = kernels.exp_shifted_row(srow, seen, mx);
        std::fill(srow + seen, srow + cols, 0.0f);
        // The row's earlier tiles were summed against the old maximum: rescale them.
        const float alpha = std::exp(m[r] - mx);  // m = −inf before the first key: 0
        l[r] = alpha * l[r] + sum;
        m[r] = mx;
        if (alpha != 1.0f) {
          float* o = out + static_cast<std::int64_t>(i0 + r) * ldo;
          for (int c = 0; c < d; ++c) o[c] *= alpha;
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0f, S, kTile,
                  kv.v + static_cast<std::int64_t>(j0) * kv.ld, kv.ld, 1.0f, out + static_cast<std::int64_t>(i0) * ldo,
                  ldo);
    }
    for (int r = 0; r < rows; ++r) {
      float* o = out + static_cast<std::int64_t>(i0 + r) * ldo;
      if (l[r] == 0.0f) {
        lse[i0 + r] = kNoKey;
        continue;
      }
      const float inv = 1.0f / l[r];
      for (int c = 0; c < d; ++c) o[c] *= inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

void flash_backward_block(QueryRows q, KeyRows kv, int d, float scale, const float* out, const float* dout, int ldo,
                          const float* lse, float* dq, int ldq, float* dk, float* dv, int ldkv, float* scratch) {
  const SimdKernels& kernels = simd_kernels();
  float* P = scratch;
  float* dS = scratch + kTile * kTile;
  float* delta = dS + kTile * kTile;
  for (int i0 = 0; i0 < q.rows; i0 += kTile) {
    const int rows = std::min(kTile, q.rows - i0);
    const std::int64_t qo = static_cast<std::int64_t>(i0) * ldo;
    // rowsum(dO ⊙ O): the softmax backward's dot of each row, from the output instead of P.
    for (int r = 0; r < rows; ++r) {
      const float* o = out + qo + static_cast<std::int64_t>(r) * ldo;
      const float* g = dout + qo + static_cast<std::int64_t>(r) * ldo;
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += o[c] * g[c];
      delta[r] = dot;
    }
    const int keys = key_tiles_end(q, kv, i0 + rows);
    for (int j0 = 0; j0 < keys; j0 += kTile) {
      const int cols = std::min(kTile, keys - j0);
      tile_scores(q, kv, d, scale, i0, rows, j0, cols, P);
      for (int r = 0; r < rows; ++r) {
        float* prow = P + static_cast<std::int64_t>(r) * kTile;
        const float L = lse[i0 + r];
        const int seen = L == kNoKey ? 0 : visible_keys(q.pos0 + i0 + r, kv.pos0 + j0, cols);
        kernels.exp_shifted_row(prow, seen, L);
        std::fill(prow + seen, prow + cols, 0.0f);
      }
      const std::int64_t ko = static_cast<std::int64_t>(j0) * ldkv;
      // dv += Pᵀ·dO, dP = dO·vᵀ.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, 1.0f, P, kTile, dout + qo, ldo, 1.0f, dv + ko,
                  ldkv);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0f, dout + qo, ldo,
                  kv.v + static_cast<std::int64_t>(j0) * kv.ld, kv.ld, 0.0f, dS, kTile);
      for (int r = 0; r < rows; ++r) {
        const float* prow = P + static_cast<std::int64_t>(r) * kTile;
        float* srow = dS + static_cast<std::int64_t>(r) * kTile;
        for (int j = 0; j < cols; ++j) srow[j] = prow[j] * (srow[j] - delta[r]);
      }
      // dq += scale·dS·k, dk += scale·dSᵀ·q.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, scale, dS, kTile,
                  kv.k + static_cast<std::int64_t>(j0) * kv.ld, kv.ld, 1.0f, dq + static_cast<std::int64_t>(i0) * ldq,
                  ldq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, scale, dS, kTile,
                  q.q + static_cast<std::int64_t>(i0) * q.ld, q.ld, 1.0f, dk + ko, ldkv);
    }
  }
}

namespace {

// Head h of sequence b inside qkv (attention_forward's layout).
struct HeadView {
  std::int64_t row0, q, k, v;  // float offsets: the sequence's first row, then the columns
  int ld, d;
  HeadView(int b, int h, int s, int C, int heads, int kv_heads) {
    d = C / heads;
    const int group = heads / kv_heads;
    ld = C + 2 * kv_heads * d;
    row0 = static_cast<std::int64_t>(b) * s * ld;
    q = h * d;
    k = C + static_cast<std::int64_t>(h / group) * d;
    v = k + static_cast<std::int64_t>(kv_heads) * d;
  }
};

}  // namespace

void flash_attention_forward(const float* qkv, float* out, float* lse, float* scratch, int B, int s, int C, int heads,
                             int kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const HeadView hv(b, h, s, C, heads, kv_heads);
      const float* base = qkv + hv.row0;
      const float scale = 1.0f / std::sqrt(static_cast<float>(hv.d));
      flash_forward_block({base + hv.q, hv.ld, s, 0}, {base + hv.k, base + hv.v, hv.ld, s, 0}, hv.d, scale,
                          out + static_cast<std::int64_t>(b) * s * C + static_cast<std::int64_t>(h) * hv.d, C,
                          lse + (static_cast<std::int64_t>(b) * heads + h) * s, scratch);
    }
}

void flash_attention_backward(const float* dout, const float* qkv, const float* out, const float* lse, float* dqkv,
                              float* scratch, int B, int s, int C, int heads, int kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  const int ld = C + 2 * kv_heads * (C / heads);
  std::memset(dqkv, 0, sizeof(float) * static_cast<std::size_t>(B) * static_cast<std::size_t>(s) * ld);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const HeadView hv(b, h, s, C, heads, kv_heads);
      const float* base = qkv + hv.row0;
      float* dbase = dqkv + hv.row0;
      const std::int64_t o = static_cast<std::int64_t>(b) * s * C + static_cast<std::int64_t>(h) * hv.d;
      const float scale = 1.0f / std::sqrt(static_cast<float>(hv.d));
      flash_backward_block({base + hv.q, hv.ld, s, 0}, {base + hv.k, base + hv.v, hv.ld, s, 0}, hv.d, scale, out + o,
                           dout + o, C, lse + (static_cast<std::int64_t>(b) * heads + h) * s, dbase + hv.q, hv.ld,
                           dbase + hv.k, dbase + hv.v, hv.ld, scratch);
    }
}

}  // namespace pipebench::cpu
