// NCCL, opened with dlopen when a run first needs it (the nccl transport, a
// data-parallel or tensor group on the cuda backend), not linked: a CUDA build
// of pipebench then starts on a node without libnccl — `plan`, `report`, the
// cpu and sim backends run, and `--backend cuda` with the nccl transport ends
// as an environment failure (exit 7) naming the library (issue 72, item 6).
// CUDA builds only; nccl.h gives the types and the signatures.
#pragma once

#include <string>

#include <nccl.h>

namespace pipebench {

// The NCCL entry points the runtime calls.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommSplit) comm_split = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
};

// libnccl.so.<the major version built against> (PIPEBENCH_NCCL_LIBRARY in the
// environment names another file), loaded on the first call (thread-safe);
// DeviceUnavailableError naming the library and dlerror()'s reason when it
// cannot be loaded or lacks a symbol — the same error on every later call.
const NcclApi& nccl();

// "" when NCCL loads, else why not (for --version).
std::string nccl_load_error();

}  // namespace pipebench
