#include "pipebench/runtime/device_binding.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/runtime/mpi_comm.hpp"

namespace pipebench {

namespace {

// What each rank reports about its choice, gathered in one collective.
struct RankDevice {
  char host[256];
  char failure[512];  // empty when the rank has a usable device
  char name[256];
  char uuid[64];
  char pci_bus_id[32];
  int ordinal, cc_major, cc_minor, local_rank;
  std::uint64_t total_bytes;
};

void copy_text(char* dst, std::size_t size, const std::string& text) {
  std::memset(dst, 0, size);
  std::memcpy(dst, text.data(), std::min(text.size(), size - 1));
}

}  // namespace

GpuBinding bind_gpus(MPI_Comm world) {
  int rank = 0, size = 1;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(world, &rank));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(world, &size));
  MPI_Comm node = MPI_COMM_NULL;
  PIPEBENCH_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  RankDevice mine{};
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(node, &mine.local_rank));
  PIPEBENCH_MPI_CHECK(MPI_Comm_free(&node));
  gethostname(mine.host, sizeof(mine.host) - 1);
  try {
    const int count = cuda_device_count();
    const GpuInfo g = cuda_device_info(count == 1 ? 0 : mine.local_rank % count);
    cuda_set_device(g.ordinal);
    cuda_load_libraries();  // cuBLAS (dlopen): missing, it is this launch's environment failure too
    copy_text(mine.name, sizeof(mine.name), g.name);
    copy_text(mine.uuid, sizeof(mine.uuid), g.uuid);
    copy_text(mine.pci_bus_id, sizeof(mine.pci_bus_id), g.pci_bus_id);
    mine.ordinal = g.ordinal;
    mine.cc_major = g.cc_major;
    mine.cc_minor = g.cc_minor;
    mine.total_bytes = g.total_bytes;
  } catch (const std::exception& e) {
    copy_text(mine.failure, sizeof(mine.failure), e.what());
  }
  std::vector<RankDevice> all(static_cast<std::size_t>(size));
  PIPEBENCH_MPI_CHECK(MPI_Allgather(&mine, sizeof(RankDevice), MPI_BYTE, all.data(), sizeof(RankDevice), MPI_BYTE, world));

  GpuBinding b;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const RankDevice& d = all[r];
    // The same one line on every rank: main prints it once (rank 0).
    if (d.failure[0]) throw DeviceUnavailableError(fmt::format("--backend cuda: rank {} on {}: {}", r, d.host, d.failure));
    GpuInfo g;
    g.ordinal = d.ordinal;
    g.name = d.name;
    g.uuid = d.uuid;
    g.pci_bus_id = d.pci_bus_id;
    g.total_bytes = d.total_bytes;
    g.cc_major = d.cc_major;
    g.cc_minor = d.cc_minor;
    b.hosts.emplace_back(d.host);
    b.local_ranks.push_back(d.local_rank);
    b.gpus.push_back(std::move(g));
  }
  return b;
}

bool run_uses_nccl(const RunSpec& run, TransportKind transport) {
  if (transport != TransportKind::nccl) return false;
  return run.pipeline_size > 1 || run.tensor_parallel > 1 || (run.data_parallel > 1 && run.mode == RunMode::train);
}

int ranks_needing_own_gpu(const JobPlan& plan, TransportKind transport, int world_size) {
  int widest = 0;
  for (const RunPlan& rp : plan.runs)
    if (rp.run.ranks() <= world_size && run_uses_nccl(rp.run, transport)) widest = std::max(widest, rp.run.ranks());
  return widest;
}

void require_one_gpu_per_rank(const GpuBinding& b, int ranks) {
  for (int i = 0; i < ranks; ++i)
    for (int j = i + 1; j < ranks; ++j) {
      const auto ui = static_cast<std::size_t>(i), uj = static_cast<std::size_t>(j);
      if (b.hosts[ui] != b.hosts[uj] || b.gpus[ui].uuid != b.gpus[uj].uuid) continue;
      throw DeviceUnavailableError(fmt::format(
          "ranks {} and {} on {} share GPU {} ({}, {}) and the nccl transport needs one GPU per rank: launch one rank "
          "per GPU (srun --gpus-per-task=1, or mpirun -np <GPUs per node> per node), or move boundary tensors and "
          "gradients through host memory with --set device.transport=mpi",
          i, j, b.hosts[ui], b.gpus[ui].ordinal, b.gpus[ui].name, b.gpus[ui].uuid));
    }
}

}  // namespace pipebench
