#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/runtime/transport_nccl.hpp"

namespace pipebench {

std::unique_ptr<Transport> make_nccl_transport(RunComm&, const Schedule&, int, bool) {
  throw DeviceUnavailableError("this pipebench was built without CUDA and NCCL: the nccl transport is not available");
}

}  // namespace pipebench
