#include "pipebench/backends/cuda_device.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "pipebench/backends/cuda_check.hpp"

namespace pipebench {

namespace {

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

}  // namespace

bool cuda_built() { return true; }

std::string cuda_context_error() {
  cudaGetLastError();  // a non-sticky error (a bad launch configuration) ends here
  if (cudaDeviceSynchronize() == cudaSuccess) return "";
  cudaGetLastError();
  const cudaError_t again = cudaDeviceSynchronize();  // a sticky one comes back
  if (again == cudaSuccess) return "";
  return fmt::format("{} ({})", cudaGetErrorName(again), cudaGetErrorString(again));
}

int cuda_device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice || (rc == cudaSuccess && n == 0))
    throw DeviceUnavailableError("no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES, "
                                 "srun --gpus-per-task / --gres=gpu, and nvidia-smi)");
  if (rc == cudaErrorInsufficientDriver) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    throw DeviceUnavailableError(
        driver == 0 ? fmt::format("no NVIDIA driver found (libcuda.so is missing): pipebench was built with CUDA {} "
                                  "and needs a GPU node with a driver for it",
                                  version_text(runtime))
                    : fmt::format("the NVIDIA driver supports CUDA {} but pipebench was built with CUDA {}: "
                                  "update the driver or rebuild against an older toolkit",
                                  version_text(driver), version_text(runtime)));
  }
  if (rc != cudaSuccess)
    throw DeviceUnavailableError(
        fmt::format("CUDA cannot be used: {} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc)));
  return n;
}

GpuInfo cuda_device_info(int ordinal) {
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, ordinal), "CUDA", "cudaGetDeviceProperties");
  GpuInfo g;
  g.ordinal = ordinal;
  g.name = prop.name;
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  g.uuid = fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                       u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                       u[15]);
  char bus[32] = {};
  cuda_check(cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal), "CUDA", "cudaDeviceGetPCIBusId");
  g.pci_bus_id = bus;
  g.total_bytes = prop.totalGlobalMem;
  g.cc_major = prop.major;
  g.cc_minor = prop.minor;
  return g;
}

void cuda_set_device(int ordinal) { cuda_check(cudaSetDevice(ordinal), "CUDA", "cudaSetDevice"); }

std::string cuda_driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? version_text(v) : "";
}

std::string cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? version_text(v) : "";
}

}  // namespace pipebench
