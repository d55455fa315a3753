// `pipebench compare REFERENCE CANDIDATE...`: the reproducibility report
// (docs/reproduce.md). Does each candidate file reproduce the reference, run
// by run: the environment side by side, the numerics exactly, the
// performance as candidate / reference ratios with 95% intervals judged
// against a tolerance, optional per-system references, a verdict per run and
// overall, and an artifact description for a paper's appendix.
//
// Verdicts: "reproduced", "not reproduced", "inconclusive", "not applicable".
// A figure's ratio interval inside [1 - tolerance, 1 + tolerance] is
// reproduced, one wholly outside it not reproduced, one straddling a bound
// inconclusive. Numerics (losses, gradient norms, clipping, memory per rank
// and category) are exact: identical bits or not reproduced. A run is not
// reproduced when any of its checks is, inconclusive when any is and none is
// not reproduced, else reproduced; the overall verdict is the worst run's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipebench/core/references.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/results/robust_stats.hpp"

namespace pipebench {

inline constexpr const char* kReproduced = "reproduced";
inline constexpr const char* kNotReproduced = "not reproduced";
inline constexpr const char* kInconclusive = "inconclusive";
inline constexpr const char* kNotApplicable = "not applicable";

struct CompareOptions {
  std::string reference;
  std::vector<std::string> candidates;
  double tolerance = 0.05;      // relative, on every performance ratio
  std::string references_path;  // references.toml; "" = none
  // The history index (history_index.hpp): files it knows unchanged are read
  // without the isolated pre-read and the hash (every figure is still read
  // from the file: the numerics are compared step by step), files it does
  // not know are added. "" = the index beside the reference
  // (DIR/.pipebench-index.sqlite) when there is one; `use_index` false: none.
  std::string index_path;
  bool use_index = true;
  std::string index_writer;  // the pipebench reading it (its git sha)
};

// One performance figure: medians, the candidate / reference ratio with its
// 95% interval, the verdict and the evidence in words.
struct FigureVerdict {
  std::string figure, unit;
  double reference = 0.0, candidate = 0.0;
  Interval ratio{0.0, 0.0, 0.0};
  std::string verdict, evidence;
};

// The worst of `verdicts`: not reproduced > inconclusive > reproduced; not
// applicable only when nothing else was judged (a run's, a candidate's, the overall verdict).
std::string worst_verdict(const std::vector<std::string>& verdicts);

// `ratio` judged against `tolerance` as above (NaN estimate: not applicable).
std::string judge_ratio(const Interval& ratio, double tolerance);

// One exact check: the loss per step, the gradient norm per step, the
// clipped-step count, memory per rank and category.
struct ExactCheck {
  std::string what;
  std::string verdict;  // reproduced | not reproduced | not applicable
  std::string evidence;
  int first_differing_step = -1;  // 0-based; -1 when none differs
  double max_rel_diff = 0.0;
};

// Per-step values (warm-up included) compared bit for bit over the steps
// both have; a differing count of steps is a difference at the first step
// only one has. NaN equals NaN only when both hold the same bits.
ExactCheck compare_series(const std::string& what, const std::vector<double>& reference,
                          const std::vector<double>& candidate);

// The performance figures of one run in both files, judged against
// `tolerance`: median step time, throughput (each side's global batch,
// every replica's samples, per step), slowest stage, measured bubble and
// peak memory.
std::vector<FigureVerdict> compare_performance(const RunResult& reference, const RunResult& candidate, double tolerance);

// A side-by-side row: the environment, a workload key.
struct SideBySide {
  std::string name, reference, candidate;
  bool differs = false;
};

struct MemoryDifference {
  int rank = 0;
  std::string category;  // "total" or a MemCategory name
  std::uint64_t reference = 0, candidate = 0;
};

struct RunComparison {
  std::string run;
  std::string verdict;
  std::vector<std::string> reasons;     // why, one line per check that was not reproduced or inconclusive
  std::string reference_status, candidate_status;  // ok | failed (kind: message) | skipped | absent
  std::string workload_fingerprint_reference, workload_fingerprint_candidate;
  std::vector<SideBySide> workload;     // only the keys that differ
  std::vector<ExactCheck> numerics;     // loss, grad_norm, clipped, memory
  std::vector<MemoryDifference> memory; // every differing (rank, category)
  std::vector<FigureVerdict> performance;
  std::vector<ReferenceCheck> references;  // the candidate's figures against references.toml
};

struct CandidateComparison {
  FileView file;
  std::vector<SideBySide> environment;
  std::vector<RunComparison> runs;      // the reference's runs in its order, then runs only the candidate has
  std::string verdict;
};

struct CompareData {
  CompareOptions options;
  FileView reference;
  std::vector<ReferenceCheck> reference_references;  // the reference file's own figures against references.toml
  std::vector<CandidateComparison> candidates;
  std::vector<SkippedFile> skipped;     // candidates that could not be read
  std::string verdict;                  // overall
  std::vector<std::string> index_notes;  // what the index did, for stderr (never on the pages)
  bool any_not_reproduced() const { return verdict == kNotReproduced; }
};

// ResultsError when the reference cannot be read; unreadable candidates are
// `skipped` (and make the overall verdict not reproduced); ConfigError for a
// references file that does not parse.
CompareData load_compare(const CompareOptions& options);

std::string render_compare_html(const CompareData& d);
std::string render_compare_markdown(const CompareData& d);
std::string render_compare_json(const CompareData& d);
// The SC AD/AE-style artifact description of the reference and its reproduction.
std::string render_artifact_description(const CompareData& d);

}  // namespace pipebench
