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

// The order statistics that bound a rank-based interval over N sorted
// values, given the half-width C of the statistic's distribution.
Interval bounds(std::vector<double> values, double c) {
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const double lo = std::floor((n - c) / 2.0), hi = std::ceil((n + c) / 2.0);
  return {median_sorted(values), lo < 0.0 ? -kInf : values[static_cast<std::size_t>(lo)],
          hi > n - 1.0 ? kInf : values[static_cast<std::size_t>(hi)]};
}

}  // namespace

Interval theil_sen_slope(const std::vector<double>& y) {
  const std::size_t n = y.size();
  if (n < 2) return {kNaN, kNaN, kNaN};
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) slopes.push_back((y[j] - y[i]) / static_cast<double>(j - i));
  const double nd = static_cast<double>(n);
  return bounds(std::move(slopes), kZ95 * std::sqrt(nd * (nd - 1.0) * (2.0 * nd + 5.0) / 18.0));
}

Interval speedup_interval(const std::vector<double>& baseline, const std::vector<double>& pipeline) {
  if (baseline.empty() || pipeline.empty()) return {kNaN, kNaN, kNaN};
  std::vector<double> d;
  d.reserve(baseline.size() * pipeline.size());
  for (double b : baseline)
    for (double p : pipeline) d.push_back(std::log(b) - std::log(p));
  const double n1 = static_cast<double>(baseline.size()), n2 = static_cast<double>(pipeline.size());
  const Interval log_ratio = bounds(std::move(d), kZ95 * std::sqrt(n1 * n2 * (n1 + n2 + 1.0) / 12.0));
  return {std::exp(log_ratio.estimate), std::exp(log_ratio.low), std::exp(log_ratio.high)};
}

}  // namespace pipebench
