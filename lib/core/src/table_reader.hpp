// Internal to pipebench_core: the typed, located reading of one TOML table
// (a workload's [job], [model], [train], [device] and each [[run]]).
// TableReader knows the dotted key of each value and the file/line it came
// from, fails with ConfigError "FILE:LINE: key: why", and remembers which keys
// were read so that anything left over is reported as an unknown key.
#pragma once

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "toml_source.hpp"

namespace pipebench::toml_source {

// The value as the user wrote it, for messages: the region of its source
// line (so "18446744073709551615" is quoted, not the number toml11 clamped it
// to), with control characters escaped.
std::string literal(const Value& v);

// toml11 clamps an integer literal outside int64 to INT64_MIN/MAX; the text
// tells a clamped value from one written as such. Decimal, 0x, 0o, 0b.
bool integer_literal_fits(const Value& v);

class TableReader {
 public:
  // Every key found is recorded in `locations` (Job::locations), when given.
  TableReader(const Value& table, std::string prefix, const std::string& file,
              std::map<std::string, std::string>* locations = nullptr)
      : table_(table), prefix_(std::move(prefix)), file_(file), locations_(locations) {}

  [[noreturn]] void fail_at(const Value& v, std::string_view key, std::string_view msg) const {
    throw ConfigError(fmt::format("{}: {}: {}", where(file_, v), dotted(key), msg));
  }
  // Fails at `key`'s value, or at the table when the key was left out (its
  // default, with the keys that were given, broke the rule): never a null key.
  [[noreturn]] void fail_key(std::string_view key, std::string_view msg) {
    const Value* v = find(key);
    fail_at(v ? *v : table_, key, msg);
  }
  [[noreturn]] void fail_missing(std::string_view key, std::string_view expected) const {
    throw ConfigError(fmt::format("{}: {}: missing required key (expected {})",
                                  where(file_, table_), dotted(key), expected));
  }

  const Value* find(std::string_view key) {
    used_.insert(std::string(key));
    const auto& t = table_.as_table();
    auto it = t.find(std::string(key));
    if (it == t.end()) return nullptr;
    if (locations_) (*locations_)[dotted(key)] = where(file_, it->second);
    return &it->second;
  }

  std::optional<std::string> str(std::string_view key) {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail_at(*v, key, fmt::format("expected a string, got {}", type_name(*v)));
    return v->as_string().str;
  }
  std::string str_or(std::string_view key, std::string fallback) { return str(key).value_or(std::move(fallback)); }
  std::string str_required(std::string_view key) {
    auto s = str(key);
    if (!s) fail_missing(key, "a string");
    return *s;
  }

  std::optional<std::int64_t> integer(std::string_view key) {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer()) fail_at(*v, key, fmt::format("expected an integer, got {}", type_name(*v)));
    if (!integer_literal_fits(*v))
      fail_at(*v, key, fmt::format("expected an integer, got {}, outside the range of 64-bit integers", literal(*v)));
    return v->as_integer();
  }

  // An int in [min, max]; `fallback` when absent (nullopt = required). The
  // message quotes the value as written.
  int int_in_range(std::string_view key, std::int64_t min, std::int64_t max, std::optional<int> fallback) {
    auto i = integer(key);
    if (!i) {
      if (!fallback) fail_missing(key, fmt::format("an integer >= {}", min));
      return *fallback;
    }
    if (*i < min) {
      const char* what = min == 1 ? "a positive integer" : "an integer";
      fail_key(key, fmt::format("expected {} >= {}, got {}", what, min, literal(*find(key))));
    }
    if (*i > max) fail_key(key, fmt::format("expected at most {}, got {}", max, literal(*find(key))));
    return static_cast<int>(*i);
  }
  int int_at_least(std::string_view key, std::int64_t min, std::optional<int> fallback) {
    return int_in_range(key, min, INT_MAX, fallback);
  }

  // A float (integers accepted) satisfying `lo < x` (or `lo <= x` when inclusive).
  double number(std::string_view key, double fallback, double lo, bool inclusive) {
    const Value* v = find(key);
    if (!v) return fallback;
    double x = 0.0;
    if (v->is_floating()) x = v->as_floating();
    else if (v->is_integer()) x = static_cast<double>(v->as_integer());
    else fail_at(*v, key, fmt::format("expected a number, got {}", type_name(*v)));
    // toml11 clamps a float literal beyond double's range to +-DBL_MAX.
    if (!(inclusive ? x >= lo : x > lo) || !std::isfinite(x) || std::fabs(x) == DBL_MAX)
      fail_at(*v, key, fmt::format("expected a finite number {} {}, got {}", inclusive ? ">=" : ">", lo, literal(*v)));
    return x;
  }

  // A size: a string such as "4GiB" or "512MB", or a positive byte count, at
  // most `max` (named in words by `max_text`); nullopt when absent.
  std::optional<std::uint64_t> bytes(std::string_view key, std::uint64_t max, std::string_view max_text) {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    std::optional<std::uint64_t> out;
    if (v->is_string()) out = parse_bytes(v->as_string().str);
    else if (v->is_integer() && integer_literal_fits(*v) && v->as_integer() > 0)
      out = static_cast<std::uint64_t>(v->as_integer());
    if (!out || *out == 0)
      fail_at(*v, key, fmt::format("expected a positive size such as \"4GiB\", \"512MB\" or a byte count, got {}", literal(*v)));
    if (*out > max) fail_at(*v, key, fmt::format("{} is above the limit of {}", literal(*v), max_text));
    return out;
  }

  // A boolean; `fallback` when absent.
  bool boolean(std::string_view key, bool fallback) {
    const Value* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail_at(*v, key, fmt::format("expected true or false, got {}", type_name(*v)));
    return v->as_boolean();
  }

  // One of `choices` (the first pair member is the spelling in the file).
  template <typename E>
  E choice(std::string_view key, E fallback, std::initializer_list<std::pair<std::string_view, E>> choices) {
    auto s = str(key);
    if (!s) return fallback;
    for (const auto& [name, value] : choices)
      if (*s == name) return value;
    std::string names;
    for (const auto& c : choices) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", c.first);
    fail_key(key, fmt::format("unknown value \"{}\" (expected one of {})", printable(*s), names));
  }

  // A sub-table (absent = empty table).
  const Value* table(std::string_view key) {
    const Value* v = find(key);
    if (v && !v->is_table()) fail_at(*v, key, fmt::format("expected a table, got {}", type_name(*v)));
    return v;
  }

  // Anything present but never asked for is a typo, not something to ignore.
  void reject_unknown_keys() const {
    for (const auto& [k, v] : table_.as_table())
      if (!used_.count(k)) fail_at(v, k, "unknown key (see docs/workload-format.md for the keys of this table)");
  }

  std::string dotted(std::string_view key) const {
    return printable(prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key));
  }
  const Value& value() const { return table_; }
  const std::string& file() const { return file_; }

 private:
  const Value& table_;
  std::string prefix_;
  const std::string& file_;
  std::map<std::string, std::string>* locations_;
  std::set<std::string> used_;
};

}  // namespace pipebench::toml_source
