#include "pipebench/runtime/transport_nccl.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/runtime/transport_mpi.hpp"
#include "pipebench/schedule/p2p_groups.hpp"
#include "nccl_check.hpp"

namespace pipebench {

namespace {

constexpr const char* kWho = "nccl transport";

// One neighbour pair: a two-rank communicator (0 = the lower rank) and its
// stream, on which the pair's groups run in order.
struct Pair {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;  // after a receive's group, or after the step's last group
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(RunComm& comm, const Schedule& sched, int num_microbatches, bool train)
      : comm_(comm), headers_(comm, wall_clock_, sched.chunks_per_rank, num_microbatches, LinkModel{}) {
    // The groups of every rank, checked to finish under NCCL's in-order
    // rules before any NCCL call (the same verdict on every rank).
    std::vector<RankP2pPlan> plans = p2p_groups(sched);
    check_p2p_progress(plans);
    plan_ = std::move(plans[static_cast<std::size_t>(comm_.rank())]);
    members_.resize(plan_.groups.size());
    for (std::size_t t = 0; t < plan_.transfers.size(); ++t)
      members_[static_cast<std::size_t>(plan_.group_of[t])].push_back(static_cast<int>(t));

    // Set-up that fails half-way (a lost peer, an NCCL error) aborts what it
    // made: a destroyed communicator would wait for peers that are gone.
    try {
      connect(sched, train);
    } catch (...) {
      release(true);
      throw;
    }
  }

  ~NcclTransport() override { release(false); }

  void begin_step(double step_start_s) override {
    headers_.begin_step(step_start_s);
    next_ = 0;
    posted_ = 0;
    buffers_.assign(plan_.transfers.size(), Buffer{});
  }

  // The header leaves at once (the tensor is computed: actions end
  // synchronised); the payload goes with its group (p2p_groups.hpp).
  void send(int peer, const BoundaryKey& key, const Buffer& buf) override {
    const std::size_t n = expect(buf);
    headers_.send(peer, key, Buffer{nullptr, 0, buf.logical_bytes});
    post_until(plan_.posted_after[n], -1);
  }

  RecvTiming recv(int peer, const BoundaryKey& key, const Buffer& buf) override {
    const double start = now_s();
    const std::size_t n = expect(buf);
    headers_.recv(peer, key, Buffer{nullptr, 0, buf.logical_bytes});  // waits for the peer; checks what comes
    const double ready = now_s();
    Pair& pr = pairs_.at(peer);
    post_until(plan_.posted_after[n], plan_.group_of[n]);
    const std::string what = fmt::format("the NCCL transfer of {}{} from rank {}",
                                         key.kind == ActionKind::F ? "activation F" : "gradient B", key.microbatch, peer);
    comm_.wait_for([&] { return pair_done(pr, what.c_str()); }, what.c_str());
    cuda_check(cudaEventQuery(pr.done), kWho, "an NCCL receive");
    const double end = now_s();
    return {end - start, end - ready};
  }

  // The header's MPI send; the payload needs no wait: the executor frees a
  // send buffer only after receiving a tensor the peer sent once its
  // receive of this one had completed (its recv() waits for the pair's
  // event before the peer computes anything from it), so the ncclSend has
  // read the buffer by then.
  void complete_send(int peer, const BoundaryKey& key) override { headers_.complete_send(peer, key); }

  // Every group posted (a schedule's last group may hold only sends), then
  // each pair's stream drained.
  void complete_sends() override {
    post_until(static_cast<int>(plan_.groups.size()), -1);
    for (auto& [peer, pr] : pairs_) cuda_check(cudaEventRecord(pr.done, pr.stream), kWho, "cudaEventRecord");
    for (auto& [peer, pr] : pairs_)
      comm_.wait_for([&] { return pair_done(pr, "the NCCL transfers of this step"); }, "the NCCL transfers of this step");
    headers_.complete_sends();
  }

  // After a failure a peer may never match our pending operations: abort the
  // communicators (their kernels end) instead of waiting for them.
  void abandon() override {
    headers_.abandon();
    release(true);
  }

 private:
  // The pipeline's communicator: unique id from its stage 0, broadcast
  // over the pipeline (with replicas each pipeline has its own; over the
  // whole run, every replica joined replica 0's and NCCL saw each rank
  // number d times); one split per neighbour pair; every pair connected in
  // both directions.
  void connect(const Schedule& sched, bool train) {
    ncclUniqueId id{};
    if (comm_.rank() == 0) nccl_check(nccl().get_unique_id(&id), "ncclGetUniqueId");
    PIPEBENCH_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_.comm()));
    nccl_check(nccl().comm_init_rank(&run_comm_, comm_.size(), id, comm_.rank()), "ncclCommInitRank");

    // One split per neighbour pair, in one order on every rank (collective
    // over the run; ranks outside a pair take no part).
    std::set<std::pair<int, int>> pairs;
    for (const BoundaryLink& k : boundary_links(sched, train)) pairs.insert({std::min(k.src, k.dst), std::max(k.src, k.dst)});
    for (const auto& [lo, hi] : pairs) {
      const bool mine = comm_.rank() == lo || comm_.rank() == hi;
      ncclComm_t c = nullptr;
      nccl_check(nccl().comm_split(run_comm_, mine ? 0 : NCCL_SPLIT_NOCOLOR, comm_.rank() == lo ? 0 : 1, &c, nullptr),
                 "ncclCommSplit");
      if (!mine) continue;
      Pair pr;
      pr.comm = c;
      cuda_check(cudaStreamCreateWithFlags(&pr.stream, cudaStreamNonBlocking), kWho, "cudaStreamCreate");
      cuda_check(cudaEventCreateWithFlags(&pr.done, cudaEventDisableTiming), kWho, "cudaEventCreate");
      pairs_[comm_.rank() == lo ? hi : lo] = pr;
    }
    // Connect every pair now, both ways (NCCL connects a peer lazily, at its
    // first operation, and each direction on its own): one byte each way,
    // send and receive in one group on both ranks of the pair, pairs in the
    // same order on every rank, so the handshakes cannot wait in a cycle.
    // The wait polls aborts and NCCL's asynchronous errors like every other
    // (issue 72: one direction only left every hi -> lo path to step 0's
    // ncclGroupEnd, a blocking bootstrap no abort reaches).
    cuda_check(cudaMalloc(&probe_bytes_, 2), kWho, "cudaMalloc (2 bytes)");
    auto* bytes = static_cast<unsigned char*>(probe_bytes_);
    for (const auto& [lo, hi] : pairs) {
      if (comm_.rank() != lo && comm_.rank() != hi) continue;
      Pair& pr = pairs_.at(comm_.rank() == lo ? hi : lo);
      const int other = comm_.rank() == lo ? 1 : 0;  // the peer's rank in the pair's communicator
      nccl_check(nccl().group_start(), "ncclGroupStart");
      nccl_check(nccl().send(bytes, 1, ncclUint8, other, pr.comm, pr.stream), "ncclSend");
      nccl_check(nccl().recv(bytes + 1, 1, ncclUint8, other, pr.comm, pr.stream), "ncclRecv");
      nccl_check(nccl().group_end(), "ncclGroupEnd");
      cuda_check(cudaEventRecord(pr.done, pr.stream), kWho, "cudaEventRecord");
      const std::string what = fmt::format("connecting the NCCL pair with rank {}", comm_.rank() == lo ? hi : lo);
      comm_.wait_for([&] { return pair_done(pr, what.c_str()); }, what.c_str());
    }
  }

  // The call's place in the plan: the runner's CheckedTransport has checked
  // that it is the plan's next transfer.
  std::size_t expect(const Buffer& buf) {
    buffers_[next_] = buf;
    return next_++;
  }

  // Posts the plan's groups up to `upto`, each as one ncclGroupStart/End on
  // its pair's stream; after group `mark` (a receive's) records that pair's
  // event, which the receive then waits for.
  void post_until(int upto, int mark) {
    for (; posted_ < upto; ++posted_) {
      const P2pGroup& g = plan_.groups[static_cast<std::size_t>(posted_)];
      Pair& pr = pairs_.at(g.peer);
      const int peer_in_pair = g.peer < comm_.rank() ? 0 : 1;
      nccl_check(nccl().group_start(), "ncclGroupStart");
      for (int t : members_[static_cast<std::size_t>(posted_)]) {
        const Buffer& b = buffers_[static_cast<std::size_t>(t)];
        if (plan_.transfers[static_cast<std::size_t>(t)].send)
          nccl_check(nccl().send(b.data, b.bytes, ncclUint8, peer_in_pair, pr.comm, pr.stream), "ncclSend");
        else
          nccl_check(nccl().recv(b.data, b.bytes, ncclUint8, peer_in_pair, pr.comm, pr.stream), "ncclRecv");
      }
      nccl_check(nccl().group_end(), "ncclGroupEnd");
      if (posted_ == mark) cuda_check(cudaEventRecord(pr.done, pr.stream), kWho, "cudaEventRecord");
    }
  }

  // Whether the pair's event has passed; an asynchronous NCCL error (a peer
  // gone, a network failure) ends the wait as an error, after which
  // abandon() aborts the communicators, instead of a wait until the timeout.
  static bool pair_done(const Pair& pr, const char* what) { return nccl_event_passed(pr.done, pr.comm, what); }

  void release(bool abort) {
    for (auto& [peer, pr] : pairs_) {
      if (abort) nccl().comm_abort(pr.comm);
      else nccl().comm_destroy(pr.comm);
      if (!abort) cudaStreamSynchronize(pr.stream);
      cudaEventDestroy(pr.done);
      cudaStreamDestroy(pr.stream);
    }
    pairs_.clear();
    if (run_comm_) abort ? nccl().comm_abort(run_comm_) : nccl().comm_destroy(run_comm_);
    run_comm_ = nullptr;
    if (probe_bytes_) cudaFree(probe_bytes_);
    probe_bytes_ = nullptr;
  }

  RunComm& comm_;
  RunClock wall_clock_ = RunClock::wall();  // the cuda backend's: declared before headers_, which uses it
  MpiTransport headers_;
  RankP2pPlan plan_;
  std::vector<std::vector<int>> members_;  // group -> its transfers (indices into plan_.transfers)
  std::vector<Buffer> buffers_;            // transfer -> the executor's buffer, this step
  std::size_t next_ = 0;                   // the step's next transfer
  int posted_ = 0;                         // the step's groups posted so far
  ncclComm_t run_comm_ = nullptr;
  std::map<int, Pair> pairs_;  // peer -> pair
  void* probe_bytes_ = nullptr;  // the connecting bytes: [0] sent, [1] received
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(RunComm& comm, const Schedule& schedule, int num_microbatches, bool train) {
  return std::make_unique<NcclTransport>(comm, schedule, num_microbatches, train);
}

std::string nccl_version() {
  if (const std::string why = nccl_load_error(); !why.empty()) return "not loaded: " + why;
  int v = 0;
  if (nccl().get_version(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

}  // namespace pipebench
