// The report generator (SPEC §8, docs/reports.md): results files in,
// index.html + report.md + summary.json out.
//
// load_report reads every input through the results reader; files it cannot
// read are listed with the reason and skipped. It derives, per file and run,
// the figures the renderers print (so HTML and Markdown show the same
// numbers), and, across files of the same job, run and hardware
// fingerprint, the trend verdicts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/core/references.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/results/records.hpp"
#include "pipebench/results/regression.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

struct ReportOptions {
  std::vector<std::string> inputs;  // files or folders (recursive) to report on
  std::vector<std::string> history; // extra files or folders: trend history only
  RegressionRule rule;              // the nightly regression rule and its defaults (results/regression.hpp)
  std::vector<std::string> expected_jobs;  // job names that must have a file among the inputs (nightly)
  std::string references_path;             // references.toml (core/references.hpp); "" = none
  // The history index (history_index.hpp): "" = the default, DIR/.pipebench-index.sqlite
  // of the first --history folder (none when the history is only files); with
  // `use_index` false no index is read or written.
  std::string index_path;
  bool use_index = true;
  std::string index_writer;  // the pipebench reading it (its git sha): an index another one wrote is rebuilt
};

// One row of the seed's comparison table (metric | baseline | pipeline | Δ).
struct ComparisonRow {
  std::string metric;
  std::string unit;
  double baseline = 0.0;  // NaN when not applicable
  double pipeline = 0.0;
  std::string note;       // e.g. which stage
};

// The planner's prediction of a run — its plan recomputed from the recorded
// workload — beside what the run measured: how right the plan was.
struct PredictionRow {
  std::string metric;
  std::string unit;  // as ComparisonRow's ("s", "bytes", "fraction")
  double planned = 0.0;
  double measured = 0.0;
};
struct Prediction {
  // What the step time was predicted from: a device preset's time model, or
  // device.sim_flops_per_s (said to be a modelled speed where the run did
  // not run on the sim backend).
  std::string basis;
  // Step time (RunPlan::iteration_s / the median counted step), the largest
  // rank's peak memory (the plan's total / the tracker's peak) and the
  // bubble (the cost-weighted simulation / the measured median).
  std::vector<PredictionRow> rows;
};

// A prediction's rows as text cells — figure, planned, measured, the plan's
// error against the measurement ("-3.9%"; a bubble in points) — as the
// report and `tune --verify` print them.
std::vector<std::vector<std::string>> prediction_cells(const Prediction& p);

struct RunView {
  const RunResult* run = nullptr;
  const RunResult* baseline = nullptr;    // same file; null if none
  std::vector<ComparisonRow> comparison;  // empty without a baseline
  std::vector<std::string> advice;        // seed 000's next actions
  std::vector<double> busy_median_s;      // per rank, over counted steps
  int slowest_stage = -1;                 // by median busy time
  double clip_rate = 0.0;                 // clipped steps / counted steps
  double tokens_per_s = 0.0;
  double latency_median_s = 0.0, latency_p99_s = 0.0;  // inference
  int gantt_step = -1;                    // the counted step drawn (median step time)
  // The run's plan recomputed from the file's recorded workload (partition
  // table, schedule), once; empty when the workload could not be parsed.
  std::optional<RunPlan> plan;
  // An ok run with counted steps and a plan matching it (prediction_of).
  std::optional<Prediction> prediction;
  // From the run's events, streamed from its file at load (the report keeps
  // no run's events): those of gantt_step, and — with a plan that matches the
  // run — the per-action medians the simulated chart uses (EventDigest).
  std::vector<EventRecord> gantt_events;
  std::optional<SimCosts> measured_costs;
  // Seed 000's "recent average": trailing means over kRollingWindow counted
  // steps (results/metrics.hpp), one per counted step; loss empty on sim.
  std::vector<double> rolling_step_time_s, rolling_loss;
  std::vector<int> counted_step_index;    // the step index (0-based) of each counted step
  bool short_run = false;                 // fewer than kSeedShortSteps counted steps
};

struct FileView {
  std::string path;
  // The file read (device, inode). A launch may publish or checkpoint the
  // file while the report reads it (a checkpoint renamed over, a .h5.partial
  // linked to its .h5 and unlinked): later reads (charts, traces) go through
  // current_path(), which finds this same file again or says it is gone.
  FileId id{0, 0};
  JobResult result;
  std::optional<Job> job;       // parsed from the recorded job_toml
  std::string job_error;        // why `job` is empty
  std::string fingerprint;      // backend + hardware + world size (hardware_fingerprint)
  std::string sha256;           // of the bytes read: the file a report cites ("" for --history files, never cited)
  std::string role = "job";     // root attribute role: job | probe-trial | probe; only jobs are trended
  bool known_to_index = false;  // read as the history index knew it (no crash check, the recorded sha256)
  std::vector<RunView> runs;    // in the file's order
};

// The figures a references.toml can name, of run `r` of file `f`.
std::map<std::string, double> reference_figures_of(const FileView& f, const RunResult& r);

// The report's next actions about run `r`'s bubble (0, 1 or 2 lines): the
// measured bubble above the schedule simulated with the run's own action
// times is communication or the executor; that simulation above the closed
// form is the stages' times. Each gap counts past kBubbleGapMax.
std::vector<std::string> bubble_advice(const RunResult& r);

// "cpu | Intel(R) Xeon(R) Processor | 2 ranks[ | GPU names]": the
// hardware a trend series and a references.toml system are matched by.
std::string hardware_fingerprint(const JobResult& jr);

// One results file read as load_report reads each input (the HDF5 library
// tried in a child first, one version of a file being replaced, events
// skipped), with its job parsed, fingerprint, role and sha256. ResultsError
// "PATH: why" when it cannot be read. The runs' RunViews are left empty.
// With `index` (history_index.hpp), a file it knows unchanged is read without
// the child's read and the hash, and a file it does not know is added to it.
class HistoryIndex;
FileView read_results_file(const std::string& path, HistoryIndex* index = nullptr);

// The name that reaches the file `f` read now: its path, or the published
// name of a checkpoint published meanwhile; "" when neither does (replaced).
std::string current_path(const FileView& f);

struct TrendPoint {
  std::string created_utc;
  std::string path;
  std::string workload;             // workload_text of the run (core/workload_identity.hpp)
  double step_time_median_s = 0.0;
  double bubble_measured = 0.0;
  double peak_mem_bytes = 0.0;                // the largest over ranks
  std::vector<std::uint64_t> peak_mem_per_rank;
  std::vector<double> counted_step_times;
  double throughput = 0.0;          // samples/s, median over counted steps
  double slowest_stage_s = 0.0;     // median busy time of the slowest stage
  std::vector<double> loss;         // per step, warm-up included; empty on sim
  std::string git_sha;              // of the pipebench that wrote the file ("" when unrecorded)
  bool input = false;               // the file is among RESULTS (not only --history)
  // What makes two points one measurement: the launch (creation time, hosts,
  // pids), the run and its step times. A byte copy, the same file through a
  // link, or a launch's .h5.partial beside its .h5 share it and count once.
  std::string identity;
};

// What the trends read of one results file (report_trends.cpp, digest_of):
// per ok run of a job file, its series key beyond the file's (run name,
// workload fingerprint) and its point. The history index (history_index.hpp)
// keeps these, so that an unchanged history file is not read again.
struct TrendRun {
  std::string run;
  std::string workload_fingerprint;
  TrendPoint point;  // point.path and point.input are set when the point joins a report
};
struct FileDigest {
  std::string path;
  std::string role;          // FileView::role; only "job" files have runs here
  std::string job;           // the job's name
  std::string fingerprint;   // hardware_fingerprint
  std::string created_utc;   // root attribute ("" when absent)
  std::string git_sha;       // of the pipebench that wrote it ("" when unrecorded)
  std::vector<TrendRun> runs;
};

// A series: the files of one job and run on one hardware fingerprint with one
// workload fingerprint (docs/reports.md, "Series"). A changed configuration
// starts a new series; `changes` then says what changed from the series
// before it ("micro_batch_size 2 → 4").
struct Trend {
  std::string job, run, fingerprint;
  std::string workload_fingerprint;  // "unknown" for files that record none and whose job_toml is unreadable
  std::string changes;               // vs the previous series of the same job, run and hardware; "" if none
  // The judged file's trend: the series' files created before it, oldest
  // first, then the judged file (the last). A Trend is one file's verdict:
  // every file among RESULTS has its own, computed against the files before
  // it whatever else the history holds; files created in the same second as
  // the judged one (their order is unknown) or after it are not its history.
  std::vector<TrendPoint> points;
  // regression | improvement | no change | inconclusive (noisy) | insufficient history | new series
  // | history only (a series with no file among RESULTS: shown, never judged, never fails a job)
  std::string verdict;
  bool history_only = false;
  // The newest file among RESULTS of its series: its trend is the one in the
  // trends table and chart, and the one --fail-on-regression judges (an
  // older input file keeps its own verdict in the verdict table and summary.json).
  bool latest = true;
  int same_second_files = 0;  // left out of the history: created in the judged file's second
  int later_files = 0;        // left out: created after the judged file
  std::string reason;              // the figures behind the verdict (RegressionVerdict::reason)
  int history = 0;                 // earlier files of the series
  double p_value = 1.0;
  double night_spread = 0.0;       // robust relative spread of the earlier files' median step times
  double bar = 0.0;                // the change a verdict needs: max(threshold, noise_k x night_spread)
  double newest_cv = 0.0;          // the judged file's step-time CV (the loaded-machine guard)
  double history_cv = 0.0;         // the earlier files' median CV
  // Besides step time, from the newest file against the one before it:
  // peak memory per rank (exact on every backend: any change is flagged), the
  // loss per step (deterministic backends: any change is flagged); against the
  // history's median: the measured bubble as a difference in points, the
  // throughput and the slowest stage's time as relative changes.
  bool memory_increased = false, memory_decreased = false;
  bool numerics_changed = false;
  double bubble_delta_pts = 0.0;   // 100 x (newest - median of earlier), NaN without history
  double throughput_change = 0.0;  // newest / median of earlier - 1, NaN without history
  double slowest_stage_change = 0.0;
  std::vector<std::string> alerts; // "memory change: 1.00 MiB → 2.00 MiB (+100.0%)", "numerics changed: ..."
  double change = 0.0;             // newest median / median of the earlier counted steps - 1
};

struct SkippedFile {
  std::string path;
  std::string reason;
};

struct ReportData {
  ReportOptions options;
  std::vector<FileView> files;  // the inputs, newest first within a job
  std::vector<Trend> trends;
  std::vector<SkippedFile> skipped;
  std::vector<std::string> missing_jobs;  // expected but without any readable input file
  // What the history index did: its path, files taken from it and read, and
  // any warning (an index rebuilt, busy or read-only); for stderr, not the pages.
  std::vector<std::string> index_notes;
  int history_from_index = 0, history_read = 0;
  // With --references: every ok run of every job file among the inputs
  // against its system's expected figures ("outside" counts as a regression).
  std::vector<ReferenceCheck> reference_checks;
  std::vector<std::string> reference_check_files;  // the file of each check (its path)
  bool any_outside_reference() const;
  bool any_regression() const;
  // A run of a job's file failed (any kind, environment included) or was
  // skipped (not measured), or an expected job has no results (probe files
  // do not count).
  bool any_failure() const;
};

ReportData load_report(const ReportOptions& options);

// Timelines `pipebench report` writes beside index.html (trace.hpp), linked
// from each file's section: "trace-<i>.json" for files[i], "" when the file
// has no events or more than kReportTraceEvents of them (then run
// `pipebench trace` on it).
inline constexpr std::size_t kReportTraceEvents = 200000;
std::string report_trace_name(const ReportData& data, std::size_t file_index);

std::string render_html(const ReportData& data);
std::string render_markdown(const ReportData& data);
std::string render_summary_json(const ReportData& data);

// HTML text escaping (& < > " ').
std::string html_escape(std::string_view s);

}  // namespace pipebench
