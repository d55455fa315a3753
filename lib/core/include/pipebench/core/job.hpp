// Validated workload: the value types a jobs/*.toml file becomes.
// config.hpp builds them; everything downstream (plan, runtime, results)
// reads them and never re-parses TOML. Field names follow the TOML keys
// (docs/workload-format.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipebench/core/gemm_efficiency.hpp"

namespace pipebench {

enum class ModelKind { gpt, mlp, llama };
enum class DType { fp32, bf16, fp16 };
enum class OptimizerKind { sgd, adamw };
enum class BackendKind { cpu, sim, cuda };
// How boundary tensors move: auto = nccl for the cuda backend, else mpi.
enum class TransportKind { automatic, mpi, nccl };
// What the sim backend's modelled durations are measured on (core/clock.hpp
// RunClock): slept on the wall clock, or added to a per-rank virtual clock.
enum class SimClock { wall, virtual_time };
// The training schedules of SPEC §4. Inference runs ignore this and use the
// forward-only schedule.
enum class ScheduleKind {
  gpipe, one_f_one_b, eager_one_f_one_b, interleaved_one_f_one_b, zb_h1, zb_v, looped_bfs, interleaved_zb, dualpipev, file
};
// The built-in training schedules, in the order `tune` and the docs list them.
inline constexpr ScheduleKind kBuiltinSchedules[] = {
    ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_one_f_one_b,
    ScheduleKind::interleaved_one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_v,
    ScheduleKind::looped_bfs, ScheduleKind::interleaved_zb, ScheduleKind::dualpipev};
// Whether a built-in schedule splits its backward into B and W (a file
// schedule may: its file says).
bool splits_backward(ScheduleKind k);
// Whether a schedule takes any virtual_stages_per_rank (else it holds
// fixed_virtual_stages(k) chunks per rank).
bool any_virtual_stages(ScheduleKind k);
int fixed_virtual_stages(ScheduleKind k);
// Why p ranks cannot run m micro-batches with schedule k ("" when they can):
// interleaved-1f1b needs m a multiple of p, interleaved-zb a multiple of its
// number of rounds max(1, m / p) (lib/schedule, make_interleaved_zb),
// dualpipev m >= 2p.
std::string schedule_microbatch_problem(ScheduleKind k, int p, int m);
enum class RunMode { train, inference };
enum class Recompute { none, selective, full };
enum class Attention { materialized, flash };
// The widest head (hidden / heads) the cuda backend's flash attention
// kernels take (lib/backends/src/cuda/kernels_flash.cu); wider: skipped
// with the reason (not_executed).
inline constexpr int kCudaFlashMaxHeadDim = 128;
enum class Remainder { first, last, balanced };
enum class BalanceBy { flops, params };
// Data parallelism (docs/parallel.md): the optimizer state whole on every
// replica, or sharded over the data-parallel group: ZeRO stage 1
// (Megatron-LM's distributed optimizer), stage 2 (the reduced gradients kept
// as the shard too) or stage 3 / FSDP (the parameters sharded as well,
// gathered for the layers' use); the gradient synchronisation after the pipeline's
// flush, each chunk's after its last gradient action (overlapped with the
// cool-down), or bucket by bucket inside that action as its layers' gradients
// become final (Megatron-LM's overlap_grad_reduce, PyTorch DDP).
enum class OptimizerSharding { none, zero1, zero2, fsdp };
// Every mode, in the order the docs and `tune` list them; their names are to_string's.
inline constexpr OptimizerSharding kOptimizerShardings[] = {OptimizerSharding::none, OptimizerSharding::zero1,
                                                            OptimizerSharding::zero2, OptimizerSharding::fsdp};
enum class GradSync { after_flush, after_chunk, overlap };
// How context parallelism exchanges K/V (docs/context-parallel.md): passed
// around the ring (Megatron-LM / Transformer Engine) or all-gathered (Llama 3).
enum class CpComm { ring, allgather };
// How a run's ranks map onto (pipeline, data, tensor) coordinates
// (lib/parallel, rank_grid.hpp): Megatron-LM's default and its tp-pp-dp mapping.
enum class RankOrder { tp_dp_pp, tp_pp_dp };

std::string_view to_string(ModelKind v);
std::string_view to_string(DType v);
std::string_view to_string(OptimizerKind v);
std::string_view to_string(BackendKind v);
std::string_view to_string(TransportKind v);
std::string_view to_string(SimClock v);
std::string_view to_string(ScheduleKind v);
std::string_view to_string(RunMode v);
std::string_view to_string(Recompute v);
std::string_view to_string(Attention v);
std::string_view to_string(Remainder v);
std::string_view to_string(BalanceBy v);
std::string_view to_string(OptimizerSharding v);
std::string_view to_string(GradSync v);
std::string_view to_string(CpComm v);
std::string_view to_string(RankOrder v);

// Llama's SwiGLU width (Meta's reference model.py): 2/3 of 4·hidden, scaled
// by ffn_dim_multiplier (1: none), rounded up to a multiple of multiple_of.
// Llama-2-7B (4096, 1, 256): 11008; Llama-3-8B (4096, 1.3, 1024): 14336.
std::int64_t llama_ffn_hidden(std::int64_t hidden, double ffn_dim_multiplier, std::int64_t multiple_of);

// Bytes per element of a storage dtype.
int dtype_bytes(DType d);

struct ModelSpec {
  ModelKind kind = ModelKind::gpt;
  int hidden = 256;
  int layers = 8;          // transformer / MLP blocks, numbered 0..layers-1 internally
  int heads = 4;           // gpt and llama; hidden % heads == 0
  int ffn_hidden = 1024;   // gpt, mlp: default 4*hidden; llama: llama_ffn_hidden()
  // llama only (docs/workload-format.md): grouped-query attention's shared
  // K/V heads (heads % kv_heads == 0), the rotary base, RMSNorm's epsilon.
  int kv_heads = 4;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  // input and output embeddings share one table (not modelled: always false)
  int seq_len = 128;
  int vocab = 4096;
  DType dtype = DType::fp32;
  std::uint64_t seed = 1234;
  // gpt only: Megatron-LM's attention dropout (on the attention
  // probabilities) and hidden dropout (on each residual branch's output) at
  // this rate; their masks and the dropped probabilities are activations
  // (docs/model.md, "Dropout"). Modelled by the planner and the sim
  // backend; the cpu and cuda backends have no dropout kernels yet and
  // record such runs as skipped (not_executed).
  double dropout = 0.0;
  // gpt and llama (docs/model.md, "Attention"): the s x s scores and
  // probabilities materialized and kept (Megatron-LM's of 2022), or a fused,
  // tiled attention (FlashAttention-2, Dao 2023, arXiv 2307.08691): no s²
  // activation, each row's log-sum-exp kept for the backward, which
  // recomputes the probabilities tile by tile. The planner and the sim
  // backend model both, the cpu backend computes both; the cuda backend
  // computes the materialized attention and records flash runs as skipped
  // (not_executed).
  Attention attention = Attention::materialized;
};

struct TrainSpec {
  OptimizerKind optimizer = OptimizerKind::adamw;
  double learning_rate = 1e-3;
  int warmup = 2;            // steps run and recorded, flagged, not counted
  int repeats = 5;           // counted steps
  // Seed 000's "30-50 short steps": a training run on more than one rank
  // whose stability verdict is still open (inconclusive) after `repeats`
  // counted steps goes on to max_repeats, and is judged again there
  // (docs/runner.md, "Steps"). Default: kStabilityMaxRepeats when
  // kStabilityMinRepeats <= repeats < kStabilityMaxRepeats, else repeats (no
  // extension); equal to repeats: off.
  int max_repeats = 5;
  double grad_clip = 1.0;    // global-norm clipping threshold; 0 = off
  double step_timeout_s = 600.0;  // watchdog for one step (runner)
};

struct DevicePreset;  // core/device_preset.hpp (C++20; job.hpp is also compiled as C++17 by nvcc)

struct DeviceSpec {
  BackendKind backend = BackendKind::cpu;
  // `preset` (core/device_preset.hpp): the modelled GPU, or nullptr. With
  // one, the planner and the sim backend time every piece with the hardware
  // time model (model/time_model.hpp) instead of sim_flops_per_s; its
  // memory, GPUs per node and links are the defaults of memory_capacity,
  // ranks_per_node and the sim_link_* / sim_inter_node_* keys.
  const DevicePreset* preset = nullptr;
  // The preset's assumed figures a workload may replace with measurements of
  // its own cluster (docs/time-model.md, "Your own figures"; with a preset
  // only): the GEMM efficiency table (K strictly ascending, 0 < e <= 1), the
  // streaming kernels' share of the peak bandwidth, the launch cost per
  // kernel, the share of an accumulating GEMM's output read not hidden behind
  // its math (0..1). Empty / < 0: the preset's. device_model() applies them.
  std::vector<GemmEfficiencyPoint> gemm_efficiency;
  double hbm_efficiency = -1.0;
  double kernel_launch_us = -1.0;
  double gemm_accumulate_serial = -1.0;
  std::uint64_t memory_capacity_bytes = 4ull << 30;
  int threads_per_rank = 1;
  double sim_flops_per_s = 2.0e12;    // sim backend / cost-weighted planner
  double sim_link_latency_us = 5.0;   // per transfer
  double sim_link_gbps = 100.0;       // gigabits per second
  // The modelled machine's nodes (sim backend and the planner;
  // docs/parallel.md "Nodes"): ranks [n·R, (n+1)·R) of a run are node n,
  // R = ranks_per_node; 0: a run's ranks all on one node. A data-parallel
  // group on one node reduces over the sim link; one spanning nodes over the
  // inter-node link (latency and bandwidth; < 0: the sim link's). Pipeline
  // transfers ride the sim link wherever their stages are.
  int ranks_per_node = 0;
  double sim_inter_node_latency_us = -1.0;
  double sim_inter_node_gbps = -1.0;
  // The simulated machine's condition, not the workload (excluded from the
  // workload fingerprint): every modelled duration is multiplied by
  // sim_load (a loaded or slower machine: 2 = half speed) and, per action,
  // by log-normal noise exp(sigma*z - sigma^2/2) with sigma = sim_jitter,
  // drawn from (sim_jitter_seed, rank, step, micro-batch, action): the same
  // seed gives the same durations. Tests build nightly histories with known
  // truth from these.
  double sim_load = 1.0;
  double sim_jitter = 0.0;
  std::uint64_t sim_jitter_seed = 0;
  // "wall": every modelled duration is slept, and the run measures the
  // executor's own overhead too; "virtual": each rank advances its own clock
  // by the modelled durations and messages carry their send times, so a run
  // is the model's timeline exactly, at any rank count (sim backend only).
  SimClock sim_clock = SimClock::wall;
  TransportKind transport = TransportKind::automatic;

  // The transport a run uses: `transport`, with automatic resolved.
  TransportKind resolved_transport() const {
    if (transport != TransportKind::automatic) return transport;
    return backend == BackendKind::cuda ? TransportKind::nccl : TransportKind::mpi;
  }
};

// Upper limits of a run (docs/workload-format.md, "Limits"). plan, run and
// report generate, validate and simulate a schedule of about
// 3 · pipeline_size · num_microbatches actions, so that product is bounded;
// results files beyond these limits are refused by the reader.
inline constexpr int kMaxPipelineSize = 1024;
inline constexpr int kMaxDataParallel = 65536;
inline constexpr int kMaxRanks = 1 << 20;  // pipeline_size x data_parallel x tensor_parallel
inline constexpr int kMaxTensorParallel = 1024;
inline constexpr int kMaxContextParallel = 1024;
inline constexpr int kMaxMicrobatches = 65536;
inline constexpr std::int64_t kMaxStageMicrobatches = std::int64_t{1} << 22;  // pipeline_size x num_microbatches
// Events a run records: steps x (2 train, 1 inference) x pipeline_size x
// num_microbatches; the results reader refuses larger datasets.
inline constexpr std::int64_t kMaxEventsPerRun = std::int64_t{1} << 26;

// Upper limits of the model and the job. Realistic workloads sit far inside
// them (GPT-3 175B: hidden 12288, 96 layers, vocab 50257, seq_len 2048); an
// extreme combination within them that overflows 64-bit counts is reported
// by plan_run (plan/plan.hpp), naming the keys.
inline constexpr int kMaxHidden = 1 << 20;
inline constexpr int kMaxFfnHidden = 1 << 22;
inline constexpr int kMaxLayers = 1 << 16;
inline constexpr int kMaxSeqLen = 1 << 20;
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxMicroBatchSize = 1 << 20;
inline constexpr int kMaxSteps = 100000;  // warmup + max_repeats
// Seed 000 verifies a configuration on 30-50 short steps: the stability
// extension's default applies from 30 counted steps and goes on to 50.
inline constexpr int kStabilityMinRepeats = 30;
inline constexpr int kStabilityMaxRepeats = 50;
inline constexpr int kMaxThreadsPerRank = 1024;
inline constexpr int kMaxRuns = 1000;
inline constexpr int kMaxVirtualStagesPerRank = 64;
inline constexpr std::size_t kMaxNameLength = 100;          // job and run names
inline constexpr std::size_t kMaxDescriptionLength = 4096;  // bytes
inline constexpr std::uint64_t kMaxMemoryCapacity = std::uint64_t{1} << 60;  // 1 EiB

struct RunSpec {
  std::string name;
  int pipeline_size = 1;
  int micro_batch_size = 1;
  int num_microbatches = 1;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages_per_rank = 1;     // model chunks per rank: interleaved-1f1b, looped-bfs, interleaved-zb (any), zb-v and dualpipev (2), else 1
  std::string schedule_file;           // schedule = "file:PATH": PATH as written (relative to the workload's folder)
  std::string schedule_csv;            // the file schedule's text (schedule_csv.hpp has the format)
  RunMode mode = RunMode::train;
  // full: each piece (layer) keeps only its input per micro-batch and B
  // recomputes its forward before its backward (Megatron-LM's per-layer
  // activation checkpointing); selective: the blocks drop the
  // attention probabilities at F and recompute the attention core (QKᵀ,
  // softmax) in B (Korthikanti et al. 2022); none: they keep the activations.
  Recompute recompute = Recompute::none;
  std::vector<int> layers_per_stage;   // empty: computed from `remainder`
  int layers_per_stage_origin = 0;     // 0 or 1, for printed layer numbers only
  Remainder remainder = Remainder::first;
  BalanceBy balance_by = BalanceBy::flops;  // cost used by remainder = "balanced"
  std::string baseline;                // name of the baseline run ("" = none)
  int source_line = 0;                 // line of this [[run]] in the workload file
  // Data parallelism (docs/parallel.md): d replicas of the pipeline, each on
  // its own micro-batches; p x d ranks in `rank_order`.
  int data_parallel = 1;
  OptimizerSharding optimizer_sharding = OptimizerSharding::none;
  GradSync grad_sync = GradSync::after_flush;
  // optimizer_sharding = "fsdp": whether a layer's gathered parameters are
  // freed after its forward and gathered again for its backward (true), or
  // kept from the step's first forward to its end (false); unset:
  // torchtitan's default, true without pipeline parallelism and false with
  // it (reshard_after_forward(), below).
  std::optional<bool> fsdp_reshard_after_forward;
  // grad_sync = "overlap": the largest gradient bucket; 0 = Megatron-Core's
  // default rule (parallel/grad_buckets.hpp default_grad_bucket_bytes).
  std::int64_t grad_bucket_bytes = 0;
  RankOrder rank_order = RankOrder::tp_dp_pp;
  // Tensor parallelism (docs/tensor-parallel.md): each stage's layers split
  // over t ranks (Megatron-LM's column / row-parallel linears, attention
  // heads and the vocabulary split); with sequence_parallel the norms'
  // regions are split along the sequence too.
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // Context parallelism (docs/context-parallel.md): each sequence split over
  // c ranks in 2c chunks (rank i holds chunks i and 2c−1−i), the attention's
  // K/V exchanged as cp_comm says; c ranks hold the same parameters, so the
  // gradients are reduced over data_parallel x context_parallel ranks.
  int context_parallel = 1;
  CpComm cp_comm = CpComm::ring;

  // Samples per optimizer step, over every replica.
  int global_batch() const { return micro_batch_size * num_microbatches * data_parallel; }
  // Ranks the run needs: its pipeline stages times its replicas times its
  // tensor- and context-parallel degrees.
  int ranks() const { return pipeline_size * data_parallel * tensor_parallel * context_parallel; }
  // The ranks holding the same parameters, over which a stage's gradients
  // are reduced (and its optimizer state sharded): replicas x context ranks.
  int grad_group() const { return data_parallel * context_parallel; }
  // Model chunks the layers are cut into: one per virtual stage.
  int model_stages() const { return pipeline_size * virtual_stages_per_rank; }
};

// Whether the optimizer state is sharded over the replicas (every mode but
// "none", with replicas, in training): the gradients are then
// reduce-scattered and the updated parameters all-gathered.
bool shards_optimizer(const RunSpec& run);  // over run.grad_group() ranks
// optimizer_sharding = "fsdp": fsdp_reshard_after_forward as set, or its default.
bool reshard_after_forward(const RunSpec& run);
// A sharded fsdp run that reshards: every forward and backward gathers its layers.
bool reshards_every_action(const RunSpec& run);
// Where the sharded parameters are all-gathered (docs/parallel.md,
// "Parameter gathers"): bucket by bucket inside the step's first forward of
// each chunk, each forward waiting only for its own layers' buckets
// (Megatron-LM's overlap_param_gather with grad_sync = "overlap"; FSDP without
// resharding after the forward), rather than whole after the optimizer
// (zero1, zero2) or in every forward and backward (FSDP resharding).
bool gathers_in_first_forward(const RunSpec& run);

// Why `t` tensor ranks cannot split `model` ("" when they can): t must
// divide heads (gpt, llama), kv_heads (llama) and ffn_hidden, and with
// sequence parallelism seq_len (docs/tensor-parallel.md).
std::string tensor_parallel_problem(const ModelSpec& model, int t, bool sequence_parallel);

// What of data or tensor parallelism is planned but not executed yet on
// `backend` (docs/parallel.md, docs/tensor-parallel.md): why `run` records
// such a run as skipped and `probe` refuses it; "" for a run that executes.
std::string not_executed(const RunSpec& run, BackendKind backend, const ModelSpec& model = {});

struct Job {
  int schema = 1;
  std::string name;
  std::string description;
  ModelSpec model;
  TrainSpec train;
  DeviceSpec device;
  std::vector<RunSpec> runs;

  std::string source_path;             // the workload file as given
  std::string effective_toml;          // the TOML after --set overrides, re-serialised
  std::vector<std::string> overrides;  // the --set arguments, in order
  std::vector<std::string> warnings;   // non-fatal findings of validation
  // Where each key that was given came from: "model.hidden" or
  // "run.NAME.micro_batch_size" -> "<file>:<line>" or "<file> (--set k=v)".
  std::map<std::string, std::string> locations;

  const RunSpec* find_run(std::string_view run_name) const;
};

}  // namespace pipebench
