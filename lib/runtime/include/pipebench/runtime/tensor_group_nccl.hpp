// The cuda backend's tensor group over NCCL (docs/cuda-backend.md, "Tensor
// parallelism"; backends/tensor_group.hpp DeviceTensorGroup): one NCCL
// communicator per tensor group, from a unique id that the group's tensor
// rank 0 creates and broadcasts over the group's MPI communicator
// (RunComm::tensor()). Each sum or maximum is an in-place ncclAllReduce of
// fp32 device memory on the backend's own stream, so it runs in order with
// the layers' kernels; every rank of a group calls them in the same order
// (they run the same schedule), as NCCL needs. Each collective is timed by
// a pair of CUDA events around it.
//
// Used when every rank of the run has its own GPU (the nccl transport's
// rule, device_binding.hpp); ranks sharing a GPU sum host-staged copies over
// the MPI group instead (tensor_group_mpi.hpp, through the same backend).
#pragma once

#include <memory>

#include "pipebench/backends/tensor_group.hpp"
#include "pipebench/runtime/mpi_comm.hpp"

namespace pipebench {

class NcclTensorGroup : public DeviceTensorGroup {
 public:
  // After a failure: a peer may never join the pending collectives, so the
  // communicator is aborted (its kernels end) rather than waited for.
  virtual void abandon() = 0;
};

// Collective over comm.tensor(). In a build without CUDA: DeviceUnavailableError.
std::unique_ptr<NcclTensorGroup> make_nccl_tensor_group(RunComm& comm);

}  // namespace pipebench
