// Every transport call checked against the schedule's plan of transfers.
//
// p2p_groups.hpp derives, from the schedule alone, the order in which a rank
// sends and receives boundary tensors in a step (rank_transfers); the NCCL
// transport issues its grouped operations from that plan, so the executor's
// calls must follow it exactly. CheckedTransport wraps any transport, checks
// each call against the plan before passing it on, and checks at the end of
// the step that every transfer was made. The runner wraps both transports,
// so every MPI run on the cpu and sim backends checks the order the NCCL
// transport relies on.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "pipebench/runtime/transport.hpp"
#include "pipebench/schedule/p2p_groups.hpp"

namespace pipebench {

class CheckedTransport final : public Transport {
 public:
  CheckedTransport(std::unique_ptr<Transport> inner, const Schedule& schedule, int rank);

  void begin_step(double step_start_s) override;
  void send(int peer, const BoundaryKey& key, const Buffer& buf) override;
  RecvTiming recv(int peer, const BoundaryKey& key, const Buffer& buf) override;
  void complete_send(int peer, const BoundaryKey& key) override { inner_->complete_send(peer, key); }
  void complete_sends() override;
  void abandon() override { inner_->abandon(); }

 private:
  void expect(bool send, int peer, const BoundaryKey& key);

  std::unique_ptr<Transport> inner_;
  std::vector<P2pTransfer> plan_;
  std::size_t next_ = 0;
};

}  // namespace pipebench
