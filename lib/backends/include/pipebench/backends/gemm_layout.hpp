// The GEMMs of the cuda backend as data, without CUDA: the row-major
// products the model needs (linear layers, attention per sequence over all
// heads), and their translation into cuBLAS's column-major arguments. The
// backend executes exactly these descriptions; the unit tests execute them
// with column-major CBLAS on the CPU and compare with the cpu backend's
// kernels, so the argument lists are checked on machines without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

namespace pipebench::gemm {

// Row-major C[M,N] = alpha·op(A)·op(B) + beta·C for `batch` matrices, A/B/C
// advancing by sA/sB/sC elements; lda/ldb/ldc are the stored row lengths.
// op(A) is [M,K] (A stored [K,M] when ta), op(B) is [K,N] (B stored [N,K] when tb).
struct RowMajor {
  bool ta = false, tb = false;
  int M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  int lda = 0, ldb = 0;
  float beta = 0.0f;
  int ldc = 0;
  int batch = 1;
  std::int64_t sA = 0, sB = 0, sC = 0;
};

// cuBLAS (column-major) arguments computing the same product: Cᵀ = op(B)ᵀ·op(A)ᵀ,
// so cuBLAS's first matrix is B and its second is A.
struct ColumnMajor {
  bool trans_first = false, trans_second = false;  // transa, transb of cublasGemm*
  int m = 0, n = 0, k = 0;
  int ld_first = 0, ld_second = 0, ldc = 0;        // of B, of A, of C
  std::int64_t stride_first = 0, stride_second = 0, stride_c = 0;
  int batch = 1;
  float alpha = 1.0f, beta = 0.0f;
};

inline ColumnMajor to_column_major(const RowMajor& g) {
  ColumnMajor c;
  c.trans_first = g.tb;
  c.trans_second = g.ta;
  c.m = g.N;
  c.n = g.M;
  c.k = g.K;
  c.ld_first = g.ldb;
  c.ld_second = g.lda;
  c.ldc = g.ldc;
  c.stride_first = g.sB;
  c.stride_second = g.sA;
  c.stride_c = g.sC;
  c.batch = g.batch;
  c.alpha = g.alpha;
  c.beta = g.beta;
  return c;
}

// Linear layers, weights [in, out] (cpu_kernels.hpp): y[T,out] (+)= x·W,
// dW[in,out] += xᵀ·dy, dx[T,in] (+)= dy·Wᵀ.
inline RowMajor linear_forward(int T, int in, int out, bool accumulate) {
  return {false, false, T, out, in, 1.0f, in, out, accumulate ? 1.0f : 0.0f, out};
}
inline RowMajor linear_weight_grad(int T, int in, int out) { return {true, false, in, out, T, 1.0f, in, out, 1.0f, out}; }
inline RowMajor linear_input_grad(int T, int in, int out, bool accumulate) {
  return {false, true, T, in, out, 1.0f, out, out, accumulate ? 1.0f : 0.0f, in};
}

// Causal self-attention of one sequence of s tokens, all `heads` heads of
// d = h/heads channels at once (batch = heads). Operands, as element
// offsets from the sequence's start: q = qkv, k = qkv + h, v = qkv + 2h
// (row length 3h); probabilities P and the scratch dP are [heads, s, s];
// out and dout are [s, h] (head i at column i·d).
struct Attention {
  int s, d, heads, h;
  Attention(int seq, int hidden, int num_heads) : s(seq), d(hidden / num_heads), heads(num_heads), h(hidden) {}
  std::int64_t ss() const { return std::int64_t{s} * s; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }  // as cpu_kernels computes it

  // P = scale·Q·Kᵀ (before the causal softmax).
  RowMajor scores() const { return {false, true, s, s, d, scale(), 3 * h, 3 * h, 0.0f, s, heads, d, d, ss()}; }
  // out = P·V.
  RowMajor values() const { return {false, false, s, d, s, 1.0f, s, 3 * h, 0.0f, h, heads, ss(), d, d}; }
  // dV = Pᵀ·dout.
  RowMajor dv() const { return {true, false, s, d, s, 1.0f, s, h, 0.0f, 3 * h, heads, ss(), d, d}; }
  // dP = dout·Vᵀ.
  RowMajor dp() const { return {false, true, s, s, d, 1.0f, h, 3 * h, 0.0f, s, heads, d, d, ss()}; }
  // dQ = scale·dS·K.
  RowMajor dq() const { return {false, false, s, d, s, scale(), s, 3 * h, 0.0f, 3 * h, heads, ss(), d, d}; }
  // dK = scale·dSᵀ·Q.
  RowMajor dk() const { return {true, false, s, d, s, scale(), s, 3 * h, 0.0f, 3 * h, heads, ss(), d, d}; }
};

// Grouped-query attention of one sequence (the llama block; cpu_kernels.hpp
// attention_forward with kv_heads): qkv rows of ld = h + 2·kv_heads·d
// elements, q at column 0 (query head i at i·d), k at h, v at h + kv_heads·d
// (K/V head g at g·d); the query heads g·group .. g·group + group − 1 read
// K/V head g. The products are batched over one group's query heads with the
// K/V operand broadcast (stride 0); the K/V gradients, a sum over the group's
// query heads, are one product per query head, beta 1 after the group's first
// (in head order, as the cpu kernels sum them). Element offsets of a group's
// operands are the caller's: q_offset(), k_offset(), v_offset().
struct GroupedAttention {
  int s, d, heads, kv_heads, h, group, ld;
  GroupedAttention(int seq, int hidden, int num_heads, int num_kv_heads)
      : s(seq), d(hidden / num_heads), heads(num_heads), kv_heads(num_kv_heads), h(hidden),
        group(num_heads / num_kv_heads), ld(hidden + 2 * num_kv_heads * (hidden / num_heads)) {}
  std::int64_t ss() const { return std::int64_t{s} * s; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
  std::int64_t q_offset(int head) const { return std::int64_t{head} * d; }
  std::int64_t k_offset(int kv_head) const { return h + std::int64_t{kv_head} * d; }
  std::int64_t v_offset(int kv_head) const { return h + std::int64_t{kv_heads} * d + std::int64_t{kv_head} * d; }

  // Per group: P_i = scale·Q_i·K_gᵀ for its query heads i (P of the group's first head, [group, s, s]).
  RowMajor scores() const { return {false, true, s, s, d, scale(), ld, ld, 0.0f, s, group, d, 0, ss()}; }
  // Per group: out_i = P_i·V_g (out at the group's first head's column, row length h).
  RowMajor values() const { return {false, false, s, d, s, 1.0f, s, ld, 0.0f, h, group, ss(), 0, d}; }
  // Per group: dP_i = dout_i·V_gᵀ.
  RowMajor dp() const { return {false, true, s, s, d, 1.0f, h, ld, 0.0f, s, group, d, 0, ss()}; }
  // Per group: dQ_i = scale·dS_i·K_g.
  RowMajor dq() const { return {false, false, s, d, s, scale(), s, ld, 0.0f, ld, group, ss(), 0, d}; }
  // Per query head i of group g: dV_g (+)= P_iᵀ·dout_i, dK_g (+)= scale·dS_iᵀ·Q_i,
  // into the storage dtype at the group's K/V columns (row length ld) — or,
  // summed over a group of several heads, into fp32 [s, d] (`fp32_sum`: row
  // length d, the cuda backend's gqa_grad_sums), written back once.
  RowMajor dv(bool first_of_group, bool fp32_sum = false) const {
    return {true, false, s, d, s, 1.0f, s, h, first_of_group ? 0.0f : 1.0f, fp32_sum ? d : ld};
  }
  RowMajor dk(bool first_of_group, bool fp32_sum = false) const {
    return {true, false, s, d, s, scale(), s, ld, first_of_group ? 0.0f : 1.0f, fp32_sum ? d : ld};
  }
};

}  // namespace pipebench::gemm
