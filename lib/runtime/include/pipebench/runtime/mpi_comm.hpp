// MPI at the edge: a check for every MPI call, and RunComm, the run's
// communicator with failure-aware waits. Every wait in a run polls for an
// abort notice from a peer and for the step deadline, so one rank's OOM,
// error or timeout ends the run on all its ranks instead of hanging them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

// Throws MpiError naming the call, the world rank, file and line.
void mpi_check(int rc, const char* call, const char* file, int line);
#define PIPEBENCH_MPI_CHECK(call) ::pipebench::mpi_check((call), #call, __FILE__, __LINE__)

// Collectives cannot be cancelled: after a failure some ranks may have an
// unfinished step barrier on comm() that others never entered. So everything
// after a run (settle, gathering records) uses control(), a duplicate that
// only sees collectives every rank reaches.
class RunComm {
 public:
  // Does not take ownership of `comm`; owns the control duplicate.
  explicit RunComm(MPI_Comm comm);
  ~RunComm();
  RunComm(const RunComm&) = delete;
  RunComm& operator=(const RunComm&) = delete;

  MPI_Comm comm() const { return comm_; }
  MPI_Comm control() const { return control_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Whether run rank `peer` runs on this rank's node (shares its memory and clocks).
  bool shares_node(int peer) const { return same_node_[static_cast<std::size_t>(peer)] != 0; }

  // Waits for a posted request; throws PeerAbortedError or StepTimeoutError.
  void wait(MPI_Request& req, const char* what);
  // Waits until done() is true (e.g. a CUDA event of an NCCL receive), with
  // the same abort and deadline checks.
  void wait_for(const std::function<bool()>& done, const char* what);
  void set_deadline(double deadline_s) { deadline_s_ = deadline_s; }

  void barrier();
  // Element-wise reductions over the run.
  void allreduce(std::vector<double>& values, MPI_Op op);
  // Rank r's `bytes[r]` bytes from `mine` land at `offsets[r]` of `into` on
  // rank 0 (`into` unused elsewhere); every rank passes the same sizes.
  void gather_to_root(const void* mine, const std::vector<int>& bytes, const std::vector<int>& offsets, void* into,
                      const char* what);

  // Tells every peer that this rank failed (once).
  void notify_abort();
  // Collective at the end of a run, failed or not: receives every abort
  // notice addressed to this rank and completes this rank's own, so the
  // communicator is quiet before it is freed. Every part is polled against
  // `timeout_s`; a peer that does not take part by then is stopped, hung or
  // lost: PeerLostError.
  void settle(double timeout_s);

 private:
  // The wait loop: polls done(), checks for aborts and the deadline, spins,
  // then yields the core at every poll unless `done_yields` (done() gave it
  // up already).
  void wait_until(const std::function<bool()>& done, const char* what, bool done_yields);

  MPI_Comm comm_;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double deadline_s_ = 0.0;
  bool aborted_ = false;
  std::vector<char> same_node_;  // per run rank
  std::vector<MPI_Request> abort_sends_;
  std::vector<int> abort_payload_;
};

inline constexpr int kAbortTag = 1;  // boundary tags (transport) start above it

// How long the ranks of a run wait for each other when settling it
// (docs/runner.md): a peer silent for longer is taken as lost.
inline constexpr double kSettleTimeoutS = 10.0;

}  // namespace pipebench
