// The report's chart axes (reports/src/svg.hpp, internal): tick positions
// are whole multiples of a round step and their labels always differ.
#include <algorithm>
#include <cmath>
#include <set>

#include <catch2/catch.hpp>

#include "svg.hpp"

using pipebench::svg::nice_ticks;
using pipebench::svg::tick_labels;

TEST_CASE("ticks: distinct labels over a grid of ranges and scales", "[report][svg]") {
  int checked = 0;
  for (double scale : {1e-7, 1e-4, 1e-3, 0.01, 1.0, 3.0, 100.0, 1e4, 1e6, 1e9, 1e12})
    for (double lo : {0.0, 0.5, 1.0, 3.62, 7.0, 100.0})
      for (double width : {1e-6, 1e-3, 0.01, 0.07, 0.5, 1.0, 2.0, 13.0}) {
        const double a = lo * scale, b = (lo + width) * scale;
        const auto ticks = nice_ticks(a, b, 5);
        REQUIRE(!ticks.empty());
        CHECK(ticks.front() >= a - (b - a) * 1e-6);
        CHECK(ticks.back() <= b + (b - a) * 1e-6);
        CHECK(ticks.size() <= 12);
        const auto labels = tick_labels(ticks);
        REQUIRE(labels.size() == ticks.size());
        const std::set<std::string> unique(labels.begin(), labels.end());
        INFO("range [" << a << ", " << b << "]: " << labels.front() << " .. " << labels.back());
        CHECK(unique.size() == labels.size());
        ++checked;
      }
  CHECK(checked == 11 * 6 * 8);
}

TEST_CASE("ticks: the labels of step times 3.62-3.64 s differ; whole numbers stay whole", "[report][svg]") {
  CHECK(tick_labels({3.62, 3.625, 3.63}) == std::vector<std::string>{"3.620", "3.625", "3.630"});
  CHECK(tick_labels({0, 1, 2, 3}) == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(tick_labels({0, 2e6, 4e6}) == std::vector<std::string>{"0", "2e+06", "4e+06"});
  // Two results files: ticks at both 1 and 2 (a running sum once made 2 into 2.0000000000000004).
  const auto t = nice_ticks(1.0, 2.0, 6);
  CHECK(std::count_if(t.begin(), t.end(), [](double v) { return v == std::round(v); }) == 2);
  CHECK(t.back() == 2.0);
}
