// Where and with what a result was measured (SPEC §7 /provenance): CPU, MPI
// library, compiler and flags, BLAS, GPU/driver/CUDA/NCCL where present,
// Slurm job, and an allow-listed environment (never the whole environment).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace pipebench {

// Environment variables recorded when set (docs/results-format.md).
const std::vector<std::string>& provenance_env_allow_list();

// Attributes of /provenance for this process (call on rank 0 after MPI_Init).
std::map<std::string, std::string> collect_provenance();

// This build: the git commit it was built from ("-dirty" when tracked files
// differed from it, "unknown" outside a checkout; tools/cmake/git_sha.cmake)
// and the CMake build type.
std::string build_git_sha();
std::string build_type();

// A results file's results_id: 16 hex digits from the host, the process,
// the time and the system's random source (unique per launch; a rerun
// names the file it reproduces by it).
std::string new_results_id();

// The Slurm job id, or "" outside Slurm.
std::string slurm_job_id();

}  // namespace pipebench
