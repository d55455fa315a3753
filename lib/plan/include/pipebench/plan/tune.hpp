// Seed 000's procedure computed from the planner (`pipebench tune`,
// docs/tune.md): for every layout of up to N ranks — p pipeline stages times
// d data-parallel replicas times t tensor ranks, p·d·t <= N (and every
// schedule, partition rule and optimizer sharding asked for) — the largest micro-batch that fits, the
// seed's ~80% of it, the number of micro-batches, the predicted peak memory
// per rank, bubble and step time (with the gradient synchronisation), and the
// allocation's throughput; the candidates ranked, and a workload file holding
// the chosen run, its baseline and the runners-up.
//
// "Fits" is the planner's memory model (plan_memory): every rank's estimate
// at most device.memory_capacity. The largest micro-batch is searched at the
// candidate's final num_microbatches, so it is what `pipebench probe` finds
// for the written run when the planner's model matches the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench {

// The seed's margin: the recommended micro-batch is max(1, floor(0.8 max)),
// as `pipebench probe` recommends.
int recommended_micro_batch(int max_micro_batch);

// The largest micro-batch size the search tries (a bound, not a limit of
// the model: a candidate fitting there says "at least").
inline constexpr int kTuneMaxMicroBatch = 1 << 16;

// Throughputs this close to the best (relative) are one answer to the
// ranking: the layout on the fewest ranks among them is chosen.
inline constexpr double kTuneThroughputTie = 0.01;

// Sequences longer than this are "long": tune then tries context
// parallelism unasked. Llama 3 pre-trained at 8K tokens without it and
// used it beyond (Dubey et al. 2024, §3.3.2 and Table 4).
inline constexpr int kTuneLongSequence = 8192;

struct TuneOptions {
  int max_ranks = 1;             // N: layouts p x d <= N, p <= model.layers
  // The replica counts tried; empty: every d with p·d <= N.
  std::vector<int> data_parallel;
  // Tried for every layout with d > 1; empty: the template's.
  std::vector<OptimizerSharding> shardings;
  // Gradient synchronisations tried for every layout with d > 1 (training);
  // empty: the template's and, where it is another, "overlap" (issue 68:
  // what Megatron, DDP and FSDP run; a layout with many replicas ranked on
  // its synchronisation after the flush is ranked on time those hide).
  std::vector<GradSync> grad_syncs;
  // The tensor-parallel degrees tried; empty: the template's, and with
  // device.ranks_per_node set every t up to it that the model allows
  // (tensor_degrees). The template's sequence_parallel goes with t > 1.
  std::vector<int> tensor_parallel;
  // The context-parallel degrees tried; empty: the template's and, for a
  // long sequence (seq_len above kTuneLongSequence, flash attention), every
  // c with c·t <= device.ranks_per_node the sequence allows
  // (context_degrees). The template's cp_comm goes with c > 1.
  std::vector<int> context_parallel;
  int global_batch = 0;          // > 0: m = global_batch / (d·mbs) (d·mbs a divisor of it)
  int num_microbatches = 0;      // > 0: m (per replica) fixed
  double bubble_target = 0.10;   // else: the smallest m whose closed-form bubble is at most this
  // Empty: the template run's schedule. Each with its chunks per rank
  // (interleaved-1f1b: the template's virtual_stages_per_rank when it is
  // interleaved, else 2; zb-v: 2).
  std::vector<ScheduleKind> schedules;
  // Partition rules tried for each (p, schedule); empty: the template's and
  // "balanced" (when the template's is another).
  std::vector<Remainder> partitions;
  std::string template_run;      // "": the first training run with pipeline_size > 1, else the first run
  int runners_up = 2;            // written beside the chosen run and its baseline
  // Recomputation modes tried (empty: the template's); a mode a schedule
  // refuses (full with a split backward) is skipped, said so.
  std::vector<Recompute> recompute;
  // Sequence parallelism tried with t > 1 (empty: the template's).
  std::vector<bool> sequence_parallel;
  // Chunks per rank tried with interleaved-1f1b (empty: the template's when
  // it is interleaved, else 2).
  std::vector<int> virtual_stages;
  // `--gpus N`: the layouts on all N ranks only — every (t, p) with p·t
  // dividing N and d = N / (p·t) (skipped, said so, where d does not
  // divide the global batch). Else every d with p·d·t <= N.
  bool all_ranks = false;
  // Called after each candidate of the search space is judged, with how many
  // are judged and of how many (`pipebench tune` prints progress from it on a
  // long search); empty: not called.
  std::function<void(std::size_t judged, std::size_t total)> progress;
};

struct TuneCandidate {
  int pipeline_size = 1;
  int data_parallel = 1;                // replicas (the template's rank_order)
  int tensor_parallel = 1;              // tensor ranks per stage (the template's sequence_parallel)
  int context_parallel = 1;             // context ranks per sequence (the template's cp_comm)
  OptimizerSharding sharding = OptimizerSharding::none;  // none where d = 1
  GradSync grad_sync = GradSync::after_flush;           // d > 1: how the gradients are synchronised
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages_per_rank = 1;
  Remainder partition = Remainder::first;
  Recompute recompute = Recompute::none;
  bool sequence_parallel = false;       // with t > 1
  bool fits = false;                    // micro-batch 1 fits (at this m)
  // Every rank's peak at most kMemoryWarnFraction (90%) of the capacity, as
  // seed 000's verdict (and the report's decision) asks.
  bool margin = false;
  std::string why_not;                  // when !fits or skipped: one line
  int max_micro_batch = 0;              // largest fitting at num_microbatches (0: none); kTuneMaxMicroBatch: at least
  // The same for one replica of the layout (d = 1, no sharding): what
  // `pipebench probe` finds, since it sizes one pipeline. = max_micro_batch
  // unless the optimizer is sharded.
  int replica_max_micro_batch = 0;
  // Chosen: recommended_micro_batch(max), lowered where needed to keep the
  // 90% margin. With a global batch: of the micro-batches up to that bound
  // that divide the replica's share into a usable m, the one whose planned
  // step is fastest (the largest of equals).
  int micro_batch_size = 0;
  int num_microbatches = 0;
  // With a global batch: the micro-batches searched for the fastest step were
  // those from micro_batch_from to micro_batch_to dividing the replica's
  // share into a usable m (0 and 0 without a global batch).
  int micro_batch_from = 0, micro_batch_to = 0;
  std::vector<int> layers_per_stage;    // per virtual stage
  std::vector<std::int64_t> peak_bytes; // per rank, at micro_batch_size
  double peak_fraction = 0.0;           // the largest rank's share of memory_capacity
  double bubble = 0.0;                  // simulated with model costs
  double bubble_closed_form = 0.0;      // NaN where none
  // The step as the runner measures it (RunPlan::iteration_s: the cost-weighted
  // simulation with the gradient sync, then the optimizer step).
  double step_time_s = 0.0;
  double slowest_stage_s = 0.0;         // the busiest rank's compute per step
  double grad_sync_exposed_s = 0.0;     // the slowest rank's exposed gradient synchronisation (d > 1)
  double samples_per_s = 0.0;           // the global batch (d x mbs x m) / step_time_s: the allocation's throughput
  double samples_per_s_per_rank = 0.0;  // samples_per_s / (p x d)
  // With a device preset (docs/time-model.md): the busiest rank's step by
  // term, and the model FLOP utilisation (none and 0 without a preset).
  struct Terms {
    double compute_s = 0.0;      // forward, backward, recomputation
    double tp_comm_s = 0.0;      // tensor-parallel collectives
    double cp_exposed_s = 0.0;   // context parallelism: the K/V exchange's exposed part
    double pp_transfer_s = 0.0;  // its pipeline sends (overlapped with others' work; for scale)
    double dp_exposed_s = 0.0;   // the exposed gradient synchronisation (ZeRO-1's all-gather too)
    double dp_hidden_s = 0.0;    // the synchronisation's ring time hidden behind the rank's compute and waits (reductions, parameter gathers)
    double optimizer_s = 0.0;
    double idle_s = 0.0;         // the rest of the step: bubble and waits
  };
  std::optional<Terms> terms;
  double mfu = 0.0;

  int ranks() const { return pipeline_size * data_parallel * tensor_parallel * context_parallel; }
  int global_batch() const { return data_parallel * micro_batch_size * num_microbatches; }
  // The same p, d and t (the schedule and the rest may differ).
  bool same_layout(const TuneCandidate& o) const {
    return pipeline_size == o.pipeline_size && data_parallel == o.data_parallel && tensor_parallel == o.tensor_parallel &&
           context_parallel == o.context_parallel;
  }
  // "p 32 x d 2 x t 2" ("p 48" without replicas or tensor ranks).
  std::string layout() const;

  RunSpec run(const RunSpec& like, std::string name) const;  // as a run of the job
};

struct TuneResult {
  RunSpec template_run;
  TuneOptions options;
  // Fitting candidates with the memory margin first, then fitting ones
  // without it, each by the allocation's throughput (samples/s; those within
  // kTuneThroughputTie of the best fewest ranks first; ties: fewer ranks,
  // then lower peak); then the ones that do not fit, by p and d.
  std::vector<TuneCandidate> candidates;
  // Combinations of layout, schedule and partition rule searched: more than
  // candidates.size() where two rules gave one split (merged into one).
  std::size_t searched = 0;
  int smallest_fitting_p = 0;           // 0: nothing fits within max_ranks
  // When the chosen layout leaves ranks of N idle: how many and why (the
  // layouts on more ranks do not fit, lose the memory margin, or are
  // predicted slower); "" when it uses all N.
  std::string idle_note;
  // The chosen run's baseline at its global batch: one rank where that fits,
  // else the smallest fitting pipeline (baseline_note says so); empty when
  // the chosen run is itself single-stage or nothing fits (baseline_note
  // then says that the chosen run is the runners-up's baseline).
  std::optional<TuneCandidate> baseline;
  std::string baseline_note;
  // The next candidates of the ranking with other layouts (p, d),
  // re-evaluated at the chosen run's global batch (so losses compare).
  std::vector<TuneCandidate> runners_up;
  const TuneCandidate* best() const;    // nullptr when nothing fits
  const TuneCandidate* smallest_fitting() const;
};

// The tensor degrees a search tries (TuneOptions::tensor_parallel): those
// given, else the template's and, with device.ranks_per_node = G set, every
// t <= G dividing the model's heads, kv_heads and ffn_hidden (and seq_len
// with sequence parallelism): a tensor group stays inside a node.
std::vector<int> tensor_degrees(const Job& job, const RunSpec& like, const TuneOptions& options);
// The context degrees a search tries with t tensor ranks
// (TuneOptions::context_parallel): those given (the ones the sequence
// allows), else the template's and, for a long sequence with flash
// attention, every c > 1 with c·t <= device.ranks_per_node whose 2c (2c·t
// with sequence parallelism) divides seq_len.
std::vector<int> context_degrees(const Job& job, const RunSpec& like, const TuneOptions& options, int t);

// Evaluates every candidate. Throws ConfigError for options that cannot be
// met (no such template run, a global batch with no usable divisor, ...).
TuneResult tune(const Job& job, const TuneOptions& options);

// The written workload (TOML text): the job's model, train and device
// tables as given (after --set), the chosen run first, then its baseline
// (TuneResult::baseline) and the runners-up, all at the chosen run's global
// batch. `pipebench run` accepts it unchanged (tune checks by loading it).
struct TunedWorkload {
  std::string toml;
  std::string job_name;
  std::vector<std::string> run_names;   // chosen, baseline, runners-up
  std::string baseline_note;            // "" or why the baseline is not single-stage
  int ranks_needed = 1;                 // the most ranks any written run needs
};
TunedWorkload tuned_workload(const Job& job, const TuneResult& result);

// "smallest fitting p = 32; best throughput on 64 ranks: p 32 x d 2, mbs 1,
// m 96, 1f1b, zero1"
std::string tune_answer_line(const TuneResult& result);

// `pipebench tune --format json`: the options, the answer, the chosen run,
// its baseline and runners-up, every candidate, and the written workload.
std::string format_tune_json(const Job& job, const TuneResult& result, const TunedWorkload& workload,
                             const std::string& workload_path);

}  // namespace pipebench
