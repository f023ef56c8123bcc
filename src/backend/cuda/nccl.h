// NCCL for the data-parallel GPU lanes: one process per GPU, the
// gradient all-reduce of the step program (Op::all_reduce) as ncclAllReduce
// (sum) on the step's stream, so that it is part of the step's CUDA graph
// (NCCL supports stream capture). Built only when CMake finds NCCL
// (CAPSTEP_HAVE_NCCL); the host communicator (MPI) carries the ncclUniqueId
// from rank 0 to the others.
//
// Tested on one GPU only (one rank: the NCCL path against the plain GPU lane).
// Several GPUs are untested until a machine with several is available.
#pragma once

#ifdef CAPSTEP_HAVE_NCCL

#include <cuda_runtime_api.h>

#include <cstdint>

#include "capstep/collective.h"
#include "capstep/ir.h"

namespace capstep::cuda {

class NcclCommunicator {
 public:
  // Every rank of `host` calls it at the same point: rank 0 makes the
  // ncclUniqueId, host.broadcast gives it to the others, then each joins the
  // NCCL communicator of host.size() ranks as host.rank(), on the current CUDA
  // device (the CLI gives each rank its own GPU: see cmd_train.cpp). Throws
  // Error naming the NCCL call and its error string.
  explicit NcclCommunicator(Communicator& host);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // out[0..n) = the sum over the ranks of in[0..n) (f32 or f64; in == out is
  // in place), enqueued on `stream` (capturable). Throws Error when NCCL
  // refuses to enqueue it.
  void all_reduce_sum(const void* in, void* out, int64_t n, DType dtype, cudaStream_t stream) const;

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1;
};

// "NCCL 2.28.9" (the library's, at run time).
const char* nccl_version();

}  // namespace capstep::cuda

#endif  // CAPSTEP_HAVE_NCCL
