#include "pipebench/runtime/runner.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unistd.h>

#include <fmt/format.h>
#include <mpi.h>

#include "pipebench/backends/backend.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/cpu_simd.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/runtime/device_binding.hpp"
#include "pipebench/runtime/executor.hpp"
#include "pipebench/runtime/interrupt.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/tensor_group_mpi.hpp"
#include "pipebench/runtime/provenance.hpp"
#include "pipebench/runtime/transport_checked.hpp"
#include "pipebench/runtime/transport_mpi.hpp"
#include "pipebench/runtime/transport_nccl.hpp"

namespace pipebench {

namespace {

// ---- RankRecord <-> bytes, for gathering on rank 0 -------------------------

class Packer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<std::uint64_t>(v.size());
    const auto* p = reinterpret_cast<const char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  void put_string(const std::string& s) { put_vector(std::vector<char>(s.begin(), s.end())); }
  std::vector<char> bytes;
};

class Unpacker {
 public:
  Unpacker(const char* data, std::size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  T get() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > static_cast<std::size_t>(end_ - p_) / sizeof(T)) corrupt();  // before allocating n elements
    std::vector<T> v(n);
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
  std::string get_string() {
    const auto v = get_vector<char>();
    return {v.begin(), v.end()};
  }

 private:
  [[noreturn]] static void corrupt() { throw Error("corrupt rank record while gathering"); }
  void take(void* out, std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) corrupt();
    if (n == 0) return;  // an empty vector's data() may be null: memcpy must not see it
    std::memcpy(out, p_, n);
    p_ += n;
  }
  const char* p_;
  const char* end_;
};

std::vector<char> pack(const RankRecord& r) {
  Packer p;
  p.put(r.rank);
  p.put(r.pipeline_rank);
  p.put(r.data_rank);
  p.put(r.tensor_rank);
  p.put(r.context_rank);
  p.put_string(r.hostname);
  p.put(r.pid);
  p.put_vector(r.steps);
  p.put_vector(r.events);
  p.put_vector(r.buckets);
  p.put(r.peak_mem_by_category);
  p.put(r.peak_mem_bytes);
  p.put(r.memory_capacity_bytes);
  p.put(r.stage_params);
  p.put(r.stage_layers);
  p.put(r.peak_live_activations);
  p.put(r.device_used_before_bytes);
  p.put(r.device_used_peak_bytes);
  p.put(r.failure);
  p.put(r.failure_is_origin);
  p.put_string(r.failure_message);
  return std::move(p.bytes);
}

RankRecord unpack(const char* data, std::size_t size) {
  Unpacker u(data, size);
  RankRecord r;
  r.rank = u.get<int>();
  r.pipeline_rank = u.get<int>();
  r.data_rank = u.get<int>();
  r.tensor_rank = u.get<int>();
  r.context_rank = u.get<int>();
  r.hostname = u.get_string();
  r.pid = u.get<std::int64_t>();
  r.steps = u.get_vector<StepRecord>();
  r.events = u.get_vector<EventRecord>();
  r.buckets = u.get_vector<BucketRecord>();
  r.peak_mem_by_category = u.get<decltype(r.peak_mem_by_category)>();
  r.peak_mem_bytes = u.get<std::uint64_t>();
  r.memory_capacity_bytes = u.get<std::uint64_t>();
  r.stage_params = u.get<std::int64_t>();
  r.stage_layers = u.get<std::array<int, 2>>();
  r.peak_live_activations = u.get<int>();
  r.device_used_before_bytes = u.get<std::int64_t>();
  r.device_used_peak_bytes = u.get<std::int64_t>();
  r.failure = u.get<FailureKind>();
  r.failure_is_origin = u.get<bool>();
  r.failure_message = u.get_string();
  return r;
}

// Every rank's record on rank 0 of `comm` (empty elsewhere).
std::vector<RankRecord> gather_records(MPI_Comm comm, const RankRecord& mine) {
  int rank = 0, size = 1;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::vector<char> bytes = pack(mine);
  const int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  PIPEBENCH_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int i = 0; i < size; ++i) {
    offsets[static_cast<std::size_t>(i)] = total;
    total += sizes[static_cast<std::size_t>(i)];
  }
  std::vector<char> all(rank == 0 ? static_cast<std::size_t>(total) : 0);
  PIPEBENCH_MPI_CHECK(MPI_Gatherv(bytes.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, comm));
  std::vector<RankRecord> out;
  if (rank == 0)
    for (int i = 0; i < size; ++i)
      out.push_back(unpack(all.data() + offsets[static_cast<std::size_t>(i)], static_cast<std::size_t>(sizes[static_cast<std::size_t>(i)])));
  return out;
}

// ---- the hard watchdog ------------------------------------------------------

// Cooperative timeouts end a run cleanly when a rank waits too long. A rank
// stuck inside a computation cannot notice; this thread ends the process
// (mpirun then stops the others) when a step overruns its timeout by far.
class Watchdog {
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  // 0 disarms.
  void arm(double hard_deadline_s, std::string what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      what_ = std::move(what);
    }
    deadline_ = hard_deadline_s;
  }

 private:
  void loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const double d = deadline_;
      if (d > 0.0 && now_s() > d) {
        std::lock_guard<std::mutex> lock(mu_);
        std::fprintf(stderr, "pipebench: watchdog: %s did not finish long after its step timeout; aborting (exit 124)\n",
                     what_.c_str());
        std::fflush(stderr);
        publish_results_now("watchdog");  // rank 0: the checkpoint, with this run as interrupted
        std::_Exit(124);
      }
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<double> deadline_{0.0};
  std::mutex mu_;
  std::string what_;
  std::thread thread_;
};

// ---- console ------------------------------------------------------------------

std::string fmt_num(double v, const char* spec = "{:.4f}") { return std::isnan(v) ? "-" : fmt::format(fmt::runtime(spec), v); }

void print_run_summary(const RunResult& r, const RunPlan& rp) {
  fmt::print("  -- {}: status {}{}\n", r.spec.name, to_string(r.status),
             r.status == RunStatus::failed
                 ? fmt::format(" ({} on rank {}): {}", to_string(r.failure_kind), r.failing_rank, r.failure_message)
                 : "");
  if (r.status == RunStatus::skipped) return;
  // With replicas or tensor ranks a row per rank: "stage/replica/tensor rank".
  const bool replicas = r.spec.data_parallel > 1, tensor = r.spec.tensor_parallel > 1;
  const std::string header = std::string("stage") + (replicas ? "/r" : "") + (tensor ? "/t" : "");
  fmt::print("     {:>9} {:>9} {:>12} {:>12} {:>12} {:>12} {:>10} {:>6}\n", header, "layers", "busy", "comm wait", "idle",
             "peak mem", "of cap", "live");
  for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i) {
    const auto& l = r.stage_layers[i];
    std::string who = replicas || tensor ? std::to_string(r.pipeline_rank[i]) : std::to_string(i);
    if (replicas) who += fmt::format("/{}", r.data_rank[i]);
    if (tensor) who += fmt::format("/{}", r.tensor_rank[i]);
    fmt::print("     {:>9} {:>9} {:>12} {:>12} {:>12} {:>12} {:>9.1f}% {:>6}\n", who,
               built_range_text(l[0], l[1], r.spec.layers_per_stage_origin),
               format_seconds(counted_median(r.busy_s, r.is_warmup, i)), format_seconds(counted_median(r.comm_wait_s, r.is_warmup, i)),
               format_seconds(counted_median(r.idle_s, r.is_warmup, i)), format_bytes(static_cast<double>(r.peak_mem_bytes[i])),
               100.0 * static_cast<double>(r.peak_mem_bytes[i]) / static_cast<double>(r.memory_capacity_bytes[i]),
               r.peak_live_activations[i]);
  }
  fmt::print("     step time median {} (min {}, max {}, p90 {}, CV {}), slowest stage {}\n", format_seconds(r.step_time.median),
             format_seconds(r.step_time.min), format_seconds(r.step_time.max), format_seconds(r.step_time.p90), fmt_num(r.step_time.cv, "{:.3f}"),
             format_seconds(r.slowest_stage_median_s));
  for (std::size_t i = 0; i < r.device_used_peak_bytes.size(); ++i)
    if (r.device_used_peak_bytes[i] >= 0)
      fmt::print("     rank {}: device memory in use (cudaMemGetInfo) {} at most, {} before the backend; tracker {}\n", i,
                 format_bytes(static_cast<double>(r.device_used_peak_bytes[i])),
                 format_bytes(static_cast<double>(r.device_used_before_bytes[i])),
                 format_bytes(static_cast<double>(r.peak_mem_bytes[i])));
  if (!r.grad_sync_s.empty()) {
    const GradSyncSummary g = grad_sync_summary(r);
    fmt::print("     gradient all-reduce ({}, {} replicas): {} per step at most, {} of it exposed (the slowest rank's "
               "medians); bus bandwidth {}/s\n",
               to_string(r.spec.grad_sync), r.spec.data_parallel, format_seconds(g.sync_s), format_seconds(g.exposed_s),
               std::isfinite(g.bus_bandwidth) ? format_bytes(g.bus_bandwidth) : "-");
  }
  if (!r.tensor_comm_s.empty()) {
    fmt::print("     tensor-parallel collectives ({} ranks per stage{}): {} per step at most (the slowest rank's median)\n",
               r.spec.tensor_parallel, r.spec.sequence_parallel ? ", sequence parallel" : "", format_seconds(tensor_comm_median_s(r)));
  }
  const double tflops = step_flops(rp) / r.step_time.median / 1e12;
  const double hardware = step_flops(rp, true) / r.step_time.median / 1e12;
  fmt::print("     bubble measured {} / analytic {} / simulated {}; throughput {} samples/s, {} model TFLOP/s "
             "({} per rank){}\n",
             fmt_num(r.bubble_measured_median), fmt_num(r.bubble_analytic), fmt_num(r.bubble_simulated),
             fmt_num(r.throughput_samples_per_s, "{:.1f}"), fmt_num(tflops, "{:.3f}"),
             fmt_num(tflops / static_cast<double>(rp.run.ranks()), "{:.3f}"),
             hardware != tflops ? fmt::format(", {} hardware TFLOP/s (with the recomputed forward)", fmt_num(hardware, "{:.3f}"))
                                : "");
  std::fflush(stdout);
}

// Seed 000's check before timing: per stage, the planned and the built layer range.
void print_dry_run(const RunPlan& rp, const std::vector<RankRecord>& records) {
  const int origin = rp.run.layers_per_stage_origin;
  fmt::print("     {:>5} {:>11} {:>11} {:>14} {:>12}  {}\n", "stage", "plan", "built", "params", "memory", "check");
  for (const auto& r : records) {
    const auto& st = rp.partition.stages[static_cast<std::size_t>(r.rank)];
    const bool same = r.stage_layers[0] == st.first_layer && r.stage_layers[1] == st.last_layer();
    fmt::print("     {:>5} {:>11} {:>11} {:>14} {:>12}  {}\n", r.rank, layer_range_text(st, origin),
               built_range_text(r.stage_layers[0], r.stage_layers[1], origin), group_digits(r.stage_params),
               format_bytes(static_cast<double>(r.peak_mem_bytes)),
               r.failure != FailureKind::none ? r.failure_message : same ? "ok" : "MISMATCH");
  }
}

}  // namespace

void describe_job_result(JobResult& jr, const Job& job, const std::string& command_line, const std::string& label,
                         const std::string& role) {
  jr.evidence_level = evidence_level(job.device.backend);
  jr.root_attrs["tool_version"] = PIPEBENCH_VERSION;
  jr.root_attrs["git_sha"] = build_git_sha();
  jr.root_attrs["created_utc"] = utc_iso8601();
  jr.root_attrs["job_name"] = job.name;
  jr.root_attrs["job_toml"] = job.effective_toml;
  jr.root_attrs["command_line"] = command_line;
  jr.root_attrs["label"] = label;
  jr.root_attrs["role"] = role;
  jr.root_attrs["results_id"] = new_results_id();
  jr.overrides = job.overrides;
}

namespace {

// describe_job_result, and what only `run` and `rerun` record: the system
// name and what the launch reproduces.
void describe_launch(JobResult& jr, const Job& job, const RunOptions& options) {
  describe_job_result(jr, job, options.command_line, options.label, options.probe_trial ? "probe-trial" : "job");
  std::string system = options.system;
  if (const char* env = std::getenv("PIPEBENCH_SYSTEM"); system.empty() && env) system = env;
  jr.root_attrs["system"] = system;
  if (const auto& r = options.reproduces) {
    jr.root_attrs["reproduces_id"] = r->id;
    jr.root_attrs["reproduces_sha256"] = r->sha256;
    jr.root_attrs["reproduces_path"] = r->path;
    jr.deviations = r->deviations;
  }
}

// This launch's results file: named after the Slurm job, else this process.
std::string launch_results_path(const Job& job, const RunOptions& options) {
  const std::string id = slurm_job_id().empty() ? std::to_string(getpid()) : slurm_job_id();
  return default_results_path(options.output_dir, job.name, options.label, utc_stamp(), id);
}

// A launch whose environment could not start (no usable GPU): a results file
// all the same, every selected run failed with kind "environment" (seed 004:
// the record keeps the failure, so "not run" and "cannot run" differ).
void record_environment_failure(const Job& job, const JobPlan& plan, const RunOptions& options, const std::string& why) {
  JobResult jr;
  describe_launch(jr, job, options);
  for (const RunPlan& rp : plan.runs) jr.runs.push_back(environment_failed_run(job, rp, why));
  jr.status = "failed";
  const std::string path = write_results(launch_results_path(job, options), jr);
  fmt::print("results (the failure, kind environment): {}\n", path);
  std::fflush(stdout);
}

// Binds GPUs for the cuda backend (every rank alike: DeviceUnavailableError,
// exit 7, without a usable one); for the others, makes a backend once so
// that one this build lacks fails before anything runs, everywhere alike.
GpuBinding bind_devices(const Job& job, const JobPlan& plan, TransportKind transport_kind, int world_rank,
                        int world_size) {
  GpuBinding gpus;
  if (job.device.backend != BackendKind::cuda) {
    (void)make_backend(job, world_rank);
    return gpus;
  }
  gpus = bind_gpus(MPI_COMM_WORLD);
  // Every rank of a run that uses NCCL: its pipelines and its data groups
  // are NCCL communicators (counting only the stages let two replicas'
  // pipelines share a GPU, which NCCL refuses at its initialisation).
  require_one_gpu_per_rank(gpus, ranks_needing_own_gpu(plan, transport_kind, world_size));
  return gpus;
}

// Collective: the hosts and pids of the world, and on rank 0 the job's
// /provenance (build, MPI, BLAS, GPUs, transport) in a fresh JobResult.
JobResult describe_world(const Job& job, const GpuBinding& gpus, TransportKind transport_kind, int world_size,
                         bool root) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::int64_t pid = getpid();
  std::vector<char> hosts(root ? 256 * static_cast<std::size_t>(world_size) : 0);
  std::vector<std::int64_t> pids(root ? static_cast<std::size_t>(world_size) : 0);
  PIPEBENCH_MPI_CHECK(MPI_Gather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD));
  PIPEBENCH_MPI_CHECK(MPI_Gather(&pid, 1, MPI_INT64_T, pids.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD));

  JobResult jr;
  if (!root) return jr;
  for (int i = 0; i < world_size; ++i) jr.hostnames.emplace_back(&hosts[256 * static_cast<std::size_t>(i)]);
  jr.pids = pids;
  auto& prov = jr.provenance_attrs;
  prov = collect_provenance();
  prov["hdf5_version"] = hdf5_version();
  if (job.device.backend == BackendKind::cpu)
    prov["blas"] = fmt::format("{} (threads_per_rank {}); element-wise kernels {}", cpu::blas_config(),
                               job.device.threads_per_rank, cpu::simd_kernels().name);
  if (!gpus.gpus.empty()) {
    // Per world rank, comma-separated in rank order.
    std::string names, uuids, pcis;
    for (const GpuInfo& g : gpus.gpus) {
      const char* sep = names.empty() ? "" : ",";
      names += sep + g.name;
      uuids += sep + g.uuid;
      pcis += sep + g.pci_bus_id;
    }
    prov["gpu_names"] = names;
    prov["gpu_uuids"] = uuids;
    prov["gpu_pci_bus_ids"] = pcis;
    prov["driver_version"] = cuda_driver_version();
    prov["cuda_version"] = cuda_runtime_version();
    prov["nccl_version"] = nccl_version();
  }
  prov["transport"] = std::string(to_string(transport_kind));
  return jr;
}

// Rank 0's header: the job, the world, the backend, versions, GPUs, overrides.
void print_job_header(const Job& job, const JobResult& jr, const GpuBinding& gpus, TransportKind transport_kind,
                      const RunOptions& options) {
  const auto& prov = jr.provenance_attrs;
  std::string unique_hosts;
  for (const auto& h : jr.hostnames)
    if (unique_hosts.find(h) == std::string::npos) unique_hosts += (unique_hosts.empty() ? "" : ",") + h;
  fmt::print("pipebench {} run: job \"{}\" ({}){}\n", PIPEBENCH_VERSION, job.name, job.source_path,
             options.dry_run ? " [dry run]" : "");
  fmt::print("  world {} ranks on {}; backend {}, {} thread(s) per rank; warmup {} + repeats {} steps{}; step timeout {} s\n",
             jr.hostnames.size(), unique_hosts, to_string(job.device.backend), job.device.threads_per_rank,
             job.train.warmup, job.train.repeats,
             job.train.max_repeats > job.train.repeats
                 ? fmt::format(" (up to {} while a training run's stability is open)", job.train.max_repeats)
                 : "",
             job.train.step_timeout_s);
  if (job.device.backend == BackendKind::cpu) fmt::print("  BLAS: {}\n", prov.at("blas"));
  if (!gpus.gpus.empty()) {
    fmt::print("  CUDA runtime {}, driver {}, NCCL {}; transport {}\n", prov.at("cuda_version"),
               prov.at("driver_version"), prov.at("nccl_version"), to_string(transport_kind));
    for (std::size_t r = 0; r < gpus.gpus.size(); ++r) {
      const GpuInfo& g = gpus.gpus[r];
      fmt::print("  rank {} ({} local {}): GPU {} {} sm_{}{} {} {} {}\n", r, gpus.hosts[r], gpus.local_ranks[r],
                 g.ordinal, g.name, g.cc_major, g.cc_minor, format_bytes(static_cast<double>(g.total_bytes)), g.uuid,
                 g.pci_bus_id);
    }
  }
  fmt::print("  MPI: {}\n  compiler: {}\n", prov.at("mpi_library_version").substr(0, 80), prov.at("compiler"));
  for (const auto& o : job.overrides) fmt::print("  override: --set {}\n", o);
  for (const auto& w : job.warnings) fmt::print("  warning: {}\n", w);
  std::fflush(stdout);
}

// Ranks and runs that do not match, said loudly before anything runs (and
// again at the end): a run needing more ranks than the launch has is
// skipped (exit 5); ranks beyond the widest run idle through the launch
// (exit 8 unless --allow-idle-ranks).
// "" when they match.
// The most ranks any of `runs` uses.
int widest_run(const std::vector<const RunSpec*>& runs) {
  int widest = 0;
  for (const RunSpec* run : runs) widest = std::max(widest, run->ranks());
  return widest;
}

std::string rank_mismatch(const std::vector<const RunSpec*>& runs, int world_size) {
  const int widest = widest_run(runs);
  std::string too_wide;
  for (const RunSpec* run : runs) {
    if (run->ranks() > world_size)
      too_wide += fmt::format("{}{} ({} ranks)", too_wide.empty() ? "" : ", ", run->name, run->ranks());
  }
  if (!too_wide.empty())
    return fmt::format("the launch has {} rank(s); {} will be skipped: launch with mpirun -np {} (srun -n {})", world_size,
                       too_wide, widest, widest);
  if (widest < world_size)
    return fmt::format("the launch has {} ranks but no selected run uses more than {}: {} rank(s) idle through the launch; "
                       "launch with mpirun -np {} (srun -n {}); exit 8 unless --allow-idle-ranks",
                       world_size, widest, world_size - widest, widest, widest);
  return "";
}

// The transport between the stages of one run: NCCL for a cuda pipeline
// that asked for it, else MPI (with the sim backend's modelled link); either
// way every call checked against the schedule's plan of transfers.
std::unique_ptr<Transport> make_transport(const Job& job, const RunPlan& rp, RunComm& rc, RunClock& clock, bool nccl) {
  auto checked = [&](std::unique_ptr<Transport> t) {
    return std::make_unique<CheckedTransport>(std::move(t), rp.schedule, rc.rank());
  };
  if (nccl) return checked(make_nccl_transport(rc, rp.schedule, rp.run.num_microbatches, rp.run.mode == RunMode::train));
  const LinkModel link{job.device.backend == BackendKind::sim, parallel::pipeline_link(job.device, rp.run),
                       job.device.sim_load};
  // Test hook: PIPEBENCH_MPI_MAX_MESSAGE_BYTES splits payloads as a 2 GiB one is split.
  std::size_t max_part = kMaxMessageBytes;
  if (const char* env = std::getenv("PIPEBENCH_MPI_MAX_MESSAGE_BYTES")) max_part = std::strtoull(env, nullptr, 10);
  return checked(std::make_unique<MpiTransport>(rc, clock, rp.schedule.chunks_per_rank, rp.run.num_microbatches, link, max_part));
}

// Everything one run needs besides its plan, the same for every run of a job.
struct JobContext {
  const Job& job;
  const RunOptions& options;
  FaultInjection fault;
  TransportKind transport_kind;
  int world_rank = 0;
  ResultsWriter* writer = nullptr;  // rank 0 without --dry-run
};

// Rank 0: the job so far (decided, with its status) as the results
// checkpoint; with `in_progress`, that run is in it as interrupted.
void checkpoint(const JobContext& ctx, JobResult& jr, const RunPlan* in_progress = nullptr) {
  if (!ctx.writer) return;
  if (in_progress) jr.runs.push_back(interrupted_run(ctx.job, *in_progress));
  decide(jr.runs);
  jr.status = job_status(jr.runs);
  ctx.writer->checkpoint(jr);
  if (in_progress) jr.runs.pop_back();
}

// The ranks of `rp` (run communicator `comm`) execute it; rank 0 gathers the
// records, prints the summary and appends the RunResult to `jr`. Returns
// whether the run ended cleanly on this rank.
bool execute_on_ranks(const JobContext& ctx, const RunPlan& rp, MPI_Comm comm, Watchdog& watchdog, JobResult& jr) {
  const Job& job = ctx.job;
  const int p = rp.run.pipeline_size;
  // The watchdog first: the set-up below (the backend, NCCL's communicators
  // and their connections) may hang too, and a hang there must end as one
  // in the steps does (issue 72). It allows every step the run may take
  // (the stability extension's too), plus one for the set-up.
  const int most_steps = job.train.warmup + job.train.max_repeats;
  const double grace = std::max(30.0, job.train.step_timeout_s);
  watchdog.arm(now_s() + (most_steps + 1) * job.train.step_timeout_s + grace, "run " + rp.run.name);
  if (ctx.fault.fires(FaultInjection::Kind::setup, rp.run.name, ctx.world_rank, ctx.fault.step))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a set-up that never returns
  const parallel::RankGrid grid = parallel::run_grid(rp.run, job.device);
  RunComm rc(comm, grid);
  auto backend = make_backend(job, ctx.world_rank);
  MpiTensorGroup tensor_group(rc), context_group(rc, MpiTensorGroup::Over::context);
  if (rp.run.tensor_parallel > 1) backend->set_tensor_group(&tensor_group);
  if (rp.run.context_parallel > 1) backend->set_context_group(&context_group);
  const bool nccl = run_uses_nccl(rp.run, ctx.transport_kind), nccl_transport = nccl && p > 1;
  const std::unique_ptr<Transport> transport = make_transport(job, rp, rc, backend->clock(), nccl_transport);
  ExecOptions eo;
  eo.transport_uses_device_memory = nccl_transport;
  eo.data_group_nccl = nccl && rp.run.grad_group() > 1 && rp.run.mode == RunMode::train;
  eo.tensor_group_nccl = nccl && rp.run.tensor_parallel > 1;
  eo.dry_run = ctx.options.dry_run;
  eo.fault = ctx.fault;
  // The run's time left: the steps to go at the median wall time between
  // steps so far (the warm-up's first steps are often slower; the median
  // discounts them), from step 2 on without the first interval, which also
  // holds the set-up (the plan, the backend's build: on a virtual-clock sim
  // run 20x a step). Wall time, not the step time: on the sim backend's
  // virtual clock a step's time is the model's, not how long it takes here.
  double first_wall = -1.0;        // the first interval, set-up included
  std::vector<double> later_walls;  // the intervals after it
  double last_step_at = now_s();
  eo.on_step = [&](const StepProgress& s) {
    const double at = now_s();
    if (first_wall < 0.0) first_wall = at - last_step_at;
    else later_walls.push_back(at - last_step_at);
    last_step_at = at;
    const int left = s.total_steps - (s.step + 1);
    const double per_step = later_walls.empty() ? first_wall : compute_stats(later_walls).median;
    fmt::print("  [{}] step {}/{}{:<8} time {:>12}  bubble {}  loss {}{}\n", rp.run.name, s.step + 1, s.total_steps,
               s.warmup ? " warm-up" : "", format_seconds(s.step_time_s),
               fmt_num(s.step_time_s > 0 ? 1.0 - s.busy_sum_s / (rp.run.ranks() * s.step_time_s) : NAN),
               fmt_num(s.loss, "{:.6f}"),
               left > 0 ? fmt::format("  ETA {}", format_seconds(left * per_step)) : "");
    std::fflush(stdout);
  };
  eo.on_extend = [&](int repeats, int max_repeats) {
    fmt::print("  [{}] step time stability still open after {} counted steps: going on to {} (train.max_repeats; "
               "--set train.max_repeats={} turns this off)\n",
               rp.run.name, repeats, max_repeats, repeats);
    std::fflush(stdout);
  };
  // Each step's events come to rank 0 as the run goes (a rank's memory does
  // not grow with the steps); rank 0 digests them for the run's metrics and
  // passes them on to the results file's event store (nor does its memory).
  // With replicas or tensor ranks, replica 0's tensor rank 0's: every
  // pipeline runs the same schedule (docs/parallel.md); the others' go to
  // their pipeline's rank 0 and stop there.
  EventDigest digest(rp.schedule, rp.run.mode == RunMode::inference);
  auto take_events = [&](const EventRecord* events, std::size_t n) {
    digest.add(events, n);
    if (ctx.writer) ctx.writer->append_events(rp.run.name, events, n);
  };
  eo.on_step_events = [&](int, const EventRecord* events, std::size_t n) {
    if (rc.replica() == 0 && rc.tensor_rank() == 0 && rc.context_rank() == 0) take_events(events, n);
  };
  const RankRecord rec = execute_run(job, rp, rc, *backend, *transport, eo);
  // A tensor collective a failure left pending may still write into the
  // backend's buffers: that backend is never freed (one per such run).
  if (tensor_group.pending() || context_group.pending()) (void)backend.release();
  watchdog.arm(0.0, "");
  auto records = gather_records(rc.control(), rec);
  if (ctx.world_rank == 0) {
    // After the streamed steps, any unfinished step's events, rank by rank.
    for (const RankRecord& r : records)
      if (r.data_rank == 0 && r.tensor_rank == 0) take_events(r.events.data(), r.events.size());
    if (ctx.writer) ctx.writer->end_events(rp.run.name);
    if (ctx.options.dry_run) print_dry_run(rp, records);
    jr.runs.push_back(assemble_run(job, rp, records, digest, {}));  // run_one prints it, after the device check
  }
  return rec.failure == FailureKind::none;
}

// Collective over the world, after a run: whether a rank of the run was left
// with an unusable device — a sticky CUDA error (cuda_context_error), or the
// test hook PIPEBENCH_FAULT=device@RUN:RANK:0. "" when none was, else
// "rank R: what", the lowest such rank, the same text on every rank.
std::string broken_device(const JobContext& ctx, const RunPlan& rp, bool ran_here) {
  std::string mine;
  if (ran_here && ctx.job.device.backend == BackendKind::cuda) mine = cuda_context_error();
  if (ran_here && ctx.fault.fires(FaultInjection::Kind::device, rp.run.name, ctx.world_rank, 0))
    mine = "injected device fault (PIPEBENCH_FAULT)";
  int first = mine.empty() ? INT_MAX : ctx.world_rank;
  PIPEBENCH_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT_MAX) return "";
  std::array<char, 512> text{};
  if (ctx.world_rank == first) mine.copy(text.data(), text.size() - 1);
  PIPEBENCH_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(text.size()), MPI_CHAR, first, MPI_COMM_WORLD));
  return fmt::format("rank {}: {}", first, text.data());
}

// Rank 0: the run that left a device unusable fails with it (a run that
// failed already keeps its kind, the device's state is added to its message).
void record_broken_device(JobResult& jr, const std::string& broken) {
  RunResult& r = jr.runs.back();
  const std::string what = "the device was left unusable after the run, " + broken;
  if (r.status == RunStatus::failed) {
    r.failure_message += "; " + what;
    return;
  }
  r.status = RunStatus::failed;
  r.failure_kind = FailureKind::error;
  r.failing_rank = std::stoi(broken.substr(5));  // "rank R: ..."
  r.failure_message = what;
}

// Collective over the world: one run on its ranks (the others wait at the
// closing barrier), or a skipped record when the world is too small.
// Returns "" or, when the run left a device unusable, why (broken_device):
// the launch then runs nothing more.
std::string run_one(const JobContext& ctx, const RunPlan& rp, int world_size, Watchdog& watchdog, JobResult& jr) {
  const int n = rp.run.ranks();
  const bool root = ctx.world_rank == 0;
  // Said, never run as one replica.
  const std::string not_built = not_executed(rp.run, ctx.job.device.backend, ctx.job.model);
  if (n > world_size || !not_built.empty()) {
    const std::string reason = !not_built.empty() ? not_built : fmt::format("needs {} ranks, the world has {}", n, world_size);
    if (root) {
      fmt::print("\n== run {}: skipped ({})\n", rp.run.name, reason);
      jr.runs.push_back(skipped_run(ctx.job, rp, reason));
      checkpoint(ctx, jr);
    }
    return "";
  }
  if (root) {
    fmt::print("\n== run {}: {} ranks{}, {}, schedule {}, micro_batch_size {} x {} micro-batches\n", rp.run.name, n,
               rp.run.data_parallel > 1
                   ? fmt::format(" ({} stages x {} replicas, grad_sync {}, global batch {})", rp.run.pipeline_size,
                                 rp.run.data_parallel, to_string(rp.run.grad_sync), rp.run.global_batch())
                   : "",
               to_string(rp.run.mode), rp.schedule.name, rp.run.micro_batch_size, rp.run.num_microbatches);
    checkpoint(ctx, jr, &rp);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  PIPEBENCH_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, ctx.world_rank < n ? 0 : MPI_UNDEFINED, ctx.world_rank, &comm));
  // A failed run may leave an unmatched step barrier on `comm`; such a
  // communicator is never freed (one per failed run), so no later
  // collective can be matched against it.
  const bool ran_here = comm != MPI_COMM_NULL;
  if (ran_here && execute_on_ranks(ctx, rp, comm, watchdog, jr)) MPI_Comm_free(&comm);
  const std::string broken = broken_device(ctx, rp, ran_here);
  if (root && !jr.runs.empty()) {  // the run's record, its status final only now
    const RunResult& r = jr.runs.back();
    if (!broken.empty()) record_broken_device(jr, broken);
    if (!ctx.options.dry_run) print_run_summary(r, rp);
    else if (r.status == RunStatus::failed) fmt::print("  -- {}: {}\n", rp.run.name, r.failure_message);
    if (!broken.empty())
      fmt::print("  -- {}: the device was left unusable ({}); the launch runs nothing more\n", rp.run.name, broken);
  }
  if (root) checkpoint(ctx, jr);
  PIPEBENCH_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return broken;
}

// Collective: the decision and the job status on rank 0, whether any run
// failed or was skipped, everywhere; rank 0 then publishes the file and
// prints the table.
RunOutcome finish_job(const JobContext& ctx, bool root, JobResult& jr) {
  RunOutcome outcome;
  if (root) {
    decide(jr.runs);
    jr.status = job_status(jr.runs);
    outcome.any_failed = jr.status != "ok";
  }
  int any_failed = outcome.any_failed ? 1 : 0;
  PIPEBENCH_MPI_CHECK(MPI_Bcast(&any_failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
  outcome.any_failed = any_failed != 0;
  if (!ctx.writer) return outcome;

  jr.launch_status = "complete";
  outcome.results_path = ctx.writer->finish(jr);
  stop_publishing_on_signal();
  fmt::print("\n{:<24} {:<8} {:>12} {:>10} {:>10} {:>10}  {:<24} {}\n", "run", "status", "step time", "bubble",
             "analytic", "peak mem", "speedup (95% interval)", "decision");
  for (const auto& r : jr.runs)
    fmt::print("{:<24} {:<8} {:>12} {:>10} {:>10} {:>10}  {:<24} {}\n", r.spec.name, to_string(r.status),
               format_seconds(r.step_time.median), fmt_num(r.bubble_measured_median), fmt_num(r.bubble_analytic),
               format_bytes(static_cast<double>(r.peak_mem_max_bytes)), format_speedup(r), r.decision);
  for (const auto& r : jr.runs)
    for (const auto& why : decision_concerns(r)) fmt::print("  {}: {}\n", r.spec.name, why);
  if (const std::string best = best_run_summary(jr.runs); !best.empty()) fmt::print("\n{}\n", best);
  std::vector<const RunSpec*> runs;
  for (const RunResult& r : jr.runs) runs.push_back(&r.spec);
  if (const std::string mismatch = rank_mismatch(runs, static_cast<int>(jr.hostnames.size())); !mismatch.empty())
    fmt::print("\nWARNING: {}\n", mismatch);
  fmt::print("\nresults: {}\n", outcome.results_path);
  // The answer last: each pipelined run's decision with its reason.
  for (const auto& r : jr.runs)
    if (const std::string line = decision_line(r); !line.empty()) fmt::print("{}\n", line);
  std::fflush(stdout);
  return outcome;
}

}  // namespace

RunOutcome run_job(const Job& job, const RunOptions& options) {
  int world_rank = 0, world_size = 1;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  const bool root = world_rank == 0;

  // Plans first, on every rank: invalid selections fail before anything runs.
  const JobPlan plan = plan_job(job, options.run_names);
  JobContext ctx{job, options, FaultInjection::from_env(), job.device.resolved_transport(), world_rank};
  GpuBinding gpus;
  try {
    gpus = bind_devices(job, plan, ctx.transport_kind, world_rank, world_size);
  } catch (const DeviceUnavailableError& e) {
    // Every rank alike: rank 0 records the failure, then the error ends the launch (exit 7).
    if (root && !options.dry_run) record_environment_failure(job, plan, options, e.what());
    throw;
  }
  tighten_timer_slack();  // modelled sleeps and waiting naps wake on time

  JobResult jr = describe_world(job, gpus, ctx.transport_kind, world_size, root);
  std::vector<const RunSpec*> runs;
  for (const RunPlan& rp : plan.runs) runs.push_back(&rp.run);
  std::optional<ResultsWriter> writer;
  if (root) {
    print_job_header(job, jr, gpus, ctx.transport_kind, options);
    if (const std::string mismatch = rank_mismatch(runs, world_size); !mismatch.empty()) {
      fmt::print(stderr, "pipebench: WARNING: {}\n", mismatch);
      fmt::print("  WARNING: {}\n", mismatch);
      std::fflush(stdout);
    }
    if (!options.dry_run) {
      // The file exists (as a checkpoint) before the first run: a folder
      // that cannot take it stops the launch here, not after the last run.
      describe_launch(jr, job, options);
      jr.launch_status = "incomplete";
      writer.emplace(launch_results_path(job, options));
      ctx.writer = &*writer;
      checkpoint(ctx, jr);
      publish_results_on_signal(writer->partial_path(), writer->final_path(), writer->claim_path());
    }
  }

  Watchdog watchdog;
  try {
    // After a run leaves a device unusable (a sticky CUDA error lasts for the
    // life of the process) every later run is recorded as not run.
    std::string broken, broken_by;
    for (const RunPlan& rp : plan.runs) {
      if (broken.empty()) {
        broken = run_one(ctx, rp, world_size, watchdog, jr);
        broken_by = rp.run.name;
      } else if (root) {
        const std::string reason =
            fmt::format("not run: run {} left a device unusable ({}); relaunch to run it", broken_by, broken);
        fmt::print("\n== run {}: skipped ({})\n", rp.run.name, reason);
        jr.runs.push_back(skipped_run(job, rp, reason));
        checkpoint(ctx, jr);
      }
    }
  } catch (const PeerLostError&) {
    // No collective can follow; main aborts the launch. The checkpoint holds
    // the completed runs and this one as interrupted.
    if (root) publish_results_now("a rank stopped answering");
    throw;
  } catch (const ResultsError& e) {
    // A results write failed (a full disk: a checkpoint, the events scratch
    // file): the run in progress is recorded as an error with the OS reason,
    // not as interrupted, where the checkpoint can still take it; main then
    // ends the launch. (The first checkpoint and finish() hold no run in
    // progress: nothing to mark.)
    if (writer) writer->record_write_failure(e.what());
    throw;
  }
  RunOutcome outcome = finish_job(ctx, root, jr);
  outcome.ranks_idle = widest_run(runs) < world_size;
  return outcome;
}

}  // namespace pipebench
