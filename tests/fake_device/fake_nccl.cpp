// A stand-in for libnccl, loaded through PIPEBENCH_NCCL_LIBRARY by the
// runtime's dlopen seam (lib/runtime/src/nccl_api.hpp) in the failure-path
// tests of this folder. It moves no data: a communicator is a counted token,
// and every call that makes, aborts or destroys one is counted, so a test can
// see which way each communicator ended on a path that has no GPU.
#include <cstring>

#include <nccl.h>

namespace {

struct Token {
  int live = 1;
};

// fake_nccl_counts(): made, aborted, destroyed, ended twice (or never made).
int counts[4] = {0, 0, 0, 0};

ncclComm_t make() {
  ++counts[0];
  return reinterpret_cast<ncclComm_t>(new Token);
}

ncclResult_t end(ncclComm_t comm, int which) {
  auto* t = reinterpret_cast<Token*>(comm);
  if (!t || !t->live) {
    ++counts[3];
    return ncclInvalidArgument;
  }
  t->live = 0;  // kept, not freed: a second end is counted, not a use after free
  ++counts[which];
  return ncclSuccess;
}

}  // namespace

extern "C" {

const int* fake_nccl_counts() { return counts; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  *comm = make();
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t* out, ncclConfig_t*) {
  *out = make();
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return end(comm, 1); }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end(comm, 2); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "fake nccl error"; }
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}

}  // extern "C"
