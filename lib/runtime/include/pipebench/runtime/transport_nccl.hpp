// NCCL transport for the cuda backend (docs/cuda-backend.md). Payloads move
// GPU to GPU with ncclSend/ncclRecv; the checked headers of the MPI
// transport still travel over MPI, which is also how the time a recv()
// blocks splits into waiting for the peer (until the header arrives: the
// sender posts it once the tensor is computed) and the transfer (the
// ncclRecv after it).
//
// Communicators: one NCCL communicator over the run's ranks from a unique id
// that run rank 0 creates and MPI broadcasts; from it, with ncclCommSplit,
// one two-rank communicator per directed link and tensor kind (activations
// stage v -> v+1, gradients v+1 -> v), each with its own stream. A link only
// ever carries one direction, in schedule order, so a pending send never
// blocks a receive (NCCL p2p operations block their stream until matched).
// Every link is connected once when the transport is built.
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
