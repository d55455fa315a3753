// The nightly regression rule (docs/reports.md, "Regression rule"): is the
// newest file of a series slower than its history, beyond what the history
// itself shows of night-to-night noise?
//
// A verdict needs `min_history` earlier files. The newest file's counted
// step times are compared with all earlier ones pooled (two-sided
// Mann-Whitney U); the relative change of the median must be significant
// (p < alpha) and larger than `threshold`. Two noise guards follow:
//  - the night-to-night spread: the change must also exceed noise_k x the
//    relative standard deviation of the earlier files' medians (a history
//    whose nights differ by 4% cannot call a 6% change), and
//  - the newest run's own noise: a coefficient of variation above
//    cv_factor x the history's median CV (and above cv_floor) marks a run on
//    a loaded machine, whose shift is not evidence about the code unless it
//    dwarfs that noise: such a run must also change by more than
//    noisy_k x its own CV (a 2x slowdown still shows; a 15% shift of a
//    loaded night does not).
// A change that passes the test but not a guard is `inconclusive (noisy)`,
// with the figure that stopped it; never a regression.
#pragma once

#include <string>
#include <vector>

namespace pipebench {

struct RegressionRule {
  double alpha = 0.01;      // Mann-Whitney p below which a change is significant
  double threshold = 0.05;  // smallest relative change of the median that matters
  int min_history = 3;      // earlier files needed before any verdict
  double noise_k = 3.0;     // the change must exceed noise_k x the night-to-night spread
  double cv_factor = 1.5;   // newest CV above cv_factor x the history's median CV ...
  double cv_floor = 0.01;   // ... and above this: the newest run was noisy
  double noisy_k = 20.0;    // a noisy newest run must change by more than noisy_k x its CV
};

struct RegressionVerdict {
  // regression | improvement | no change | inconclusive (noisy) | insufficient history
  std::string verdict = "insufficient history";
  std::string reason;          // the figures behind the verdict, one sentence
  int history = 0;             // earlier files
  double p_value = 1.0;
  double change = 0.0;         // median(newest) / median(pooled history) - 1
  double night_spread = 0.0;   // sd / mean of the earlier files' medians
  double bar = 0.0;            // max(threshold, noise_k x night_spread)
  double newest_cv = 0.0, history_cv = 0.0;  // within-run CVs (history: median over files)
};

// `history`: the counted step times of each earlier file, oldest first;
// `newest`: those of the newest file. Empty files are ignored.
RegressionVerdict judge_regression(const std::vector<std::vector<double>>& history, const std::vector<double>& newest,
                                   const RegressionRule& rule);

}  // namespace pipebench
