// Gradient checks of the cpu backend: every kernel, then whole stages,
// against central finite differences on tiny shapes. The scalar checked is
// L = Σ out ⊙ R for fixed random R (so dout = R), accumulated in double.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/gradient_check.hpp"

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/cpu_simd.hpp"
#include "pipebench/core/config.hpp"

#include <fmt/format.h>

using namespace pipebench;

using testing::check_gradient;
using testing::dot;
using testing::randn;

TEST_CASE("linear: dx, dW, db", "[cpu][gradcheck]") {
  const int T = 5, in = 4, out = 3;
  auto x = randn(T * in, 1), W = randn(in * out, 2), b = randn(out, 3), R = randn(T * out, 4);
  auto loss = [&] {
    std::vector<float> y(T * out);
    cpu::linear_forward(x.data(), W.data(), b.data(), y.data(), T, in, out);
    return dot(y, R);
  };
  std::vector<float> dx(x.size()), dW(W.size(), 0.0f), db(b.size(), 0.0f);
  cpu::linear_backward(x.data(), W.data(), R.data(), dx.data(), dW.data(), db.data(), T, in, out);
  check_gradient(x, dx, loss, "dx");
  check_gradient(W, dW, loss, "dW");
  check_gradient(b, db, loss, "db");
  // Accumulation: a second backward doubles the parameter gradients.
  std::vector<float> dW2 = dW, db2 = db;
  cpu::linear_backward(x.data(), W.data(), R.data(), nullptr, dW2.data(), db2.data(), T, in, out);
  CHECK(dW2[3] == Approx(2 * dW[3]));
  CHECK(db2[1] == Approx(2 * db[1]));
}

TEST_CASE("layernorm: dx, dgamma, dbeta", "[cpu][gradcheck]") {
  const int T = 4, C = 6;
  auto x = randn(T * C, 5), g = randn(C, 6), be = randn(C, 7), R = randn(T * C, 8);
  auto loss = [&] {
    std::vector<float> y(T * C), mean(T), rstd(T);
    cpu::layernorm_forward(x.data(), g.data(), be.data(), y.data(), mean.data(), rstd.data(), T, C);
    return dot(y, R);
  };
  std::vector<float> y(T * C), mean(T), rstd(T), dx(T * C, 0.0f), dg(C, 0.0f), db(C, 0.0f);
  cpu::layernorm_forward(x.data(), g.data(), be.data(), y.data(), mean.data(), rstd.data(), T, C);
  cpu::layernorm_backward(R.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), T, C);
  check_gradient(x, dx, loss, "dx", 1e-2f, 3e-2);
  check_gradient(g, dg, loss, "dgamma");
  check_gradient(be, db, loss, "dbeta");
}

TEST_CASE("gelu", "[cpu][gradcheck]") {
  auto x = randn(20, 9, 2.0f), R = randn(20, 10);
  auto loss = [&] {
    std::vector<float> y(20);
    cpu::gelu_forward(x.data(), y.data(), 20);
    return dot(y, R);
  };
  std::vector<float> dx(20);
  cpu::gelu_backward(x.data(), R.data(), dx.data(), 20);
  check_gradient(x, dx, loss, "dx", 1e-3f);
  std::vector<float> y(1);
  const float zero = 0.0f;
  cpu::gelu_forward(&zero, y.data(), 1);
  CHECK(y[0] == 0.0f);
}

TEST_CASE("causal attention: dqkv; probabilities are causal and normalised", "[cpu][gradcheck]") {
  const int B = 2, s = 4, C = 6, heads = 2, T = B * s;
  auto qkv = randn(T * 3 * C, 11), R = randn(T * C, 12);
  std::vector<float> probs(B * heads * s * s), out(T * C);
  auto loss = [&] {
    cpu::attention_forward(qkv.data(), probs.data(), out.data(), B, s, C, heads);
    return dot(out, R);
  };
  loss();
  for (int bh = 0; bh < B * heads; ++bh)
    for (int i = 0; i < s; ++i) {
      double row = 0.0;
      for (int j = 0; j < s; ++j) {
        const float p = probs[(bh * s + i) * s + j];
        if (j > i) CHECK(p == 0.0f);
        row += p;
      }
      CHECK(row == Approx(1.0).epsilon(1e-5));
    }
  std::vector<float> dqkv(qkv.size()), scratch(s * s);
  cpu::attention_backward(R.data(), qkv.data(), probs.data(), dqkv.data(), scratch.data(), B, s, C, heads);
  check_gradient(qkv, dqkv, loss, "dqkv");
}

TEST_CASE("grouped-query attention: dqkv, K/V gradients summed over each group's query heads", "[cpu][gradcheck]") {
  const int B = 2, s = 4, C = 8, heads = 4, kv_heads = 2, d = C / heads, T = B * s, ld = C + 2 * kv_heads * d;
  auto qkv = randn(T * ld, 31), R = randn(T * C, 32);
  std::vector<float> probs(B * heads * s * s), out(T * C);
  auto loss = [&] {
    cpu::attention_forward(qkv.data(), probs.data(), out.data(), B, s, C, heads, kv_heads);
    return dot(out, R);
  };
  loss();
  std::vector<float> dqkv(qkv.size()), scratch(s * s);
  cpu::attention_backward(R.data(), qkv.data(), probs.data(), dqkv.data(), scratch.data(), B, s, C, heads, kv_heads);
  check_gradient(qkv, dqkv, loss, "dqkv");
  // kv_heads = heads is full multi-head attention, bit for bit the 3C layout's.
  auto mha = randn(T * 3 * C, 33);
  std::vector<float> a(T * C), b(T * C), p(B * heads * s * s);
  cpu::attention_forward(mha.data(), p.data(), a.data(), B, s, C, heads);
  cpu::attention_forward(mha.data(), p.data(), b.data(), B, s, C, heads, heads);
  CHECK(a == b);
}

TEST_CASE("rmsnorm: dx, dgamma", "[cpu][gradcheck]") {
  const int T = 4, C = 6;
  auto x = randn(T * C, 34), g = randn(C, 35), R = randn(T * C, 36);
  auto loss = [&] {
    std::vector<float> y(T * C), r(T);
    cpu::rmsnorm_forward(x.data(), g.data(), y.data(), r.data(), T, C, 1e-5f);
    return dot(y, R);
  };
  std::vector<float> y(T * C), r(T), dx(T * C, 0.0f), dg(C, 0.0f);
  cpu::rmsnorm_forward(x.data(), g.data(), y.data(), r.data(), T, C, 1e-5f);
  cpu::rmsnorm_backward_weight(R.data(), x.data(), r.data(), dg.data(), T, C);
  cpu::rmsnorm_backward_input(R.data(), x.data(), g.data(), r.data(), dx.data(), T, C);
  check_gradient(x, dx, loss, "dx", 1e-2f, 3e-2);
  check_gradient(g, dg, loss, "dgamma");
}

TEST_CASE("rope: a rotation per pair, its backward the inverse; position 0 unchanged", "[cpu][gradcheck]") {
  const int s = 5, d = 4, heads = 2, T = 2 * s, ld = heads * d + 3;  // rows wider than the heads rotated
  std::vector<float> table(static_cast<std::size_t>(s) * d);
  cpu::rope_table(table.data(), s, d, 10000.0);
  CHECK(table[0] == 1.0f);                         // cos(0)
  CHECK(table[static_cast<std::size_t>(s) * d / 2] == 0.0f);  // sin(0)
  auto x = randn(T * ld, 37), R = randn(T * ld, 38);
  auto loss = [&] {
    std::vector<float> y = x;
    cpu::rope_apply(y.data(), table.data(), T, s, heads, d, ld, false);
    return dot(y, R);
  };
  std::vector<float> dx = R;
  cpu::rope_apply(dx.data(), table.data(), T, s, heads, d, ld, true);
  check_gradient(x, dx, loss, "dx", 1e-2f, 1e-3);
  std::vector<float> y = x;
  cpu::rope_apply(y.data(), table.data(), T, s, heads, d, ld, false);
  for (int c = 0; c < ld; ++c) CHECK(y[c] == x[c]);                    // position 0: no rotation
  for (int c = heads * d; c < ld; ++c) CHECK(y[ld + c] == x[ld + c]);  // columns past the heads untouched
  cpu::rope_apply(y.data(), table.data(), T, s, heads, d, ld, true);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(x[i]).margin(1e-6));
}

TEST_CASE("swiglu: d(W1 x), d(W3 x)", "[cpu][gradcheck]") {
  const int T = 3, f = 5;
  auto pre = randn(T * 2 * f, 39, 2.0f), R = randn(T * f, 40);
  auto loss = [&] {
    std::vector<float> u(T * f);
    cpu::swiglu_forward(pre.data(), u.data(), T, f);
    return dot(u, R);
  };
  std::vector<float> dpre(pre.size());
  cpu::swiglu_backward(pre.data(), R.data(), dpre.data(), T, f);
  check_gradient(pre, dpre, loss, "dpre");
}

namespace {
// Straightforward causal attention of one sequence in double, the mask
// applied element by element.
void reference_attention(const std::vector<float>& qkv, const std::vector<float>& dout, int s, int C, int heads,
                         std::vector<double>& out, std::vector<double>& dqkv) {
  const int d = C / heads, ld = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  out.assign(static_cast<std::size_t>(s) * C, 0.0);
  dqkv.assign(static_cast<std::size_t>(s) * ld, 0.0);
  auto at = [&](int t, int part, int h, int c) { return static_cast<double>(qkv[t * ld + part * C + h * d + c]); };
  for (int h = 0; h < heads; ++h) {
    std::vector<double> P(static_cast<std::size_t>(s) * s, 0.0), dP(P.size(), 0.0);
    for (int i = 0; i < s; ++i) {
      double mx = -1e300, sum = 0.0;
      for (int j = 0; j <= i; ++j) {
        double x = 0.0;
        for (int c = 0; c < d; ++c) x += at(i, 0, h, c) * at(j, 1, h, c);
        P[i * s + j] = x * scale;
        mx = std::max(mx, x * scale);
      }
      for (int j = 0; j <= i; ++j) sum += P[i * s + j] = std::exp(P[i * s + j] - mx);
      for (int j = 0; j <= i; ++j) P[i * s + j] /= sum;
      for (int c = 0; c < d; ++c)
        for (int j = 0; j <= i; ++j) out[i * C + h * d + c] += P[i * s + j] * at(j, 2, h, c);
    }
    for (int i = 0; i < s; ++i) {
      double dot_pd = 0.0;
      for (int j = 0; j <= i; ++j) {
        for (int c = 0; c < d; ++c) dP[i * s + j] += dout[i * C + h * d + c] * at(j, 2, h, c);
        dot_pd += P[i * s + j] * dP[i * s + j];
      }
      for (int j = 0; j <= i; ++j) {
        const double dS = P[i * s + j] * (dP[i * s + j] - dot_pd) * scale;
        for (int c = 0; c < d; ++c) {
          dqkv[i * ld + h * d + c] += dS * at(j, 1, h, c);
          dqkv[j * ld + C + h * d + c] += dS * at(i, 0, h, c);
          dqkv[j * ld + 2 * C + h * d + c] += P[i * s + j] * dout[i * C + h * d + c];
        }
      }
    }
  }
}
}  // namespace

TEST_CASE("causal attention over several query blocks equals the whole-matrix reference", "[cpu]") {
  // 64-row query blocks: s = 135 is two whole blocks and a partial one.
  for (const int s : {64, 65, 135}) {
    const int C = 32, heads = 2;
    const auto qkv = randn(static_cast<std::size_t>(s) * 3 * C, 21), dout = randn(static_cast<std::size_t>(s) * C, 22);
    std::vector<float> probs(static_cast<std::size_t>(heads) * s * s), out(static_cast<std::size_t>(s) * C),
        dqkv(qkv.size(), 99.0f), scratch(static_cast<std::size_t>(s) * s, 99.0f);
    cpu::attention_forward(qkv.data(), probs.data(), out.data(), 1, s, C, heads);
    cpu::attention_backward(dout.data(), qkv.data(), probs.data(), dqkv.data(), scratch.data(), 1, s, C, heads);
    std::vector<double> want_out, want_dqkv;
    reference_attention(qkv, dout, s, C, heads, want_out, want_dqkv);
    auto worst = [](const std::vector<float>& got, const std::vector<double>& want) {
      double w = 0.0;
      for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])));
      return w;
    };
    INFO("s = " << s);
    CHECK(worst(out, want_out) < 1e-5);
    CHECK(worst(dqkv, want_dqkv) < 1e-5);  // every element overwritten (no 99 left)
    int above_diagonal = 0;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < s; ++i)
        for (int j = i + 1; j < s; ++j) above_diagonal += probs[(static_cast<std::size_t>(h) * s + i) * s + j] != 0.0f;
    CHECK(above_diagonal == 0);
  }
}

TEST_CASE("embedding: dwte, dwpe", "[cpu][gradcheck]") {
  const int B = 2, s = 3, C = 4, V = 5;
  const std::vector<std::int32_t> tokens{1, 4, 1, 0, 2, 4};
  auto wte = randn(V * C, 13), wpe = randn(s * C, 14), R = randn(B * s * C, 15);
  auto loss = [&] {
    std::vector<float> y(B * s * C);
    cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), y.data(), B, s, C);
    return dot(y, R);
  };
  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  cpu::embedding_backward(tokens.data(), R.data(), dwte.data(), dwpe.data(), B, s, C);
  check_gradient(wte, dwte, loss, "dwte");
  check_gradient(wpe, dwpe, loss, "dwpe");
}

TEST_CASE("softmax cross-entropy: loss and dlogits", "[cpu][gradcheck]") {
  const int T = 3, V = 5;
  const std::vector<std::int32_t> targets{0, 3, 4};
  auto logits = randn(T * V, 16);
  auto loss = [&] {
    std::vector<float> p = logits;
    return cpu::softmax_crossentropy_forward(p.data(), targets.data(), T, V);
  };
  std::vector<float> d = logits;
  const double l = cpu::softmax_crossentropy_forward(d.data(), targets.data(), T, V);
  double expected = 0.0;
  for (int t = 0; t < T; ++t) {
    double z = 0.0;
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[t * V + v]));
    expected -= std::log(std::exp(static_cast<double>(logits[t * V + targets[t]])) / z);
  }
  CHECK(l == Approx(expected / T).epsilon(1e-6));
  cpu::softmax_crossentropy_backward(d.data(), targets.data(), T, V, 1.0f / T);
  check_gradient(logits, d, loss, "dlogits", 1e-2f);
}

TEST_CASE("optimizers", "[cpu]") {
  std::vector<float> p{1.0f, -2.0f}, g{0.5f, 0.25f}, m(2, 0.0f), v(2, 0.0f);
  cpu::sgd_update(p.data(), g.data(), 2, 0.1f, 2.0f);
  CHECK(p[0] == Approx(0.9f));
  CHECK(p[1] == Approx(-2.05f));
  // First AdamW step without decay moves every parameter by lr (bias-corrected m/sqrt(v) = sign(g)).
  std::vector<float> q{1.0f, -2.0f};
  cpu::adamw_update(q.data(), g.data(), m.data(), v.data(), 2, 0.01f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f);
  CHECK(q[0] == Approx(0.99f));
  CHECK(q[1] == Approx(-2.01f));
}

namespace {

Job tiny_job(const char* kind) {
  // llama: 4 query heads sharing 2 K/V heads (grouped-query attention), RoPE, SwiGLU.
  const bool llama = std::string(kind) == "llama";
  return parse_job(fmt::format(R"(schema = 1
[job]
name = "g"
[model]
kind = "{}"
hidden = 8
layers = 2
heads = {}
ffn_hidden = 12
seq_len = 4
vocab = 11
seed = 3
{}
[[run]]
name = "r"
)", kind, llama ? 4 : 2, llama ? "kv_heads = 2\nrope_theta = 100.0" : ""),
                   "g.toml");
}

StageSpec stage(int rank, int stages, int first, int count, bool embedding, bool head) {
  StageSpec s;
  s.rank = rank;
  s.num_stages = stages;
  s.one_chunk({first, count, embedding, head});
  s.micro_batch_size = 2;
  s.num_microbatches = 1;
  s.mode = RunMode::train;
  return s;
}

}  // namespace

TEST_CASE("sum_squares: the sum in double, the same bits at any address", "[cpu]") {
  for (const int n : {0, 1, 7, 8, 9, 1000, 100003}) {
    INFO("n = " << n);
    const auto x = randn(static_cast<std::size_t>(n) + 1, 31, 3.0f);
    long double want = 0.0L;
    for (int i = 0; i < n; ++i) want += static_cast<long double>(x[i]) * x[i];
    const double got = cpu::sum_squares(x.data(), n);
    CHECK(got == Approx(static_cast<double>(want)).epsilon(1e-12));
    std::vector<float> shifted(static_cast<std::size_t>(n) + 1);  // the same values one float further on
    std::copy(x.begin(), x.begin() + n, shifted.begin() + 1);
    CHECK(cpu::sum_squares(shifted.data() + 1, n) == got);
  }
}

TEST_CASE("whole stage (embedding, blocks, head): d loss / d every parameter", "[cpu][gradcheck]") {
  for (const char* kind : {"gpt", "mlp", "llama"}) {
    INFO(kind);
    const Job job = tiny_job(kind);
    CpuBackend be(job, 0);
    be.build(stage(0, 1, 0, 2, true, true));
    be.begin_step(0, 1e300);
    be.forward(0, 0, 0);
    be.backward(0, 0, 0);
    const auto n = static_cast<std::size_t>(be.built_params());
    std::vector<float> analytic(be.grads(), be.grads() + n);
    std::vector<float> params(be.params(), be.params() + n);
    auto loss = [&] {
      std::copy(params.begin(), params.end(), be.params());
      be.forward(0, 0, 0);
      return be.loss(0);
    };
    check_gradient(params, analytic, loss, kind, 1e-2f, 3e-2);
  }
}

TEST_CASE("middle stage: d(Σ out ⊙ R) / d parameters and the gradient it sends back", "[cpu][gradcheck]") {
  const char* kind = GENERATE("gpt", "llama");
  INFO(kind);
  const Job job = tiny_job(kind);
  CpuBackend be(job, 1);
  be.build(stage(1, 3, 1, 1, false, false));
  be.begin_step(0, 1e300);
  const Buffer in = be.recv_buffer(ActionKind::F, 0, 0);
  const std::size_t n_in = in.bytes / sizeof(float);
  std::vector<float> x = randn(n_in, 21), R = randn(n_in, 22);
  auto run_forward = [&] {
    std::copy(x.begin(), x.end(), static_cast<float*>(in.data));
    be.forward(0, 0, 0);
    const auto* out = static_cast<const float*>(be.send_buffer(ActionKind::F, 0, 0).data);
    return dot(std::vector<float>(out, out + n_in), R);
  };
  run_forward();
  const Buffer dy = be.recv_buffer(ActionKind::B, 0, 0);
  std::copy(R.begin(), R.end(), static_cast<float*>(dy.data));
  be.backward(0, 0, 0);
  const auto* dx = static_cast<const float*>(be.send_buffer(ActionKind::B, 0, 0).data);
  std::vector<float> dinput(dx, dx + n_in);
  const auto n = static_cast<std::size_t>(be.built_params());
  std::vector<float> analytic(be.grads(), be.grads() + n);
  std::vector<float> params(be.params(), be.params() + n);
  auto loss = [&] {
    std::copy(params.begin(), params.end(), be.params());
    return run_forward();
  };
  check_gradient(params, analytic, loss, "params", 1e-2f, 3e-2);
  check_gradient(x, dinput, loss, "input", 1e-2f, 3e-2);
}

TEST_CASE("cpu memory: exactly the model description's bytes", "[cpu][memory]") {
  const Job job = tiny_job("gpt");
  const ModelDesc model(job.model, DType::fp32);
  CpuBackend be(job, 0);
  StageSpec s = stage(0, 2, 0, 1, true, false);
  s.num_microbatches = 3;
  be.build(s);
  const Cost c = model.stage(2, 1, true, false);
  const auto& mem = be.memory();
  CHECK(mem.current(MemCategory::params) == static_cast<std::uint64_t>(4 * c.params));
  CHECK(mem.current(MemCategory::grads) == static_cast<std::uint64_t>(4 * c.params));
  CHECK(mem.current(MemCategory::optimizer) == static_cast<std::uint64_t>(8 * c.params));
  CHECK(mem.current(MemCategory::comm) == static_cast<std::uint64_t>(model.comm_bytes(2, 3, 3, false, true, true)));
  be.begin_step(0, 1e300);
  be.forward(0, 0, 0);
  be.forward(0, 1, 0);
  CHECK(mem.current(MemCategory::activations) == static_cast<std::uint64_t>(2 * c.activation_bytes));
  std::fill_n(static_cast<float*>(be.recv_buffer(ActionKind::B, 0, 0).data), 2 * 4 * 8, 0.5f);
  be.backward(0, 0, 0);
  CHECK(mem.current(MemCategory::activations) == static_cast<std::uint64_t>(c.activation_bytes));
  CHECK(mem.peak(MemCategory::activations) == static_cast<std::uint64_t>(2 * c.activation_bytes));
  CHECK(be.peak_live_activations() == 2);
}

TEST_CASE("cpu full recomputation, one piece a checkpoint: a plain run's bits, the kept inputs and one piece held",
          "[cpu][memory]") {
  for (const char* kind : {"gpt", "llama"}) {
    INFO(kind);
    const Job job = tiny_job(kind);
    const ModelDesc model(job.model, DType::fp32);
    auto run = [&](bool recompute, std::vector<float>& grads) {
      CpuBackend be(job, 0);
      StageSpec s = stage(0, 1, 0, 2, true, true);  // embedding, 2 blocks, head
      s.recompute = recompute;
      be.build(s);
      be.begin_step(0, 1e300);
      be.forward(0, 0, 0);
      const std::uint64_t after_forward = be.memory().current(MemCategory::activations);
      be.backward(0, 0, 0);
      CHECK(be.memory().current(MemCategory::activations) == 0);
      grads.assign(be.grads(), be.grads() + be.built_params());
      return std::pair{after_forward, be.memory().peak(MemCategory::activations)};
    };
    std::vector<float> plain, again;
    const auto [plain_held, plain_peak] = run(false, plain);
    const auto [kept, peak] = run(true, again);
    CHECK(again == plain);  // the recomputed forward is the same arithmetic
    CHECK(plain_held == static_cast<std::uint64_t>(model.stage(2, 2, true, true).activation_bytes));
    CHECK(kept == static_cast<std::uint64_t>(model.recompute_kept_bytes(2, 2, true, true)));
    CHECK(peak == kept + static_cast<std::uint64_t>(model.recompute_piece_bytes(2, 2, true, true)));
    CHECK(peak < plain_peak);
  }
}

TEST_CASE("inference logits equal the training forward's, pipelined or not", "[cpu]") {
  const Job job = tiny_job("gpt");
  const std::size_t n = 2 * 4 * 11;  // tokens x vocab
  // Training forward, one stage.
  CpuBackend train(job, 0);
  train.build(stage(0, 1, 0, 2, true, true));
  train.begin_step(3, 1e300);
  train.forward(3, 0, 0);
  const std::vector<float> reference(train.probs(0), train.probs(0) + n);
  // Inference, one stage.
  StageSpec one = stage(0, 1, 0, 2, true, true);
  one.mode = RunMode::inference;
  CpuBackend single(job, 0);
  single.keep_probs_for_testing(true);
  single.build(one);
  single.begin_step(3, 1e300);
  single.forward(3, 0, 0);
  CHECK(std::vector<float>(single.probs(0), single.probs(0) + n) == reference);
  CHECK(single.loss(0) == train.loss(0));
  CHECK(single.memory().current(MemCategory::activations) == 0);
  // Inference, two stages: the first stage's output is the second's input.
  StageSpec first = stage(0, 2, 0, 1, true, false), second = stage(1, 2, 1, 1, false, true);
  first.mode = second.mode = RunMode::inference;
  CpuBackend a(job, 0), b(job, 1);
  b.keep_probs_for_testing(true);
  a.build(first);
  b.build(second);
  a.begin_step(3, 1e300);
  b.begin_step(3, 1e300);
  a.forward(3, 0, 0);
  const Buffer out = a.send_buffer(ActionKind::F, 0, 0), in = b.recv_buffer(ActionKind::F, 0, 0);
  REQUIRE(out.bytes == in.bytes);
  std::memcpy(in.data, out.data, out.bytes);
  b.forward(3, 0, 0);
  CHECK(std::vector<float>(b.probs(0), b.probs(0) + n) == reference);
  CHECK(b.loss(0) == train.loss(0));
}

TEST_CASE("activation slabs are reused: the process holds the schedule's peak, not one per micro-batch per step",
          "[cpu][memory]") {
  // Regression: slabs were allocated and returned to the OS at every
  // micro-batch, page-faulting ~2x the compute time back in on every step.
  const Job job = tiny_job("gpt");
  CpuBackend be(job, 0);
  StageSpec s = stage(0, 1, 0, 2, true, true);
  s.num_microbatches = 3;
  be.build(s);
  for (int step = 0; step < 2; ++step) {  // GPipe order: three live at once
    be.begin_step(step, 1e300);
    for (int mb = 0; mb < 3; ++mb) be.forward(step, mb, 0);
    for (int mb = 0; mb < 3; ++mb) be.backward(step, mb, 0);
    be.optimizer_step(step, 1.0);
  }
  CHECK(be.slabs_allocated() == 3);
  for (int step = 2; step < 4; ++step) {  // 1F1B-like order on one stage: one live at a time
    be.begin_step(step, 1e300);
    for (int mb = 0; mb < 3; ++mb) {
      be.forward(step, mb, 0);
      be.backward(step, mb, 0);
    }
  }
  CHECK(be.slabs_allocated() == 3);
  CHECK(be.memory().current(MemCategory::activations) == 0);
  CHECK(be.peak_live_activations() == 3);
}

namespace {
// |a - b| <= atol + rtol |b| elementwise; names the first element that is not.
void check_close(const std::vector<float>& a, const std::vector<float>& b, float rtol, float atol, const char* what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]))) {
      FAIL(fmt::format("{}[{}]: {} vs {} (scalar)", what, i, a[i], b[i]));
    }
}
}  // namespace

TEST_CASE("gelu: every build equals the tanh approximation computed in double, from -30 to 30", "[cpu][simd]") {
  std::vector<float> x;
  for (float v = -30.0f; v <= 30.0f; v += 0.01f) x.push_back(v);
  x.insert(x.end(), {0.0f, -0.0f, 1e-30f, -1e-30f, 1e30f, -1e30f});
  const auto n = static_cast<std::int64_t>(x.size());
  const std::vector<float> dy(x.size(), 1.0f);
  for (cpu::SimdPath path : {cpu::SimdPath::scalar, cpu::SimdPath::avx2, cpu::SimdPath::avx512}) {
    const cpu::SimdKernels* k = cpu::simd_kernels(path);
    if (!k) continue;
    INFO("kernels " << k->name);
    std::vector<float> y(x.size()), g(x.size());
    k->gelu_forward(x.data(), y.data(), n);
    k->gelu_backward(x.data(), dy.data(), g.data(), n);
    double worst_y = 0.0, worst_g = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      // 0.5 (1 + tanh u) = sigmoid(2u) and 1 - tanh^2 u = 4 sigmoid(2u) sigmoid(-2u), in double and
      // without the cancellation of 1 + tanh u (which is 0 in double below x = -5.5)
      const double X = x[i], c = std::sqrt(2.0 / M_PI), u = c * (X + 0.044715 * X * X * X);
      const double sig = 1.0 / (1.0 + std::exp(-2.0 * u)), sig_minus = 1.0 / (1.0 + std::exp(2.0 * u));
      const double want_y = X * sig;
      const double want_g = sig + 2.0 * X * sig * sig_minus * c * (1.0 + 3.0 * 0.044715 * X * X);
      REQUIRE(std::isfinite(y[i]));
      REQUIRE(std::isfinite(g[i]));
      // Relative, down to the smallest outputs (-1e-38 at x = -13), per unit of |u|: rounding
      // u in float moves exp(-2u) by about |2u| ulps, in any form of the function.
      const double conditioning = 1.0 + std::fabs(u);
      worst_y = std::max(worst_y, std::fabs(y[i] - want_y) / (1e-30 + std::fabs(want_y)) / conditioning);
      // gelu' is O(1) and crosses 0 at x = -0.75 (a difference of two O(1) terms): relative to 0.01 at least
      worst_g = std::max(worst_g, std::fabs(g[i] - want_g) / (1e-2 + std::fabs(want_g)) / conditioning);
    }
    // The tanh form in float scored 0.1 here (1 + tanh cancels: x = -5.2) and 5.4e-6 for gelu'.
    CHECK(worst_y < 1e-6);
    CHECK(worst_g < 2e-6);
    const float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.0f;
    float out = 0.0f;
    k->gelu_forward(&nan, &out, 1);
    CHECK(std::isnan(out));
    k->gelu_backward(&nan, &one, &out, 1);
    CHECK(std::isnan(out));
  }
}

TEST_CASE("cpu kernels: this process runs the widest build, or the one PIPEBENCH_CPU_KERNELS names", "[cpu][simd]") {
  const cpu::SimdKernels* widest = nullptr;
  for (cpu::SimdPath p : {cpu::SimdPath::avx512, cpu::SimdPath::avx2, cpu::SimdPath::scalar})
    if ((widest = cpu::simd_kernels(p))) break;
  REQUIRE(widest);
  const char* env = std::getenv("PIPEBENCH_CPU_KERNELS");
  INFO("PIPEBENCH_CPU_KERNELS=" << (env ? env : "(unset)"));
  bool named_available = false;
  for (cpu::SimdPath p : {cpu::SimdPath::scalar, cpu::SimdPath::avx2, cpu::SimdPath::avx512})
    if (const cpu::SimdKernels* k = cpu::simd_kernels(p); k && env && std::string(env) == k->name) named_available = true;
  CHECK(std::string(cpu::simd_kernels().name) == (named_available ? std::string(env) : std::string(widest->name)));
}

// Each vector build this program and CPU have (avx2, avx512) against the portable one.
TEST_CASE("cpu kernels: the vector builds agree with the portable one, full vectors and partial tails", "[cpu][simd]") {
  using cpu::SimdKernels;
  const SimdKernels& ref = *cpu::simd_kernels(cpu::SimdPath::scalar);
  int compared = 0;
  for (cpu::SimdPath path : {cpu::SimdPath::avx2, cpu::SimdPath::avx512}) {
    const SimdKernels* fast = cpu::simd_kernels(path);
    if (!fast) continue;
    ++compared;
    INFO("kernels " << fast->name);
    for (int n : {1, 7, 8, 9, 15, 16, 17, 31, 64, 257}) {
      INFO("n = " << n);
      const auto N = static_cast<std::size_t>(n);
      const std::vector<float> x = randn(N, 1, 3.0f), dy = randn(N, 2), gamma = randn(N, 3), beta = randn(N, 4);
      std::vector<float> a(N), b(N);
      fast->gelu_forward(x.data(), a.data(), n);
      ref.gelu_forward(x.data(), b.data(), n);
      check_close(a, b, 2e-6f, 1e-6f, "gelu");
      fast->gelu_backward(x.data(), dy.data(), a.data(), n);
      ref.gelu_backward(x.data(), dy.data(), b.data(), n);
      check_close(a, b, 1e-5f, 1e-6f, "gelu'");
      a = x, b = x;
      fast->softmax_row(a.data(), n);
      ref.softmax_row(b.data(), n);
      check_close(a, b, 1e-5f, 1e-7f, "softmax");
      const std::vector<float> p = b;
      a = dy, b = dy;
      fast->softmax_backward_row(p.data(), a.data(), n);
      ref.softmax_backward_row(p.data(), b.data(), n);
      check_close(a, b, 1e-4f, 1e-6f, "softmax'");
      a = x, b = x;
      const float sum_fast = fast->exp_shifted_row(a.data(), n, 1.5f), sum_ref = ref.exp_shifted_row(b.data(), n, 1.5f);
      check_close(a, b, 1e-5f, 1e-7f, "exp_shifted");
      CHECK(sum_fast == Approx(sum_ref).epsilon(1e-5));
      float m1 = 0, r1 = 0, m2 = 0, r2 = 0;
      fast->layernorm_row(x.data(), gamma.data(), beta.data(), a.data(), n, m1, r1);
      ref.layernorm_row(x.data(), gamma.data(), beta.data(), b.data(), n, m2, r2);
      CHECK(m1 == Approx(m2).margin(1e-5));
      CHECK(r1 == Approx(r2).epsilon(1e-5));
      check_close(a, b, 1e-4f, 1e-4f, "layernorm");
      a = beta, b = beta;
      fast->layernorm_backward_input_row(dy.data(), x.data(), gamma.data(), m2, r2, a.data(), n);
      ref.layernorm_backward_input_row(dy.data(), x.data(), gamma.data(), m2, r2, b.data(), n);
      check_close(a, b, 1e-4f, 1e-4f, "layernorm dx");
      std::vector<float> ga = gamma, gb = gamma, ba = beta, bb = beta;
      fast->layernorm_backward_weight_row(dy.data(), x.data(), m2, r2, ga.data(), ba.data(), n);
      ref.layernorm_backward_weight_row(dy.data(), x.data(), m2, r2, gb.data(), bb.data(), n);
      check_close(ga, gb, 1e-5f, 1e-6f, "dgamma");
      check_close(ba, bb, 0.0f, 0.0f, "dbeta");
      // Three rows: bias added to each, and summed back.
      std::vector<float> y3a = randn(3 * N, 5), y3b = y3a, sa(N, 0.5f), sb(N, 0.5f);
      fast->add_bias_rows(y3a.data(), beta.data(), 3, n);
      ref.add_bias_rows(y3b.data(), beta.data(), 3, n);
      check_close(y3a, y3b, 0.0f, 0.0f, "bias");
      fast->sum_rows(y3a.data(), sa.data(), 3, n);
      ref.sum_rows(y3b.data(), sb.data(), 3, n);
      check_close(sa, sb, 0.0f, 0.0f, "sum_rows");
      std::vector<float> pa = x, pb = x, ma = dy, mb = dy, va(N, 0.01f), vb(N, 0.01f);
      fast->adamw(pa.data(), gamma.data(), ma.data(), va.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.5f);
      ref.adamw(pb.data(), gamma.data(), mb.data(), vb.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.5f);
      check_close(pa, pb, 1e-6f, 1e-7f, "adamw p");
      check_close(ma, mb, 1e-6f, 1e-7f, "adamw m");
      check_close(va, vb, 1e-6f, 1e-9f, "adamw v");
    }
    // The fused bias + GELU is, bit for bit, the bias then the GELU, in each build.
    for (const SimdKernels* k : {fast, &ref})
      for (int n : {5, 8, 77}) {
        const auto N = static_cast<std::size_t>(n);
        const std::vector<float> y = randn(3 * N, 9, 2.0f), bias = randn(N, 10);
        std::vector<float> pre_fused = y, out_fused(3 * N), pre_apart = y, out_apart(3 * N);
        k->bias_gelu_rows(pre_fused.data(), bias.data(), out_fused.data(), 3, n);
        k->add_bias_rows(pre_apart.data(), bias.data(), 3, n);
        k->gelu_forward(pre_apart.data(), out_apart.data(), 3 * n);
        CHECK(pre_fused == pre_apart);
        CHECK(out_fused == out_apart);
      }
    // Nothing outside [0, n) is read into a result or written: a row inside a
    // larger buffer leaves its neighbours alone.
    // 21 = one full 16-lane step and a partial one, or two 8-lane steps and a partial one.
    std::vector<float> buf(40, 7.0f);
    fast->softmax_row(buf.data() + 1, 21);
    CHECK(buf[0] == 7.0f);
    CHECK(buf[22] == 7.0f);
    float total = 0;
    for (int i = 1; i < 22; ++i) total += buf[static_cast<std::size_t>(i)];
    CHECK(total == Approx(1.0f));
  }
  if (compared == 0) WARN("no vector kernels in this build or on this CPU: nothing to compare");
}

TEST_CASE("linear_gelu_forward is linear_forward then gelu_forward, bit for bit", "[cpu][simd]") {
  const int T = 6, in = 20, n = 37;
  const std::vector<float> x = randn(static_cast<std::size_t>(T * in), 11), W = randn(static_cast<std::size_t>(in * n), 12, 0.2f),
                           b = randn(static_cast<std::size_t>(n), 13);
  std::vector<float> pre1(static_cast<std::size_t>(T * n)), out1 = pre1, pre2 = pre1, out2 = pre1;
  cpu::linear_gelu_forward(x.data(), W.data(), b.data(), pre1.data(), out1.data(), T, in, n);
  cpu::linear_forward(x.data(), W.data(), b.data(), pre2.data(), T, in, n);
  cpu::gelu_forward(pre2.data(), out2.data(), static_cast<std::int64_t>(T) * n);
  CHECK(pre1 == pre2);
  CHECK(out1 == out2);
}
