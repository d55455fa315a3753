// Two-sided Mann-Whitney U test, for regression flags on step times.
//
// U is the number of pairs (x_i, y_j) with x_i > y_j, plus half the ties.
// p-value: exact (the permutation distribution of U, by counting) when
// there are no ties and n1 + n2 <= 60; otherwise the normal approximation
// with tie correction and a 0.5 continuity correction (as SciPy's
// method="asymptotic", use_continuity=True).
#pragma once

#include <vector>

namespace pipebench {

struct MannWhitneyResult {
  double u = 0.0;         // U of the first sample
  double p_value = 1.0;   // two-sided
  bool exact = false;
};

// Throws std::invalid_argument when a sample is empty.
MannWhitneyResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace pipebench
