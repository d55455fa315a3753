// Self-contained SVG charts drawn from data: axes with ticks, units and a
// legend. Every label is escaped. Internal to the report generator.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace pipebench::svg {

struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y;  // NaN y values are gaps
  std::vector<std::string> hover;  // per point, shown on hover; empty: "name: x = y"
};

// A shaded range behind the lines (a spread: min-max of the samples at x).
struct Band {
  std::string name, color;
  std::vector<double> x, lo, hi;
};

// A horizontal range across the plot (a threshold band), drawn behind
// everything; with lo == hi a (dashed) line.
struct HBand {
  std::string name, color;
  double lo = 0.0, hi = 0.0;
};

// One point called out: a ring and a label, kept inside the frame.
struct Marker {
  double x = 0.0, y = 0.0;
  std::string label, color;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  // An explicit y range (both finite): the axis shows it, data beyond it
  // widens it (nothing is ever clipped).
  double y_from = NAN, y_to = NAN;
  std::vector<HBand> hbands;
  std::vector<Marker> markers;
  double shade_x_to = -1.0;  // x <= this is shaded (warm-up), when >= 0
  std::string shade_label;
  bool integer_x = false;    // x ticks on whole numbers only (steps, files)
  bool zero_based = false;   // y axis from 0 when every value is >= 0 (times, bytes, rates)
  std::vector<std::string> x_names;  // with integer_x: tick x = k is labelled x_names[k - 1] (dates)
  std::vector<Band> bands;
};
std::string line_chart(const LineChart& c);
// Where line_chart(c) starts its y axis (the data's range, padded; from 0
// when zero_based; the explicit range widened to the data).
double y_axis_start(const LineChart& c);

// Distinct tick labels for creation times "2026-11-29T03:00:07Z": "11-29 03:00",
// with seconds when two share a minute, " #2" when two share a second.
std::vector<std::string> date_tick_labels(const std::vector<std::string>& iso);

// Byte values are drawn in the binary unit that suits the largest bar. A
// limit far above the bars (over 4x) is stated in the legend instead of
// squashing the bars.
struct StackedBars {
  std::string title;
  std::vector<std::string> categories;  // one bar each
  std::vector<Series> stacks;           // y[i] = value for categories[i]
  std::vector<double> limit;            // a horizontal marker per bar (capacity), NaN for none
  std::string limit_label;
};
std::string stacked_bars(const StackedBars& c);

struct GanttBar {
  int row = 0;
  double start = 0.0, end = 0.0;
  std::string color;
  std::string label;   // drawn inside when it fits
  std::string tooltip;
};
struct Gantt {
  std::string title, x_label;
  std::vector<std::string> rows;
  std::vector<GanttBar> bars;
  double t_end = 0.0;
  std::vector<std::pair<std::string, std::string>> legend;  // name, color
};
std::string gantt(const Gantt& c);

// Round tick positions covering [lo, hi]: whole multiples of 1, 2, 2.5 or 5
// times a power of ten.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// Their labels, with the fewest digits that tell every tick apart (fixed
// point; scientific beyond 1e6 or below 1e-3).
std::vector<std::string> tick_labels(const std::vector<double>& ticks);

}  // namespace pipebench::svg
