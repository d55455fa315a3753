// NCCL's result codes as exceptions, for the runtime's NCCL files
// (transport_nccl.cpp, data_group_nccl.cpp). CUDA builds only.
#pragma once

#include <fmt/format.h>
#include <nccl.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

// ncclInProgress is not a failure: a non-blocking communicator's call that
// continues in the background.
inline void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("NCCL {}: {} ({})", what, ncclGetErrorString(rc), static_cast<int>(rc)));
}

}  // namespace pipebench
