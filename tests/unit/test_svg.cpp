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

TEST_CASE("trend dates: minute ticks, seconds when two share a minute, #n when two share a second", "[report][svg]") {
  using pipebench::svg::date_tick_labels;
  CHECK(date_tick_labels({"2026-11-28T03:00:07Z", "2026-11-29T03:00:09Z"}) ==
        std::vector<std::string>{"11-28 03:00", "11-29 03:00"});
  CHECK(date_tick_labels({"2026-11-30T16:23:16Z", "2026-11-30T16:23:18Z", "2026-11-29T01:00:00Z"}) ==
        std::vector<std::string>{"11-30 16:23:16", "11-30 16:23:18", "11-29 01:00:00"});
  CHECK(date_tick_labels({"2026-11-30T16:23:16Z", "2026-11-30T16:23:16Z", "2026-11-30T16:23:16Z"}) ==
        std::vector<std::string>{"11-30 16:23:16", "11-30 16:23:16 #2", "11-30 16:23:16 #3"});
  CHECK(date_tick_labels({"unknown", "2026-11-30T16:23:16Z"}) == std::vector<std::string>{"unknown", "11-30 16:23"});
}

TEST_CASE("line chart: named x ticks, point hovers and a band inside the y range", "[report][svg]") {
  pipebench::svg::LineChart c;
  c.title = "t";
  c.integer_x = true;
  c.zero_based = true;
  c.x_names = {"11-28 03:00", "11-29 03:00"};
  c.series.push_back({"median", "#000", {1, 2}, {1.0, 1.1}, {"first <file>", "second"}});
  c.bands.push_back({"min-max", "#ccc", {1, 2}, {0.9, 1.0}, {1.2, 5.0}});
  const std::string svg = pipebench::svg::line_chart(c);
  CHECK(svg.find(">11-28 03:00</text>") != std::string::npos);
  CHECK(svg.find(">11-29 03:00</text>") != std::string::npos);
  CHECK(svg.find("<title>first &lt;file&gt;</title>") != std::string::npos);
  CHECK(svg.find("<polygon class=\"band\"") != std::string::npos);
  CHECK(svg.find("text-anchor=\"end\">4</text>") != std::string::npos);  // the band's top (5.0) widens the y axis
}
