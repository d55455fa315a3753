#include "pipebench/core/device_preset.hpp"

#include <array>

#include "pipebench/core/job.hpp"

namespace pipebench {

namespace {

// docs/time-model.md, "GEMM efficiency": the shape of the table is assumed
// (until bench_cuda_gemm measures each GPU); its level follows the published
// maximum achievable matmul FLOP/s (MAMF) of each part. The A100's table
// reaches 0.966 of the A100's MAMF at that measurement's best shape.
constexpr std::array<GemmEfficiencyPoint, 7> kGemmEfficiencyA100{{
    {32, 0.40}, {64, 0.55}, {128, 0.68}, {256, 0.76}, {512, 0.80}, {1024, 0.83}, {4096, 0.85}}};

// The same shape scaled so that the H100's table reaches the same share of
// the H100's MAMF at its best shape (80.3% of peak against the A100's 86.9%,
// the waves of each best shape set aside): 0.80 / 0.85. The published
// measurement covers the H200 too ("H200 is the same": one compute die).
constexpr double kHopperScale = 0.80 / 0.85;
constexpr std::array<GemmEfficiencyPoint, 7> scaled(const std::array<GemmEfficiencyPoint, 7>& table, double f) {
  std::array<GemmEfficiencyPoint, 7> out{};
  for (std::size_t i = 0; i < table.size(); ++i) out[i] = {table[i].k, table[i].efficiency * f};
  return out;
}
constexpr std::array<GemmEfficiencyPoint, 7> kGemmEfficiencyHopper = scaled(kGemmEfficiencyA100, kHopperScale);

constexpr std::uint64_t MiB(std::uint64_t n) { return n << 20; }

// Flash attention's share of the matrix peak, forward and backward
// (FlashAttention-2, what PyTorch's scaled_dot_product_attention and
// Megatron-LM run on these GPUs). A100: "50-73% of the theoretical maximum
// FLOPs/s" (Dao 2023, arXiv 2307.08691, abstract), its lower end taken — the
// training figure includes the backward, its slower pass. H100 and H200:
// "FlashAttention-2 achieves only 35% utilization on the H100 GPU" (Shah et
// al. 2024, FlashAttention-3, arXiv 2407.08608, abstract); FlashAttention-3
// reaches 75% there, where a stack runs it.
constexpr double kFlashA100 = 0.50;
constexpr double kFlashHopper = 0.35;

// Figures and sources: docs/time-model.md, "Presets".
const std::array<DevicePreset, 3> kPresets{{
    {"a100-80gb", "NVIDIA A100-SXM4-80GB, DGX A100 node (8 GPUs, NVLink 3 via NVSwitch, 8x HDR 200 Gb/s)",
     MiB(81920), 8, 312e12, 19.5e12, 108, 2039e9, 0.85, 5e-6, kGemmEfficiencyA100, 1.0,
     LinkPreset{200e9, 10e-6}, LinkPreset{23e9, 20e-6}, kFlashA100},
    {"h100-80gb", "NVIDIA H100-SXM5-80GB, DGX H100 node (8 GPUs, NVLink 4 via NVSwitch, 8x NDR 400 Gb/s)",
     MiB(81559), 8, 989.4e12, 66.9e12, 132, 3350e9, 0.85, 5e-6, kGemmEfficiencyHopper, 0.0,
     LinkPreset{370e9, 10e-6}, LinkPreset{46e9, 20e-6}, kFlashHopper},
    {"h200-141gb", "NVIDIA H200-SXM-141GB, HGX H200 node (8 GPUs, NVLink 4 via NVSwitch, 8x NDR 400 Gb/s)",
     MiB(143771), 8, 989.4e12, 66.9e12, 132, 4800e9, 0.85, 5e-6, kGemmEfficiencyHopper, 0.0,
     LinkPreset{370e9, 10e-6}, LinkPreset{46e9, 20e-6}, kFlashHopper},
}};

}  // namespace

std::span<const DevicePreset> device_presets() { return kPresets; }

const DevicePreset* find_device_preset(std::string_view name) {
  for (const DevicePreset& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

const DevicePreset* device_preset_for_gpu(std::string_view gpu_name) {
  const auto has = [&](std::string_view part) { return gpu_name.find(part) != std::string_view::npos; };
  if (has("PCIe") || has("NVL") || has("GH200")) return nullptr;
  if (has("H200")) return find_device_preset("h200-141gb");
  if (has("H100") && has("HBM3")) return find_device_preset("h100-80gb");  // "NVIDIA H100 80GB HBM3": the SXM5 part
  if (has("A100-SXM4-80GB")) return find_device_preset("a100-80gb");
  return nullptr;
}

DevicePreset device_model(const DeviceSpec& spec) {
  DevicePreset d = *spec.preset;
  if (!spec.gemm_efficiency.empty()) d.gemm_efficiency = spec.gemm_efficiency;
  if (spec.hbm_efficiency > 0.0) d.hbm_efficiency = spec.hbm_efficiency;
  if (spec.kernel_launch_us >= 0.0) d.kernel_launch_s = spec.kernel_launch_us * 1e-6;
  if (spec.gemm_accumulate_serial >= 0.0) d.gemm_accumulate_serial = spec.gemm_accumulate_serial;
  return d;
}

std::vector<std::string_view> own_device_figures(const DeviceSpec& spec) {
  std::vector<std::string_view> keys;
  if (!spec.gemm_efficiency.empty()) keys.push_back("gemm_efficiency");
  if (spec.hbm_efficiency > 0.0) keys.push_back("hbm_efficiency");
  if (spec.kernel_launch_us >= 0.0) keys.push_back("kernel_launch_us");
  if (spec.gemm_accumulate_serial >= 0.0) keys.push_back("gemm_accumulate_serial");
  return keys;
}

std::string device_model_name(const DeviceSpec& spec) {
  std::string name(spec.preset->name);
  const auto own = own_device_figures(spec);
  for (std::size_t i = 0; i < own.size(); ++i) name += (i == 0 ? " with the workload's own " : ", ") + std::string(own[i]);
  return name;
}

}  // namespace pipebench
