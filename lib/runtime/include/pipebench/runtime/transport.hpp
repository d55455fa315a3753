// Moving stage-boundary tensors between ranks. The executor calls send()
// after an F (activation to the next stage) or a B (input gradient to the
// previous stage) and recv() before the action that needs one. An NCCL
// transport will implement the same interface.
#pragma once

#include "pipebench/backends/backend.hpp"
#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// Which tensor: F = activation of (microbatch, chunk), B = its gradient.
struct BoundaryKey {
  ActionKind kind = ActionKind::F;
  int step = 0;
  int microbatch = 0;
  int chunk = 0;  // the chunk of the *sending* virtual stage
};

// Seconds a recv() blocked: in all, and the part after the sender had the
// tensor ready (its header arrived), i.e. moving the payload.
struct RecvTiming {
  double blocked_s = 0.0;
  double transfer_s = 0.0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // `step_start_s` is this rank's now_s() right after the step barrier.
  virtual void begin_step(double step_start_s) = 0;
  // Starts sending; returns at once. The buffer must stay valid until
  // complete_sends().
  virtual void send(int peer, const BoundaryKey& key, const Buffer& buf) = 0;
  // Blocks until the tensor `key` from `peer` is in `buf`. Verifies that
  // what arrived is what was expected.
  virtual RecvTiming recv(int peer, const BoundaryKey& key, const Buffer& buf) = 0;
  // Waits for the send of `key` to `peer` made this step, whose buffer is
  // then free for another tensor. The executor calls it only where the rank
  // knows the tensor arrived (schedule/send_slots.hpp), so it does not wait
  // on the peer.
  virtual void complete_send(int peer, const BoundaryKey& key) = 0;
  // Waits for every send of this step.
  virtual void complete_sends() = 0;
  // After a failure: drops pending sends (receives never outlive recv()).
  virtual void abandon() = 0;
};

}  // namespace pipebench
