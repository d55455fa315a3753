// Synthetic nightly histories with known truth, for testing and measuring
// the regression rule (results/regression.hpp) without running anything:
// the same noise the sim backend models with device.sim_load and
// device.sim_jitter, at the level of whole steps.
//
// Night n of a series: step times base x slowdown x L_n x exp(s z_i - s^2/2),
// i = 1..steps, with a night factor L_n = exp(night_sigma z_n) and, with
// probability loaded_fraction, a loaded night: L_n x loaded_factor and s x
// loaded_noise (a shared node under load is slower and noisier). All z are
// standard normals from splitmix64 and Box-Muller: the same seed gives the
// same history on every platform.
#pragma once

#include <cstdint>
#include <vector>

#include "pipebench/results/regression.hpp"

namespace pipebench {

struct NoiseModel {
  double base_s = 0.2;          // a step's time on a quiet night
  int steps = 10;               // counted steps per night
  double step_sigma = 0.005;    // within-run log-normal sigma
  double night_sigma = 0.004;   // night-to-night log-normal sigma
  double loaded_fraction = 0.0; // share of loaded nights
  double loaded_factor = 1.15;  // a loaded night's slowdown
  double loaded_noise = 3.0;    // a loaded night's step_sigma multiplier
};

class SyntheticNights {
 public:
  SyntheticNights(NoiseModel model, std::uint64_t seed) : model_(model), state_(seed) {}
  // The counted step times of the next night, `slowdown` x slower (1 = none).
  std::vector<double> night(double slowdown = 1.0);

 private:
  std::uint64_t next();
  double normal();
  double uniform();
  NoiseModel model_;
  std::uint64_t state_;
};

// How often `rule` gives each verdict over `series` generated series of
// `nights` nights each, series k seeded seed + k. The newest night is
// `slowdown` x slower. every_night: also judge each earlier night against
// the nights before it (a nightly job's whole life: the false-positive rate
// of identical nights); else only the newest.
struct VerdictRates {
  int judged = 0;
  double regression = 0, improvement = 0, no_change = 0, inconclusive = 0, insufficient = 0;  // shares
};
VerdictRates verdict_rates(const NoiseModel& model, const RegressionRule& rule, int series, int nights, double slowdown,
                           std::uint64_t seed, bool every_night);

}  // namespace pipebench
