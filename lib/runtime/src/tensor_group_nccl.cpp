#include "pipebench/runtime/tensor_group_nccl.hpp"

#include <cstddef>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl_check.hpp"
#include "pipebench/backends/cuda_check.hpp"

namespace pipebench {

namespace {

constexpr const char* kTensorGroupWho = "nccl tensor-parallel group";

class NcclTensorGroupImpl final : public NcclTensorGroup {
 public:
  explicit NcclTensorGroupImpl(RunComm& comm) : run_(comm) {
    ncclUniqueId id{};
    if (comm.tensor_rank() == 0) nccl_check(nccl().get_unique_id(&id), "ncclGetUniqueId");
    PIPEBENCH_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm.tensor()));
    nccl_check(nccl().comm_init_rank(&comm_, comm.tensor_size(), id, comm.tensor_rank()),
               "ncclCommInitRank (tensor-parallel group)");
  }

  ~NcclTensorGroupImpl() override { release(false); }

  void sum(float* data, std::int64_t n, void* stream) override { reduce(data, n, ncclSum, stream); }
  void max(float* data, std::int64_t n, void* stream) override { reduce(data, n, ncclMax, stream); }

  void all_gather(const void* part, void* whole, std::int64_t bytes, void* stream) override {
    timed(stream, [&](cudaStream_t st) {
      nccl_check(nccl().all_gather(part, whole, static_cast<std::size_t>(bytes), ncclUint8, comm_, st),
                 "ncclAllGather (tensor-parallel group)");
    });
  }

  void reduce_scatter(const float* whole, float* part, std::int64_t n, void* stream) override {
    timed(stream, [&](cudaStream_t st) {
      nccl_check(nccl().reduce_scatter(whole, part, static_cast<std::size_t>(n), ncclFloat32, ncclSum, comm_, st),
                 "ncclReduceScatter (tensor-parallel group)");
    });
  }

  void wait(void* event, const char* what) override {
    auto* ev = static_cast<cudaEvent_t>(event);
    run_.wait_for([&] { return nccl_event_passed(ev, comm_, what); }, what);
  }

  // Called at the end of a step, after its actions' events: every timed
  // collective has finished.
  double take_seconds() override {
    double s = 0.0;
    for (std::size_t i = 0; i < used_; ++i) {
      float ms = 0.0f;
      cuda_check(cudaEventElapsedTime(&ms, timers_[i].first, timers_[i].second), kTensorGroupWho, "cudaEventElapsedTime");
      s += static_cast<double>(ms) * 1e-3;
    }
    used_ = 0;
    return s;
  }

  void abandon() override { release(true); }

 private:
  void reduce(float* data, std::int64_t n, ncclRedOp_t op, void* stream) {
    timed(stream, [&](cudaStream_t st) {
      nccl_check(nccl().all_reduce(data, data, static_cast<std::size_t>(n), ncclFloat32, op, comm_, st),
                 "ncclAllReduce (tensor-parallel group)");
    });
  }

  // `call` enqueued on `stream` between the two events of a timer.
  template <typename Call>
  void timed(void* stream, Call call) {
    if (!comm_) throw Error("the tensor-parallel group's NCCL communicator was abandoned after a failure");
    auto* st = static_cast<cudaStream_t>(stream);
    const std::pair<cudaEvent_t, cudaEvent_t>& timer = next_timer();
    cuda_check(cudaEventRecord(timer.first, st), kTensorGroupWho, "cudaEventRecord");
    call(st);
    cuda_check(cudaEventRecord(timer.second, st), kTensorGroupWho, "cudaEventRecord");
  }

  const std::pair<cudaEvent_t, cudaEvent_t>& next_timer() {
    if (used_ == timers_.size()) {
      std::pair<cudaEvent_t, cudaEvent_t> t{nullptr, nullptr};
      cuda_check(cudaEventCreate(&t.first), kTensorGroupWho, "cudaEventCreate");
      cuda_check(cudaEventCreate(&t.second), kTensorGroupWho, "cudaEventCreate");
      timers_.push_back(t);
    }
    return timers_[used_++];
  }

  void release(bool abort) {
    if (comm_) {
      if (abort) nccl().comm_abort(comm_);
      else nccl().comm_destroy(comm_);
    }
    comm_ = nullptr;
    if (!abort) {  // an aborted group's events may still be waited on by the backend's stream
      for (auto& [a, b] : timers_) {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      }
      timers_.clear();
    }
    used_ = 0;
  }

  RunComm& run_;
  ncclComm_t comm_ = nullptr;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timers_;  // reused every step
  std::size_t used_ = 0;
};

}  // namespace

std::unique_ptr<NcclTensorGroup> make_nccl_tensor_group(RunComm& comm) {
  return std::make_unique<NcclTensorGroupImpl>(comm);
}

}  // namespace pipebench
