// pipebench: benchmark suite for pipeline-parallel training.
// Parses the command line, dispatches to a subcommand, maps exceptions to
// the documented exit codes (docs/cli.md) with one clear line on stderr.
// Only `run` initialises MPI; `plan` works without mpirun.
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>
#include <mpi.h>

#include "commands.hpp"
#include "pipebench/core/error.hpp"

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

int main(int argc, char** argv) {
  using namespace pipebench;
  CLI::App app{"pipebench " PIPEBENCH_VERSION " - benchmark suite for pipeline-parallel training", "pipebench"};
  app.set_version_flag("--version", "pipebench " PIPEBENCH_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'pipebench COMMAND --help' for a command's options. Exit codes: docs/cli.md.\n");
  const cli::Handler plan = cli::add_plan_command(app);
  const cli::Handler run = cli::add_run_command(app, joined(argc, argv));
  const cli::Handler report = cli::add_report_command(app);
  const cli::Handler probe = cli::add_probe_command(app);
  const cli::Handler tune = cli::add_tune_command(app);
  const cli::Handler trace = cli::add_trace_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kOk : kUsageError;
  }
  const bool with_mpi = app.got_subcommand("run");
  if (with_mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  // Only rank 0 speaks for errors every rank hits alike (invalid workloads).
  const bool speak = world_rank() == 0;
  try {
    const int rc = with_mpi                          ? run()
                   : app.got_subcommand("report") ? report()
                   : app.got_subcommand("probe")  ? probe()
                   : app.got_subcommand("tune")   ? tune()
                   : app.got_subcommand("trace")  ? trace()
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
    fmt::print(stderr, "pipebench: rank {}: error: {}\n", world_rank(), e.what());
    return finish(e.exit_code(), false);
  } catch (const std::exception& e) {
    fmt::print(stderr, "pipebench: rank {}: error: {}\n", world_rank(), e.what());
    return finish(kInternalError, false);
  }
}
