#include "pipebench/backends/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>

#include <cblas.h>

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
}

namespace pipebench::cpu {

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
const char* blas_config() { return openblas_get_config(); }

void linear_forward(const float* x, const float* W, const float* b, float* y, int T, int in, int out, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, out, in, 1.0f, x, in, W, out, accumulate ? 1.0f : 0.0f, y,
              out);
  if (b)
    for (int t = 0; t < T; ++t) {
      float* row = y + static_cast<std::int64_t>(t) * out;
      for (int o = 0; o < out; ++o) row[o] += b[o];
    }
}

void linear_backward_weight(const float* x, const float* dy, float* dW, float* db, int T, int in, int out) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, T, 1.0f, x, in, dy, out, 1.0f, dW, out);
  if (db)
    for (int t = 0; t < T; ++t) {
      const float* row = dy + static_cast<std::int64_t>(t) * out;
      for (int o = 0; o < out; ++o) db[o] += row[o];
    }
}

void linear_backward_input(const float* W, const float* dy, float* dx, int T, int in, int out, bool accumulate_dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, in, out, 1.0f, dy, out, W, out, accumulate_dx ? 1.0f : 0.0f,
              dx, in);
}

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, int T, int in,
                     int out, bool accumulate_dx) {
  linear_backward_weight(x, dy, dW, db, T, in, out);
  if (dx) linear_backward_input(W, dy, dx, T, in, out, accumulate_dx);
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* out, float* mean, float* rstd,
                       int T, int C) {
  constexpr float eps = 1e-5f;
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    float* o = out + static_cast<std::int64_t>(t) * C;
    float m = 0.0f;
    for (int c = 0; c < C; ++c) m += xr[c];
    m /= static_cast<float>(C);
    float var = 0.0f;
    for (int c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= static_cast<float>(C);
    const float r = 1.0f / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * r * gamma[c] + beta[c];
    mean[t] = m;
    rstd[t] = r;
  }
}

void layernorm_backward_weight(const float* dout, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int T, int C) {
  for (int t = 0; t < T; ++t) {
    const float* d = dout + static_cast<std::int64_t>(t) * C;
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    const float m = mean[t], r = rstd[t];
    for (int c = 0; c < C; ++c) {
      dbeta[c] += d[c];
      dgamma[c] += (xr[c] - m) * r * d[c];
    }
  }
}

void layernorm_backward_input(const float* dout, const float* x, const float* gamma, const float* mean,
                              const float* rstd, float* dx, int T, int C) {
  for (int t = 0; t < T; ++t) {
    const float* d = dout + static_cast<std::int64_t>(t) * C;
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    float* dxr = dx + static_cast<std::int64_t>(t) * C;
    const float m = mean[t], r = rstd[t];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float norm = (xr[c] - m) * r;
      const float dnorm = gamma[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    for (int c = 0; c < C; ++c) {
      const float norm = (xr[c] - m) * r;
      dxr[c] += (gamma[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
  }
}

void layernorm_backward(const float* dout, const float* x, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* dgamma, float* dbeta, int T, int C) {
  layernorm_backward_weight(dout, x, mean, rstd, dgamma, dbeta, T, C);
  layernorm_backward_input(dout, x, gamma, mean, rstd, dx, T, C);
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}

void gelu_forward(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = dout[i] * grad;
  }
}

void attention_forward(const float* qkv, float* probs, float* out, int B, int s, int C, int heads) {
  const int d = C / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const std::int64_t ld = 3 * static_cast<std::int64_t>(C);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const float* q = qkv + static_cast<std::int64_t>(b) * s * ld + h * d;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* P = probs + (static_cast<std::int64_t>(b) * heads + h) * s * s;
      float* o = out + static_cast<std::int64_t>(b) * s * C + h * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q, static_cast<int>(ld), k,
                  static_cast<int>(ld), 0.0f, P, s);
      for (int i = 0; i < s; ++i) {
        float* row = P + static_cast<std::int64_t>(i) * s;
        float mx = row[0];
        for (int j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        for (int j = i + 1; j < s; ++j) row[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, 1.0f, P, s, v, static_cast<int>(ld), 0.0f, o, C);
    }
}

void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* scratch, int B,
                        int s, int C, int heads) {
  const int d = C / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int ld = 3 * C;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const std::int64_t base = static_cast<std::int64_t>(b) * s * ld + h * d;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* P = probs + (static_cast<std::int64_t>(b) * heads + h) * s * s;
      const float* dO = dout + static_cast<std::int64_t>(b) * s * C + h * d;
      float* dP = scratch;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, s, 1.0f, P, s, dO, C, 0.0f, dv, ld);   // dV = Pᵀ·dO
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, 1.0f, dO, C, v, ld, 0.0f, dP, s);   // dP = dO·Vᵀ
      for (int i = 0; i < s; ++i) {  // dS = P ⊙ (dP - rowsum(P ⊙ dP)); masked entries have P = 0
        const float* pr = P + static_cast<std::int64_t>(i) * s;
        float* dr = dP + static_cast<std::int64_t>(i) * s;
        float dot = 0.0f;
        for (int j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
        for (int j = i + 1; j < s; ++j) dr[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, scale, dP, s, k, ld, 0.0f, dq, ld);  // dQ = dS·K
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, s, scale, dP, s, q, ld, 0.0f, dk, ld);    // dK = dSᵀ·Q
    }
}

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int B, int s, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < s; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * s + t;
      const float* te = wte + static_cast<std::int64_t>(tokens[i]) * C;
      const float* pe = wpe + static_cast<std::int64_t>(t) * C;
      float* o = out + i * C;
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B, int s, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < s; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * s + t;
      const float* d = dout + i * C;
      float* te = dwte + static_cast<std::int64_t>(tokens[i]) * C;
      float* pe = dwpe + static_cast<std::int64_t>(t) * C;
      for (int c = 0; c < C; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
}

double softmax_crossentropy_forward(float* logits, const std::int32_t* targets, int T, int V) {
  double loss = 0.0;
  for (int t = 0; t < T; ++t) {
    float* row = logits + static_cast<std::int64_t>(t) * V;
    float mx = row[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, row[v]);
    float sum = 0.0f;
    for (int v = 0; v < V; ++v) {
      row[v] = std::exp(row[v] - mx);
      sum += row[v];
    }
    const float inv = 1.0f / sum;
    for (int v = 0; v < V; ++v) row[v] *= inv;
    loss -= std::log(static_cast<double>(std::max(row[targets[t]], 1e-30f)));
  }
  return loss / T;
}

void softmax_crossentropy_backward(float* probs, const std::int32_t* targets, int T, int V, float scale) {
  for (int t = 0; t < T; ++t) {
    float* row = probs + static_cast<std::int64_t>(t) * V;
    row[targets[t]] -= 1.0f;
    for (int v = 0; v < V; ++v) row[v] *= scale;
  }
}

void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, float grad_scale) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

void sgd_update(float* p, const float* g, std::int64_t n, float lr, float grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * g[i] * grad_scale;
}

double sum_squares(const float* x, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace pipebench::cpu
