// Every CUDA runtime and cuBLAS call's return code is checked; a failure
// becomes a capstep::Error that names the call and the library's error string.
#pragma once

#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "capstep/ir.h"

namespace capstep::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const std::string& context);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const std::string& context);

inline void check(cudaError_t e, const char* call, const std::string& context = {}) {
  if (e != cudaSuccess) throw_cuda(e, call, context);
}
inline void check(cublasStatus_t s, const char* call, const std::string& context = {}) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas(s, call, context);
}

}  // namespace capstep::cuda

// CAPSTEP_CU(cudaMalloc(&p, n)) or CAPSTEP_CU(cublasCreate(&h), "while ...")
#define CAPSTEP_CU(call, ...) ::capstep::cuda::check((call), #call __VA_OPT__(, ) __VA_ARGS__)
