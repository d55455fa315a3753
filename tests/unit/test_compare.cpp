// The reproducibility verdicts (report/compare.hpp): a ratio's interval
// against the tolerance, and per-step series compared bit for bit.
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "pipebench/report/compare.hpp"

using namespace pipebench;

TEST_CASE("compare: a ratio's interval against the tolerance", "[reproduce]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(judge_ratio({1.00, 0.98, 1.03}, 0.05) == std::string(kReproduced));
  CHECK(judge_ratio({1.00, 0.95, 1.05}, 0.05) == std::string(kReproduced));         // on the bounds: inside
  CHECK(judge_ratio({1.30, 1.28, 1.32}, 0.05) == std::string(kNotReproduced));      // sim_load 1.3
  CHECK(judge_ratio({0.80, 0.78, 0.82}, 0.05) == std::string(kNotReproduced));      // faster is a difference too
  CHECK(judge_ratio({1.04, 1.01, 1.07}, 0.05) == std::string(kInconclusive));       // straddles 1.05
  CHECK(judge_ratio({0.96, 0.93, 0.99}, 0.05) == std::string(kInconclusive));       // straddles 0.95
  CHECK(judge_ratio({1.00, 0.80, 1.20}, 0.05) == std::string(kInconclusive));       // wider than the band
  CHECK(judge_ratio({1.00, -inf, inf}, 0.05) == std::string(kInconclusive));        // too few steps to bound it
  CHECK(judge_ratio({nan, nan, nan}, 0.05) == std::string(kNotApplicable));
  CHECK(judge_ratio({1.30, 1.28, 1.32}, 0.50) == std::string(kReproduced));         // a looser tolerance
}

TEST_CASE("compare: per-step series bit for bit", "[reproduce]") {
  const std::vector<double> a{2.5, 2.4, 2.3, 2.2};
  SECTION("identical") {
    const ExactCheck c = compare_series("loss", a, a);
    CHECK(c.verdict == std::string(kReproduced));
    CHECK(c.first_differing_step == -1);
    CHECK_THAT(c.evidence, Catch::Contains("bit-identical over all 4 steps"));
  }
  SECTION("one ulp at step 2 is a difference") {
    std::vector<double> b = a;
    b[2] = std::nextafter(b[2], 3.0);
    b[3] = 2.2 * 1.001;
    const ExactCheck c = compare_series("loss", a, b);
    CHECK(c.verdict == std::string(kNotReproduced));
    CHECK(c.first_differing_step == 2);
    CHECK(c.max_rel_diff == Approx(0.001).epsilon(1e-6));
    CHECK_THAT(c.evidence, Catch::Contains("first differs at step 2") && Catch::Contains("largest relative difference 0.001"));
  }
  SECTION("a different number of steps") {
    const ExactCheck c = compare_series("loss", a, {2.5, 2.4});
    CHECK(c.verdict == std::string(kNotReproduced));
    CHECK(c.first_differing_step == 2);
    CHECK_THAT(c.evidence, Catch::Contains("4 steps in the reference, 2 in the candidate"));
  }
  SECTION("NaN equals only the same NaN; a NaN where a number was is a difference") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(compare_series("loss", {nan, 1.0}, {nan, 1.0}).verdict == std::string(kReproduced));
    const ExactCheck c = compare_series("loss", {1.0, 1.0}, {1.0, nan});
    CHECK(c.verdict == std::string(kNotReproduced));
    CHECK(c.first_differing_step == 1);
  }
  SECTION("-0.0 and +0.0 differ in their bits") {
    CHECK(compare_series("grad_norm", {0.0}, {-0.0}).verdict == std::string(kNotReproduced));
  }
}

// Issue 66 item 5: a p 2 x d 2 run's throughput counts every replica's
// samples (b·m·d per step), as the HDF5 file and the console do; with a
// different d on each side the ratio compares samples per second, not steps.
TEST_CASE("compare: throughput counts every replica's samples", "[reproduce]") {
  auto run = [](int d, int mbs, int m, double step_s) {
    RunResult r;
    r.spec.pipeline_size = 2;
    r.spec.data_parallel = d;
    r.spec.micro_batch_size = mbs;
    r.spec.num_microbatches = m;
    r.step_time_s = {step_s, step_s, step_s, step_s, step_s};
    r.is_warmup = {1, 0, 0, 0, 0};
    r.slowest_stage_s = r.bubble_measured = std::vector<double>(5, 0.5);
    return r;
  };
  const RunResult ref = run(2, 2, 4, 0.016);  // 16 samples per step: 1000 samples/s
  const auto figures = compare_performance(ref, ref, 0.05);
  REQUIRE(figures.size() >= 2);
  CHECK(figures[1].figure == "throughput");
  CHECK(figures[1].reference == Approx(1000.0));
  // The same 16 samples per step as 1 replica x 4 x 4 at the same step time: the same throughput.
  const auto same = compare_performance(ref, run(1, 4, 4, 0.016), 0.05);
  CHECK(same[1].candidate == Approx(1000.0));
  CHECK(same[1].verdict == std::string(kReproduced));
}
