#include "pipebench/results/robust_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace pipebench {

namespace {

constexpr double kZ95 = 1.959963984540054;
constexpr double kInf = std::numeric_limits<double>::infinity();

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

// Doubles as integers in the same order (-0 and +0 both 0), so that a
// bisection over values ends, in at most 64 halvings, at two adjacent doubles.
std::int64_t ordered(double x) {
  std::int64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  const std::int64_t magnitude = bits & std::numeric_limits<std::int64_t>::max();
  return bits < 0 ? -magnitude : magnitude;
}
double from_ordered(std::int64_t o) {
  const std::int64_t bits = o >= 0 ? o : (-o | std::numeric_limits<std::int64_t>::min());
  double x = 0.0;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The n1 x n2 differences a_i - b_j of two samples, selected by rank without
// being held: a report reads runs of any length (10^4 steps each would be
// 10^8 differences). Each difference is computed as a_i - b_j, the same
// double the full list would hold, and with both samples sorted they are
// monotone in i and in j, so the ones at or below a value are counted in
// O(n1 + n2) and the k-th is found by bisecting over values.
class PairwiseDifferences {
 public:
  PairwiseDifferences(std::vector<double> a, std::vector<double> b) : a_(std::move(a)), b_(std::move(b)) {
    std::sort(a_.begin(), a_.end());
    std::sort(b_.begin(), b_.end());
  }
  std::size_t size() const { return a_.size() * b_.size(); }

  // The k-th smallest (0-based; k < size()).
  double kth(std::size_t k) const {
    double lo = a_.front() - b_.back();  // the smallest difference
    if (at_most(lo) > k) return lo;
    std::int64_t l = ordered(lo), h = ordered(a_.back() - b_.front());  // at_most(l) <= k < at_most(h)
    while (h - l > 1) {
      const std::int64_t mid = l + (h - l) / 2;
      (at_most(from_ordered(mid)) > k ? h : l) = mid;
    }
    // No double lies between l and h: the k-th is the smallest difference above l.
    return smallest_above(from_ordered(l));
  }

 private:
  // For a_i ascending, the differences a_i - b_j at or below x are those
  // from the first such j on, and that j only moves right.
  std::size_t at_most(double x) const {
    std::size_t count = 0, j = 0;
    for (const double ai : a_) {
      while (j < b_.size() && ai - b_[j] > x) ++j;
      count += b_.size() - j;
    }
    return count;
  }
  double smallest_above(double x) const {
    double best = kInf;
    std::size_t j = 0;
    for (const double ai : a_) {
      while (j < b_.size() && ai - b_[j] > x) ++j;
      if (j > 0) best = std::min(best, ai - b_[j - 1]);  // the smallest of a_i's differences above x
    }
    return best;
  }

  std::vector<double> a_, b_;
};

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
  auto logs = [](const std::vector<double>& times) {
    std::vector<double> l;
    for (const double t : times) l.push_back(std::log(t));
    return l;
  };
  std::vector<double> lb = logs(baseline), lp = logs(pipeline);
  // A step time that is not positive and finite (a damaged file) has no ratio.
  for (const auto* v : {&lb, &lp})
    if (std::any_of(v->begin(), v->end(), [](double x) { return !std::isfinite(x); })) return {kNaN, kNaN, kNaN};
  const PairwiseDifferences d(std::move(lb), std::move(lp));
  const std::size_t n = d.size();
  const double n1 = static_cast<double>(baseline.size()), n2 = static_cast<double>(pipeline.size());
  // Var(U) = n1 n2 (n1 + n2 + 1)/12.
  const double k = order_index(n1 * n2, std::sqrt(n1 * n2 * (n1 + n2 + 1.0) / 12.0));
  const double median = n % 2 ? d.kth(n / 2) : 0.5 * (d.kth(n / 2 - 1) + d.kth(n / 2));
  if (k < 0.0) return {std::exp(median), 0.0, kInf};  // exp(-inf), exp(+inf)
  const auto ki = static_cast<std::size_t>(k);
  return {std::exp(median), std::exp(d.kth(ki)), std::exp(d.kth(n - 1 - ki))};
}

}  // namespace pipebench
