#include <algorithm>
#include <optional>

#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/grad_buckets.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"

namespace pipebench {

namespace {

// The layers of one chunk in the order its backward reaches them (the head,
// the blocks from the last, the embedding), each with its gradient FLOPs.
std::vector<parallel::GradLayer> backward_layers(const ModelDesc& model, int b, const StageRange& range) {
  std::vector<parallel::GradLayer> out;
  const auto add = [&](const Cost& c) { out.push_back({c.params, c.backward_flops + c.recompute_flops}); };
  if (range.has_head) add(model.head(b));
  for (int l = 0; l < range.num_layers; ++l) add(model.block(b));
  if (range.has_embedding) add(model.embedding(b));
  return out;
}

// The buckets of the chunk at virtual stage `range` for grad_sync = "overlap".
// Full recomputation without a split backward runs the chunk's forward again
// at the start of B: that share of the action comes before any gradient.
std::vector<parallel::GradBucket> chunk_buckets(const ModelDesc& model, const RunPlan& plan, const StageRange& range,
                                                std::uint64_t bucket_bytes, int grad_bytes) {
  const int b = plan.run.micro_batch_size;
  const bool recompute_forward = plan.run.recompute == Recompute::full && !plan.schedule.split_backward();
  const double lead =
      recompute_forward ? model.stage(b, range.num_layers, range.has_embedding, range.has_head).forward_flops : 0.0;
  return parallel::grad_buckets(backward_layers(model, b, range), bucket_bytes, grad_bytes, lead);
}

// The forward's layers of one chunk in order (the embedding, the blocks, the
// head): the forward FLOPs of each, in the backward-order list's reverse.
std::vector<double> forward_layer_costs(const ModelDesc& model, int b, const StageRange& range) {
  std::vector<double> out;
  if (range.has_embedding) out.push_back(model.embedding(b).forward_flops);
  for (int l = 0; l < range.num_layers; ++l) out.push_back(model.block(b).forward_flops);
  if (range.has_head) out.push_back(model.head(b).forward_flops);
  return out;
}

}  // namespace

ReshardWaits reshard_gather_waits(const ModelDesc& model, int micro_batch, const StageRange& range, double forward_s,
                                  double backward_s, int replicas, int param_bytes, const parallel::Link& link) {
  const std::vector<parallel::GradLayer> back = backward_layers(model, micro_batch, range);  // backward order
  std::vector<double> gather, forward_cost = forward_layer_costs(model, micro_batch, range);
  double forward_total = 0.0, backward_total = 0.0;
  for (double c : forward_cost) forward_total += c;
  for (const parallel::GradLayer& l : back) {
    backward_total += l.cost;
    gather.push_back(parallel::ring_time_s(parallel::Collective::all_gather,
                                           static_cast<std::uint64_t>(l.params) * static_cast<std::uint64_t>(param_bytes),
                                           replicas, link.latency_s, link.gbps));
  }
  ReshardWaits w;
  for (double g : gather) w.gathers_s += g;
  std::vector<double> compute;
  for (double c : forward_cost) compute.push_back(forward_total > 0.0 ? forward_s * c / forward_total : 0.0);
  w.forward_s = parallel::prefetched_gather_wait(compute, {gather.rbegin(), gather.rend()});  // forward order
  compute.clear();
  for (const parallel::GradLayer& l : back) compute.push_back(backward_total > 0.0 ? backward_s * l.cost / backward_total : 0.0);
  w.backward_s = parallel::prefetched_gather_wait(compute, gather);
  return w;
}

namespace {

// Rank r's chunks in the order of their first forward in its list.
std::vector<int> first_forward_order(const Schedule& sched, int r) {
  const std::vector<std::ptrdiff_t> first = first_forward_indices(sched, r);
  std::vector<int> order;
  for (int c = 0; c < sched.chunks_per_rank; ++c)
    if (first[static_cast<std::size_t>(c)] >= 0) order.push_back(c);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return first[static_cast<std::size_t>(a)] < first[static_cast<std::size_t>(b)]; });
  return order;
}

}  // namespace

namespace {

// What planning one run's synchronisation shares among its ranks.
struct SyncContext {
  SyncContext(const Job& j, RunPlan& p) : job(j), plan(p), grid(parallel::run_grid(p.run, j.device)) {}
  const Job& job;
  RunPlan& plan;
  parallel::RankGrid grid;
  int d = 1;
  StateBytes per{};
  bool sharded = false, in_forward = false, bucketed = false, resharding = false;
  parallel::Collective kind = parallel::Collective::all_reduce;
  std::uint64_t bucket_bytes = 0;
  // The model's layer costs for the buckets and waits: made once, not per
  // chunk (tune plans thousands of runs).
  std::optional<ModelDesc> model;
  std::vector<parallel::Link> links;        // per rank: its data group's
  std::vector<parallel::LinkChain> chains;  // per rank: its collectives one after another

  double ring(int r, parallel::Collective c, std::uint64_t bytes) const {
    const parallel::Link& l = links[static_cast<std::size_t>(r)];
    return parallel::ring_time_s(c, bytes, d, l.latency_s, l.gbps);
  }
};

// Rank r before the simulation: its link, FSDP resharding's waits in every
// forward and backward, its chunks' buckets, and the parameter all-gathers
// of its first forwards (launched at the step's start in the order the
// forwards need them, each first forward gated on its buckets).
void plan_rank_gathers(SyncContext& x, int r) {
  RunPlan& plan = x.plan;
  const Schedule& sched = plan.schedule;
  GradSyncPlan& g = plan.stages[static_cast<std::size_t>(r)].grad_sync;
  // Stage r's data group (every replica's stage r): within a node or across nodes.
  x.links.push_back(parallel::data_group_link(x.job.device, plan.run, x.grid.rank({r, 0, 0})));
  g.inter_node = x.links.back().inter_node;
  for (int c = 0; c < sched.chunks_per_rank && x.resharding; ++c) {
    const auto v = static_cast<std::size_t>(sched.virtual_stage(r, c));
    const ReshardWaits w = reshard_gather_waits(*x.model, plan.run.micro_batch_size, plan.partition.stages.at(v),
                                                plan.costs.forward[v], plan.costs.backward[v], x.d, x.per.params,
                                                x.links.back());
    plan.costs.forward_wait[v] = w.forward_s;
    plan.costs.backward_wait[v] = w.backward_s;
    const double m = plan.run.num_microbatches;
    g.gather_wait_s += m * (w.forward_s + w.backward_s);
    g.gather_ring_s += 2.0 * m * w.gathers_s;
  }
  if (!x.bucketed) return;
  g.buckets.assign(static_cast<std::size_t>(sched.chunks_per_rank), {});
  for (int c = 0; c < sched.chunks_per_rank; ++c) {
    const StageRange& range = plan.partition.stages.at(static_cast<std::size_t>(sched.virtual_stage(r, c)));
    g.buckets[static_cast<std::size_t>(c)] = chunk_buckets(*x.model, plan, range, x.bucket_bytes, x.per.grads);
  }
  if (!x.in_forward) return;
  for (int c : first_forward_order(sched, r)) {
    const auto v = static_cast<std::size_t>(sched.virtual_stage(r, c));
    const auto& buckets = g.buckets[static_cast<std::size_t>(c)];
    const auto forward = forward_layer_costs(*x.model, plan.run.micro_batch_size, plan.partition.stages.at(v));
    for (const parallel::ParamGather& pg : parallel::param_gathers(buckets, forward)) {
      GradSyncPlan::Gather ga{c, pg, static_cast<std::uint64_t>(buckets[static_cast<std::size_t>(pg.bucket)].params) *
                                         static_cast<std::uint64_t>(x.per.params)};
      ga.ring_s = x.ring(r, parallel::Collective::all_gather, ga.bytes);
      ga.end_s = x.chains[static_cast<std::size_t>(r)].add(0.0, ga.ring_s);
      plan.costs.first_forward_gates[v].push_back({pg.at, ga.end_s});
      g.gather_ring_s += ga.ring_s;
      g.gathers.push_back(ga);
    }
  }
}

// Rank r after the (gated) simulation `sim`: its reduce-grad actions'
// reductions on the link from `launches` (in the runtime's order), the
// parameter all-gather after the optimizer where there is one, its exposed
// part; raises the plan's step to their end.
void plan_rank_reductions(SyncContext& x, int r, const SimResult& sim, const std::vector<SyncLaunch>& launches) {
  RunPlan& plan = x.plan;
  const Schedule& sched = plan.schedule;
  GradSyncPlan& g = plan.stages[static_cast<std::size_t>(r)].grad_sync;
  const double last_end = sim.last_end[static_cast<std::size_t>(r)];
  // kGradBucketBytes pieces of `bytes` on `chain` after `launch`, each its
  // ring time. Returns their ring time alone.
  auto pieces = [&](parallel::LinkChain& chain, double launch, std::uint64_t bytes, parallel::Collective c) {
    double alone = 0.0;
    for (std::uint64_t off = 0; off < bytes; off += parallel::kGradBucketBytes) {
      const double t = x.ring(r, c, std::min(parallel::kGradBucketBytes, bytes - off));
      chain.add(launch, t);
      alone += t;
    }
    return alone;
  };
  parallel::LinkChain& chain = x.chains[static_cast<std::size_t>(r)];
  parallel::LinkChain gather;
  for (const SyncLaunch& l : launches) {
    const auto v = static_cast<std::size_t>(sched.virtual_stage(r, l.chunk));
    const auto params = static_cast<std::uint64_t>(plan.stage_costs.at(v).params);
    const auto bytes = params * static_cast<std::uint64_t>(x.per.grads);
    g.bytes += static_cast<std::int64_t>(bytes);
    GradSyncPlan::Reduce red;
    red.chunk = l.chunk;
    red.launch_s = l.action_end;
    red.bytes = static_cast<std::int64_t>(bytes);
    if (plan.sync.inside) {
      const auto& buckets = g.buckets[static_cast<std::size_t>(l.chunk)];
      // A B's compute starts after its wait for FSDP's gathers (none before a W).
      const double computes =
          l.action_start + (x.resharding && !sched.split_backward() ? plan.costs.backward_wait[v] : 0.0);
      for (std::size_t k = 0; k < buckets.size(); ++k) {
        const double launch = computes + buckets[k].ready * (l.action_end - computes);
        if (k == 0) red.launch_s = launch;
        const double t = x.ring(r, x.kind, buckets[k].bytes);
        chain.add(launch, t);
        red.ring_s += t;
        red.bucket_launch_s.push_back(launch);
        red.bucket_ring_s.push_back(t);
      }
    } else {
      red.ring_s = pieces(chain, l.action_end, bytes, x.kind);
    }
    red.end_s = chain.end();
    g.reduce.push_back(red);
    // Sharded without gathers inside the forwards: the parameters all-gathered after the optimizer, chunk by chunk.
    if (x.sharded && !x.in_forward && !x.resharding)
      pieces(gather, 0.0, params * static_cast<std::uint64_t>(x.per.params), parallel::Collective::all_gather);
  }
  // The first launch: the step's start where parameters are gathered inside
  // the forwards, else the reductions' first (each bucket at or after its action's start).
  g.launch_s = x.in_forward || x.resharding ? 0.0 : g.reduce.empty() ? last_end : g.reduce.front().launch_s;
  g.end_s = std::max(chain.end(), g.launch_s);
  g.gather_s = gather.end();
  g.exposed_s = std::max(0.0, g.end_s - last_end);
  plan.step_s = std::max(plan.step_s, std::max(last_end, g.end_s));
}

}  // namespace

void plan_grad_sync(const Job& job, RunPlan& plan) {
  plan.step_s = plan.simulated.makespan;
  const int d = plan.run.grad_group();  // the replicas, times the context ranks
  if (d <= 1 || plan.run.mode != RunMode::train) return;
  const Schedule& sched = plan.schedule;
  plan.sync = make_sync_schedule(sched, plan.run.grad_sync != GradSync::after_flush, plan.run.grad_sync == GradSync::overlap);
  validate_sync_schedule(sched, plan.sync);
  SyncContext x(job, plan);
  x.d = d;
  x.per = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  x.sharded = shards_optimizer(plan.run);
  x.in_forward = gathers_in_first_forward(plan.run);
  x.bucketed = plan.sync.inside || x.in_forward;
  x.resharding = reshards_every_action(plan.run);
  x.kind = x.sharded ? parallel::Collective::reduce_scatter : parallel::Collective::all_reduce;
  x.bucket_bytes = plan.run.grad_bucket_bytes > 0 ? static_cast<std::uint64_t>(plan.run.grad_bucket_bytes)
                                                  : parallel::default_grad_bucket_bytes(d, x.per.grads);
  if (x.bucketed) plan.grad_bucket_bytes = x.bucket_bytes;
  if (x.bucketed || x.resharding) x.model.emplace(job.model, plan.storage_dtype, tensor_split(plan.run));
  x.chains.resize(static_cast<std::size_t>(sched.num_ranks));
  const auto V = static_cast<std::size_t>(sched.num_virtual_stages());
  if (x.in_forward) plan.costs.first_forward_gates.assign(V, {});
  if (x.resharding) {
    plan.costs.forward_wait.assign(V, 0.0);
    plan.costs.backward_wait.assign(V, 0.0);
  }
  for (int r = 0; r < sched.num_ranks; ++r) plan_rank_gathers(x, r);
  // When each action ended: the cost-weighted simulation again (with the
  // gathers' waits), with its timeline.
  const SimResult sim = simulate_checked(sched, plan.costs, true);
  const auto launch_times = sync_launch_times(sched, sim, plan.sync);
  for (int r = 0; r < sched.num_ranks; ++r) plan_rank_reductions(x, r, sim, launch_times[static_cast<std::size_t>(r)]);
  // What each rank's first forwards waited for their gathers.
  if (x.in_forward)
    for (const TimedAction& t : sim.timeline) {
      const auto v = static_cast<std::size_t>(sched.virtual_stage(t.rank, t.action.chunk));
      if (t.action.kind == ActionKind::F)
        plan.stages[static_cast<std::size_t>(t.rank)].grad_sync.gather_wait_s +=
            std::max(0.0, t.end - t.start - plan.costs.forward[v]);
    }
}

}  // namespace pipebench
