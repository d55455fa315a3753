// The regression rule's error rates on generated nightly histories
// (results/noise_model.hpp), for the noise measured on this machine and for
// noisier ones: how often identical nights are flagged, how often a real
// 10% / 5% / 2% slowdown is. Rates, not timings: the same seed prints the
// same table anywhere.
//   build/bench/regression_rates [SERIES]     (default 1000 series per row)
#include <cstdio>
#include <cstdlib>

#include "pipebench/results/noise_model.hpp"
#include "pipebench/results/regression.hpp"

int main(int argc, char** argv) {
  using namespace pipebench;
  const int series = argc > 1 ? std::atoi(argv[1]) : 1000;
  if (series < 1) {
    std::fprintf(stderr, "usage: regression_rates [SERIES >= 1]\n");
    return 2;
  }
  struct Scenario {
    const char* name;
    NoiseModel model;
  };
  NoiseModel measured;  // within-run CV 0.5%, nights 0.4% (tests/unit/test_regression.cpp)
  NoiseModel shared = measured;
  shared.night_sigma = 0.02;
  NoiseModel loaded = measured;
  loaded.loaded_fraction = 0.1;  // one night in ten on a loaded node: 15% slower, 3x noisier
  NoiseModel very_loaded = loaded;
  very_loaded.loaded_fraction = 0.3;
  // The nightly fixture's 6 counted steps, with the step CV a busy 2-core CI
  // machine gives them (~1%): a night's CV is then a noisy estimate.
  NoiseModel short_noisy = measured;
  short_noisy.steps = 6;
  short_noisy.step_sigma = 0.01;
  NoiseModel short_loaded = short_noisy;
  short_loaded.loaded_fraction = 0.1;
  const Scenario scenarios[] = {{"measured (quiet 2-core machine)", measured},
                                {"nights 2% apart (shared node)", shared},
                                {"1 night in 10 loaded", loaded},
                                {"3 nights in 10 loaded", very_loaded},
                                {"6 steps, step CV 1%", short_noisy},
                                {"6 steps, CV 1%, 1 in 10 loaded", short_loaded}};
  const RegressionRule rule;
  std::printf("regression rule: min_history %d, alpha %g, threshold %.0f%%, noise_k %g, cv_factor %g; %d series of 20 "
              "nights per row\n\n",
              rule.min_history, rule.alpha, 100 * rule.threshold, rule.noise_k, rule.cv_factor, series);
  std::printf("%-34s %22s %22s %12s %12s %12s\n", "noise", "identical: regression", "identical: inconclusive",
              "10% found", "5% found", "2% flagged");
  for (const auto& s : scenarios) {
    const VerdictRates same = verdict_rates(s.model, rule, series, 20, 1.0, 1, true);
    const VerdictRates ten = verdict_rates(s.model, rule, series, 20, 1.10, 2, false);
    const VerdictRates five = verdict_rates(s.model, rule, series, 20, 1.05 + 1e-9, 3, false);
    const VerdictRates two = verdict_rates(s.model, rule, series, 20, 1.02, 4, false);
    std::printf("%-34s %21.4f%% %21.4f%% %11.1f%% %11.1f%% %11.1f%%\n", s.name, 100 * same.regression,
                100 * same.inconclusive, 100 * ten.regression, 100 * five.regression, 100 * two.regression);
  }
  return 0;
}
