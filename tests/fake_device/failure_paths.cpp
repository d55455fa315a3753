// The cuda build's failure paths that need no GPU to reach (issue 72), run
// on 2 ranks over the fake CUDA runtime (fake_cuda.hpp, linked with --wrap)
// and the fake NCCL (fake_nccl.cpp, through PIPEBENCH_NCCL_LIBRARY):
//   - DeviceBuffer gives back its allocation and its reservation when the
//     zeroing fails (item 5), and its reservation when cudaMalloc fails;
//   - the pipeline's NCCL transport connects its neighbour pair both ways
//     at set-up, a send and a receive in one group on both ranks (item 1:
//     one direction left the other to step 0's blocking ncclGroupEnd);
//   - a build that runs out of memory after the run's NCCL communicators
//     exist (the pipeline's and its pair's, the data-parallel group's, the
//     tensor group's) aborts them on every rank, never destroys them (item 2:
//     ncclCommDestroy waits for peers that have gone);
//   - the data group's gradient all-reduce follows the backend's stream on
//     the device, not the host (issue 68: grad_sync = "overlap" posts a
//     bucket while the rest of the backward is still enqueued): an event
//     recorded on the producer stream and waited on by the NCCL stream
//     before each ncclAllReduce, and none without a producer.
// Usage: mpirun -np 2 fake_device_failure_paths FAKE_NCCL_LIBRARY
#include <dlfcn.h>

#include <memory>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <mpi.h>

#include "device_memory.hpp"
#include "fake_cuda.hpp"
#include "pipebench/backends/backend.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/runtime/data_group_nccl.hpp"
#include "pipebench/runtime/executor.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/tensor_group_mpi.hpp"
#include "pipebench/runtime/transport_mpi.hpp"
#include "pipebench/runtime/transport_nccl.hpp"

using namespace pipebench;

namespace {

int g_rank = 0, g_failures = 0;
std::string g_nccl_library;

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "rank %d: %s:%d: FAILED: %s\n", g_rank, __FILE__, __LINE__, #cond); \
      ++g_failures;                                                           \
    }                                                                         \
  } while (0)

// The fake NCCL's calls so far (fake_nccl.cpp: i init, x split, a abort, d
// destroy, { } a group, s send, r receive, ! a communicator ended twice).
std::string nccl_trace() {
  void* lib = dlopen(g_nccl_library.c_str(), RTLD_NOW | RTLD_NOLOAD);  // loaded by the runtime, or not yet
  if (!lib) return "";
  using Trace = const char* (*)();
  const auto trace = reinterpret_cast<Trace>(dlsym(lib, "fake_nccl_trace"));
  std::string out = trace ? trace() : "(no fake_nccl_trace)";
  dlclose(lib);
  return out;
}

void device_buffer_gives_back_what_it_took() {
  auto& cuda = fake_cuda::state();
  MemoryTracker tracker(g_rank, 1 << 20);
  const int mallocs = cuda.mallocs, frees = cuda.frees;
  {
    gpu::DeviceBuffer ok(tracker, MemCategory::params, 4096, "a buffer");
    EXPECT(tracker.current_total() == 4096);
  }
  EXPECT(tracker.current_total() == 0);
  EXPECT(cuda.frees - frees == 1);

  cuda.fail_next_memset = true;
  bool threw = false;
  try {
    gpu::DeviceBuffer zeroing_fails(tracker, MemCategory::params, 4096, "a buffer whose zeroing fails");
  } catch (const Error&) {
    threw = true;
  }
  EXPECT(threw);
  EXPECT(tracker.current_total() == 0);                      // the reservation is given back
  EXPECT(cuda.mallocs - mallocs == 2);
  EXPECT(cuda.frees - frees == 2);                           // and the allocation

  cuda.fail_next_malloc = true;
  threw = false;
  try {
    gpu::DeviceBuffer no_memory(tracker, MemCategory::params, 4096, "a buffer the device has no room for");
  } catch (const OutOfMemoryError&) {
    threw = true;
  }
  EXPECT(threw);
  EXPECT(tracker.current_total() == 0);
}

// The data group's all-reduce after the producer's kernels, on the device.
void all_reduce_follows_the_producer_stream() {
  RunComm rc(MPI_COMM_WORLD, parallel::RankGrid({1, 2, 1}, RankOrder::tp_dp_pp, 2));  // 2 replicas of one stage
  fake_cuda::State& cuda = fake_cuda::state();
  const std::size_t start = nccl_trace().size();
  {
    const auto group = make_nccl_all_reduce(rc);
    float grads[8] = {};
    void* producer = &grads[7];  // a token: the fake runtime only compares it
    cuda.waits.clear();
    group->post(grads, 4, producer);
    EXPECT(cuda.waits.size() == 1);
    EXPECT(!cuda.waits.empty() && cuda.waits.back().second == producer && cuda.waits.back().first != producer);
    group->post(grads + 4, 4, producer);  // the next bucket waits on the producer's work by then
    EXPECT(cuda.waits.size() == 2);
    group->post(grads, 8, nullptr);  // no producer: no wait
    EXPECT(cuda.waits.size() == 2);
    EXPECT(group->done());
  }
  EXPECT(nccl_trace().substr(start) == "iAAAd");  // made, three reductions, destroyed
  EXPECT(cuda.streams == 0);
  EXPECT(cuda.events == 0);
}

// Three runs on both ranks, each holding NCCL communicators before its
// build, which runs out of memory (the job's capacity holds no stage).
constexpr const char* kJob = R"(schema = 1
[job]
name = "fake_device_failure_paths"
[model]
kind = "gpt"
hidden = 64
layers = 2
heads = 4
seq_len = 16
vocab = 256
[train]
warmup = 0
repeats = 1
step_timeout_s = 10
[device]
backend = "cpu"
memory_capacity = "4KiB"
[[run]]
name = "data_group"
data_parallel = 2
micro_batch_size = 1
num_microbatches = 2
[[run]]
name = "tensor_group"
tensor_parallel = 2
micro_batch_size = 1
num_microbatches = 2
[[run]]
name = "pipeline"
pipeline_size = 2
micro_batch_size = 1
num_microbatches = 2
)";

// The calls each run makes before its build and then on the build's failure.
struct Expected {
  const char* set_up;
  const char* ended;
};
Expected expected_nccl_calls(const RunSpec& run) {
  if (run.pipeline_size > 1) return {"ix{sr}", "aa"};  // the pipeline's communicator, its pair's split, both ways
  return {"i", "a"};                                    // the data group's, or the tensor group's
}

void out_of_memory_build_aborts_the_communicators(const Job& job, const RunPlan& rp) {
  const std::size_t start = nccl_trace().size();
  std::string set_up;
  RankRecord rec;
  {
    RunComm rc(MPI_COMM_WORLD, parallel::run_grid(rp.run, job.device));
    auto backend = make_backend(job, g_rank);
    MpiTensorGroup tensor_group(rc);
    if (rp.run.tensor_parallel > 1) backend->set_tensor_group(&tensor_group);
    ExecOptions eo;
    eo.data_group_nccl = rp.run.data_parallel > 1;
    eo.tensor_group_nccl = rp.run.tensor_parallel > 1;
    eo.transport_uses_device_memory = rp.run.pipeline_size > 1;
    std::unique_ptr<Transport> transport;
    if (rp.run.pipeline_size > 1) {
      transport = make_nccl_transport(rc, rp.schedule, rp.run.num_microbatches, true);
      set_up = nccl_trace().substr(start);
    } else {
      transport = std::make_unique<MpiTransport>(rc, backend->clock(), rp.schedule.chunks_per_rank,
                                                 rp.run.num_microbatches, LinkModel{});
    }
    rec = execute_run(job, rp, rc, *backend, *transport, eo);
  }
  const std::string calls = nccl_trace().substr(start);
  std::fprintf(stderr, "rank %d, run %s: %s (%.60s...); nccl calls: %s\n", g_rank, rp.run.name.c_str(),
               std::string(to_string(rec.failure)).c_str(), rec.failure_message.c_str(), calls.c_str());
  const Expected want = expected_nccl_calls(rp.run);
  EXPECT(rec.failure == FailureKind::oom);
  if (rp.run.pipeline_size > 1) EXPECT(set_up == want.set_up);
  EXPECT(calls == std::string(want.set_up) + want.ended);  // aborted, none destroyed, none ended twice
  EXPECT(fake_cuda::state().streams == 0);
  EXPECT(fake_cuda::state().events == 0);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 2 || size != 2) {
    if (g_rank == 0) std::fprintf(stderr, "usage: mpirun -np 2 %s FAKE_NCCL_LIBRARY\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  g_nccl_library = argv[1];
  setenv("PIPEBENCH_NCCL_LIBRARY", argv[1], 1);
  try {
    device_buffer_gives_back_what_it_took();
    all_reduce_follows_the_producer_stream();
    const Job job = parse_job(kJob, "fake_device_failure_paths");
    const JobPlan plan = plan_job(job);
    for (const RunPlan& rp : plan.runs) out_of_memory_build_aborts_the_communicators(job, rp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", g_rank, e.what());
    ++g_failures;
  }
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::fprintf(stderr, "%s (%d failed checks)\n", failures ? "FAILED" : "passed", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
