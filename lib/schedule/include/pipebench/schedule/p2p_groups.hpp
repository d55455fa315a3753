// Grouping a step's boundary transfers for a transport whose point-to-point
// operations block in issue order — NCCL (docs/cuda-backend.md, "NCCL").
//
// The NCCL transport has one communicator per neighbour pair (two ranks that
// exchange boundary tensors, in either direction), with one stream. NCCL runs
// a pair's operations in the order they are issued, and a send does not end
// before its receive runs, so the two ranks must issue matching work in the
// same order. They do not in general: in 1F1B, rank s sends F(k+1) and then
// receives B(k) while rank s+1 sends B(k) and then receives F(k+1); issued one
// at a time that is a deadlock. Issued as one ncclGroupStart/End on each side
// ({send F(k+1), recv B(k)} and {send B(k), recv F(k+1)}) the two groups are
// the same set of transfers and run together (Megatron-LM's batched p2p).
//
// This file computes those groups from the schedule alone:
//   - a rank's transfers in call order (rank_transfers): for each action, the
//     receive of its input from another rank, then the send of its output
//     (an overlapped forward-backward: both receives, then both sends) —
//     the executor's order (executor.cpp), which the transport checks call by
//     call;
//   - per pair, groups of at most one tensor each way, in one order on both
//     sides: the next tensor each way go together when each side sends its
//     own before it receives the other's (the crossing above), else the one
//     both sides reach first goes alone (p2p_groups.cpp, cut_pair);
//   - a group is posted by the call of its last transfer on that side (or,
//     if the pair's previous group goes out later, with it); its receive, if
//     any, must be that call: the next action needs the tensor. Sends wait
//     for their group, but their headers (the MPI transport's checked header)
//     leave at once, so a receiver is never held up by them.
// check_p2p_progress() then runs every rank's calls against these rules (a
// receive waits for its sender's call, a group runs once both sides posted it
// and the pair's earlier groups ran) and throws if the step could stall.
#pragma once

#include <string>
#include <vector>

#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// One boundary transfer as one rank sees it.
struct P2pTransfer {
  bool send = false;
  int peer = 0;
  ActionKind kind = ActionKind::F;  // F: activation, B: input gradient
  int microbatch = 0;
  int chunk = 0;  // the sending rank's chunk (BoundaryKey::chunk)

  // The same tensor on both sides: sender, kind, micro-batch, chunk.
  int sender(int self) const { return send ? self : peer; }
  friend bool operator==(const P2pTransfer&, const P2pTransfer&) = default;
};

// "send F3 to 1", "recv 1B0 from 2" (chunk prefix as in to_string(Action)).
std::string to_string(const P2pTransfer& t);

// Rank `rank`'s transfers with other ranks in one step, in call order.
std::vector<P2pTransfer> rank_transfers(const Schedule& s, int rank);

struct P2pGroup {
  int peer = 0;
  int index = 0;                    // k: the k-th group of this pair in the step
  std::vector<P2pTransfer> transfers;  // this side's, in call order
};

// One rank's plan: its groups in posting order, for each transfer of
// rank_transfers() (same order) the group it belongs to, and how many groups
// are posted once that call is made (a call may post none, or several: a
// pair's groups go out in order, so a group whose sends are all made waits
// for the pair's previous group).
struct RankP2pPlan {
  std::vector<P2pTransfer> transfers;
  std::vector<int> group_of;      // transfer -> index into groups
  std::vector<int> posted_after;  // transfer -> groups [0, n) posted after this call
  std::vector<P2pGroup> groups;
};

// Every rank's plan. ScheduleError when the two sides of a pair do not move
// the same tensors, or when a group would need a receive before a send of the
// same group (it could not be posted at once).
std::vector<RankP2pPlan> p2p_groups(const Schedule& s);

// Runs the plans under the rules above; ScheduleError naming the ranks and
// calls that wait on each other if the step cannot finish.
void check_p2p_progress(const std::vector<RankP2pPlan>& plans);

}  // namespace pipebench
