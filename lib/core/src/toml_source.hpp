// Internal to pipebench_core: reading TOML text the way every file the
// project accepts is read (workloads, references): bounded before the parser
// sees it, syntax errors as ConfigError naming the file, values located by
// file and line for messages.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml.hpp>

namespace pipebench::toml_source {

using Value = toml::basic_value<toml::discard_comments, std::map, std::vector>;

// Overrides are parsed as a one-line file named "--set KEY=VALUE".
inline constexpr std::string_view kOverridePrefix = "--set ";

// The most text a file may hold, and the deepest / longest arrays and inline
// tables (checked before parsing: toml11 recurses once per nesting level).
inline constexpr std::size_t kMaxTomlBytes = std::size_t{1} << 20;
inline constexpr int kMaxTomlNesting = 32;
inline constexpr int kMaxTomlArrayLength = 4096;

// ConfigError naming the file (and line) when `text` exceeds a bound.
void check_toml_bounds(const std::string& text, const std::string& name);

// ConfigError "<name>: TOML syntax error: ..." or one naming the bound exceeded.
Value parse_toml(const std::string& text, const std::string& name);

// The document as TOML text, tables as [sections] (never inline), every float
// with the fewest significant digits (one count for the whole document) that
// still read back as the same double: `dropout = 0.1`, not toml11's default
// 17 digits (`0.10000000000000001`), and parse_toml(format_toml(v)) == v.
std::string format_toml(const Value& v);

// "<file>:<line>" for values from the file, "<file> (--set k=v)" for overrides.
std::string where(const std::string& file, const Value& v);

// "an integer", "a string", ...
std::string type_name(const Value& v);

// Applies one `--set dotted.key=value` to the parsed document: run.NAME.key
// selects the [[run]] named NAME; missing tables are created; the value is a
// TOML literal, or else a string, located as "--set SPEC" for messages.
// ConfigError naming `file` and the override when it cannot be applied.
void apply_override(Value& root, const std::string& file, const std::string& spec);

// The first `limit` bytes of the file at `path`; nullopt when it cannot be opened.
std::optional<std::string> read_at_most(const std::string& path, std::size_t limit);

}  // namespace pipebench::toml_source
