// Rank-based estimates with confidence intervals, for the decisions of
// results/metrics.hpp: is a run's step time drifting, and how much faster
// is a pipeline than its baseline, with the uncertainty a handful of steps
// leaves. Both are distribution-free (no normality assumed) and robust to a
// single outlying step.
#pragma once

#include <limits>
#include <vector>

namespace pipebench {

// An undefined figure (a statistic without enough samples, a missing value).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An estimate and its two-sided confidence interval (NaN when undefined;
// -inf/+inf when the sample is too small to bound that side).
struct Interval {
  double estimate;
  double low;
  double high;
};

// Theil-Sen slope of `y` against its index 0..n-1 (per step): the median of
// all pairwise slopes, with Sen's (1968) interval from Kendall's S
// distribution (normal approximation, z = 1.96 for 95%).
Interval theil_sen_slope(const std::vector<double>& y);

// Hodges-Lehmann estimate of baseline / pipeline (the speedup): exp of the
// median of all pairwise differences log(b_i) - log(p_j), with the interval
// that inverts the Mann-Whitney test (normal approximation, 95%).
Interval speedup_interval(const std::vector<double>& baseline, const std::vector<double>& pipeline);

}  // namespace pipebench
