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

StageLayout stage_layout(const ModelSpec& ms, DType dtype, const StageRange& range, int b, const char* backend) {
  const ModelDesc model(ms, dtype);
  const std::int64_t h = ms.hidden, f = ms.ffn_hidden, s = ms.seq_len, V = ms.vocab;
  StageLayout out;
  auto add_piece = [&](PieceKind kind, int id, std::vector<std::pair<std::int64_t, bool>> sizes, std::int64_t act_bytes) {
    PieceLayout p;
    p.kind = kind;
    p.id = id;
    for (const auto& [n, matrix] : sizes) {
      p.tensors.push_back({out.params, n, matrix});
      out.params += n;
    }
    p.act_offset = out.activation_bytes;
    p.act_bytes = act_bytes;
    out.activation_bytes += act_bytes;
    out.pieces.push_back(std::move(p));
  };
  const bool llama = ms.kind == ModelKind::llama;
  const std::int64_t kv = static_cast<std::int64_t>(ms.kv_heads) * (h / ms.heads);
  if (range.has_embedding) {
    if (llama) add_piece(PieceKind::embedding, 0, {{V * h, true}}, model.embedding(b).activation_bytes);
    else add_piece(PieceKind::embedding, 0, {{V * h, true}, {s * h, true}}, model.embedding(b).activation_bytes);
  }
  for (int layer = range.first_layer; layer <= range.last_layer(); ++layer) {
    if (llama)
      add_piece(PieceKind::llama, 1 + layer,
                {{h, false}, {h * (h + 2 * kv), true}, {h * h, true}, {h, false}, {h * 2 * f, true}, {f * h, true}},
                model.block(b).activation_bytes);
    else if (ms.kind == ModelKind::gpt)
      add_piece(PieceKind::gpt, 1 + layer,
                {{h, false}, {h, false}, {h * 3 * h, true}, {3 * h, false}, {h * h, true}, {h, false},
                 {h, false}, {h, false}, {h * f, true}, {f, false}, {f * h, true}, {h, false}},
                model.block(b).activation_bytes);
    else
      add_piece(PieceKind::mlp, 1 + layer, {{h * f, true}, {f, false}, {f * h, true}, {h, false}},
                model.block(b).activation_bytes);
  }
  if (range.has_head) {
    if (llama) add_piece(PieceKind::head, ms.layers + 1, {{h, false}, {h * V, true}}, model.head(b).activation_bytes);
    else add_piece(PieceKind::head, ms.layers + 1, {{h, false}, {h, false}, {h * V, true}}, model.head(b).activation_bytes);
  }
  const Cost expected = model.stage(b, range.num_layers, range.has_embedding, range.has_head);
  if (out.params != expected.params || out.activation_bytes != expected.activation_bytes)
    throw Error(fmt::format("{} backend: tensor table ({} params, {} activation bytes) disagrees with the model "
                            "description ({}, {})",
                            backend, out.params, out.activation_bytes, expected.params, expected.activation_bytes));
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
  for (std::int64_t i = 0; i < tt.size; ++i)
    out[i] = stdev * init_normal(ms.seed, p.id, static_cast<int>(t), static_cast<std::uint64_t>(i));
}

std::int64_t split_stash_elements(PieceKind kind, std::int64_t T, std::int64_t h, std::int64_t f, std::int64_t kv) {
  switch (kind) {
    case PieceKind::embedding: return T * h;
    case PieceKind::gpt: return T * (7 * h + f);
    case PieceKind::llama: return T * (5 * h + 2 * kv + 2 * f);
    case PieceKind::mlp: return T * (h + f);
    case PieceKind::head: return T * h;
  }
  return 0;
}

GptActs::GptActs(std::int64_t T, std::int64_t h, std::int64_t f, int elem_bytes) {
  const std::int64_t stats = T * (4 / elem_bytes);  // T floats
  x = 0;
  ln1 = x + T * h;
  mean1 = ln1 + T * h;
  rstd1 = mean1 + stats;
  qkv = rstd1 + stats;
  attn = qkv + 3 * T * h;
  x2 = attn + T * h;
  ln2 = x2 + T * h;
  mean2 = ln2 + T * h;
  rstd2 = mean2 + stats;
  pre = rstd2 + stats;
  gelu = pre + T * f;
  probs = gelu + T * f;
}

LlamaActs::LlamaActs(std::int64_t T, std::int64_t h, std::int64_t kv, std::int64_t f, int elem_bytes) {
  const std::int64_t stats = T * (4 / elem_bytes);  // T floats
  x = 0;
  n1 = x + T * h;
  rrms1 = n1 + T * h;
  qkv = rrms1 + stats;
  attn = qkv + T * (h + 2 * kv);
  x2 = attn + T * h;
  n2 = x2 + T * h;
  rrms2 = n2 + T * h;
  pre13 = rrms2 + stats;
  u = pre13 + 2 * T * f;
  probs = u + T * f;
}

HeadActs::HeadActs(std::int64_t T, std::int64_t h, std::int64_t V, int elem_bytes, bool rms) {
  const std::int64_t stats = T * (4 / elem_bytes);  // T floats
  x = 0;
  ln = T * h;
  mean = ln + T * h;
  rstd = rms ? mean : mean + stats;
  probs = rstd + stats;
  targets = probs + T * V;
}

}  // namespace pipebench
