#include "toml_source.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"

namespace pipebench::toml_source {

// Before the parser sees it (toml11 recurses once per nesting level and
// keeps every value; a 100,000-element array takes it seconds): at most
// kMaxTomlBytes of text, kMaxTomlNesting levels of arrays and inline tables
// and kMaxTomlArrayLength elements in one of them (the longest array a
// workload has, layers_per_stage, has pipeline_size <= 1024 entries).
// Strings and comments are skipped.
void check_toml_bounds(const std::string& text, const std::string& name) {
  if (text.size() > kMaxTomlBytes)
    throw ConfigError(fmt::format("{}: larger than a workload may be ({} bytes)", name, kMaxTomlBytes));
  int line = 1;
  std::vector<int> commas;  // per open array or inline table: the separators seen so far
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      for (i += close.size(); i < text.size() && text.compare(i, close.size(), close) != 0; ++i) {
        if (text[i] == '\n') ++line;
        if (c == '"' && text[i] == '\\') ++i;  // an escape in a basic string
      }
      i += close.size() - 1;
    } else if (c == '[' || c == '{') {
      commas.push_back(0);
      if (static_cast<int>(commas.size()) > kMaxTomlNesting)
        throw ConfigError(fmt::format("{}:{}: arrays or inline tables nested deeper than {} levels", name, line,
                                      kMaxTomlNesting));
    } else if (c == ']' || c == '}') {
      if (!commas.empty()) commas.pop_back();
    } else if (c == ',' && !commas.empty() && ++commas.back() >= kMaxTomlArrayLength) {
      throw ConfigError(fmt::format("{}:{}: an array or inline table with more than {} elements", name, line,
                                    kMaxTomlArrayLength));
    }
  }
}

Value parse_toml(const std::string& text, const std::string& name) {
  check_toml_bounds(text, name);
  std::istringstream in(text);
  try {
    return toml::parse<toml::discard_comments, std::map, std::vector>(in, name);
  } catch (const toml::syntax_error& e) {
    throw ConfigError(fmt::format("{}: TOML syntax error:\n{}", printable(name), printable(e.what(), true)));
  }
}

namespace {
// The fewest significant digits with which every float under `v` reads back
// exactly (%.*g is what toml11's serializer writes).
int round_trip_digits(const Value& v, int digits) {
  if (v.is_table())
    for (const auto& [k, sub] : v.as_table()) digits = round_trip_digits(sub, digits);
  else if (v.is_array())
    for (const auto& sub : v.as_array()) digits = round_trip_digits(sub, digits);
  else if (v.is_floating() && std::isfinite(v.as_floating()))
    for (const double x = v.as_floating(); digits < std::numeric_limits<double>::max_digits10; ++digits) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", digits, x);
      if (std::strtod(buf, nullptr) == x) break;
    }
  return digits;
}
}  // namespace

std::string format_toml(const Value& v) { return toml::format(v, 0, round_trip_digits(v, 1)); }

// "<file>:<line>" for values from the file, "<file> (--set k=v)" for overrides.
std::string where(const std::string& file, const Value& v) {
  const auto loc = v.location();
  if (std::string_view(loc.file_name()).starts_with(kOverridePrefix))
    return printable(fmt::format("{} ({})", file, loc.file_name()));
  return fmt::format("{}:{}", printable(file), loc.line());
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    default: return "a date/time";
  }
}

// The first `limit` bytes of the file at `path`; nullopt when it cannot be opened.
std::optional<std::string> read_at_most(const std::string& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

}  // namespace pipebench::toml_source
