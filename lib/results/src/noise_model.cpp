#include "pipebench/results/noise_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <numbers>

namespace pipebench {

double SyntheticNights::uniform() {  // splitmix64 -> (0, 1)
  std::uint64_t x = (state_ += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
}

double SyntheticNights::normal() {
  const double u1 = uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
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
