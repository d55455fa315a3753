// A stand-in for the CUDA runtime calls the failure-path tests reach, linked
// over the real ones with the linker's --wrap (CMakeLists.txt): device memory
// is host memory, streams and events are tokens, and a test can make the
// next cudaMalloc or cudaMemset fail.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fake_cuda {

struct State {
  int mallocs = 0, frees = 0;  // successful cudaMalloc, cudaFree of one of them
  int streams = 0, events = 0;  // live
  bool fail_next_malloc = false, fail_next_memset = false;
  // Stream order: the stream each event was last recorded on, and each
  // cudaStreamWaitEvent as (the waiting stream, that event's stream then).
  std::map<void*, void*> recorded_on;
  std::vector<std::pair<void*, void*>> waits;
};

State& state();

}  // namespace fake_cuda
