// The cuda backend's GEMM descriptions (gemm_layout.hpp), executed on the CPU
// exactly as the backend hands them to cuBLAS (column-major, first operand B,
// batched by strides) with column-major CBLAS, against the cpu backend's
// kernels: linear layers and attention forward and backward. This checks
// every argument the GPU path passes without a GPU.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/gemm_layout.hpp"

using namespace pipebench;

namespace {

// What cublasGemm(StridedBatched)Ex computes with these arguments.
void run(const gemm::RowMajor& g, const float* A, const float* B, float* C) {
  const gemm::ColumnMajor c = gemm::to_column_major(g);
  for (int i = 0; i < c.batch; ++i)
    cblas_sgemm(CblasColMajor, c.trans_first ? CblasTrans : CblasNoTrans, c.trans_second ? CblasTrans : CblasNoTrans,
                c.m, c.n, c.k, c.alpha, B + i * c.stride_first, c.ld_first, A + i * c.stride_second, c.ld_second, c.beta,
                C + i * c.stride_c, c.ldc);
}

std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void require_close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-4f) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i]) / (1.0f + std::abs(want[i]))));
  CHECK(worst < tol);
}

// The kernels.cu causal softmax and its backward, on one [rows, s] stack.
void causal_softmax(float* P, int s, int matrices) {
  for (int r = 0; r < s * matrices; ++r) {
    float* row = P + static_cast<std::int64_t>(r) * s;
    const int i = r % s;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
    for (int j = 0; j <= i; ++j) sum += std::exp(row[j] - mx);
    for (int j = 0; j < s; ++j) row[j] = j <= i ? std::exp(row[j] - mx) / sum : 0.0f;
  }
}
void causal_softmax_backward(const float* P, float* dP, int s, int matrices) {
  for (int r = 0; r < s * matrices; ++r) {
    const float* p = P + static_cast<std::int64_t>(r) * s;
    float* d = dP + static_cast<std::int64_t>(r) * s;
    const int i = r % s;
    float dot = 0.0f;
    for (int j = 0; j <= i; ++j) dot += p[j] * d[j];
    for (int j = 0; j < s; ++j) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
  }
}

}  // namespace

TEST_CASE("gemm layout: linear forward and backward as cuBLAS gets them equal the cpu kernels", "[gemm_layout]") {
  const int T = 7, in = 5, out = 3;
  const auto x = random_vector(T * in, 1), W = random_vector(in * out, 2), dy = random_vector(T * out, 3);
  for (bool accumulate : {false, true}) {
    auto y_cpu = random_vector(T * out, 4), y_gpu = y_cpu;
    cpu::linear_forward(x.data(), W.data(), nullptr, y_cpu.data(), T, in, out, accumulate);
    run(gemm::linear_forward(T, in, out, accumulate), x.data(), W.data(), y_gpu.data());
    require_close(y_gpu, y_cpu);

    auto dx_cpu = random_vector(T * in, 5), dx_gpu = dx_cpu;
    auto dW_cpu = random_vector(in * out, 6), dW_gpu = dW_cpu;
    cpu::linear_backward(x.data(), W.data(), dy.data(), dx_cpu.data(), dW_cpu.data(), nullptr, T, in, out, accumulate);
    run(gemm::linear_weight_grad(T, in, out), x.data(), dy.data(), dW_gpu.data());
    run(gemm::linear_input_grad(T, in, out, accumulate), dy.data(), W.data(), dx_gpu.data());
    require_close(dW_gpu, dW_cpu);
    require_close(dx_gpu, dx_cpu);
  }
}

TEST_CASE("gemm layout: attention forward and backward per sequence, all heads batched, equal the cpu kernels",
          "[gemm_layout]") {
  const int B = 2, s = 6, h = 12, heads = 3;
  const int T = B * s;
  const auto qkv = random_vector(static_cast<std::size_t>(T) * 3 * h, 7);
  const auto dout = random_vector(static_cast<std::size_t>(T) * h, 8);
  const gemm::Attention at(s, h, heads);
  const auto ss = static_cast<std::size_t>(at.ss());

  // The cpu backend.
  std::vector<float> probs_cpu(B * heads * ss), out_cpu(T * h), dqkv_cpu(T * 3 * h), scratch(ss);
  cpu::attention_forward(qkv.data(), probs_cpu.data(), out_cpu.data(), B, s, h, heads);
  cpu::attention_backward(dout.data(), qkv.data(), probs_cpu.data(), dqkv_cpu.data(), scratch.data(), B, s, h, heads);

  // The cuda backend's sequence of products (backend_cuda.cpp), on the CPU.
  std::vector<float> probs(B * heads * ss), out(T * h), dqkv(T * 3 * h, 99.0f), dP(heads * ss);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + static_cast<std::size_t>(b) * s * 3 * h;
    run(at.scores(), q, q + h, probs.data() + b * heads * ss);
  }
  causal_softmax(probs.data(), s, B * heads);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + static_cast<std::size_t>(b) * s * 3 * h;
    run(at.values(), probs.data() + b * heads * ss, q + 2 * h, out.data() + static_cast<std::size_t>(b) * s * h);
  }
  require_close(probs, probs_cpu);
  require_close(out, out_cpu);

  for (int b = 0; b < B; ++b) {
    const std::size_t base = static_cast<std::size_t>(b) * s * 3 * h;
    const float* q = qkv.data() + base;
    float* dq = dqkv.data() + base;
    const float* P = probs.data() + b * heads * ss;
    const float* dO = dout.data() + static_cast<std::size_t>(b) * s * h;
    run(at.dv(), P, dO, dq + 2 * h);
    run(at.dp(), dO, q + 2 * h, dP.data());
    causal_softmax_backward(P, dP.data(), s, heads);
    run(at.dq(), dP.data(), q + h, dq);
    run(at.dk(), dP.data(), q, dq + h);
  }
  require_close(dqkv, dqkv_cpu);  // every element overwritten (the 99s are gone) and equal
}

TEST_CASE("gemm layout: grouped-query attention per sequence, batched per group with K/V broadcast, equals the cpu kernels",
          "[gemm_layout]") {
  const int B = 2, s = 6, h = 12, heads = 6, kv_heads = 2;
  const gemm::GroupedAttention at(s, h, heads, kv_heads);
  const int T = B * s, ld = at.ld;
  const auto qkv = random_vector(static_cast<std::size_t>(T) * ld, 17);
  const auto dout = random_vector(static_cast<std::size_t>(T) * h, 18);
  const auto ss = static_cast<std::size_t>(at.ss());
  REQUIRE(at.group == 3);
  REQUIRE(ld == h + 2 * kv_heads * (h / heads));

  // The cpu backend.
  std::vector<float> probs_cpu(B * heads * ss), out_cpu(T * h), dqkv_cpu(T * ld), scratch(ss);
  cpu::attention_forward(qkv.data(), probs_cpu.data(), out_cpu.data(), B, s, h, heads, kv_heads);
  cpu::attention_backward(dout.data(), qkv.data(), probs_cpu.data(), dqkv_cpu.data(), scratch.data(), B, s, h, heads,
                          kv_heads);

  // The products a cuda backend hands cuBLAS, on the CPU.
  std::vector<float> probs(B * heads * ss), out(T * h), dqkv(T * ld, 99.0f), dP(heads * ss);
  for (int b = 0; b < B; ++b) {
    const float* seq = qkv.data() + static_cast<std::size_t>(b) * s * ld;
    for (int g = 0; g < kv_heads; ++g)
      run(at.scores(), seq + at.q_offset(g * at.group), seq + at.k_offset(g), probs.data() + (b * heads + g * at.group) * ss);
  }
  causal_softmax(probs.data(), s, B * heads);
  for (int b = 0; b < B; ++b) {
    const float* seq = qkv.data() + static_cast<std::size_t>(b) * s * ld;
    for (int g = 0; g < kv_heads; ++g)
      run(at.values(), probs.data() + (b * heads + g * at.group) * ss, seq + at.v_offset(g),
          out.data() + static_cast<std::size_t>(b) * s * h + at.q_offset(g * at.group));
  }
  require_close(probs, probs_cpu);
  require_close(out, out_cpu);

  for (int b = 0; b < B; ++b) {
    const std::size_t base = static_cast<std::size_t>(b) * s * ld;
    const float* seq = qkv.data() + base;
    float* dseq = dqkv.data() + base;
    const float* P = probs.data() + b * heads * ss;
    const float* dO = dout.data() + static_cast<std::size_t>(b) * s * h;
    for (int g = 0; g < kv_heads; ++g) {
      const int first = g * at.group;
      run(at.dp(), dO + at.q_offset(first), seq + at.v_offset(g), dP.data() + first * ss);
      causal_softmax_backward(P + first * ss, dP.data() + first * ss, s, at.group);
      run(at.dq(), dP.data() + first * ss, seq + at.k_offset(g), dseq + at.q_offset(first));
      // As backend_cuda_llama.cpp: summed over the group's heads into fp32
      // [2, s, d] (gqa_grad_sums, row length d), then stored at the group's
      // K/V columns (store_rows, row length ld).
      std::vector<float> sums(2 * static_cast<std::size_t>(s) * at.d, 77.0f);
      float* dv_sum = sums.data();
      float* dk_sum = dv_sum + static_cast<std::size_t>(s) * at.d;
      for (int i = first; i < first + at.group; ++i) {
        run(at.dv(i == first, true), P + i * ss, dO + at.q_offset(i), dv_sum);
        run(at.dk(i == first, true), dP.data() + i * ss, seq + at.q_offset(i), dk_sum);
      }
      for (int r = 0; r < s; ++r)
        for (int c = 0; c < at.d; ++c) {
          dseq[static_cast<std::size_t>(r) * ld + at.v_offset(g) + c] = dv_sum[r * at.d + c];
          dseq[static_cast<std::size_t>(r) * ld + at.k_offset(g) + c] = dk_sum[r * at.d + c];
        }
    }
  }
  require_close(dqkv, dqkv_cpu);  // every element overwritten (the 99s are gone) and equal
}
