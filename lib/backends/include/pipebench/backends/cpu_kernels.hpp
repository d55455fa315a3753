// fp32 CPU kernels of the `cpu` backend: forward and backward of every layer
// of the model description (docs/model.md). GEMMs go to OpenBLAS
// (cblas_sgemm); the rest are plain loops over contiguous row-major buffers,
// no allocation inside. Shapes use T = tokens (B·s), C = channels.
//
// Conventions: parameter-gradient outputs (dW, db, dgamma, ...) ACCUMULATE
// (+=), so micro-batches add up in the order they are run; input-gradient
// outputs (dx, ...) are overwritten unless a function says otherwise.
// Weights of a linear layer are [in, out]: y = x·W + b.
#pragma once

#include <cstdint>

namespace pipebench::cpu {

// Threads OpenBLAS may use in this process.
void set_blas_threads(int threads);
// OpenBLAS's build description ("OpenBLAS 0.3.21 ... Haswell MAX_THREADS=64").
const char* blas_config();
// The OpenBLAS kernels to ask for (OPENBLAS_CORETYPE) when the ones it chose
// are older than this CPU: Debian 12's OpenBLAS 0.3.21 does not know CPUs
// newer than it (Sapphire Rapids, ...) and falls back to its Prescott (SSE3)
// kernels, 3.7x slower on the default job here. "SkylakeX" with AVX-512
// (F, BW, DQ, VL), "Haswell" with AVX2 and FMA; "" when OpenBLAS chose
// anything but Prescott, or the CPU has neither.
const char* better_blas_core();

// y[T,out] = x[T,in]·W[in,out] + b[out]. With accumulate, y += instead of y =.
void linear_forward(const float* x, const float* W, const float* b, float* y, int T, int in, int out,
                    bool accumulate = false);
// pre[T,n] = x·W + b and out = gelu(pre) (fc1 and its GELU): the bias and the
// GELU in one pass over the rows; the bits of linear_forward then gelu_forward.
void linear_gelu_forward(const float* x, const float* W, const float* b, float* pre, float* out, int T, int in, int n);
// dW += xᵀ·dy, db += Σ_t dy; dx = dy·Wᵀ (dx may be null; with accumulate_dx, dx +=).
// It is exactly linear_backward_weight then linear_backward_input: a split
// backward (B now, W later) computes the same bits.
void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, int T, int in,
                     int out, bool accumulate_dx = false);
// The weight part: dW += xᵀ·dy, db += Σ_t dy (db may be null).
void linear_backward_weight(const float* x, const float* dy, float* dW, float* db, int T, int in, int out);
// The input part: dx = dy·Wᵀ (with accumulate_dx, dx +=).
void linear_backward_input(const float* W, const float* dy, float* dx, int T, int in, int out, bool accumulate_dx = false);

// out = (x - mean)·rstd·gamma + beta per row; saves mean and rstd per row.
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* out, float* mean, float* rstd,
                       int T, int C);
// dx += ..., dgamma += ..., dbeta += ... (dx accumulates: LayerNorms sit on residual branches).
// Exactly layernorm_backward_weight then layernorm_backward_input.
void layernorm_backward(const float* dout, const float* x, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* dgamma, float* dbeta, int T, int C);
void layernorm_backward_weight(const float* dout, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int T, int C);
void layernorm_backward_input(const float* dout, const float* x, const float* gamma, const float* mean,
                              const float* rstd, float* dx, int T, int C);

// GELU, tanh approximation.
void gelu_forward(const float* in, float* out, std::int64_t n);
// din = dout · gelu'(in)  (din may alias dout).
void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n);

// Causal self-attention over qkv[T, C + 2·kv_heads·d] (q | k | v, heads of
// d = C/heads contiguous inside each), T = B·s; grouped-query attention when
// kv_heads < heads (0: heads, full multi-head attention, qkv[T, 3C]): query
// head i reads K/V head i / (heads / kv_heads). probs[B, heads, s, s] are the
// softmax(q·kᵀ/√d) rows (zero above the diagonal); out[T, C]. The products
// skip the zero triangle: queries in blocks of kCausalBlock rows, each
// against the keys up to its last row (and the backward's likewise).
inline constexpr int kCausalBlock = 64;
void attention_forward(const float* qkv, float* probs, float* out, int B, int s, int C, int heads, int kv_heads = 0);
// dqkv (overwritten; qkv's shape) from dout[T, C]; `scratch` holds s·s
// floats. A K/V head's gradients sum its query heads' in head order.
void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* scratch, int B,
                        int s, int C, int heads, int kv_heads = 0);

// RMSNorm (llama): out = x · r · gamma per row, r = 1/√(mean(x²) + eps),
// saved per row. The backward's parts as layernorm's: dgamma accumulates, dx
// accumulates (the norms sit on residual branches).
void rmsnorm_forward(const float* x, const float* gamma, float* out, float* rrms, int T, int C, float eps);
void rmsnorm_backward_weight(const float* dout, const float* x, const float* rrms, float* dgamma, int T, int C);
void rmsnorm_backward_input(const float* dout, const float* x, const float* gamma, const float* rrms, float* dx, int T,
                            int C);

// Rotary positions (llama; Meta's pairing: elements 2i and 2i+1 of a head):
// table[s·d/2] cosines then [s·d/2] sines of pos·theta^(-2i/d), computed in
// double. rope_apply rotates, in place, the first `heads` heads of d columns
// of every row of x (row stride ld; the row's position is its index mod s);
// inverse: the transpose (the backward of a rotation).
// With `positions`, row i of the table is position positions[i] (context
// parallelism: a rank's rows are two chunks of the sequence).
void rope_table(float* table, int s, int d, double theta, const int* positions = nullptr);
void rope_apply(float* x, const float* table, int T, int s, int heads, int d, int ld, bool inverse);

// SwiGLU (llama): pre[T, 2f] holds W1·x | W3·x per row; u[T, f] = silu(W1·x) ⊙ W3·x.
void swiglu_forward(const float* pre, float* u, int T, int f);
// dpre[T, 2f] (overwritten) from du[T, f].
void swiglu_backward(const float* pre, const float* du, float* dpre, int T, int f);

// The vocabulary rows [first, first + rows) a tensor-parallel rank holds
// (docs/tensor-parallel.md); the default, every row.
struct VocabPart {
  std::int32_t first = 0;
  std::int32_t rows = INT32_MAX;
  bool holds(std::int32_t token) const { return token >= first && token - first < rows; }
};

// out[b, t] = wte[tokens[b, t]] + wpe[t] (wpe null: no position table,
// llama). With a vocabulary part, wte holds its rows only and a token
// outside it adds nothing (a tensor group's partial sums, each token's row on
// one rank, add up to the whole).
void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int B, int s, int C,
                       VocabPart part = {});
// dwte[tokens] += dout (tokens of `part` only), dwpe[t] += dout (dwpe may be
// null), in token order.
void embedding_backward(const std::int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B, int s, int C,
                        VocabPart part = {});

// In place: logits[T, V] become softmax probabilities. Returns the mean
// cross-entropy -log p[target] over the T tokens (accumulated in double).
double softmax_crossentropy_forward(float* logits_to_probs, const std::int32_t* targets, int T, int V);
// In place: probs become dlogits = (probs - onehot(target)) · scale (the
// target's column only where `part` holds it).
void softmax_crossentropy_backward(float* probs_to_dlogits, const std::int32_t* targets, int T, int V, float scale,
                                   VocabPart part = {});

// The same forward with the vocabulary split over a tensor group, the
// logits never gathered: each rank holds logits[T, V] of its `part`, the
// first `valid` columns real (the rest padding). Three steps around two
// reductions over the group (a max, then a sum):
// 1. row_max[t] = the max of row t's valid columns;
void vocab_parallel_row_max(const float* logits, float* row_max, int T, int V, int valid);
// 2. (row_max the group's) logits become exp(x − max), padding 0;
//    sum_target[2t] = Σ of row t, sum_target[2t+1] = the target's exp where
//    `part` holds the target, else 0;
void vocab_parallel_exp(float* logits, const float* row_max, const std::int32_t* targets, VocabPart part,
                        float* sum_target, int T, int V, int valid);
// 3. (sum_target the group's sums) rows × 1/Σ: the probabilities; returns
//    the mean −log p[target] (in double, as the unsplit forward).
double vocab_parallel_finish(float* exps_to_probs, const float* sum_target, int T, int V);

// AdamW (decoupled weight decay `wd`) on n parameters; `t` is the 1-based
// step count; gradients are multiplied by grad_scale (clipping) first.
void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, float grad_scale);
void sgd_update(float* p, const float* g, std::int64_t n, float lr, float grad_scale);

// Σ x² in double, in a fixed order that depends on n only.
double sum_squares(const float* x, std::int64_t n);

}  // namespace pipebench::cpu
