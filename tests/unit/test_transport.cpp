// The MPI transport's message parts: MPI counts are int, so a boundary
// tensor of 2 GiB or more must travel in parts (issue 18); the order check
// every transport call passes through.
#include <catch2/catch.hpp>

#include <climits>
#include <memory>

#include "pipebench/runtime/transport_checked.hpp"
#include "pipebench/runtime/transport_mpi.hpp"

using pipebench::kMaxMessageBytes;
using pipebench::message_parts;

TEST_CASE("message parts: none for 0 bytes, one up to the limit, then parts of the limit", "[transport]") {
  CHECK(message_parts(0, 1000).empty());
  CHECK(message_parts(1, 1000) == std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}});
  CHECK(message_parts(1000, 1000) == std::vector<std::pair<std::size_t, std::size_t>>{{0, 1000}});
  CHECK(message_parts(2500, 1000) ==
        std::vector<std::pair<std::size_t, std::size_t>>{{0, 1000}, {1000, 1000}, {2000, 500}});
  CHECK_THROWS(message_parts(10, 0));
}

TEST_CASE("message parts: a 5 GiB tensor in 1 GiB parts, each an int count, covering every byte once", "[transport]") {
  CHECK(kMaxMessageBytes <= static_cast<std::size_t>(INT_MAX));
  for (std::size_t bytes : {std::size_t{2} << 30, (std::size_t{5} << 30) + 3, (std::size_t{1} << 31) - 1}) {
    const auto parts = message_parts(bytes, kMaxMessageBytes);
    std::size_t next = 0;
    for (const auto& [offset, size] : parts) {
      CHECK(offset == next);
      CHECK(size >= 1);
      CHECK(size <= static_cast<std::size_t>(INT_MAX));
      next = offset + size;
    }
    CHECK(next == bytes);
    CHECK(parts.size() == (bytes + kMaxMessageBytes - 1) / kMaxMessageBytes);
  }
}

// CheckedTransport: the executor's calls against the schedule's plan of
// transfers, which the NCCL transport's groups are built from.
namespace {
struct CountingTransport final : pipebench::Transport {
  int sends = 0, recvs = 0, completes = 0;
  void begin_step(double) override {}
  void send(int, const pipebench::BoundaryKey&, const pipebench::Buffer&) override { ++sends; }
  pipebench::RecvTiming recv(int, const pipebench::BoundaryKey&, const pipebench::Buffer&) override {
    ++recvs;
    return {};
  }
  void complete_send(int, const pipebench::BoundaryKey&) override {}
  void complete_sends() override { ++completes; }
  void abandon() override {}
};
}  // namespace

TEST_CASE("checked transport: the plan's order passes, any other call is an error naming both", "[transport]") {
  using namespace pipebench;
  const Schedule s = make_1f1b(2, 2);  // rank 0: F0 F1 B0 B1 -> send F0, send F1, recv B0, recv B1
  auto inner = std::make_unique<CountingTransport>();
  CountingTransport& seen = *inner;
  CheckedTransport t(std::move(inner), s, 0);
  for (int step = 0; step < 2; ++step) {
    t.begin_step(0.0);
    t.send(1, {ActionKind::F, step, 0, 0}, {});
    t.send(1, {ActionKind::F, step, 1, 0}, {});
    t.recv(1, {ActionKind::B, step, 0, 0}, {});
    t.recv(1, {ActionKind::B, step, 1, 0}, {});
    t.complete_sends();
  }
  CHECK(seen.sends == 4);
  CHECK(seen.recvs == 4);
  CHECK(seen.completes == 2);

  t.begin_step(0.0);
  t.send(1, {ActionKind::F, 2, 0, 0}, {});
  CHECK_THROWS_WITH(t.recv(1, {ActionKind::B, 2, 0, 0}, {}),
                    Catch::Contains("boundary transfer 2 of step 2 is \"recv B0 from 1\", the schedule's plan says "
                                    "\"send F1 to 1\""));
  CHECK(seen.recvs == 4);  // not passed on
  t.begin_step(0.0);
  t.send(1, {ActionKind::F, 3, 0, 0}, {});
  CHECK_THROWS_WITH(t.complete_sends(), Catch::Contains("the step made 1 of its 4 boundary transfers; next in the plan: "
                                                        "\"send F1 to 1\""));
}

TEST_CASE("link model: a message arrives latency + bytes / bandwidth after its send, on the receiver's clock",
          "[transport]") {
  pipebench::LinkModel link{true, {5e-6, 100.0, false}, 1.0};
  CHECK(link.arrival(1.0, 1250000) == Approx(1.0 + 5e-6 + 1e-4));
  link.load = 2.0;  // a machine at half speed: the link too
  CHECK(link.arrival(1.0, 1250000) == Approx(1.0 + 2 * (5e-6 + 1e-4)));
  // Sent 0.25 s into the sender's step, at 10.25 s on its clock; the
  // receiver left the step barrier 0.125 s later than the sender did.
  pipebench::MpiTransport::Header h{};
  h.send_time_s = 0.25;
  h.send_clock_s = 10.25;
  // One node, one clock: the send as it happened (the barrier's skew would
  // otherwise delay every message by 0.125 s).
  CHECK(pipebench::MpiTransport::sent_on_receiver_clock(h, 10.125, true) == 10.25);
  // Across nodes: the time into the step, placed in the receiver's step.
  CHECK(pipebench::MpiTransport::sent_on_receiver_clock(h, 10.125, false) == 10.375);
}
