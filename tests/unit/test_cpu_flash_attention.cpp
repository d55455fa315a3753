// The cpu backend's flash attention kernels (cpu_flash_attention.hpp)
// against the materialized attention (cpu_kernels.hpp) and by finite
// differences: sequences across the tile edges, grouped-query heads, the
// blocks at position offsets (what context parallelism runs) and their
// merge by log-sum-exp.
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/gradient_check.hpp"

#include "pipebench/backends/cpu_flash_attention.hpp"
#include "pipebench/backends/cpu_kernels.hpp"

using namespace pipebench;
using testing::check_gradient;
using testing::dot;
using testing::randn;

namespace {

struct Shape {
  int B, s, C, heads, kv_heads;
  int d() const { return C / heads; }
  int ld() const { return C + 2 * kv_heads * d(); }
  std::size_t tokens() const { return static_cast<std::size_t>(B) * s; }
};

// The largest |a − b| / (1 + |b|).
double worst(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    w = std::max(w, std::fabs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::fabs(static_cast<double>(b[i]))));
  return w;
}

struct Result {
  std::vector<float> out, dqkv, lse;
};

Result flash(const Shape& z, const std::vector<float>& qkv, const std::vector<float>& dout) {
  Result r{std::vector<float>(z.tokens() * z.C), std::vector<float>(qkv.size(), 99.0f),
           std::vector<float>(static_cast<std::size_t>(z.B) * z.heads * z.s)};
  std::vector<float> scratch(kCpuFlashScratchFloats, 99.0f);
  cpu::flash_attention_forward(qkv.data(), r.out.data(), r.lse.data(), scratch.data(), z.B, z.s, z.C, z.heads, z.kv_heads);
  cpu::flash_attention_backward(dout.data(), qkv.data(), r.out.data(), r.lse.data(), r.dqkv.data(), scratch.data(), z.B,
                                z.s, z.C, z.heads, z.kv_heads);
  return r;
}

Result materialized(const Shape& z, const std::vector<float>& qkv, const std::vector<float>& dout) {
  Result r{std::vector<float>(z.tokens() * z.C), std::vector<float>(qkv.size()), {}};
  std::vector<float> probs(static_cast<std::size_t>(z.B) * z.heads * z.s * z.s),
      scratch(static_cast<std::size_t>(z.s) * z.s);
  cpu::attention_forward(qkv.data(), probs.data(), r.out.data(), z.B, z.s, z.C, z.heads, z.kv_heads);
  cpu::attention_backward(dout.data(), qkv.data(), probs.data(), r.dqkv.data(), scratch.data(), z.B, z.s, z.C, z.heads,
                          z.kv_heads);
  return r;
}

}  // namespace

TEST_CASE("flash attention equals the materialized attention across tile edges and query groups", "[cpu][flash]") {
  // One row; just under, at and over one 64-row tile; two tiles and a part.
  for (const Shape z : {Shape{2, 1, 32, 2, 2}, Shape{2, 63, 32, 2, 2}, Shape{1, 64, 128, 2, 2}, Shape{2, 65, 32, 4, 2},
                        Shape{1, 200, 64, 4, 1}, Shape{1, 135, 256, 4, 4}}) {
    INFO("B " << z.B << " s " << z.s << " C " << z.C << " heads " << z.heads << " kv_heads " << z.kv_heads);
    const auto qkv = randn(z.tokens() * z.ld(), 41), dout = randn(z.tokens() * z.C, 42);
    const Result f = flash(z, qkv, dout), m = materialized(z, qkv, dout);
    CHECK(worst(f.out, m.out) < 1e-5);
    CHECK(worst(f.dqkv, m.dqkv) < 1e-5);  // every element written (no 99 left)
    // The log-sum-exp of row i of head 0: log Σ_{j<=i} exp(q_i·k_j/√d).
    const int i = z.s - 1, d = z.d();
    double sum = 0.0;
    for (int j = 0; j <= i; ++j) {
      double x = 0.0;
      for (int c = 0; c < d; ++c) x += static_cast<double>(qkv[i * z.ld() + c]) * qkv[j * z.ld() + z.C + c];
      sum += std::exp(x / std::sqrt(static_cast<double>(d)));
    }
    CHECK(f.lse[static_cast<std::size_t>(i)] == Approx(std::log(sum)).epsilon(1e-5));
    CHECK(flash(z, qkv, dout).dqkv == f.dqkv);  // the same bits run to run
  }
}

TEST_CASE("flash attention: dqkv by finite differences, multi-head and grouped-query", "[cpu][flash][gradcheck]") {
  for (const Shape z : {Shape{2, 5, 8, 2, 2}, Shape{1, 7, 8, 4, 2}}) {
    auto qkv = randn(z.tokens() * z.ld(), 43);
    const auto R = randn(z.tokens() * z.C, 44);
    std::vector<float> out(z.tokens() * z.C), lse(static_cast<std::size_t>(z.B) * z.heads * z.s),
        scratch(kCpuFlashScratchFloats);
    auto loss = [&] {
      cpu::flash_attention_forward(qkv.data(), out.data(), lse.data(), scratch.data(), z.B, z.s, z.C, z.heads,
                                   z.kv_heads);
      return dot(out, R);
    };
    loss();
    std::vector<float> dqkv(qkv.size());
    cpu::flash_attention_backward(R.data(), qkv.data(), out.data(), lse.data(), dqkv.data(), scratch.data(), z.B, z.s,
                                  z.C, z.heads, z.kv_heads);
    check_gradient(qkv, dqkv, loss, "dqkv");
  }
}

TEST_CASE("flash attention blocks at position offsets merge by their log-sum-exp into the whole", "[cpu][flash]") {
  // One head, d = 16, s = 160 in two K/V runs [0, 96) and [96, 160); the
  // queries [64, 160) (what a context-parallel rank's chunk attends).
  const int s = 160, d = 16, split = 96, q0 = 64, nq = s - q0;
  const auto q = randn(static_cast<std::size_t>(s) * d, 45), k = randn(q.size(), 46), v = randn(q.size(), 47);
  const auto dout = randn(static_cast<std::size_t>(nq) * d, 48);
  const float scale = 0.25f;
  std::vector<float> scratch(kCpuFlashScratchFloats);
  const cpu::QueryRows queries{q.data() + q0 * d, d, nq, q0};
  const cpu::KeyRows all{k.data(), v.data(), d, s, 0}, first{k.data(), v.data(), d, split, 0},
      second{k.data() + split * d, v.data() + split * d, d, s - split, split};
  std::vector<float> whole(static_cast<std::size_t>(nq) * d), lse(nq);
  cpu::flash_forward_block(queries, all, d, scale, whole.data(), d, lse.data(), scratch.data());
  std::vector<float> a(whole.size()), b(whole.size()), la(nq), lb(nq);
  cpu::flash_forward_block(queries, first, d, scale, a.data(), d, la.data(), scratch.data());
  cpu::flash_forward_block(queries, second, d, scale, b.data(), d, lb.data(), scratch.data());
  // Queries before position 96 see nothing of the second run: −inf, output 0.
  CHECK(lb[0] == -std::numeric_limits<float>::infinity());
  CHECK(b[0] == 0.0f);
  std::vector<float> merged(whole.size());
  for (int r = 0; r < nq; ++r) {
    const double L = lb[r] == -std::numeric_limits<float>::infinity()
                         ? la[r]
                         : std::max(la[r], lb[r]) + std::log1p(std::exp(-std::fabs(la[r] - lb[r])));
    CHECK(L == Approx(lse[r]).epsilon(1e-6));
    for (int c = 0; c < d; ++c)
      merged[r * d + c] = static_cast<float>(a[r * d + c] * std::exp(la[r] - L) + b[r * d + c] * std::exp(lb[r] - L));
  }
  CHECK(worst(merged, whole) < 1e-5);
  // The backward of the two blocks with the whole's output and log-sum-exp
  // sums to the whole's gradients.
  std::vector<float> dq(whole.size(), 0.0f), dk(q.size(), 0.0f), dv(q.size(), 0.0f);
  cpu::flash_backward_block(queries, all, d, scale, whole.data(), dout.data(), d, lse.data(), dq.data(), d, dk.data(),
                            dv.data(), d, scratch.data());
  std::vector<float> dq2(whole.size(), 0.0f), dk2(q.size(), 0.0f), dv2(q.size(), 0.0f);
  for (const cpu::KeyRows& run : {first, second}) {
    const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(run.pos0) * d;
    cpu::flash_backward_block(queries, run, d, scale, whole.data(), dout.data(), d, lse.data(), dq2.data(), d,
                              dk2.data() + o, dv2.data() + o, d, scratch.data());
  }
  CHECK(worst(dq2, dq) < 1e-5);
  CHECK(worst(dk2, dk) < 1e-5);
  CHECK(worst(dv2, dv) < 1e-5);
}
