// NcclCommunicator: see nccl.h.
#include "backend/cuda/nccl.h"

#ifdef CAPSTEP_HAVE_NCCL

#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace capstep::cuda {
namespace {

void check_nccl(ncclResult_t r, const char* call, const std::string& context = {}) {
  if (r == ncclSuccess) return;
  std::string m = std::string(call) + " failed: " + ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && last[0] != '\0') m += " (" + std::string(last) + ")";
  if (!context.empty()) m += " " + context;
  throw Error(m);
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& host) : rank_(host.rank()), size_(host.size()) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  host.broadcast(&id, static_cast<int64_t>(sizeof id), 0);
  ncclComm_t c = nullptr;
  check_nccl(ncclCommInitRank(&c, size_, id, rank_), "ncclCommInitRank",
             "(rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  comm_ = c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclCommunicator::all_reduce_sum(const void* in, void* out, int64_t n, DType dtype, cudaStream_t stream) const {
  ncclDataType_t t = ncclFloat32;
  switch (dtype) {
    case DType::f32: t = ncclFloat32; break;
    case DType::f64: t = ncclFloat64; break;
    case DType::i32: case DType::i1: case DType::bf16:
      throw Error(std::string("all_reduce on the GPU: sums f32 and f64 only, got ") + dtype_name(dtype));
  }
  if (n <= 0) return;
  check_nccl(ncclAllReduce(in, out, static_cast<size_t>(n), t, ncclSum, static_cast<ncclComm_t>(comm_), stream),
             "ncclAllReduce");
}

const char* nccl_version() {
  static char buf[48];
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  std::snprintf(buf, sizeof buf, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  return buf;
}

}  // namespace capstep::cuda

#endif  // CAPSTEP_HAVE_NCCL
