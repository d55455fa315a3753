// Per-system expected figures (docs/reproduce.md, "References"), ReFrame's
// model: a references.toml maps a system and a job's run to the figures it
// should measure, each with a lower and an upper tolerance relative to the
// reference value and, optionally, its unit.
//
//   schema = 1
//   [system.laptop]                       # the name given at run time:
//   fingerprint = "cpu | ... | 2 ranks"   #   --system / PIPEBENCH_SYSTEM, else this
//   [system.laptop.default.two_stage_pipeline]
//   step_time_s = [0.270, -0.05, 0.05, "s"]   # 0.2565 .. 0.2835 s passes
//   [system."*".default.two_stage_pipeline]   # any other system: logged, never judged
//   step_time_s = [0.3, -0.5, 0.5]
//
// Contract: load_references returns references that satisfy every rule or
// throws ConfigError "<file>:<line>: <key>: <what was expected>"; a system
// without references for a job and run is reported as such and never failed.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pipebench {

// The figures a reference may name, with their units.
struct ReferenceFigure {
  const char* name;   // step_time_s, throughput_samples_per_s, ...
  const char* unit;   // "s", "samples/s", "tokens/s", "fraction", "B"
  const char* what;   // for docs and reports
};
const std::vector<ReferenceFigure>& reference_figures();

struct ReferenceValue {
  double value = 0.0;
  double lower = 0.0;  // relative: value x (1 + lower) is the lowest that passes; <= 0
  double upper = 0.0;  // value x (1 + upper) the highest; >= 0 (inf: unbounded)
  std::string unit;
  std::string where;   // "references.toml:12"
};

struct SystemReferences {
  std::string name;         // "*": every system without its own entry; only logged
  std::string fingerprint;  // the report's hardware fingerprint this system is matched by; "" = by name only
  std::string description;
  // (job, run) -> figure -> reference
  std::map<std::pair<std::string, std::string>, std::map<std::string, ReferenceValue>> runs;
};

struct References {
  std::string path;
  std::vector<SystemReferences> systems;  // in file order
};

References load_references(const std::string& path);
References parse_references(const std::string& text, const std::string& source_name);

// One figure of one run judged against the system's reference.
struct ReferenceCheck {
  std::string system;       // the system judged under ("" when none matched)
  std::string matched_by;   // "name", "fingerprint", "*" or "" (no system)
  std::string job, run, figure, unit;
  double measured = 0.0;
  ReferenceValue reference;
  // within | outside | logged (the '*' system: shown, never judged) |
  // no reference (the system has none for this run or figure)
  std::string verdict;
  std::string evidence;     // "0.281 s in [0.2565, 0.2835] s (reference 0.270 s −5%/+5%)"
};

// The system a results file is judged under: the one named `system_name`
// (recorded at run time), else the one whose fingerprint is `fingerprint`,
// else '*'; null when none.
const SystemReferences* match_system(const References& refs, const std::string& system_name,
                                     const std::string& fingerprint, std::string* matched_by = nullptr);

// Every figure of `measured` (figure name -> value) that the matched system
// references for (job, run), judged; one "no reference" check when there is
// no system or no entry for the run.
std::vector<ReferenceCheck> check_references(const References& refs, const std::string& system_name,
                                             const std::string& fingerprint, const std::string& job,
                                             const std::string& run, const std::map<std::string, double>& measured);

}  // namespace pipebench
