// `pipebench tune`'s outputs (tune.hpp): the answer line, the tuned workload
// file and the JSON of the search.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/json.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/tune.hpp"

namespace pipebench {

namespace {

std::string candidate_label(const TuneCandidate& c) {
  std::string s = fmt::format("{}, mbs {}, m {}, {}", c.layout(), c.micro_batch_size, c.num_microbatches,
                              to_string(c.schedule));
  if (c.virtual_stages_per_rank > 1 && any_virtual_stages(c.schedule))
    s += fmt::format(" (v = {})", c.virtual_stages_per_rank);
  if (c.data_parallel > 1 && c.sharding != OptimizerSharding::none) s += fmt::format(", {}", to_string(c.sharding));
  if (c.data_parallel > 1 && c.grad_sync != GradSync::after_flush) s += fmt::format(", grad_sync {}", to_string(c.grad_sync));
  if (c.recompute != Recompute::none) s += fmt::format(", recompute {}", to_string(c.recompute));
  if (c.tensor_parallel > 1 && c.sequence_parallel) s += ", sequence parallel";
  if (c.context_parallel > 1) s += fmt::format(", context parallel {}", c.context_parallel);
  return s;
}

// One [[run]] table. Keys at their default are left out, except the ones a
// reader looks for first.
std::string run_table(const RunSpec& r, const std::string& comment) {
  std::string t = comment.empty() ? "" : "# " + comment + "\n";
  t += fmt::format("[[run]]\nname = \"{}\"\npipeline_size = {}\nmicro_batch_size = {}\nnum_microbatches = {}\n", r.name,
                   r.pipeline_size, r.micro_batch_size, r.num_microbatches);
  if (r.mode == RunMode::inference) t += "mode = \"inference\"\n";
  else t += fmt::format("schedule = \"{}\"\n", to_string(r.schedule));
  if (any_virtual_stages(r.schedule) && r.mode == RunMode::train)
    t += fmt::format("virtual_stages_per_rank = {}\n", r.virtual_stages_per_rank);
  if (r.data_parallel > 1 && r.mode == RunMode::train)
    t += fmt::format("data_parallel = {}\noptimizer_sharding = \"{}\"\ngrad_sync = \"{}\"\nrank_order = \"{}\"\n",
                     r.data_parallel, to_string(r.optimizer_sharding), to_string(r.grad_sync), to_string(r.rank_order));
  if (r.tensor_parallel > 1)
    t += fmt::format("tensor_parallel = {}\n{}{}", r.tensor_parallel, r.sequence_parallel ? "sequence_parallel = true\n" : "",
                     r.data_parallel > 1 ? "" : fmt::format("rank_order = \"{}\"\n", to_string(r.rank_order)));
  if (r.context_parallel > 1)
    t += fmt::format("context_parallel = {}\ncp_comm = \"{}\"\n", r.context_parallel, to_string(r.cp_comm));
  if (r.recompute != Recompute::none) t += fmt::format("recompute = \"{}\"\n", to_string(r.recompute));
  t += fmt::format("remainder = \"{}\"\n", to_string(r.remainder));
  if (r.remainder == Remainder::balanced && r.balance_by != BalanceBy::flops)
    t += fmt::format("balance_by = \"{}\"\n", to_string(r.balance_by));
  if (!r.baseline.empty()) t += fmt::format("baseline = \"{}\"\n", r.baseline);
  return t + "\n";
}

std::string run_name(const char* role, const TuneCandidate& c) {
  std::string n = fmt::format("{}_pp{}", role, c.pipeline_size);
  if (c.data_parallel > 1) n += fmt::format("_dp{}", c.data_parallel);
  if (c.tensor_parallel > 1) n += fmt::format("_tp{}", c.tensor_parallel);
  if (c.context_parallel > 1) n += fmt::format("_cp{}", c.context_parallel);
  if (c.data_parallel > 1 && c.sharding != OptimizerSharding::none) n += "_" + std::string(to_string(c.sharding));
  if (c.data_parallel > 1 && c.grad_sync != GradSync::after_flush) n += "_" + std::string(to_string(c.grad_sync));
  if (c.pipeline_size > 1) n += "_" + std::string(to_string(c.schedule));
  return n;
}

}  // namespace

std::string tune_answer_line(const TuneResult& result) {
  const TuneCandidate* best = result.best();
  if (!best) {
    // No layout could be formed at all (--gpus 64 --tensor-parallel 3: no p·d·3 is 64).
    if (result.candidates.empty()) {
      const auto degrees = [](const std::vector<int>& v) {
        return v.empty() ? std::string("any") : fmt::format("{}", fmt::join(v, ", "));
      };
      return fmt::format("no layout p x d x t {} {} can be formed from these options (t in {}, d in {}); change them",
                         result.options.all_ranks ? "=" : "<=", result.options.max_ranks,
                         degrees(result.options.tensor_parallel), degrees(result.options.data_parallel));
    }
    // Every candidate skipped before its memory was judged (a global batch no
    // replica count divides, a schedule's micro-batch rule): memory is not why.
    const auto judged = [](const TuneCandidate& c) { return c.fits || !c.peak_bytes.empty(); };
    if (std::none_of(result.candidates.begin(), result.candidates.end(), judged))
      return fmt::format("no layout on {} {} ranks is usable with these options (e.g. {}: {}); change them",
                         result.options.all_ranks ? "all" : "up to", result.options.max_ranks,
                         result.candidates.front().layout(), result.candidates.front().why_not);
    if (result.options.all_ranks)
      return fmt::format("nothing fits on all {} ranks (p x d x t = {}): {}more ranks, a smaller model or a larger "
                         "memory_capacity",
                         result.options.max_ranks, result.options.max_ranks,
                         result.options.max_ranks > 1
                             ? fmt::format("--ranks {} also searches layouts on fewer; else ", result.options.max_ranks)
                             : "");
    return fmt::format("nothing fits on up to {} ranks: more ranks, a smaller model, recomputation or a larger "
                       "memory_capacity",
                       result.options.max_ranks);
  }
  // The smallest pipeline that fits, and the replicas it needed when only
  // a sharded optimizer makes it fit.
  const TuneCandidate* small = result.smallest_fitting();
  const std::string with = small->data_parallel > 1 && small->sharding != OptimizerSharding::none
                               ? fmt::format(" (with d {}, {})", small->data_parallel, to_string(small->sharding))
                               : "";
  return fmt::format("smallest fitting p = {}{}; best throughput on {} ranks: {}{}", result.smallest_fitting_p, with,
                     best->ranks(), candidate_label(*best),
                     best->margin ? ""
                                  : fmt::format(" (no candidate keeps every peak below {:.0f}% of memory_capacity: this "
                                                "one reaches {:.0f}%)",
                                                100 * kMemoryWarnFraction, 100 * best->peak_fraction));
}

TunedWorkload tuned_workload(const Job& job, const TuneResult& result) {
  const TuneCandidate* best = result.best();
  if (!best) throw ConfigError(fmt::format("tune: {}; no workload written", tune_answer_line(result)));
  TunedWorkload w;
  w.job_name = job.name.substr(0, kMaxNameLength - 6) + "_tuned";
  const RunSpec& like = result.template_run;
  std::string runs;
  auto add = [&](const TuneCandidate& c, std::string name, const std::string& baseline, const std::string& comment) {
    RunSpec r = c.run(like, std::move(name));
    r.baseline = c.ranks() > 1 ? baseline : "";
    runs += run_table(r, comment);
    w.run_names.push_back(r.name);
    w.ranks_needed = std::max(w.ranks_needed, r.ranks());
  };
  const TuneCandidate base = result.baseline ? *result.baseline : *best;
  w.baseline_note = result.baseline_note;
  const std::string base_comment =
      result.baseline_note.empty() ? "the single-stage baseline at the chosen run's global batch" : result.baseline_note;
  // Where the baseline would be the chosen run's own pipeline size, the
  // chosen run is the others' baseline.
  const bool own = base.same_layout(*best);
  const std::string chosen_name = run_name("tuned", *best);
  const std::string base_name = own ? chosen_name : base.ranks() == 1 ? "baseline" : run_name("baseline", base);
  add(*best, chosen_name, own ? "" : base_name,
      fmt::format("chosen: best predicted throughput on {} ranks ({:.4g} samples/s, {:.4g} per rank){}", best->ranks(),
                  best->samples_per_s, best->samples_per_s_per_rank,
                  result.idle_note.empty() ? "" : "; " + result.idle_note));
  if (!own) add(base, base_name, "", base_comment);
  int added = 0;
  for (const auto& c : result.runners_up)
    add(c, run_name("runner_up", c), base_name,
        fmt::format("runner-up {} in the ranking, here at the chosen run's global batch {}", ++added,
                    best->global_batch()));
  const std::string answer = tune_answer_line(result);
  std::string head = fmt::format(
      "# Written by `pipebench tune` from {} (template run \"{}\").\n# {}\n# Launch with at least {} ranks "
      "(mpirun -np {} pipebench run THIS_FILE); runs needing more are skipped.\n",
      job.source_path, like.name, answer, w.ranks_needed, w.ranks_needed);
  w.toml = head + job_toml_without_runs(job, w.job_name, "tuned from " + job.name + ": " + answer) + "\n" + runs;
  return w;
}

namespace {
void candidate_json(JsonWriter& w, const TuneCandidate& c) {
  w.begin_object();
  w.field("pipeline_size", c.pipeline_size).field("data_parallel", c.data_parallel);
  w.field("tensor_parallel", c.tensor_parallel).field("ranks", c.ranks());
  w.field("optimizer_sharding", to_string(c.sharding)).field("grad_sync", to_string(c.grad_sync));
  w.field("schedule", to_string(c.schedule));
  w.field("virtual_stages_per_rank", c.virtual_stages_per_rank).field("partition", to_string(c.partition));
  w.field("recompute", to_string(c.recompute)).field("sequence_parallel", c.tensor_parallel > 1 && c.sequence_parallel);
  w.field("fits", c.fits).field("memory_margin", c.margin).field("why_not", c.why_not);
  w.field("max_micro_batch", c.max_micro_batch).field("replica_max_micro_batch", c.replica_max_micro_batch);
  w.field("micro_batch_size", c.micro_batch_size).field("num_microbatches", c.num_microbatches);
  w.field("global_batch", c.global_batch()).array("layers_per_stage", c.layers_per_stage);
  w.array("peak_bytes", c.peak_bytes).field("peak_fraction", c.peak_fraction);
  w.field("bubble_simulated", c.bubble).field("bubble_closed_form", c.bubble_closed_form);
  w.field("step_time_s", c.step_time_s).field("slowest_stage_s", c.slowest_stage_s);
  w.field("grad_sync_exposed_s", c.grad_sync_exposed_s);
  w.field("samples_per_s", c.samples_per_s).field("samples_per_s_per_rank", c.samples_per_s_per_rank);
  w.key("terms");
  if (c.terms) {
    w.begin_object().field("compute_s", c.terms->compute_s).field("tp_comm_s", c.terms->tp_comm_s);
    w.field("cp_exposed_s", c.terms->cp_exposed_s);
    w.field("pp_transfer_s", c.terms->pp_transfer_s).field("dp_exposed_s", c.terms->dp_exposed_s);
    w.field("dp_hidden_s", c.terms->dp_hidden_s);
    w.field("optimizer_s", c.terms->optimizer_s).field("idle_s", c.terms->idle_s).field("mfu", c.mfu).end_object();
  } else {
    w.null();
  }
  w.end_object();
}
}  // namespace

std::string format_tune_json(const Job& job, const TuneResult& result, const TunedWorkload& workload,
                             const std::string& workload_path) {
  JsonWriter w;
  w.begin_object();
  w.field("tool", "pipebench tune").field("job", job.name).field("source", job.source_path);
  w.field("template_run", result.template_run.name).field("max_ranks", result.options.max_ranks);
  w.field("global_batch", result.options.global_batch).field("num_microbatches", result.options.num_microbatches);
  w.field("bubble_target", result.options.bubble_target);
  w.field("memory_capacity_bytes", job.device.memory_capacity_bytes);
  w.field("answer", tune_answer_line(result)).field("smallest_fitting_p", result.smallest_fitting_p);
  w.field("idle_note", result.idle_note);
  w.key("best");
  if (const TuneCandidate* b = result.best()) candidate_json(w, *b);
  else w.null();
  w.key("baseline");
  if (result.baseline) candidate_json(w, *result.baseline);
  else w.null();
  w.field("baseline_note", result.baseline_note);
  w.key("runners_up").begin_array();
  for (const auto& c : result.runners_up) candidate_json(w, c);
  w.end_array();
  w.key("candidates").begin_array();
  for (const auto& c : result.candidates) candidate_json(w, c);
  w.end_array();
  w.key("workload").begin_object();
  w.field("path", workload_path).field("job", workload.job_name).array("runs", workload.run_names);
  w.field("ranks_needed", workload.ranks_needed).end_object();
  w.end_object();
  return w.str() + "\n";
}

}  // namespace pipebench
