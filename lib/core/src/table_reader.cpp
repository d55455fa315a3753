// The helpers of table_reader.hpp that are not templates or one-liners.
#include "table_reader.hpp"

#include <charconv>
#include <system_error>

namespace pipebench::toml_source {

std::string literal(const Value& v) {
  const auto loc = v.location();
  const std::string& line = loc.line_str();
  const std::size_t column = loc.column(), length = loc.region();
  if (column >= 1 && length > 0 && column - 1 + length <= line.size())
    return printable(std::string_view(line).substr(column - 1, length));
  return printable(toml::format(v));
}

bool integer_literal_fits(const Value& v) {
  const std::int64_t x = v.as_integer();
  if (x != INT64_MAX && x != INT64_MIN) return true;
  const auto loc = v.location();
  const std::size_t column = loc.column(), length = loc.region();
  if (column < 1 || column - 1 + length > loc.line_str().size()) return true;
  std::string text;
  for (const char c : std::string_view(loc.line_str()).substr(column - 1, length))
    if (c != '_') text += c;
  std::size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) ++i;
  int base = 10;
  for (const auto& [prefix, b] : {std::pair<std::string_view, int>{"0x", 16}, {"0o", 8}, {"0b", 2}})
    if (std::string_view(text).substr(i, 2) == prefix) {
      base = b;
      i += 2;
    }
  std::uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), magnitude, base);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  return magnitude <= (negative ? std::uint64_t{1} << 63 : static_cast<std::uint64_t>(INT64_MAX));
}

}  // namespace pipebench::toml_source
