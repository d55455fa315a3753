// The cpu backend's gradient all-reduce (runtime/grad_sync.hpp: buckets of
// parallel::kGradBucketBytes, non-blocking MPI_Iallreduce on the
// data-parallel group, polled like every wait of a run) beside the MPI
// library's own blocking MPI_Allreduce on the same buffer, in the same run,
// trial by trial alternating. Prints each size's median time and nccl-tests'
// bus bandwidth (bytes x 2(d-1)/d / time) for both, and their ratio (issue
// 36: pipebench's at least 0.9 of MPI's).
//
// Usage: mpirun -np D grad_allreduce [MiB ...] [--trials N]   (default 1 16 64 MiB, 15 trials)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mpi.h>

#include "pipebench/backends/backend.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/runtime/grad_sync.hpp"
#include "pipebench/runtime/mpi_comm.hpp"

using namespace pipebench;

namespace {

// A backend that is one gradient buffer: what GradientSync reads, nothing else.
class GradBuffer final : public Backend {
 public:
  explicit GradBuffer(std::size_t floats) : grads_(floats, 1.0f), memory_(0, 0) {}
  std::string_view name() const override { return "grad-buffer"; }
  bool computes_loss() const override { return false; }
  void build(const StageSpec&) override {}
  std::pair<int, int> built_layers() const override { return {0, 0}; }
  std::int64_t built_params() const override { return static_cast<std::int64_t>(grads_.size()); }
  void begin_step(int, double) override {}
  void forward(int, int, int) override {}
  void backward(int, int, int) override {}
  void weight_grad(int, int, int) override {}
  double loss(int) const override { return 0.0; }
  void grad_sq_norm_by_piece(std::vector<double>&) const override {}
  void optimizer_step(int, double) override {}
  FlatRegion gradients(int) override { return {grads_.data(), grads_.size(), grads_.size() * sizeof(float)}; }
  Buffer recv_buffer(ActionKind, int, int) override { return {}; }
  Buffer send_buffer(ActionKind, int, int) override { return {}; }
  const MemoryTracker& memory() const override { return memory_; }
  int peak_live_activations() const override { return 0; }
  float* data() { return grads_.data(); }

 private:
  std::vector<float> grads_;
  MemoryTracker memory_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  prefer_ring_iallreduce();  // as `pipebench run` does
  MPI_Init(&argc, &argv);
  std::vector<double> mib;
  int trials = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trials" && i + 1 < argc) trials = std::atoi(argv[++i]);
    else mib.push_back(std::atof(argv[i]));
  }
  if (mib.empty()) mib = {1, 16, 64};
  int rank = 0, d = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d);
  {  // RunComm frees its communicators before MPI_Finalize
  // Every rank one replica of a one-stage pipeline: the data group is the world.
  RunComm comm(MPI_COMM_WORLD, parallel::RankGrid({1, d, 1}, RankOrder::tp_dp_pp, d));
  comm.set_deadline(0.0);  // no step deadline here
  if (rank == 0)
    std::printf("grad_allreduce: %d ranks, %d trials per size, buckets of %llu MiB\n%10s %14s %14s %14s %14s %8s\n", d,
                trials, static_cast<unsigned long long>(parallel::kGradBucketBytes >> 20), "MiB", "pipebench",
                "busbw GB/s", "MPI_Allreduce", "busbw GB/s", "ratio");
  for (double m : mib) {
    const auto floats = static_cast<std::size_t>(m * (1 << 20) / sizeof(float));
    const std::uint64_t bytes = floats * sizeof(float);
    GradBuffer backend(floats);
    RunClock clock = RunClock::wall();
    GradientSync sync(comm, backend, clock, DeviceSpec{}, parallel::Link{}, false);  // real MPI: no modelled link
    std::vector<double> ours, theirs;
    for (int t = -1; t < trials; ++t) {  // trial -1 warms both paths up
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_s();
      sync.begin_step(clock.now());
      sync.launch(0);
      sync.complete();
      const double a = now_s() - t0;
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now_s();
      MPI_Allreduce(MPI_IN_PLACE, backend.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double b = now_s() - t0;
      std::fill(backend.data(), backend.data() + floats, 1.0f);  // keep the values finite
      // The slowest rank's time is the collective's.
      double ab[2] = {a, b};
      MPI_Allreduce(MPI_IN_PLACE, ab, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (t >= 0) {
        ours.push_back(ab[0]);
        theirs.push_back(ab[1]);
      }
    }
    if (rank == 0) {
      const double ta = median(ours), tb = median(theirs);
      const double ba = parallel::bus_bandwidth(parallel::Collective::all_reduce, bytes, d, ta) / 1e9;
      const double bb = parallel::bus_bandwidth(parallel::Collective::all_reduce, bytes, d, tb) / 1e9;
      std::printf("%10.1f %11.3f ms %14.3f %11.3f ms %14.3f %8.3f\n", m, ta * 1e3, ba, tb * 1e3, bb, ba / bb);
    }
  }
  }
  MPI_Finalize();
  return 0;
}
