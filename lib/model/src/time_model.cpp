#include "pipebench/model/time_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pipebench {

namespace {
// cuBLAS's typical output tile for large fp16 GEMMs (NVIDIA, "Matrix
// Multiplication Background User's Guide", §2.3): 256 x 128.
constexpr double kTileM = 256.0, kTileN = 128.0;
double d(std::int64_t x) { return static_cast<double>(x); }
}  // namespace

std::string_view to_string(Stream s) {
  switch (s) {
    case Stream::norms: return "norms";
    case Stream::softmax: return "softmax";
    case Stream::activation: return "activation";
    case Stream::residual: return "residual";
    case Stream::dropout: return "dropout";
    case Stream::rope: return "rope";
    case Stream::embedding: return "embedding";
    case Stream::cross_entropy: return "cross_entropy";
  }
  return "?";
}

PassTime& PassTime::operator+=(const PassTime& o) {
  gemm_s += o.gemm_s;
  accumulate_read_s += o.accumulate_read_s;
  attention_s += o.attention_s;
  elementwise_s += o.elementwise_s;
  for (std::size_t i = 0; i < kStreams; ++i) streams[i] += o.streams[i];
  launch_s += o.launch_s;
  kernels += o.kernels;
  return *this;
}

PassTime& PassTime::operator*=(double n) {
  gemm_s *= n;
  accumulate_read_s *= n;
  attention_s *= n;
  elementwise_s *= n;
  for (double& x : streams) x *= n;
  launch_s *= n;
  kernels = static_cast<int>(kernels * n);
  return *this;
}

PieceTime& PieceTime::operator+=(const PieceTime& o) {
  forward += o.forward;
  input_grad += o.input_grad;
  weight_grad += o.weight_grad;
  recompute += o.recompute;
  return *this;
}

TimeModel::TimeModel(const DevicePreset& preset, DType dtype) : preset_(preset), dtype_(dtype) {}

double TimeModel::peak_flops() const {
  return dtype_ == DType::fp32 ? preset_.fp32_flops : preset_.matrix_flops_16bit;
}

double TimeModel::k_efficiency(double k) const {
  const auto& t = preset_.gemm_efficiency;
  if (k <= t.front().k) return t.front().efficiency;
  if (k >= t.back().k) return t.back().efficiency;
  for (std::size_t i = 1; i < t.size(); ++i)
    if (k <= t[i].k) {
      const double x = (std::log2(k) - std::log2(t[i - 1].k)) / (std::log2(t[i].k) - std::log2(t[i - 1].k));
      return t[i - 1].efficiency + x * (t[i].efficiency - t[i - 1].efficiency);
    }
  return t.back().efficiency;
}

double TimeModel::wave_efficiency(double tiles) const {
  if (tiles <= 0.0) return 1.0;
  const double sms = preset_.sms;
  return tiles / (std::ceil(tiles / sms) * sms);
}

double TimeModel::gemm_s(double m, double n, double k, double batch, Output output) const {
  if (m <= 0.0 || n <= 0.0 || k <= 0.0 || batch <= 0.0) return 0.0;
  const double compute = 2.0 * m * n * k * batch / (peak_flops() * k_efficiency(k) * gemm_waves(m, n, batch));
  // An accumulating GEMM reads its fp32 output before adding to it; the share
  // of that read the kernel makes after its mainloop is not overlapped.
  const double serial = accumulate_read_s(m, n, batch, output);
  return std::max(compute, stream_s(gemm_bytes(m, n, k, batch, output)) - serial) + serial;
}

double TimeModel::accumulate_read_s(double m, double n, double batch, Output output) const {
  if (output != Output::accumulated_fp32 || m <= 0.0 || n <= 0.0 || batch <= 0.0) return 0.0;
  return stream_s(4.0 * m * n * batch * preset_.gemm_accumulate_serial);
}

double TimeModel::gemm_waves(double m, double n, double batch) const {
  return wave_efficiency(std::ceil(m / kTileM) * std::ceil(n / kTileN) * batch);
}

double TimeModel::gemm_bytes(double m, double n, double k, double batch, Output output) const {
  const double e = dtype_bytes(dtype_), out = output == Output::written ? e : 8.0;
  return (e * (m * k + k * n) + out * m * n) * batch;
}

TimeModel::GemmCalibration TimeModel::calibrate_gemm(double m, double n, double k, double measured_s) const {
  const double nan = std::numeric_limits<double>::quiet_NaN(), bytes = gemm_bytes(m, n, k, 1.0, Output::written);
  const double flops = 2.0 * m * n * k, waves = gemm_waves(m, n, 1.0);
  GemmCalibration c{0.0, flops / (peak_flops() * k_efficiency(k) * waves), stream_s(bytes), k_efficiency(k), false, nan, nan};
  c.model_s = std::max(c.compute_s, c.memory_s);  // gemm_s's
  c.compute_bound = c.compute_s >= c.memory_s;
  if (c.compute_bound)
    c.efficiency = flops / (peak_flops() * waves * measured_s);
  else
    c.bandwidth_fraction = bytes / (measured_s * preset_.hbm_bytes_per_s);
  return c;
}

double TimeModel::stream_s(double bytes) const {
  return bytes / (preset_.hbm_bytes_per_s * preset_.hbm_efficiency);
}

void TimeModel::add_gemm(PassTime& p, double m, double n, double k, Output output) const {
  p.gemm_s += gemm_s(m, n, k, 1.0, output);
  p.accumulate_read_s += accumulate_read_s(m, n, 1.0, output);
  p.launch_s += preset_.kernel_launch_s;
  ++p.kernels;
}

void TimeModel::add_attention(PassTime& p, double m, double n, double k, double batch) const {
  p.attention_s += gemm_s(m, n, k, batch);
  p.launch_s += preset_.kernel_launch_s;
  ++p.kernels;
}

double flash_tile_fraction(double seq) {
  const double tiles = std::ceil(seq / kFlashTile);
  return (tiles + 1.0) / (2.0 * tiles);
}

void TimeModel::add_flash_attention(PieceTime& t, double seq, double dh, double batch) const {
  // QKᵀ and P·V over the tiles a causal mask leaves: 4·s²·dh FLOPs a head, times the tiles' share.
  const double forward = 4.0 * seq * seq * dh * batch * flash_tile_fraction(seq);
  const double rate = peak_flops() * preset_.flash_attention_efficiency;
  t.forward.attention_s += forward / rate;
  t.forward.launch_s += preset_.kernel_launch_s;
  ++t.forward.kernels;
  // The backward's five products per tile (S again, dP, dV, dQ, dK): 2.5x the forward's, in two kernels
  // (the row sums D = rowsum(dO ∘ O), then the tiles).
  t.input_grad.attention_s += 2.5 * forward / rate;
  t.input_grad.launch_s += 2.0 * preset_.kernel_launch_s;
  t.input_grad.kernels += 2;
}

void TimeModel::add_stream(PassTime& p, Stream what, double bytes, int kernels) const {
  const double seconds = stream_s(bytes);
  p.elementwise_s += seconds;
  p.streams[static_cast<std::size_t>(what)] += seconds;
  p.launch_s += kernels * preset_.kernel_launch_s;
  p.kernels += kernels;
}

// Gather rows (and gpt's position rows added); its backward, all W, a
// scatter-add of the output gradient into the rows.
PieceTime TimeModel::embedding(const ModelDesc& model, int b) const {
  const ModelSpec& s = model.spec();
  const double e = dtype_bytes(model.dtype()), T = d(model.tokens(b)), h = s.hidden;
  PieceTime t;
  add_stream(t.forward, Stream::embedding, e * (s.kind == ModelKind::llama ? 2.0 : 3.0) * T * h, 1);
  add_stream(t.weight_grad, Stream::embedding, e * 3.0 * T * h, 1);
  return t;
}

// A linear layer of `in` x `out` (the rank's share) on `rows` tokens: its
// forward, its input gradient (B) and its weight gradient (W, added to the
// fp32 gradient of the earlier micro-batches).
void TimeModel::add_linear(PieceTime& t, double rows, double in, double out) const {
  add_gemm(t.forward, rows, out, in);
  add_gemm(t.input_grad, rows, in, out);
  add_gemm(t.weight_grad, in, out, rows, Output::accumulated_fp32);
}

// Per pass, the GEMMs of the rank's columns (model.hpp's shapes) and the
// memory traffic of the rest (docs/time-model.md, "Element-wise traffic").
PieceTime TimeModel::block(const ModelDesc& model, int b) const {
  const ModelSpec& s = model.spec();
  const int tp = model.split().degree;
  const double e = dtype_bytes(model.dtype());
  const double T = d(model.tokens(b)), Ts = d(model.region_tokens(b)), h = s.hidden;
  const double ht = h / tp, ft = d(s.ffn_hidden) / tp, seq = s.seq_len;
  const double heads = d(s.heads) / tp, dh = h / s.heads, scores = d(b) * heads * seq * seq;
  PieceTime t;
  auto lin = [&](double in, double out) { add_linear(t, T, in, out); };
  if (s.kind == ModelKind::mlp) {
    lin(h, ft);
    lin(ft, h);
    add_stream(t.forward, Stream::activation, e * 2.0 * T * ft, 1);  // GELU
    add_stream(t.forward, Stream::residual, e * 3.0 * Ts * h, 1);
    add_stream(t.input_grad, Stream::activation, e * 3.0 * T * ft, 1);
    add_stream(t.input_grad, Stream::residual, e * 3.0 * Ts * h, 1);
    return t;
  }
  const bool llama = s.kind == ModelKind::llama;
  const double kvt = llama ? d(s.kv_heads / tp) * dh : ht;
  lin(h, ht + 2.0 * kvt);  // QKV
  lin(ht, h);              // attention output
  if (llama) {
    lin(h, ft);  // W1
    lin(h, ft);  // W3
  } else {
    lin(h, ft);  // fc1
  }
  lin(ft, h);  // fc2 / W2
  const double batch = d(b) * heads;
  const bool flash = s.attention == Attention::flash;
  if (flash) {
    add_flash_attention(t, seq, dh, batch / model.split().context);  // context parallelism: 1/c of the tiles a rank
  } else {
    // The attention core: QKᵀ and P·V forward; dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q backward.
    add_attention(t.forward, seq, seq, dh, batch);
    add_attention(t.forward, seq, dh, seq, batch);
    add_attention(t.input_grad, seq, seq, dh, batch);
    add_attention(t.input_grad, seq, dh, seq, batch);
    add_attention(t.input_grad, seq, dh, seq, batch);
    add_attention(t.input_grad, seq, dh, seq, batch);
  }
  // Forward: two norms (read, write), two residual adds (read 2, write 1),
  // the softmax (read the scores, write the probabilities), the activation
  // (gpt GELU: read, write; llama SwiGLU: read 2, write 1), llama's RoPE on q
  // and k. The backward: 3 per norm, softmax and GELU (its input, the
  // output gradient, the input gradient), 5 for SwiGLU, 3 per residual.
  add_stream(t.forward, Stream::norms, e * 2.0 * 2.0 * Ts * h, 2);
  add_stream(t.forward, Stream::residual, e * 2.0 * 3.0 * Ts * h, 2);
  if (!flash) add_stream(t.forward, Stream::softmax, e * 2.0 * scores, 1);  // fused into flash's tiles
  add_stream(t.forward, Stream::activation, e * (llama ? 3.0 : 2.0) * T * ft, 1);
  add_stream(t.input_grad, Stream::norms, e * 2.0 * 3.0 * Ts * h, 2);
  add_stream(t.input_grad, Stream::residual, e * 2.0 * 3.0 * Ts * h, 2);
  if (!flash) add_stream(t.input_grad, Stream::softmax, e * 3.0 * scores, 1);
  add_stream(t.input_grad, Stream::activation, e * (llama ? 5.0 : 3.0) * T * ft, 1);
  if (llama) {
    const double rope = e * 2.0 * T * (ht + kvt);
    add_stream(t.forward, Stream::rope, rope, 1);
    add_stream(t.input_grad, Stream::rope, rope, 1);
  }
  // Dropout (gpt, training): the attention dropout reads the probabilities
  // and writes its output and a 1-byte mask, its backward reads the output
  // gradient and the mask and writes the probabilities' gradient, (2e + 1)
  // bytes per score each way; the hidden dropouts ride the residual adds,
  // their masks written forward and read backward (1 byte per element).
  const bool dropout = model.dropout() && !llama;
  // Flash applies the attention dropout inside its tiles (the mask drawn again in the backward).
  const double attention_dropout = dropout && !flash ? (2.0 * e + 1.0) * scores : 0.0;
  if (dropout) {
    add_stream(t.forward, Stream::dropout, attention_dropout + 2.0 * Ts * h, 1);
    add_stream(t.input_grad, Stream::dropout, attention_dropout + 2.0 * Ts * h, 1);
  }
  if (model.split().selective_recompute && !flash) {  // flash keeps nothing of the core to recompute
    add_attention(t.recompute, seq, seq, dh, batch);
    add_attention(t.recompute, seq, dh, seq, batch);
    add_stream(t.recompute, Stream::softmax, e * 2.0 * scores, 1);
    if (dropout) add_stream(t.recompute, Stream::dropout, attention_dropout, 1);
  }
  return t;
}

// The final norm, the LM head over the rank's vocabulary and the
// cross-entropy: the logits read twice (maximum, then the sum of
// exponentials) and the probabilities written; the backward turns them into
// the logits' gradient in place (read, write).
PieceTime TimeModel::head(const ModelDesc& model, int b) const {
  const ModelSpec& s = model.spec();
  const int tp = model.split().degree;
  const double e = dtype_bytes(model.dtype());
  const double T = d(model.tokens(b)), Ts = d(model.region_tokens(b)), h = s.hidden;
  const double v = d(padded_vocab(s, tp) / tp);
  PieceTime t;
  add_linear(t, T, h, v);
  add_stream(t.forward, Stream::norms, e * 2.0 * Ts * h, 1);
  add_stream(t.forward, Stream::cross_entropy, e * 3.0 * T * v, 2);
  add_stream(t.input_grad, Stream::norms, e * 3.0 * Ts * h, 1);
  add_stream(t.input_grad, Stream::cross_entropy, e * 2.0 * T * v, 1);
  return t;
}

PieceTime TimeModel::stage(const ModelDesc& model, int b, int num_layers, bool has_embedding, bool has_head) const {
  PieceTime total;
  if (has_embedding) total += embedding(model, b);
  const PieceTime one = block(model, b);
  for (int i = 0; i < num_layers; ++i) total += one;
  if (has_head) total += head(model, b);
  return total;
}

int TimeModel::optimizer_step_bytes(OptimizerKind optimizer, DType dtype) {
  const bool fp32 = dtype == DType::fp32;
  if (optimizer == OptimizerKind::adamw) return fp32 ? 36 : 38;
  return fp32 ? 20 : 22;
}

double TimeModel::optimizer_s(OptimizerKind optimizer, std::int64_t params) const {
  if (params <= 0) return 0.0;
  return stream_s(static_cast<double>(optimizer_step_bytes(optimizer, dtype_)) * d(params)) + preset_.kernel_launch_s;
}

}  // namespace pipebench
