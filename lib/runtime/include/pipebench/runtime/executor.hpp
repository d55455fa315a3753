// The executor: runs one rank's action list of a RunPlan's schedule, step
// after step, with a Backend and a Transport. It never holds a schedule of
// its own: it walks plan.schedule.actions[rank].
//
// Per step: a barrier (every step starts together); then each action in
// order, receiving its input first (timed as comm wait), computing (timed as
// busy), sending its output without waiting; then the sends complete, the
// gradient norm is reduced over the run, clipping is decided and the
// optimizer steps; with ExecOptions::on_step_events the step's events go to
// run rank 0. A failure on any rank (out of memory, NaN/Inf loss, step
// timeout, any exception) ends the run on every rank; the record says so.
#pragma once

#include <functional>
#include <string>

#include "pipebench/backends/backend.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/results/records.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/transport.hpp"

namespace pipebench {

// Test hook: PIPEBENCH_FAULT="KIND@RUN:RANK:STEP" makes RANK of run RUN fail
// at STEP: KIND = nan (its loss is NaN; on the last stage) or error (it
// throws). Documented in docs/runner.md; never set in production.
struct FaultInjection {
  // nan, error: at STEP of RUN on RANK. sync: RANK fails at STEP just before
  // its gradient synchronisation (data parallelism: its replicas are
  // waiting in theirs). device: the device check after RUN finds RANK's
  // device unusable, as after a sticky CUDA error (STEP unused). setup:
  // RANK hangs in RUN's set-up, before its transport connects (as NCCL's
  // bootstrap can), until the run's watchdog ends the launch (STEP unused).
  enum class Kind { none, nan, error, sync, device, setup };
  Kind kind = Kind::none;
  std::string run;
  int rank = -1;
  int step = -1;

  static FaultInjection from_env();  // throws ConfigError when malformed
  bool fires(Kind k, const std::string& run_name, int r, int s) const {
    return kind == k && run == run_name && rank == r && step == s;
  }
};

// Shown on rank 0 after every step.
struct StepProgress {
  int step = 0;            // 0-based, warm-up included
  int total_steps = 0;     // the steps the run will take as it stands (warmup + repeats, or + max_repeats once extended)
  bool warmup = false;
  double step_time_s = 0;  // max over ranks
  double busy_sum_s = 0;   // sum over ranks
  double loss = 0;         // NaN when the backend computes none
};

struct ExecOptions {
  bool dry_run = false;  // build and check only
  bool transport_uses_device_memory = false;  // StageSpec::transport_uses_device_memory
  // Training with replicas: the data group reduces over NCCL on device
  // memory (StageSpec::gradients_in_device_memory, runtime/data_group_nccl.hpp).
  bool data_group_nccl = false;
  // Tensor parallelism on the cuda backend: the layers' sums over NCCL on
  // device memory (runtime/tensor_group_nccl.hpp); else host-staged over MPI.
  bool tensor_group_nccl = false;
  FaultInjection fault;
  std::function<void(const StepProgress&)> on_step;  // called on run rank 0
  // Called on run rank 0 when the run goes on past `repeats` counted steps
  // (its stability verdict still open): the counted steps it goes on to.
  std::function<void(int repeats, int max_repeats)> on_extend;
  // Set on every rank of the run, or on none (a collective): after every
  // completed step the step's events go to run rank 0, which gets every
  // rank's through it (rank, that rank's events of the step, in order); a
  // rank then holds one step's events at most. Unset: each rank keeps all
  // its events in its record.
  std::function<void(int rank, const EventRecord* events, std::size_t count)> on_step_events;
};

// Builds the stage on this rank, checks the built layer range against the
// plan, then runs warmup + repeats steps — and, for a training run on more
// than one rank (one the decision judges) whose stability verdict
// (results/metrics.hpp stability_test) is still open then, on to warmup +
// max_repeats, judged on the step times every rank of the run holds alike
// (each step's maximum, all-reduced): every rank decides the same without
// another message. Run failures are returned in the
// record (failure, failure_message, failure_is_origin), never thrown.
RankRecord execute_run(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
                       const ExecOptions& options);

}  // namespace pipebench
