// `pipebench trace RESULTS.h5 [--run NAME]... [--step N|all] [--no-simulated] -o TRACE.json`:
// the measured timeline for Perfetto / chrome://tracing (docs/trace.md). No MPI.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/report/trace.hpp"
#include "pipebench/results/results.hpp"

namespace pipebench::cli {

namespace {
struct TraceCmdOptions {
  std::string results;
  std::string output;
  std::string step = "all";
  bool no_simulated = false;
  TraceOptions trace;
};
}  // namespace

Handler add_trace_command(CLI::App& app) {
  auto o = std::make_shared<TraceCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Write a results file's measured timeline (and its simulation) as a Trace Event Format JSON for "
               "Perfetto (ui.perfetto.dev) or chrome://tracing");
  cmd->add_option("results", o->results, "results file (.h5)")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output, "the trace file written (JSON)")->required();
  cmd->add_option("--run", o->trace.runs, "only this run (repeatable; default: every run with events)");
  cmd->add_option("--step", o->step, "one step, 1-based, or \"all\" (default: all, one after another)")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            if (v == "all") return "";
            try {
              std::size_t used = 0;
              const int n = std::stoi(v, &used);
              return used == v.size() && n >= 1 ? "" : "a step number from 1, or all";
            } catch (const std::exception&) {
              return "a step number from 1, or all";
            }
          },
          "N|all"));
  cmd->add_flag("--no-simulated", o->no_simulated, "leave out the simulated timeline");
  return [o]() -> int {
    o->trace.step = o->step == "all" ? 0 : std::stoi(o->step);
    o->trace.simulated = !o->no_simulated;
    const JobResult jr = read_results(o->results, ReadEvents::skip);  // checked; streamed again below
    std::optional<Job> job;
    if (o->trace.simulated && jr.root_attrs.count("job_toml")) {
      try {
        job = parse_job(jr.root_attrs.at("job_toml"), o->results + " (job_toml)");
      } catch (const std::exception& e) {
        fmt::print(stderr, "pipebench trace: no simulated timeline: the file's workload does not parse: {}\n", e.what());
      }
    }
    std::FILE* out = std::fopen(o->output.c_str(), "wb");
    if (!out) {
      fmt::print(stderr, "pipebench: trace: cannot write {}: {}\n", o->output, std::strerror(errno));
      return kUsageError;
    }
    // A trace left half written is removed, not left to be opened.
    auto discard = [&] {
      if (std::filesystem::is_regular_file(o->output)) std::remove(o->output.c_str());
    };
    try {
      write_trace_json(o->results, jr, job ? &*job : nullptr, o->trace, out);
    } catch (const Error& e) {
      std::fclose(out);
      discard();
      if (std::string_view(e.what()).rfind("trace:", 0) == 0) throw;  // the file's run or step, not the output
      throw Error(fmt::format("trace: cannot write {}: {}", o->output, e.what()));
    } catch (...) {
      std::fclose(out);
      discard();
      throw;
    }
    if (std::fclose(out) != 0) {
      fmt::print(stderr, "pipebench: trace: cannot write {}: {}\n", o->output, std::strerror(errno));
      discard();
      return kUsageError;
    }
    fmt::print("trace: {} ({} bytes); open it in https://ui.perfetto.dev or chrome://tracing\n", o->output,
               std::filesystem::file_size(o->output));
    return kOk;
  };
}

}  // namespace pipebench::cli
