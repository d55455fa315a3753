// fake_cuda.hpp. Each __wrap_X replaces X in every object of the test's link.
#include "fake_cuda.hpp"

#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

namespace fake_cuda {

State& state() {
  static State s;
  return s;
}

}  // namespace fake_cuda

namespace {

// A token for a stream or an event: a distinct non-null pointer.
template <typename T>
T token() {
  return reinterpret_cast<T>(new char);
}
template <typename T>
void drop(T t) {
  delete reinterpret_cast<char*>(t);
}

}  // namespace

extern "C" {

cudaError_t __wrap_cudaMalloc(void** ptr, size_t bytes) {
  auto& s = fake_cuda::state();
  if (s.fail_next_malloc) {
    s.fail_next_malloc = false;
    *ptr = nullptr;
    return cudaErrorMemoryAllocation;
  }
  *ptr = std::malloc(bytes ? bytes : 1);
  ++s.mallocs;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFree(void* ptr) {
  if (ptr) ++fake_cuda::state().frees;
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t __wrap_cudaMemset(void* ptr, int value, size_t bytes) {
  auto& s = fake_cuda::state();
  if (s.fail_next_memset) {
    s.fail_next_memset = false;
    return cudaErrorLaunchFailure;
  }
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t __wrap_cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  *free_b = 0;
  *total_b = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError() { return cudaSuccess; }
cudaError_t __wrap_cudaStreamCreateWithFlags(cudaStream_t* st, unsigned int) {
  *st = token<cudaStream_t>();
  ++fake_cuda::state().streams;
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamDestroy(cudaStream_t st) {
  drop(st);
  --fake_cuda::state().streams;
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t __wrap_cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int) {
  *ev = token<cudaEvent_t>();
  ++fake_cuda::state().events;
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
  fake_cuda::state().recorded_on[ev] = st;
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int) {
  fake_cuda::state().waits.emplace_back(st, fake_cuda::state().recorded_on[ev]);
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventQuery(cudaEvent_t) { return cudaSuccess; }  // the work before it is done
cudaError_t __wrap_cudaEventDestroy(cudaEvent_t ev) {
  drop(ev);
  --fake_cuda::state().events;
  return cudaSuccess;
}

}  // extern "C"
