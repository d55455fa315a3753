// `--set dotted.key=value` overrides applied to a parsed workload before it is
// validated (toml_source.hpp: apply_override).
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "toml_source.hpp"

namespace pipebench::toml_source {
namespace {

// Parses the right-hand side of an override as a TOML value; anything that is
// not a TOML literal is taken as a string. Both keep a location named after
// the override so errors can point at it.
Value parse_override_value(const std::string& spec, const std::string& raw) {
  const std::string name = fmt::format("{}{}", kOverridePrefix, spec);
  check_toml_bounds(raw, name);
  {
    std::istringstream in("v = " + raw);
    try {
      auto doc = toml::parse<toml::discard_comments, std::map, std::vector>(in, name);
      return doc.as_table().at("v");
    } catch (const std::exception&) {
      // not a literal: fall through to a string
    }
  }
  std::string quoted;
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {  // not allowed raw in a TOML string: an escape keeps it
      quoted += fmt::format("\\u{:04x}", u);
      continue;
    }
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  auto doc = parse_toml("v = \"" + quoted + "\"", name);
  return doc.as_table().at("v");
}

std::vector<std::string> split_dots(std::string_view s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    parts.emplace_back(s.substr(start, dot == std::string_view::npos ? s.npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

}  // namespace

void apply_override(Value& root, const std::string& file, const std::string& spec) {
  const auto eq = spec.find('=');
  auto bad = [&](std::string_view why) {
    return ConfigError(fmt::format("{} ({}{}): {}", file, kOverridePrefix, printable(spec), why));
  };
  if (eq == std::string::npos || eq == 0) throw bad("expected dotted.key=value");
  const std::string key = spec.substr(0, eq);
  const auto parts = split_dots(key);
  if (std::any_of(parts.begin(), parts.end(), [](const auto& p) { return p.empty(); }))
    throw bad("empty component in the dotted key");
  Value value = parse_override_value(spec, spec.substr(eq + 1));

  Value* node = &root;
  std::size_t i = 0;
  if (parts[0] == "run") {
    // run.NAME.key: select the [[run]] whose name is NAME.
    if (parts.size() < 3) throw bad("a run key is written run.NAME.key=value");
    Value* runs = root.as_table().count("run") ? &root.as_table().at("run") : nullptr;
    Value* found = nullptr;
    if (runs && runs->is_array())
      for (auto& r : runs->as_array())
        if (r.is_table() && r.as_table().count("name") && r.as_table().at("name").is_string() &&
            r.as_table().at("name").as_string().str == parts[1])
          found = &r;
    if (!found) throw bad(fmt::format("no [[run]] named \"{}\"", printable(parts[1])));
    node = found;
    i = 2;
  }
  for (; i + 1 < parts.size(); ++i) {
    auto& t = node->as_table();
    auto it = t.find(parts[i]);
    if (it == t.end()) it = t.emplace(parts[i], Value(toml::table{})).first;
    if (!it->second.is_table()) throw bad(fmt::format("\"{}\" is not a table", printable(parts[i])));
    node = &it->second;
  }
  node->as_table()[parts.back()] = std::move(value);
}

}  // namespace pipebench::toml_source
