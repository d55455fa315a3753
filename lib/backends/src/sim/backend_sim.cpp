#include "pipebench/backends/backend_sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/counter_random.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/parallel/shards.hpp"

namespace pipebench {

SimBackend::SimBackend(const Job& job, int rank) : job_(job), memory_(rank, job.device.memory_capacity_bytes) {
  rank_ = rank;
  if (job.device.sim_clock == SimClock::virtual_time) clock_ = RunClock::virtual_clock();
  else tighten_timer_slack();  // a modelled action must not wake up 50 us late
}

void SimBackend::build(const StageSpec& spec) {
  spec_ = spec;
  const ModelDesc model(job_.model, spec.dtype, spec.tensor);
  const bool train = spec.mode == RunMode::train;
  cost_ = Cost{};
  std::uint64_t comm = 0;
  const StateBytes per = state_bytes_per_param(job_.train.optimizer, spec.dtype);
  for (int c = 0; c < spec.num_chunks(); ++c) {
    const StageRange& r = spec.chunks[static_cast<std::size_t>(c)];
    const Cost cost = model.stage(spec.micro_batch_size, r.num_layers, r.has_embedding, r.has_head);
    cost_ += cost;
    chunks_.push_back({action_seconds(job_, model, spec.micro_batch_size, r, spec.tensor_link, spec.split_backward,
                                     spec.context_group),
                       static_cast<std::uint64_t>(cost.activation_bytes),
                       static_cast<std::uint64_t>(cost.split_stash_bytes),
                       static_cast<std::uint64_t>(
                           model.recompute_kept_bytes(spec.micro_batch_size, r.num_layers, r.has_embedding, r.has_head)),
                       static_cast<std::uint64_t>(
                           model.recompute_piece_bytes(spec.micro_batch_size, r.num_layers, r.has_embedding, r.has_head)),
                       static_cast<std::uint64_t>(cost.params) * static_cast<std::uint64_t>(per.grads),
                       static_cast<std::uint64_t>(cost.params) * static_cast<std::uint64_t>(per.params), ReshardWaits{}});
    comm += static_cast<std::uint64_t>(
        model.comm_bytes(spec.micro_batch_size, spec.send_pool(ActionKind::B, c), spec.send_pool(ActionKind::F, c),
                         spec.receives(c), spec.sends(c), train));
  }
  if (spec.sharding == OptimizerSharding::fsdp && spec.reshard_after_forward)
    for (int c = 0; c < spec.num_chunks(); ++c) {
      Chunk& k = chunks_[static_cast<std::size_t>(c)];
      const double backward = spec.recompute ? k.seconds.forward + k.seconds.backward : k.seconds.backward;
      k.reshard = reshard_gather_waits(model, spec.micro_batch_size, spec.chunks[static_cast<std::size_t>(c)],
                                       k.seconds.forward, backward, spec.grad_group(), per.params, spec.data_link);
    }
  layers_ = {spec.chunks.front().first_layer, spec.chunks.back().last_layer()};
  boundary_bytes_ = static_cast<std::uint64_t>(model.boundary_bytes(spec.micro_batch_size));
  // ZeRO-1: the optimizer state and step of this replica's shard (parallel/shards.hpp), padded.
  const std::int64_t stepped = spec.shard_optimizer ? parallel::shard_size(cost_.params, spec.grad_group()) : cost_.params;
  optimizer_s_ = optimizer_seconds(job_, spec.dtype, stepped);

  std::int64_t largest = 0;
  for (const StageRange& r : spec.chunks)
    largest = std::max(largest, model.largest_piece_params(r.num_layers, r.has_embedding, r.has_head));
  const TrainingState state =
      train ? training_state_bytes(spec.sharding, spec.grad_group(), spec.reshard_after_forward, cost_.params, per, largest)
            : TrainingState{cost_.params * per.params, 0, 0};
  memory_.reserve(MemCategory::params, static_cast<std::uint64_t>(state.params), "parameters");
  if (train) {
    memory_.reserve(MemCategory::grads, static_cast<std::uint64_t>(state.grads), "gradients");
    memory_.reserve(MemCategory::optimizer, static_cast<std::uint64_t>(state.optimizer), "optimizer state");
  }
  if (comm > 0) memory_.reserve(MemCategory::comm, comm, "boundary send/receive buffers");
}

double sim_machine_factor(const DeviceSpec& d, int rank, int step, int microbatch, int action) {
  if (d.sim_jitter <= 0.0) return d.sim_load;
  // Counter-based: a duration depends only on its coordinates, never on what ran before it.
  std::uint64_t h = splitmix64(d.sim_jitter_seed);
  for (const std::uint64_t c : {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(step),
                                static_cast<std::uint64_t>(microbatch), static_cast<std::uint64_t>(action)})
    h = splitmix64(h ^ c);
  const double z = standard_normal(h, splitmix64(h));
  const double sigma = d.sim_jitter;
  return d.sim_load * std::exp(sigma * z - 0.5 * sigma * sigma);  // mean 1: noise, not a slowdown
}

void SimBackend::busy_for(double seconds, const char* what, int microbatch, int action, const std::vector<Gate>* gates,
                          double wait) {
  seconds *= sim_machine_factor(job_.device, rank_, step_, microbatch, action);
  if (wait > 0.0) {
    gate_wait_s_ = wait * job_.device.sim_load;
    seconds += gate_wait_s_;
  }
  if (gates && !gates->empty()) {
    const double at = clock_.now();
    const double until = gated_end(at, seconds, *gates, &gate_waits_);
    gate_wait_s_ = until - at - seconds;
    seconds = until - at;
  }
  if (clock_.is_virtual()) {  // modelled time passes at once; the step timeout bounds real time only
    clock_.sleep_until(clock_.now() + seconds);
    return;
  }
  const double start = now_s();
  const double end = start + seconds;
  if (end > deadline_s_) {
    sleep_until_s(deadline_s_);
    throw StepTimeoutError(fmt::format("{} modelled at {:.3f} s ran past the step timeout", what, seconds));
  }
  sleep_until_s(end);
}

void SimBackend::set_forward_gates(int chunk, std::vector<Gate> gates) {
  if (gates_.size() <= static_cast<std::size_t>(chunk)) gates_.resize(static_cast<std::size_t>(chunk) + 1);
  gates_[static_cast<std::size_t>(chunk)] = std::move(gates);
}

void SimBackend::begin_step(int step, double deadline_s) {
  step_ = step;
  deadline_s_ = deadline_s;
}

// The jitter coordinate of an action: chunk 0 keeps the single-chunk numbers
// (0 forward, 1 backward, 2 weight gradient), chunk c adds 4c.
namespace {
int action_id(int kind, int chunk) { return kind + 4 * chunk; }
}  // namespace

void SimBackend::forward(int /*step*/, int microbatch, int chunk) {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  if (spec_.recompute) memory_.reserve(MemCategory::activations, c.kept_bytes, "recomputation inputs");
  memory_.reserve(MemCategory::activations, c.held_bytes(spec_.recompute), [&] {
    return chunk == 0 ? fmt::format("activations of micro-batch {}", microbatch)
                      : fmt::format("activations of micro-batch {} (chunk {})", microbatch, chunk);
  });
  ++live_;
  peak_live_ = std::max(peak_live_, live_);
  std::vector<Gate> gates;
  if (static_cast<std::size_t>(chunk) < gates_.size()) gates = std::exchange(gates_[static_cast<std::size_t>(chunk)], {});
  gate_waits_.clear();
  busy_for(c.seconds.forward, "forward", microbatch, action_id(0, chunk), &gates, c.reshard.forward_s);
  count_tensor_comm(c.seconds.forward_comm);
  // Kept: the pieces' inputs only.
  if (spec_.recompute) memory_.release(MemCategory::activations, c.held_bytes(true));
  if (spec_.mode == RunMode::inference) release_activation(chunk);
}

void SimBackend::release_activation(int chunk) {
  memory_.release(MemCategory::activations, chunks_.at(static_cast<std::size_t>(chunk)).held_bytes(spec_.recompute));
  --live_;
}

void SimBackend::backward(int /*step*/, int microbatch, int chunk) {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  if (spec_.split_backward) {
    memory_.reserve(MemCategory::activations, c.stash_bytes, [&] {
      return fmt::format("output gradients of micro-batch {} kept for its weight gradient", microbatch);
    });
    busy_for(c.seconds.backward, "backward (input gradient)", microbatch, action_id(1, chunk), nullptr, c.reshard.backward_s);
    count_tensor_comm(c.seconds.backward_comm);
    return;
  }
  if (spec_.recompute) {
    memory_.reserve(MemCategory::activations, c.held_bytes(true),
                    [&] { return fmt::format("recomputed activations of micro-batch {}", microbatch); });
    busy_for(c.seconds.forward + c.seconds.backward, "backward (with recomputation)", microbatch, action_id(1, chunk), nullptr,
             c.reshard.backward_s);
    count_tensor_comm(c.seconds.forward_comm + c.seconds.backward_comm);
    memory_.release(MemCategory::activations, c.kept_bytes);
    release_activation(chunk);
    return;
  }
  busy_for(c.seconds.backward, "backward", microbatch, action_id(1, chunk), nullptr, c.reshard.backward_s);
  count_tensor_comm(c.seconds.backward_comm);
  release_activation(chunk);
}

void SimBackend::weight_grad(int /*step*/, int microbatch, int chunk) {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  busy_for(c.seconds.weight, "backward (weight gradient)", microbatch, action_id(2, chunk));
  count_tensor_comm(c.seconds.weight_comm);
  memory_.release(MemCategory::activations, c.stash_bytes);
  release_activation(chunk);
}

double SimBackend::loss(int /*microbatch*/) const { return std::numeric_limits<double>::quiet_NaN(); }

void SimBackend::optimizer_step(int /*step*/, double /*grad_scale*/) {
  busy_for(optimizer_s_, "optimizer step", -1, 3);
}

FlatRegion SimBackend::gradients(int chunk) { return {nullptr, 0, chunks_.at(static_cast<std::size_t>(chunk)).grad_bytes}; }
FlatRegion SimBackend::parameters(int chunk) { return {nullptr, 0, chunks_.at(static_cast<std::size_t>(chunk)).param_bytes}; }

Buffer SimBackend::recv_buffer(ActionKind, int, int) { return {nullptr, 0, boundary_bytes_}; }
Buffer SimBackend::send_buffer(ActionKind, int, int) { return {nullptr, 0, boundary_bytes_}; }

}  // namespace pipebench
