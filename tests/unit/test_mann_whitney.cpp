// Mann-Whitney U against values derived by hand (see each case).
#include <cmath>

#include <catch2/catch.hpp>

#include "pipebench/results/mann_whitney.hpp"

using namespace pipebench;

TEST_CASE("exact: complete separation of 5 and 5", "[mann_whitney]") {
  // U = 0; only 1 of C(10,5) = 252 arrangements has U <= 0: p = 2/252.
  const auto r = mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  CHECK(r.exact);
  CHECK(r.u == 0.0);
  CHECK(r.p_value == Approx(2.0 / 252.0).epsilon(1e-12));
  CHECK(mann_whitney_u({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}).u == 25.0);
}

TEST_CASE("exact: SciPy's documented example (U = 17, p = 1/9)", "[mann_whitney]") {
  // Pairs x > y: 3 + 4 + 2 + 4 + 4 = 17. U <= 3 occurs in 1 + 1 + 2 + 3 = 7 of
  // C(9,4) = 126 arrangements; by symmetry p = 2 * 7 / 126.
  const auto r = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12});
  CHECK(r.exact);
  CHECK(r.u == 17.0);
  CHECK(r.p_value == Approx(14.0 / 126.0).epsilon(1e-12));
}

TEST_CASE("ties: normal approximation with tie and continuity corrections", "[mann_whitney]") {
  // Pooled sorted: 1x 2x 2x 2y 3x 3y 3y 4y 5y; mid-ranks 1, 3, 3, 3, 6, 6, 6, 8, 9.
  // R_x = 1 + 3 + 3 + 6 = 13, U = 13 - 4*5/2 = 3, mean 10. Ties of 3 and 3:
  // sum(t^3 - t) = 48; var = 20/12 * (10 - 48/72) = 140/9.
  // z = (|3 - 10| - 0.5) / sqrt(140/9), p = erfc(z / sqrt 2) ~= 0.0993.
  const auto r = mann_whitney_u({1, 2, 2, 3}, {2, 3, 3, 4, 5});
  CHECK_FALSE(r.exact);
  CHECK(r.u == 3.0);
  const double z = 6.5 / std::sqrt(140.0 / 9.0);
  CHECK(r.p_value == Approx(std::erfc(z / std::sqrt(2.0))).epsilon(1e-12));
  CHECK(r.p_value == Approx(0.0993).margin(5e-4));
}

TEST_CASE("identical samples are not different; empty samples are rejected", "[mann_whitney]") {
  CHECK(mann_whitney_u({1, 1, 1}, {1, 1}).p_value == 1.0);
  CHECK(mann_whitney_u({1, 2, 3}, {1, 2, 3}).p_value == Approx(1.0));
  CHECK_THROWS(mann_whitney_u({}, {1.0}));
}

TEST_CASE("large samples switch to the normal approximation", "[mann_whitney]") {
  std::vector<double> a, b;
  for (int i = 0; i < 40; ++i) {
    a.push_back(1.0 + 0.001 * i);
    b.push_back(1.02 + 0.001 * i);
  }
  const auto r = mann_whitney_u(a, b);
  CHECK_FALSE(r.exact);
  CHECK(r.p_value < 0.01);
}
