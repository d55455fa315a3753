// Which ranks must each have a GPU of their own (runtime/device_binding.hpp):
// every rank of a cuda run that puts device memory into an NCCL communicator
// — its pipelines (the nccl transport), its tensor groups (the layers'
// sums, runtime/tensor_group_nccl.hpp) and its data-parallel groups (the
// gradient all-reduce over NCCL, runtime/data_group_nccl.hpp). The check once
// counted pipeline stages only, so a 2-stage x 2-replica run on 2 GPUs passed
// it with each replica's pipeline on one GPU, which NCCL refuses.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/runtime/device_binding.hpp"

using namespace pipebench;

namespace {

const std::string kJob = R"(schema = 1
[job]
name = "gpus"
[model]
hidden = 64
layers = 4
heads = 4
seq_len = 16
vocab = 128
[device]
backend = "cuda"
[[run]]
name = "single"
micro_batch_size = 2
num_microbatches = 8
[[run]]
name = "dp2"
data_parallel = 2
micro_batch_size = 2
num_microbatches = 4
[[run]]
name = "pp2_dp2"
pipeline_size = 2
data_parallel = 2
micro_batch_size = 2
num_microbatches = 4
)";

// World ranks on one host, rank i on the GPU with UUID uuids[i].
GpuBinding binding(const std::vector<std::string>& uuids) {
  GpuBinding b;
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    b.hosts.emplace_back("node0");
    b.local_ranks.push_back(static_cast<int>(i));
    GpuInfo g;
    g.ordinal = uuids[i] == "GPU-a" ? 0 : 1;
    g.name = "NVIDIA H200";
    g.uuid = uuids[i];
    b.gpus.push_back(g);
  }
  return b;
}

}  // namespace

TEST_CASE("device binding: a run uses NCCL for its pipeline or, training, for its data group", "[device_binding]") {
  const Job job = parse_job(kJob, "gpus.toml");
  CHECK_FALSE(run_uses_nccl(job.runs[0], TransportKind::nccl));  // one rank
  CHECK(run_uses_nccl(job.runs[1], TransportKind::nccl));        // 1 stage x 2 replicas: the data group
  CHECK(run_uses_nccl(job.runs[2], TransportKind::nccl));
  CHECK_FALSE(run_uses_nccl(job.runs[2], TransportKind::mpi));
  RunSpec inference = job.runs[1];
  inference.mode = RunMode::inference;  // replicas, but no gradients to reduce
  CHECK_FALSE(run_uses_nccl(inference, TransportKind::nccl));
  // One stage split over 2 tensor ranks: the layers' sums go over NCCL, in
  // inference too (runtime/tensor_group_nccl.hpp).
  RunSpec tensor = job.runs[0];
  tensor.tensor_parallel = 2;
  CHECK(run_uses_nccl(tensor, TransportKind::nccl));
  tensor.mode = RunMode::inference;
  CHECK(run_uses_nccl(tensor, TransportKind::nccl));
  CHECK_FALSE(run_uses_nccl(tensor, TransportKind::mpi));
}

TEST_CASE("device binding: every rank of the widest NCCL run that fits needs its own GPU", "[device_binding]") {
  const JobPlan plan = plan_job(parse_job(kJob, "gpus.toml"));
  CHECK(ranks_needing_own_gpu(plan, TransportKind::nccl, 4) == 4);  // p 2 x d 2: all four, not the 2 stages
  CHECK(ranks_needing_own_gpu(plan, TransportKind::nccl, 3) == 2);  // p 2 x d 2 does not fit 3 ranks: dp2's two
  CHECK(ranks_needing_own_gpu(plan, TransportKind::nccl, 1) == 0);
  CHECK(ranks_needing_own_gpu(plan, TransportKind::mpi, 4) == 0);

  // 4 ranks on 2 GPUs by local rank mod 2: ranks 0 and 2 (stage 0 and stage 1
  // of replica 0) share GPU a. Checking only the 2 stages' ranks 0, 1 passed.
  const GpuBinding two_gpus = binding({"GPU-a", "GPU-b", "GPU-a", "GPU-b"});
  CHECK_NOTHROW(require_one_gpu_per_rank(two_gpus, 2));
  try {
    require_one_gpu_per_rank(two_gpus, ranks_needing_own_gpu(plan, TransportKind::nccl, 4));
    FAIL("a shared GPU was accepted");
  } catch (const DeviceUnavailableError& e) {
    CHECK_THAT(e.what(), Catch::Contains("ranks 0 and 2 on node0 share GPU 0"));
    CHECK_THAT(e.what(), Catch::Contains("--set device.transport=mpi"));
  }
  CHECK_NOTHROW(require_one_gpu_per_rank(binding({"GPU-a", "GPU-b", "GPU-c", "GPU-d"}), 4));
}
