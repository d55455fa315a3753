// The cuda backend's data-parallel gradient reduction over NCCL
// (docs/cuda-backend.md, "Data parallelism"): one NCCL communicator per
// data-parallel group, from a unique id that the group's replica 0 creates
// and broadcasts over the group's MPI communicator (RunComm::data()). Each
// bucket that GradientSync posts (runtime/grad_sync.hpp) is an in-place
// ncclAllReduce (sum, fp32) of device memory on the group's own stream, in
// the order GradientSync posts them, which is the same on every replica of
// a stage — what NCCL needs of a communicator's operations.
//
// Used when every rank of the run has its own GPU (the nccl transport's
// rule, device_binding.hpp); ranks sharing a GPU reduce host-staged copies
// over MPI instead (the same GradientSync, its MPI path).
#pragma once

#include <cstddef>
#include <memory>

#include "pipebench/runtime/mpi_comm.hpp"

namespace pipebench {

class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  // Posts the sum of `count` floats at device address `data` over the
  // group, in place, and returns at once. `after` (a cudaStream_t; null:
  // none): the reduction starts only after the work enqueued on it so far —
  // the backend's kernels that produce those gradients (grad_sync =
  // "overlap" posts a bucket while the rest of the backward is enqueued).
  virtual void post(float* data, std::size_t count, void* after) = 0;
  // Whether every posted reduction has finished; an asynchronous NCCL error
  // (a peer gone) throws, so a wait on it ends as the run's error.
  virtual bool done() = 0;
  // After a failure: a peer may never take part in the pending reductions,
  // so the communicator is aborted (its kernels end) rather than waited for.
  virtual void abandon() = 0;
};

// Collective over comm.data(). In a build without CUDA: DeviceUnavailableError.
std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(RunComm& comm);

}  // namespace pipebench
