#include "pipebench/runtime/executor.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/runtime/data_group_nccl.hpp"
#include "pipebench/runtime/grad_sync.hpp"
#include "pipebench/runtime/tensor_group_nccl.hpp"
#include "pipebench/schedule/send_slots.hpp"

namespace pipebench {

FaultInjection FaultInjection::from_env() {
  FaultInjection f;
  const char* env = std::getenv("PIPEBENCH_FAULT");
  if (!env || !*env) return f;
  const std::string s = env;
  const auto at = s.find('@'), c1 = s.find(':', at == std::string::npos ? 0 : at), c2 = s.rfind(':');
  auto bad = [&] { return ConfigError(fmt::format("PIPEBENCH_FAULT=\"{}\": expected KIND@RUN:RANK:STEP with KIND nan|error|sync|device|setup", s)); };
  if (at == std::string::npos || c1 == std::string::npos || c2 == c1) throw bad();
  const std::string kind = s.substr(0, at);
  if (kind == "nan") f.kind = Kind::nan;
  else if (kind == "error") f.kind = Kind::error;
  else if (kind == "sync") f.kind = Kind::sync;
  else if (kind == "device") f.kind = Kind::device;
  else if (kind == "setup") f.kind = Kind::setup;
  else throw bad();
  f.run = s.substr(at + 1, c1 - at - 1);
  try {
    f.rank = std::stoi(s.substr(c1 + 1, c2 - c1 - 1));
    f.step = std::stoi(s.substr(c2 + 1));
  } catch (const std::exception&) {
    throw bad();
  }
  return f;
}

namespace {

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

FailureKind classify(const std::exception& e) {
  if (dynamic_cast<const OutOfMemoryError*>(&e)) return FailureKind::oom;
  if (dynamic_cast<const NumericalError*>(&e)) return FailureKind::nan;
  if (dynamic_cast<const StepTimeoutError*>(&e)) return FailureKind::timeout;
  return FailureKind::error;
}

// Data parallelism: the gradient synchronisation of a rank's steps and the
// plan's reduce-grad actions (RunPlan::sync, schedule/sync_actions.hpp) as
// launches after the rank's actions.
struct SyncPlan {
  GradientSync* sync = nullptr;  // null: one replica, or inference
  bool overlap = false;          // else every launch is after the last action (and the sends' completion)
  // Per action of the rank's list: the chunks whose reduce-grad launches after it, in order.
  std::vector<std::vector<int>> launches_after;
  // grad_sync = "overlap": per chunk, its buckets, launched inside the action
  // (GradSyncPlan::buckets); empty otherwise.
  const std::vector<std::vector<parallel::GradBucket>>* buckets = nullptr;
  // Sharded parameters gathered inside the step's first forwards
  // (GradSyncPlan::gathers), in posting order; empty otherwise. Per chunk,
  // the index of its first forward in the rank's list (-1: none).
  std::vector<GradientSync::ForwardGather> gathers;
  const std::vector<std::vector<parallel::GradBucket>>* gather_buckets = nullptr;  // the chunks' buckets they gather
  std::vector<std::ptrdiff_t> first_forward;
};

SyncPlan plan_sync(const RunPlan& plan, int rank, GradientSync* sync) {
  SyncPlan sp;
  if (!sync) return sp;
  sp.sync = sync;
  sp.overlap = plan.sync.overlap;
  if (plan.sync.inside) sp.buckets = &plan.stages.at(static_cast<std::size_t>(rank)).grad_sync.buckets;
  const auto& actions = plan.schedule.actions[static_cast<std::size_t>(rank)];
  sp.launches_after.resize(actions.size());
  for (const ReduceGrad& g : plan.sync.reduce.at(static_cast<std::size_t>(rank)))
    sp.launches_after.at(static_cast<std::size_t>(g.after)).push_back(g.chunk);
  const GradSyncPlan& g = plan.stages.at(static_cast<std::size_t>(rank)).grad_sync;
  if (!g.gathers.empty()) sp.gather_buckets = &g.buckets;
  for (const GradSyncPlan::Gather& ga : g.gathers) {
    const auto& buckets = g.buckets.at(static_cast<std::size_t>(ga.chunk));
    const int pieces = buckets.back().last + 1;  // the chunk's layers (the last bucket ends with the first layer)
    sp.gathers.push_back({ga.chunk, ga.bucket.bucket, ga.bucket.at,
                          pieces - 1 - buckets.at(static_cast<std::size_t>(ga.bucket.bucket)).last, ga.bytes});
  }
  sp.first_forward = first_forward_indices(plan.schedule, rank);
  return sp;
}

// One step of one rank, alive for that step: the action loop (receive,
// compute, send), the gradient synchronisation of the replicas, then the
// gradient norm, clipping and the optimizer, then the progress line.
// Appends to rec.steps and rec.events.
class StepRun {
 public:
  StepRun(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
          const ExecOptions& opt, const SyncPlan& sync, const RankSendSlots& send_slots, int step)
      : job_(job), plan_(plan), sched_(plan.schedule), comm_(comm), backend_(backend), transport_(transport),
        clock_(backend.clock()), opt_(opt), sync_(sync), send_slots_(send_slots), step_(step), rank_(comm.rank()),
        V_(plan.schedule.num_virtual_stages()) {}

  // Returns the step's time over every rank of the run (the maximum).
  double run(RankRecord& rec, int total_steps) {
    start();
    const auto& actions = sched_.actions[static_cast<std::size_t>(rank_)];
    for (std::size_t i = 0; i < actions.size();) {
      const std::size_t n = unit_size(actions, i);
      const std::size_t first_event = rec.events.size();
      const int hooked = arm_gradient_hook(i, n);
      execute(actions, i, n, rec.events);
      if (hooked >= 0) backend_.set_gradient_hook(hooked, {});
      for (std::size_t k = 0; k < n; ++k, ++i)
        if (sync_.overlap) {
          const EventRecord& ev = rec.events[first_event + k];
          for (int chunk : sync_.launches_after[i])
            sync_.sync->launch(chunk, sync_.buckets ? &(*sync_.buckets)[static_cast<std::size_t>(chunk)] : nullptr,
                               ev.start_s, ev.end_s);
          sync_.sync->progress();
        }
    }
    transport_.complete_sends();
    if (sync_.sync) synchronise_gradients();
    const bool has_loss_here = rank_ == sched_.rank_of(V_ - 1) && backend_.computes_loss();
    sr_.loss = has_loss_here ? replicas_mean(loss_sum_ / sched_.num_microbatches) : std::numeric_limits<double>::quiet_NaN();
    sr_.grad_norm = std::numeric_limits<double>::quiet_NaN();
    if (plan_.run.mode == RunMode::train) clip_and_step();
    if (sync_.sync) sync_.sync->take_records(step_, rec.buckets);
    sr_.busy_s = sr_.forward_s + sr_.backward_s + sr_.optimizer_s;
    sr_.tensor_comm_s = backend_.take_tensor_comm_s();
    sr_.end_s = clock_.now() - t0_;
    const double step_time = report_progress(has_loss_here, total_steps);
    rec.steps.push_back(sr_);
    if (opt_.on_step_events) stream_events(rec);
    return step_time;
  }

 private:
  // The step timeout bounds real time, on every clock: a virtual clock's
  // modelled time never times out, a hang does.
  // `what` names the work just done; formatted only on a timeout.
  template <class What>
  void check_deadline(const What& what) const {
    const double elapsed = now_s() - wall_t0_;
    if (elapsed > job_.train.step_timeout_s)
      throw StepTimeoutError(fmt::format("rank {}: step {} passed the step timeout ({} s) after {} ({:.3f} s into the step)",
                                         rank_, step_, job_.train.step_timeout_s, describe(what), elapsed));
  }
  static std::string describe(const Action& a) { return to_string(a); }

  // grad_sync = "overlap": when the unit of actions [i, i + n) holds a
  // chunk's last gradient action, the backend tells each layer's final
  // gradients inside it and the chunk's buckets are posted then
  // (GradientSync::launch_ready). Returns the chunk (-1: none).
  int arm_gradient_hook(std::size_t i, std::size_t n) {
    if (!sync_.buckets) return -1;
    for (std::size_t k = i; k < i + n; ++k)
      for (int chunk : sync_.launches_after[k]) {
        const auto& buckets = (*sync_.buckets)[static_cast<std::size_t>(chunk)];
        backend_.set_gradient_hook(chunk, [this, chunk, &buckets](int pieces) {
          sync_.sync->launch_ready(chunk, buckets, pieces);
        });
        return chunk;
      }
    return -1;
  }
  static std::string describe(const char* what) { return what; }

  bool sharded() const { return sync_.sync && shards_optimizer(plan_.run); }

  // Whether forward `a` (action `index`) is its chunk's first of the step
  // with parameter gathers to wait for; if so the backend waits at them in it.
  bool gathers_before(const Action& a, std::size_t index) {
    if (sync_.gathers.empty() || sync_.first_forward[static_cast<std::size_t>(a.chunk)] != static_cast<std::ptrdiff_t>(index))
      return false;
    if (sync_.sync->modelled()) {
      backend_.set_forward_gates(a.chunk, sync_.sync->gates(a.chunk));
    } else {
      gate_wait_s_ = 0.0;
      backend_.set_forward_hook(a.chunk, [this, chunk = a.chunk](int piece) {
        gate_wait_s_ += sync_.sync->wait_gathers(chunk, piece);
      });
    }
    return true;
  }
  // FSDP resharding (modelled): what the forward or backward just run waited
  // for its layers' gathers. The wait for parameters is not compute: the
  // event starts after it, and it counts as exposed synchronisation.
  double resharded() {
    const double waited = backend_.take_gate_wait_s();
    gathers_waited_s_ += waited;
    return waited;
  }
  // After that forward: its seconds waiting for the gathers (added to the step's exposed synchronisation).
  double gathered(int chunk) {
    double waited = 0.0;
    if (sync_.sync->modelled()) {
      waited = backend_.take_gate_wait_s();
      sync_.sync->gated(chunk, backend_.gate_waits());
    } else {
      backend_.set_forward_hook(chunk, {});
      waited = std::exchange(gate_wait_s_, 0.0);
    }
    gathers_waited_s_ += waited;
    return waited;
  }

  // The replicas' gradients summed: launched after the flush unless
  // overlapped, then waited for (the exposed part).
  void synchronise_gradients() {
    if (opt_.fault.fires(FaultInjection::Kind::sync, plan_.run.name, comm_.run_rank(), step_))
      throw Error(fmt::format("injected error (PIPEBENCH_FAULT) on rank {} before its gradient synchronisation at step {}",
                              comm_.run_rank(), step_));
    if (!sync_.overlap && !sync_.launches_after.empty())
      for (int chunk : sync_.launches_after.back()) sync_.sync->launch(chunk);
    sr_.grad_sync_exposed_s = sync_.sync->complete() + gathers_waited_s_;
    backend_.gradients_synchronised();
    sr_.grad_sync_s = sync_.sync->sync_s();
    sr_.grad_sync_start_s = sync_.sync->start_s();
    sr_.grad_sync_bytes = static_cast<double>(sync_.sync->bytes());
    check_deadline("the gradient all-reduce");
  }

  // The step's loss over every replica and context rank: the mean of their
  // means, each over as many tokens (one: `mine`).
  double replicas_mean(double mine) {
    if (comm_.grad_size() == 1) return mine;
    std::vector<double> sum{mine};
    comm_.allreduce(sum, MPI_SUM, RunComm::Group::data);
    return sum[0] / comm_.grad_size();
  }

  // Every step starts together (a barrier; on a virtual clock, every rank's
  // clock moves to the latest), then runs under its deadline.
  void start() {
    const double timeout = job_.train.step_timeout_s;
    comm_.set_deadline(now_s() + timeout);
    if (clock_.is_virtual()) sync_virtual_clocks();
    else comm_.barrier();
    wall_t0_ = now_s();
    t0_ = clock_.now();
    comm_.set_deadline(wall_t0_ + timeout);
    transport_.begin_step(t0_);
    if (sync_.sync) sync_.sync->begin_step(t0_, reshards_every_action(plan_.run) || !sync_.gathers.empty());
    if (!sync_.gathers.empty()) sync_.sync->post_gathers(sync_.gathers, *sync_.gather_buckets);
    backend_.begin_step(step_, wall_t0_ + timeout);
  }

  // A collective ends when its last rank joins it: on a virtual clock,
  // every rank's clock moves to the latest of them.
  void sync_virtual_clocks() {
    if (!clock_.is_virtual()) return;
    std::vector<double> latest{clock_.now()};
    comm_.allreduce(latest, MPI_MAX, RunComm::Group::run);
    clock_.sleep_until(latest[0]);
  }

  // One unit of the rank's list (schedule.hpp, unit_size): each action's
  // input received, then the computes in order, then the outputs sent. For
  // one action that is receive, compute, send; an overlapped forward-backward
  // receives both inputs first and sends both outputs last. Appends an event
  // per action; the unit's receive waits all end at its first compute's
  // start, so they are recorded on that event (EventRecord::wait_s). After
  // the receives, the sends whose buffers this unit frees are completed
  // (send_slots.hpp: they have arrived, so this does not wait on a peer).
  void execute(const std::vector<Action>& actions, std::size_t at, std::size_t n, std::vector<EventRecord>& events) {
    const Action* unit = &actions[at];
    const std::size_t first = events.size();
    for (std::size_t k = 0; k < n; ++k) {
      const Action& a = unit[k];
      const int v = sched_.virtual_stage(rank_, a.chunk);
      double waited = 0.0;
      if (a.kind == ActionKind::F && v > 0) waited = receive(ActionKind::F, v - 1, a);
      if (a.kind == ActionKind::B && v < V_ - 1) waited = receive(ActionKind::B, v + 1, a);
      events.push_back(EventRecord{step_, rank_, a.kind, a.microbatch, a.chunk, 0.0, 0.0});
      events[first].wait_s += waited;
    }
    for (const SendRelease& r : send_slots_.releases[at])
      if (r.peer >= 0) transport_.complete_send(r.peer, {r.kind, step_, r.microbatch, r.chunk});
    for (std::size_t k = 0; k < n; ++k) compute(unit[k], events[first + k], at + k);
    for (std::size_t k = 0; k < n; ++k) {
      const Action& a = unit[k];
      const int v = sched_.virtual_stage(rank_, a.chunk);
      if (a.kind == ActionKind::F && v < V_ - 1) send(ActionKind::F, v + 1, a);
      if (a.kind == ActionKind::B && v > 0) send(ActionKind::B, v - 1, a);
    }
  }

  // Action `index` of the rank's list.
  void compute(const Action& a, EventRecord& ev, std::size_t index) {
    if (a.kind == ActionKind::F && opt_.fault.fires(FaultInjection::Kind::error, plan_.run.name, comm_.run_rank(), step_))
      throw Error(fmt::format("injected error (PIPEBENCH_FAULT) on rank {} at step {}", comm_.run_rank(), step_));
    ev.start_s = clock_.now() - t0_;
    switch (a.kind) {
      case ActionKind::F: {
        const bool gated = gathers_before(a, index);
        backend_.forward(step_, a.microbatch, a.chunk);
        ev.start_s += gated ? gathered(a.chunk) : resharded();
        sr_.forward_s += finish(ev, a);
        if (sched_.virtual_stage(rank_, a.chunk) == V_ - 1) add_loss(a.microbatch);
        break;
      }
      case ActionKind::B:
        backend_.backward(step_, a.microbatch, a.chunk);
        ev.start_s += resharded();
        sr_.backward_s += finish(ev, a);
        break;
      case ActionKind::W:
        backend_.weight_grad(step_, a.microbatch, a.chunk);
        sr_.backward_s += finish(ev, a);
        break;
    }
  }

  // The input of `kind` for action `a`, from virtual stage `from_v`: over the
  // transport from another rank (its wait and transfer count as comm time),
  // or, from a chunk of this rank (the turn of a V), handed over by the
  // backend from that chunk's send buffer, which holds it until this action. Returns the time
  // blocked (0 for the local copy).
  double receive(ActionKind kind, int from_v, const Action& a) {
    if (sched_.rank_of(from_v) == rank_) {
      backend_.hand_over(kind, a.microbatch, sched_.chunk_of(from_v), a.chunk);
      return 0.0;
    }
    const Buffer into = backend_.recv_buffer(kind, a.microbatch, a.chunk);
    const RecvTiming t =
        transport_.recv(sched_.rank_of(from_v), {kind, step_, a.microbatch, sched_.chunk_of(from_v)}, into);
    sr_.comm_wait_s += t.blocked_s;
    sr_.comm_transfer_s += t.transfer_s;
    return t.blocked_s;
  }

  void send(ActionKind kind, int to_v, const Action& a) {
    if (sched_.rank_of(to_v) == rank_) return;  // receive() copies it on this rank
    transport_.send(sched_.rank_of(to_v), {kind, step_, a.microbatch, a.chunk},
                    backend_.send_buffer(kind, a.microbatch, a.chunk));
  }

  // An action's compute time: the backend's device clock where it has one.
  // A step past its deadline ends here, even when no wait would notice it
  // (a single stage, or a rank that never waits long).
  double finish(EventRecord& ev, const Action& a) {
    ev.end_s = clock_.now() - t0_;
    check_deadline(a);
    const double device_s = backend_.last_action_device_s();
    if (device_s >= 0.0) ev.end_s = ev.start_s + device_s;
    return ev.end_s - ev.start_s;
  }

  // The last virtual stage's loss of `microbatch`; NaN/Inf ends the run.
  void add_loss(int microbatch) {
    double l = backend_.loss(microbatch);
    if (opt_.fault.fires(FaultInjection::Kind::nan, plan_.run.name, comm_.run_rank(), step_))
      l = std::numeric_limits<double>::quiet_NaN();
    else if (!backend_.computes_loss())
      l = 0.0;
    if (!std::isfinite(l))
      throw NumericalError(fmt::format("rank {}: loss of micro-batch {} at step {} is {}", rank_, microbatch, step_, l));
    loss_sum_ += l;
  }

  // The global gradient norm (summed in piece order: the same sum for every
  // split), clipping to train.grad_clip, the optimizer step.
  void clip_and_step() {
    std::vector<double> sq(static_cast<std::size_t>(job_.model.layers) + 2, 0.0);
    backend_.grad_sq_norm_by_piece(sq);
    if (sharded()) comm_.allreduce(sq, MPI_SUM, RunComm::Group::data);  // each replica summed its shard
    comm_.allreduce(sq, MPI_SUM);
    sync_virtual_clocks();
    double total = 0.0;
    for (double x : sq) total += x;
    double scale = 1.0;
    if (backend_.computes_loss()) {
      sr_.grad_norm = std::sqrt(total);
      if (job_.train.grad_clip > 0.0 && sr_.grad_norm > job_.train.grad_clip) {
        scale = job_.train.grad_clip / sr_.grad_norm;
        sr_.clipped = true;
      }
    }
    const double s0 = clock_.now();
    backend_.optimizer_step(step_, scale);
    sr_.optimizer_s = clock_.now() - s0;
    check_deadline("the optimizer step");
    // FSDP resharding gathers inside every forward and backward (modelled), the others inside the first forwards.
    if (!sharded() || !sync_.gathers.empty() || reshards_every_action(plan_.run)) return;
    // Sharded, gathered after the optimizer: every replica's parameters from their shards' owners, exposed whole.
    const double gathered = sync_.sync->gather_parameters(sched_.chunks_per_rank);
    sr_.grad_sync_s += gathered;
    sr_.grad_sync_exposed_s += gathered;
    check_deadline("the parameter all-gather");
  }

  // This step's events of every rank to run rank 0 (rank-major, each rank's
  // in order); none stay here. A rank runs its schedule's actions, so every
  // rank knows every count (virtual stages x m <= 2^22: at most 3 x 2^22
  // actions of 48 bytes, within an int).
  void stream_events(RankRecord& rec) {
    const auto p = static_cast<std::size_t>(comm_.size());
    std::vector<int> bytes(p), offsets(p);
    int total = 0;
    for (std::size_t r = 0; r < p; ++r) {
      bytes[r] = static_cast<int>(sched_.actions[r].size() * sizeof(EventRecord));
      offsets[r] = total;
      total += bytes[r];
    }
    if (rec.events.size() * sizeof(EventRecord) != static_cast<std::size_t>(bytes[static_cast<std::size_t>(rank_)]))
      throw Error(fmt::format("rank {}: {} events in step {}, the schedule has {} actions", rank_, rec.events.size(), step_,
                              sched_.actions[static_cast<std::size_t>(rank_)].size()));
    std::vector<EventRecord> all(rank_ == 0 ? static_cast<std::size_t>(total) / sizeof(EventRecord) : 0);
    comm_.gather_to_root(rec.events.data(), bytes, offsets, all.data(), "gathering the step's events");
    rec.events.clear();
    if (rank_ != 0) return;
    for (std::size_t r = 0; r < p; ++r)
      opt_.on_step_events(static_cast<int>(r), all.data() + offsets[r] / static_cast<int>(sizeof(EventRecord)),
                          static_cast<std::size_t>(bytes[r]) / sizeof(EventRecord));
  }

  // Progress for run rank 0: the step time (max) and loss (last stage), and
  // busy (sum), over every rank of the run.
  // Returns the step time (every rank gets the same maximum).
  double report_progress(bool has_loss_here, int total_steps) {
    std::vector<double> maxes{sr_.end_s, has_loss_here ? sr_.loss : -std::numeric_limits<double>::infinity()};
    std::vector<double> sums{sr_.busy_s};
    comm_.allreduce(maxes, MPI_MAX, RunComm::Group::run);
    comm_.allreduce(sums, MPI_SUM, RunComm::Group::run);
    if (comm_.run_rank() != 0 || !opt_.on_step) return maxes[0];
    StepProgress p;
    p.step = step_;
    p.total_steps = total_steps;
    p.warmup = step_ < job_.train.warmup;
    p.step_time_s = maxes[0];
    p.busy_sum_s = sums[0];
    p.loss = std::isinf(maxes[1]) ? std::numeric_limits<double>::quiet_NaN() : maxes[1];
    opt_.on_step(p);
    return maxes[0];
  }

  const Job& job_;
  const RunPlan& plan_;
  const Schedule& sched_;
  RunComm& comm_;
  Backend& backend_;
  Transport& transport_;
  RunClock& clock_;
  const ExecOptions& opt_;
  const SyncPlan& sync_;
  const RankSendSlots& send_slots_;
  const int step_, rank_, V_;
  double t0_ = 0.0;       // the step's start on the run's clock: records are relative to it
  double wall_t0_ = 0.0;  // the same on the wall clock: the step timeout counts from it
  double gate_wait_s_ = 0.0;       // the running forward's wait for its parameter gathers (real backends)
  double gathers_waited_s_ = 0.0;  // the step's forwards' waits for them
  double loss_sum_ = 0.0;
  StepRecord sr_;
};

// The steps: warmup + repeats, then, for a training run on more than one
// rank whose stability verdict is still open, on to warmup + max_repeats
// (train.max_repeats, docs/runner.md "Steps"). The step times are the run's
// maxima, which every rank holds alike: every rank decides the same.
void run_steps(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
               const ExecOptions& opt, const SyncPlan& sync_plan, const RankSendSlots& send_slots, RankRecord& rec) {
  const int warmup = job.train.warmup, planned = warmup + job.train.repeats;
  // The runs the decision judges (a single rank's is a baseline: no verdict, nothing to extend).
  const bool may_extend =
      plan.run.mode == RunMode::train && plan.run.ranks() > 1 && job.train.max_repeats > job.train.repeats;
  int steps = planned;
  std::vector<double> counted;
  for (int step = 0; step < steps; ++step) {
    const double t = StepRun(job, plan, comm, backend, transport, opt, sync_plan, send_slots, step).run(rec, steps);
    if (step >= warmup) counted.push_back(t);
    if (may_extend && step + 1 == planned && stability_test(counted).verdict == Stability::open) {
      steps = warmup + job.train.max_repeats;
      if (comm.run_rank() == 0 && opt.on_extend) opt.on_extend(job.train.repeats, job.train.max_repeats);
    }
  }
}

}  // namespace

RankRecord execute_run(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
                       const ExecOptions& opt) {
  RankRecord rec;
  rec.rank = comm.run_rank();
  rec.pipeline_rank = comm.rank();
  rec.data_rank = comm.replica();
  rec.tensor_rank = comm.tensor_rank();
  rec.context_rank = comm.context_rank();
  rec.hostname = host_name();
  rec.pid = static_cast<std::int64_t>(getpid());
  rec.memory_capacity_bytes = backend.memory().capacity();  // cuda: min(memory_capacity, the device)
  std::optional<GradientSync> sync;
  std::unique_ptr<DeviceAllReduce> data_group_nccl;
  std::unique_ptr<NcclTensorGroup> tensor_group_nccl;
  // On any failure every communicator that exists is aborted, whichever
  // step of the set-up or the run it failed in: one destroyed instead waits
  // for peers that have gone (issue 72: an out-of-memory build, which probe
  // and tune trials provoke, left the data group's to ncclCommDestroy).
  const auto abandon_all = [&] {
    transport.abandon();
    if (sync) sync->abandon();
    if (data_group_nccl) data_group_nccl->abandon();  // made before the build, which may fail (idempotent)
    if (tensor_group_nccl) tensor_group_nccl->abandon();
  };
  try {
    StageSpec spec = stage_spec(plan, comm.rank(), comm.replica(), opt.transport_uses_device_memory, comm.tensor_rank(),
                                comm.context_rank());
    spec.tensor_link = parallel::tensor_group_link(job.device, plan.run, comm.run_rank());
    spec.data_link = parallel::data_group_link(job.device, plan.run, comm.run_rank());
    spec.context_group = parallel::stage_context_group(job.device, plan.run, comm.rank());
    const bool replicated = comm.grad_size() > 1 && plan.run.mode == RunMode::train;
    // Sharded gradients are reduce-scattered over MPI (host-staged on cuda): NCCL reduces plain replicas only.
    spec.gradients_in_device_memory = replicated && opt.data_group_nccl && !shards_optimizer(plan.run);
    // Before the build, which may fail on one rank (out of memory) while its
    // replicas would wait in NCCL's initialisation, which polls nothing.
    if (spec.gradients_in_device_memory) data_group_nccl = make_nccl_all_reduce(comm);
    if (opt.tensor_group_nccl && comm.tensor_size() > 1) {
      tensor_group_nccl = make_nccl_tensor_group(comm);
      backend.set_device_tensor_group(tensor_group_nccl.get());
    }
    const int first = spec.chunks.front().first_layer, last = spec.chunks.back().last_layer();
    backend.build(spec);
    const auto built = backend.built_layers();
    rec.stage_layers = {built.first, built.second};
    rec.stage_params = backend.built_params();
    // Seed 000: check the layer range each stage actually loaded before timing anything.
    if (built.first != first || built.second != last)
      throw Error(fmt::format("rank {} built layers {}-{} but the plan gives it {}-{}", comm.rank(), built.first,
                              built.second, first, last));
    if (replicated)
      sync.emplace(comm, backend, backend.clock(), job.device,
                   parallel::data_group_link(job.device, plan.run, comm.run_rank()),
                   job.device.backend == BackendKind::sim, spec.shard_optimizer, spec.num_chunks(), data_group_nccl.get());
    const SyncPlan sync_plan = plan_sync(plan, comm.rank(), sync ? &*sync : nullptr);
    if (!opt.dry_run) run_steps(job, plan, comm, backend, transport, opt, sync_plan, spec.send_slots, rec);
  } catch (const PeerAbortedError& e) {
    rec.failure = FailureKind::error;  // replaced by the origin's kind when gathered
    rec.failure_message = e.what();
    abandon_all();
  } catch (const std::exception& e) {
    rec.failure = classify(e);
    rec.failure_is_origin = true;
    rec.failure_message = e.what();
    abandon_all();
    comm.notify_abort();
  }
  if (rec.failure != FailureKind::none) comm.keep_groups();
  comm.settle(kSettleTimeoutS);
  const MemoryTracker& mem = backend.memory();
  for (int c = 0; c < kNumMemCategories; ++c)
    rec.peak_mem_by_category[static_cast<std::size_t>(c)] = mem.peak(static_cast<MemCategory>(c));
  rec.peak_mem_bytes = mem.peak_total();
  rec.peak_live_activations = backend.peak_live_activations();
  rec.device_used_before_bytes = backend.device_used_before_bytes();
  rec.device_used_peak_bytes = backend.device_used_peak_bytes();
  backend.set_device_tensor_group(nullptr);  // the group ends with this run
  return rec;
}

}  // namespace pipebench
