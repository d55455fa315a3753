// NCCL's result codes as exceptions, for the runtime's NCCL files
// (transport_nccl.cpp, data_group_nccl.cpp), and their waits on an NCCL stream. CUDA builds only.
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "nccl_api.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

// ncclInProgress is not a failure: a non-blocking communicator's call that
// continues in the background.
inline void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("NCCL {}: {} ({})", what, nccl().get_error_string(rc), static_cast<int>(rc)));
}

// Whether `done` (an event recorded after a communicator's operations) has
// passed — any result but cudaErrorNotReady counts, the caller's
// cudaEventQuery then reports an error — and, while it has not, an
// asynchronous NCCL error (a peer gone, a network failure) on `comm` throws,
// so a wait on it ends as the run's error instead of at the timeout.
inline bool nccl_event_passed(cudaEvent_t done, ncclComm_t comm, const char* what) {
  if (cudaEventQuery(done) != cudaErrorNotReady) return true;
  ncclResult_t state = ncclSuccess;
  nccl_check(nccl().comm_get_async_error(comm, &state), "ncclCommGetAsyncError");
  if (state != ncclSuccess && state != ncclInProgress)
    throw Error(fmt::format("NCCL reported an asynchronous error while waiting for {}: {}", what,
                            nccl().get_error_string(state)));
  return false;
}

}  // namespace pipebench
