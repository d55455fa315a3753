// One `gpt` block, forward + backward, on the cpu backend (1 OpenBLAS thread),
// against the same GEMMs alone through cblas_sgemm in the same process:
//   block/<hidden>/<seq>  the backend's forward(mb) + backward(mb) of a middle stage
//   gemm/<hidden>/<seq>   only the block's GEMMs (4 forward + 8 backward linear
//                         GEMMs, 2 forward + 4 backward attention GEMMs per head
//                         and block of queries, the shapes cpu::attention_* use)
// Both report GFLOP/s of the block's model FLOPs (docs/model.md: 3 x forward,
// attention over all s x s pairs, of which the causal products skip about
// half), so block/gemm is the share of the GEMM-only rate the whole block reaches.
#include <algorithm>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/core/config.hpp"

namespace {

using namespace pipebench;

constexpr int kBatch = 1;  // micro_batch_size

Job block_job(int hidden, int seq) {
  return parse_job(fmt::format(R"(schema = 1
[job]
name = "bench"
[model]
hidden = {}
layers = 3
heads = {}
seq_len = {}
vocab = 64
[device]
memory_capacity = "16GiB"
threads_per_rank = 1
[[run]]
name = "r"
)", hidden, hidden / 64, seq),
                   "bench.toml");
}

double block_flops(const Job& job) { return 3.0 * ModelDesc(job.model, DType::fp32).block(kBatch).forward_flops; }

void BM_Block(benchmark::State& state) {
  const Job job = block_job(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  CpuBackend be(job, 1);
  StageSpec spec;
  spec.rank = 1;
  spec.num_stages = 3;
  spec.one_chunk({1, 1, false, false});
  spec.micro_batch_size = kBatch;
  spec.num_microbatches = 1;
  be.build(spec);
  be.begin_step(0, 1e300);
  auto fill = [](Buffer b, float v) { std::fill_n(static_cast<float*>(b.data), b.bytes / sizeof(float), v); };
  fill(be.recv_buffer(ActionKind::F, 0, 0), 0.1f);
  fill(be.recv_buffer(ActionKind::B, 0, 0), 0.01f);
  for (auto _ : state) {
    be.forward(0, 0, 0);
    be.backward(0, 0, 0);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(block_flops(job) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemmOnly(benchmark::State& state) {
  const Job job = block_job(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  cpu::set_blas_threads(1);
  const int h = job.model.hidden, f = job.model.ffn_hidden, s = job.model.seq_len, T = kBatch * s;
  const int heads = job.model.heads, d = h / heads;
  // Every operand of every GEMM below fits in n = max(T, 3h, f)^2 floats.
  const auto side = static_cast<std::size_t>(std::max({T, 3 * h, f}));
  std::vector<float> a(side * side, 0.1f), w(side * side, 0.01f), c(side * side);
  // (M, N, K) of y = x·W per linear layer; backward: dW = xᵀ·dy (K,N,M) and dx = dy·Wᵀ (M,K,N).
  const int linears[4][3] = {{T, 3 * h, h}, {T, h, h}, {T, f, h}, {T, h, f}};
  auto gemm = [&](int M, int N, int K) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, w.data(), N, 0.0f, c.data(), N);
  };
  for (auto _ : state) {
    for (const auto& l : linears) {
      gemm(l[0], l[1], l[2]);
      gemm(l[2], l[1], l[0]);
      gemm(l[0], l[2], l[1]);
    }
    for (int b = 0; b < kBatch * heads; ++b)  // per block of queries (keys), as cpu::attention_* run them
      for (int i0 = 0; i0 < s; i0 += cpu::kCausalBlock) {
        const int i1 = std::min(i0 + cpu::kCausalBlock, s), rows = i1 - i0;
        gemm(rows, i1, d);      // QKᵀ
        gemm(rows, d, i1);      // P·V
        gemm(rows, i1, d);      // dP
        gemm(rows, d, i1);      // dQ
        gemm(rows, d, s - i0);  // dV
        gemm(rows, d, s - i0);  // dK
      }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(block_flops(job) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int h : {256, 512, 1024})
    for (int s : {128, 512}) b->Args({h, s});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_GemmOnly)->Name("gemm")->Apply(Shapes);
BENCHMARK(BM_Block)->Name("block")->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
