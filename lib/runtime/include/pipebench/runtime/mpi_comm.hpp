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
#include "pipebench/parallel/rank_grid.hpp"

namespace pipebench {

// Before MPI_Init: Open MPI's non-blocking collectives (libnbc) choose a
// binomial tree for the gradient all-reduce's sizes, 0.4-0.7x the library's
// own blocking MPI_Allreduce on 2 ranks here, where its ring is 1.0-1.1x
// (bench/whole/grad_allreduce, docs/parallel.md). Sets
// OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 (ring: every element reduced
// once, in a fixed order, then copied, so every replica gets the same bits)
// unless the environment sets it already; other MPI libraries ignore it.
void prefer_ring_iallreduce();

// Throws MpiError naming the call, the world rank, file and line.
void mpi_check(int rc, const char* call, const char* file, int line);
#define PIPEBENCH_MPI_CHECK(call) ::pipebench::mpi_check((call), #call, __FILE__, __LINE__)

// The run's communicators. A run of p stages × d replicas × c context ranks
// × t tensor ranks has p·d·c·t ranks (the run communicator, `run()`), split
// by its rank grid (parallel/rank_grid.hpp) into d·c·t pipelines of p ranks
// (`comm()`: the transport's, the step's reductions), p·t gradient groups of
// d·c ranks (`data()`: the gradient synchronisation over the replicas and
// the context ranks, replica-major; just the replicas without context
// parallelism), p·d·c tensor groups of t ranks (`tensor()`: the layers'
// collectives) and p·d·t context groups of c ranks (`context()`: the
// attention's K/V exchange). rank()/size() are the rank's place in its
// pipeline; grad_rank()/grad_size() in its gradient group; replica()/
// replicas() its replica coordinate and their count (d);
// context_rank()/context_size() and tensor_rank()/tensor_size() likewise.
//
// Every wait polls for an abort notice from any rank of the run and for the
// step deadline. Collectives cannot be cancelled: after a failure some ranks
// may have an unfinished step barrier that others never entered. So
// everything after a run (settle, gathering records) uses control(), a
// duplicate of the run communicator that only sees collectives every rank
// reaches, and the groups of a run that did not end cleanly are never freed
// (keep_groups), so no later collective can be matched against them.
class RunComm {
 public:
  // One pipeline, no replicas. Does not take ownership of `comm`.
  explicit RunComm(MPI_Comm comm);
  // `run` holds grid.size() ranks, ranked as the grid's ranks.
  RunComm(MPI_Comm run, const parallel::RankGrid& grid);
  ~RunComm();
  RunComm(const RunComm&) = delete;
  RunComm& operator=(const RunComm&) = delete;

  MPI_Comm comm() const { return comm_; }
  MPI_Comm data() const { return data_; }
  MPI_Comm tensor() const { return tensor_; }
  MPI_Comm context() const { return context_; }
  MPI_Comm control() const { return control_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  int grad_rank() const { return grad_rank_; }
  int grad_size() const { return grad_size_; }
  int context_rank() const { return context_rank_; }
  int context_size() const { return context_size_; }
  int tensor_rank() const { return tensor_rank_; }
  int tensor_size() const { return tensor_size_; }
  int run_rank() const { return run_rank_; }
  int run_size() const { return run_size_; }
  // Whether pipeline rank `peer` runs on this rank's node (shares its memory and clocks).
  bool shares_node(int peer) const { return same_node_[static_cast<std::size_t>(peer)] != 0; }
  // Whether every rank of this rank's data-parallel group is on its node.
  bool data_group_on_one_node() const { return data_on_one_node_; }

  // Waits for a posted request; throws PeerAbortedError or StepTimeoutError.
  void wait(MPI_Request& req, const char* what);
  // Waits until done() is true (e.g. a CUDA event of an NCCL receive), with
  // the same abort and deadline checks.
  void wait_for(const std::function<bool()>& done, const char* what);
  void set_deadline(double deadline_s) { deadline_s_ = deadline_s; }
  // Throws PeerAbortedError when a notice has come (a non-blocking check).
  void check_aborts(const char* what);

  // Every rank of the run.
  void barrier();
  // Element-wise reductions over the pipeline, the data group or the run.
  enum class Group { pipeline, data, run };
  void allreduce(std::vector<double>& values, MPI_Op op, Group group = Group::pipeline);
  // Rank r's `bytes[r]` bytes from `mine` land at `offsets[r]` of `into` on
  // pipeline rank 0 (`into` unused elsewhere); every rank passes the same sizes.
  void gather_to_root(const void* mine, const std::vector<int>& bytes, const std::vector<int>& offsets, void* into,
                      const char* what);

  // Tells every rank of the run that this rank failed (once).
  void notify_abort();
  // Collective at the end of a run, failed or not: receives every abort
  // notice addressed to this rank and completes this rank's own, so the
  // communicator is quiet before it is freed. Every part is polled against
  // `timeout_s`; a peer that does not take part by then is stopped, hung or
  // lost: PeerLostError.
  void settle(double timeout_s);
  // The run did not end cleanly on this rank: its groups stay allocated.
  void keep_groups() { free_groups_ = false; }

 private:
  void init(MPI_Comm run, const parallel::RankGrid* grid);
  // The wait loop: polls done(), checks for aborts and the deadline, spins,
  // then yields the core at every poll unless `done_yields` (done() gave it
  // up already).
  void wait_until(const std::function<bool()>& done, const char* what, bool done_yields);

  MPI_Comm run_ = MPI_COMM_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL, data_ = MPI_COMM_NULL, tensor_ = MPI_COMM_NULL, context_ = MPI_COMM_NULL;  // owned (split from run_)
  MPI_Comm control_ = MPI_COMM_NULL;
  bool free_groups_ = true;
  int rank_ = 0, size_ = 1, replica_ = 0, replicas_ = 1, tensor_rank_ = 0, tensor_size_ = 1, run_rank_ = 0, run_size_ = 1;
  int grad_rank_ = 0, grad_size_ = 1, context_rank_ = 0, context_size_ = 1;
  double deadline_s_ = 0.0;
  bool aborted_ = false;
  std::vector<char> same_node_;  // per pipeline rank
  bool data_on_one_node_ = true;
  std::vector<MPI_Request> abort_sends_;
  std::vector<int> abort_payload_;
};

inline constexpr int kAbortTag = 1;  // boundary tags (transport) start above it

// How long the ranks of a run wait for each other when settling it
// (docs/runner.md): a peer silent for longer is taken as lost.
inline constexpr double kSettleTimeoutS = 10.0;

}  // namespace pipebench
