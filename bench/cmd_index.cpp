// `pipebench index rebuild DIR [--index PATH]`: the history index
// (reports/include/pipebench/report/history_index.hpp, docs/reports.md
// "History index") made anew from every results file under DIR. No MPI.
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/report/history_index.hpp"
#include "pipebench/runtime/provenance.hpp"

namespace pipebench::cli {

CLI::Validator index_path_validator() {
  return CLI::Validator(
      [](const std::string& s) -> std::string {
        return s.ends_with(".sqlite") ? "" : fmt::format("the history index's name must end in .sqlite, got \"{}\"", s);
      },
      "PATH.sqlite");
}

void add_index_options(CLI::App* cmd, std::string& index_path, bool& no_index, const std::string& where,
                       const std::string& saves) {
  cmd->add_option("--index", index_path, "the history index (SQLite; default: " + where + "); a cache: " + saves)
      ->check(index_path_validator());
  cmd->add_flag("--no-index", no_index, "no index is read or written");
}

Handler add_index_command(CLI::App& app) {
  struct Options {
    std::string dir, index;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("index", "The report's history index (a cache of what the trends read of each file)");
  cmd->require_subcommand(1);
  CLI::App* rebuild = cmd->add_subcommand("rebuild", "Make the index of every results file under DIR anew");
  rebuild->add_option("dir", o->dir, "the results folder")->required()->check(CLI::ExistingDirectory);
  rebuild->add_option("--index", o->index, "where (default DIR/.pipebench-index.sqlite)")->check(index_path_validator());
  return [o]() -> int {
    std::vector<SkippedFile> skipped;
    std::vector<std::string> notes;
    const std::size_t indexed = rebuild_history_index(o->dir, o->index, build_git_sha(), skipped, notes);
    for (const auto& n : notes) fmt::print(stderr, "pipebench index: {}\n", n);
    for (const auto& s : skipped) fmt::print(stderr, "pipebench index: skipped {}: {}\n", printable(s.path), s.reason);
    const std::string path = o->index.empty() ? default_index_path(o->dir) : o->index;
    fmt::print("index: {} file(s) in {}, {} skipped\n", indexed, path, skipped.size());
    return kOk;
  };
}

}  // namespace pipebench::cli
