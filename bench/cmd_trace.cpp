// `pipebench trace RESULTS.h5 [--run NAME]... [--step N|all] [--no-simulated] -o TRACE.json`:
// the measured timeline for Perfetto / chrome://tracing (docs/trace.md). No MPI.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/posix.hpp"
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

void refuse_input_as_output(const std::string& output, const std::vector<std::string>& inputs) {
  const FileId out = file_id(output);
  if (out == FileId{0, 0}) return;  // nothing there yet: no input either
  for (const auto& in : inputs)
    if (file_id(in) == out)
      throw OutputError(fmt::format("refusing to write {}: it is the input {} (choose another output)", output, in));
}
}  // namespace

void write_output_file(const std::string& path, const std::vector<std::string>& inputs,
                       const std::function<void(std::FILE*)>& write) {
  refuse_input_as_output(path, inputs);
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (!out) throw OutputError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  auto remove_partial = [&] {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) std::remove(path.c_str());  // never a device or a pipe
  };
  try {
    write(out);
  } catch (const ResultsError&) {
    std::fclose(out);
    remove_partial();
    throw;
  } catch (const std::exception& e) {
    std::fclose(out);
    remove_partial();
    throw OutputError(fmt::format("cannot write {}: {}", path, e.what()));
  }
  if (std::fclose(out) != 0) {
    const int err = errno;
    remove_partial();
    throw OutputError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
}

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
    JobResult jr;
    try {
      jr = read_results(o->results, ReadEvents::skip);  // checked; streamed again below
    } catch (const ResultsError& e) {
      throw UsageError(fmt::format("trace: {}", e.what()));  // not a results file: the command line's input
    }
    std::optional<Job> job;
    if (o->trace.simulated && jr.root_attrs.count("job_toml")) {
      try {
        job = parse_job(jr.root_attrs.at("job_toml"), o->results + " (job_toml)");
      } catch (const std::exception& e) {
        fmt::print(stderr, "pipebench trace: no simulated timeline: the file's workload does not parse: {}\n", e.what());
      }
    }
    check_trace_options(jr, o->trace);  // before the output is touched
    write_output_file(o->output, {o->results},
                      [&](std::FILE* out) { write_trace_json(o->results, jr, job ? &*job : nullptr, o->trace, out); });
    fmt::print("trace: {} ({} bytes); open it in https://ui.perfetto.dev or chrome://tracing\n", o->output,
               std::filesystem::file_size(o->output));
    return kOk;
  };
}

}  // namespace pipebench::cli
