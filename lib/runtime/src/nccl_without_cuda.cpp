// The NCCL entry points of a build without CUDA: they say so.
#include "pipebench/core/error.hpp"
#include "pipebench/runtime/data_group_nccl.hpp"
#include "pipebench/runtime/tensor_group_nccl.hpp"
#include "pipebench/runtime/transport_nccl.hpp"

namespace pipebench {

std::unique_ptr<Transport> make_nccl_transport(RunComm&, const Schedule&, int, bool) {
  throw DeviceUnavailableError("this pipebench was built without CUDA and NCCL: the nccl transport is not available");
}

std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(RunComm&) {
  throw DeviceUnavailableError(
      "this pipebench was built without CUDA and NCCL: the data-parallel group cannot reduce over NCCL");
}

std::unique_ptr<NcclTensorGroup> make_nccl_tensor_group(RunComm&) {
  throw DeviceUnavailableError(
      "this pipebench was built without CUDA and NCCL: the tensor-parallel group cannot reduce over NCCL");
}

std::string nccl_version() { return ""; }

}  // namespace pipebench
