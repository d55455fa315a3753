// Device presets (docs/time-model.md): the published facts of one GPU and
// its node that the hardware time model (model/time_model.hpp) turns into
// seconds. `[device] preset = "a100-80gb"` selects one; it also fills the
// [device] keys the sim backend and the planner already read (memory
// capacity, GPUs per node, the intra- and inter-node links) unless the
// workload sets them itself. Every figure names its source in
// docs/time-model.md; the ones marked "assumed" there are this project's
// estimates, to be replaced by measurements (bench_cuda_gemm, nccl-tests).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/gemm_efficiency.hpp"

namespace pipebench {

// A collective link level: nccl-tests' bus bandwidth per GPU (bytes/s) of a
// large ring collective, and the fixed cost of one collective or transfer.
struct LinkPreset {
  double bus_bytes_per_s;
  double latency_s;
};

struct DevicePreset {
  std::string_view name;
  std::string_view description;
  std::uint64_t memory_bytes;    // as the driver reports it
  int gpus_per_node;
  // Peak dense FLOP/s: tensor cores for fp16 and bf16, fp32 without TF32.
  double matrix_flops_16bit;
  double fp32_flops;
  int sms;                       // streaming multiprocessors (wave quantization)
  double hbm_bytes_per_s;        // peak memory bandwidth
  double hbm_efficiency;         // the fraction streaming kernels reach
  double kernel_launch_s;        // fixed cost per kernel
  std::span<const GemmEfficiencyPoint> gemm_efficiency;
  // The share of an accumulating GEMM's read of its output (beta = 1: the
  // fp32 weight-gradient accumulation, 4 bytes an element) that is not hidden
  // behind its math: 1 where the kernel reads it in an epilogue after the
  // mainloop, the tensor cores idle (Ampere's non-persistent GEMM kernels),
  // 0 where the read overlaps the math (docs/time-model.md, "GEMMs").
  double gemm_accumulate_serial;
  LinkPreset intra_node;         // NVLink / NVSwitch
  LinkPreset inter_node;         // one InfiniBand rail per GPU
  // The share of the matrix peak a fused flash attention (forward and
  // backward) reaches on this GPU (docs/time-model.md, "Flash attention";
  // FlashAttention-2's own figures: its paper on A100, FlashAttention-3's
  // paper on H100).
  double flash_attention_efficiency;
};

// All presets, in a fixed order.
std::span<const DevicePreset> device_presets();
// The preset called `name`, or nullptr.
const DevicePreset* find_device_preset(std::string_view name);
// The preset of a GPU by the name CUDA and nvidia-smi give it ("NVIDIA H200",
// "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), or nullptr: only the SXM
// parts the presets describe, not the PCIe and NVL cards (fewer SMs, lower
// clocks or power). bench_cuda_gemm also checks the SM count.
const DevicePreset* device_preset_for_gpu(std::string_view gpu_name);

struct DeviceSpec;  // core/job.hpp
// The device a workload's [device] table models: its preset with the figures
// the workload measured itself in their place (gemm_efficiency,
// hbm_efficiency, kernel_launch_us; docs/time-model.md, "Your own figures").
// `spec.preset` must be set. The result's gemm_efficiency views
// `spec.gemm_efficiency` when the workload gives one: valid while `spec` lives.
DevicePreset device_model(const DeviceSpec& spec);
// The keys of those figures `spec` sets, in that order; empty when it uses
// the preset's throughout.
std::vector<std::string_view> own_device_figures(const DeviceSpec& spec);
// How the plan and the report name the modelled device: the preset's name,
// and "with the workload's own K1, K2" when own_device_figures is not empty.
std::string device_model_name(const DeviceSpec& spec);

}  // namespace pipebench
