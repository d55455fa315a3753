#include "pipebench/runtime/data_group_nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include "pipebench/backends/cuda_check.hpp"
#include "nccl_check.hpp"

namespace pipebench {

namespace {

constexpr const char* kDataGroupWho = "nccl data-parallel group";

class NcclAllReduce final : public DeviceAllReduce {
 public:
  explicit NcclAllReduce(RunComm& comm) {
    ncclUniqueId id{};
    if (comm.grad_rank() == 0) nccl_check(nccl().get_unique_id(&id), "ncclGetUniqueId");
    PIPEBENCH_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm.data()));
    nccl_check(nccl().comm_init_rank(&comm_, comm.grad_size(), id, comm.grad_rank()), "ncclCommInitRank (data-parallel group)");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), kDataGroupWho, "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), kDataGroupWho, "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), kDataGroupWho, "cudaEventCreate");
  }

  ~NcclAllReduce() override { release(false); }

  // The gradients are final once the kernels enqueued on `after` so far
  // have run: the group's stream waits for them there (an event recorded now
  // and waited on at once, so one event serves every bucket), not the host.
  void post(float* data, std::size_t count, void* after) override {
    if (after) {
      cuda_check(cudaEventRecord(ready_, static_cast<cudaStream_t>(after)), kDataGroupWho, "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), kDataGroupWho, "cudaStreamWaitEvent");
    }
    nccl_check(nccl().all_reduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
    cuda_check(cudaEventRecord(done_, stream_), kDataGroupWho, "cudaEventRecord");
    posted_ = true;
  }

  bool done() override {
    if (!posted_) return true;
    if (!nccl_event_passed(done_, comm_, "the gradient all-reduce of the data-parallel group")) return false;
    cuda_check(cudaEventQuery(done_), kDataGroupWho, "a gradient all-reduce");
    return true;
  }

  void abandon() override { release(true); }

 private:
  void release(bool abort) {
    if (comm_) {
      if (abort) nccl().comm_abort(comm_);
      else {
        cudaStreamSynchronize(stream_);
        nccl().comm_destroy(comm_);
      }
    }
    comm_ = nullptr;
    if (done_) cudaEventDestroy(done_);
    done_ = nullptr;
    if (ready_) cudaEventDestroy(ready_);
    ready_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    posted_ = false;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // after the latest posted reduction (the stream runs them in order)
  cudaEvent_t ready_ = nullptr;  // the producer stream's work at a post
  bool posted_ = false;
};

}  // namespace

std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(RunComm& comm) { return std::make_unique<NcclAllReduce>(comm); }

}  // namespace pipebench
