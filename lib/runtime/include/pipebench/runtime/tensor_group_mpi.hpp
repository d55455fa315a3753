// The tensor group of a run's rank (backends/tensor_group.hpp) on its tensor
// communicator (RunComm::tensor()): non-blocking MPI all-reduces waited on
// with RunComm::wait, so a lost peer or the step deadline ends the run
// instead of hanging it. Each call's time is counted for the step's
// tensor-parallel communication figure.
//
// After a failure a collective may still be pending, writing into a
// backend buffer MPI cannot be told to forget: pending() says so, and the
// runner then never frees that backend (runner.cpp).
#pragma once

#include <mpi.h>

#include "pipebench/backends/tensor_group.hpp"
#include "pipebench/runtime/mpi_comm.hpp"

namespace pipebench {

class MpiTensorGroup final : public TensorGroup {
 public:
  // Which of the rank's groups: its tensor group, or its context group
  // (context parallelism's K/V all-gathers and dK/dV reduce-scatters,
  // docs/context-parallel.md), the same collectives on RunComm::context().
  enum class Over { tensor, context };
  explicit MpiTensorGroup(RunComm& comm, Over over = Over::tensor) : comm_(comm), over_(over) {}
  int size() const override { return over_ == Over::tensor ? comm_.tensor_size() : comm_.context_size(); }
  int rank() const override { return over_ == Over::tensor ? comm_.tensor_rank() : comm_.context_rank(); }
  void sum(float* data, std::int64_t n) override { reduce(data, n, MPI_FLOAT, MPI_SUM); }
  void sum(double* data, std::int64_t n) override { reduce(data, n, MPI_DOUBLE, MPI_SUM); }
  void max(float* data, std::int64_t n) override { reduce(data, n, MPI_FLOAT, MPI_MAX); }
  void all_gather(const float* part, float* whole, std::int64_t n) override;
  void reduce_scatter(const float* whole, float* part, std::int64_t n) override;
  void all_gather_bytes(const void* part, void* whole, std::int64_t bytes) override;
  void ring_start(const float* send, float* recv, std::int64_t n) override;
  void ring_wait() override;
  double take_seconds() override;
  // Whether a collective was left unfinished by a failure.
  bool pending() const { return pending_; }

 private:
  void reduce(void* data, std::int64_t n, MPI_Datatype type, MPI_Op op);
  void gather(const void* part, void* whole, std::int64_t n, MPI_Datatype type);
  // Waits for `req` (posted on the tensor communicator), counting its time from `start`.
  void finish(MPI_Request& req, double start, const char* what);
  MPI_Comm group() const { return over_ == Over::tensor ? comm_.tensor() : comm_.context(); }
  RunComm& comm_;
  Over over_;
  MPI_Request ring_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // receive, send
  double seconds_ = 0.0;
  bool pending_ = false;
};

}  // namespace pipebench
