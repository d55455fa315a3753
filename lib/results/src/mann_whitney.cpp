#include "pipebench/results/mann_whitney.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace pipebench {

namespace {

// P(U <= u) under H0 for sample sizes n1, n2 without ties: counts of
// arrangements by U, built by adding one element at a time.
double exact_cdf(int n1, int n2, int u) {
  // f[a][b][k]: arrangements of a x's and b y's with U = k. Only the current
  // a is kept; U of a x's and b y's is at most a*b.
  const int umax = n1 * n2;
  std::vector<std::vector<double>> prev(static_cast<std::size_t>(n2) + 1, std::vector<double>(static_cast<std::size_t>(umax) + 1, 0.0));
  for (int b = 0; b <= n2; ++b) prev[static_cast<std::size_t>(b)][0] = 1.0;  // a = 0
  for (int a = 1; a <= n1; ++a) {
    std::vector<std::vector<double>> cur(prev.size(), std::vector<double>(static_cast<std::size_t>(umax) + 1, 0.0));
    cur[0][0] = 1.0;  // b = 0
    for (int b = 1; b <= n2; ++b)
      for (int k = 0; k <= a * b; ++k) {
        // the largest element is an x (beats all b y's) or a y (beats nothing)
        double v = cur[static_cast<std::size_t>(b) - 1][static_cast<std::size_t>(k)];
        if (k >= b) v += prev[static_cast<std::size_t>(b)][static_cast<std::size_t>(k - b)];
        cur[static_cast<std::size_t>(b)][static_cast<std::size_t>(k)] = v;
      }
    prev = std::move(cur);
  }
  double below = 0.0, total = 0.0;
  for (int k = 0; k <= umax; ++k) {
    total += prev[static_cast<std::size_t>(n2)][static_cast<std::size_t>(k)];
    if (k <= u) below += prev[static_cast<std::size_t>(n2)][static_cast<std::size_t>(k)];
  }
  return below / total;
}

}  // namespace

MannWhitneyResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.empty() || y.empty()) throw std::invalid_argument("mann_whitney_u: empty sample");
  const auto n1 = static_cast<double>(x.size()), n2 = static_cast<double>(y.size());
  // Mid-ranks of the pooled sample.
  std::vector<std::pair<double, int>> pooled;
  for (double v : x) pooled.push_back({v, 0});
  for (double v : y) pooled.push_back({v, 1});
  std::sort(pooled.begin(), pooled.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::size_t N = pooled.size();
  double rank_sum_x = 0.0, tie_term = 0.0;
  bool ties = false;
  for (std::size_t i = 0; i < N;) {
    std::size_t j = i;
    while (j < N && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mid = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    for (std::size_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_x += mid;
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }
  MannWhitneyResult r;
  r.u = rank_sum_x - n1 * (n1 + 1.0) / 2.0;
  const double mean = n1 * n2 / 2.0;
  if (!ties && N <= 60) {
    r.exact = true;
    const int u_low = static_cast<int>(std::lround(std::min(r.u, n1 * n2 - r.u)));
    r.p_value = std::min(1.0, 2.0 * exact_cdf(static_cast<int>(x.size()), static_cast<int>(y.size()), u_low));
    return r;
  }
  const double Nd = static_cast<double>(N);
  const double var = n1 * n2 / 12.0 * ((Nd + 1.0) - tie_term / (Nd * (Nd - 1.0)));
  if (var <= 0.0) {
    r.p_value = 1.0;  // every value equal
    return r;
  }
  const double z = std::max(0.0, std::fabs(r.u - mean) - 0.5) / std::sqrt(var);
  r.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

}  // namespace pipebench
