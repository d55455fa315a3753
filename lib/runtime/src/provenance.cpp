#include "pipebench/runtime/provenance.hpp"

#include <cstdlib>
#include <ctime>
#include <chrono>
#include <fstream>
#include <random>
#include <unistd.h>

#include <fmt/format.h>
#include <mpi.h>

#include "pipebench/core/sha256.hpp"

namespace pipebench {

extern const char* const kBuildGitSha;  // git_sha.cpp, generated at build time

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

}  // namespace

const std::vector<std::string>& provenance_env_allow_list() {
  static const std::vector<std::string> names{
      "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NTASKS",
      "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_JOB_PARTITION", "SLURM_CLUSTER_NAME",
      "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS",
      "NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE",
      "NCCL_SHM_DISABLE", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_btl", "OMPI_MCA_pml", "UCX_TLS",
      "PIPEBENCH_FAULT", "PIPEBENCH_SYSTEM"};
  return names;
}

std::string build_git_sha() { return kBuildGitSha; }
std::string build_type() { return PIPEBENCH_BUILD_TYPE; }

std::string new_results_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device entropy;
  const std::string seed = fmt::format("{}/{}/{}/{:08x}{:08x}", host, getpid(),
                                       std::chrono::system_clock::now().time_since_epoch().count(), entropy(), entropy());
  return sha256_hex(seed).substr(0, 16);
}

std::string slurm_job_id() { return env_or("SLURM_JOB_ID", ""); }

std::map<std::string, std::string> collect_provenance() {
  std::map<std::string, std::string> p;
  p["cpu_model"] = cpu_model();
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string mpi(lib, static_cast<std::size_t>(len));
  while (!mpi.empty() && (mpi.back() == '\n' || mpi.back() == '\0')) mpi.pop_back();
  p["mpi_library_version"] = mpi;
  p["compiler"] = fmt::format("{} {}", PIPEBENCH_COMPILER_ID, __VERSION__);
  p["compiler_flags"] = PIPEBENCH_CXX_FLAGS;
  p["build_type"] = PIPEBENCH_BUILD_TYPE;
  p["blas"] = "none";  // the runner fills it in for backends that use BLAS
  p["gpu_names"] = "";
  p["gpu_uuids"] = "";
  p["gpu_pci_bus_ids"] = "";
  p["driver_version"] = "";
  p["cuda_version"] = "";
  p["nccl_version"] = "";
  p["slurm_job_id"] = slurm_job_id();
  p["slurm_job_nodelist"] = env_or("SLURM_JOB_NODELIST", "");
  std::string env;
  for (const auto& name : provenance_env_allow_list())
    if (const char* v = std::getenv(name.c_str())) env += fmt::format("{}={}\n", name, v);
  p["environment"] = env;
  return p;
}

}  // namespace pipebench
