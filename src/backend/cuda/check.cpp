#include "backend/cuda/check.h"

namespace capstep::cuda {

void throw_cuda(cudaError_t e, const char* call, const std::string& context) {
  std::string msg = "CUDA: " + std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorMemoryAllocation) msg = "out of device memory: " + msg;
  if (!context.empty()) msg += " " + context;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw Error(msg);
}

void throw_cublas(cublasStatus_t s, const char* call, const std::string& context) {
  std::string msg = "cuBLAS: " + std::string(call) + " failed: " + cublasGetStatusName(s) + " (" +
                    cublasGetStatusString(s) + ")";
  if (s == CUBLAS_STATUS_ALLOC_FAILED) msg = "out of device memory: " + msg;
  if (!context.empty()) msg += " " + context;
  throw Error(msg);
}

}  // namespace capstep::cuda
