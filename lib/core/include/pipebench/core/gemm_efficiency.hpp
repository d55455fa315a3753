// One point of a GEMM efficiency table (docs/time-model.md, "GEMM
// efficiency"): the achievable fraction of the matrix peak of a large GEMM
// whose reduction dimension is `k` (the compute side only: the memory
// roofline and the wave quantization are applied on top,
// model/time_model.hpp). A table is interpolated in log2(K) between its
// points and clamped at its ends. Its own header because job.hpp (compiled
// as C++17 by nvcc too) holds a workload's own table.
#pragma once

namespace pipebench {

struct GemmEfficiencyPoint {
  double k;
  double efficiency;
};

}  // namespace pipebench
