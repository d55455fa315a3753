// Model description formulas (docs/model.md), checked against independent
// hand computation for small shapes.
#include <catch2/catch.hpp>

#include "pipebench/model/model.hpp"

using namespace pipebench;

namespace {
ModelSpec gpt_spec() {
  ModelSpec m;
  m.kind = ModelKind::gpt;
  m.hidden = 8;
  m.heads = 2;
  m.ffn_hidden = 32;
  m.layers = 3;
  m.seq_len = 4;
  m.vocab = 16;
  return m;
}
}  // namespace

TEST_CASE("gpt block: parameters, FLOPs and saved activations", "[model]") {
  const ModelDesc d(gpt_spec(), DType::fp32);
  const Cost c = d.block(3);
  // ln1 16 + qkv 8*24+24 + proj 64+8 + ln2 16 + fc1 8*32+32 + fc2 32*8+8 = 872 = 12h^2 + 13h for f = 4h
  CHECK(c.params == 16 + 216 + 72 + 16 + 288 + 264);
  CHECK(c.params == 12 * 64 + 13 * 8);
  // tokens = 12: GEMMs 2*12*(3*64 + 64 + 2*256) + attention 4*3*16*8
  CHECK(c.forward_flops == 2.0 * 12 * (192 + 64 + 512) + 4.0 * 3 * 16 * 8);
  CHECK(c.backward_flops == 2.0 * c.forward_flops);
  // per token 8h + 2f + 4 = 132 elements; probabilities 3*2*4*4 = 96; fp32
  CHECK(c.activation_bytes == 4 * (12 * 132 + 96));
  // bf16 halves the element bytes but for the LayerNorm statistics, fp32
  // whatever the dtype: 4 floats per token
  CHECK(ModelDesc(gpt_spec(), DType::bf16).block(3).activation_bytes == 2 * (12 * 128 + 96) + 4 * 12 * 4);
}

TEST_CASE("mlp block: Linear-GELU-Linear with residual", "[model]") {
  ModelSpec m = gpt_spec();
  m.kind = ModelKind::mlp;
  const Cost c = ModelDesc(m, DType::fp32).block(2);
  CHECK(c.params == 8 * 32 + 32 + 32 * 8 + 8);
  CHECK(c.forward_flops == 2.0 * 8 * (2 * 8 * 32));  // tokens = 2 * 4
  CHECK(c.activation_bytes == 4 * 8 * (8 + 2 * 32));
}

TEST_CASE("embedding and head pieces", "[model]") {
  const ModelDesc d(gpt_spec(), DType::fp32);
  const Cost e = d.embedding(2);
  CHECK(e.params == 16 * 8 + 4 * 8);
  CHECK(e.forward_flops == 0.0);
  CHECK(e.activation_bytes == 8 * 4);  // int32 token ids
  const Cost h = d.head(2);
  CHECK(h.params == 2 * 8 + 8 * 16);
  CHECK(h.forward_flops == 2.0 * 8 * 8 * 16);
  CHECK(h.activation_bytes == 4 * 8 * (2 * 8 + 2 + 16) + 8 * 4);
  CHECK(d.boundary_bytes(2) == 2 * 4 * 8 * 4);
}

TEST_CASE("stage sums its pieces; total parameters do not depend on the split", "[model]") {
  const ModelDesc d(gpt_spec(), DType::fp32);
  const auto all = d.stage(1, 3, true, true).params;
  CHECK(all == d.embedding(1).params + 3 * d.block(1).params + d.head(1).params);
  CHECK(d.total_params() == all);
  CHECK(d.stage(1, 1, true, false).params + d.stage(1, 2, false, true).params == all);
  CHECK(d.stage(5, 2, false, false).activation_bytes == 2 * d.block(5).activation_bytes);
}

TEST_CASE("training state bytes per parameter", "[model]") {
  CHECK(state_bytes_per_param(OptimizerKind::adamw, DType::fp32).optimizer == 8);
  CHECK(state_bytes_per_param(OptimizerKind::adamw, DType::bf16).optimizer == 12);
  CHECK(state_bytes_per_param(OptimizerKind::sgd, DType::fp32).optimizer == 0);
  CHECK(state_bytes_per_param(OptimizerKind::sgd, DType::fp16).optimizer == 4);
  CHECK(state_bytes_per_param(OptimizerKind::adamw, DType::bf16).params == 2);
  CHECK(state_bytes_per_param(OptimizerKind::adamw, DType::fp32).grads == 4);
}
