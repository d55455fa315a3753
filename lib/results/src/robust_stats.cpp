#include "pipebench/results/robust_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pipebench {

namespace {

constexpr double kZ95 = 1.959963984540054;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double median_sorted(const std::vector<double>& v) {
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A rank-based interval over N sorted values: [v(k), v(N-1-k)] (0-based)
// around their median; k < 0 means the sample is too small to bound it.
Interval order_interval(std::vector<double> values, double k) {
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  if (k < 0.0) return {median_sorted(values), -kInf, kInf};
  return {median_sorted(values), values[static_cast<std::size_t>(k)], values[static_cast<std::size_t>(n - 1.0 - k)]};
}

// The count statistic K behind both intervals: the number of the N pairwise
// values below the true parameter (Mann-Whitney's U for Hodges-Lehmann, the
// concordant pairs (S + N)/2 for Sen), whose null distribution is symmetric
// about N/2 with standard deviation `sd`. The interval inverts the two-sided
// test that K is N/2: k = floor(N/2 - z sd) values lie below it and as many
// above (Hollander & Wolfe: C = floor(N/2 - z sd), [D(C+1), D(N-C)] 1-based).
double order_index(double n_values, double sd) { return std::floor(n_values / 2.0 - kZ95 * sd); }

}  // namespace

Interval theil_sen_slope(const std::vector<double>& y) {
  const std::size_t n = y.size();
  if (n < 2) return {kNaN, kNaN, kNaN};
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) slopes.push_back((y[j] - y[i]) / static_cast<double>(j - i));
  // Var(S) = n(n-1)(2n+5)/18 for Kendall's S; K = (S + N)/2 has half its sd.
  const double nd = static_cast<double>(n), pairs = static_cast<double>(slopes.size());
  return order_interval(std::move(slopes), order_index(pairs, 0.5 * std::sqrt(nd * (nd - 1.0) * (2.0 * nd + 5.0) / 18.0)));
}

Interval speedup_interval(const std::vector<double>& baseline, const std::vector<double>& pipeline) {
  if (baseline.empty() || pipeline.empty()) return {kNaN, kNaN, kNaN};
  std::vector<double> d;
  d.reserve(baseline.size() * pipeline.size());
  for (double b : baseline)
    for (double p : pipeline) d.push_back(std::log(b) - std::log(p));
  const double n1 = static_cast<double>(baseline.size()), n2 = static_cast<double>(pipeline.size());
  // Var(U) = n1 n2 (n1 + n2 + 1)/12.
  const Interval log_ratio = order_interval(std::move(d), order_index(n1 * n2, std::sqrt(n1 * n2 * (n1 + n2 + 1.0) / 12.0)));
  return {std::exp(log_ratio.estimate), std::exp(log_ratio.low), std::exp(log_ratio.high)};
}

}  // namespace pipebench
