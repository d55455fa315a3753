// MPI point-to-point transport. Each tensor travels as a small header
// (step, kind, micro-batch, chunk, logical bytes, send time) plus, when the
// backend holds real data, the payload. The receiver checks the header: a
// mismatch is an error (the executor's correctness check, on in every run).
//
// With a link model (the sim backend), the receiver also waits until the
// modelled arrival: send time + latency + logical bytes / bandwidth. Between
// ranks of one node the send time is the sender's own clock reading (the
// node's ranks share the monotonic clock); across nodes it is the sender's
// time into the step placed in the receiver's step, so no global clock is
// needed — at the price of the step barrier's exit skew (a receiver that left
// the barrier later would otherwise wait for it on every message, as if the
// link were slower). Times are read on the run's clock (core/clock.hpp): on a
// virtual clock the receive completes, without sleeping, at max(the
// receiver's clock, the modelled arrival), whenever the real message came.
//
// MPI counts are int: a payload of 2 GiB or more travels as consecutive
// parts of at most kMaxMessageBytes on one tag (MPI keeps their order between
// one pair of ranks), received part by part into the same buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/job.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/transport.hpp"

namespace pipebench {

// 1 GiB: far below INT_MAX bytes.
inline constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;

// The [offset, size) parts of a `bytes` payload, each at most `max_part`
// (> 0) bytes, in order; none for 0 bytes.
std::vector<std::pair<std::size_t, std::size_t>> message_parts(std::size_t bytes, std::size_t max_part);

// The sim backend's pipeline link (parallel::pipeline_link) and the
// machine's condition (DeviceSpec::sim_load).
struct LinkModel {
  bool enabled = false;
  parallel::Link link;
  double load = 1.0;
  // When a message of `logical_bytes` sent at `sent_s` arrives.
  double arrival(double sent_s, std::uint64_t logical_bytes) const {
    return sent_s + load * parallel::transfer_s(link, logical_bytes);
  }
};

class MpiTransport final : public Transport {
 public:
  // max_part_bytes: the largest message (kMaxMessageBytes; tests make it small).
  MpiTransport(RunComm& comm, RunClock& clock, int chunks_per_rank, int num_microbatches, LinkModel link,
               std::size_t max_part_bytes = kMaxMessageBytes);

  void begin_step(double step_start_s) override;
  void send(int peer, const BoundaryKey& key, const Buffer& buf) override;
  RecvTiming recv(int peer, const BoundaryKey& key, const Buffer& buf) override;
  void complete_send(int peer, const BoundaryKey& key) override;
  void complete_sends() override;
  void abandon() override;

  struct Header {
    std::int32_t step, kind, microbatch, chunk;
    std::uint64_t logical_bytes;
    double send_time_s;   // relative to the sender's step start
    double send_clock_s;  // the sender's clock at the send
  };
  // When the message of `h` was sent, on the receiver's clock (see above):
  // the sender's clock reading when the two share the node, else its time
  // into the step placed in the receiver's step (which began at
  // `receiver_step_start_s`).
  static double sent_on_receiver_clock(const Header& h, double receiver_step_start_s, bool same_node) {
    return same_node ? h.send_clock_s : receiver_step_start_s + h.send_time_s;
  }

 private:
  int tag(const BoundaryKey& key, int part) const;

  RunComm& comm_;
  RunClock& clock_;
  int chunks_, microbatches_;
  LinkModel link_;
  std::size_t max_part_;
  double step_start_s_ = 0.0;
  std::vector<MPI_Request> sends_;
  // A send's requests in sends_ (its header's, then its parts'): [begin, end),
  // by the send's header tag (unique in a step).
  std::unordered_map<int, std::pair<std::size_t, std::size_t>> send_requests_;
  std::vector<Header> headers_;  // kept alive until complete_sends(); reserved so never reallocated mid-step
};

}  // namespace pipebench
