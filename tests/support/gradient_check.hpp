// Helpers of the cpu kernels' gradient checks (test_cpu_kernels,
// test_cpu_flash_attention): seeded normal tensors, a dot product in double,
// and central finite differences of a scalar loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace pipebench::testing {

inline std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central differences of `loss` w.r.t. every element of `x` (changed in place
// and restored), compared with `analytic`.
inline void check_gradient(std::vector<float>& x, const std::vector<float>& analytic, const std::function<double()>& loss,
                    const char* what, float eps = 1e-2f, double tol = 2e-2) {
  REQUIRE(x.size() == analytic.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2.0 * eps);
    const double err = std::fabs(numeric - analytic[i]) / std::max(1.0, std::fabs(numeric));
    worst = std::max(worst, err);
    if (err > tol) FAIL_CHECK(what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
  }
  INFO(what << ": worst relative error " << worst);
  CHECK(worst <= tol);
}


}  // namespace pipebench::testing
