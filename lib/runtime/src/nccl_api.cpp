#include "nccl_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {

// The library, or why it cannot be used.
struct Loaded {
  NcclApi api;
  std::string error;
};

Loaded load() {
  Loaded out;
  const char* env = std::getenv("PIPEBENCH_NCCL_LIBRARY");
  const std::string name = env && *env ? env : fmt::format("libnccl.so.{}", NCCL_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = fmt::format("cannot load {} ({}): is NCCL's lib folder on the library path (LD_LIBRARY_PATH, ldconfig)? "
                            "Without NCCL, run with transport = \"mpi\"",
                            name, dlerror());
    return out;
  }
  auto sym = [&](auto& fn, const char* symbol) {
    if (!out.error.empty()) return;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn) out.error = fmt::format("{} has no {} ({}): an NCCL older than this build's {}.{}", name, symbol, dlerror(),
                                     NCCL_MAJOR, NCCL_MINOR);
  };
  NcclApi& a = out.api;
  sym(a.get_unique_id, "ncclGetUniqueId");
  sym(a.comm_init_rank, "ncclCommInitRank");
  sym(a.comm_split, "ncclCommSplit");
  sym(a.comm_abort, "ncclCommAbort");
  sym(a.comm_destroy, "ncclCommDestroy");
  sym(a.comm_get_async_error, "ncclCommGetAsyncError");
  sym(a.get_error_string, "ncclGetErrorString");
  sym(a.get_version, "ncclGetVersion");
  sym(a.group_start, "ncclGroupStart");
  sym(a.group_end, "ncclGroupEnd");
  sym(a.send, "ncclSend");
  sym(a.recv, "ncclRecv");
  sym(a.all_reduce, "ncclAllReduce");
  sym(a.all_gather, "ncclAllGather");
  sym(a.reduce_scatter, "ncclReduceScatter");
  return out;  // the library stays loaded for the life of the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const NcclApi& nccl() {
  if (!loaded().error.empty()) throw DeviceUnavailableError("nccl transport: " + loaded().error);
  return loaded().api;
}

std::string nccl_load_error() { return loaded().error; }

}  // namespace pipebench
