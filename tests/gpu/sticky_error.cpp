// A sticky CUDA error, for real (label gpu): a kernel writes through a null
// pointer; cuda_context_error() must say so, and keep saying so — which is
// what the runner's device check after every run relies on to end the
// launch instead of running later runs on a broken context. A process of its
// own: the context it breaks stays broken until the process ends.
// Exits 77 (skipped) without a usable GPU.
#include <cstdio>
#include <string>

#include "pipebench/backends/cuda_device.hpp"

int main() {
  try {
    pipebench::cuda_device_count();
    pipebench::cuda_set_device(0);
  } catch (const std::exception& e) {
    std::printf("SKIP: %s\n", e.what());
    return 77;
  }
  const std::string before = pipebench::cuda_context_error();
  if (!before.empty()) {
    std::printf("FAIL: a fresh context reports \"%s\"\n", before.c_str());
    return 1;
  }
  pipebench::cuda_break_context_for_test();
  const std::string first = pipebench::cuda_context_error(), second = pipebench::cuda_context_error();
  std::printf("after the fault: \"%s\", then \"%s\"\n", first.c_str(), second.c_str());
  if (first.empty() || second != first || first.find("cudaError") == std::string::npos) {
    std::printf("FAIL: the broken context is not reported, or not the same twice\n");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
