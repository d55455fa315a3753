// Plain records of what happened: produced by the executor on each rank,
// gathered to rank 0, turned into a RunResult (metrics.hpp), written to HDF5
// (results.hpp) and read back by reports and tests. Times are seconds;
// event and step times are relative to the step's start barrier on that rank.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipebench/core/job.hpp"
#include "pipebench/plan/memory.hpp"
#include "pipebench/results/probe_records.hpp"
#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// One executed schedule action.
struct EventRecord {
  std::int32_t step = 0;
  std::int32_t rank = 0;
  ActionKind kind = ActionKind::F;
  std::int32_t microbatch = 0;
  std::int32_t chunk = 0;
  double start_s = 0.0;
  double end_s = 0.0;
  // Blocked in the boundary receive this action waited on (waiting for the
  // peer + moving the data), ending at start_s; 0 when it received nothing
  // from another rank; NaN when the file predates the field (not recorded).
  // An overlapped forward-backward (schedule.hpp) receives both its inputs
  // before its F starts: both waits are its F's, its B's is 0.
  double wait_s = 0.0;
};

// One rank's view of one step.
struct StepRecord {
  double end_s = 0.0;        // from the start barrier to this rank's end of step
  double busy_s = 0.0;       // forward + backward + W + loss + optimizer compute
  double comm_wait_s = 0.0;  // blocked in boundary receives (waiting for the peer + moving the data)
  double comm_transfer_s = 0.0;  // the part of comm_wait_s after the tensor was ready at the peer
  double forward_s = 0.0;
  double backward_s = 0.0;   // B and W
  double optimizer_s = 0.0;  // gradient-norm reduction excluded; the update itself
  double loss = 0.0;         // mean over micro-batches; last stage of a loss-computing backend, else NaN
  double grad_norm = 0.0;    // global (all stages) L2 norm before clipping; NaN without gradients
  bool clipped = false;
  // Data parallelism (runtime/grad_sync.hpp): from the first gradient
  // all-reduce's launch to the last one's end; the part of it this rank was
  // blocked (from its last backward's end to the optimizer's start: exposed
  // on the critical path); the gradient bytes its group reduced. 0 without replicas.
  double grad_sync_start_s = 0.0;  // the first launch, from the start barrier
  double grad_sync_s = 0.0;
  double grad_sync_exposed_s = 0.0;
  double grad_sync_bytes = 0.0;
  // Tensor parallelism: the seconds of the step this rank spent in its
  // tensor group's collectives (the sim backend: their modelled time); 0 with t = 1.
  double tensor_comm_s = 0.0;
};

// One collective of a rank's data-parallel synchronisation in one step
// (runtime/grad_sync.hpp): a bucket of grad_sync = "overlap", a chunk's
// reduction with after_flush / after_chunk (its 25 MiB pieces as one), or a
// chunk's ZeRO-1 parameter all-gather. Times from the step's start barrier.
struct BucketRecord {
  std::int32_t rank = 0;   // in the run
  std::int32_t step = 0;
  std::int32_t chunk = 0;
  std::int32_t index = 0;  // its place in the rank's launches of the step
  std::int32_t kind = 0;   // 0 all-reduce, 1 reduce-scatter, 2 all-gather (parallel::Collective)
  std::uint64_t bytes = 0; // logical bytes
  double launch_s = 0.0;   // posted (sim: the group's latest launch, as on the link)
  // Found complete: a real backend's first test or wait that saw it done (the
  // granularity of those polls), the sim backend's end on the modelled link.
  double end_s = 0.0;
  // The part of the rank's blocked wait it accounts for: its end past the
  // later of the wait's start and the ends before it. Per rank and step they
  // sum to grad_sync_exposed_s.
  double exposed_s = 0.0;
};

enum class RunStatus { ok, failed, skipped };
// interrupted: the launch ended during this run (a signal, a lost rank);
// the run's figures are lost, the runs before it are kept.
// environment: the launch could not start its environment (no usable GPU for
// the cuda backend, no NCCL): the run never started.
enum class FailureKind { none, oom, nan, timeout, error, interrupted, environment };
// The evidence a backend's figures are (SPEC §7): simulated, measured-cpu, measured-gpu.
std::string_view evidence_level(BackendKind backend);

std::string_view to_string(RunStatus s);
std::string_view to_string(FailureKind k);

// Everything one rank reports about one run.
struct RankRecord {
  int rank = 0;                  // in the run: 0 .. p·d-1
  int pipeline_rank = 0;         // its stage (the schedule's rank)
  int data_rank = 0;             // its replica
  int tensor_rank = 0;           // its place in its tensor-parallel group
  int context_rank = 0;          // its place in its context-parallel group
  std::string hostname;
  std::int64_t pid = 0;
  std::vector<StepRecord> steps;       // only the steps that completed
  std::vector<EventRecord> events;
  std::vector<BucketRecord> buckets;   // the completed steps' (data parallelism)
  std::array<std::uint64_t, kNumMemCategories> peak_mem_by_category{};
  std::uint64_t peak_mem_bytes = 0;
  std::uint64_t memory_capacity_bytes = 0;
  std::int64_t stage_params = 0;
  std::array<int, 2> stage_layers{-1, -1};  // first/last layer actually built, 0-based
  int peak_live_activations = 0;            // micro-batches held at once, as executed
  std::int64_t device_used_before_bytes = -1;  // Backend::device_used_before_bytes (-1: no device)
  std::int64_t device_used_peak_bytes = -1;
  FailureKind failure = FailureKind::none;
  bool failure_is_origin = false;           // this rank failed itself (not aborted by a peer)
  std::string failure_message;
};

// Step-time style statistics over counted steps.
struct Stats {
  double median = 0.0, min = 0.0, max = 0.0, p90 = 0.0, mean = 0.0;
  double cv = 0.0;     // standard deviation / mean
  double slope = 0.0;  // least-squares slope per step (units of the values per step)
};

// A run as written to /runs/<name>.
struct RunResult {
  RunSpec spec;
  BackendKind backend = BackendKind::sim;
  DType dtype = DType::fp32;
  RunStatus status = RunStatus::ok;
  FailureKind failure_kind = FailureKind::none;
  std::string failure_message;
  int failing_rank = -1;
  std::string schedule_name;
  std::vector<int> layers_per_stage;  // per virtual stage, model order
  std::vector<int> stage_rank;        // per virtual stage: the rank that ran it
  // Layers the rank ran (all its chunks).
  int layers_on_rank(int rank) const;
  int warmup = 0, repeats = 0;
  // The stability extension (train.max_repeats): its bound, and the counted
  // steps the run went on for beyond `repeats` because its stability verdict
  // was still open (0: none). Files written before it: max_repeats = repeats.
  int max_repeats = 0, repeats_extended = 0;
  // What the run measures (core/workload_identity.hpp): the normalised
  // configuration as text and its fingerprint; a trend series never mixes two
  // fingerprints. Empty in files written before they were recorded.
  std::string workload, workload_fingerprint;

  // [steps] over completed steps, warm-up included and flagged.
  std::vector<double> step_time_s, loss, slowest_stage_s, bubble_measured, grad_norm, imbalance;
  std::vector<std::uint8_t> is_warmup, clipped;
  // [steps][ranks]
  std::vector<std::vector<double>> busy_s, comm_wait_s, comm_transfer_s, idle_s, forward_s, backward_s, optimizer_s;
  // [steps][ranks], data parallelism (StepRecord); empty without replicas.
  std::vector<std::vector<double>> grad_sync_start_s, grad_sync_s, grad_sync_exposed_s;
  // [steps][ranks], tensor parallelism (StepRecord::tensor_comm_s); empty with t = 1.
  std::vector<std::vector<double>> tensor_comm_s;
  // [ranks]: ranks in run order (0 .. p·d·c·t-1), each one's stage, replica,
  // tensor and context rank (parallel/rank_grid.hpp); files without replicas,
  // context or tensor ranks: i, 0, 0 and 0.
  std::vector<int> pipeline_rank, data_rank, tensor_rank, context_rank;
  // [ranks]: the node each rank ran on (rank_nodes in metrics.hpp); empty in
  // files without replicas or tensor ranks, and in older files.
  std::vector<int> node;
  std::vector<std::uint64_t> grad_sync_bytes;  // [ranks] reduced per step by its group; empty without replicas
  // Every rank's BucketRecords, rank by rank, step by step; empty without
  // replicas and in files written before they were recorded.
  std::vector<BucketRecord> grad_buckets;
  // The record of run rank (stage `stage`, replica 0, tensor rank 0); stage itself when absent.
  std::size_t rank_index(int stage) const;
  std::vector<std::uint64_t> peak_mem_bytes, memory_capacity_bytes;
  std::array<std::vector<std::uint64_t>, kNumMemCategories> peak_mem_by_category;
  std::vector<std::int64_t> stage_params;
  std::vector<int> peak_live_activations;
  // cudaMemGetInfo's used bytes per rank, before the backend and at most
  // (-1: no device); empty in files written before they were recorded.
  std::vector<std::int64_t> device_used_before_bytes, device_used_peak_bytes;
  std::vector<std::array<int, 2>> stage_layers;
  std::vector<std::string> hostnames;
  std::vector<std::int64_t> pids;
  std::vector<EventRecord> events;
  // read_results: how many events the run has in the file, kept in `events` or not.
  std::size_t events_in_file = 0;
  // inference: [steps][microbatches] latency from entering stage 0 to leaving the last stage
  std::vector<std::vector<double>> microbatch_latency_s;

  // Summaries over counted (non-warm-up) steps.
  double bubble_analytic = 0.0;
  double bubble_simulated = 0.0;  // simulator on measured per-action medians
  Stats step_time;
  double slowest_stage_median_s = 0.0;
  double bubble_measured_median = 0.0;
  double imbalance_median = 0.0;
  std::uint64_t peak_mem_max_bytes = 0;
  double loss_max_rel_dev = 0.0;  // NaN when there is no baseline or no loss
  double throughput_samples_per_s = 0.0;
  std::string baseline;
  // feasible | not_feasible | inconclusive | not_applicable (metrics.hpp, decide)
  std::string decision = "not_applicable";
  // One line per seed-000 condition, "memory: pass — ...", "stability:
  // inconclusive — ...; rerun with --set train.repeats=N", "loss: not
  // measured on sim", then the next action.
  std::vector<std::string> decision_reasons;
  // Baseline median step / this run's, Hodges-Lehmann with its 95% interval
  // (robust_stats.hpp); NaN without a baseline. When the two global batches
  // differ it compares time per sample (speedup_per_sample; metrics.hpp,
  // set_speedup), so a run doing twice the work per step is not "slower".
  double speedup = 0.0, speedup_low = 0.0, speedup_high = 0.0;
  bool speedup_per_sample = false;
  std::string skip_reason;
};

struct JobResult {
  std::map<std::string, std::string> root_attrs;        // job_name, tool_version, ... (string attributes)
  std::vector<std::string> overrides;                   // the --set arguments
  std::vector<std::string> deviations;                  // a rerun's --set on top of the recorded workload
  std::vector<std::string> hostnames;                   // per world rank (/provenance)
  std::vector<std::int64_t> pids;                       // per world rank (/provenance)
  std::map<std::string, std::string> provenance_attrs;  // /provenance
  std::string status = "ok";                            // ok | failed | partial
  // complete: the launch ran to its end. incomplete: a checkpoint written
  // after the last completed run (the launch was interrupted, lost a rank or
  // was killed; see ResultsWriter).
  std::string launch_status = "complete";
  std::string evidence_level;                           // simulated | measured-cpu | measured-gpu
  std::vector<RunResult> runs;
  std::optional<ProbeResult> probe;  // /probe, in files written by `pipebench probe`
};

}  // namespace pipebench
