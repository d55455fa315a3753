// A stand-in for the CUDA runtime calls the failure-path tests reach, linked
// over the real ones with the linker's --wrap (CMakeLists.txt): device memory
// is host memory, streams and events are tokens, and a test can make the
// next cudaMalloc or cudaMemset fail.
#pragma once

namespace fake_cuda {

struct State {
  int mallocs = 0, frees = 0;  // successful cudaMalloc, cudaFree of one of them
  int streams = 0, events = 0;  // live
  bool fail_next_malloc = false, fail_next_memset = false;
};

State& state();

}  // namespace fake_cuda
