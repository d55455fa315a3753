// Subcommands of the `pipebench` executable. Each registers its options on
// the CLI11 app and returns the handler to run when it was selected.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/core/references.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/probe/probe.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/results/probe_records.hpp"

namespace pipebench::cli {

// Handlers return an ExitCode (core/error.hpp, docs/cli.md); library
// errors map to theirs in main.cpp.
using Handler = std::function<int()>;

Handler add_plan_command(CLI::App& app);
// `command_line` is recorded in the results.
Handler add_run_command(CLI::App& app, const std::string& command_line);
Handler add_report_command(CLI::App& app);
Handler add_probe_command(CLI::App& app);
Handler add_tune_command(CLI::App& app);
Handler add_trace_command(CLI::App& app);

// `pipebench rerun FILE.h5`: MPI is initialised before it runs.
Handler add_rerun_command(CLI::App& app, const std::string& command_line);
Handler add_compare_command(CLI::App& app);

Handler add_index_command(CLI::App& app);

// --index: a path whose name ends in .sqlite (the history index; never a results file).
CLI::Validator index_path_validator();
// --index PATH (checked as above) and --no-index on `cmd` (report, compare):
// `where` says which index is used without --index, `saves` what it saves.
void add_index_options(CLI::App* cmd, std::string& index_path, bool& no_index, const std::string& where,
                       const std::string& saves);

// --label: one folder name under results/<job>/ (never a path that leaves -o).
CLI::Validator label_validator();
// --system: a references.toml system name (letters, digits, '.', '_', '-').
CLI::Validator system_name_validator();
// A finite number in [lo, hi] ((lo, hi] when lo_open): unlike CLI::Range it
// refuses nan, which passes every comparison.
CLI::Validator number_in(double lo, double hi, bool lo_open = false);

// Whether the references file at `path` ("" = none given) parses; prints
// "pipebench: invalid references file: FILE:LINE: ..." when it does not.
bool references_file_ok(const std::string& path);

// Writes a probe's results file under `output_dir` (results/<job>/probe/...)
// and returns its path.
std::string write_probe_results(const Job& job, const ProbeResult& result, const std::string& command,
                                const std::string& output_dir, const std::string& stamp);

// Prints a running probe on `out`: its trial table, each trial's start (the
// trials it may still need, the time left), a line every 10 s while one runs.
ProbeObserver console_probe_observer(std::FILE* out);

// index.html, report.md, summary.json and the trace files of `data` into
// `dir` (created); Error naming a file that cannot be written.
void write_report(const ReportData& data, const std::filesystem::path& dir);

// Writes the file at `path` through `write` (the open file; it may stream),
// then closes it. No command writes over or removes one of its own inputs:
// when `path` is, by file identity (device and inode: through a link, `./`
// or `..` too), one of `inputs`, OutputError "refusing to write PATH: it is
// the input INPUT" (exit 2) before anything is opened. Opening, writing or
// closing that fails is OutputError "cannot write PATH: REASON" (exit 2); a
// ResultsError from reading an input is passed on as it is. Either way a
// regular file left half written is removed.
void write_output_file(const std::string& path, const std::vector<std::string>& inputs,
                       const std::function<void(std::FILE*)>& write);

// write_output_file for a text: `text` into `path`, refusing to write over `inputs`.
void write_text_output(const std::filesystem::path& path, const std::string& text, const std::vector<std::string>& inputs);

// Creates the output folder `dir` of `command` ("report", "compare"); false,
// with "pipebench: COMMAND: cannot create the output folder DIR: REASON" on
// stderr, when it cannot (exit 2, docs/cli.md).
bool make_output_folder(const char* command, const std::string& dir);

// This executable's absolute path (what probe trials and tune's runs start).
std::string self_executable();

}  // namespace pipebench::cli
