// cuBLAS GEMM throughput on this GPU, the reference for the cuda backend's
// step figures (tools/gpu-check.sh prints it next to them): TFLOP/s of
// C[M,N] = A[M,K]·B[K,N] with fp32 accumulation, as the backend calls it
// (cublasGemmEx, CUBLAS_COMPUTE_32F; fp32 without TF32), median of 20
// CUDA-event-timed calls after 3 warm-ups; bf16 and fp16 also as a ratio to
// fp32 measured in the same run. Inputs are uniform random in [-1, 1) (fixed
// seed): all-zero inputs run ~13% faster on an H200 and would inflate the
// reference. The math modes are the backend's: fp32 pedantic (no TF32),
// bf16/fp16 with fp32 reductions.
//
// Then, where the GPU is one a device preset describes (or --preset NAME),
// each measurement beside the hardware time model's prediction, one `model`
// line per shape and dtype (TimeModel::calibrate_gemm): the side of the
// roofline the model takes, the efficiency table's e(K) and — on the compute
// side — the e(K) the measurement gives, or — on the memory side — the share
// of the peak bandwidth it implies (docs/time-model.md, "Calibrating the GEMM
// table"; tools/gpu-check.sh collects these lines into its summary.json).
//
// --accumulate measures instead what a weight gradient does: bf16 A and B,
// the output fp32, written (beta = 0) and accumulated (beta = 1: read, then
// written), one `accumulate` line per shape with the share of the output's
// read (4 bytes an element at the preset's achievable bandwidth) the
// accumulation adds to the time — the preset's gemm_accumulate_serial
// (docs/time-model.md, "GEMMs").
//   bench_cuda_gemm [--preset NAME] [--accumulate] [M N K]...     (default: 4096 4096 4096)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pipebench/core/device_preset.hpp"
#include "pipebench/model/time_model.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <random>

namespace {

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t rc_ = (x);                                                             \
    if (rc_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(rc_));                   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CHECK_CUBLAS(x)                                                                \
  do {                                                                                 \
    if ((x) != CUBLAS_STATUS_SUCCESS) {                                                \
      std::fprintf(stderr, "%s failed\n", #x);                                         \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// `n` uniform values in [-1, 1) of `type`, uploaded to `dst`.
void fill_random(void* dst, cudaDataType_t type, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (type == CUDA_R_32F) {
    std::vector<float> host(n);
    for (auto& x : host) x = u(gen);
    CHECK_CUDA(cudaMemcpy(dst, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  } else if (type == CUDA_R_16BF) {
    std::vector<__nv_bfloat16> host(n);
    for (auto& x : host) x = __float2bfloat16(u(gen));
    CHECK_CUDA(cudaMemcpy(dst, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  } else {
    std::vector<__half> host(n);
    for (auto& x : host) x = __float2half(u(gen));
    CHECK_CUDA(cudaMemcpy(dst, host.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  }
}

// The median seconds of C[M,N] = A·B + beta·C, A and B of `type`, C of `ctype`.
double median_s(cublasHandle_t h, cudaDataType_t type, cudaDataType_t ctype, float beta, int M, int N, int K) {
  const std::size_t esize = type == CUDA_R_32F ? 4 : 2, csize = ctype == CUDA_R_32F ? 4 : 2;
  void *A, *B, *C;
  CHECK_CUDA(cudaMalloc(&A, esize * M * K));
  CHECK_CUDA(cudaMalloc(&B, esize * K * N));
  CHECK_CUDA(cudaMalloc(&C, csize * M * N));
  fill_random(A, type, static_cast<std::size_t>(M) * K, 1);
  fill_random(B, type, static_cast<std::size_t>(K) * N, 2);
  if (beta != 0.0f) fill_random(C, ctype, static_cast<std::size_t>(M) * N, 3);  // read only when accumulated
  CHECK_CUBLAS(cublasSetMathMode(h, type == CUDA_R_32F ? CUBLAS_PEDANTIC_MATH
                                                       : static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const float alpha = 1.0f;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, type, N, A, type, K, &beta, C, ctype, N,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double seconds = ms[ms.size() / 2] * 1e-3;
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return seconds;
}

double tflops(cublasHandle_t h, cudaDataType_t type, int M, int N, int K) {
  return 2.0 * M * N * K / median_s(h, type, type, 0.0f, M, N, K) / 1e12;
}

// --accumulate: each shape's bf16 GEMM into an fp32 output, written and
// accumulated, and the share of the output's modelled read the difference is.
void accumulate_table(cublasHandle_t h, const pipebench::DevicePreset* preset, const std::vector<int>& shapes) {
  std::printf("%10s %6s %6s %6s %12s %12s %12s %8s\n", "", "M", "N", "K", "written_ms", "accum_ms", "read_ms",
              "serial");
  for (std::size_t i = 0; i < shapes.size(); i += 3) {
    const int M = shapes[i], N = shapes[i + 1], K = shapes[i + 2];
    const double written = median_s(h, CUDA_R_16BF, CUDA_R_32F, 0.0f, M, N, K);
    const double accumulated = median_s(h, CUDA_R_16BF, CUDA_R_32F, 1.0f, M, N, K);
    const double read = preset ? pipebench::TimeModel(*preset, pipebench::DType::bf16).stream_s(4.0 * M * N) : 0.0;
    char serial[32] = "-";
    if (preset) std::snprintf(serial, sizeof serial, "%.3f", (accumulated - written) / read);
    std::printf("accumulate %6d %6d %6d %12.4f %12.4f %12.4f %8s\n", M, N, K, written * 1e3, accumulated * 1e3,
                read * 1e3, serial);
  }
}

// The model's lines for one dtype's measurements (TFLOP/s per shape).
void print_model(const pipebench::DevicePreset& preset, pipebench::DType dtype, const char* name,
                 const std::vector<int>& shapes, const std::vector<double>& tflops_measured) {
  const pipebench::TimeModel tm(preset, dtype);
  for (std::size_t i = 0; i < tflops_measured.size(); ++i) {
    const double M = shapes[3 * i], N = shapes[3 * i + 1], K = shapes[3 * i + 2];
    const double measured_s = 2.0 * M * N * K / (tflops_measured[i] * 1e12);
    const auto c = tm.calibrate_gemm(M, N, K, measured_s);
    const auto or_dash = [](double x) {
      char text[32] = "-";
      if (!std::isnan(x)) std::snprintf(text, sizeof text, "%.3f", x);
      return std::string(text);
    };
    std::printf("model %5s %6.0f %6.0f %6.0f %12.4f %10.4f %10.3f %7s %8.3f %12s %10s\n", name, M, N, K, measured_s * 1e3,
                c.model_s * 1e3, c.model_s / measured_s, c.compute_bound ? "compute" : "memory", c.table_efficiency,
                or_dash(c.efficiency).c_str(), or_dash(c.bandwidth_fraction).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> shapes;
  const char* preset_name = nullptr;
  bool accumulate = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--preset") == 0 && i + 1 < argc)
      preset_name = argv[++i];
    else if (std::strcmp(argv[i], "--accumulate") == 0)
      accumulate = true;
    else
      shapes.push_back(std::atoi(argv[i]));
  }
  if (shapes.empty() || shapes.size() % 3 != 0) shapes = {4096, 4096, 4096};
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const pipebench::DevicePreset* preset =
      preset_name ? pipebench::find_device_preset(preset_name) : pipebench::device_preset_for_gpu(prop.name);
  if (preset_name && !preset) {
    std::fprintf(stderr, "bench_cuda_gemm: no device preset %s (docs/time-model.md)\n", preset_name);
    return 2;
  }
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate(&h));
  if (accumulate) {
    std::printf("bf16 GEMM into fp32 on %s, written (beta 0) and accumulated (beta 1), median of 20; model: %s\n",
                prop.name, preset ? std::string(preset->name).c_str() : "none (give --preset NAME)");
    accumulate_table(h, preset, shapes);
    cublasDestroy(h);
    return 0;
  }
  std::printf("GEMM TFLOP/s on %s (cublasGemmEx, fp32 accumulation, median of 20)\n", prop.name);
  std::printf("%6s %6s %6s %10s %10s %10s %12s %12s\n", "M", "N", "K", "fp32", "bf16", "fp16", "bf16/fp32", "fp16/fp32");
  std::vector<double> f32s, b16s, h16s;
  for (std::size_t i = 0; i < shapes.size(); i += 3) {
    const int M = shapes[i], N = shapes[i + 1], K = shapes[i + 2];
    const double f32 = tflops(h, CUDA_R_32F, M, N, K), b16 = tflops(h, CUDA_R_16BF, M, N, K),
                 h16 = tflops(h, CUDA_R_16F, M, N, K);
    std::printf("%6d %6d %6d %10.1f %10.1f %10.1f %12.2f %12.2f\n", M, N, K, f32, b16, h16, b16 / f32, h16 / f32);
    f32s.push_back(f32);
    b16s.push_back(b16);
    h16s.push_back(h16);
  }
  cublasDestroy(h);
  if (!preset) {
    std::printf("time model: no device preset describes %s (give --preset NAME to compare with one)\n", prop.name);
    return 0;
  }
  std::printf("time model: %.*s, %d SMs (this GPU: %d)%s\n", static_cast<int>(preset->name.size()), preset->name.data(),
              preset->sms, prop.multiProcessorCount,
              preset->sms == prop.multiProcessorCount ? "" : " -- not the preset's part: the lines compare, not calibrate");
  std::printf("%5s %5s %6s %6s %6s %12s %10s %10s %7s %8s %12s %10s\n", "", "dtype", "M", "N", "K", "measured_ms",
              "model_ms", "model/meas", "side", "e(K)", "e(K) here", "bandwidth");
  print_model(*preset, pipebench::DType::fp32, "fp32", shapes, f32s);
  print_model(*preset, pipebench::DType::bf16, "bf16", shapes, b16s);
  print_model(*preset, pipebench::DType::fp16, "fp16", shapes, h16s);
  return 0;
}
