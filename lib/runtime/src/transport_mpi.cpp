#include "pipebench/runtime/transport_mpi.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"

namespace pipebench {

namespace {
char letter(int kind) { return kind == static_cast<int>(ActionKind::F) ? 'F' : 'B'; }
}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> message_parts(std::size_t bytes, std::size_t max_part) {
  if (max_part == 0) throw Error("message_parts: the largest part must be at least 1 byte");
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  for (std::size_t offset = 0; offset < bytes; offset += max_part) parts.emplace_back(offset, std::min(max_part, bytes - offset));
  return parts;
}

MpiTransport::MpiTransport(RunComm& comm, RunClock& clock, int chunks_per_rank, int num_microbatches, LinkModel link,
                           std::size_t max_part_bytes)
    : comm_(comm), clock_(clock), chunks_(chunks_per_rank), microbatches_(num_microbatches), link_(link), max_part_(max_part_bytes) {
  if (max_part_ == 0 || max_part_ > kMaxMessageBytes)
    throw Error(fmt::format("MPI transport: message parts of {} bytes (1 to {})", max_part_, kMaxMessageBytes));
  int* ub = nullptr;
  int flag = 0;
  PIPEBENCH_MPI_CHECK(MPI_Comm_get_attr(comm_.comm(), MPI_TAG_UB, &ub, &flag));
  const long needed = 4L * chunks_ * microbatches_ + kAbortTag + 4;
  if (flag && *ub < needed)
    throw MpiError(fmt::format("{} micro-batches x {} chunks need MPI tags up to {}, this MPI allows {}",
                               microbatches_, chunks_, needed, *ub));
  // One header per send in a step: at most 2 per action; reserve so pointers stay valid.
  headers_.reserve(static_cast<std::size_t>(4 * chunks_ * microbatches_));
}

int MpiTransport::tag(const BoundaryKey& key, int part) const {
  const int direction = key.kind == ActionKind::F ? 0 : 1;
  return kAbortTag + 1 + ((key.microbatch * chunks_ + key.chunk) * 2 + direction) * 2 + part;
}

void MpiTransport::begin_step(double step_start_s) {
  step_start_s_ = step_start_s;
  headers_.clear();
  send_requests_.clear();
}

void MpiTransport::send(int peer, const BoundaryKey& key, const Buffer& buf) {
  const double now = clock_.now();
  headers_.push_back(Header{key.step, static_cast<std::int32_t>(key.kind), key.microbatch, key.chunk,
                            buf.logical_bytes, now - step_start_s_, now});
  MPI_Request req;
  const std::size_t first = sends_.size();
  PIPEBENCH_MPI_CHECK(MPI_Isend(&headers_.back(), sizeof(Header), MPI_BYTE, peer, tag(key, 0), comm_.comm(), &req));
  sends_.push_back(req);
  for (const auto& [offset, size] : message_parts(buf.bytes, max_part_)) {
    PIPEBENCH_MPI_CHECK(MPI_Isend(static_cast<char*>(buf.data) + offset, static_cast<int>(size), MPI_BYTE, peer, tag(key, 1),
                                  comm_.comm(), &req));
    sends_.push_back(req);
  }
  send_requests_[tag(key, 0)] = {first, sends_.size()};
}

RecvTiming MpiTransport::recv(int peer, const BoundaryKey& key, const Buffer& buf) {
  const double start = clock_.now();
  // For a wait's error message; on the stack: a receive per action allocates nothing.
  char what[96];
  const auto written = fmt::format_to_n(what, sizeof(what) - 1, "{}{} of step {} from rank {}",
                                        key.kind == ActionKind::F ? "activation F" : "gradient B", key.microbatch, key.step, peer);
  *written.out = '\0';
  // A receive must not outlive its target: on a failure, cancel it here.
  auto receive = [&](void* data, std::size_t bytes, int part) {
    MPI_Request req;
    PIPEBENCH_MPI_CHECK(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag(key, part), comm_.comm(), &req));
    try {
      comm_.wait(req, what);
    } catch (...) {
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      throw;
    }
  };
  Header h{};
  receive(&h, sizeof(Header), 0);
  if (h.step != key.step || h.kind != static_cast<int>(key.kind) || h.microbatch != key.microbatch ||
      h.chunk != key.chunk || h.logical_bytes != buf.logical_bytes)
    throw Error(fmt::format("rank {}: expected {}{} (chunk {}) of step {} ({} bytes) from rank {}, got {}{} (chunk {}) "
                            "of step {} ({} bytes)",
                            comm_.rank(), letter(static_cast<int>(key.kind)), key.microbatch, key.chunk, key.step,
                            buf.logical_bytes, peer, letter(h.kind), h.microbatch, h.chunk, h.step, h.logical_bytes));
  // When the sender had the tensor ready: its header's arrival, or on a
  // virtual clock its send time (or this receive's start, if later).
  const double ready = clock_.is_virtual() ? std::max(start, step_start_s_ + h.send_time_s) : clock_.now();
  for (const auto& [offset, size] : message_parts(buf.bytes, max_part_)) receive(static_cast<char*>(buf.data) + offset, size, 1);
  if (link_.enabled)  // a virtual clock's step starts are one time on every rank: either form is exact there
    clock_.sleep_until(link_.arrival(sent_on_receiver_clock(h, step_start_s_, comm_.shares_node(peer)), h.logical_bytes));
  const double end = clock_.now();
  return {end - start, end - ready};
}

void MpiTransport::complete_send(int peer, const BoundaryKey& key) {
  const auto it = send_requests_.find(tag(key, 0));
  if (it == send_requests_.end())
    throw Error(fmt::format("MPI transport: no send of {}{} (chunk {}) to rank {} in step {} to complete",
                            letter(static_cast<int>(key.kind)), key.microbatch, key.chunk, peer, key.step));
  for (std::size_t i = it->second.first; i < it->second.second; ++i) comm_.wait(sends_[i], "a boundary send to complete");
}

void MpiTransport::complete_sends() {
  for (auto& req : sends_) comm_.wait(req, "a boundary send to complete");
  sends_.clear();
  send_requests_.clear();
}

void MpiTransport::abandon() {
  bool in_flight = false;
  for (auto& req : sends_) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&req);
      in_flight = true;
    }
  }
  sends_.clear();
  send_requests_.clear();
  // A freed send may still read its header: hand the headers to a vector
  // that is deliberately never destroyed (at most one per failed run).
  if (in_flight) new std::vector<Header>(std::move(headers_));
  headers_.clear();
  headers_.reserve(static_cast<std::size_t>(4 * chunks_ * microbatches_));
}

}  // namespace pipebench
