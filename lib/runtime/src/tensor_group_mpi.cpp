#include "pipebench/runtime/tensor_group_mpi.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

double MpiTensorGroup::take_seconds() { return std::exchange(seconds_, 0.0); }

void MpiTensorGroup::reduce(void* data, std::int64_t n, MPI_Datatype type, MPI_Op op) {
  int size = 0;
  PIPEBENCH_MPI_CHECK(MPI_Type_size(type, &size));
  auto* bytes = static_cast<char*>(data);
  // MPI counts are ints: a larger buffer goes in parts, in order.
  for (std::int64_t done = 0; done < n;) {
    const double start = now_s();
    const int count = static_cast<int>(std::min<std::int64_t>(n - done, INT_MAX));
    MPI_Request req = MPI_REQUEST_NULL;
    PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * size, count, type, op, group(), &req));
    finish(req, start, over_ == Over::tensor ? "a tensor-parallel all-reduce" : "a context-parallel all-reduce");
    done += count;
  }
}

void MpiTensorGroup::finish(MPI_Request& req, double start, const char* what) {
  pending_ = true;
  comm_.wait(req, what);
  pending_ = false;
  seconds_ += now_s() - start;
}

namespace {
int mpi_count(std::int64_t n) {
  if (n > INT_MAX) throw Error("a sequence- or context-parallel part of more than 2^31 elements (MPI counts are ints)");
  return static_cast<int>(n);
}
}  // namespace

void MpiTensorGroup::gather(const void* part, void* whole, std::int64_t n, MPI_Datatype type) {
  const double start = now_s();
  MPI_Request req = MPI_REQUEST_NULL;
  PIPEBENCH_MPI_CHECK(MPI_Iallgather(part, mpi_count(n), type, whole, mpi_count(n), type, group(), &req));
  finish(req, start, over_ == Over::tensor ? "a sequence-parallel all-gather" : "a context-parallel K/V all-gather");
}

void MpiTensorGroup::all_gather(const float* part, float* whole, std::int64_t n) { gather(part, whole, n, MPI_FLOAT); }

void MpiTensorGroup::all_gather_bytes(const void* part, void* whole, std::int64_t bytes) {
  gather(part, whole, bytes, MPI_BYTE);
}

void MpiTensorGroup::reduce_scatter(const float* whole, float* part, std::int64_t n) {
  const double start = now_s();
  MPI_Request req = MPI_REQUEST_NULL;
  PIPEBENCH_MPI_CHECK(MPI_Ireduce_scatter_block(whole, part, mpi_count(n), MPI_FLOAT, MPI_SUM, group(), &req));
  finish(req, start, over_ == Over::tensor ? "a sequence-parallel reduce-scatter" : "a context-parallel dK/dV reduce-scatter");
}

void MpiTensorGroup::ring_start(const float* send, float* recv, std::int64_t n) {
  const int size = this->size(), me = rank();
  constexpr int kRingTag = 69;
  pending_ = true;  // until ring_wait: MPI may still write into `recv`
  PIPEBENCH_MPI_CHECK(MPI_Irecv(recv, mpi_count(n), MPI_FLOAT, (me + size - 1) % size, kRingTag, group(), &ring_[0]));
  PIPEBENCH_MPI_CHECK(MPI_Isend(send, mpi_count(n), MPI_FLOAT, (me + 1) % size, kRingTag, group(), &ring_[1]));
}

void MpiTensorGroup::ring_wait() {
  const double start = now_s();  // what the compute in between did not hide
  finish(ring_[0], start, "a context-parallel ring receive");
  finish(ring_[1], now_s(), "a context-parallel ring send");
}

}  // namespace pipebench
