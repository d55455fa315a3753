// The cpu backend's element-wise and row kernels
// (pipebench/backends/cpu_simd.hpp), each build (scalar, avx2, avx512: those
// this build and CPU have) on the same data, in the shapes one micro-batch of
// the h512 s256 ×4 step gives them (1024 tokens): GELU forward and backward
// over tokens × ffn (2048), LayerNorm and softmax rows, bias sums, AdamW over 4
// M parameters.
//   <kernel>/<build>   reports elements/s; compare builds within one launch
// (a noisy machine moves every figure; the ratio between builds moves less).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipebench/backends/cpu_simd.hpp"

namespace {

using pipebench::cpu::SimdKernels;
using pipebench::cpu::SimdPath;

constexpr int kTokens = 1024, kHidden = 512, kFfn = 2048, kSeq = 256;
constexpr std::int64_t kParams = 4 << 20;

std::vector<float> ramp(std::int64_t n, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = lo + (hi - lo) * static_cast<float>((i * 7919) % n) / static_cast<float>(n);
  return v;
}

template <class F>
void run(benchmark::State& state, std::int64_t elements, F&& body) {
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * elements);
}

void register_build(const SimdKernels& k) {
  const std::string b = k.name;
  const std::int64_t act = std::int64_t{kTokens} * kFfn;
  benchmark::RegisterBenchmark(("gelu_forward/" + b).c_str(), [&k, act](benchmark::State& s) {
    const auto x = ramp(act, -6, 6);
    std::vector<float> y(x.size());
    run(s, act, [&] { k.gelu_forward(x.data(), y.data(), act); });
  });
  benchmark::RegisterBenchmark(("gelu_backward/" + b).c_str(), [&k, act](benchmark::State& s) {
    const auto x = ramp(act, -6, 6), dy = ramp(act, -1, 1);
    std::vector<float> dx(x.size());
    run(s, act, [&] { k.gelu_backward(x.data(), dy.data(), dx.data(), act); });
  });
  benchmark::RegisterBenchmark(("bias_gelu_rows/" + b).c_str(), [&k, act](benchmark::State& s) {
    const auto x = ramp(act, -6, 6);
    const std::vector<float> bias(kFfn, 0.0f);  // pre stays x from one iteration to the next
    std::vector<float> pre = x, out(x.size());
    run(s, act, [&] { k.bias_gelu_rows(pre.data(), bias.data(), out.data(), kTokens, kFfn); });
  });
  benchmark::RegisterBenchmark(("softmax_row/" + b).c_str(), [&k](benchmark::State& s) {
    // Causal attention rows: row i has i + 1 entries, per head.
    const auto p = ramp(std::int64_t{kSeq} * kSeq, -4, 4);
    std::vector<float> w = p;
    run(s, std::int64_t{kSeq} * (kSeq + 1) / 2, [&] {
      for (int i = 0; i < kSeq; ++i) k.softmax_row(w.data() + std::int64_t{i} * kSeq, i + 1);
    });
  });
  benchmark::RegisterBenchmark(("softmax_backward_row/" + b).c_str(), [&k](benchmark::State& s) {
    const auto p = ramp(std::int64_t{kSeq} * kSeq, 0, 0.01f), d0 = ramp(std::int64_t{kSeq} * kSeq, -1, 1);
    std::vector<float> d = d0;
    run(s, std::int64_t{kSeq} * (kSeq + 1) / 2, [&] {
      for (int i = 0; i < kSeq; ++i)
        k.softmax_backward_row(p.data() + std::int64_t{i} * kSeq, d.data() + std::int64_t{i} * kSeq, i + 1);
    });
  });
  benchmark::RegisterBenchmark(("layernorm_row/" + b).c_str(), [&k](benchmark::State& s) {
    const std::int64_t n = std::int64_t{kTokens} * kHidden;
    const auto x = ramp(n, -2, 2), g = ramp(kHidden, 0.9f, 1.1f), be = ramp(kHidden, -0.1f, 0.1f);
    std::vector<float> y(x.size());
    float mean = 0, rstd = 0;
    run(s, n, [&] {
      for (int t = 0; t < kTokens; ++t)
        k.layernorm_row(x.data() + std::int64_t{t} * kHidden, g.data(), be.data(), y.data() + std::int64_t{t} * kHidden,
                        kHidden, mean, rstd);
    });
  });
  benchmark::RegisterBenchmark(("layernorm_backward_input_row/" + b).c_str(), [&k](benchmark::State& s) {
    const std::int64_t n = std::int64_t{kTokens} * kHidden;
    const auto x = ramp(n, -2, 2), d = ramp(n, -1, 1), g = ramp(kHidden, 0.9f, 1.1f);
    std::vector<float> dx(x.size());
    run(s, n, [&] {
      for (int t = 0; t < kTokens; ++t)
        k.layernorm_backward_input_row(d.data() + std::int64_t{t} * kHidden, x.data() + std::int64_t{t} * kHidden,
                                       g.data(), 0.1f, 1.2f, dx.data() + std::int64_t{t} * kHidden, kHidden);
    });
  });
  benchmark::RegisterBenchmark(("sum_rows/" + b).c_str(), [&k, act](benchmark::State& s) {
    const auto dy = ramp(act, -1, 1);
    std::vector<float> db(kFfn);
    run(s, act, [&] { k.sum_rows(dy.data(), db.data(), kTokens, kFfn); });
  });
  benchmark::RegisterBenchmark(("adamw/" + b).c_str(), [&k](benchmark::State& s) {
    std::vector<float> p = ramp(kParams, -0.1f, 0.1f), g = ramp(kParams, -1e-3f, 1e-3f), m(p.size()), v(p.size());
    run(s, kParams, [&] {
      k.adamw(p.data(), g.data(), m.data(), v.data(), kParams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.5f, 0.1f, 1.0f);
    });
  });
}

}  // namespace

int main(int argc, char** argv) {
  for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512})
    if (const SimdKernels* k = pipebench::cpu::simd_kernels(p)) register_build(*k);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
