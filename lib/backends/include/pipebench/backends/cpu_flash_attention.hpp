// Flash attention on the cpu backend (model.attention = "flash";
// docs/model.md "Attention"): FlashAttention-2 (Tri Dao, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", 2023,
// Algorithms 1 and 2) in fp32 with OpenBLAS products. The forward walks
// query tiles of kCpuFlashTile rows against key tiles of kCpuFlashTile keys
// with the online softmax (running row maximum m and sum l, the output
// rescaled as m grows) and keeps, per query row, only the log-sum-exp
// L = m + log l; the backward recomputes each tile's probabilities
// P = exp(S − L) from it and never holds an s x s matrix. Causal masking by
// position: a tile whose keys all follow its queries is skipped, one whose
// keys all precede them runs unmasked, only the diagonal tiles are masked.
//
// The blocks below attend one query head's run of consecutive positions to
// one K/V run (the whole sequence, or with context parallelism one chunk
// of it); flash_attention_forward/backward are the whole-sequence calls
// the blocks run with. Every product and sum runs in a fixed order: the
// results are the same bits run to run.
#pragma once

#include <cstdint>

#include "pipebench/model/model.hpp"

namespace pipebench::cpu {

// `rows` consecutive rows of one head, row r at data + r·ld at sequence
// position pos0 + r (K and V: the same rows of the two).
struct QueryRows {
  const float* q;
  int ld;
  int rows;
  int pos0;
};
struct KeyRows {
  const float* k;
  const float* v;
  int ld;
  int rows;
  int pos0;
};

// The blocks' `scratch`: kCpuFlashScratchFloats (model.hpp), two tiles and two row vectors.

// out (rows x d, stride ldo) = softmax(scale·q·kᵀ, causal) · v over the
// block, normalised; lse[r] its log-sum-exp (−inf for a row that sees no
// key, whose output is 0).
void flash_forward_block(QueryRows q, KeyRows kv, int d, float scale, float* out, int ldo, float* lse, float* scratch);

// The block's gradients added to dq (stride ldq) and dk/dv (stride ldkv),
// from the attention's final output `out` and its gradient `dout` (both
// stride ldo) and its final log-sum-exp: dv += Pᵀ·dO, dP = dO·vᵀ,
// dS = P ⊙ (dP − rowsum(dO ⊙ O)), dq += scale·dS·k, dk += scale·dSᵀ·q.
void flash_backward_block(QueryRows q, KeyRows kv, int d, float scale, const float* out, const float* dout, int ldo,
                          const float* lse, float* dq, int ldq, float* dk, float* dv, int ldkv, float* scratch);

// Causal self-attention of whole sequences, laid out as attention_forward's
// (cpu_kernels.hpp): qkv[T, C + 2·kv_heads·d], out[T, C], T = B·s;
// lse[B, heads, s] in place of the probabilities.
void flash_attention_forward(const float* qkv, float* out, float* lse, float* scratch, int B, int s, int C, int heads,
                             int kv_heads = 0);
// dqkv (overwritten) from dout[T, C]; a K/V head's gradients sum its query heads' in head order.
void flash_attention_backward(const float* dout, const float* qkv, const float* out, const float* lse, float* dqkv,
                              float* scratch, int B, int s, int C, int heads, int kv_heads = 0);

}  // namespace pipebench::cpu
