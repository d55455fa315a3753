// The hardware time model (docs/time-model.md): what one rank's share of a
// piece takes on a device preset (core/device_preset.hpp), term by term.
// GEMMs at the preset's matrix peak times an efficiency from the GEMM's
// reduction length (a table) and its wave quantization, never faster than
// its operands stream from memory; the attention core's batched GEMMs the
// same; the element-wise and norm kernels (norms, activation, softmax,
// residual adds, RoPE, cross-entropy, embedding gather) at the achievable
// memory bandwidth; and a fixed launch cost per kernel. The collectives of
// the tensor group, the pipeline transfers and the data-parallel
// synchronisation are the planner's (plan.hpp), on the preset's links.
//
// The shapes are the ones ModelDesc (model.hpp) counts: a piece's FLOPs
// here equal its Cost's, term for term (tests/unit/test_time_model.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "pipebench/core/device_preset.hpp"
#include "pipebench/model/model.hpp"

namespace pipebench {

// The memory-bound kernels by what they do (docs/time-model.md,
// "Element-wise traffic"): LayerNorm / RMSNorm, the attention softmax, the
// MLP's activation (GELU, SwiGLU), the residual adds (with the hidden
// dropouts fused in), the attention dropout and the hidden dropouts' masks,
// RoPE, the embedding's gather and scatter-add, the head's cross-entropy.
enum class Stream { norms, softmax, activation, residual, dropout, rope, embedding, cross_entropy };
inline constexpr std::size_t kStreams = 8;
// "norms", "softmax", ... (the JSON names, less their "_s").
std::string_view to_string(Stream s);

// One pass of a piece, by term, in seconds.
struct PassTime {
  double gemm_s = 0.0;         // the linear layers (QKV, projections, MLP, LM head)
  double accumulate_read_s = 0.0;  // of gemm_s: the weight gradients' output read not overlapped (gemm_accumulate_serial)
  double attention_s = 0.0;    // the attention core's batched GEMMs (QKᵀ, ·V and their gradients)
  double elementwise_s = 0.0;  // memory-bound kernels: the sum of `streams`
  std::array<double, kStreams> streams{};  // elementwise_s by Stream
  double launch_s = 0.0;       // kernels × the preset's launch cost
  int kernels = 0;
  double total() const { return gemm_s + attention_s + elementwise_s + launch_s; }
  double stream(Stream s) const { return streams[static_cast<std::size_t>(s)]; }
  PassTime& operator+=(const PassTime& o);
  // Every term (and the kernel count) times `n`: a pass run n times.
  PassTime& operator*=(double n);
};

// A piece's passes: the forward (F), the input gradients (B), the weight
// gradients (W), and with recompute = "selective" the attention core's
// forward again, which B runs first.
struct PieceTime {
  PassTime forward, input_grad, weight_grad, recompute;
  PieceTime& operator+=(const PieceTime& o);
};

// Flash attention's tile edge (FlashAttention-2's 128-row blocks) and the
// share of a causal attention's s x s tiles it computes: n(n+1)/2 of n², n =
// ceil(seq / 128) — the tiles above the diagonal skipped, those on it whole.
inline constexpr double kFlashTile = 128.0;
double flash_tile_fraction(double seq);

class TimeModel {
 public:
  // `dtype`: what the GEMMs compute in (fp16/bf16 on tensor cores, fp32 without TF32).
  TimeModel(const DevicePreset& preset, DType dtype);

  const DevicePreset& preset() const { return preset_; }
  // The matrix peak of the dtype, FLOP/s.
  double peak_flops() const;
  // The compute-side efficiency of a GEMM whose reduction dimension is `k`
  // (the preset's table, interpolated in log2 k).
  double k_efficiency(double k) const;
  // The fraction of the SMs the last wave of `tiles` output tiles keeps
  // busy, averaged over the waves: tiles / (waves · SMs).
  double wave_efficiency(double tiles) const;
  // How a GEMM's output meets memory: written once in the dtype, or — a
  // weight gradient — accumulated into the fp32 gradient (beta = 1: read
  // and written, 8 bytes an element), as pipebench's cuda backend and
  // Megatron-LM's fused gradient accumulation do.
  enum class Output { written, accumulated_fp32 };
  // `batch` GEMMs of [m, k] x [k, n] (2·m·n·k FLOPs each): the slower of the
  // compute time and the time to stream the three matrices — less, for an
  // accumulating GEMM, the preset's gemm_accumulate_serial share of its
  // output's read, which is added after (docs/time-model.md, "GEMMs").
  double gemm_s(double m, double n, double k, double batch = 1.0, Output output = Output::written) const;
  // Streaming `bytes` through memory (read + written) at the achievable bandwidth.
  double stream_s(double bytes) const;
  // Of gemm_s: the part an accumulating GEMM's output read adds after the
  // math (the preset's gemm_accumulate_serial share of it); 0 for a written output.
  double accumulate_read_s(double m, double n, double batch, Output output) const;

  // One measured GEMM (bench_cuda_gemm: [m, k] x [k, n], output written in
  // the dtype) against this model: the calibration of the preset's
  // efficiency table (docs/time-model.md, "Calibrating the GEMM table").
  struct GemmCalibration {
    double model_s;              // gemm_s: what the model predicts, the slower of
    double compute_s;            //   its compute side (the table's e(K), the waves)
    double memory_s;             //   and its memory side (the three matrices at the achievable bandwidth)
    double table_efficiency;     // k_efficiency(k)
    // The side the model takes is the figure the measurement calibrates. The
    // compute side: `efficiency`, the e(K) with which the model gives the
    // measured time, FLOPs / (peak · waves · measured). The memory side (a
    // GEMM does fewer than K FLOPs a byte, so a short K is always here):
    // `bandwidth_fraction`, the share of the peak bandwidth the measured time
    // implies, beside the preset's achievable fraction; e(K) plays no part.
    bool compute_bound;
    double efficiency;           // NaN where memory-bound
    double bandwidth_fraction;   // NaN where compute-bound
  };
  GemmCalibration calibrate_gemm(double m, double n, double k, double measured_s) const;

  PieceTime embedding(const ModelDesc& model, int micro_batch) const;
  PieceTime block(const ModelDesc& model, int micro_batch) const;
  PieceTime head(const ModelDesc& model, int micro_batch) const;
  // The pieces a stage holds (ModelDesc::stage's sum).
  PieceTime stage(const ModelDesc& model, int micro_batch, int num_layers, bool has_embedding, bool has_head) const;

  // One optimizer step over `params` parameters of `dtype` storage: the
  // state it reads and writes per parameter (optimizer_step_bytes) streamed,
  // plus one kernel.
  double optimizer_s(OptimizerKind optimizer, std::int64_t params) const;
  // AdamW: params, fp32 gradients, m and v read, m, v and the weights (and
  // with 16-bit storage the fp32 master) written, the gradients zeroed for
  // the next step, and read once before for the global gradient norm
  // (clipping): fp32 36 bytes, 16-bit 38. SGD: 20 and 22.
  static int optimizer_step_bytes(OptimizerKind optimizer, DType dtype);

 private:
  DevicePreset preset_;  // a copy: device_model() builds one per workload
  DType dtype_;
  // A GEMM's wave quantization (output tiles of 256 x 128) and the bytes of its three matrices.
  double gemm_waves(double m, double n, double batch) const;
  double gemm_bytes(double m, double n, double k, double batch, Output output) const;
  void add_gemm(PassTime& p, double m, double n, double k, Output output = Output::written) const;
  void add_attention(PassTime& p, double m, double n, double k, double batch) const;
  // model.attention = "flash": the fused core of `batch` heads of `seq`
  // tokens (head width `dh`), forward and backward, at the preset's
  // flash_attention_efficiency of the matrix peak over the causal mask's tiles.
  void add_flash_attention(PieceTime& t, double seq, double dh, double batch) const;
  void add_stream(PassTime& p, Stream what, double bytes, int kernels) const;
  void add_linear(PieceTime& t, double rows, double in, double out) const;
};

}  // namespace pipebench
