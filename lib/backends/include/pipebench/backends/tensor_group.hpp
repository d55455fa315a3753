// The collectives a backend's tensor-parallel layers need
// (docs/tensor-parallel.md), over the ranks of its tensor group. The runtime
// implements them on the run's tensor communicator (MPI, waited on like
// every other wait of a run: a lost rank is a recorded failure, never a
// hang); with t = 1 none is called. Every rank of a group calls the same
// collectives in the same order (they run the same schedule). Reductions
// are deterministic: for a given group and size the library reduces in one
// fixed order, so a run repeats bit for bit.
#pragma once

#include <cstdint>

namespace pipebench {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place, element-wise over the group.
  virtual void sum(float* data, std::int64_t n) = 0;
  virtual void sum(double* data, std::int64_t n) = 0;
  virtual void max(float* data, std::int64_t n) = 0;
  // Sequence parallelism: `whole` [size()·n] = every rank's `part` [n] in
  // rank order; `part` [n] = rank rank()'s n elements of the element-wise
  // sum of every rank's `whole`.
  virtual void all_gather(const float* part, float* whole, std::int64_t n) = 0;
  virtual void reduce_scatter(const float* whole, float* part, std::int64_t n) = 0;
  // The same gather of `bytes` bytes a rank (the cuda backend's storage
  // dtype, host-staged).
  virtual void all_gather_bytes(const void* part, void* whole, std::int64_t bytes) = 0;
  // A context group's ring (docs/context-parallel.md): starts sending
  // `send` [n] to the next rank (rank() + 1 mod size()) and receiving the
  // previous rank's n into `recv`; ring_wait() finishes both (the caller
  // computes in between; one ring transfer at a time).
  virtual void ring_start(const float* send, float* recv, std::int64_t n) = 0;
  virtual void ring_wait() = 0;
  // Seconds spent in the group's collectives since the last call (a
  // step's figure: the executor takes it at the end of each step).
  virtual double take_seconds() = 0;
};

// The same group's collectives on device memory (the cuda backend over
// NCCL, runtime/tensor_group_nccl.hpp): each enqueued on `stream` (a
// cudaStream_t) after the work already queued there and before what comes
// next, returning at once. The cuda backend's layers sum (and the
// cross-entropy takes the max of) fp32 buffers, and gather the storage dtype.
class DeviceTensorGroup {
 public:
  virtual ~DeviceTensorGroup() = default;
  virtual void sum(float* data, std::int64_t n, void* stream) = 0;
  virtual void max(float* data, std::int64_t n, void* stream) = 0;
  // Sequence parallelism (TensorGroup's): `whole` = every rank's `bytes`
  // bytes of `part` in rank order; `part` [n] = rank rank()'s n elements
  // of the sum of every rank's fp32 `whole` [size()·n] (in place when
  // `part` == whole + rank()·n).
  virtual void all_gather(const void* part, void* whole, std::int64_t bytes, void* stream) = 0;
  virtual void reduce_scatter(const float* whole, float* part, std::int64_t n, void* stream) = 0;
  // Waits until `event` (a cudaEvent_t recorded on the stream after the
  // collectives) has passed, polling the run's aborts and deadline and the
  // communicator's asynchronous errors: a peer that is gone ends the wait
  // as an error, never a hang.
  virtual void wait(void* event, const char* what) = 0;
  // The device time of the collectives enqueued since the last call (their
  // events have passed: a step's actions are finished when it is asked).
  virtual double take_seconds() = 0;
};

}  // namespace pipebench
