// The `cuda` backend: the cpu backend's model (embedding, gpt/mlp blocks,
// head) on one GPU, in the storage dtype of [model] dtype (fp32, bf16 or fp16,
// fp32 accumulation), GEMMs through cuBLAS, the rest in own kernels
// (lib/backends/src/cuda/kernels.hpp). Like the cpu backend it runs several
// model chunks per rank, a split backward (B, then W from a stash of output
// gradients) and full activation recomputation. docs/cuda-backend.md has the
// design.
//
// Memory: every device buffer goes through the memory tracker in the model
// description's sizes (params, grads, fp32 master + AdamW m/v for bf16/fp16,
// activation slabs, comm buffers, ModelDesc::cuda_workspace_bytes); the
// tracker's capacity is min(device.memory_capacity, the device's memory). A
// cudaMalloc that fails is an OutOfMemoryError like the tracker's own.
// Not tracked: the CUDA context, cuBLAS's and NCCL's internal buffers, and
// the pinned host staging buffers of the MPI transport (host memory).
//
// Every action runs on one stream between two CUDA events and returns when
// the device is done; last_action_device_s() is the events' elapsed time.
//
// In a build without CUDA, make_cuda_backend throws DeviceUnavailableError.
#pragma once

#include <memory>

#include "pipebench/backends/backend.hpp"

namespace pipebench {

// The device must be selected (cuda_set_device) before. Throws
// DeviceUnavailableError when no device can be used.
std::unique_ptr<Backend> make_cuda_backend(const Job& job, int rank);

// The cuda backend's flash attention kernels (model.attention = "flash") on
// the selected GPU, for tools/gpu-check.sh's comparison with PyTorch's
// scaled_dot_product_attention: B sequences of s tokens, `heads` query heads
// over `kv_heads` K/V heads of width d, random inputs; the median of `reps`
// CUDA-event-timed forwards and of as many backwards, after 2 warm-ups.
struct FlashTiming {
  double forward_s = 0.0, backward_s = 0.0;
};
FlashTiming time_flash_attention(DType dtype, int B, int s, int heads, int kv_heads, int d, int reps);

}  // namespace pipebench
