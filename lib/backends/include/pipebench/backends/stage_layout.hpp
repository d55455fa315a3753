// How the real backends (cpu, cuda) lay out a stage: the tensor table —
// offsets of every parameter tensor into one flat buffer, in docs/model.md
// order (llm.c style) — and each piece's region of a micro-batch's
// activation slab, with the offsets of what a gpt block and the head save.
// One layout for both backends, so the cuda backend is the cpu backend's
// model element for element. Sizes are the model description's.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/plan/partition.hpp"

namespace pipebench {

enum class PieceKind { embedding, gpt, mlp, llama, head };

// A tensor-parallel rank's part of one tensor of the whole model, seen as
// [rows, full_cols] (a vector is one row): rows from `row_begin`, and of
// each row the column runs `columns` (first full column, count) in order.
// Rows at or past `valid_rows` and columns at or past `valid_cols` are the
// vocabulary's padding (model.hpp's padded_vocab): zero, never drawn.
struct TensorShard {
  std::int64_t full_cols = 0, row_begin = 0, valid_rows = 0, valid_cols = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> columns;
  // Element `i` of the part as an element of the whole tensor ([valid_rows,
  // valid_cols] row-major), or -1 for padding.
  std::int64_t whole_index(std::int64_t i) const;
};

struct TensorSlot {
  std::int64_t offset = 0;  // elements into the flat parameter buffer
  std::int64_t size = 0;
  bool matrix = false;      // weight decay applies to matrices only
  // Tensor parallelism: the part this rank holds, or nullopt for a tensor
  // every rank of the group holds whole (`shared` when the group has more
  // than one rank: its gradient is counted once in the norm).
  std::optional<TensorShard> shard;
  bool shared = false;
  // Sequence parallelism: a norm's weights, whose gradient each rank takes
  // from its own tokens only (summed over the group before the norm).
  bool sequence_partial = false;
};

struct PieceLayout {
  PieceKind kind = PieceKind::gpt;
  int id = 0;                      // global piece id: 0 embedding, 1+i block i, layers+1 head
  std::vector<TensorSlot> tensors;  // docs/model.md order
  std::int64_t act_offset = 0;     // bytes into a micro-batch's activation slab
  std::int64_t act_bytes = 0;
};

struct StageLayout {
  std::vector<PieceLayout> pieces;
  std::int64_t params = 0;            // elements
  std::int64_t activation_bytes = 0;  // one micro-batch's slab
  // Full recomputation, one piece a checkpoint (docs/model.md): the slab is
  // the largest piece's activations, and a micro-batch keeps every piece's
  // input one after another — the token ids for the embedding, the rank's
  // region of a boundary tensor for a block or the head — piece i's in
  // [kept_offsets[i], kept_offsets[i + 1]), the last entry the whole
  // (ModelDesc::recompute_piece_bytes / recompute_kept_bytes).
  std::int64_t largest_piece_bytes = 0;
  std::vector<std::int64_t> kept_offsets;  // pieces.size() + 1
};

// The layout of the stage holding `range`, activations in `dtype`; with a
// tensor split, tensor rank `tensor_rank`'s part of it
// (docs/tensor-parallel.md). Throws Error if it disagrees with ModelDesc (a
// bug, named with `backend`).
StageLayout stage_layout(const ModelSpec& model, DType dtype, const StageRange& range, int micro_batch_size,
                         const char* backend, const TensorSplit& split = {}, int tensor_rank = 0);

// The initial values of tensor `t` of `piece` (t.size elements into `out`):
// LayerNorm gains 1, biases and betas 0, matrices N(0, 0.02²) — residual
// projections N(0, (0.02/√(2·layers))²) — drawn from (seed, piece id,
// tensor, element of the whole tensor) only, so every split, pipeline or
// tensor, starts from the same model.
void initial_values(const ModelSpec& model, const PieceLayout& piece, std::size_t t, float* out);

// AdamW as both real backends apply it (not workload keys): betas 0.9 and
// 0.95, eps 1e-8, decoupled weight decay 0.01 on matrices only.
inline constexpr float kAdamBeta1 = 0.9f, kAdamBeta2 = 0.95f, kAdamEps = 1e-8f, kAdamWeightDecay = 0.01f;

// Element offsets (elements of `elem_bytes`, the storage dtype's size; 4 for
// the cpu backend) of one gpt block's saved activations inside its slab
// region (docs/model.md order): per token x, ln1, ln1 mean/rstd, qkv, attn,
// x2, ln2, ln2 mean/rstd, pre, gelu; then the attention probabilities. The
// LayerNorm statistics are fp32 whatever the dtype: T floats each, which is
// 4 / elem_bytes elements per token.
// Tensor-parallel: qkv, attn, pre and gelu hold the rank's columns: pass
// the local widths `ht` = h/t and `ft` = f/t (0: h and f); with sequence
// parallelism x, the norms' outputs, x2 and the statistics hold `Ts` = T/t
// rows (0: T).
struct GptActs {
  std::int64_t x, ln1, mean1, rstd1, qkv, attn, x2, ln2, mean2, rstd2, pre, gelu, probs;
  GptActs(std::int64_t T, std::int64_t h, std::int64_t f, int elem_bytes = 4, std::int64_t ht = 0, std::int64_t Ts = 0);
};

// One llama block's saved activations (docs/model.md, "llama"): per token x,
// norm1 out, fp32 1/rms, qkv after RoPE [h + 2kv], attn, x2, norm2 out, fp32
// 1/rms, W1·x | W3·x [2f], silu(W1·x)⊙W3·x [f]; then the attention probabilities.
// Tensor-parallel: `kv` and `f` the rank's widths, `ht` its h/t (0: h);
// `Ts` the rows of x, the norms' outputs, x2 and the statistics (0: T).
struct LlamaActs {
  std::int64_t x, n1, rrms1, qkv, attn, x2, n2, rrms2, pre13, u, probs;
  LlamaActs(std::int64_t T, std::int64_t h, std::int64_t kv, std::int64_t f, int elem_bytes = 4, std::int64_t ht = 0,
            std::int64_t Ts = 0);
};

// Head: x, ln, fp32 mean, fp32 rstd, probs [T, V] (elements as above; V
// the rank's vocabulary columns), then the int32 targets. With `rms` (llama's RMSNorm) one fp32 statistic, 1/rms,
// at `rstd` (mean == rstd).
// `Ts` the rows of x, ln and the statistics (sequence parallelism; 0: T).
struct HeadActs {
  std::int64_t x, ln, mean, rstd, probs, targets;
  HeadActs(std::int64_t T, std::int64_t h, std::int64_t V, int elem_bytes = 4, bool rms = false, std::int64_t Ts = 0);
};

// A split backward (B, then W later; zero-bubble schedules): the output
// gradients piece `kind`'s W needs, kept from its B, in elements of the
// storage dtype, for T tokens: embedding [T,h]; gpt block fc2 out [T,h], fc1
// out [T,f], ln2 out [T,h], proj out [T,h], qkv [T,3h], ln1 out [T,h]; mlp
// block fc2 out [T,h], fc1 out [T,f]; head ln out [T,h] (its logits gradient
// stays in the slab). Both real backends keep them in this order; the sum
// over a chunk's pieces is ModelDesc's split_stash_bytes.
// llama block: W2 out [T,h], W1|W3 out [T,2f], norm2 out [T,h], o out [T,h],
// qkv [T,h+2kv], norm1 out [T,h] (`kv` = kv_heads·h/heads; others ignore it).
// Tensor-parallel: `f` and `kv` the rank's widths, `ht` its h/t (0: h); the
// gradients at the outputs of the row-parallel layers (gpt fc2 and proj,
// llama W2 and o) stay [T,h] (gathered whole with sequence parallelism);
// those at the norms' outputs, the embedding's and the head's are the
// rank's `Ts` tokens (sequence parallelism; 0: T).
std::int64_t split_stash_elements(PieceKind kind, std::int64_t T, std::int64_t h, std::int64_t f, std::int64_t kv = 0,
                                  std::int64_t ht = 0, std::int64_t Ts = 0);

}  // namespace pipebench
