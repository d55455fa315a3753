// pipebench: benchmark suite for pipeline-parallel training.
// Parses the command line, dispatches to a subcommand, maps exceptions to
// the documented exit codes (docs/cli.md) with one clear line on stderr.
// Only `run` and `rerun` initialise MPI; `plan` works without mpirun.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <fmt/format.h>
#include <mpi.h>

#include "commands.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/backends/cpu_kernels.hpp"
#include "pipebench/backends/cpu_simd.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/provenance.hpp"
#include "pipebench/runtime/transport_nccl.hpp"

namespace {

std::string joined(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

int world_rank() {
  int initialized = 0, rank = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// This process's rank as its launcher numbered it, before MPI_Init: Open MPI,
// PMIx, MPICH's PMI or Slurm's srun set it in the environment; 0 when none
// did (a plain shell). A command line every rank parses alike is refused by
// rank 0 alone, not once per rank.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::atoi(v);
  return 0;
}

// OpenBLAS picks its kernels when it is loaded; one too old for this CPU
// (cpu::better_blas_core) is replaced by starting this program again, once,
// with OPENBLAS_CORETYPE set — before MPI_Init, so that the launcher sees
// the same process. A user's own OPENBLAS_CORETYPE is left alone.
void use_current_blas_kernels(char** argv) {
  const char* core = pipebench::cpu::better_blas_core();
  if (*core == '\0' || std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: go on with the kernels we have
}

// Ends MPI (if started) and returns `code`. For failures that may not have
// happened on every rank, the other ranks are aborted instead of left hanging.
int finish(int code, bool all_ranks_agree) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    if (!all_ranks_agree) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
  }
  return code;
}

}  // namespace

// `pipebench --version`: what this build is and what it was built with
// (MPI_Get_library_version may be called before MPI_Init).
std::string version_text() {
  using namespace pipebench;
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string mpi_text(mpi, static_cast<std::size_t>(len));
  if (const auto eol = mpi_text.find_first_of("\n,"); eol != std::string::npos) mpi_text.resize(eol);
  const std::string blas = cpu::blas_config();
  const bool cuda = cuda_built();
  return fmt::format(
      "pipebench {} (git {}, {} build)\nbackends: cpu, sim{}\nMPI: {}\nHDF5: {}\nBLAS: {}\ncpu element-wise kernels: {}\n"
      "CUDA runtime: {}\nNCCL: {}",
      PIPEBENCH_VERSION, build_git_sha(), build_type(), cuda ? ", cuda" : " (built without CUDA)", mpi_text,
      hdf5_version(), blas.empty() ? "none" : blas, cpu::simd_kernels().name, cuda ? cuda_runtime_version() : "not built",
      cuda ? nccl_version() : "not built");
}

int main(int argc, char** argv) {
  using namespace pipebench;
  use_current_blas_kernels(argv);
  CLI::App app{"pipebench " PIPEBENCH_VERSION " - benchmark suite for pipeline-parallel training", "pipebench"};
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.require_subcommand(1);
  app.footer("Run 'pipebench COMMAND --help' for a command's options. Exit codes: docs/cli.md.\n");
  const cli::Handler plan = cli::add_plan_command(app);
  const cli::Handler run = cli::add_run_command(app, joined(argc, argv));
  const cli::Handler report = cli::add_report_command(app);
  const cli::Handler probe = cli::add_probe_command(app);
  const cli::Handler tune = cli::add_tune_command(app);
  const cli::Handler trace = cli::add_trace_command(app);
  const cli::Handler rerun = cli::add_rerun_command(app, joined(argc, argv));
  const cli::Handler compare = cli::add_compare_command(app);
  const cli::Handler index = cli::add_index_command(app);

  // `pipebench foo`: name the unknown command (CLI11 would only say a
  // subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      if (launcher_rank() == 0)
        fmt::print(stderr, "pipebench: unknown command \"{}\" (commands: {}; pipebench --help)\n", printable(argv[1]), names);
      return kUsageError;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 quotes the offending argument as given: its message goes out
    // through printable() so that an ESC or a stray byte is shown, not sent.
    std::ostringstream out, message;
    const int rc = app.exit(e, out, message);
    if (launcher_rank() == 0) {
      std::fputs(out.str().c_str(), stdout);
      std::fputs(printable(message.str(), true).c_str(), stderr);
    }
    return rc == 0 ? kOk : kUsageError;
  }
  const bool with_mpi = app.got_subcommand("run") || app.got_subcommand("rerun");
  if (with_mpi) {
    int provided = 0;
    prefer_ring_iallreduce();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  // Only rank 0 speaks for errors every rank hits alike (invalid workloads);
  // other errors name their rank, under MPI only.
  const bool speak = world_rank() == 0;
  const std::string who = with_mpi ? fmt::format("rank {}: ", world_rank()) : "";
  try {
    const int rc = app.got_subcommand("run")         ? run()
                   : app.got_subcommand("rerun")  ? rerun()
                   : app.got_subcommand("compare") ? compare()
                   : app.got_subcommand("report") ? report()
                   : app.got_subcommand("probe")  ? probe()
                   : app.got_subcommand("tune")   ? tune()
                   : app.got_subcommand("trace")  ? trace()
                   : app.got_subcommand("index")  ? index()
                                                  : plan();
    return finish(rc, true);
  } catch (const ConfigError& e) {
    if (speak) fmt::print(stderr, "pipebench: invalid workload: {}\n", e.what());
    return finish(e.exit_code(), true);
  } catch (const DeviceUnavailableError& e) {
    if (speak) fmt::print(stderr, "pipebench: no usable GPU: {}\n", e.what());
    return finish(e.exit_code(), true);
  } catch (const ScheduleError& e) {
    if (speak) fmt::print(stderr, "pipebench: {}\n", e.what());
    return finish(e.exit_code(), true);
  } catch (const Error& e) {
    fmt::print(stderr, "pipebench: {}error: {}\n", who, e.what());
    return finish(e.exit_code(), false);
  } catch (const std::exception& e) {
    fmt::print(stderr, "pipebench: {}error: {}\n", who, e.what());
    return finish(kInternalError, false);
  }
}
