// A stand-in for libnccl, loaded through PIPEBENCH_NCCL_LIBRARY by the
// runtime's dlopen seam (lib/runtime/src/nccl_api.hpp) in the failure-path
// tests of this folder. It moves no data: a communicator is a token, and
// every call that makes, ends or uses one is traced, so a test can
// see which way each communicator ended on a path that has no GPU.
//
// fake_nccl_trace(): the calls so far, one letter each, in order: i
// ncclCommInitRank, x ncclCommSplit, a ncclCommAbort, d ncclCommDestroy,
// { ncclGroupStart, } ncclGroupEnd, s ncclSend, r ncclRecv, A ncclAllReduce, and ! for an
// abort or destroy of a communicator already ended (or never made).
#include <cstring>
#include <string>

#include <nccl.h>

namespace {

struct Token {
  int live = 1;
};

std::string trace;

ncclComm_t make(char call) {
  trace += call;
  return reinterpret_cast<ncclComm_t>(new Token);
}

ncclResult_t end(ncclComm_t comm, char call) {
  auto* t = reinterpret_cast<Token*>(comm);
  if (!t || !t->live) {
    trace += '!';
    return ncclInvalidArgument;
  }
  t->live = 0;  // kept, not freed: a second end is traced, not a use after free
  trace += call;
  return ncclSuccess;
}

ncclResult_t call(char c) {
  trace += c;
  return ncclSuccess;
}

}  // namespace

extern "C" {

const char* fake_nccl_trace() { return trace.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  *comm = make('i');
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t* out, ncclConfig_t*) {
  *out = make('x');
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return end(comm, 'a'); }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end(comm, 'd'); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "fake nccl error"; }
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() { return call('{'); }
ncclResult_t ncclGroupEnd() { return call('}'); }
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return call('s'); }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return call('r'); }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return call('A');
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return ncclSuccess; }
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}

}  // extern "C"
