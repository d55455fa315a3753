#include "pipebench/report/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"
#include "pipebench/core/json.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/schedule/simulate.hpp"

namespace pipebench {

namespace {

// Process ids: run i's rank r is measured at kRunStride * i + r + 1 and
// simulated kPipelineStride above it (pipeline_size <= kMaxPipelineSize).
constexpr int kPipelineStride = kMaxPipelineSize;
constexpr int kRunStride = 2 * kMaxPipelineSize;
// Thread ids within a rank's process.
constexpr int kComputeTid = 1;
constexpr int kCommTid = 2;
constexpr int kSyncTid = 3;  // data parallelism: the gradient synchronisation of the rank's replica-0 record
constexpr int kBucketTid = 4;  // its collectives one by one, each while it holds the link (grad_buckets)

double us(double seconds) { return seconds * 1e6; }

class TraceWriter {
 public:
  explicit TraceWriter(std::FILE* sink) : w_(sink, 0) { w_.begin_object().key("traceEvents").begin_array(); }

  void process(int pid, const std::string& name, int sort) {
    w_.begin_object().field("ph", "M").field("name", "process_name").field("pid", pid).field("tid", 0);
    w_.key("args").begin_object().field("name", name).end_object().end_object();
    w_.begin_object().field("ph", "M").field("name", "process_sort_index").field("pid", pid).field("tid", 0);
    w_.key("args").begin_object().field("sort_index", sort).end_object().end_object();
  }
  void thread(int pid, int tid, const std::string& name) {
    w_.begin_object().field("ph", "M").field("name", "thread_name").field("pid", pid).field("tid", tid);
    w_.key("args").begin_object().field("name", name).end_object().end_object();
  }
  // A complete slice; `args` written by `more`.
  template <typename F>
  void slice(int pid, int tid, const std::string& name, const char* cat, double start_s, double end_s, F&& more) {
    w_.begin_object().field("ph", "X").field("name", name).field("cat", cat).field("pid", pid).field("tid", tid);
    w_.field("ts", us(start_s)).field("dur", us(std::max(0.0, end_s - start_s)));
    w_.key("args").begin_object();
    more(w_);
    w_.end_object().end_object();
  }
  template <typename F>
  void instant(int pid, const std::string& name, double at_s, F&& more) {
    w_.begin_object().field("ph", "i").field("s", "p").field("name", name).field("cat", "step").field("pid", pid);
    w_.field("tid", kComputeTid).field("ts", us(at_s)).key("args").begin_object();
    more(w_);
    w_.end_object().end_object();
  }
  JsonWriter& finish_events() {
    w_.end_array();
    return w_;
  }

 private:
  JsonWriter w_;
};

std::string action_name(const EventRecord& e) { return to_string(Action{e.kind, e.microbatch, e.chunk}); }

const char* kind_name(ActionKind k) { return k == ActionKind::F ? "F" : k == ActionKind::B ? "B" : "W"; }

// The time on a rank between its previous action (ending at t_prev) and
// `e`: the receive `e` waited on (its recorded wait, ending at e.start_s),
// and idle before it. A file without recorded waits: one "between actions".
void between(TraceWriter& t, int pid, double base, int step, double t_prev, const EventRecord& e) {
  if (!(e.start_s > t_prev)) return;
  if (std::isnan(e.wait_s)) {
    t.slice(pid, kCommTid, "between actions", "wait", base + t_prev, base + e.start_s,
            [&](JsonWriter& w) { w.field("step", step + 1).field("before", action_name(e)); });
    return;
  }
  const double wait_from = wait_start_s(e, t_prev);
  if (wait_from > t_prev)
    t.slice(pid, kCommTid, "idle", "idle", base + t_prev, base + wait_from,
            [&](JsonWriter& w) { w.field("step", step + 1).field("before", action_name(e)); });
  if (e.start_s > wait_from)
    t.slice(pid, kCommTid, "recv " + action_name(e), "comm_wait", base + wait_from, base + e.start_s, [&](JsonWriter& w) {
      w.field("step", step + 1).field("for", action_name(e)).field("wait_s", e.wait_s);
    });
}

// Where each (run rank, step)'s rows of r.grad_buckets are (rank by rank,
// step by step in the file): [first, end).
using BucketRanges = std::map<std::pair<int, int>, std::pair<std::size_t, std::size_t>>;
BucketRanges bucket_ranges(const RunResult& r) {
  BucketRanges out;
  for (std::size_t i = 0; i < r.grad_buckets.size(); ++i) {
    auto [it, fresh] = out.try_emplace({r.grad_buckets[i].rank, r.grad_buckets[i].step}, i, i + 1);
    if (!fresh) it->second.second = i + 1;
  }
  return out;
}

// The collectives of one rank's step on their own track: each from when it
// holds the link (its launch, or the end of the one before it) to its end,
// with its launch, bytes, exposed part and bus bandwidth (nccl-tests' busbw
// over that time).
void gradient_buckets(TraceWriter& t, const RunResult& r, const BucketRanges& ranges, int pid, double base, int step,
                      std::size_t rank) {
  const auto it = ranges.find({static_cast<int>(rank), step});
  if (it == ranges.end()) return;
  static constexpr const char* kKind[] = {"all-reduce", "reduce-scatter", "all-gather"};
  double link_free = 0.0;
  for (std::size_t i = it->second.first; i < it->second.second; ++i) {
    const BucketRecord& b = r.grad_buckets[i];
    const double from = std::max(b.launch_s, link_free);
    link_free = std::max(link_free, b.end_s);
    if (!(b.end_s > from) || b.kind < 0 || b.kind > 2) continue;
    const auto kind = static_cast<parallel::Collective>(b.kind);
    t.slice(pid, kBucketTid, fmt::format("{} {} (chunk {})", kKind[b.kind], b.index, b.chunk), "grad_bucket", base + from,
            base + b.end_s, [&](JsonWriter& w) {
              w.field("step", step + 1).field("chunk", b.chunk).field("index", b.index).field("bytes", b.bytes);
              w.field("launch_s", b.launch_s).field("end_s", b.end_s).field("exposed_s", b.exposed_s);
              w.field("bus_bandwidth_bytes_per_s",
                      parallel::bus_bandwidth(kind, b.bytes, r.spec.data_parallel, b.end_s - from));
            });
  }
}

// Data parallelism: stage `stage`'s (replica 0's) gradient synchronisation
// of `step`, from its first launch to its end, on its own track.
void gradient_sync(TraceWriter& t, const RunResult& r, int pid, double base, int step, int stage) {
  const auto k = static_cast<std::size_t>(step);
  if (k >= r.grad_sync_s.size() || k >= r.grad_sync_start_s.size()) return;
  const std::size_t i = r.rank_index(stage);
  if (i >= r.grad_sync_s[k].size()) return;
  const double start = r.grad_sync_start_s[k][i], took = r.grad_sync_s[k][i];
  if (!(took > 0.0)) return;
  const char* name = !shards_optimizer(r.spec)           ? "gradient all-reduce"
                     : gathers_in_first_forward(r.spec) ? "all-gather ... reduce-scatter"
                                                        : "reduce-scatter ... all-gather";
  t.slice(pid, kSyncTid, name, "grad_sync", base + start,
          base + start + took, [&](JsonWriter& w) {
            w.field("step", step + 1).field("replicas", r.spec.data_parallel).field("grad_sync", to_string(r.spec.grad_sync));
            w.field("sync_s", took).field("exposed_s", r.grad_sync_exposed_s[k][i]);
            if (i < r.grad_sync_bytes.size())
              w.field("bytes", r.grad_sync_bytes[i]).field("bus_bandwidth_bytes_per_s", grad_sync_bus_bandwidth(r, k, i));
          });
}

// One (step, rank) group of measured events, in time order (pointers into
// the piece being streamed), on process `pid`; then its "step end".
void measured_group(TraceWriter& t, const RunResult& r, const BucketRanges& buckets, int pid, double base,
                    std::vector<const EventRecord*>& group) {
  std::stable_sort(group.begin(), group.end(),
                   [](const EventRecord* a, const EventRecord* b) { return a->start_s < b->start_s; });
  const int step = group.front()->step;
  double t_prev = 0.0;
  for (const EventRecord* ep : group) {
    const EventRecord& e = *ep;
    between(t, pid, base, step, t_prev, e);
    t.slice(pid, kComputeTid, action_name(e), e.kind == ActionKind::F ? "forward" : e.kind == ActionKind::B ? "backward" : "weight",
            base + e.start_s, base + e.end_s, [&](JsonWriter& w) {
              w.field("step", step + 1).field("microbatch", e.microbatch).field("chunk", e.chunk);
              w.field("kind", kind_name(e.kind)).field("start_s", e.start_s).field("end_s", e.end_s);
              if (std::isfinite(e.wait_s)) w.field("wait_s", e.wait_s);
            });
    t_prev = e.end_s;
  }
  gradient_sync(t, r, pid, base, step, group.front()->rank);
  gradient_buckets(t, r, buckets, pid, base, step, r.rank_index(group.front()->rank));
  const double step_end =
      static_cast<std::size_t>(step) < r.step_time_s.size() ? r.step_time_s[static_cast<std::size_t>(step)] : t_prev;
  if (std::isfinite(step_end) && step_end > t_prev)
    t.slice(pid, kComputeTid, "step end", "step_end", base + t_prev, base + step_end, [&](JsonWriter& w) {
      w.field("step", step + 1)
          .field("what", r.spec.mode == RunMode::train ? "gradient reduction, optimizer, waiting for the others"
                                                       : "waiting for the others (inference: no gradients)");
    });
}

// The process of stage `s` of `r`: "rank S" when the run is one pipeline
// (rank S is stage S); with replicas or tensor ranks the events are replica
// 0's, tensor rank 0's, so "stage S = rank R (replica 0, tensor rank 0)".
std::string stage_process(const RunResult& r, int s) {
  if (r.spec.data_parallel <= 1 && r.spec.tensor_parallel <= 1) return fmt::format("rank {}", s);
  std::string of;
  if (r.spec.data_parallel > 1) of += "replica 0";
  if (r.spec.tensor_parallel > 1) of += of.empty() ? "tensor rank 0" : ", tensor rank 0";
  return fmt::format("stage {} = rank {} ({})", s, r.rank_index(s), of);
}

// The measured events of `r` (steps laid end to end at their measured step
// times), on ranks pid_base + rank, streamed from the file at `path` in
// whole (step, rank) groups; every event streamed also goes to `digest`
// (when given), for the simulated timeline.
void measured(TraceWriter& t, const std::string& path, const RunResult& r, int pid_base, int only_step,
              EventDigest* digest) {
  const int P = r.spec.pipeline_size;
  for (int rank = 0; rank < P; ++rank) {
    const int pid = pid_base + rank;
    t.process(pid, fmt::format("{} {} (measured)", r.spec.name, stage_process(r, rank)), pid);
    t.thread(pid, kComputeTid, r.spec.mode == RunMode::train ? "compute (F, B, W; step end: reduction + optimizer)"
                                                             : "compute (F; step end: waiting for the others)");
    t.thread(pid, kCommTid, "communication (boundary receive waits; idle)");
    if (!r.grad_sync_s.empty())
      t.thread(pid, kSyncTid, r.spec.optimizer_sharding == OptimizerSharding::zero1
                                  ? "data parallel: gradient reduce-scatter, optimizer, parameter all-gather"
                                  : "data parallel: gradient all-reduce");
    if (!r.grad_buckets.empty())
      t.thread(pid, kBucketTid, "data parallel: each collective while it holds the link (buckets)");
  }
  const BucketRanges buckets = bucket_ranges(r);
  // A failed run keeps the events of the step it failed in, one past its
  // recorded steps: that step starts where the last one ended.
  std::vector<double> offset(r.step_time_s.size() + 1, 0.0);
  for (std::size_t k = 1; k < offset.size(); ++k) {
    const double prev = r.step_time_s[k - 1];
    offset[k] = only_step > 0 ? 0.0 : offset[k - 1] + (std::isfinite(prev) ? prev : 0.0);
  }
  for (std::size_t k = 0; k < r.step_time_s.size(); ++k) {
    if (only_step > 0 && static_cast<int>(k) != only_step - 1) continue;
    const bool warm = k < r.is_warmup.size() && r.is_warmup[k];
    for (int rank = 0; rank < P; ++rank)
      t.instant(pid_base + rank, fmt::format("step {}{}", k + 1, warm ? " (warm-up)" : ""), offset[k], [&, k, warm](JsonWriter& w) {
        w.field("step", static_cast<int>(k) + 1).field("warmup", warm).field("step_time_s", r.step_time_s[k]);
        // Tensor parallelism: the rank's (replica 0's, tensor rank 0's) time in its group's collectives.
        if (k < r.tensor_comm_s.size()) w.field("tensor_comm_s", r.tensor_comm_s[k][r.rank_index(rank)]);
      });
  }
  auto shown = [&](const EventRecord& e) {
    return (only_step == 0 || e.step == only_step - 1) && e.step >= 0 && static_cast<std::size_t>(e.step) < offset.size() &&
           std::isfinite(e.start_s) && std::isfinite(e.end_s);
  };
  std::vector<const EventRecord*> group;
  stream_events(path, r, [&](const EventRecord* e, std::size_t n) {
    if (digest) digest->add(e, n);
    for (std::size_t i = 0; i < n;) {
      const int step = e[i].step, rank = e[i].rank;
      group.clear();
      for (; i < n && e[i].step == step && e[i].rank == rank; ++i)
        if (shown(e[i])) group.push_back(&e[i]);
      if (!group.empty()) measured_group(t, r, buckets, pid_base + rank, offset[static_cast<std::size_t>(step)], group);
    }
  });
}

// The schedule of `r` as the file's workload plans it, if it plans.
std::optional<Schedule> run_schedule(const RunResult& r, const Job& job) {
  const RunSpec* spec = job.find_run(r.spec.name);
  if (!spec) return std::nullopt;
  try {
    return plan_run(job, *spec).schedule;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The schedule simulated with the run's per-action medians: one step.
void simulated(TraceWriter& t, const RunResult& r, const Schedule& s, const SimCosts& costs, int pid_base) {
  const SimResult sim = simulate(s, costs);
  for (int rank = 0; rank < s.num_ranks; ++rank) {
    t.process(pid_base + rank, fmt::format("{} {} (simulated: {} with measured medians)", r.spec.name, stage_process(r, rank), s.name),
              pid_base + rank);
    t.thread(pid_base + rank, kComputeTid, "compute (simulated)");
  }
  for (const auto& a : sim.timeline)
    t.slice(pid_base + a.rank, kComputeTid, to_string(a.action), "simulated", a.start, a.end, [&](JsonWriter& w) {
      w.field("microbatch", a.action.microbatch).field("chunk", a.action.chunk);
      w.field("kind", kind_name(a.action.kind));
    });
}

// Whether `options` export the run named `name` (no --run: every run).
bool selected(const TraceOptions& options, const std::string& name) {
  return options.runs.empty() || std::find(options.runs.begin(), options.runs.end(), name) != options.runs.end();
}

}  // namespace

void check_trace_options(const JobResult& result, const TraceOptions& options) {
  for (const auto& name : options.runs)
    if (std::none_of(result.runs.begin(), result.runs.end(), [&](const RunResult& r) { return r.spec.name == name; }))
      throw UsageError(fmt::format("trace: the file has no run named \"{}\"", printable(name)));
  for (const auto& r : result.runs)
    if (options.step > static_cast<int>(r.step_time_s.size()) && r.events_in_file > 0 && selected(options, r.spec.name))
      throw UsageError(fmt::format("trace: run {} has {} step(s); --step {} does not exist", r.spec.name, r.step_time_s.size(),
                              options.step));
}

void write_trace_json(const std::string& path, const JobResult& result, const Job* job, const TraceOptions& options,
                      std::FILE* sink) {
  check_trace_options(result, options);
  TraceWriter t(sink);
  int index = 0, exported = 0;
  for (const auto& r : result.runs) {
    const int base = 1 + kRunStride * index++;
    if (!selected(options, r.spec.name) || r.events_in_file == 0) continue;
    std::optional<Schedule> schedule;
    if (options.simulated && job) schedule = run_schedule(r, *job);
    std::optional<EventDigest> digest;
    if (schedule) digest.emplace(*schedule, false);
    measured(t, path, r, base, options.step, digest ? &*digest : nullptr);
    if (schedule) simulated(t, r, *schedule, digest->costs(r.warmup), base + kPipelineStride);
    ++exported;
  }
  JsonWriter& w = t.finish_events();
  w.field("displayTimeUnit", "ms");
  w.key("otherData").begin_object();
  w.field("tool", "pipebench trace").field("job", result.root_attrs.count("job_name") ? result.root_attrs.at("job_name") : "");
  w.field("created_utc", result.root_attrs.count("created_utc") ? result.root_attrs.at("created_utc") : "");
  w.field("runs_exported", exported).field("step", options.step == 0 ? std::string("all") : std::to_string(options.step));
  w.end_object().end_object();
  w.flush();
  if (std::fputc('\n', sink) == EOF) throw Error(fmt::format("writing JSON: {}", std::strerror(errno)));
}

}  // namespace pipebench
