// `pipebench tune JOB.toml --ranks N [--global-batch B | --num-microbatches M]
//   [--bubble-target X] [--schedule S]... [--partition RULE]... [--run NAME]
//   [--data-parallel D]... [--tensor-parallel T]... [--optimizer-sharding none|zero1|zero2|fsdp]...
//   [--grad-sync after_flush|after_chunk|overlap]...
//   [--set k=v]... [--top K] [-o OUT.toml] [--confirm] [--verify] [--steps S]
//   [--launcher L] [--results DIR]`
// Seed 000's procedure (docs/tune.md): the planner's answer for every
// layout p x d x t of up to N ranks, one ranked table, one answer line, a workload file; with
// --confirm two probe trials around the predicted limit, with --verify the
// written workload run for the seed's short steps and reported.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#if defined(__GLIBC__)
#include <malloc.h>  // mallopt
#endif
#include <unistd.h>  // getpid

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/plan/tune.hpp"
#include "pipebench/probe/probe.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/results/metrics.hpp"

namespace pipebench::cli {

namespace {

// A search past kQuietS prints how far it is on stderr, every kEveryS (a
// large global batch builds schedules of thousands of micro-batches per
// candidate): the table and the header's count and time stay on stdout.
std::function<void(std::size_t, std::size_t)> search_progress(std::chrono::steady_clock::time_point started) {
  constexpr double kQuietS = 2.0, kEveryS = 5.0;
  auto next = std::make_shared<double>(kQuietS);
  return [started, next](std::size_t judged, std::size_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (s < *next || judged == total) return;
    *next = s + kEveryS;
    fmt::print(stderr, "tune: {} of {} combinations searched ({:.0f} s)\n", judged, total, s);
    std::fflush(stderr);
  };
}

// The search builds and frees schedules of up to millions of actions per
// candidate: kept in the heap, their pages are reused, not faulted in (and
// zeroed by the kernel) again for every one (a 65,536-sample search: 43 s ->
// 22 s here). Peak memory is unchanged.
void keep_freed_pages() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

struct TuneCmdOptions {
  std::string job_path;
  std::vector<std::string> overrides;
  TuneOptions tune;
  std::vector<std::string> schedules, partitions, shardings, grad_syncs, recompute, sequence_parallel;
  int gpus = 0, gpus_per_node = 0;
  int top = 15;
  std::string format = "text";
  std::string output;           // the workload written; default <job>_tuned.toml
  bool confirm = false, verify = false;
  int steps = 30;               // --verify: counted steps
  std::string launcher = "mpirun -np {ranks}";
  std::string results_dir = "results";
  double trial_timeout_s = 900.0;
};

std::string schedule_text(const TuneCandidate& c) {
  std::string s(to_string(c.schedule));
  if (any_virtual_stages(c.schedule)) s += fmt::format(" v{}", c.virtual_stages_per_rank);
  if (c.data_parallel > 1 && c.sharding != OptimizerSharding::none) s += fmt::format(" {}", to_string(c.sharding));
  if (c.data_parallel > 1 && c.grad_sync != GradSync::after_flush) s += fmt::format(" {}", to_string(c.grad_sync));
  if (c.recompute != Recompute::none) s += c.recompute == Recompute::full ? " rc-full" : " rc-sel";
  if (c.tensor_parallel > 1 && c.sequence_parallel) s += " sp";
  return s;
}

// "32x2" (p x d), "8x1x8" (p x d x t); "48" alone.
std::string layout_text(const TuneCandidate& c) {
  if (c.context_parallel > 1)
    return fmt::format("{}x{}x{}x{}", c.pipeline_size, c.data_parallel, c.context_parallel, c.tensor_parallel);
  if (c.tensor_parallel > 1) return fmt::format("{}x{}x{}", c.pipeline_size, c.data_parallel, c.tensor_parallel);
  return c.data_parallel > 1 ? fmt::format("{}x{}", c.pipeline_size, c.data_parallel) : std::to_string(c.pipeline_size);
}

// "p = 1-15, 17": the pipeline sizes of `cands`, runs folded.
std::string p_ranges(std::vector<int> ps) {
  std::sort(ps.begin(), ps.end());
  ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
  std::string s;
  for (std::size_t i = 0; i < ps.size();) {
    std::size_t j = i;
    while (j + 1 < ps.size() && ps[j + 1] == ps[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + (j > i ? fmt::format("{}-{}", ps[i], ps[j]) : std::to_string(ps[i]));
    i = j + 1;
  }
  return s;
}

void print_table(const Job& job, const TuneResult& r, int top) {
  const auto cap = static_cast<double>(job.device.memory_capacity_bytes);
  std::vector<const TuneCandidate*> rows;
  int more = 0;
  std::vector<int> not_fitting;
  for (const auto& c : r.candidates) {
    if (!c.fits) {
      if (!c.peak_bytes.empty()) not_fitting.push_back(c.pipeline_size);  // else skipped, listed below
    } else if (static_cast<int>(rows.size()) == top) {
      ++more;
    } else {
      rows.push_back(&c);
    }
  }
  // The layout and schedule columns as wide as their widest row ("interleaved-1f1b v4 zero1 rc-sel
  // sp" overran 24; fold_sizes keeps the layers within 22).
  std::size_t layout_w = 7, sched_w = 24;
  for (const TuneCandidate* c : rows) {
    layout_w = std::max(layout_w, layout_text(*c).size());
    sched_w = std::max(sched_w, schedule_text(*c).size());
  }
  if (!rows.empty())  // else the lines below say why nothing fits
    fmt::print("  {:>3} {:>{}} {:>5} {:<{}} {:<9} {:<22} {:>7} {:>5} {:>6} {:>18} {:>7} {:>11} {:>10} {:>10} {:>10}\n", "#",
               "layout", layout_w, "ranks", "schedule", sched_w, "partition", "layers per stage", "max mbs", "mbs", "m",
               "peak memory (cap)", "bubble", "step time", "dp exposed", "samples/s", "per rank");
  int shown = 0;
  for (const TuneCandidate* row : rows) {
    const TuneCandidate& c = *row;
    ++shown;
    const double peak = c.peak_bytes.empty() ? 0.0 : static_cast<double>(*std::max_element(c.peak_bytes.begin(), c.peak_bytes.end()));
    fmt::print("  {:>3} {:>{}} {:>5} {:<{}} {:<9} {:<22} {:>7} {:>5} {:>6} {:>18} {:>6.1f}% {:>11} {:>10} {:>10.4g} {:>10.4g}\n",
               shown, layout_text(c), layout_w, c.ranks(), schedule_text(c), sched_w, to_string(c.partition),
               fold_sizes(c.layers_per_stage),
               c.max_micro_batch >= kTuneMaxMicroBatch ? fmt::format(">={}", c.max_micro_batch) : std::to_string(c.max_micro_batch),
               c.micro_batch_size, c.num_microbatches, fmt::format("{} ({:.0f}%{})", format_bytes(peak), 100.0 * peak / cap, c.margin ? "" : "!"),
               100.0 * c.bubble, format_seconds(c.step_time_s), c.data_parallel > 1 ? format_seconds(c.grad_sync_exposed_s) : "-",
               c.samples_per_s, c.samples_per_s_per_rank);
  }
  if (more > 0) fmt::print("  ... {} more fitting candidate(s) (--top to show them)\n", more);
  if (std::any_of(r.candidates.begin(), r.candidates.end(), [](const TuneCandidate& c) { return c.fits && !c.margin; }))
    fmt::print("  !: a peak above {:.0f}% of memory_capacity even at micro-batch 1 (seed 000: peaks must not approach the "
               "capacity); ranked after the others\n",
               100 * kMemoryWarnFraction);
  if (!not_fitting.empty()) {
    // Pipeline sizes where no schedule and no rule fits; the closest miss.
    // (A set: tested against every candidate per miss, 62,130 candidates of
    // `tune gpt_1t_sim.toml --ranks 3072` took 4 s here.)
    std::set<int> fitting_p;
    for (const auto& c : r.candidates)
      if (c.fits) fitting_p.insert(c.pipeline_size);
    std::vector<int> none;
    for (int p : not_fitting)
      if (fitting_p.count(p) == 0) none.push_back(p);
    const TuneCandidate* closest = nullptr;
    for (const auto& c : r.candidates)
      if (!c.fits && !c.peak_bytes.empty() && (!closest || c.peak_fraction < closest->peak_fraction)) closest = &c;
    if (!none.empty()) fmt::print("  nothing fits at micro-batch 1 on p = {}\n", p_ranges(none));
    fmt::print("  {} candidate(s) do not fit at micro-batch 1; the closest: {} {} {}: {}\n", not_fitting.size(),
               closest->layout(), schedule_text(*closest), to_string(closest->partition), closest->why_not);
  }
  // Skipped candidates, one line per schedule: the sizes and the first
  // reason; at most kSkippedLines of them (the JSON has every candidate).
  constexpr std::size_t kSkippedLines = 8;
  std::vector<std::string> seen;
  for (const auto& c : r.candidates) {
    if (c.fits || !c.peak_bytes.empty()) continue;
    const std::string sched = schedule_text(c);
    if (std::find(seen.begin(), seen.end(), sched) != seen.end()) continue;
    seen.push_back(sched);
    if (seen.size() > kSkippedLines) continue;
    std::vector<int> ps;
    for (const auto& d : r.candidates)
      if (!d.fits && d.peak_bytes.empty() && schedule_text(d) == sched) ps.push_back(d.pipeline_size);
    fmt::print("  skipped {} on p = {} ({}: {})\n", sched, p_ranges(ps), c.layout(), c.why_not);
  }
  if (seen.size() > kSkippedLines)
    fmt::print("  ... skipped candidates of {} more schedule variants (--format json lists every candidate)\n",
               seen.size() - kSkippedLines);
}

// With a device preset: the first candidates' steps by term (docs/time-model.md).
void print_terms(const TuneResult& r, int top) {
  if (std::none_of(r.candidates.begin(), r.candidates.end(), [](const TuneCandidate& c) { return c.fits && c.terms; }))
    return;  // nothing fits: no table under the heading
  fmt::print("\n  the busiest rank's step by term (time model; docs/time-model.md):\n");
  fmt::print("  {:>3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7}\n", "#", "step", "compute", "tp comm",
             "dp exposed", "dp hidden", "optimizer", "bubble+wait", "pp sends", "MFU");
  int shown = 0;
  for (const auto& c : r.candidates) {
    if (!c.fits || !c.terms || shown == top) continue;
    const TuneCandidate::Terms& t = *c.terms;
    fmt::print("  {:>3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>6.1f}%\n", ++shown,
               format_seconds(c.step_time_s), format_seconds(t.compute_s), format_seconds(t.tp_comm_s),
               format_seconds(t.dp_exposed_s), format_seconds(t.dp_hidden_s), format_seconds(t.optimizer_s), format_seconds(t.idle_s), format_seconds(t.pp_transfer_s), 100.0 * c.mfu);
  }
  // Context parallelism's exposed K/V exchange: part of the step beside the columns (the table keeps its shape).
  std::string cp;
  shown = 0;
  for (const auto& c : r.candidates)
    if (c.fits && c.terms && shown++ < top && c.terms->cp_exposed_s > 0.0)
      cp += fmt::format(" #{} {}", shown, format_seconds(c.terms->cp_exposed_s));
  if (!cp.empty()) fmt::print("  context-parallel K/V exchange exposed, beside the columns above:{}\n", cp);
}

void print_answer(const TuneCmdOptions& o, const Job& job, const TuneResult& result, double search_s) {
  const std::string batch = o.tune.global_batch > 0       ? fmt::format("global batch {}", o.tune.global_batch)
                            : o.tune.num_microbatches > 0 ? fmt::format("{} micro-batches", o.tune.num_microbatches)
                                                          : fmt::format("m for a bubble <= {:.3g}", o.tune.bubble_target);
  std::size_t fitting = 0;
  for (const auto& c : result.candidates) fitting += c.fits ? 1 : 0;
  const std::vector<int> degrees = tensor_degrees(job, result.template_run, o.tune);
  const std::string tensor = degrees.size() > 1 || degrees.front() > 1
                                 ? fmt::format(" x t tensor ranks (t in {})", fmt::join(degrees, ","))
                                 : "";
  fmt::print("pipebench tune: job \"{}\" (template run \"{}\"), {} {} ranks as p stages x d replicas{}, {}, "
             "memory_capacity {}, planner's memory model ({} backend){}; {} candidates judged{} in {:.2f} s, {} fit\n\n",
             job.name, result.template_run.name, o.tune.all_ranks ? "all" : "up to", o.tune.max_ranks, tensor, batch,
             format_bytes(static_cast<double>(job.device.memory_capacity_bytes)), to_string(job.device.backend),
             job.device.preset ? fmt::format(", time model {}", job.device.preset->name) : "", result.candidates.size(),
             result.searched > result.candidates.size()
                 ? fmt::format(" ({} combinations searched, partition rules giving one split merged)", result.searched)
                 : "",
             search_s, fitting);
  print_table(job, result, o.top);
  if (job.device.preset) print_terms(result, std::min(o.top, 5));
  fmt::print("\n{}\n", tune_answer_line(result));
  if (!result.idle_note.empty()) fmt::print("{}\n", result.idle_note);
}

// `--gpus N`: every rank used, and every dimension of the layout searched
// that the user did not narrow.
void layout_question_defaults(TuneCmdOptions& o) {
  o.tune.max_ranks = o.gpus;
  o.tune.all_ranks = true;
  if (o.recompute.empty()) o.recompute = {"none", "selective", "full"};
  if (o.sequence_parallel.empty()) o.sequence_parallel = {"on", "off"};
  if (o.schedules.empty()) o.schedules = {"1f1b", "interleaved-1f1b"};
  if (o.tune.virtual_stages.empty()) o.tune.virtual_stages = {2, 3, 4};
}

std::vector<Recompute> parse_recompute(const std::vector<std::string>& names) {
  std::vector<Recompute> out;
  for (const auto& n : names) out.push_back(n == "full" ? Recompute::full : n == "selective" ? Recompute::selective : Recompute::none);
  return out;
}

std::vector<std::string> builtin_schedule_names() {
  std::vector<std::string> names;
  for (ScheduleKind k : kBuiltinSchedules) names.emplace_back(to_string(k));
  return names;
}

std::vector<ScheduleKind> parse_schedules(const std::vector<std::string>& names) {
  std::vector<ScheduleKind> out;
  for (const auto& n : names) {
    bool found = false;
    for (ScheduleKind k : kBuiltinSchedules)
      if (n == to_string(k)) out.push_back(k), found = true;
    if (!found) throw ConfigError(fmt::format("tune: --schedule {}: not a built-in schedule", printable(n)));
  }
  return out;
}

std::vector<std::string> sharding_names() {
  std::vector<std::string> names;
  for (OptimizerSharding s : kOptimizerShardings) names.emplace_back(to_string(s));
  return names;
}

std::vector<OptimizerSharding> parse_shardings(const std::vector<std::string>& names) {
  std::vector<OptimizerSharding> out;
  for (const auto& n : names)
    for (OptimizerSharding s : kOptimizerShardings)
      if (n == to_string(s)) out.push_back(s);
  return out;
}

std::vector<GradSync> parse_grad_syncs(const std::vector<std::string>& names) {
  std::vector<GradSync> out;
  for (const auto& n : names)
    out.push_back(n == "overlap" ? GradSync::overlap : n == "after_chunk" ? GradSync::after_chunk : GradSync::after_flush);
  return out;
}

std::vector<Remainder> parse_partitions(const std::vector<std::string>& names) {
  std::vector<Remainder> out;
  for (const auto& n : names)
    out.push_back(n == "first" ? Remainder::first : n == "last" ? Remainder::last : Remainder::balanced);
  return out;
}

// --confirm: two probe trials of the chosen run around the predicted limit.
// The probe sizes one pipeline: a chosen run with replicas is probed as one
// replica (data_parallel=1), against the planner's limit for one replica.
int confirm(std::FILE* log, const TuneCmdOptions& o, const Job& tuned, const std::string& path, const TuneCandidate& best,
            const std::string& run_name) {
  ProbeOptions p;
  p.job_path = path;
  p.run_name = run_name;
  p.ranks = best.pipeline_size * best.tensor_parallel * best.context_parallel;  // one replica's
  const int predicted = best.replica_max_micro_batch;
  if (best.data_parallel > 1) {
    p.overrides.push_back(fmt::format("run.{}.data_parallel=1", run_name));
    fmt::print(log, "\nconfirm: run \"{}\" has {} replicas; the probe sizes one of them (--set run.{}.data_parallel=1){}",
               run_name, best.data_parallel, run_name,
               best.sharding != OptimizerSharding::none
                   ? fmt::format(", whose optimizer state is whole: the planner predicts {} for it, {} with {}", predicted,
                                 best.max_micro_batch, to_string(best.sharding))
                   : "");
  }
  p.predicted = predicted;
  p.hi = std::max(256, 2 * predicted + 2);
  p.steps = 1;
  p.trial_timeout_s = o.trial_timeout_s;
  p.launcher = o.launcher;
  p.pipebench = self_executable();
  const std::string stamp = utc_stamp();
  p.trial_dir = (std::filesystem::path(o.results_dir) / tuned.name / "probe" / fmt::format("{}-{}-trials", stamp, getpid())).string();
  fmt::print(log, "\nconfirm: probe trials of run \"{}\" at the predicted limit {} and above it ({})\n", run_name,
             predicted, p.launcher);
  const ProbeResult res = run_probe(p, console_probe_observer(log));
  const std::string file = write_probe_results(tuned, res, fmt::format("pipebench tune {} --confirm", o.job_path), o.results_dir, stamp);
  const bool agree = res.max_micro_batch == predicted;
  fmt::print(log, "confirm: max_micro_batch = {} after {} trial(s) ({}); the planner predicted {}: {}\nresults: {}\n",
             res.max_micro_batch, res.trials.size(), res.stop_reason, predicted,
             agree ? "confirmed" : "DIFFERENT (the planner's memory model misses something; docs/tune.md)", file);
  return res.max_micro_batch > 0 ? kOk : kRunFailed;
}

// --verify: the written workload for the seed's short steps, then its report.
int verify(std::FILE* log, const TuneCmdOptions& o, const Job& tuned, const std::string& path, int ranks) {
  const std::string label = "tune-verify-" + utc_stamp();
  const std::string cmd =
      launch_command(o.launcher, ranks,
                     {self_executable(), "run", path, "--set", fmt::format("train.repeats={}", o.steps), "-o", o.results_dir,
                      "--label", label});
  fmt::print(log, "\nverify: {} counted steps of every run ({})\n  {}\n", o.steps, ranks, cmd);
  std::fflush(log);
  const ProcessResult pr = run_process(cmd, 1e9, {}, 10.0, "verify launch");
  std::fwrite(pr.output.data(), 1, pr.output.size(), log);
  const std::filesystem::path results = std::filesystem::path(o.results_dir) / tuned.name / label;
  if (!std::filesystem::exists(results)) {
    fmt::print(log, "pipebench: tune --verify: the run wrote no results (exit {})\n", pr.exit_code);
    return pr.exit_code != 0 ? pr.exit_code : kRunFailed;
  }
  ReportOptions ro;
  ro.inputs = {results.string()};
  const ReportData data = load_report(ro);
  const std::filesystem::path out = std::filesystem::path("reports") / "tune" / tuned.name / label;
  write_report(data, out);
  fmt::print(log, "\nverify: decisions ({} counted steps)\n", o.steps);
  for (const auto& f : data.files)
    for (const auto& v : f.runs)
      fmt::print(log, "  {:<28} {:<14} {}\n", v.run->spec.name, v.run->decision, decision_headline(*v.run));
  // How right the prediction was: each measured run's plan beside it (one
  // file, one job: one basis for its step times).
  for (const auto& f : data.files) {
    bool header = false;
    for (const auto& v : f.runs) {
      if (!v.prediction) continue;
      if (!header)
        fmt::print(log, "\nverify: the plan beside the measurement (the step predicted from {})\n  {:<28} {:<26} {:>12} {:>12}  {}\n",
                   v.prediction->basis, "run", "figure", "planned", "measured", "error of the plan");
      header = true;
      std::string name = v.run->spec.name;
      for (const auto& cells : prediction_cells(*v.prediction)) {
        fmt::print(log, "  {:<28} {:<26} {:>12} {:>12}  {}\n", name, cells[0], cells[1], cells[2], cells[3]);
        name.clear();
      }
    }
  }
  fmt::print(log, "report: {}\n", (out / "index.html").string());
  return pr.exit_code;
}

void add_tune_options(CLI::App& app, TuneCmdOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "tune", "Lay out N ranks or GPUs from the planner (seed 000's procedure, with the time model): stages x "
              "replicas x tensor ranks, split, micro-batch, schedule and recomputation, ranked; writes a ready workload "
              "(no MPI needed; --confirm and --verify launch runs)");
  cmd->add_option("job", o.job_path, "workload file (jobs/*.toml): its model, train and device tables")->required()->check(CLI::ExistingFile);
  auto* ranks = cmd->add_option("--ranks", o.tune.max_ranks, "ranks (GPUs) available: every p stages x d replicas x t tensor ranks with p x d x t <= N is tried")->check(CLI::Range(1, kMaxRanks));
  auto* gpus = cmd->add_option("--gpus", o.gpus,
                  "the layout question: GPUs to lay out, all of them (p x d x t = N); searches every recomputation, "
                  "sequence parallelism, ZeRO-1, 1f1b and interleaved-1f1b (v 2-4) unless narrowed (docs/tune.md)")
                  ->check(CLI::Range(1, kMaxRanks));
  ranks->excludes(gpus);
  cmd->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (device.ranks_per_node): t stays within a node")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--recompute", o.recompute, "recomputation modes to try: none, selective, full (repeatable; default: the template's)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  cmd->add_option("--sequence-parallel", o.sequence_parallel, "sequence parallelism with t > 1: on, off (repeatable; default: the template's)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--virtual-stages", o.tune.virtual_stages, "chunks per rank to try with interleaved-1f1b, looped-bfs, interleaved-zb (repeatable; default: the template's, else 2)")
      ->check(CLI::Range(2, 64));
  cmd->add_option("--data-parallel", o.tune.data_parallel, "replica counts to try (repeatable; default: every d with p x d <= N)")
      ->check(CLI::Range(1, kMaxPipelineSize));
  cmd->add_option("--tensor-parallel", o.tune.tensor_parallel,
                  "tensor-parallel degrees to try (repeatable; default: the template's, and with device.ranks_per_node "
                  "= G every t <= G the model allows)")
      ->check(CLI::Range(1, kMaxTensorParallel));
  cmd->add_option("--context-parallel", o.tune.context_parallel,
                  "context-parallel degrees to try (repeatable; default: the template's, and for a sequence longer "
                  "than 8192 tokens with flash attention every c with c x t <= device.ranks_per_node it allows)")
      ->check(CLI::Range(1, kMaxContextParallel));
  cmd->add_option("--optimizer-sharding", o.shardings,
                  "optimizer sharding of layouts with replicas: none, zero1, zero2, fsdp (repeatable; default: every "
                  "one the job's backend executes)")
      ->check(CLI::IsMember(sharding_names()));
  cmd->add_option("--grad-sync", o.grad_syncs,
                  "gradient synchronisations of layouts with replicas: after_flush, after_chunk, overlap (repeatable; "
                  "default: the template run's and overlap)")
      ->check(CLI::IsMember({"after_flush", "after_chunk", "overlap"}));
  cmd->add_option("--global-batch", o.tune.global_batch, "samples per step; num_microbatches = B / (d x micro_batch_size)")
      ->check(CLI::Range(1, INT_MAX));
  cmd->add_option("--num-microbatches", o.tune.num_microbatches, "micro-batches per step and replica, the same for every candidate")
      ->check(CLI::Range(1, kMaxMicrobatches));
  cmd->add_option("--bubble-target", o.tune.bubble_target,
                  "without --global-batch/--num-microbatches: the smallest m whose closed-form bubble is at most X (default 0.10)")
      ->check(number_in(0.001, 0.999));
  cmd->add_option("--schedule", o.schedules, "schedules to compare (repeatable; default: the template run's)")
      ->check(CLI::IsMember(builtin_schedule_names()));
  cmd->add_option("--partition", o.partitions, "partition rules to compare: first, last, balanced (repeatable; default: the template run's)")
      ->check(CLI::IsMember({"first", "last", "balanced"}));
  cmd->add_option("--run", o.tune.template_run, "the run whose schedule, partition rule and mode are the template (default: the first multi-stage training run)");
  cmd->add_option("--set", o.overrides, "override a key of JOB before tuning: dotted.key=value (repeatable)");
  cmd->add_option("--format", o.format, "text: the ranked table; json: every candidate (docs/tune.md)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--top", o.top, "fitting candidates shown (default 15)")->check(CLI::Range(1, INT_MAX));
  cmd->add_option("-o,--output", o.output, "the workload file written (default: <job>_tuned.toml)");
  cmd->add_flag("--confirm", o.confirm, "probe the chosen run at the predicted limit and one above (2 trials; bisection if they disagree)");
  cmd->add_flag("--verify", o.verify, "run the written workload for --steps counted steps and write its report with decisions");
  cmd->add_option("--steps", o.steps, "--verify: counted steps per run (default 30, seed 000's 30-50)")->check(CLI::Range(1, kMaxSteps - 100));
  cmd->add_option("--launcher", o.launcher, "--confirm/--verify: command prefix; {ranks} becomes the ranks needed (default \"mpirun -np {ranks}\")");
  cmd->add_option("--results", o.results_dir, "--confirm/--verify: results folder (default: results)");
  cmd->add_option("--trial-timeout", o.trial_timeout_s, "--confirm: seconds before a trial is killed (default 900)")
      ->check(number_in(1.0, 7.0 * 24 * 3600));
}

int run_tune(TuneCmdOptions& o) {
  if (o.tune.max_ranks < 1 && o.gpus < 1) throw ConfigError("tune: give --ranks N or --gpus N");
  if (o.gpus_per_node > 0) o.overrides.push_back(fmt::format("device.ranks_per_node={}", o.gpus_per_node));
  if (o.gpus > 0) layout_question_defaults(o);
  const auto started = std::chrono::steady_clock::now();
  const Job job = load_job(o.job_path, o.overrides);
  o.tune.schedules = parse_schedules(o.schedules);
  o.tune.partitions = parse_partitions(o.partitions);
  o.tune.shardings = parse_shardings(o.shardings);
  o.tune.grad_syncs = parse_grad_syncs(o.grad_syncs);
  o.tune.recompute = parse_recompute(o.recompute);
  for (const auto& v : o.sequence_parallel) o.tune.sequence_parallel.push_back(v == "on");
  o.tune.progress = search_progress(started);
  keep_freed_pages();
  const TuneResult result = tune(job, o.tune);
  const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const bool text = o.format == "text";
  if (text) print_answer(o, job, result, search_s);
  if (!result.best()) {
    if (!text) fmt::print("{}", format_tune_json(job, result, TunedWorkload{}, ""));
    return kRunFailed;
  }
  const TuneCandidate& best = *result.best();
  const TunedWorkload w = tuned_workload(job, result);
  const std::string path = o.output.empty() ? w.job_name + ".toml" : o.output;
  write_output_file(path, {o.job_path}, [&](std::FILE* out) {
    if (std::fwrite(w.toml.data(), 1, w.toml.size(), out) != w.toml.size()) throw std::runtime_error(std::strerror(errno));
  });
  const Job tuned = load_job(path);  // what `pipebench run` will read: it must accept it
  if (!text) {
    fmt::print("{}", format_tune_json(job, result, w, path));
  } else {
    if (!w.baseline_note.empty()) fmt::print("baseline: {}\n", w.baseline_note);
    std::string names;
    for (const auto& n : w.run_names) names += (names.empty() ? "" : ", ") + n;
    fmt::print("workload: {} (runs: {}; launch with {} ranks: mpirun -np {} pipebench run {})\n", path, names,
               w.ranks_needed, w.ranks_needed, path);
    // A pipelined baseline is tune's own choice, said on the baseline line.
    for (const auto& warning : tuned.warnings)
      if (w.baseline_note.empty() || !warning.ends_with(", not a single-stage baseline"))
        fmt::print("  note: {}\n", warning);
  }
  std::fflush(stdout);
  int rc = static_cast<int>(kOk);
  std::FILE* log = text ? stdout : stderr;  // JSON keeps stdout to itself
  if (o.confirm) rc = confirm(log, o, tuned, path, best, w.run_names.front());
  if (o.verify && rc == kOk) rc = verify(log, o, tuned, path, w.ranks_needed);
  return rc;
}

}  // namespace


Handler add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneCmdOptions>();
  add_tune_options(app, *o);
  return [o]() -> int { return run_tune(*o); };
}

}  // namespace pipebench::cli
