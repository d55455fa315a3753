#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "pipebench/report/report.hpp"

namespace pipebench::svg {

namespace {

constexpr double kW = 900, kH = 316, kLeft = 70, kRight = 20, kTop = 34, kBottom = 68;

// The drawn width of a tick label (11 px sans-serif: about 6.2 px per
// character; escapes like &amp; count as one).
double text_width(const std::string& escaped) {
  double chars = 0;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] == '&') i = std::min(escaped.find(';', i), escaped.size() - 1);
    if ((static_cast<unsigned char>(escaped[i]) & 0xC0) != 0x80) ++chars;  // UTF-8: count lead bytes
  }
  return 6.2 * chars;
}

// One value outside a tick row (tooltips): 3 significant digits.
std::string tick_label(double v) { return v == 0.0 ? "0" : fmt::format("{:.3g}", v); }

std::string open_svg(const std::string& title, double height = kH) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "role=\"img\" aria-label=\"{}\"><text x=\"{}\" y=\"20\" class=\"title\">{}</text>",
      kW, height, kW, height, html_escape(title), kLeft, html_escape(title));
}

struct Scale {
  double lo, hi, a, b;  // data [lo, hi] -> pixels [a, b]
  double operator()(double v) const { return hi == lo ? a : a + (v - lo) / (hi - lo) * (b - a); }
};

std::string axes(const Scale& x, const Scale& y, const std::vector<double>& xt, const std::vector<double>& yt,
                 const std::string& x_label, const std::string& y_label, double height,
                 const std::vector<std::string>& x_names = {}) {
  std::string s;
  const double bottom = height - kBottom;
  std::vector<std::string> xl = tick_labels(xt);
  const std::vector<std::string> yl = tick_labels(yt);
  for (std::size_t i = 0; i < xt.size() && !x_names.empty(); ++i) {
    const auto k = static_cast<long long>(std::llround(xt[i]));
    if (k >= 1 && static_cast<std::size_t>(k) <= x_names.size()) xl[i] = html_escape(x_names[static_cast<std::size_t>(k - 1)]);
  }
  s += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", kLeft, bottom, kW - kRight, bottom);
  s += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", kLeft, kTop, kLeft, bottom);
  for (std::size_t i = 0; i < yt.size(); ++i) {
    const double py = y(yt[i]);
    s += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\"/>", kLeft, py, kW - kRight, py);
    s += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 6, py + 4, yl[i]);
  }
  for (std::size_t i = 0; i < xt.size(); ++i) {
    const double px = x(xt[i]);
    s += fmt::format("<line class=\"axis\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/>", px, bottom, px, bottom + 4);
    // Inside the frame: a label near an edge is moved in, not cut.
    const double half = 0.5 * text_width(xl[i]);
    const double cx = std::clamp(px, half + 2.0, kW - half - 2.0);
    s += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", cx, bottom + 16, xl[i]);
  }
  s += fmt::format("<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (kLeft + kW - kRight) / 2,
                   bottom + 34, html_escape(x_label));
  s += fmt::format("<text class=\"label\" transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
                   (kTop + bottom) / 2, html_escape(y_label));
  return s;
}

// Legend entries left to right, wrapping onto a second row (above `y`) when
// the first is full.
std::string legend(const std::vector<std::pair<std::string, std::string>>& items, double y) {
  std::string s;
  double x = kLeft, width = 0.0;
  for (const auto& [name, color] : items) width += 28 + 7.0 * static_cast<double>(name.size());
  if (width > kW - kRight - kLeft) y -= 16;
  for (const auto& [name, color] : items) {
    const double w = 28 + 7.0 * static_cast<double>(name.size());
    if (x + w - 12 > kW - kRight) {
      x = kLeft;
      y += 16;
    }
    s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>", x, y - 10, color);
    s += fmt::format("<text class=\"legend\" x=\"{:.0f}\" y=\"{:.0f}\">{}</text>", x + 16, y, html_escape(name));
    x += w;
  }
  return s;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Ticks are k * step for whole k (not a running sum, whose rounding
  // makes 2 into 2.0000000000000004 and drops it from an integer axis).
  std::vector<double> t;
  for (auto k = static_cast<long long>(std::ceil(lo / step - 1e-9)); static_cast<double>(k) * step <= hi + step * 1e-9; ++k)
    t.push_back(k == 0 ? 0.0 : static_cast<double>(k) * step);
  return t;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  double largest = 0.0;
  for (double v : ticks) largest = std::max(largest, std::fabs(v));
  const bool scientific = largest >= 1e6 || (largest > 0 && largest < 1e-3);
  // The fewest digits that tell every tick apart.
  for (int digits = 0; digits <= 12; ++digits) {
    std::vector<std::string> out;
    for (double v : ticks)
      out.push_back(v == 0.0 ? "0" : scientific ? fmt::format("{:.{}e}", v, digits) : fmt::format("{:.{}f}", v, digits));
    std::vector<std::string> sorted = out;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return out;
  }
  std::vector<std::string> out;
  for (double v : ticks) out.push_back(fmt::format("{:.17g}", v));
  return out;
}

// Tick labels for creation times "2026-11-29T03:00:07Z": "11-29 03:00",
// with seconds when two files share a minute, numbered (" #2") when they
// share a second; anything not in that form as it is.
std::vector<std::string> date_tick_labels(const std::vector<std::string>& iso) {
  for (const std::size_t chars : {std::size_t{5}, std::size_t{8}}) {
    std::vector<std::string> out;
    for (const auto& t : iso)
      out.push_back(t.size() >= 11 + chars && t[4] == '-' && t[10] == 'T' ? t.substr(5, 5) + " " + t.substr(11, chars) : t);
    if (std::set<std::string>(out.begin(), out.end()).size() == out.size() || chars == 8) {
      std::map<std::string, int> seen;
      for (auto& label : out)
        if (const int n = ++seen[label]; n > 1) label += fmt::format(" #{}", n);
      return out;
    }
  }
  return iso;
}

namespace {
struct Ranges {
  double xlo, xhi, ylo, yhi;  // xlo infinite: no data
};

Ranges ranges(const LineChart& c) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : c.series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
    }
  for (const auto& b : c.bands)
    for (std::size_t i = 0; i < b.x.size(); ++i)
      if (std::isfinite(b.lo[i]) && std::isfinite(b.hi[i])) {
        ylo = std::min(ylo, b.lo[i]);
        yhi = std::max(yhi, b.hi[i]);
      }
  if (!std::isfinite(xlo)) return {xlo, xhi, ylo, yhi};
  if (xhi == xlo) xhi = xlo + 1;
  for (const auto& h : c.hbands) {
    ylo = std::min(ylo, h.lo);
    yhi = std::max(yhi, h.hi);
  }
  if (std::isfinite(c.y_from) && std::isfinite(c.y_to)) {
    // An explicit range, widened to the data with a margin: never clipped.
    const double margin = 0.04 * (std::max(yhi, c.y_to) - std::min(ylo, c.y_from));
    ylo = std::min(c.y_from, ylo - margin);
    yhi = std::max(c.y_to, yhi + margin);
  } else {
    const double pad = (yhi - ylo) * 0.1 + (yhi == ylo ? std::max(std::fabs(yhi) * 0.1, 1e-9) : 0.0);
    ylo = (c.zero_based && ylo >= 0) || (ylo - pad < 0 && ylo >= 0) ? 0.0 : ylo - pad;
    yhi += pad;
  }
  return {xlo, xhi, ylo, yhi};
}
}  // namespace

double y_axis_start(const LineChart& c) { return ranges(c).ylo; }

std::string line_chart(const LineChart& c) {
  const auto [xlo, xhi, ylo, yhi] = ranges(c);
  std::string out = open_svg(c.title);
  if (!std::isfinite(xlo)) return out + "<text x=\"70\" y=\"150\" class=\"label\">no data</text></svg>";
  const Scale x{xlo, xhi, kLeft, kW - kRight}, y{ylo, yhi, kH - kBottom, kTop};
  if (c.shade_x_to >= xlo)
    out += fmt::format("<rect class=\"shade\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\"><title>{}</title></rect>",
                       kLeft, kTop, std::max(2.0, x(c.shade_x_to) - kLeft), kH - kBottom - kTop, html_escape(c.shade_label));
  std::vector<double> xt = nice_ticks(xlo, xhi, 6);
  if (c.integer_x) {
    xt.erase(std::remove_if(xt.begin(), xt.end(), [](double v) { return std::fabs(v - std::round(v)) > 1e-9; }), xt.end());
    if (xt.empty()) xt = {xlo};
  }
  std::vector<double> yt = nice_ticks(ylo, yhi, 5);
  yt.erase(std::remove_if(yt.begin(), yt.end(), [&](double v) { return v < ylo - 1e-12 || v > yhi + 1e-12; }), yt.end());
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& h : c.hbands) {
    if (h.hi > h.lo)
      out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"><title>{}</title></rect>",
                         kLeft, y(h.hi), kW - kRight - kLeft, y(h.lo) - y(h.hi), h.color, html_escape(h.name));
    else
      out += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"1.2\" "
                         "stroke-dasharray=\"6 4\"><title>{}</title></line>",
                         kLeft, y(h.lo), kW - kRight, y(h.lo), h.color, html_escape(h.name));
    items.push_back({h.name, h.color});
  }
  out += axes(x, y, xt, yt, c.x_label, c.y_label, kH, c.integer_x ? c.x_names : std::vector<std::string>{});
  for (const auto& b : c.bands) {
    // Upper edge left to right, lower edge back: one closed polygon.
    std::string pts;
    for (std::size_t i = 0; i < b.x.size(); ++i)
      if (std::isfinite(b.hi[i])) pts += fmt::format("{:.1f},{:.1f} ", x(b.x[i]), y(b.hi[i]));
    for (std::size_t i = b.x.size(); i-- > 0;)
      if (std::isfinite(b.lo[i])) pts += fmt::format("{:.1f},{:.1f} ", x(b.x[i]), y(b.lo[i]));
    out += fmt::format("<polygon class=\"band\" points=\"{}\" fill=\"{}\" stroke=\"none\"><title>{}</title></polygon>",
                       pts, b.color, html_escape(b.name));
    items.push_back({b.name, b.color});
  }
  for (const auto& s : c.series) {
    std::string d;
    bool pen = false;
    // Points with hovers are big enough to point at, unless they would overlap.
    const double spacing = (kW - kRight - kLeft) / std::max<double>(1.0, static_cast<double>(s.x.size()));
    const double radius = s.hover.empty() ? 2.5 : std::clamp(0.4 * spacing, 1.2, 4.0);
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) {
        pen = false;
        continue;
      }
      d += fmt::format("{}{:.1f},{:.1f} ", pen ? "L" : "M", x(s.x[i]), y(s.y[i]));
      pen = true;
      const std::string hover = i < s.hover.size()
                                    ? s.hover[i]
                                    : fmt::format("{}: {} = {}", s.name, tick_label(s.x[i]), fmt::format("{:.6g}", s.y[i]));
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"><title>{}</title></circle>",
                         x(s.x[i]), y(s.y[i]), radius, s.color, html_escape(hover));
    }
    out += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"/>", d, s.color);
    items.push_back({s.name, s.color});
  }
  for (const auto& m : c.markers) {
    const double px = x(m.x), py = y(m.y);
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"7\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", px, py,
                       m.color);
    // The label beside the ring, on whichever side has room, inside the frame.
    const std::string label = html_escape(m.label);
    const double w = text_width(label);
    const bool left = px + 12 + w > kW - kRight;
    const double ty = std::clamp(py - 10, kTop + 10.0, kH - kBottom - 4.0);
    out += fmt::format("<text class=\"marker\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" fill=\"{}\">{}</text>",
                       left ? px - 12 : px + 12, ty, left ? "end" : "start", m.color, label);
  }
  if (c.shade_x_to >= xlo) items.push_back({c.shade_label, "#e6e6e6"});
  return out + legend(items, kH - 4) + "</svg>";
}

std::string stacked_bars(const StackedBars& c) {
  const std::size_t n = c.categories.size();
  double bars = 0.0, limit = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (const auto& s : c.stacks) sum += s.y[i];
    bars = std::max(bars, sum);
    if (i < c.limit.size() && std::isfinite(c.limit[i])) limit = std::max(limit, c.limit[i]);
  }
  std::string out = open_svg(c.title);
  if (n == 0 || bars <= 0.0) return out + "</svg>";
  const bool limit_on_scale = limit > 0.0 && limit <= 4.0 * bars;
  const double top = 1.08 * (limit_on_scale ? std::max(bars, limit) : bars);
  // Ticks in the binary unit of the top of the axis.
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double div = 1.0;
  while (u < 4 && top / div >= 1024.0) {
    div *= 1024.0;
    ++u;
  }
  const Scale y{0.0, top / div, kH - kBottom, kTop};
  auto py = [&](double bytes) { return y(bytes / div); };
  out += axes(Scale{0, 1, kLeft, kW - kRight}, y, {}, nice_ticks(0.0, top / div, 5), "", kUnits[u], kH);
  const double slot = (kW - kRight - kLeft) / static_cast<double>(n), bw = std::min(60.0, slot * 0.6);
  for (std::size_t i = 0; i < n; ++i) {
    const double cx = kLeft + slot * (static_cast<double>(i) + 0.5);
    double base = 0.0;
    for (const auto& s : c.stacks) {
      const double v = s.y[i];
      if (v > 0)
        out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}: {:.6g} {}</title></rect>",
                           cx - bw / 2, py(base + v), bw, py(base) - py(base + v), s.color, html_escape(c.categories[i]),
                           html_escape(s.name), v / div, kUnits[u]);
      base += v;
    }
    if (limit_on_scale && i < c.limit.size() && std::isfinite(c.limit[i]))
      out += fmt::format("<line class=\"limit\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"><title>{}</title></line>",
                         cx - slot * 0.45, py(c.limit[i]), cx + slot * 0.45, py(c.limit[i]), html_escape(c.limit_label));
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", cx, kH - kBottom + 16,
                       html_escape(c.categories[i]));
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& s : c.stacks) items.push_back({s.name, s.color});
  if (!c.limit_label.empty() && limit > 0.0) {
    int lu = 0;
    double ldiv = 1.0;
    while (lu < 4 && limit / ldiv >= 1024.0) {
      ldiv *= 1024.0;
      ++lu;
    }
    items.push_back({limit_on_scale ? c.limit_label
                                    : fmt::format("{} {:.3g} {} (off scale)", c.limit_label, limit / ldiv, kUnits[lu]),
                     "#c0392b"});
  }
  return out + legend(items, kH - 4) + "</svg>";
}

std::string gantt(const Gantt& c) {
  const double row_h = 22;
  const double height = kTop + row_h * static_cast<double>(c.rows.size()) + kBottom;
  std::string out = open_svg(c.title, height);
  const double t_end = c.t_end > 0 ? c.t_end : 1.0;
  const Scale x{0.0, t_end, kLeft, kW - kRight};
  const double bottom = height - kBottom;
  out += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", kLeft, bottom, kW - kRight, bottom);
  const std::vector<double> xt = nice_ticks(0.0, t_end, 6);
  const std::vector<std::string> xl = tick_labels(xt);
  for (std::size_t i = 0; i < xt.size(); ++i) {
    const double t = xt[i];
    out += fmt::format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/>", x(t), kTop, x(t), bottom);
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", x(t), bottom + 16, xl[i]);
  }
  for (std::size_t r = 0; r < c.rows.size(); ++r)
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 6,
                       kTop + row_h * (static_cast<double>(r) + 0.5) + 4, html_escape(c.rows[r]));
  for (const auto& b : c.bars) {
    const double x0 = x(b.start), w = std::max(0.5, x(b.end) - x(b.start));
    const double y0 = kTop + row_h * b.row + 2;
    out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
                       x0, y0, w, row_h - 4, b.color, html_escape(b.tooltip));
    if (!b.label.empty() && w > 7.0 * static_cast<double>(b.label.size()) + 2)
      out += fmt::format("<text class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", x0 + w / 2,
                         y0 + row_h / 2 + 2, html_escape(b.label));
  }
  out += fmt::format("<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (kLeft + kW - kRight) / 2,
                     bottom + 32, html_escape(c.x_label));
  return out + legend(c.legend, height - 4) + "</svg>";
}

}  // namespace pipebench::svg
