#include "pipebench/runtime/tensor_group_mpi.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "pipebench/core/clock.hpp"

namespace pipebench {

double MpiTensorGroup::take_seconds() { return std::exchange(seconds_, 0.0); }

void MpiTensorGroup::reduce(void* data, std::int64_t n, MPI_Datatype type, MPI_Op op) {
  const double start = now_s();
  int size = 0;
  PIPEBENCH_MPI_CHECK(MPI_Type_size(type, &size));
  auto* bytes = static_cast<char*>(data);
  // MPI counts are ints: a larger buffer goes in parts, in order.
  for (std::int64_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min<std::int64_t>(n - done, INT_MAX));
    MPI_Request req = MPI_REQUEST_NULL;
    PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * size, count, type, op, comm_.tensor(), &req));
    pending_ = true;
    comm_.wait(req, "a tensor-parallel all-reduce");
    pending_ = false;
    done += count;
  }
  seconds_ += now_s() - start;
}

}  // namespace pipebench
