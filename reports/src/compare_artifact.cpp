// The artifact description (render_artifact_description, report/compare.hpp):
// the reference's hardware, software, build and run commands, workload and
// expected figures with their spread, in the order of the SC conferences'
// Artifact Description appendix, as Markdown a user pastes into a paper.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/report/compare.hpp"
#include "pipebench/results/metrics.hpp"
#include "report_common.hpp"

namespace pipebench {

using namespace report_detail;

namespace {

std::string or_none(const std::string& s) { return s.empty() ? "none recorded" : s; }

// `text` as a fenced code block that no line of it can close (the fence is
// longer than its longest run of backticks), control characters as spaces.
std::string code_block(const std::string& text, const char* lang) {
  std::size_t run = 0, longest = 0;
  std::string body;
  for (const char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    body += static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' ? ' ' : c;
  }
  if (!body.empty() && body.back() != '\n') body += '\n';
  const std::string fence(std::max<std::size_t>(3, longest + 1), '`');
  return fence + lang + "\n" + body + fence + "\n";
}

std::string distinct_hosts(const JobResult& jr) {
  std::vector<std::string> h = jr.hostnames;
  std::sort(h.begin(), h.end());
  h.erase(std::unique(h.begin(), h.end()), h.end());
  return fmt::format("{} host(s): {}", h.size(), fmt::join(h, ", "));
}

// Median, min-max and p90 of the counted steps, and the CV.
std::string spread(const RunResult& r) {
  const Stats& s = r.step_time;
  return fmt::format("{} (min {}, p90 {}, max {}; CV {:.2f}%; {} counted steps)", format_seconds(s.median),
                     format_seconds(s.min), format_seconds(s.p90), format_seconds(s.max), 100 * s.cv,
                     counted_steps(r).size());
}

std::string final_loss(const RunResult& r) {
  for (auto it = r.loss.rbegin(); it != r.loss.rend(); ++it)
    if (std::isfinite(*it)) return fmt::format("{:.9g}", *it);
  return "-";
}

std::string expected_results(const CompareData& d) {
  const FileView& f = d.reference;
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : f.result.runs) {
    if (r.status != RunStatus::ok) {
      rows.push_back({r.spec.name, std::string(to_string(r.status)), "-", "-", "-", "-", "-"});
      continue;
    }
    std::string per_rank;
    for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i)
      per_rank += fmt::format("{}{}", i ? ", " : "", r.peak_mem_bytes[i]);
    rows.push_back({r.spec.name, spread(r), fmt::format("{:.4g} samples/s", r.throughput_samples_per_s),
                    format_seconds(r.slowest_stage_median_s), fmt::format("{:.2f}%", 100 * r.bubble_measured_median),
                    per_rank + " B", final_loss(r)});
  }
  std::string s = md_table({"run", "median step time (spread)", "throughput", "slowest stage", "bubble (measured)",
                            "peak memory per rank", "last step's loss"},
                           rows);
  s += "\nMemory and (on the cpu backend) the loss of every step are deterministic: a reproduction matches them "
       "exactly. Times vary with the machine and its load; a reproduction is judged by the candidate / reference "
       "ratio's 95% interval (Hodges-Lehmann over the counted steps) against a tolerance.\n";
  if (!d.candidates.empty()) {
    std::vector<std::vector<std::string>> rep;
    for (const auto& c : d.candidates)
      for (const auto& r : c.runs) {
        std::string step = "-";
        for (const auto& p : r.performance)
          if (p.figure == "median step time" && std::isfinite(p.ratio.estimate))
            step = fmt::format("{:.4g} ({:.4g} to {:.4g})", p.ratio.estimate, p.ratio.low, p.ratio.high);
        rep.push_back({c.file.path, r.run, r.verdict, step});
      }
    s += fmt::format("\nReproductions judged (tolerance ±{:.3g}%):\n\n", 100 * d.options.tolerance) +
         md_table({"file", "run", "verdict", "step time ratio (95% interval)"}, rep);
  }
  return s;
}

}  // namespace

std::string render_artifact_description(const CompareData& d) {
  const FileView& f = d.reference;
  const auto& root = f.result.root_attrs;
  const auto& p = f.result.provenance_attrs;
  const std::string job = job_name(f);
  const std::size_t ranks = f.result.hostnames.size();
  std::string sha = attr(root, "git_sha");
  const bool dirty = sha.ends_with("-dirty");
  if (dirty) sha.resize(sha.size() - 6);
  std::string s = fmt::format("# Artifact description: pipebench job {}\n\n", md_text(job));
  s += fmt::format("From {} (sha256 {}, results_id {}), created {}.\n\n", md_text(f.path), f.sha256,
                   md_text(attr(root, "results_id")), md_text(attr(root, "created_utc")));
  s += "## Abstract\n\n";
  s += md_text(fmt::format("pipebench {} ran the workload \"{}\"{} on {} MPI rank(s), evidence level {}: {} run(s) ({}).",
                           attr(root, "tool_version"), job, f.job && !f.job->description.empty() ? " (" + f.job->description + ")" : "",
                           ranks, f.result.evidence_level, f.result.runs.size(),
                           [&] {
                             std::vector<std::string> n;
                             for (const auto& r : f.result.runs) n.push_back(r.spec.name);
                             return fmt::format("{}", fmt::join(n, ", "));
                           }())) + "\n\n";
  s += "## Hardware\n\n";
  s += "- CPU: " + md_text(or_none(attr(p, "cpu_model"))) + "\n";
  s += "- GPUs (per rank): " + md_text(or_none(attr(p, "gpu_names"))) + "; driver " + md_text(or_none(attr(p, "driver_version"))) + "\n";
  s += "- " + md_text(distinct_hosts(f.result)) + fmt::format("; {} rank(s)\n", ranks);
  s += "- System: " + md_text(or_none(attr(root, "system"))) + "; hardware fingerprint: " + md_text(f.fingerprint) + "\n\n";
  s += "## Software\n\n";
  s += fmt::format("- pipebench {} (git {}), build type {}\n", md_text(attr(root, "tool_version")), md_text(attr(root, "git_sha")),
                   md_text(attr(p, "build_type")));
  s += "- Compiler: " + md_text(attr(p, "compiler")) + ", flags: " + md_text(attr(p, "compiler_flags")) + "\n";
  s += "- MPI: " + md_text(or_none(attr(p, "mpi_library_version"))) + "\n";
  s += "- HDF5: " + md_text(or_none(attr(p, "hdf5_version"))) + "\n";
  s += "- BLAS: " + md_text(or_none(attr(p, "blas"))) + "\n";
  s += "- CUDA: " + md_text(or_none(attr(p, "cuda_version"))) + "; NCCL: " + md_text(or_none(attr(p, "nccl_version"))) + "\n";
  std::string env = attr(p, "environment");  // NAME=value lines
  while (!env.empty() && env.back() == '\n') env.pop_back();
  for (char& c : env) c = c == '\n' ? ';' : c;
  s += "- Environment (allow-listed): " + md_text(or_none(env)) + "\n\n";
  s += "## Build\n\n" +
       code_block(fmt::format("git clone <pipebench repository> pipebench && cd pipebench\ngit checkout {}\n"
                              "bash scripts/main-job.sh   # installs the Debian 12 packages, builds build/, runs the default job\n",
                              sha.empty() ? "<commit>" : sha),
                  "sh") +
       "\n";
  if (dirty)
    s += "The build had uncommitted changes (git sha ends in -dirty): the commit alone may not rebuild it exactly.\n\n";
  s += "## Run\n\n" +
       code_block(fmt::format("mpirun -np {0} build/bench/pipebench rerun {1}   # exactly the recorded workload, warm-up and repeats\n"
                              "mpirun -np {0} build/bench/pipebench run workload.toml   # the same, from the workload below\n"
                              "build/bench/pipebench compare {1} results/{2}/<new file>.h5 -o reproduction --tolerance {3:.3g}%\n",
                              ranks, f.path, job, 100 * d.options.tolerance),
                  "sh") +
       "\n";
  s += "The original command line: " + md_text(attr(root, "command_line"));
  if (!f.result.overrides.empty()) s += " (overrides: --set " + md_text(fmt::format("{}", fmt::join(f.result.overrides, " --set "))) + ")";
  s += "\n\n## Workload (workload.toml, as run: defaults and overrides applied)\n\n" + code_block(attr(root, "job_toml"), "toml") + "\n";
  s += "## Expected results\n\n" + expected_results(d) + "\n";
  return s;
}

}  // namespace pipebench
