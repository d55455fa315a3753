#include "pipebench/runtime/transport_nccl.hpp"

#include "pipebench/core/error.hpp"

namespace pipebench {

std::unique_ptr<Transport> make_nccl_transport(RunComm&, const Schedule&, int, bool) {
  throw DeviceUnavailableError("this pipebench was built without CUDA and NCCL: the nccl transport is not available");
}

std::string nccl_version() { return ""; }

}  // namespace pipebench
