#include "pipebench/core/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <utility>

#include <fmt/format.h>

namespace pipebench {

std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  text = trim(text);
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double number = 0.0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (ec != std::errc() || ptr != text.data() + i) return std::nullopt;
  const std::string_view unit = trim(text.substr(i));
  static constexpr std::array<std::pair<std::string_view, double>, 10> kUnits{{
      {"", 1.0}, {"B", 1.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
  }};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    // A fraction of a larger unit ("3.3GiB": 3543348019.2 bytes) is rounded
    // to the nearest byte; a fraction of a byte ("0.5B", "7.5") is refused.
    double bytes = number * scale;
    if (scale > 1.0) bytes = std::round(bytes);
    if (!(bytes >= 1.0) || bytes > 1.8e19 || bytes != std::floor(bytes)) return std::nullopt;
    return static_cast<std::uint64_t>(bytes);
  }
  return std::nullopt;
}

namespace {
// `value` scaled by `base` until below it (at most the last unit), printed
// with two decimals and the unit, or as a whole number in the first unit.
template <std::size_t N>
std::string format_scaled(double value, double base, const std::array<const char*, N>& units) {
  std::size_t k = 0;
  while (std::fabs(value) >= base && k + 1 < N) {
    value /= base;
    ++k;
  }
  return k == 0 ? fmt::format("{:.0f}{}", value, units[0]) : fmt::format("{:.2f}{}", value, units[k]);
}
}  // namespace

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 6> kNames{" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
  return format_scaled(bytes, 1024.0, kNames);
}

std::string format_byte_change(std::uint64_t before, std::uint64_t after) {
  return after >= before ? fmt::format("+{} B", after - before) : fmt::format("-{} B", before - after);
}

std::string format_byte_change(double before, double after) {
  const auto whole = [](double x) { return x >= 0.0 && x < 18446744073709551616.0 && std::floor(x) == x; };
  if (whole(before) && whole(after))
    return format_byte_change(static_cast<std::uint64_t>(before), static_cast<std::uint64_t>(after));
  return fmt::format("{:+.3g} B", after - before);
}

std::string format_count(double count) {
  static constexpr std::array<const char*, 6> kNames{"", " K", " M", " G", " T", " P"};
  return format_scaled(count, 1000.0, kNames);
}

std::string format_seconds(double s) {
  if (std::isnan(s)) return "-";
  // Past a million seconds (11.6 days: a degenerate figure such as
  // sim_flops_per_s = 1e-300) in powers of ten, not hundreds of digits.
  if (std::fabs(s) >= 1e6) return fmt::format("{:.4g} s", s);
  if (std::fabs(s) >= 1.0) return fmt::format("{:.3f} s", s);
  if (std::fabs(s) >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

namespace {
std::string utc_format(const char* pattern) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), pattern, &tm);
  return buf;
}
}  // namespace

std::string utc_stamp() { return utc_format("%Y%m%dT%H%M%SZ"); }
std::string utc_iso8601() { return utc_format("%Y-%m-%dT%H:%M:%SZ"); }

std::string group_digits(std::int64_t value) {
  const std::uint64_t magnitude =
      value < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  const std::string digits = fmt::format("{}", magnitude);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

namespace {

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), 0 when there is none.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = at(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf) n = 2;
  else if (lead >= 0xe0 && lead <= 0xef) n = 3, lo = lead == 0xe0 ? 0xa0 : 0x80, hi = lead == 0xed ? 0x9f : 0xbf;
  else if (lead >= 0xf0 && lead <= 0xf4) n = 4, lo = lead == 0xf0 ? 0x90 : 0x80, hi = lead == 0xf4 ? 0x8f : 0xbf;
  if (n == 0 || i + n > text.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x80) {
      // Well-formed UTF-8 stays, but for the C1 controls (U+0080..U+009F: CSI among them).
      const std::size_t n = utf8_sequence(text, i);
      const bool c1 = n == 2 && u == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f;
      if (n == 0 || c1) {
        for (std::size_t k = 0; k < std::max<std::size_t>(n, 1); ++k)
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
        i += std::max<std::size_t>(n, 1);
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    if ((u < 0x20 && !(keep_newlines && u == '\n')) || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += static_cast<char>(u);
    ++i;
  }
  return out;
}

std::string printable_excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;  // a continuation byte
  return fmt::format("{}... ({} bytes)", printable(text.substr(0, cut)), text.size());
}

}  // namespace pipebench
