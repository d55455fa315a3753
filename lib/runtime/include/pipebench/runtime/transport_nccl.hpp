// NCCL transport for the cuda backend (docs/cuda-backend.md). Payloads move
// GPU to GPU with ncclSend/ncclRecv; the checked headers of the MPI
// transport still travel over MPI, which is also how the time a recv()
// blocks splits into waiting for the peer (until the header arrives: the
// sender posts it once the tensor is computed) and the transfer (the
// ncclRecv after it).
//
// Communicators: one NCCL communicator over the run's ranks from a unique id
// that run rank 0 creates and MPI broadcasts; from it, with ncclCommSplit,
// one two-rank communicator per neighbour pair (two ranks that exchange
// boundary tensors either way), each with its own stream. A pair's
// operations run in issue order, so both ranks issue them in matching
// groups — ncclGroupStart/End of at most one tensor each way, the crossing
// sends of 1F1B together — planned from the schedule by p2p_groups.hpp and
// checked there to finish before the transport is built. Every pair is
// connected once when the transport is built.
//
// Two ranks of a run on one GPU cannot use NCCL: the runner refuses such a
// launch before building this (device_binding.hpp).
#pragma once

#include <memory>
#include <string>

#include "pipebench/runtime/mpi_comm.hpp"
#include "pipebench/runtime/transport.hpp"
#include "pipebench/schedule/schedule.hpp"

namespace pipebench {

// Collective over `comm`. In a build without CUDA: DeviceUnavailableError.
std::unique_ptr<Transport> make_nccl_transport(RunComm& comm, const Schedule& schedule, int num_microbatches, bool train);

// NCCL's version for /provenance, "2.28.3" ("" in a build without CUDA).
std::string nccl_version();

}  // namespace pipebench
