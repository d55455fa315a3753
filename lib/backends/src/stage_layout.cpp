#include "pipebench/backends/stage_layout.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/model/synthetic.hpp"

namespace pipebench {

namespace {
constexpr float kInitStd = 0.02f;
}

std::int64_t TensorShard::whole_index(std::int64_t i) const {
  std::int64_t local_cols = 0;
  for (const auto& run : columns) local_cols += run.second;
  const std::int64_t row = row_begin + i / local_cols;
  std::int64_t c = i % local_cols, col = 0;
  for (const auto& [first, count] : columns) {
    if (c < count) {
      col = first + c;
      break;
    }
    c -= count;
  }
  if (row >= valid_rows || col >= valid_cols) return -1;
  return row * valid_cols + col;
}

namespace {

// The tensors of one piece, in docs/model.md order, as this tensor rank holds them.
class PieceTensors {
 public:
  PieceTensors(int t, int rank, bool sequence_parallel = false) : t_(t), rank_(rank), sp_(sequence_parallel) {}
  // A tensor every rank holds whole.
  void whole(std::int64_t n, bool matrix) { slots_.push_back({0, n, matrix, std::nullopt, t_ > 1, false}); }
  // A norm's weights: whole on every rank; with sequence parallelism each
  // rank's gradient covers its own tokens.
  void norm(std::int64_t n) { slots_.push_back({0, n, false, std::nullopt, t_ > 1, sp_}); }
  // [rows, cols] split by columns: of each of `runs` column blocks of the
  // whole tensor (its widths, in order), the rank's 1/t.
  void columns(std::int64_t rows, const std::vector<std::int64_t>& runs, bool matrix, std::int64_t valid_cols = -1) {
    TensorShard sh;
    std::int64_t first = 0, local = 0;
    for (const std::int64_t w : runs) {
      sh.columns.push_back({first + rank_ * (w / t_), w / t_});
      first += w;
      local += w / t_;
    }
    sh.full_cols = first;
    sh.valid_rows = rows;
    sh.valid_cols = valid_cols < 0 ? first : valid_cols;
    add(rows * local, matrix, std::move(sh));
  }
  // [rows, cols] split by rows: the rank's 1/t of them.
  void rows(std::int64_t rows, std::int64_t cols, bool matrix, std::int64_t valid_rows = -1) {
    TensorShard sh;
    sh.full_cols = cols;
    sh.row_begin = rank_ * (rows / t_);
    sh.valid_rows = valid_rows < 0 ? rows : valid_rows;
    sh.valid_cols = cols;
    sh.columns = {{0, cols}};
    add(rows / t_ * cols, matrix, std::move(sh));
  }
  std::vector<TensorSlot> take() { return std::move(slots_); }

 private:
  void add(std::int64_t n, bool matrix, TensorShard sh) {
    if (t_ == 1) return whole(n, matrix);
    slots_.push_back({0, n, matrix, std::move(sh), false, false});
  }
  int t_, rank_;
  bool sp_;
  std::vector<TensorSlot> slots_;
};

}  // namespace

StageLayout stage_layout(const ModelSpec& ms, DType dtype, const StageRange& range, int b, const char* backend,
                         const TensorSplit& split, int tensor_rank) {
  const ModelDesc model(ms, dtype, split);
  const int t = split.degree;
  const std::int64_t h = ms.hidden, f = ms.ffn_hidden, s = ms.seq_len, V = ms.vocab, Vp = padded_vocab(ms, t);
  StageLayout out;
  auto add_piece = [&](PieceKind kind, int id, PieceTensors&& tensors, std::int64_t act_bytes) {
    PieceLayout p;
    p.kind = kind;
    p.id = id;
    p.tensors = tensors.take();
    for (TensorSlot& slot : p.tensors) {
      slot.offset = out.params;
      out.params += slot.size;
    }
    p.act_offset = out.activation_bytes;
    p.act_bytes = act_bytes;
    out.activation_bytes += act_bytes;
    out.pieces.push_back(std::move(p));
  };
  const bool llama = ms.kind == ModelKind::llama;
  const std::int64_t kv = static_cast<std::int64_t>(ms.kv_heads) * (h / ms.heads);
  if (range.has_embedding) {
    PieceTensors e(t, tensor_rank);
    e.rows(Vp, h, true, V);  // the rank's vocabulary rows
    if (!llama) e.whole(s * h, true);
    add_piece(PieceKind::embedding, 0, std::move(e), model.embedding(b).activation_bytes);
  }
  for (int layer = range.first_layer; layer <= range.last_layer(); ++layer) {
    PieceTensors k(t, tensor_rank, split.sequence_parallel);
    PieceKind kind = PieceKind::mlp;
    if (llama) {
      kind = PieceKind::llama;
      k.norm(h);
      k.columns(h, {h, kv, kv}, true);  // q | k | v: the rank's heads of each
      k.rows(h, h, true);               // o
      k.norm(h);
      k.columns(h, {f, f}, true);       // W1 | W3
      k.rows(f, h, true);               // W2
    } else if (ms.kind == ModelKind::gpt) {
      kind = PieceKind::gpt;
      k.norm(h);
      k.norm(h);
      k.columns(h, {h, h, h}, true);  // qkv
      k.columns(1, {h, h, h}, false);
      k.rows(h, h, true);             // proj
      k.whole(h, false);
      k.norm(h);
      k.norm(h);
      k.columns(h, {f}, true);        // fc1
      k.columns(1, {f}, false);
      k.rows(f, h, true);             // fc2
      k.whole(h, false);
    } else {
      k.columns(h, {f}, true);
      k.columns(1, {f}, false);
      k.rows(f, h, true);
      k.whole(h, false);
    }
    add_piece(kind, 1 + layer, std::move(k), model.block(b).activation_bytes);
  }
  if (range.has_head) {
    PieceTensors k(t, tensor_rank, split.sequence_parallel);
    k.norm(h);
    if (!llama) k.norm(h);
    k.columns(h, {Vp}, true, V);  // the LM head's columns of the rank's vocabulary
    add_piece(PieceKind::head, ms.layers + 1, std::move(k), model.head(b).activation_bytes);
  }
  const Cost expected = model.stage(b, range.num_layers, range.has_embedding, range.has_head);
  if (out.params != expected.params || out.activation_bytes != expected.activation_bytes)
    throw Error(fmt::format("{} backend: tensor table ({} params, {} activation bytes) disagrees with the model "
                            "description ({}, {})",
                            backend, out.params, out.activation_bytes, expected.params, expected.activation_bytes));
  out.kept_offsets.push_back(0);
  for (const PieceLayout& p : out.pieces) {
    out.largest_piece_bytes = std::max(out.largest_piece_bytes, p.act_bytes);
    out.kept_offsets.push_back(out.kept_offsets.back() +
                               (p.kind == PieceKind::embedding ? model.tokens(b) * 4 : model.boundary_bytes(b)));
  }
  const std::int64_t piece = model.recompute_piece_bytes(b, range.num_layers, range.has_embedding, range.has_head);
  const std::int64_t kept = model.recompute_kept_bytes(b, range.num_layers, range.has_embedding, range.has_head);
  if (out.largest_piece_bytes != piece || out.kept_offsets.back() != kept)
    throw Error(fmt::format("{} backend: recomputation's piece and kept bytes ({}, {}) disagree with the model "
                            "description ({}, {})",
                            backend, out.largest_piece_bytes, out.kept_offsets.back(), piece, kept));
  return out;
}

void initial_values(const ModelSpec& ms, const PieceLayout& p, std::size_t t, float* out) {
  const TensorSlot& tt = p.tensors[t];
  if (!tt.matrix) {
    const bool gamma = (p.kind == PieceKind::gpt && (t == 0 || t == 6)) || (p.kind == PieceKind::llama && (t == 0 || t == 3)) ||
                       (p.kind == PieceKind::head && t == 0);
    std::fill(out, out + tt.size, gamma ? 1.0f : 0.0f);
    return;
  }
  const bool residual_proj = (p.kind == PieceKind::gpt && (t == 4 || t == 10)) || (p.kind == PieceKind::mlp && t == 2) ||
                             (p.kind == PieceKind::llama && (t == 2 || t == 5));
  const float stdev = residual_proj ? kInitStd / std::sqrt(2.0f * static_cast<float>(ms.layers)) : kInitStd;
  for (std::int64_t i = 0; i < tt.size; ++i) {
    const std::int64_t whole = tt.shard ? tt.shard->whole_index(i) : i;
    out[i] = whole < 0 ? 0.0f : stdev * init_normal(ms.seed, p.id, static_cast<int>(t), static_cast<std::uint64_t>(whole));
  }
}

std::int64_t split_stash_elements(PieceKind kind, std::int64_t T, std::int64_t h, std::int64_t f, std::int64_t kv,
                                  std::int64_t ht, std::int64_t Ts) {
  if (ht == 0) ht = h;
  if (Ts == 0) Ts = T;
  switch (kind) {
    case PieceKind::embedding: return Ts * h;
    case PieceKind::gpt: return T * (2 * h + f + 3 * ht) + Ts * 2 * h;
    case PieceKind::llama: return T * (2 * h + ht + 2 * kv + 2 * f) + Ts * 2 * h;
    case PieceKind::mlp: return T * (h + f);
    case PieceKind::head: return Ts * h;
  }
  return 0;
}

GptActs::GptActs(std::int64_t T, std::int64_t h, std::int64_t f, int elem_bytes, std::int64_t ht, std::int64_t Ts) {
  if (ht == 0) ht = h;
  if (Ts == 0) Ts = T;
  const std::int64_t stats = Ts * (4 / elem_bytes);  // Ts floats
  x = 0;
  ln1 = x + Ts * h;
  mean1 = ln1 + Ts * h;
  rstd1 = mean1 + stats;
  qkv = rstd1 + stats;
  attn = qkv + 3 * T * ht;
  x2 = attn + T * ht;
  ln2 = x2 + Ts * h;
  mean2 = ln2 + Ts * h;
  rstd2 = mean2 + stats;
  pre = rstd2 + stats;
  gelu = pre + T * f;
  probs = gelu + T * f;
}

LlamaActs::LlamaActs(std::int64_t T, std::int64_t h, std::int64_t kv, std::int64_t f, int elem_bytes, std::int64_t ht,
                     std::int64_t Ts) {
  if (ht == 0) ht = h;
  if (Ts == 0) Ts = T;
  const std::int64_t stats = Ts * (4 / elem_bytes);  // Ts floats
  x = 0;
  n1 = x + Ts * h;
  rrms1 = n1 + Ts * h;
  qkv = rrms1 + stats;
  attn = qkv + T * (ht + 2 * kv);
  x2 = attn + T * ht;
  n2 = x2 + Ts * h;
  rrms2 = n2 + Ts * h;
  pre13 = rrms2 + stats;
  u = pre13 + 2 * T * f;
  probs = u + T * f;
}

HeadActs::HeadActs(std::int64_t T, std::int64_t h, std::int64_t V, int elem_bytes, bool rms, std::int64_t Ts) {
  if (Ts == 0) Ts = T;
  const std::int64_t stats = Ts * (4 / elem_bytes);  // Ts floats
  x = 0;
  ln = Ts * h;
  mean = ln + Ts * h;
  rstd = rms ? mean : mean + stats;
  probs = rstd + stats;
  targets = probs + T * V;
}

}  // namespace pipebench
