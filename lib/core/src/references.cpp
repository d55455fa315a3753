#include "pipebench/core/references.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "toml_source.hpp"

namespace pipebench {
namespace {

using toml_source::Value;
using toml_source::type_name;
using toml_source::where;

const ReferenceFigure* find_figure(const std::string& name) {
  for (const auto& f : reference_figures())
    if (name == f.name) return &f;
  return nullptr;
}

std::string figure_names() {
  std::string out;
  for (const auto& f : reference_figures()) out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

// Bytes as integers (a byte matters), everything else to 6 digits.
std::string number_text(double v, const std::string& unit) {
  return unit == "B" && std::isfinite(v) ? fmt::format("{:.0f}", v) : fmt::format("{:.6g}", v);
}

[[noreturn]] void fail(const std::string& file, const Value& v, const std::string& key, const std::string& msg) {
  throw ConfigError(fmt::format("{}: {}: {}", where(file, v), key, msg));
}

double number(const std::string& file, const Value& v, const std::string& key, const char* what) {
  if (!v.is_floating() && !v.is_integer())
    fail(file, v, key, fmt::format("expected {} as a number, got {}", what, type_name(v)));
  return v.is_floating() ? v.as_floating() : static_cast<double>(v.as_integer());
}

// [value, lower, upper] or [value, lower, upper, "unit"].
ReferenceValue reference_value(const std::string& file, const Value& v, const std::string& key,
                               const ReferenceFigure& fig) {
  constexpr const char* kForm = "[reference, lower, upper] or [reference, lower, upper, \"unit\"]";
  if (!v.is_array()) fail(file, v, key, fmt::format("expected {}, got {}", kForm, type_name(v)));
  const auto& a = v.as_array();
  if (a.size() != 3 && a.size() != 4)
    fail(file, v, key, fmt::format("expected {}, got {} elements", kForm, a.size()));
  ReferenceValue r;
  r.where = where(file, v);
  r.value = number(file, a[0], key, "the reference value");
  r.lower = number(file, a[1], key, "the lower tolerance");
  r.upper = number(file, a[2], key, "the upper tolerance");
  if (!std::isfinite(r.value) || r.value < 0)
    fail(file, a[0], key, fmt::format("the reference value must be a finite number >= 0, got {}", r.value));
  if (std::isnan(r.lower) || r.lower > 0 || r.lower < -1)
    fail(file, a[1], key, fmt::format("the lower tolerance is a fraction of the reference in [-1, 0] (-0.05: 5% below), got {}", r.lower));
  if (std::isnan(r.upper) || r.upper < 0)
    fail(file, a[2], key, fmt::format("the upper tolerance is a fraction of the reference >= 0 (0.05: 5% above; inf: unbounded), got {}", r.upper));
  r.unit = fig.unit;
  if (a.size() == 4) {
    if (!a[3].is_string()) fail(file, a[3], key, fmt::format("expected the unit as a string, got {}", type_name(a[3])));
    const std::string unit = a[3].as_string().str;
    if (unit != fig.unit)
      fail(file, a[3], key, fmt::format("{} is measured in \"{}\", not \"{}\"", fig.name, fig.unit, printable(unit)));
  }
  return r;
}

void read_run(const std::string& file, const Value& table, const std::string& prefix, SystemReferences& sys,
              const std::string& job, const std::string& run) {
  auto& figures = sys.runs[{job, run}];
  for (const auto& [name, v] : table.as_table()) {
    const std::string key = prefix + "." + name;
    const ReferenceFigure* fig = find_figure(name);
    if (!fig) fail(file, v, key, fmt::format("unknown figure (known: {})", figure_names()));
    figures[name] = reference_value(file, v, key, *fig);
  }
  if (figures.empty()) fail(file, table, prefix, "a run's table names at least one figure");
}

SystemReferences read_system(const std::string& file, const std::string& name, const Value& table) {
  SystemReferences sys;
  sys.name = name;
  const std::string prefix = "system." + (name == "*" ? std::string("\"*\"") : name);
  for (const auto& [key, v] : table.as_table()) {
    const std::string dotted = prefix + "." + key;
    if (key == "fingerprint" || key == "description") {
      if (!v.is_string()) fail(file, v, dotted, fmt::format("expected a string, got {}", type_name(v)));
      (key == "fingerprint" ? sys.fingerprint : sys.description) = v.as_string().str;
      continue;
    }
    if (!v.is_table())
      fail(file, v, dotted, "expected a job's table [system.NAME.JOB.RUN] (or the keys fingerprint, description)");
    for (const auto& [run, rv] : v.as_table()) {
      if (!rv.is_table()) fail(file, rv, dotted + "." + run, fmt::format("expected a run's table of figures, got {}", type_name(rv)));
      read_run(file, rv, dotted + "." + run, sys, key, run);
    }
  }
  if (name == "*" && !sys.fingerprint.empty())
    fail(file, table.as_table().at("fingerprint"), prefix + ".fingerprint", "the '*' system matches every system; it takes no fingerprint");
  return sys;
}

}  // namespace

const std::vector<ReferenceFigure>& reference_figures() {
  static const std::vector<ReferenceFigure> figures{
      {"step_time_s", "s", "median step time over counted steps"},
      {"throughput_samples_per_s", "samples/s", "global batch / step time, median over counted steps"},
      {"tokens_per_s", "tokens/s", "throughput x sequence length"},
      {"slowest_stage_s", "s", "median busy time of the slowest stage"},
      {"bubble_measured", "fraction", "median measured bubble"},
      {"peak_mem_bytes", "B", "largest peak memory over ranks"},
  };
  return figures;
}

References parse_references(const std::string& text, const std::string& source_name) {
  const Value root = toml_source::parse_toml(text, source_name);
  References refs;
  refs.path = source_name;
  for (const auto& [key, v] : root.as_table()) {
    if (key == "schema") {
      if (!v.is_integer() || v.as_integer() != 1) fail(source_name, v, "schema", "expected 1 (the references format's version)");
      continue;
    }
    if (key != "system" || !v.is_table())
      fail(source_name, v, key, "unknown key: a references file has `schema = 1` and [system.NAME] tables");
    for (const auto& [name, sv] : v.as_table()) {
      if (!sv.is_table()) fail(source_name, sv, "system." + name, fmt::format("expected a table, got {}", type_name(sv)));
      refs.systems.push_back(read_system(source_name, name, sv));
    }
  }
  return refs;
}

References load_references(const std::string& path) {
  const auto text = toml_source::read_at_most(path, toml_source::kMaxTomlBytes + 1);
  if (!text) throw ConfigError(fmt::format("{}: cannot open references file", printable(path)));
  return parse_references(*text, path);
}

const SystemReferences* match_system(const References& refs, const std::string& system_name,
                                     const std::string& fingerprint, std::string* matched_by) {
  auto found = [&](const SystemReferences& s, const char* how) {
    if (matched_by) *matched_by = how;
    return &s;
  };
  if (!system_name.empty())
    for (const auto& s : refs.systems)
      if (s.name == system_name && s.name != "*") return found(s, "name");
  if (system_name.empty())  // a named system is judged under its name or not at all
    for (const auto& s : refs.systems)
      if (!s.fingerprint.empty() && s.fingerprint == fingerprint) return found(s, "fingerprint");
  for (const auto& s : refs.systems)
    if (s.name == "*") return found(s, "*");
  if (matched_by) matched_by->clear();
  return nullptr;
}

std::vector<ReferenceCheck> check_references(const References& refs, const std::string& system_name,
                                             const std::string& fingerprint, const std::string& job,
                                             const std::string& run, const std::map<std::string, double>& measured) {
  ReferenceCheck base;
  base.job = job;
  base.run = run;
  const SystemReferences* sys = match_system(refs, system_name, fingerprint, &base.matched_by);
  const std::string who = system_name.empty() ? fmt::format("hardware \"{}\"", fingerprint) : "system " + system_name;
  const std::map<std::string, ReferenceValue>* figures = nullptr;
  if (sys)
    if (const auto it = sys->runs.find({job, run}); it != sys->runs.end()) figures = &it->second;
  // A system without an entry for this run falls back to '*' (logged only).
  if (sys && !figures && sys->name != "*")
    for (const auto& s : refs.systems)
      if (const auto it = s.runs.find({job, run}); s.name == "*" && it != s.runs.end()) {
        sys = &s;
        base.matched_by = "*";
        figures = &it->second;
      }
  if (!figures) {
    base.system = sys ? sys->name : "";
    base.verdict = "no reference";
    base.evidence = sys ? fmt::format("{} has no reference for {} / {} in {} (not judged)",
                                      sys->name == "*" ? std::string("'*'") : "system " + sys->name, job, run, refs.path)
                        : fmt::format("no reference for {} in {} (not judged)", who, refs.path);
    return {base};
  }
  std::vector<ReferenceCheck> out;
  for (const auto& [figure, ref] : *figures) {
    ReferenceCheck c = base;
    c.system = sys->name;
    c.figure = figure;
    c.unit = ref.unit;
    c.reference = ref;
    const auto m = measured.find(figure);
    c.measured = m == measured.end() ? std::numeric_limits<double>::quiet_NaN() : m->second;
    const double lo = ref.value * (1 + ref.lower), hi = ref.value * (1 + ref.upper);
    const std::string range = fmt::format("[{}, {}] {} (reference {} {:+.3g}%/{:+.3g}%, {})", number_text(lo, ref.unit),
                                          number_text(hi, ref.unit), ref.unit, number_text(ref.value, ref.unit),
                                          100 * ref.lower, 100 * ref.upper, ref.where);
    if (!std::isfinite(c.measured)) {
      c.verdict = "no reference";
      c.evidence = fmt::format("{} was not measured in this run (reference {})", figure, range);
    } else {
      const bool inside = c.measured >= lo && c.measured <= hi;
      c.verdict = sys->name == "*" ? "logged" : inside ? "within" : "outside";
      c.evidence = fmt::format("{} {} {} {}", number_text(c.measured, ref.unit), ref.unit, inside ? "in" : "outside", range);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace pipebench
