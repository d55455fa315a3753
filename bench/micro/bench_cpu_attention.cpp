// The cpu backend's attention core, materialized (cpu_kernels.hpp) against
// flash (cpu_flash_attention.hpp), forward then backward of one micro-batch
// of one sequence: heads 4 (2 K/V heads), head width d, sequence s.
//   attention/<materialized|flash>/s:<s>/d:<d>   reports tokens/s
// Compare the two within one launch (a noisy machine moves every figure;
// the ratio moves less). Flash does the same products in 64 x 64 tiles with
// one more QKᵀ in the backward; what it saves is the s x s memory, not time.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "pipebench/backends/cpu_flash_attention.hpp"
#include "pipebench/backends/cpu_kernels.hpp"

namespace {

constexpr int kHeads = 4, kKvHeads = 2;

std::vector<float> ramp(std::size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>((i * 7919) % n) / static_cast<float>(n);
  return v;
}

void attention(benchmark::State& state, bool flash) {
  const int s = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1)), C = kHeads * d;
  const int ld = C + 2 * kKvHeads * d;
  const auto qkv = ramp(static_cast<std::size_t>(s) * ld, -1, 1), dout = ramp(static_cast<std::size_t>(s) * C, -1, 1);
  std::vector<float> out(static_cast<std::size_t>(s) * C), dqkv(qkv.size());
  std::vector<float> kept(flash ? static_cast<std::size_t>(kHeads) * s : static_cast<std::size_t>(kHeads) * s * s);
  std::vector<float> scratch(flash ? static_cast<std::size_t>(pipebench::kCpuFlashScratchFloats)
                                   : static_cast<std::size_t>(s) * s);
  for (auto _ : state) {
    if (flash) {
      pipebench::cpu::flash_attention_forward(qkv.data(), out.data(), kept.data(), scratch.data(), 1, s, C, kHeads, kKvHeads);
      pipebench::cpu::flash_attention_backward(dout.data(), qkv.data(), out.data(), kept.data(), dqkv.data(),
                                               scratch.data(), 1, s, C, kHeads, kKvHeads);
    } else {
      pipebench::cpu::attention_forward(qkv.data(), kept.data(), out.data(), 1, s, C, kHeads, kKvHeads);
      pipebench::cpu::attention_backward(dout.data(), qkv.data(), kept.data(), dqkv.data(), scratch.data(), 1, s, C,
                                         kHeads, kKvHeads);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s);
}

}  // namespace

int main(int argc, char** argv) {
  pipebench::cpu::set_blas_threads(1);
  for (const bool flash : {false, true})
    benchmark::RegisterBenchmark(flash ? "attention/flash" : "attention/materialized",
                                 [flash](benchmark::State& st) { attention(st, flash); })
        ->ArgNames({"s", "d"})
        ->Args({512, 64})
        ->Args({2048, 64})
        ->Args({2048, 8})
        ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
