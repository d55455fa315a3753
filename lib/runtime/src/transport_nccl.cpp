#include "pipebench/runtime/transport_nccl.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "pipebench/backends/cuda_check.hpp"
#include "pipebench/backends/cuda_device.hpp"
#include "pipebench/core/clock.hpp"
#include "pipebench/runtime/transport_mpi.hpp"

namespace pipebench {

namespace {

constexpr const char* kWho = "nccl transport";

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("NCCL {}: {} ({})", what, ncclGetErrorString(rc), static_cast<int>(rc)));
}

struct Link {
  ncclComm_t comm = nullptr;  // two ranks: 0 = src, 1 = dst
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(RunComm& comm, const Schedule& sched, int num_microbatches, bool train)
      : comm_(comm), headers_(comm, sched.chunks_per_rank, num_microbatches, LinkModel{}) {
    // The links of this schedule, in one order on every rank.
    const std::vector<BoundaryLink> links = boundary_links(sched, train);

    // The run's communicator: unique id from run rank 0, broadcast over MPI.
    ncclUniqueId id{};
    if (comm_.rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    PIPEBENCH_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_.control()));
    nccl_check(ncclCommInitRank(&run_comm_, comm_.size(), id, comm_.rank()), "ncclCommInitRank");

    // One split per link (collective over the run); ranks outside it take no part.
    for (const BoundaryLink& k : links) {
      const bool mine = comm_.rank() == k.src || comm_.rank() == k.dst;
      ncclComm_t c = nullptr;
      nccl_check(ncclCommSplit(run_comm_, mine ? 0 : NCCL_SPLIT_NOCOLOR, comm_.rank() == k.src ? 0 : 1, &c, nullptr),
                 "ncclCommSplit");
      if (!mine) continue;
      Link l;
      l.comm = c;
      cuda_check(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), kWho, "cudaStreamCreate");
      cuda_check(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming), kWho, "cudaEventCreate");
      links_[k] = l;
    }
    // Connect every link now (NCCL connects peers lazily, at their first
    // operation): one byte each way's sender to receiver, links in the same
    // order on every rank, so the pairwise handshakes cannot wait in a cycle.
    cuda_check(cudaMalloc(&probe_byte_, 1), kWho, "cudaMalloc (1 byte)");
    for (const BoundaryLink& k : links) {
      auto it = links_.find(k);
      if (it == links_.end()) continue;
      const bool sender = comm_.rank() == k.src;
      if (sender) nccl_check(ncclSend(probe_byte_, 1, ncclUint8, 1, it->second.comm, it->second.stream), "ncclSend");
      else nccl_check(ncclRecv(probe_byte_, 1, ncclUint8, 0, it->second.comm, it->second.stream), "ncclRecv");
      cuda_check(cudaStreamSynchronize(it->second.stream), kWho, "connecting an NCCL link");
    }
  }

  ~NcclTransport() override { release(false); }

  void begin_step(double step_start_s) override { headers_.begin_step(step_start_s); }

  void send(int peer, const BoundaryKey& key, const Buffer& buf) override {
    Link& l = link(comm_.rank(), peer, key.kind);
    // The header first: the tensor is computed (actions end synchronised), so
    // the receiver may post its ncclRecv as soon as the header arrives.
    headers_.send(peer, key, Buffer{nullptr, 0, buf.logical_bytes});
    nccl_check(ncclSend(buf.data, buf.bytes, ncclUint8, 1, l.comm, l.stream), "ncclSend");
  }

  RecvTiming recv(int peer, const BoundaryKey& key, const Buffer& buf) override {
    const double start = now_s();
    headers_.recv(peer, key, Buffer{nullptr, 0, buf.logical_bytes});  // waits for the peer; checks what comes
    const double ready = now_s();
    Link& l = link(peer, comm_.rank(), key.kind);
    nccl_check(ncclRecv(buf.data, buf.bytes, ncclUint8, 0, l.comm, l.stream), "ncclRecv");
    cuda_check(cudaEventRecord(l.done, l.stream), kWho, "cudaEventRecord");
    const std::string what = fmt::format("the NCCL transfer of {}{} from rank {}",
                                         key.kind == ActionKind::F ? "activation F" : "gradient B", key.microbatch, peer);
    comm_.wait_for([&] { return link_done(l, what.c_str()); }, what.c_str());
    cuda_check(cudaEventQuery(l.done), kWho, "an NCCL receive");
    const double end = now_s();
    return {end - start, end - ready};
  }

  // Every link this rank sends on: an event after its queued sends (an idle
  // stream's completes at once).
  void complete_sends() override {
    for (auto& [key, l] : links_)
      if (key.src == comm_.rank()) cuda_check(cudaEventRecord(l.done, l.stream), kWho, "cudaEventRecord");
    for (auto& [key, l] : links_)
      if (key.src == comm_.rank())
        comm_.wait_for([&] { return link_done(l, "the NCCL sends of this step"); }, "the NCCL sends of this step");
    headers_.complete_sends();
  }

  // After a failure a peer may never match our pending operations: abort the
  // communicators (their kernels end) instead of waiting for them.
  void abandon() override {
    headers_.abandon();
    release(true);
  }

 private:
  // Whether the link's queued work is done; an asynchronous NCCL error (a
  // peer gone, a network failure) ends the wait as an error, after which
  // abandon() aborts the communicators, instead of a wait until the timeout.
  static bool link_done(const Link& l, const char* what) {
    if (cudaEventQuery(l.done) != cudaErrorNotReady) return true;
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(l.comm, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress)
      throw Error(fmt::format("NCCL reported an asynchronous error while waiting for {}: {}", what,
                              ncclGetErrorString(state)));
    return false;
  }

  Link& link(int src, int dst, ActionKind kind) {
    auto it = links_.find(BoundaryLink{src, dst, kind});
    if (it == links_.end())
      throw Error(fmt::format("nccl transport: no link from rank {} to rank {} for {} tensors", src, dst,
                              kind == ActionKind::F ? "activation" : "gradient"));
    return it->second;
  }

  void release(bool abort) {
    for (auto& [key, l] : links_) {
      if (abort) ncclCommAbort(l.comm);
      else ncclCommDestroy(l.comm);
      if (!abort) cudaStreamSynchronize(l.stream);
      cudaEventDestroy(l.done);
      cudaStreamDestroy(l.stream);
    }
    links_.clear();
    if (run_comm_) abort ? ncclCommAbort(run_comm_) : ncclCommDestroy(run_comm_);
    run_comm_ = nullptr;
    if (probe_byte_) cudaFree(probe_byte_);
    probe_byte_ = nullptr;
  }

  RunComm& comm_;
  MpiTransport headers_;
  ncclComm_t run_comm_ = nullptr;
  std::map<BoundaryLink, Link> links_;
  void* probe_byte_ = nullptr;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(RunComm& comm, const Schedule& schedule, int num_microbatches, bool train) {
  return std::make_unique<NcclTransport>(comm, schedule, num_microbatches, train);
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

}  // namespace pipebench
