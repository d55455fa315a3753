#include "pipebench/results/regression.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipebench/results/mann_whitney.hpp"
#include "pipebench/results/metrics.hpp"

namespace pipebench {

namespace {

double median_of(const std::vector<double>& v) { return compute_stats(v).median; }

// Relative standard deviation (sd / mean, n - 1); 0 for fewer than two values.
double relative_sd(const std::vector<double>& v) { return v.size() < 2 ? 0.0 : compute_stats(v).cv; }

// Robust relative spread: 1.4826 x the median absolute deviation / median
// (the sd for normal data; one loaded night does not inflate it).
double robust_relative_spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = median_of(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return m != 0.0 ? 1.4826 * median_of(dev) / std::fabs(m) : 0.0;
}

}  // namespace

RegressionVerdict judge_regression(const std::vector<std::vector<double>>& history, const std::vector<double>& newest,
                                   const RegressionRule& rule) {
  RegressionVerdict v;
  std::vector<double> pooled, medians, cvs;
  for (const auto& night : history) {
    if (night.empty()) continue;
    pooled.insert(pooled.end(), night.begin(), night.end());
    medians.push_back(median_of(night));
    cvs.push_back(relative_sd(night));
  }
  v.history = static_cast<int>(medians.size());
  if (v.history < rule.min_history || newest.empty()) {
    v.reason = fmt::format("{} earlier file(s); a verdict needs {}", v.history, rule.min_history);
    return v;
  }
  v.p_value = mann_whitney_u(newest, pooled).p_value;
  v.change = median_of(newest) / median_of(pooled) - 1.0;
  v.night_spread = robust_relative_spread(medians);
  v.bar = std::max(rule.threshold, rule.noise_k * v.night_spread);
  v.newest_cv = relative_sd(newest);
  v.history_cv = median_of(cvs);
  const std::string figures = fmt::format("median {:+.1f}% vs {} earlier files, p = {:.2g}", 100 * v.change, v.history,
                                          v.p_value);
  if (v.p_value >= rule.alpha || std::fabs(v.change) <= rule.threshold) {
    v.verdict = "no change";
    v.reason = fmt::format("{} (a change needs p < {} and more than {:.0f}%)", figures, rule.alpha, 100 * rule.threshold);
  } else if (std::fabs(v.change) <= v.bar) {
    v.verdict = "inconclusive (noisy)";
    v.reason = fmt::format("{}, within {} x the night-to-night spread of {:.1f}%", figures, rule.noise_k,
                           100 * v.night_spread);
  } else if (v.newest_cv > std::max(rule.cv_factor * v.history_cv, rule.cv_floor) &&
             std::fabs(v.change) <= rule.noisy_k * v.newest_cv) {
    v.verdict = "inconclusive (noisy)";
    v.reason = fmt::format("{}, but the newest run's CV {:.1f}% is above {} x the history's {:.1f}% and the change is "
                           "within {} x that CV: a loaded machine? rerun it",
                           figures, 100 * v.newest_cv, rule.cv_factor, 100 * v.history_cv, rule.noisy_k);
  } else {
    v.verdict = v.change > 0 ? "regression" : "improvement";
    v.reason = fmt::format("{}; beyond {:.1f}% (the threshold or {} x the night-to-night spread)", figures, 100 * v.bar,
                           rule.noise_k);
  }
  return v;
}

}  // namespace pipebench
