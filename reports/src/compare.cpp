// The reproducibility comparison (report/compare.hpp): reads the files,
// pairs runs by name and judges every check. Rendering is compare_render.cpp.
#include "pipebench/report/compare.hpp"
#include "pipebench/results/robust_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/plan/memory.hpp"
#include "pipebench/report/history_index.hpp"
#include "pipebench/results/metrics.hpp"
#include "report_common.hpp"

namespace pipebench {

using report_detail::attr;
using report_detail::counted_steps;

namespace {


bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<double> counted(const RunResult& r, const std::vector<double>& per_step) {
  std::vector<double> out;
  for (const std::size_t i : counted_steps(r))
    if (i < per_step.size()) out.push_back(per_step[i]);
  return out;
}

std::string percent(double tolerance) { return fmt::format("{:.3g}%", 100 * tolerance); }

// A figure from per-step samples of both runs.
FigureVerdict figure_from_samples(const std::string& name, const std::string& unit, const std::vector<double>& ref,
                                  const std::vector<double>& cand, double tolerance) {
  FigureVerdict f;
  f.figure = name;
  f.unit = unit;
  f.reference = ref.empty() ? kNaN : compute_stats(ref).median;
  f.candidate = cand.empty() ? kNaN : compute_stats(cand).median;
  f.ratio = ref.empty() || cand.empty() ? Interval{kNaN, kNaN, kNaN} : speedup_interval(cand, ref);
  f.verdict = judge_ratio(f.ratio, tolerance);
  const std::string band = fmt::format("±{}", percent(tolerance));
  if (f.verdict == kNotApplicable) {
    f.evidence = "no ratio: a run has no counted steps or a non-positive value";
  } else {
    const std::string ci = fmt::format("candidate / reference {:.4g} (95% interval {:.4g} to {:.4g}, {} vs {} steps)",
                                       f.ratio.estimate, f.ratio.low, f.ratio.high, cand.size(), ref.size());
    if (f.verdict == kReproduced) f.evidence = ci + ": inside " + band;
    else if (f.verdict == kNotReproduced) f.evidence = ci + ": wholly outside " + band;
    else f.evidence = ci + ": straddles a bound of " + band + "; more counted steps (--set train.repeats=N) or a quieter machine decide it";
  }
  return f;
}

}  // namespace

std::vector<FigureVerdict> compare_performance(const RunResult& ref, const RunResult& cand, double tolerance) {
  std::vector<FigureVerdict> out;
  const auto ref_t = counted(ref, ref.step_time_s), cand_t = counted(cand, cand.step_time_s);
  out.push_back(figure_from_samples("median step time", "s", ref_t, cand_t, tolerance));
  auto per_sample = [](const RunResult& r, std::vector<double> t) {
    for (double& x : t) x = static_cast<double>(r.spec.global_batch()) / x;  // every replica's samples
    return t;
  };
  out.push_back(figure_from_samples("throughput", "samples/s", per_sample(ref, ref_t), per_sample(cand, cand_t), tolerance));
  out.push_back(figure_from_samples("slowest stage", "s", counted(ref, ref.slowest_stage_s), counted(cand, cand.slowest_stage_s),
                                    tolerance));
  FigureVerdict bubble = figure_from_samples("bubble (measured)", "fraction", counted(ref, ref.bubble_measured),
                                             counted(cand, cand.bubble_measured), tolerance);
  if (ref.spec.pipeline_size == 1 && cand.spec.pipeline_size == 1) {
    bubble.ratio = {kNaN, kNaN, kNaN};
    bubble.verdict = kNotApplicable;
    bubble.evidence = "a single-stage run has no pipeline bubble (what it measures is idle noise)";
  }
  out.push_back(bubble);
  FigureVerdict mem;
  mem.figure = "peak memory (largest rank)";
  mem.unit = "B";
  mem.reference = static_cast<double>(ref.peak_mem_max_bytes);
  mem.candidate = static_cast<double>(cand.peak_mem_max_bytes);
  const double r = mem.reference > 0 ? mem.candidate / mem.reference : kNaN;
  mem.ratio = {r, r, r};
  mem.verdict = judge_ratio(mem.ratio, tolerance);
  mem.evidence = std::isnan(r) ? "no memory recorded"
                               : fmt::format("candidate / reference {:.6g} (exact: the tracker counts bytes; {})", r,
                                             format_byte_change(ref.peak_mem_max_bytes, cand.peak_mem_max_bytes));
  out.push_back(mem);
  return out;
}

namespace {

// When both runs ran their recorded warmup + repeats and at least one went
// on (the stability extension), both cut to the steps both ran; returns
// what was done ("" when nothing).
std::string common_steps(RunResult& a, RunResult& b) {
  const std::size_t na = a.step_time_s.size(), nb = b.step_time_s.size();
  const auto planned = static_cast<std::size_t>(a.warmup + a.repeats);
  if (na == nb || a.warmup != b.warmup || a.repeats != b.repeats || std::min(na, nb) < planned) return "";
  const std::size_t n = std::min(na, nb);
  for (RunResult* r : {&a, &b}) {
    for (auto* v : {&r->loss, &r->grad_norm, &r->step_time_s, &r->slowest_stage_s, &r->bubble_measured})
      if (v->size() > n) v->resize(n);
    for (auto* v : {&r->is_warmup, &r->clipped})
      if (v->size() > n) v->resize(n);
  }
  return fmt::format("the stability extension ran {} steps in the reference and {} in the candidate: every per-step check "
                     "compares the first {}",
                     na, nb, n);
}

bool has_values(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

ExactCheck clipped_check(const RunResult& ref, const RunResult& cand) {
  ExactCheck c;
  c.what = "clipped steps";
  auto count = [](const RunResult& r) {
    std::size_t n = 0;
    for (const std::size_t i : counted_steps(r)) n += i < r.clipped.size() && r.clipped[i];
    return n;
  };
  if (!has_values(ref.grad_norm) && !has_values(cand.grad_norm)) {
    c.verdict = kNotApplicable;
    c.evidence = "no gradients measured (inference, or the sim backend)";
    return c;
  }
  const std::size_t a = count(ref), b = count(cand);
  c.verdict = a == b ? kReproduced : kNotReproduced;
  c.evidence = fmt::format("{} of {} counted steps clipped in the reference, {} of {} in the candidate", a,
                           counted_steps(ref).size(), b, counted_steps(cand).size());
  return c;
}

ExactCheck memory_check(const RunResult& ref, const RunResult& cand, std::vector<MemoryDifference>& diffs) {
  ExactCheck c;
  c.what = "memory per rank and category";
  const std::size_t ranks = std::max(ref.peak_mem_bytes.size(), cand.peak_mem_bytes.size());
  auto at = [](const std::vector<std::uint64_t>& v, std::size_t i) { return i < v.size() ? v[i] : std::uint64_t{0}; };
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    auto add = [&](const std::string& category, std::uint64_t a, std::uint64_t b) {
      if (a != b) diffs.push_back({static_cast<int>(rank), category, a, b});
    };
    add("total", at(ref.peak_mem_bytes, rank), at(cand.peak_mem_bytes, rank));
    for (int k = 0; k < kNumMemCategories; ++k)
      add(std::string(to_string(static_cast<MemCategory>(k))), at(ref.peak_mem_by_category[k], rank),
          at(cand.peak_mem_by_category[k], rank));
  }
  if (ref.peak_mem_bytes.size() != cand.peak_mem_bytes.size()) {
    c.verdict = kNotReproduced;
    c.evidence = fmt::format("{} ranks in the reference, {} in the candidate", ref.peak_mem_bytes.size(),
                             cand.peak_mem_bytes.size());
  } else if (diffs.empty()) {
    c.verdict = kReproduced;
    c.evidence = fmt::format("identical to the byte on all {} rank(s) and {} categories", ranks, kNumMemCategories);
  } else {
    const MemoryDifference& d = diffs.front();
    c.verdict = kNotReproduced;
    c.evidence = fmt::format("{} (rank, category) peaks differ; first: rank {} {} {} B -> {} B ({})", diffs.size(), d.rank,
                             d.category, d.reference, d.candidate, format_byte_change(d.reference, d.candidate));
  }
  return c;
}

WorkloadKeys keys_of(const FileView& f, const RunResult& r) {
  if (!r.workload.empty()) return parse_workload_text(r.workload);
  if (f.job) return workload_keys(*f.job, r.spec);
  return {};
}

// The run's effective TOML keys: the job's tables and this run's table (as run.KEY).
WorkloadKeys toml_keys_of(const FileView& f, const std::string& run) {
  WorkloadKeys out;
  try {
    for (auto& [k, v] : toml_keys(attr(f.result.root_attrs, "job_toml"), f.path)) {
      if (!k.starts_with("run.")) out[k] = v;
      else if (k.starts_with("run." + run + ".")) out["run." + k.substr(5 + run.size())] = v;
    }
  } catch (const Error&) {  // an unreadable job_toml: the fingerprint keys still say what differs
  }
  out.erase("run.name");
  return out;
}

std::vector<SideBySide> differing(const WorkloadKeys& a, const WorkloadKeys& b, std::set<std::string>& named) {
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  std::vector<SideBySide> rows;
  for (const auto& k : names) {
    const std::string x = a.count(k) ? a.at(k) : "(none)", y = b.count(k) ? b.at(k) : "(none)";
    if (x != y && named.insert(k).second) rows.push_back({k, x, y, true});
  }
  return rows;
}

// Key by key, what differs: first the keys of the workload fingerprint (the
// normalised configuration: defaults filled in), then any other key of the
// effective TOML (warm-up, repeats, the machine's sim_load, names).
std::vector<SideBySide> workload_rows(const FileView& rf, const RunResult& ref, const FileView& cf, const RunResult& cand) {
  std::set<std::string> named;
  std::vector<SideBySide> rows = differing(keys_of(rf, ref), keys_of(cf, cand), named);
  for (auto& r : differing(toml_keys_of(rf, ref.spec.name), toml_keys_of(cf, cand.spec.name), named)) rows.push_back(std::move(r));
  return rows;
}

std::string status_of(const RunResult* r) {
  if (!r) return "absent";
  if (r->status == RunStatus::ok) return "ok";
  if (r->status == RunStatus::skipped) return "skipped";
  return fmt::format("failed ({}: {})", to_string(r->failure_kind), r->failure_message);
}

// A run whose reference or candidate did not complete: judged by its status.
bool judge_by_status(const RunResult* ref, const RunResult* cand, RunComparison& c) {
  if (ref && cand && ref->status == RunStatus::ok && cand->status == RunStatus::ok) return false;
  if (!cand) {
    c.verdict = kNotReproduced;
    c.reasons.push_back("the candidate has no run of this name");
  } else if (!ref) {
    c.verdict = kNotApplicable;
    c.reasons.push_back("only the candidate has this run: nothing to reproduce");
  } else if (ref->status == RunStatus::skipped && cand->status == RunStatus::skipped) {
    c.verdict = kNotApplicable;
    c.reasons.push_back("skipped in both (not measured)");
  } else if (ref->status == RunStatus::failed && cand->status == RunStatus::failed &&
             ref->failure_kind == cand->failure_kind) {
    c.verdict = kReproduced;
    c.reasons.push_back(fmt::format("both failed with kind {}: the failure reproduced", to_string(ref->failure_kind)));
  } else if (ref->status != RunStatus::ok) {
    c.verdict = kNotReproduced;
    c.reasons.push_back(fmt::format("the reference run is {}, the candidate's {}", status_of(ref), status_of(cand)));
  } else {
    c.verdict = kNotReproduced;
    c.reasons.push_back(fmt::format("the candidate run is {}", status_of(cand)));
  }
  return true;
}

RunComparison compare_run(const FileView& rf, const RunResult* ref, const FileView& cf, const RunResult* cand,
                          const CompareOptions& o, const References* refs) {
  RunComparison c;
  c.run = ref ? ref->spec.name : cand->spec.name;
  c.reference_status = status_of(ref);
  c.candidate_status = status_of(cand);
  if (ref) c.workload_fingerprint_reference = ref->workload_fingerprint;
  if (cand) c.workload_fingerprint_candidate = cand->workload_fingerprint;
  if (ref && cand) c.workload = workload_rows(rf, *ref, cf, *cand);
  if (cand && cand->status == RunStatus::ok && refs)
    c.references = check_references(*refs, attr(cf.result.root_attrs, "system"), cf.fingerprint, report_detail::job_name(cf),
                                    c.run, reference_figures_of(cf, *cand));
  std::vector<std::string> verdicts;
  if (judge_by_status(ref, cand, c)) {
    verdicts.push_back(c.verdict);
  } else {
    // The stability extension (train.max_repeats) goes on past `repeats` as
    // the step times, not the numbers, decide: two measurements of one
    // workload may stop at different counts. Their numerics are compared
    // over the steps both ran, said so; any other count difference stays one.
    RunResult ref_steps = *ref, cand_steps = *cand;
    const std::string cut = common_steps(ref_steps, cand_steps);
    ref = &ref_steps;
    cand = &cand_steps;
    const bool losses = has_values(ref->loss) || has_values(cand->loss);
    c.numerics.push_back(losses ? compare_series("loss per step", ref->loss, cand->loss)
                                : ExactCheck{"loss per step", kNotApplicable, "no loss computed (the sim backend)", -1, 0.0});
    const bool norms = has_values(ref->grad_norm) || has_values(cand->grad_norm);
    c.numerics.push_back(norms ? compare_series("gradient norm per step", ref->grad_norm, cand->grad_norm)
                               : ExactCheck{"gradient norm per step", kNotApplicable, "no gradients (inference or sim)", -1, 0.0});
    c.numerics.push_back(clipped_check(*ref, *cand));
    if (!cut.empty())
      for (ExactCheck& n : c.numerics) n.evidence += " (" + cut + ")";
    c.numerics.push_back(memory_check(*ref, *cand, c.memory));
    c.performance = compare_performance(*ref, *cand, o.tolerance);
    for (const auto& n : c.numerics) {
      verdicts.push_back(n.verdict);
      if (n.verdict == kNotReproduced) c.reasons.push_back(n.what + ": " + n.evidence);
    }
    bool straddles = false;
    for (const auto& f : c.performance) {
      verdicts.push_back(f.verdict);
      if (f.verdict != kNotReproduced && f.verdict != kInconclusive) continue;
      straddles = straddles || f.verdict == kInconclusive;
      c.reasons.push_back(fmt::format("{} x{:.4g} (95% interval {:.4g} to {:.4g}) {} ±{}", f.figure, f.ratio.estimate,
                                      f.ratio.low, f.ratio.high, f.verdict == kNotReproduced ? "outside" : "straddles",
                                      percent(o.tolerance)));
    }
    if (straddles) c.reasons.push_back("more counted steps (--set train.repeats=N) or a quieter machine decide what straddles");
  }
  for (const auto& r : c.references)
    if (r.verdict == "outside") {
      verdicts.push_back(kNotReproduced);
      c.reasons.push_back(fmt::format("{} outside its reference on system {}: {}", r.figure, r.system, r.evidence));
    }
  if (!c.workload.empty() && worst_verdict(verdicts) != kReproduced) {
    std::string keys;
    for (const auto& w : c.workload) keys += (keys.empty() ? "" : ", ") + w.name;
    c.reasons.push_back("the recorded workloads differ in " + keys + " (the workload table)");
  }
  c.verdict = worst_verdict(verdicts);
  return c;
}

// Environment variables recorded as "NAME=value\n" lines.
std::map<std::string, std::string> env_vars(const FileView& f) {
  std::map<std::string, std::string> out;
  const std::string text = attr(f.result.provenance_attrs, "environment");
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t nl = std::min(text.find('\n', i), text.size());
    const std::string line = text.substr(i, nl - i);
    if (const auto eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    i = nl + 1;
  }
  return out;
}

std::string hosts_text(const JobResult& jr) {
  return fmt::format("{}", fmt::join(jr.hostnames, ", "));
}

std::vector<SideBySide> environment_rows(const FileView& a, const FileView& b) {
  std::vector<SideBySide> rows;
  auto add = [&](std::string name, std::string x, std::string y) {
    if (x.empty() && y.empty()) return;  // not recorded on either side (no GPU, no Slurm)
    const bool differs = x != y;
    rows.push_back({std::move(name), std::move(x), std::move(y), differs});
  };
  auto root = [&](const char* name, const char* key) { add(name, attr(a.result.root_attrs, key), attr(b.result.root_attrs, key)); };
  auto prov = [&](const char* name, const char* key) {
    add(name, attr(a.result.provenance_attrs, key), attr(b.result.provenance_attrs, key));
  };
  root("pipebench version", "tool_version");
  root("git sha", "git_sha");
  prov("build type", "build_type");
  prov("compiler", "compiler");
  prov("compiler flags", "compiler_flags");
  prov("MPI", "mpi_library_version");
  prov("HDF5", "hdf5_version");
  prov("BLAS", "blas");
  prov("CUDA", "cuda_version");
  prov("NCCL", "nccl_version");
  prov("GPU driver", "driver_version");
  prov("CPU", "cpu_model");
  prov("GPUs (per rank)", "gpu_names");
  prov("GPU UUIDs (per rank)", "gpu_uuids");
  prov("GPU PCI bus ids (per rank)", "gpu_pci_bus_ids");
  prov("transport", "transport");
  add("ranks", std::to_string(a.result.hostnames.size()), std::to_string(b.result.hostnames.size()));
  add("hosts (per rank)", hosts_text(a.result), hosts_text(b.result));
  prov("Slurm node list", "slurm_job_nodelist");
  root("system", "system");
  add("evidence level", a.result.evidence_level, b.result.evidence_level);
  const auto ea = env_vars(a), eb = env_vars(b);
  std::set<std::string> names;
  for (const auto& [k, v] : ea) names.insert(k);
  for (const auto& [k, v] : eb) names.insert(k);
  for (const auto& k : names)
    add("$" + k, ea.count(k) ? ea.at(k) : "(unset)", eb.count(k) ? eb.at(k) : "(unset)");
  return rows;
}

const RunResult* find_run(const JobResult& jr, const std::string& name) {
  for (const auto& r : jr.runs)
    if (r.spec.name == name) return &r;
  return nullptr;
}

// Why `cand` is the reference's own measurement — the same launch's
// results_id (the file again, a copy or a link) or the same bytes — or "".
// Every figure of it then agrees with the reference and proves nothing.
std::string same_measurement(const FileView& ref, const FileView& cand) {
  const std::string id = attr(ref.result.root_attrs, "results_id");
  if (!id.empty() && id == attr(cand.result.root_attrs, "results_id"))
    return fmt::format("the candidate is the reference's own measurement (results_id {}), not a reproduction of it", id);
  if (!ref.sha256.empty() && ref.sha256 == cand.sha256)
    return fmt::format("the candidate is a byte copy of the reference (sha256 {}), not a reproduction of it", ref.sha256);
  return "";
}

CandidateComparison compare_file(const FileView& ref, FileView cand, const CompareOptions& o, const References* refs) {
  CandidateComparison c;
  c.file = std::move(cand);
  c.environment = environment_rows(ref, c.file);
  std::vector<std::string> verdicts;
  for (const auto& r : ref.result.runs) c.runs.push_back(compare_run(ref, &r, c.file, find_run(c.file.result, r.spec.name), o, refs));
  for (const auto& r : c.file.result.runs)
    if (!find_run(ref.result, r.spec.name)) c.runs.push_back(compare_run(ref, nullptr, c.file, &r, o, refs));
  if (report_detail::job_name(ref) != report_detail::job_name(c.file))
    for (auto& run : c.runs) run.reasons.push_back("the files are of different jobs");
  if (const std::string same = same_measurement(ref, c.file); !same.empty())
    for (auto& run : c.runs) {
      run.verdict = kNotApplicable;
      run.reasons.insert(run.reasons.begin(), same);
    }
  for (const auto& run : c.runs) verdicts.push_back(run.verdict);
  c.verdict = worst_verdict(verdicts);
  return c;
}

}  // namespace

std::string worst_verdict(const std::vector<std::string>& verdicts) {
  bool any_inconclusive = false, any_reproduced = false;
  for (const auto& v : verdicts) {
    if (v == kNotReproduced) return kNotReproduced;
    any_inconclusive = any_inconclusive || v == kInconclusive;
    any_reproduced = any_reproduced || v == kReproduced;
  }
  return any_inconclusive ? kInconclusive : any_reproduced ? kReproduced : kNotApplicable;
}

std::string judge_ratio(const Interval& ratio, double tolerance) {
  if (std::isnan(ratio.estimate) || std::isnan(ratio.low) || std::isnan(ratio.high)) return kNotApplicable;
  const double lo = 1 - tolerance, hi = 1 + tolerance;
  if (ratio.low >= lo && ratio.high <= hi) return kReproduced;
  if (ratio.high < lo || ratio.low > hi) return kNotReproduced;
  return kInconclusive;
}

ExactCheck compare_series(const std::string& what, const std::vector<double>& reference,
                          const std::vector<double>& candidate) {
  ExactCheck c;
  c.what = what;
  const std::size_t n = std::min(reference.size(), candidate.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (same_bits(reference[i], candidate[i])) continue;
    if (c.first_differing_step < 0) c.first_differing_step = static_cast<int>(i);
    const double rel = std::fabs(candidate[i] - reference[i]) / std::max(std::fabs(reference[i]), 1e-300);
    c.max_rel_diff = std::isnan(rel) ? rel : std::isnan(c.max_rel_diff) ? c.max_rel_diff : std::max(c.max_rel_diff, rel);
  }
  if (reference.size() != candidate.size() && c.first_differing_step < 0) c.first_differing_step = static_cast<int>(n);
  if (c.first_differing_step < 0) {
    c.verdict = kReproduced;
    c.evidence = fmt::format("bit-identical over all {} steps", n);
    return c;
  }
  c.verdict = kNotReproduced;
  c.evidence = fmt::format("first differs at step {} (0-based, warm-up included)", c.first_differing_step);
  if (reference.size() != candidate.size())
    c.evidence += fmt::format("; {} steps in the reference, {} in the candidate", reference.size(), candidate.size());
  if (c.max_rel_diff > 0 || std::isnan(c.max_rel_diff))
    c.evidence += fmt::format("; largest relative difference {:.3g} over the {} steps both have", c.max_rel_diff, n);
  return c;
}


namespace {

// The index compare consults (CompareOptions::index_path); null without one.
std::unique_ptr<HistoryIndex> open_compare_index(const CompareOptions& o, std::vector<std::string>& notes) {
  if (!o.use_index) return nullptr;
  std::string path = o.index_path;
  if (path.empty()) {
    path = default_index_path(std::filesystem::path(o.reference).parent_path().string());
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return nullptr;  // compare makes none by default
  }
  auto index = std::make_unique<HistoryIndex>(path, o.index_writer);
  if (index->usable()) return index;
  notes = index->notes();
  return nullptr;
}

}  // namespace

CompareData load_compare(const CompareOptions& o) {
  CompareData d;
  d.options = o;
  std::unique_ptr<HistoryIndex> index = open_compare_index(o, d.index_notes);
  int known = 0, read = 0;
  const auto read_file = [&](const std::string& path) {
    FileView f = read_results_file(path, index.get());
    ++(f.known_to_index ? known : read);
    return f;
  };
  d.reference = read_file(o.reference);
  std::optional<References> refs;
  if (!o.references_path.empty()) refs = load_references(o.references_path);
  if (refs)
    for (const auto& r : d.reference.result.runs)
      if (r.status == RunStatus::ok)
        for (auto& c : check_references(*refs, attr(d.reference.result.root_attrs, "system"), d.reference.fingerprint,
                                        report_detail::job_name(d.reference), r.spec.name, reference_figures_of(d.reference, r)))
          d.reference_references.push_back(std::move(c));
  std::vector<std::string> verdicts;
  for (const auto& path : o.candidates) {
    try {
      d.candidates.push_back(compare_file(d.reference, read_file(path), o, refs ? &*refs : nullptr));
      verdicts.push_back(d.candidates.back().verdict);
    } catch (const ResultsError& e) {
      d.skipped.push_back({path, e.what()});
      verdicts.push_back(kNotReproduced);
    }
  }
  d.verdict = worst_verdict(verdicts);
  if (index) {
    index->save();
    d.index_notes = index->notes();
    d.index_notes.push_back(fmt::format("history index {}: {} file(s) it knew unchanged, {} read and added",
                                        index->path(), known, read));
  }
  return d;
}

}  // namespace pipebench
