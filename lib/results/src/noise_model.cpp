#include "pipebench/results/noise_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipebench/core/counter_random.hpp"

namespace pipebench {

// A SplitMix64 stream: each draw finalises the state, then advances it.
std::uint64_t SyntheticNights::next() {
  const std::uint64_t h = splitmix64(state_);
  state_ += kSplitMixIncrement;
  return h;
}

double SyntheticNights::uniform() { return unit_uniform(next()); }

double SyntheticNights::normal() {
  const std::uint64_t h1 = next();
  return standard_normal(h1, next());
}

std::vector<double> SyntheticNights::night(double slowdown) {
  const NoiseModel& m = model_;
  double factor = std::exp(m.night_sigma * normal());
  double sigma = m.step_sigma;
  if (uniform() < m.loaded_fraction) {
    factor *= m.loaded_factor;
    sigma *= m.loaded_noise;
  }
  std::vector<double> t;
  for (int i = 0; i < m.steps; ++i)
    t.push_back(m.base_s * slowdown * factor * std::exp(sigma * normal() - 0.5 * sigma * sigma));
  return t;
}

VerdictRates verdict_rates(const NoiseModel& model, const RegressionRule& rule, int series, int nights, double slowdown,
                           std::uint64_t seed, bool every_night) {
  VerdictRates r;
  auto count = [&](const std::string& verdict) {
    ++r.judged;
    if (verdict == "regression") ++r.regression;
    else if (verdict == "improvement") ++r.improvement;
    else if (verdict == "no change") ++r.no_change;
    else if (verdict == "inconclusive (noisy)") ++r.inconclusive;
    else ++r.insufficient;
  };
  for (int k = 0; k < series; ++k) {
    SyntheticNights gen(model, seed + static_cast<std::uint64_t>(k));
    std::vector<std::vector<double>> history;
    for (int n = 0; n + 1 < nights; ++n) {
      std::vector<double> night = gen.night();
      if (every_night && n > 0) count(judge_regression(history, night, rule).verdict);
      history.push_back(std::move(night));
    }
    count(judge_regression(history, gen.night(slowdown), rule).verdict);
  }
  for (double* share : {&r.regression, &r.improvement, &r.no_change, &r.inconclusive, &r.insufficient})
    *share /= std::max(1, r.judged);
  return r;
}

}  // namespace pipebench
