// pipebench: benchmark suite for pipeline-parallel training.
// Parses the command line, dispatches to a subcommand, maps exceptions to
// the documented exit codes with one clear line on stderr.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/error.hpp"

int main(int argc, char** argv) {
  using namespace pipebench;
  CLI::App app{"pipebench " PIPEBENCH_VERSION " - benchmark suite for pipeline-parallel training", "pipebench"};
  app.set_version_flag("--version", "pipebench " PIPEBENCH_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'pipebench COMMAND --help' for a command's options. Exit codes: docs/cli.md.\n");
  const cli::Handler plan = cli::add_plan_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? cli::kOk : cli::kUsageError;
  }
  try {
    if (app.got_subcommand("plan")) return plan();
    return cli::kUsageError;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "pipebench: invalid workload: {}\n", e.what());
    return cli::kInvalidWorkload;
  } catch (const ScheduleError& e) {
    fmt::print(stderr, "pipebench: {}\n", e.what());
    return cli::kInvalidSchedule;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pipebench: error: {}\n", e.what());
    return cli::kInternalError;
  }
}
