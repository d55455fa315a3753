#include "pipebench/device_binding.hpp"

#include <cstdio>
#include <cstring>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/mpi_comm.hpp"

namespace pipebench {

namespace {

constexpr std::size_t kField = 256;

// Every rank's `text` (at most kField - 1 bytes), on every rank.
std::vector<std::string> allgather_text(MPI_Comm comm, const std::string& text) {
  int size = 1;
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(comm, &size));
  char mine[kField] = {};
  std::memcpy(mine, text.data(), std::min(text.size(), kField - 1));
  std::vector<char> all(kField * static_cast<std::size_t>(size));
  PIPEBENCH_MPI_CHECK(MPI_Allgather(mine, static_cast<int>(kField), MPI_CHAR, all.data(), static_cast<int>(kField),
                                    MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int i = 0; i < size; ++i) out.emplace_back(&all[kField * static_cast<std::size_t>(i)]);
  return out;
}

}  // namespace

GpuBinding bind_gpus(MPI_Comm world) {
  int rank = 0;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_Comm node = MPI_COMM_NULL;
  PIPEBENCH_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int local = 0;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(node, &local));
  PIPEBENCH_MPI_CHECK(MPI_Comm_free(&node));
  char host[kField] = {};
  gethostname(host, kField - 1);

  GpuInfo mine;
  std::string failure;
  try {
    const int count = cuda_device_count();
    const int ordinal = count == 1 ? 0 : local % count;
    cuda_set_device(ordinal);
    mine = cuda_device_info(ordinal);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const auto failures = allgather_text(world, failure);
  for (std::size_t r = 0; r < failures.size(); ++r)
    if (!failures[r].empty()) {
      // The same one line on every rank: main prints it once (rank 0).
      const auto hosts = allgather_text(world, host);
      throw DeviceUnavailableError(fmt::format("--backend cuda: rank {} on {}: {}", r, hosts[r], failures[r]));
    }

  GpuBinding b;
  b.hosts = allgather_text(world, host);
  const auto names = allgather_text(world, mine.name);
  const auto uuids = allgather_text(world, mine.uuid);
  const auto pcis = allgather_text(world, mine.pci_bus_id);
  const auto rest = allgather_text(world, fmt::format("{} {} {} {} {}", mine.ordinal, mine.total_bytes, mine.cc_major,
                                                      mine.cc_minor, local));
  for (std::size_t r = 0; r < names.size(); ++r) {
    GpuInfo g;
    g.name = names[r];
    g.uuid = uuids[r];
    g.pci_bus_id = pcis[r];
    int local_rank = 0;
    unsigned long long total = 0;
    std::sscanf(rest[r].c_str(), "%d %llu %d %d %d", &g.ordinal, &total, &g.cc_major, &g.cc_minor, &local_rank);
    g.total_bytes = total;
    b.gpus.push_back(g);
    b.local_ranks.push_back(local_rank);
  }
  return b;
}

void require_one_gpu_per_rank(const GpuBinding& b, int ranks) {
  for (int i = 0; i < ranks; ++i)
    for (int j = i + 1; j < ranks; ++j) {
      const auto ui = static_cast<std::size_t>(i), uj = static_cast<std::size_t>(j);
      if (b.hosts[ui] != b.hosts[uj] || b.gpus[ui].uuid != b.gpus[uj].uuid) continue;
      throw DeviceUnavailableError(fmt::format(
          "ranks {} and {} on {} share GPU {} ({}, {}) and the nccl transport needs one GPU per rank: launch one rank "
          "per GPU (srun --gpus-per-task=1, or mpirun -np <GPUs per node> per node), or move boundary tensors "
          "through host memory with --set device.transport=mpi",
          i, j, b.hosts[ui], b.gpus[ui].ordinal, b.gpus[ui].name, b.gpus[ui].uuid));
    }
}

}  // namespace pipebench
