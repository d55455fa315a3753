// The `sim` backend: no math. Each action takes its modelled duration —
// slept to an absolute deadline (device.sim_clock = "wall"), or added to the
// rank's virtual clock ("virtual"; Backend::clock()): FLOPs of the stage (model.hpp) at [device]
// sim_flops_per_s; the optimizer at 2 (SGD) or 12 (AdamW) FLOPs per
// parameter. Memory is accounted, never allocated, so a 70B model "runs" on
// a laptop. Boundary tensors are modelled (logical size only).
//
// Accounting: build reserves params, and for training grads and optimizer
// state (model.hpp sizes), plus the communication buffers of
// ModelDesc::comm_bytes (as the cpu backend allocates them). forward(mb)
// reserves the micro-batch's activation bytes; training releases them in
// backward(mb), or, when the schedule splits the backward (B and W then take
// half the backward time each), B reserves the output gradients W needs
// (Cost::split_stash_bytes) and weight_grad(mb) releases both; inference
// releases them at the end of forward(mb). With recomputation, forward holds
// one piece's activations at a time (ModelDesc::recompute_piece_bytes) and
// keeps only the pieces' inputs (ModelDesc::recompute_kept_bytes) after it
// runs; backward holds one piece's again while it runs forward + backward.
#pragma once

#include "pipebench/backends/backend.hpp"

namespace pipebench {

// The factor on one modelled duration: device.sim_load x log-normal noise
// exp(sigma*z - sigma^2/2), sigma = device.sim_jitter, z a standard normal
// drawn from (sim_jitter_seed, rank, step, microbatch, action) alone (job.hpp).
// `action`: 0 forward, 1 backward (input gradient), 2 weight gradient,
// 3 optimizer (microbatch -1); plus 4 x chunk for chunks after the first.
double sim_machine_factor(const DeviceSpec& device, int rank, int step, int microbatch, int action);

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const Job& job, int rank);

  double take_tensor_comm_s() override { return std::exchange(tensor_comm_s_, 0.0); }
  std::string_view name() const override { return "sim"; }
  bool computes_loss() const override { return false; }
  void build(const StageSpec& spec) override;
  std::pair<int, int> built_layers() const override { return layers_; }
  std::int64_t built_params() const override { return cost_.params; }
  void begin_step(int step, double deadline_s) override;
  void forward(int step, int microbatch, int chunk) override;
  void backward(int step, int microbatch, int chunk) override;
  void weight_grad(int step, int microbatch, int chunk) override;
  double loss(int microbatch) const override;
  void grad_sq_norm_by_piece(std::vector<double>&) const override {}
  void optimizer_step(int step, double grad_scale) override;
  FlatRegion gradients(int chunk) override;
  FlatRegion parameters(int chunk) override;
  Buffer recv_buffer(ActionKind kind, int microbatch, int chunk) override;
  Buffer send_buffer(ActionKind kind, int microbatch, int chunk) override;
  const MemoryTracker& memory() const override { return memory_; }
  int peak_live_activations() const override { return peak_live_; }
  void set_forward_gates(int chunk, std::vector<Gate> gates) override;
  double take_gate_wait_s() override { return std::exchange(gate_wait_s_, 0.0); }
  const std::vector<double>& gate_waits() const override { return gate_waits_; }

 private:
  // Takes `seconds` x sim_machine_factor on the clock: sleeps (the deadline
  // permitting) or advances the virtual clock; with `gates` (on the run's
  // clock) waiting at them inside it (gated_end: gate_wait_s_, gate_waits_).
  // `wait`: modelled seconds inside it waiting for FSDP's per-layer gathers (× sim_load; gate_wait_s_).
  void busy_for(double seconds, const char* what, int microbatch, int action, const std::vector<Gate>* gates = nullptr,
                double wait = 0.0);
  void release_activation(int chunk);

  struct Chunk {
    // Modelled, per micro-batch (plan.hpp's action_seconds): F, B (the input
    // gradient with a split backward, else all of it) and W, each with its
    // tensor-parallel collectives' part.
    ActionSeconds seconds;
    std::uint64_t activation_bytes = 0;
    std::uint64_t stash_bytes = 0;  // split backward: kept from B to W
    std::uint64_t kept_bytes = 0;   // recomputation: the pieces' inputs, kept from F to B
    std::uint64_t piece_bytes = 0;  // recomputation: the largest piece's activations
    std::uint64_t grad_bytes = 0;   // the chunk's gradients (training)
    std::uint64_t param_bytes = 0;  // its parameters (ZeRO-1's all-gather)
    ReshardWaits reshard;           // fsdp resharding after the forward: each F's and B's gather waits
    // The activations a running micro-batch holds: one piece's with recomputation.
    std::uint64_t held_bytes(bool recompute) const { return recompute ? piece_bytes : activation_bytes; }
  };
  // Modelled seconds in tensor-parallel collectives since the last take (× sim_load).
  void count_tensor_comm(double seconds) { tensor_comm_s_ += seconds * job_.device.sim_load; }
  double tensor_comm_s_ = 0.0;
  const Job& job_;
  MemoryTracker memory_;
  StageSpec spec_;
  Cost cost_;                  // all chunks
  std::vector<Chunk> chunks_;
  std::pair<int, int> layers_{-1, -1};
  std::uint64_t boundary_bytes_ = 0;
  double optimizer_s_ = 0.0;
  double deadline_s_ = 0.0;
  std::vector<std::vector<Gate>> gates_;  // per chunk, for its next forward
  double gate_wait_s_ = 0.0;
  std::vector<double> gate_waits_;
  int rank_ = 0, step_ = 0;
  int live_ = 0, peak_live_ = 0;
};

}  // namespace pipebench
