// The nightly regression rule (results/regression.hpp) on histories with
// known truth (results/noise_model.hpp). The noise is the spread measured on
// the 2-core development machine with tests/data/report/regression.toml
// (sim, 2 ranks, 10 counted steps of ~0.215 s, 8 launches on a quiet
// machine): within-run CV 0.5%, night-to-night sd of the medians 0.4%.
#include <cstdio>

#include <catch2/catch.hpp>

#include "pipebench/results/noise_model.hpp"
#include "pipebench/results/regression.hpp"

using namespace pipebench;

namespace {
const NoiseModel kMeasured{};  // the defaults are the measured figures
constexpr int kSeries = 200;
}  // namespace

TEST_CASE("regression rule: no verdict before min_history earlier files", "[regression]") {
  SyntheticNights gen(kMeasured, 1);
  std::vector<std::vector<double>> history{gen.night(), gen.night()};
  const RegressionVerdict v = judge_regression(history, gen.night(2.0), RegressionRule{});
  CHECK(v.verdict == "insufficient history");
  CHECK(v.reason == "2 earlier file(s); a verdict needs 3");
  history.push_back(gen.night());
  CHECK(judge_regression(history, gen.night(2.0), RegressionRule{}).verdict == "regression");
}

TEST_CASE("regression rule on identical nights, a 10% and a 2% slowdown (200 series each)", "[regression][rates]") {
  const RegressionRule rule;
  // 20 identical nights, every night judged against the nights before it.
  const VerdictRates same = verdict_rates(kMeasured, rule, kSeries, 20, 1.0, 1000, true);
  const VerdictRates ten = verdict_rates(kMeasured, rule, kSeries, 20, 1.10, 2000, false);
  const VerdictRates two = verdict_rates(kMeasured, rule, kSeries, 20, 1.02, 3000, false);
  std::printf("identical nights: %d verdicts, %.4f regression, %.4f improvement, %.4f inconclusive\n", same.judged,
              same.regression, same.improvement, same.inconclusive);
  std::printf("10%% slowdown: %.3f detected; 2%% slowdown: %.3f flagged as regression\n", ten.regression, two.regression);
  CHECK(same.judged == kSeries * 19);
  CHECK(same.regression == 0.0);
  CHECK(same.improvement == 0.0);
  CHECK(ten.regression >= 0.90);
  CHECK(two.regression == 0.0);
}

TEST_CASE("regression rule: a noisy history or a noisy newest night is inconclusive, never a regression",
          "[regression]") {
  // Nights that differ by ~4% (sd) cannot call a 10% change (the bar is 3 x the spread).
  NoiseModel noisy = kMeasured;
  noisy.night_sigma = 0.04;
  SyntheticNights gen(noisy, 7);
  std::vector<std::vector<double>> history;
  for (int n = 0; n < 6; ++n) history.push_back(gen.night());
  NoiseModel quiet_night = kMeasured;
  quiet_night.night_sigma = 0.0;
  const std::vector<double> newest = SyntheticNights(quiet_night, 8).night(1.10);
  const RegressionVerdict v = judge_regression(history, newest, RegressionRule{});
  INFO(v.reason);
  CHECK(v.night_spread > 0.02);
  CHECK(v.verdict == "inconclusive (noisy)");
  CHECK_THAT(v.reason, Catch::Contains("night-to-night spread"));

  // A quiet history and a newest night on a loaded machine: slower and noisier.
  SyntheticNights calm(kMeasured, 9);
  std::vector<std::vector<double>> calm_history;
  for (int n = 0; n < 6; ++n) calm_history.push_back(calm.night());
  NoiseModel loaded = kMeasured;
  loaded.step_sigma = 0.03;
  const RegressionVerdict w = judge_regression(calm_history, SyntheticNights(loaded, 10).night(1.2), RegressionRule{});
  INFO(w.reason);
  CHECK(w.verdict == "inconclusive (noisy)");
  CHECK_THAT(w.reason, Catch::Contains("CV"));
}

TEST_CASE("noise model: reproducible, mean-preserving noise", "[regression]") {
  CHECK(SyntheticNights(kMeasured, 5).night() == SyntheticNights(kMeasured, 5).night());
  CHECK(SyntheticNights(kMeasured, 5).night() != SyntheticNights(kMeasured, 6).night());
  NoiseModel m = kMeasured;
  m.steps = 100000;
  m.night_sigma = 0.0;
  double sum = 0.0;
  for (double t : SyntheticNights(m, 1).night()) sum += t;
  CHECK(sum / m.steps == Approx(m.base_s).epsilon(0.001));
}
