// `pipebench rerun FILE.h5 [--run NAME]... [-o DIR] [--set k=v]... [--label L]
//  [--system NAME] [--allow-idle-ranks]`, under mpirun / srun: runs exactly the
// workload a results file records (docs/reproduce.md).
//
// Rank 0 reads the file (as `report` reads one: the HDF5 library tried in a
// child first) and broadcasts what it recorded; every rank then parses the
// recorded TOML with the deviations, so a refusal is the same on every rank
// and only rank 0 says it.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "commands.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/posix.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/report/report.hpp"
#include "pipebench/runtime/runner.hpp"

namespace pipebench::cli {

namespace {

struct RerunCmdOptions {
  std::string file;
  std::vector<std::string> run_names, deviations;
  std::string output_dir = "results", label, system;
  bool label_given = false, allow_idle_ranks = false;  // label_given: --label was on the command line
  std::string command_line;
};

// What the file records, as rank 0 read it.
struct Recorded {
  std::string error;  // why it cannot be rerun ("" when it can)
  std::string toml, id, sha256, label, created, tool, git_sha, hosts;
  std::vector<std::string> runs;  // in the file's order
  std::vector<int> ranks;         // ranks each needs; 0: it was skipped for lack of ranks in the original too
  int world = 0;                  // the original launch's

  std::vector<std::string> pack() const {
    std::vector<std::string> v{error, toml, id, sha256, label, created, tool, git_sha, hosts, std::to_string(world)};
    for (std::size_t i = 0; i < runs.size(); ++i) v.push_back(runs[i] + "\n" + std::to_string(ranks[i]));
    return v;
  }
  static Recorded unpack(const std::vector<std::string>& v) {
    Recorded r;
    std::string world;
    std::string* fields[] = {&r.error, &r.toml, &r.id, &r.sha256, &r.label, &r.created, &r.tool, &r.git_sha, &r.hosts, &world};
    for (std::size_t i = 0; i < std::size(fields); ++i) *fields[i] = v.at(i);
    r.world = std::stoi(world);
    for (std::size_t i = std::size(fields); i < v.size(); ++i) {
      const auto nl = v[i].find('\n');
      r.runs.push_back(v[i].substr(0, nl));
      r.ranks.push_back(std::stoi(v[i].substr(nl + 1)));
    }
    return r;
  }
};

// Strings from rank 0 to every rank.
std::vector<std::string> broadcast(std::vector<std::string> v) {
  std::string blob;
  for (const auto& s : v) blob += std::to_string(s.size()) + ":" + s;
  long long n = static_cast<long long>(blob.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  blob.resize(static_cast<std::size_t>(n));
  MPI_Bcast(blob.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  v.clear();
  for (std::size_t i = 0; i < blob.size();) {
    const std::size_t colon = blob.find(':', i);
    const std::size_t len = std::stoull(blob.substr(i, colon - i));
    v.push_back(blob.substr(colon + 1, len));
    i = colon + 1 + len;
  }
  return v;
}

Recorded read_recorded(const std::string& path) {
  Recorded r;
  FileView f;
  try {
    f = read_results_file(path);
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  auto attr = [&](const char* k) {
    const auto it = f.result.root_attrs.find(k);
    return it == f.result.root_attrs.end() ? std::string() : it->second;
  };
  if (f.role == "probe") {
    r.error = fmt::format("{} is a micro-batch probe's summary, not a run: rerun the probe with `pipebench probe` "
                          "(its command line: {})", printable(path), printable(attr("command_line")));
    return r;
  }
  if (!f.job) {
    r.error = fmt::format("{}: its recorded workload cannot be read: {}", printable(path), f.job_error);
    return r;
  }
  r.toml = attr("job_toml");
  r.id = attr("results_id");
  if (r.id.empty()) r.id = std::filesystem::path(path).stem().string();  // files older than results_id
  r.sha256 = f.sha256;
  r.label = attr("label");
  r.created = attr("created_utc");
  r.tool = attr("tool_version");
  r.git_sha = attr("git_sha");
  r.world = static_cast<int>(f.result.hostnames.size());
  std::vector<std::string> hosts = f.result.hostnames;
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  for (const auto& h : hosts) r.hosts += (r.hosts.empty() ? "" : ", ") + h;
  for (const auto& run : f.result.runs) {
    r.runs.push_back(run.spec.name);
    // Every rank of the run (p x d x t), not only its pipeline's.
    r.ranks.push_back(run.status == RunStatus::skipped && run.spec.ranks() > r.world ? 0 : run.spec.ranks());
  }
  if (r.runs.empty()) r.error = fmt::format("{} records no runs: nothing to rerun", printable(path));
  return r;
}

// This rerun's own options, as a shell reads them: the command a refusal
// suggests is the one the user gave, on more ranks, never a different rerun.
std::string rerun_arguments(const RerunCmdOptions& o) {
  std::string args = shell_quote(o.file);
  for (const auto& n : o.run_names) args += " --run " + shell_quote(n);
  for (const auto& d : o.deviations) args += " --set " + shell_quote(d);
  if (o.output_dir != "results") args += " -o " + shell_quote(o.output_dir);
  if (o.label_given) args += " --label " + shell_quote(o.label);
  if (!o.system.empty()) args += " --system " + shell_quote(o.system);
  if (o.allow_idle_ranks) args += " --allow-idle-ranks";
  return args;
}

// Why the recorded workload cannot run in this launch (empty when it can), and the exit code.
struct Refusal {
  std::string why;
  int code = kUsageError;
};

Refusal refusal(const Job& job, const Recorded& rec, const RerunCmdOptions& o, int world,
                    std::vector<std::string>& selected) {
  for (const auto& name : o.run_names)
    if (std::find(rec.runs.begin(), rec.runs.end(), name) == rec.runs.end())
      return {fmt::format("{} has no run \"{}\" (its runs: {})", printable(o.file), printable(name), fmt::join(rec.runs, ", "))};
  selected = o.run_names.empty() ? rec.runs : o.run_names;
  if (job.device.backend == BackendKind::cuda) {
    if (!cuda_built())
      return {"the recorded workload runs on the cuda backend and this pipebench was built without CUDA "
              "(build where nvcc is, or rerun elsewhere; --set device.backend=cpu|sim measures something else)",
              kDeviceUnavailable};
    int gpus = 0;
    try {
      gpus = cuda_device_count();
    } catch (const Error&) {
    }
    if (gpus == 0) return {"the recorded workload runs on the cuda backend and this node has no usable GPU", kDeviceUnavailable};
  }
  // The ranks each selected run needs as it will run (a deviation may change
  // its layout), except a run the original skipped for lack of ranks: it is
  // skipped again.
  int needed = 0;
  std::string widest;
  for (std::size_t i = 0; i < rec.runs.size(); ++i) {
    if (std::find(selected.begin(), selected.end(), rec.runs[i]) == selected.end() || rec.ranks[i] == 0) continue;
    const RunSpec* spec = job.find_run(rec.runs[i]);
    const int ranks = spec ? spec->ranks() : rec.ranks[i];
    if (ranks > needed) {
      needed = ranks;
      widest = rec.runs[i];
    }
  }
  if (world < needed)
    return {fmt::format("run {} needs {} ranks and this launch has {}: mpirun -np {} pipebench rerun {}", widest, needed,
                        world, needed, printable(rerun_arguments(o)))};
  return {};
}

}  // namespace

Handler add_rerun_command(CLI::App& app, const std::string& command_line) {
  auto o = std::make_shared<RerunCmdOptions>();
  o->command_line = command_line;
  CLI::App* cmd = app.add_subcommand(
      "rerun", "Rerun exactly the workload a results file records (under mpirun/srun) and write a new results file "
               "that names the one it reproduces");
  cmd->add_option("file", o->file, "results file (.h5) to reproduce")->required()->check(CLI::ExistingFile);
  cmd->add_option("--run", o->run_names, "only this recorded run (repeatable; default: every run the file records)");
  cmd->add_option("-o,--output", o->output_dir, "results folder (default: results)");
  cmd->add_option("--set", o->deviations,
                  "a deviation from the recorded workload: dotted.key=value (repeatable; recorded as deviations)");
  cmd->add_option("--label", o->label, "campaign tag of the new file (default: the original's label)")
      ->check(label_validator());
  cmd->add_option("--system", o->system, "the system this machine is in references.toml (default $PIPEBENCH_SYSTEM)")
      ->check(system_name_validator());
  cmd->add_flag("--allow-idle-ranks", o->allow_idle_ranks, "exit 0, not 8, when the launch has more ranks than the runs use");
  return [o, cmd]() -> int {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    o->label_given = cmd->count("--label") > 0;
    const Recorded rec = Recorded::unpack(broadcast(rank == 0 ? read_recorded(o->file).pack() : std::vector<std::string>{}));
    if (!rec.error.empty()) {
      if (rank == 0) fmt::print(stderr, "pipebench: rerun: {}\n", rec.error);
      return kUsageError;
    }
    // The recorded text with the deviations: a ConfigError here is the same on every rank.
    const Job job = parse_job(rec.toml, o->file + ":/job_toml", o->deviations);
    std::vector<std::string> selected;
    if (const Refusal no = refusal(job, rec, *o, world, selected); !no.why.empty()) {
      if (rank == 0) fmt::print(stderr, "pipebench: rerun: cannot run it here: {}\n", no.why);
      return no.code;
    }
    if (rank == 0) {
      fmt::print("rerun: {} (results_id {}, sha256 {})\n", o->file, rec.id, rec.sha256);
      fmt::print("       recorded {} on {} by pipebench {} (git {}), {} rank(s); runs: {}\n", rec.created, rec.hosts,
                 rec.tool, rec.git_sha, rec.world, fmt::join(selected, ", "));
      fmt::print("       deviations: {}\n", o->deviations.empty() ? "none" : fmt::format("--set {}", fmt::join(o->deviations, " --set ")));
    }
    RunOptions run;
    run.run_names = selected;  // the runs the file records, not every run of its workload text
    run.output_dir = o->output_dir;
    run.label = o->label_given ? o->label : rec.label;
    run.command_line = o->command_line;
    run.system = o->system;
    run.reproduces = Reproduction{rec.id, rec.sha256, o->file, o->deviations};
    const RunOutcome outcome = run_job(job, run);
    if (rank == 0 && !outcome.results_path.empty())
      fmt::print("rerun: compare it with the original: pipebench compare {} {} -o <dir>\n", o->file, outcome.results_path);
    if (outcome.any_failed) return kRunFailed;
    return outcome.ranks_idle && !o->allow_idle_ranks ? kRanksIdle : kOk;
  };
}

}  // namespace pipebench::cli
