#include "pipebench/runtime/executor.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <unistd.h>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

FaultInjection FaultInjection::from_env() {
  FaultInjection f;
  const char* env = std::getenv("PIPEBENCH_FAULT");
  if (!env || !*env) return f;
  const std::string s = env;
  const auto at = s.find('@'), c1 = s.find(':', at == std::string::npos ? 0 : at), c2 = s.rfind(':');
  auto bad = [&] { return ConfigError(fmt::format("PIPEBENCH_FAULT=\"{}\": expected KIND@RUN:RANK:STEP with KIND nan|error", s)); };
  if (at == std::string::npos || c1 == std::string::npos || c2 == c1) throw bad();
  const std::string kind = s.substr(0, at);
  if (kind == "nan") f.kind = Kind::nan;
  else if (kind == "error") f.kind = Kind::error;
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

// One step on this rank; appends to rec.steps / rec.events.
void run_step(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
              const ExecOptions& opt, int step, RankRecord& rec) {
  const Schedule& sched = plan.schedule;
  const int rank = comm.rank();
  const int V = sched.num_virtual_stages();
  const bool train = plan.run.mode == RunMode::train;
  const double timeout = job.train.step_timeout_s;

  comm.set_deadline(now_s() + timeout);
  comm.barrier();
  const double t0 = now_s();
  const double deadline = t0 + timeout;
  comm.set_deadline(deadline);
  transport.begin_step(t0);
  backend.begin_step(step, deadline);

  StepRecord sr;
  double loss_sum = 0.0;
  auto add = [&sr](RecvTiming t) {
    sr.comm_wait_s += t.blocked_s;
    sr.comm_transfer_s += t.transfer_s;
  };
  // An action's compute time: the backend's device clock where it has one.
  auto finish = [&](EventRecord& ev) {
    ev.end_s = now_s() - t0;
    const double device_s = backend.last_action_device_s();
    if (device_s >= 0.0) ev.end_s = ev.start_s + device_s;
    return ev.end_s - ev.start_s;
  };
  for (const Action& a : sched.actions[static_cast<std::size_t>(rank)]) {
    const int v = sched.virtual_stage(rank, a.chunk);
    EventRecord ev{step, rank, a.kind, a.microbatch, a.chunk, 0.0, 0.0};
    switch (a.kind) {
      case ActionKind::F: {
        if (v > 0) {
          const int from = sched.rank_of(v - 1);
          const int chunk = (v - 1) / sched.num_ranks;
          add(transport.recv(from, {ActionKind::F, step, a.microbatch, chunk},
                             backend.recv_buffer(ActionKind::F, a.microbatch)));
        }
        if (opt.fault.fires(FaultInjection::Kind::error, plan.run.name, rank, step))
          throw Error(fmt::format("injected error (PIPEBENCH_FAULT) on rank {} at step {}", rank, step));
        ev.start_s = now_s() - t0;
        backend.forward(step, a.microbatch);
        sr.forward_s += finish(ev);
        if (v == V - 1) {
          double l = backend.loss(a.microbatch);
          if (opt.fault.fires(FaultInjection::Kind::nan, plan.run.name, rank, step))
            l = std::numeric_limits<double>::quiet_NaN();
          else if (!backend.computes_loss())
            l = 0.0;
          if (!std::isfinite(l))
            throw NumericalError(fmt::format("rank {}: loss of micro-batch {} at step {} is {}", rank, a.microbatch,
                                             step, l));
          loss_sum += l;
        }
        if (v < V - 1)
          transport.send(sched.rank_of(v + 1), {ActionKind::F, step, a.microbatch, a.chunk},
                         backend.send_buffer(ActionKind::F, a.microbatch));
        break;
      }
      case ActionKind::B: {
        if (v < V - 1) {
          const int from = sched.rank_of(v + 1);
          const int chunk = (v + 1) / sched.num_ranks;
          add(transport.recv(from, {ActionKind::B, step, a.microbatch, chunk},
                             backend.recv_buffer(ActionKind::B, a.microbatch)));
        }
        ev.start_s = now_s() - t0;
        backend.backward(step, a.microbatch);
        sr.backward_s += finish(ev);
        if (v > 0)
          transport.send(sched.rank_of(v - 1), {ActionKind::B, step, a.microbatch, a.chunk},
                         backend.send_buffer(ActionKind::B, a.microbatch));
        break;
      }
      case ActionKind::W: {
        ev.start_s = now_s() - t0;
        backend.weight_grad(step, a.microbatch);
        sr.backward_s += finish(ev);
        break;
      }
    }
    rec.events.push_back(ev);
  }
  transport.complete_sends();

  const bool has_loss_here = rank == sched.rank_of(V - 1) && backend.computes_loss();
  sr.loss = has_loss_here ? loss_sum / sched.num_microbatches : std::numeric_limits<double>::quiet_NaN();
  sr.grad_norm = std::numeric_limits<double>::quiet_NaN();
  if (train) {
    std::vector<double> sq(static_cast<std::size_t>(job.model.layers) + 2, 0.0);
    backend.grad_sq_norm_by_piece(sq);
    comm.allreduce(sq, MPI_SUM);
    double total = 0.0;
    for (double x : sq) total += x;  // in piece order: the same sum for every split
    double scale = 1.0;
    if (backend.computes_loss()) {
      sr.grad_norm = std::sqrt(total);
      if (job.train.grad_clip > 0.0 && sr.grad_norm > job.train.grad_clip) {
        scale = job.train.grad_clip / sr.grad_norm;
        sr.clipped = true;
      }
    }
    const double s0 = now_s();
    backend.optimizer_step(step, scale);
    sr.optimizer_s = now_s() - s0;
  }
  sr.busy_s = sr.forward_s + sr.backward_s + sr.optimizer_s;
  sr.end_s = now_s() - t0;

  // Progress for rank 0: the step time (max) and loss (last stage), and busy (sum).
  std::vector<double> maxes{sr.end_s, has_loss_here ? sr.loss : -std::numeric_limits<double>::infinity()};
  std::vector<double> sums{sr.busy_s};
  comm.allreduce(maxes, MPI_MAX);
  comm.allreduce(sums, MPI_SUM);
  rec.steps.push_back(sr);
  if (rank == 0 && opt.on_step) {
    StepProgress p;
    p.step = step;
    p.warmup = step < job.train.warmup;
    p.step_time_s = maxes[0];
    p.busy_sum_s = sums[0];
    p.loss = std::isinf(maxes[1]) ? std::numeric_limits<double>::quiet_NaN() : maxes[1];
    opt.on_step(p);
  }
}

}  // namespace

RankRecord execute_run(const Job& job, const RunPlan& plan, RunComm& comm, Backend& backend, Transport& transport,
                       const ExecOptions& opt) {
  RankRecord rec;
  rec.rank = comm.rank();
  rec.hostname = host_name();
  rec.pid = static_cast<std::int64_t>(getpid());
  rec.memory_capacity_bytes = backend.memory().capacity();  // cuda: min(memory_capacity, the device)
  const int steps = job.train.warmup + job.train.repeats;
  try {
    const StageRange& range = plan.partition.stages[static_cast<std::size_t>(comm.rank())];
    backend.build(stage_spec(plan, comm.rank(), opt.transport_uses_device_memory));
    const auto built = backend.built_layers();
    rec.stage_layers = {built.first, built.second};
    rec.stage_params = backend.built_params();
    // Seed 000: check the layer range each stage actually loaded before timing anything.
    if (built.first != range.first_layer || built.second != range.last_layer())
      throw Error(fmt::format("rank {} built layers {}-{} but the plan gives it {}-{}", comm.rank(), built.first,
                              built.second, range.first_layer, range.last_layer()));
    if (!opt.dry_run)
      for (int step = 0; step < steps; ++step) run_step(job, plan, comm, backend, transport, opt, step, rec);
  } catch (const PeerAbortedError& e) {
    rec.failure = FailureKind::error;  // replaced by the origin's kind when gathered
    rec.failure_message = e.what();
    transport.abandon();
  } catch (const std::exception& e) {
    rec.failure = classify(e);
    rec.failure_is_origin = true;
    rec.failure_message = e.what();
    transport.abandon();
    comm.notify_abort();
  }
  comm.settle();
  const MemoryTracker& mem = backend.memory();
  for (int c = 0; c < kNumMemCategories; ++c)
    rec.peak_mem_by_category[static_cast<std::size_t>(c)] = mem.peak(static_cast<MemCategory>(c));
  rec.peak_mem_bytes = mem.peak_total();
  rec.peak_live_activations = backend.peak_live_activations();
  return rec;
}

}  // namespace pipebench
