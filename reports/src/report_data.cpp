// Loading results files and deriving what the report shows.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/results/robust_stats.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/core/sha256.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/report/history_index.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/results/mann_whitney.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/results.hpp"
#include "report_common.hpp"

namespace pipebench {

using report_detail::attr;
using report_detail::build_trends;
using report_detail::counted_steps;
using report_detail::created_utc;
using report_detail::job_name;

namespace {


// NAME.h5, and NAME.h5.partial: the checkpoint a killed launch leaves
// (results.hpp, ResultsWriter), read as it is and shown as incomplete.
bool is_results_file_name(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".h5") || ends_with(".h5.partial");
}

// Files already taken, by identity (device, inode): the same file through a
// link, `..` or a second spelling counts once, inputs before history.
using FileIds = std::set<FileId>;

bool first_sight(const std::string& path, FileIds& seen) {
  const FileId id = file_id(path);
  return id == FileId{0, 0} || seen.insert(id).second;  // nothing there: reading it will say why
}

std::vector<std::string> expand(const std::vector<std::string>& inputs, std::vector<SkippedFile>& skipped, FileIds& seen) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in, ec))
        if (e.is_regular_file() && is_results_file_name(e.path().filename().string())) found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      for (const auto& f : found)
        if (first_sight(f, seen)) files.push_back(f);
    } else if (fs::is_regular_file(in, ec)) {
      if (first_sight(in, seen)) files.push_back(in);
    } else {
      skipped.push_back({in, "no such file or folder"});
    }
  }
  return files;
}

double median(std::vector<double> v) { return compute_stats(v).median; }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace

std::string hardware_fingerprint(const JobResult& jr) {
  const auto& p = jr.provenance_attrs;
  auto get = [&](const char* k) { return p.count(k) ? p.at(k) : std::string(); };
  std::string backend = "?";
  if (!jr.runs.empty()) backend = std::string(to_string(jr.runs.front().backend));
  std::string fp = fmt::format("{} | {} | {} ranks", backend, get("cpu_model"), jr.hostnames.size());
  if (!get("gpu_names").empty()) fp += " | " + get("gpu_names");
  return fp;
}

namespace {

// A label such as rank_label's at the start of a sentence.
std::string sentence_start(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

// The pipeline stage (schedule rank) of rank i of the run; files without
// replicas or tensor ranks record i.
int stage_of_rank(const RunResult& r, std::size_t i) {
  return i < r.pipeline_rank.size() ? r.pipeline_rank[i] : static_cast<int>(i);
}

// Seed 000: is memory activation-bound or parameter-bound? Judged on the
// rank nearest to its capacity (the one that limits the run), from its peak
// per category, once that peak is above half the capacity: activations at
// least half of it -> activation-bound (fewer or smaller micro-batches,
// recomputation); parameters, gradients and optimizer state at least half
// -> parameter-bound (more stages).
void add_memory_bound_advice(RunView& v) {
  const RunResult& r = *v.run;
  const std::size_t P = r.peak_mem_bytes.size();
  if (P == 0 || r.memory_capacity_bytes.size() != P) return;
  const int fullest = fullest_rank(r);  // the rank the memory verdict names
  if (fullest < 0) return;
  const auto top = static_cast<std::size_t>(fullest);
  const auto peak = static_cast<double>(r.peak_mem_bytes[top]);
  if (peak < 0.5 * static_cast<double>(r.memory_capacity_bytes[top])) return;
  auto cat = [&](MemCategory c) {
    const auto& per_rank = r.peak_mem_by_category[static_cast<std::size_t>(c)];
    return top < per_rank.size() ? static_cast<double>(per_rank[top]) : 0.0;
  };
  const double act = cat(MemCategory::activations);
  const double state = cat(MemCategory::params) + cat(MemCategory::grads) + cat(MemCategory::optimizer);
  const double cap = static_cast<double>(r.memory_capacity_bytes[top]);
  const std::string who = sentence_start(rank_label(r, top));
  if (act >= 0.5 * peak)
    v.advice.push_back(fmt::format(
        "{} peaks at {:.0f}% of capacity, {:.0f}% of it activations: memory is activation-bound; lower "
        "micro_batch_size, use fewer micro-batches in flight (1f1b rather than gpipe), or recompute = \"full\" "
        "(seed 000).",
        who, 100 * peak / cap, 100 * act / peak));
  else if (state >= 0.5 * peak)
    v.advice.push_back(fmt::format(
        "{} peaks at {:.0f}% of capacity, {:.0f}% of it parameters, gradients and optimizer state: memory is "
        "parameter-bound; more stages (pipeline_size) spread them (seed 000).",
        who, 100 * peak / cap, 100 * state / peak));
}

}  // namespace

// Seed 004's reading of a bubble above the closed form, split by what the
// run itself shows: the schedule simulated with its own per-action medians
// (bubble_simulated) holds the stages' real times but free transfers, so the
// measured bubble above it is communication or the executor, and it above
// the closed form is the stages' times (imbalance, or cost ratios other than
// the closed form's). Without a simulation (no events), measured vs closed form.
std::vector<std::string> bubble_advice(const RunResult& r) {
  std::vector<std::string> out;
  const double measured = r.bubble_measured_median, simulated = r.bubble_simulated, analytic = r.bubble_analytic;
  if (!std::isfinite(measured) || !std::isfinite(analytic)) return out;
  if (!std::isfinite(simulated)) {
    if (measured - analytic > kBubbleGapMax)
      out.push_back(fmt::format("The measured bubble ({:.3f}) exceeds the closed form {:.3f}: stage imbalance or "
                                "communication is on the critical path; compare busy_s and comm_wait_s per stage "
                                "(seed 004).",
                                measured, analytic));
    return out;
  }
  if (measured - simulated > kBubbleGapMax)
    out.push_back(fmt::format("The measured bubble ({:.3f}) exceeds the schedule's own with this run's action times "
                              "({:.3f}, transfers free): communication or the executor is on the critical path; "
                              "compare comm_wait_s per stage (seed 004).",
                              measured, simulated));
  if (simulated - analytic > kBubbleGapMax)
    out.push_back(fmt::format("The schedule's bubble with this run's action times ({:.3f}) exceeds its closed form "
                              "{:.3f} (equal stages, the closed form's F/B/W costs; docs/schedules.md): the gap is the "
                              "stages' own times, their imbalance or their F/B/W ratio, not communication; a balanced "
                              "split (remainder = \"balanced\") or a schedule suited to these costs lowers it (seed 004).",
                              simulated, analytic));
  return out;
}

namespace {

void add_advice(RunView& v) {
  const RunResult& r = *v.run;
  // Every run on more than one rank; the single-rank baseline is not judged.
  if (r.status != RunStatus::ok || r.spec.ranks() < 2) return;
  const std::size_t P = r.peak_mem_bytes.size();
  // Per pipeline stage (its replicas and tensor ranks hold the same layers),
  // the rank of it nearest to capacity.
  const int p = r.spec.pipeline_size;
  std::vector<int> fullest(static_cast<std::size_t>(p), -1);
  std::vector<double> fullest_frac(static_cast<std::size_t>(p), -1.0);
  for (std::size_t i = 0; i < P && i < r.memory_capacity_bytes.size(); ++i) {
    const int s = stage_of_rank(r, i);
    if (s < 0 || s >= p) continue;
    const double frac = capacity_fraction(r, i);
    if (frac >= fullest_frac[static_cast<std::size_t>(s)]) {  // the last, as the memory verdict names it
      fullest_frac[static_cast<std::size_t>(s)] = frac;
      fullest[static_cast<std::size_t>(s)] = static_cast<int>(i);
    }
  }
  int min_layers = std::numeric_limits<int>::max();
  for (int s = 0; s < p; ++s) min_layers = std::min(min_layers, r.layers_on_rank(s));
  for (int s = 0; s < p; ++s) {
    const double frac = fullest_frac[static_cast<std::size_t>(s)];
    if (fullest[static_cast<std::size_t>(s)] < 0 || frac < kMemoryWarnFraction) continue;
    const std::string who = sentence_start(rank_label(r, static_cast<std::size_t>(fullest[static_cast<std::size_t>(s)])));
    const int layers = r.layers_on_rank(s);
    if (layers > min_layers) {
      const std::string other = s == 0 ? "last" : "first";
      v.advice.push_back(fmt::format(
          "{} took the remainder ({} layers vs {}) and peaks at {:.0f}% of capacity: move the remainder to the "
          "other end (remainder = \"{}\") or lower micro_batch_size (seed 000).",
          who, layers, min_layers, 100 * frac, other));
    } else {
      v.advice.push_back(fmt::format("{} peaks at {:.0f}% of capacity: lower micro_batch_size or add stages (seed 000).",
                                     who, 100 * frac));
    }
  }
  add_memory_bound_advice(v);
  if (r.spec.pipeline_size < 2) return;  // what follows is about the split and the schedule
  if (v.slowest_stage >= 0) {
    double mean = 0.0;
    for (double x : v.busy_median_s) mean += x / static_cast<double>(P);
    const double slow = v.busy_median_s[static_cast<std::size_t>(v.slowest_stage)];
    if (mean > 0 && slow > 1.15 * mean)
      v.advice.push_back(fmt::format(
          "{} is the slowest ({} busy vs {} mean): the others wait on it; re-split (remainder = \"balanced\") or "
          "move its extra layers (seed 000).",
          sentence_start(rank_label(r, static_cast<std::size_t>(v.slowest_stage))), format_seconds(slow),
          format_seconds(mean)));
  }
  for (std::string& line : bubble_advice(r)) v.advice.push_back(std::move(line));
  if (r.bubble_analytic > 0.25 && r.spec.mode == RunMode::train)
    v.advice.push_back(fmt::format(
        "The schedule's analytic bubble is {:.2f}: more micro-batches (num_microbatches), or a schedule with a smaller "
        "bubble (interleaved-1f1b, interleaved-zb, zb-h1, zb-v, dualpipev; docs/schedules.md), lower it if memory allows (seed 004).",
        r.bubble_analytic));
}

// What the charts take from a run's events, streamed from its file in
// blocks (RunView::gantt_events, measured_costs): memory does not grow with
// the run. A file that cannot be read again leaves the charts out.
void chart_events(const FileView& f, const RunResult& r, RunView& v) {
  if (v.gantt_step < 0 || r.events_in_file == 0) return;
  std::optional<EventDigest> digest;
  if (v.plan && report_detail::plan_matches(*v.plan, r)) digest.emplace(v.plan->schedule, false);
  try {
    const std::string now = current_path(f);
    if (now.empty()) return;  // replaced since it was read: no charts from another version
    stream_events(now, r, [&](const EventRecord* e, std::size_t n) {
      if (digest) digest->add(e, n);
      for (std::size_t i = 0; i < n; ++i)
        if (e[i].step == v.gantt_step) v.gantt_events.push_back(e[i]);
    });
  } catch (const std::exception&) {
    v.gantt_events.clear();
    return;
  }
  if (digest) v.measured_costs = digest->costs(r.warmup);
}

RunView derive(const FileView& f, const RunResult& r) {
  RunView v;
  v.run = &r;
  for (const auto& other : f.result.runs)
    if (!r.baseline.empty() && other.spec.name == r.baseline && other.status != RunStatus::skipped) v.baseline = &other;
  const auto k = counted_steps(r);
  const std::size_t P = r.peak_mem_bytes.size();
  // Slowest stage by median busy time.
  double worst = -1.0;
  for (std::size_t s = 0; s < P && !k.empty(); ++s) {
    v.busy_median_s.push_back(counted_median(r.busy_s, r.is_warmup, s));
    if (v.busy_median_s.back() > worst) {
      worst = v.busy_median_s.back();
      v.slowest_stage = static_cast<int>(s);
    }
  }
  if (!k.empty()) {
    double c = 0.0;
    for (auto i : k) c += i < r.clipped.size() ? r.clipped[i] : 0;
    v.clip_rate = c / static_cast<double>(k.size());
    // The counted step closest to the median step time, for the Gantt chart.
    double best = std::numeric_limits<double>::infinity();
    for (auto i : k)
      if (std::fabs(r.step_time_s[i] - r.step_time.median) < best) {
        best = std::fabs(r.step_time_s[i] - r.step_time.median);
        v.gantt_step = static_cast<int>(i);
      }
  }
  {
    std::vector<double> times, losses;
    for (auto i : k) {
      v.counted_step_index.push_back(static_cast<int>(i));
      times.push_back(r.step_time_s[i]);
      if (i < r.loss.size() && std::isfinite(r.loss[i])) losses.push_back(r.loss[i]);
    }
    v.rolling_step_time_s = rolling_mean(times, kRollingWindow);
    if (losses.size() == times.size()) v.rolling_loss = rolling_mean(losses, kRollingWindow);
    v.short_run = static_cast<int>(k.size()) < kSeedShortSteps;
  }
  const double seq = f.job ? f.job->model.seq_len : kNaN;
  v.tokens_per_s = r.throughput_samples_per_s * seq;
  std::vector<double> lat;
  for (auto i : k)
    if (i < r.microbatch_latency_s.size())
      for (double x : r.microbatch_latency_s[i]) lat.push_back(x);
  v.latency_median_s = lat.empty() ? kNaN : median(lat);
  v.latency_p99_s = percentile(lat, 0.99);
  return v;
}

void fill_comparison(RunView& v, const RunView& base) {
  const RunResult& r = *v.run;
  const RunResult& b = *base.run;
  auto row = [&](std::string metric, std::string unit, double bv, double pv, std::string note = "") {
    v.comparison.push_back({std::move(metric), std::move(unit), bv, pv, std::move(note)});
  };
  row("global batch (samples per step)", "samples", b.spec.global_batch(), r.spec.global_batch(),
      global_batch_note(r, b).empty() ? "" : "differs: the speedup compares time per sample");
  row("step time (median)", "s", b.step_time.median, r.step_time.median);
  row("throughput", "samples/s", b.throughput_samples_per_s, r.throughput_samples_per_s);
  row("tokens/s", "tokens/s", base.tokens_per_s, v.tokens_per_s);
  row("slowest stage (median busy)", "s", b.slowest_stage_median_s, r.slowest_stage_median_s,
      v.slowest_stage >= 0 ? rank_label(r, static_cast<std::size_t>(v.slowest_stage)) : "");
  if (r.spec.mode == RunMode::train) {
    row("gradient clipping rate (% of counted steps)", "fraction", base.clip_rate, v.clip_rate);
  } else {
    row("micro-batch latency (median)", "s", base.latency_median_s, v.latency_median_s);
    row("micro-batch latency (p99)", "s", base.latency_p99_s, v.latency_p99_s);
  }
  row("bubble measured (% of step)", "fraction", b.bubble_measured_median, r.bubble_measured_median);
  row("bubble analytic (% of step)", "fraction", b.bubble_analytic, r.bubble_analytic);
  row("bubble simulated (% of step)", "fraction", b.bubble_simulated, r.bubble_simulated);
  std::string ranks;
  for (std::size_t s = 0; s < r.peak_mem_bytes.size(); ++s)
    ranks += fmt::format("{}rank {}: {} ({:.1f}%)", ranks.empty() ? "" : ", ", s,
                         format_bytes(static_cast<double>(r.peak_mem_bytes[s])),
                         100 * static_cast<double>(r.peak_mem_bytes[s]) / static_cast<double>(r.memory_capacity_bytes[s]));
  row("peak memory (max over ranks)", "bytes", static_cast<double>(b.peak_mem_max_bytes), static_cast<double>(r.peak_mem_max_bytes), ranks);
  row("peak memory (% of capacity, max over ranks)", "fraction", peak_capacity_fraction(b), peak_capacity_fraction(r));
  // The driver's count beside the tracker's: only where a device reported it.
  auto device_max = [](const RunResult& x) {
    double m = kNaN;
    for (std::int64_t bytes : x.device_used_peak_bytes)
      if (bytes >= 0) m = std::isnan(m) ? static_cast<double>(bytes) : std::max(m, static_cast<double>(bytes));
    return m;
  };
  if (!std::isnan(device_max(r)) || !std::isnan(device_max(b)))
    row("device memory in use (driver, max over ranks)", "bytes", device_max(b), device_max(r),
        "cudaMemGetInfo: the whole GPU, other processes on it included");
  row("loss deviation from baseline (max relative, unitless)", "ratio", kNaN, r.loss_max_rel_dev);
}

}  // namespace

bool ReportData::any_failure() const {
  if (!missing_jobs.empty()) return true;
  for (const auto& f : files) {
    if (f.role != "job") continue;  // a probe's trials fail on purpose
    for (const auto& r : f.result.runs)  // skipped: not measured, which a nightly must not pass
      if (r.status == RunStatus::failed || r.status == RunStatus::skipped) return true;
  }
  return false;
}

bool ReportData::any_outside_reference() const {
  return std::any_of(reference_checks.begin(), reference_checks.end(),
                     [](const ReferenceCheck& c) { return c.verdict == "outside"; });
}

bool ReportData::any_regression() const {
  if (any_outside_reference()) return true;
  return std::any_of(trends.begin(), trends.end(), [](const Trend& t) {
    return t.latest && !t.history_only && (t.verdict == "regression" || t.memory_increased || t.numerics_changed);
  });
}

namespace {

std::string root_attr(const FileView& f, const char* name, const std::string& fallback) {
  const auto it = f.result.root_attrs.find(name);
  return it == f.result.root_attrs.end() ? fallback : it->second;
}

// Reads `path` once in a child process first: the HDF5 library itself can
// crash or loop on a damaged file (a bit flip in a global heap makes
// H5Aread overrun: HDF5 1.10.8 trusts a damaged object length in
// H5HG_read), which no check of ours can prevent. "" when the child
// read it, else why the file is skipped: the reader's own message when it
// refused the file (sent back through a pipe, so a slow refusal is not
// repeated), or what stopped the child. Deterministic reading means the
// parent's own read that follows a clean one is then safe. The child's heap
// is bounded (kReadMemoryBytes): a damaged string length makes HDF5 fill
// gigabytes (15 GB in 25 s seen for one fuzzed file, then again in the
// parent), which a results file read without its events never needs.
std::string crash_check(const std::string& path) {
  constexpr double kReadTimeoutS = 60.0;
  [[maybe_unused]] constexpr rlim_t kReadMemoryBytes = rlim_t{4} << 30;  // not under ASan (below)
  constexpr int kRefused = 3;  // the child's exit code when the reader threw
  int fds[2];
  if (pipe(fds) != 0) return "";  // cannot isolate: read in-process
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "";
  }
  if (pid == 0) {
    close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__)  // ASan's shadow memory counts as data
    const struct rlimit heap {kReadMemoryBytes, kReadMemoryBytes};
    setrlimit(RLIMIT_DATA, &heap);
#endif
    try {
      (void)read_results(path, ReadEvents::skip);  // every event read and checked, none held
    } catch (const std::exception& e) {
      const std::string_view what = std::string_view(e.what()).substr(0, 4000);  // below the pipe's buffer
      if (write(fds[1], what.data(), what.size()) < 0) _exit(kRefused);
      _exit(kRefused);
    }
    _exit(0);
  }
  close(fds[1]);
  int status = 0;
  const double until = now_s() + kReadTimeoutS;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_s() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      close(fds[0]);
      return fmt::format("reading it took longer than {:.0f} s (a damaged file)", kReadTimeoutS);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string refused(4096, '\0');
  const ssize_t got = read(fds[0], refused.data(), refused.size());
  close(fds[0]);
  refused.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  if (WIFSIGNALED(status))
    return fmt::format("the HDF5 library crashed reading it (signal {}): a damaged file", WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == kRefused) return refused.empty() ? "not a readable results file" : refused;
  // The child exits 0 whether the read succeeded or threw; anything else is
  // a sanitizer (or the runtime) stopping it inside the library.
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format("the HDF5 library failed reading it (exit {}): a damaged file", WEXITSTATUS(status));
  return "";
}

// A checkpoint's published name: NAME.h5 of NAME.h5.partial ("" otherwise).
std::string published_name(const std::string& path) {
  constexpr std::string_view kPartial = ".partial";
  return path.ends_with(kPartial) ? path.substr(0, path.size() - kPartial.size()) : "";
}

constexpr const char* kReadElsewhere = "(read under another name)";

// Reads f.path into `f` (crash check first): one version, whole. A file
// replaced while it was read (a launch's checkpoint renamed over it) is read
// again, up to 5 times; a checkpoint published meanwhile is read under its
// published name, unless that file is taken already (kReadElsewhere). With
// `hash`, f.sha256 is the hash of that same version. With `known` (the
// history index's word that this file, with that stamp, was read whole and
// cleanly before), a file that still has that stamp is read without the
// crash check and its sha256 is the recorded one. "" when read, else why not.
std::string read_one_version(FileView& f, ReadEvents events, FileIds& seen, bool hash,
                             const HistoryIndex::Known* known = nullptr) {
  std::string why = "it kept changing while it was read (a launch checkpointing it)";
  for (int attempt = 0; attempt < 5; ++attempt) {
    const FileId before = file_id(f.path);
    if (before == FileId{0, 0}) {
      const std::string published = published_name(f.path);
      const FileId id = published.empty() ? before : file_id(published);
      if (id == FileId{0, 0}) return "gone since the folder was listed (a launch published or replaced it meanwhile)";
      if (!seen.insert(id).second) return kReadElsewhere;
      f.path = published;
      continue;
    }
    const bool trusted = known && stamp_of(f.path) == known->stamp;
    if (const std::string crashed = trusted ? "" : crash_check(f.path); !crashed.empty()) {
      if (file_id(f.path) == before) return crashed;
      continue;  // a different file by now: read again
    }
    std::string unreadable;
    try {
      f.result = read_results(f.path, events);
      if (hash) f.sha256 = trusted ? known->sha256 : sha256_file(f.path, &unreadable);
    } catch (const std::exception& e) {
      if (file_id(f.path) == before) return e.what();
      continue;
    }
    if (file_id(f.path) == before) {
      if (hash && f.sha256.empty()) return "cannot read its bytes for the content hash: " + unreadable;
      f.id = before;
      return "";
    }
  }
  return why;
}

// The rest of a file read whole: its job parsed (job_error when it does not
// parse), its hardware fingerprint and role.
void describe_read_file(FileView& f) {
  try {
    const auto it = f.result.root_attrs.find("job_toml");
    if (it == f.result.root_attrs.end()) throw ConfigError("no job_toml attribute");
    f.job = parse_job(it->second, f.path + ":/job_toml");
  } catch (const std::exception& e) {
    f.job_error = e.what();
  }
  f.fingerprint = hardware_fingerprint(f.result);
  // Files from before the role was recorded: a probe summary has /probe,
  // a probe trial the label the probe gives it.
  f.role = root_attr(f, "role", f.result.probe                                    ? "probe"
                                : root_attr(f, "label", "").starts_with("probe-mbs") ? "probe-trial"
                                                                                   : "job");
}

// Reads the results file at `path` whole (read_one_version, then its job,
// fingerprint and role); nullopt with `skipped` told why. With an index, a
// file it knows is read without the crash check (HistoryIndex::known), and
// one it does not know has its digest added when the file is the one stamped
// before the read (a launch may checkpoint over it meanwhile): the next
// report that has it in its history need not read it again.
// With `digest`, the file's FileDigest is put there (computed once for both).
std::optional<FileView> read_file_view(const std::string& path, std::vector<SkippedFile>& skipped, ReadEvents events,
                                       FileIds& seen, bool hash, HistoryIndex* index, FileDigest* digest = nullptr) {
  const auto known = index ? index->known(path) : std::nullopt;
  const auto stamp = index && !known ? stamp_of(path) : std::nullopt;
  FileView f;
  f.path = path;
  if (const std::string why = read_one_version(f, events, seen, hash || index, known ? &*known : nullptr); !why.empty()) {
    if (why != kReadElsewhere) skipped.push_back({path, why});
    return std::nullopt;
  }
  describe_read_file(f);
  f.known_to_index = known.has_value();
  if (digest) *digest = report_detail::digest_of(f);
  if (index && stamp && f.path == path && stamp_of(path) == stamp)
    index->add(path, *stamp, f.sha256, root_attr(f, "results_id", ""), digest ? *digest : report_detail::digest_of(f));
  return f;
}

// The readable results files among `inputs` (files, folders); unreadable
// ones go to `skipped` with the reason. A file whose job TOML does not parse
// is kept, with job_error set. `events`: whether the runs keep their events;
// `hash`: whether each gets its sha256.
std::vector<FileView> load_files(const std::vector<std::string>& inputs, std::vector<SkippedFile>& skipped,
                                 ReadEvents events, FileIds& seen, bool hash, HistoryIndex* index) {
  std::vector<FileView> out;
  for (const auto& path : expand(inputs, skipped, seen))
    if (auto f = read_file_view(path, skipped, events, seen, hash, index)) out.push_back(std::move(*f));
  return out;
}

// What the trends read of the history files: each from the index where the
// file is still the file its row was made from, else read whole (and added).
std::vector<FileDigest> load_history(const std::vector<std::string>& inputs, HistoryIndex* index, ReportData& d,
                                     FileIds& seen) {
  std::vector<FileDigest> out;
  for (const auto& path : expand(inputs, d.skipped, seen)) {
    if (index)
      if (auto known = index->find(path)) {
        out.push_back(std::move(*known));
        ++d.history_from_index;
        continue;
      }
    // History files are never cited (only their figures feed the trends):
    // hashed only for the index.
    FileDigest digest;
    if (read_file_view(path, d.skipped, ReadEvents::skip, seen, false, index, &digest)) {
      out.push_back(std::move(digest));
      ++d.history_read;
    }
  }
  return out;
}

// The index a report keeps of its history (ReportOptions::index_path); null without one.
std::unique_ptr<HistoryIndex> open_history_index(const ReportOptions& options) {
  if (!options.use_index || options.history.empty()) return nullptr;
  std::string path = options.index_path;
  std::error_code ec;
  if (path.empty() && std::filesystem::is_directory(options.history.front(), ec))
    path = default_index_path(options.history.front());
  return path.empty() ? nullptr : std::make_unique<HistoryIndex>(path, options.index_writer);
}

// The speedups from the step times, with today's interval (files written
// before 2026-12-01 hold a Hodges-Lehmann interval that covered ~68%) and
// per sample where the global batches differ (older files compared per step).
void recompute_speedups(std::vector<RunResult>& runs) {
  for (auto& r : runs) {
    if (r.status != RunStatus::ok || r.baseline.empty()) continue;
    for (const auto& b : runs)
      if (&b != &r && b.spec.name == r.baseline && b.status == RunStatus::ok) set_speedup(r, b);
  }
}

}  // namespace

std::map<std::string, double> reference_figures_of(const FileView& f, const RunResult& r) {
  std::map<std::string, double> m;
  m["step_time_s"] = r.step_time.median;
  m["throughput_samples_per_s"] = r.throughput_samples_per_s;
  m["slowest_stage_s"] = r.slowest_stage_median_s;
  m["bubble_measured"] = r.bubble_measured_median;
  m["peak_mem_bytes"] = static_cast<double>(r.peak_mem_max_bytes);
  if (f.job) m["tokens_per_s"] = r.throughput_samples_per_s * f.job->model.seq_len;
  return m;
}

FileView read_results_file(const std::string& path, HistoryIndex* index) {
  FileIds seen;
  std::vector<SkippedFile> skipped;
  if (auto f = read_file_view(path, skipped, ReadEvents::skip, seen, true, index)) return std::move(*f);
  throw ResultsError(fmt::format("{}: {}", path, skipped.empty() ? std::string(kReadElsewhere) : skipped.front().reason));
}

std::string current_path(const FileView& f) {
  if (file_id(f.path) == f.id) return f.path;
  if (const std::string published = published_name(f.path); !published.empty() && file_id(published) == f.id)
    return published;
  return "";
}

std::string report_trace_name(const ReportData& data, std::size_t file_index) {
  if (file_index >= data.files.size()) return "";
  std::size_t events = 0;
  for (const auto& r : data.files[file_index].result.runs) events += r.events_in_file;
  return events == 0 || events > kReportTraceEvents ? "" : fmt::format("trace-{}.json", file_index);
}

std::size_t rebuild_history_index(const std::string& dir, const std::string& index_path, const std::string& writer,
                                  std::vector<SkippedFile>& skipped, std::vector<std::string>& notes) {
  const std::string path = index_path.empty() ? default_index_path(dir) : index_path;
  if (!path.ends_with(".sqlite")) throw ConfigError(fmt::format("--index {}: the name must end in .sqlite", path));
  // Made anew: a cache holds nothing the files do not.
  std::error_code ec;  // a read-only folder: the index below says so
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
  HistoryIndex index(path, writer);
  std::size_t indexed = 0;
  if (index.usable()) {
    FileIds seen;
    for (const auto& file : expand({dir}, skipped, seen))
      if (read_file_view(file, skipped, ReadEvents::skip, seen, true, &index)) ++indexed;
    index.save();
  }
  notes = index.notes();
  if (!index.usable()) throw ResultsError(notes.empty() ? "cannot open " + path : notes.back());
  return indexed;
}

ReportData load_report(const ReportOptions& options) {
  ReportData d;
  d.options = options;
  // No run's events are held: the charts stream what they need (chart_events).
  FileIds seen;
  std::unique_ptr<HistoryIndex> index = open_history_index(options);
  if (index && !index->usable()) {
    d.index_notes = index->notes();
    index.reset();
  }
  d.files = load_files(options.inputs, d.skipped, ReadEvents::skip, seen, true, index.get());
  // Trend history: what the trends read of each file (FileDigest); no events.
  const std::vector<FileDigest> history = load_history(options.history, index.get(), d, seen);
  if (index) {
    index->save();
    d.index_notes = index->notes();
    d.index_notes.push_back(fmt::format("history index {}: {} history file(s) from it, {} read", index->path(),
                                        d.history_from_index, d.history_read));
  }
  for (const auto& name : options.expected_jobs)
    if (std::none_of(d.files.begin(), d.files.end(), [&](const FileView& f) { return job_name(f) == name; }))
      d.missing_jobs.push_back(name);
  // Jobs in name order, the newest file of a job first.
  std::stable_sort(d.files.begin(), d.files.end(), [&](const FileView& a, const FileView& b) {
    if (job_name(a) != job_name(b)) return job_name(a) < job_name(b);
    if (created_utc(a) != created_utc(b)) return created_utc(a) > created_utc(b);
    return a.path < b.path;
  });
  // RunViews point into their file's runs: derive once the files are in place.
  for (auto& f : d.files) {
    recompute_speedups(f.result.runs);
    for (const auto& r : f.result.runs) {
      f.runs.push_back(derive(f, r));
      f.runs.back().plan = report_detail::plan_of(f, r);
      f.runs.back().prediction = report_detail::prediction_of(f, r, f.runs.back().plan);
      chart_events(f, r, f.runs.back());
    }
    for (auto& v : f.runs) {
      for (const auto& b : f.runs)
        if (v.baseline == b.run && v.run->status != RunStatus::skipped && v.baseline->status == RunStatus::ok)
          fill_comparison(v, b);
      add_advice(v);
    }
  }
  d.trends = build_trends(d.files, history, options);
  if (!options.references_path.empty()) {
    const References refs = load_references(options.references_path);
    for (const auto& f : d.files) {
      if (f.role != "job") continue;
      for (const auto& r : f.result.runs) {
        if (r.status != RunStatus::ok) continue;
        for (auto& c : check_references(refs, attr(f.result.root_attrs, "system"), f.fingerprint, job_name(f), r.spec.name,
                                        reference_figures_of(f, r))) {
          d.reference_checks.push_back(std::move(c));
          d.reference_check_files.push_back(f.path);
        }
      }
    }
  }
  return d;
}

}  // namespace pipebench
