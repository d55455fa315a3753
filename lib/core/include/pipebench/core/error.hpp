// Every exception pipebench raises on purpose, and the exit code of the
// `pipebench` command each one maps to (docs/cli.md is the user's table).
// Library code throws these and never calls exit(); bench/main.cpp catches
// them, prints one line and exits with Error::exit_code().
//
// Failures inside a run (OutOfMemoryError, NumericalError, StepTimeoutError,
// PeerAbortedError, and any other exception of a step) do not reach main:
// the executor records them as the run's failure kind, the results are
// written, and `pipebench run` exits kRunFailed. Their exit_code() applies
// only when one escapes outside a run.
#pragma once

#include <stdexcept>
#include <string>

namespace pipebench {

// Exit codes of the `pipebench` command (docs/cli.md).
enum ExitCode : int {
  kOk = 0,
  kInternalError = 1,      // a bug or an unexpected failure (MPI, HDF5, I/O)
  kUsageError = 2,         // bad command line
  kInvalidWorkload = 3,    // the workload file or an override is invalid
  kInvalidSchedule = 4,    // a schedule failed validation
  kRunFailed = 5,          // a run failed (OOM, NaN, timeout, error); results were written
  kRegression = 6,         // report --fail-on-regression: a run regressed
  kDeviceUnavailable = 7,  // --backend cuda: no usable GPU (none, driver too old, built without CUDA, shared with NCCL)
  kRanksIdle = 8,          // run: more ranks than any selected run uses (results complete; --allow-idle-ranks: 0)
  kNotReproducedExit = 9,     // compare --fail-on-difference: a run was not reproduced
};

// Base for every error pipebench raises on purpose: exit kInternalError.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  virtual ExitCode exit_code() const noexcept { return kInternalError; }
};

// The command line asks for something its inputs do not have (a run or a
// step a file lacks, an input that is not a results file). Exit kUsageError.
class UsageError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kUsageError; }
};

// An output file cannot be written (opened, filled or closed): the message
// names it and the reason. Exit kUsageError, as docs/cli.md lists it.
class OutputError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kUsageError; }
};

// A workload file (or a --set override) is malformed or inconsistent. The
// message always names the file, the line and the key. Exit kInvalidWorkload.
class ConfigError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kInvalidWorkload; }
};

// A schedule violates its invariants (schedule/schedule.hpp); the message
// carries a step x rank grid of what could execute. Exit kInvalidSchedule.
class ScheduleError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kInvalidSchedule; }
};

// `--backend cuda` cannot run here: no device, a driver too old for this
// build, a build without CUDA, or two NCCL ranks on one GPU. One line, no
// stack of context. Exit kDeviceUnavailable.
class DeviceUnavailableError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kDeviceUnavailable; }
};

// A reservation would exceed the memory capacity (plan/memory.hpp's
// tracker, or a failing cudaMalloc). In a run: failure kind "oom". The
// message carries "out of memory", the probe's OOM signature.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A NaN or Inf loss. In a run: failure kind "nan".
class NumericalError : public Error {
 public:
  using Error::Error;
};

// A step passed train.step_timeout_s while waiting. In a run: failure kind "timeout".
class StepTimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer of this run failed and told us; `from_rank` is its rank in the run.
// In a run: replaced by the origin's failure kind when records are gathered.
class PeerAbortedError : public Error {
 public:
  PeerAbortedError(const std::string& msg, int from) : Error(msg), from_rank(from) {}
  int from_rank;
};

// A peer of the run stopped answering while the run was being settled
// after a failure (a stopped, hung or lost rank): nothing collective can
// follow, so the launch ends; rank 0 publishes its results checkpoint first
// (the run in progress as interrupted). Exit kRunFailed.
class PeerLostError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const noexcept override { return kRunFailed; }
};

// An MPI call failed (runtime/mpi_comm.hpp's PIPEBENCH_MPI_CHECK names the
// call, the rank, file and line). Exit kInternalError.
class MpiError : public Error {
 public:
  using Error::Error;
};

// A results file cannot be written or read (missing, damaged, wrong schema).
// Exit kInternalError.
class ResultsError : public Error {
 public:
  using Error::Error;
};

}  // namespace pipebench
