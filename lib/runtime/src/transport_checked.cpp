#include "pipebench/runtime/transport_checked.hpp"

#include <utility>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

CheckedTransport::CheckedTransport(std::unique_ptr<Transport> inner, const Schedule& schedule, int rank)
    : inner_(std::move(inner)), plan_(rank_transfers(schedule, rank)) {}

void CheckedTransport::begin_step(double step_start_s) {
  next_ = 0;
  inner_->begin_step(step_start_s);
}

void CheckedTransport::expect(bool send, int peer, const BoundaryKey& key) {
  const P2pTransfer got{send, peer, key.kind, key.microbatch, key.chunk};
  if (next_ < plan_.size() && plan_[next_] == got) {
    ++next_;
    return;
  }
  throw Error(fmt::format("transport: boundary transfer {} of step {} is \"{}\", the schedule's plan says \"{}\"",
                          next_ + 1, key.step, to_string(got),
                          next_ < plan_.size() ? to_string(plan_[next_]) : "no more transfers"));
}

void CheckedTransport::send(int peer, const BoundaryKey& key, const Buffer& buf) {
  expect(true, peer, key);
  inner_->send(peer, key, buf);
}

RecvTiming CheckedTransport::recv(int peer, const BoundaryKey& key, const Buffer& buf) {
  expect(false, peer, key);
  return inner_->recv(peer, key, buf);
}

void CheckedTransport::complete_sends() {
  if (next_ != plan_.size())
    throw Error(fmt::format("transport: the step made {} of its {} boundary transfers; next in the plan: \"{}\"", next_,
                            plan_.size(), to_string(plan_[next_])));
  inner_->complete_sends();
}

}  // namespace pipebench
