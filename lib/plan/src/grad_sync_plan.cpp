#include <algorithm>

#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"

namespace pipebench {

void plan_grad_sync(const Job& job, RunPlan& plan) {
  plan.step_s = plan.simulated.makespan;
  const int d = plan.run.data_parallel;
  if (d <= 1 || plan.run.mode != RunMode::train) return;
  const Schedule& sched = plan.schedule;
  plan.sync = make_sync_schedule(sched, plan.run.grad_sync == GradSync::overlap);
  validate_sync_schedule(sched, plan.sync);
  // When each action ended: the cost-weighted simulation again, with its timeline.
  const SimResult sim = simulate_checked(sched, plan.costs, true);
  const auto launch_times = sync_launch_times(sched, sim, plan.sync);
  const StateBytes per = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  const bool sharded = plan.run.optimizer_sharding == OptimizerSharding::zero1;
  const parallel::RankGrid grid = parallel::run_grid(plan.run, job.device);
  for (int r = 0; r < sched.num_ranks; ++r) {
    StagePlan& sp = plan.stages[static_cast<std::size_t>(r)];
    // Stage r's data group (every replica's stage r): within a node or across nodes.
    const parallel::Link link = parallel::data_group_link(job.device, plan.run, grid.rank({r, 0, 0}));
    sp.grad_sync.inter_node = link.inter_node;
    const double last_end = sim.last_end[static_cast<std::size_t>(r)];
    // The reduce-grad actions' launches, in the runtime's order.
    const auto& launches = launch_times[static_cast<std::size_t>(r)];
    // Buckets of `bytes` on the link after `launch`, each its ring time.
    // Returns their ring time alone.
    auto buckets = [&](parallel::LinkChain& chain, double launch, std::uint64_t bytes, parallel::Collective kind) {
      double alone = 0.0;
      for (std::uint64_t off = 0; off < bytes; off += parallel::kGradBucketBytes) {
        const double t = parallel::ring_time_s(kind, std::min(parallel::kGradBucketBytes, bytes - off), d, link.latency_s,
                                               link.gbps);
        chain.add(launch, t);
        alone += t;
      }
      return alone;
    };
    parallel::LinkChain chain, gather;
    GradSyncPlan& g = sp.grad_sync;
    g.launch_s = launches.empty() ? last_end : launches.front().first;
    for (const auto& [launch, c] : launches) {
      const auto params = static_cast<std::uint64_t>(
          plan.stage_costs.at(static_cast<std::size_t>(sched.virtual_stage(r, c))).params);
      const auto bytes = params * static_cast<std::uint64_t>(per.grads);
      g.bytes += static_cast<std::int64_t>(bytes);
      const double ring =
          buckets(chain, launch, bytes, sharded ? parallel::Collective::reduce_scatter : parallel::Collective::all_reduce);
      g.reduce.push_back({c, launch, static_cast<std::int64_t>(bytes), ring, chain.end()});
      // ZeRO-1: the parameters all-gathered after the optimizer, chunk by chunk.
      if (sharded) buckets(gather, 0.0, params * static_cast<std::uint64_t>(per.params), parallel::Collective::all_gather);
    }
    g.end_s = std::max(chain.end(), g.launch_s);
    g.gather_s = gather.end();
    g.exposed_s = std::max(0.0, g.end_s - last_end);
    plan.step_s = std::max(plan.step_s, std::max(last_end, g.end_s));
  }
}

}  // namespace pipebench
