// One rank per GPU (SPEC §5): which device each rank of the world uses.
// The node-local rank (MPI_Comm_split_type SHARED) picks a device among those
// the process sees, so CUDA_VISIBLE_DEVICES and Slurm's GPU binding (which
// leaves one visible device per task with --gpus-per-task=1) are honoured:
// one visible device -> device 0; n visible -> local rank mod n.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/plan/plan.hpp"

namespace pipebench {

struct GpuBinding {
  std::vector<std::string> hosts;  // per world rank
  std::vector<int> local_ranks;    // per world rank
  std::vector<GpuInfo> gpus;       // per world rank: the device it selected
};

// Collective over `world`: selects this rank's device and gathers every
// rank's choice. When any rank cannot use a GPU, every rank throws the same
// DeviceUnavailableError (naming the first such rank and why).
GpuBinding bind_gpus(MPI_Comm world);

// Whether `run` (of a job whose resolved transport is `transport`) puts
// device memory into NCCL communicators: its pipeline's transfers (more
// than one stage), its tensor group's sums (tensor_parallel > 1,
// runtime/tensor_group_nccl.hpp) or its data-parallel group's gradient
// reduction (training replicas, runtime/data_group_nccl.hpp).
bool run_uses_nccl(const RunSpec& run, TransportKind transport);

// World ranks [0, n) must each have a GPU of their own, n the most ranks of
// any run of `plan` that uses NCCL and fits in `world_size` ranks (every
// run uses world ranks 0 .. its ranks() - 1): 0 when none does.
int ranks_needing_own_gpu(const JobPlan& plan, TransportKind transport, int world_size);

// Throws DeviceUnavailableError when two of world ranks [0, ranks) use one GPU
// (same host and UUID): NCCL cannot put one device in a communicator twice.
// The message says how to launch instead.
void require_one_gpu_per_rank(const GpuBinding& binding, int ranks);

}  // namespace pipebench
