// A pipeline run in one process, for backend tests without MPI: one backend
// per rank of a run's plan, built from stage_spec(), trained step by step
// through the plan's own schedule. Each rank runs its actions in its order;
// the driver goes round the ranks, letting each run actions while their
// inputs exist (the executor's dependencies, schedule.hpp), so every rank
// sees exactly the action order it sees under MPI. Boundary tensors between
// ranks go host to host, send_buffer() to recv_buffer() just before the
// receiving action (the MPI transport's path, host staging for the cuda
// backend); within a rank (the turn of a V) through Backend::hand_over().
// Then the step's gradient norm (per piece, as the runner reduces it),
// clipping and the optimizer, as in runner.cpp.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipebench/backends/backend.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/plan/memory.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/schedule/schedule.hpp"

namespace pipebench::testing {

struct InProcessStep {
  double loss = 0.0;       // mean over micro-batches
  double grad_norm = 0.0;  // before clipping
};

class InProcessPipeline {
 public:
  using MakeBackend = std::function<std::unique_ptr<Backend>(int rank)>;

  InProcessPipeline(const Job& job, const RunPlan& plan, const MakeBackend& make) : job_(job), plan_(plan) {
    for (int r = 0; r < plan.run.pipeline_size; ++r) {
      ranks_.push_back(make(r));
      ranks_.back()->build(stage_spec(plan, r, 0, false));
    }
  }

  Backend& rank(int r) { return *ranks_.at(static_cast<std::size_t>(r)); }
  int size() const { return static_cast<int>(ranks_.size()); }

  InProcessStep step(int step) {
    const Schedule& s = plan_.schedule;
    const int V = s.num_virtual_stages(), m = s.num_microbatches;
    for (auto& b : ranks_) b->begin_step(step, 1e30);
    // done[kind][v * m + mb]: the action ran (F and B; W has no dependants).
    std::vector<char> done_f(static_cast<std::size_t>(V * m), 0), done_b(done_f.size(), 0);
    std::vector<std::size_t> next(ranks_.size(), 0);
    std::size_t left = s.total_actions();
    while (left > 0) {
      std::size_t ran = 0;
      for (int r = 0; r < size(); ++r) {
        const auto& list = s.actions[static_cast<std::size_t>(r)];
        std::size_t& k = next[static_cast<std::size_t>(r)];
        // A unit (an overlapped forward-backward: both inputs first) runs once all its actions are ready.
        while (k < list.size()) {
          const std::size_t n = unit_size(list, k);
          bool go = true;
          for (std::size_t i = k; i < k + n; ++i) go = go && ready(list[i], r, done_f, done_b);
          if (!go) break;
          for (const std::size_t end = k + n; k < end; ++k, ++ran) {
            const Action& a = list[k];
            run(a, r, step);
            const auto at = static_cast<std::size_t>(s.virtual_stage(r, a.chunk) * m + a.microbatch);
            if (a.kind == ActionKind::F) done_f[at] = 1;
            if (a.kind == ActionKind::B) done_b[at] = 1;
          }
        }
      }
      if (ran == 0) throw std::logic_error("in-process pipeline: no rank can go on (the schedule deadlocks)");
      left -= ran;
    }
    InProcessStep out;
    const int last = s.rank_of(V - 1);
    for (int mb = 0; mb < m; ++mb) out.loss += rank(last).loss(mb) / m;
    if (plan_.run.mode != RunMode::train) return out;
    std::vector<double> sq(static_cast<std::size_t>(job_.model.layers) + 2, 0.0);
    for (auto& b : ranks_) b->grad_sq_norm_by_piece(sq);
    double total = 0.0;
    for (double x : sq) total += x;
    out.grad_norm = std::sqrt(total);
    const double clip = job_.train.grad_clip;
    const double scale = clip > 0 && out.grad_norm > clip ? clip / out.grad_norm : 1.0;
    for (auto& b : ranks_) b->optimizer_step(step, scale);
    return out;
  }

 private:
  bool ready(const Action& a, int r, const std::vector<char>& done_f, const std::vector<char>& done_b) const {
    const Schedule& s = plan_.schedule;
    const int v = s.virtual_stage(r, a.chunk), m = s.num_microbatches, V = s.num_virtual_stages();
    auto at = [&](int stage) { return static_cast<std::size_t>(stage * m + a.microbatch); };
    switch (a.kind) {
      case ActionKind::F: return v == 0 || done_f[at(v - 1)];
      case ActionKind::B: return done_f[at(v)] && (v == V - 1 || done_b[at(v + 1)]);
      case ActionKind::W: return done_b[at(v)];
    }
    return false;
  }

  // The action's input from virtual stage `from` (its sender's send buffer
  // still holds it), then the action.
  void run(const Action& a, int r, int step) {
    const Schedule& s = plan_.schedule;
    const int v = s.virtual_stage(r, a.chunk);
    const bool has_input = a.kind == ActionKind::F ? v > 0 : a.kind == ActionKind::B && v < s.num_virtual_stages() - 1;
    if (has_input) {
      const int from = a.kind == ActionKind::F ? v - 1 : v + 1;
      Backend& sender = rank(s.rank_of(from));
      if (s.rank_of(from) == r) {
        rank(r).hand_over(a.kind, a.microbatch, s.chunk_of(from), a.chunk);
      } else {
        const Buffer src = sender.send_buffer(a.kind, a.microbatch, s.chunk_of(from));
        const Buffer dst = rank(r).recv_buffer(a.kind, a.microbatch, a.chunk);
        if (src.bytes != dst.bytes || src.logical_bytes != dst.logical_bytes)
          throw std::logic_error("in-process pipeline: send and receive buffers differ in size");
        if (src.bytes) std::memcpy(dst.data, src.data, src.bytes);
      }
    }
    Backend& b = rank(r);
    switch (a.kind) {
      case ActionKind::F: b.forward(step, a.microbatch, a.chunk); break;
      case ActionKind::B: b.backward(step, a.microbatch, a.chunk); break;
      case ActionKind::W: b.weight_grad(step, a.microbatch, a.chunk); break;
    }
  }

  const Job& job_;
  const RunPlan& plan_;
  std::vector<std::unique_ptr<Backend>> ranks_;
};

// "" when rank r's memory tracker peaks, per category, and its peak live
// activations equal the plan's (StagePlan), else what differs.
inline std::string memory_vs_plan(const RunPlan& plan, int r, const Backend& b) {
  const StagePlan& sp = plan.stages.at(static_cast<std::size_t>(r));
  const MemoryTracker& t = b.memory();
  std::string out;
  auto expect = [&](const char* what, std::int64_t got, std::int64_t want) {
    if (got != want) out += "rank " + std::to_string(r) + " " + what + ": " + std::to_string(got) + " != plan " + std::to_string(want) + "; ";
  };
  expect("params", static_cast<std::int64_t>(t.peak(MemCategory::params)), sp.params_bytes);
  expect("grads", static_cast<std::int64_t>(t.peak(MemCategory::grads)), sp.grads_bytes);
  expect("optimizer", static_cast<std::int64_t>(t.peak(MemCategory::optimizer)), sp.optimizer_bytes);
  expect("activations", static_cast<std::int64_t>(t.peak(MemCategory::activations)), sp.activations_peak_bytes);
  expect("comm", static_cast<std::int64_t>(t.peak(MemCategory::comm)), sp.comm_bytes);
  expect("workspace", static_cast<std::int64_t>(t.peak(MemCategory::workspace)), sp.workspace_bytes);
  // Inference holds one micro-batch's working set at a time (tests/mpi/verify_results.cpp alike).
  expect("peak live activations", b.peak_live_activations(), plan.run.mode == RunMode::train ? sp.peak_live_activations : 1);
  return out;
}

}  // namespace pipebench::testing
