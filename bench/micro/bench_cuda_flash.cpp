// The cuda backend's flash attention kernels on this GPU (kernels_flash.cu,
// model.attention = "flash"): forward and backward of B sequences of s
// tokens, `heads` query heads over `kv_heads` K/V heads of width d, in the
// storage dtype, median of 20 CUDA-event-timed calls after 2 warm-ups, and
// their TFLOP/s by the causal attention's model FLOPs (forward 2·B·heads·s²·d,
// half of QKᵀ and P·V over all pairs; backward 2.5x). tools/gpu-check.sh
// prints PyTorch's scaled_dot_product_attention at the same shapes beside it
// (tools/torch_reference.py sdpa).
//   bench_cuda_flash [DTYPE B S HEADS KV_HEADS D]...   (default: bf16 1 8192 32 8 128)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pipebench/backends/backend_cuda.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/error.hpp"

int main(int argc, char** argv) {
  using namespace pipebench;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) args = {"bf16", "1", "8192", "32", "8", "128"};
  if (args.size() % 6 != 0) {
    std::fprintf(stderr, "bench_cuda_flash: give DTYPE B S HEADS KV_HEADS D groups\n");
    return 2;
  }
  try {
    cuda_set_device(0);
    for (std::size_t i = 0; i < args.size(); i += 6) {
      const DType dt = args[i] == "fp32" ? DType::fp32 : args[i] == "fp16" ? DType::fp16 : DType::bf16;
      const int B = std::atoi(args[i + 1].c_str()), s = std::atoi(args[i + 2].c_str());
      const int heads = std::atoi(args[i + 3].c_str()), kv = std::atoi(args[i + 4].c_str()), d = std::atoi(args[i + 5].c_str());
      const FlashTiming t = time_flash_attention(dt, B, s, heads, kv, d, 20);
      const double flops = 2.0 * B * heads * static_cast<double>(s) * s * d;
      std::printf("flash %s B %d s %d heads %d kv_heads %d d %d: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
                  "(%.1f TFLOP/s)\n",
                  args[i].c_str(), B, s, heads, kv, d, 1e3 * t.forward_s, flops / t.forward_s / 1e12, 1e3 * t.backward_s,
                  2.5 * flops / t.backward_s / 1e12);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cuda_flash: %s\n", e.what());
    return 1;
  }
  return 0;
}
