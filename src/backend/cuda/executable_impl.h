// The state of one compiled Program on the device, shared by executable.cpp
// (memory, upload/download, graph capture and replay) and compile.cpp (one
// launch per equation).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#include "backend/plan/fusion.h"
#include "backend/plan/gemm_layout.h"
#include "capstep/cuda.h"
#include "capstep/device_plan.h"

namespace capstep::cuda {

// One piece of the step, in order: enqueues its work on the stream, throws
// Error (naming the equation) when an enqueue fails.
struct Launch {
  int eqn = -1;                     // -1: not an equation (error reset, end-of-step copy)
  std::function<void()> enqueue;
};

struct Executable::Impl {
  Program prog;
  Options opt;
  plan::Plan plan;
  std::vector<plan::GemmLayout> gemm;     // per equation (dot_general only)
  // Fusion (Options::fuse): groups of prog's equations, which fuse_program has
  // already reordered so that each group is contiguous; a loop group is one
  // NVRTC-compiled kernel from loop_lib.
  plan::Fused fused;
  cudaLibrary_t loop_lib = nullptr;
  std::vector<cudaKernel_t> group_kernel;  // per group: its kernel, or null
  std::vector<std::vector<int>> group_params;  // per group: the kernel's value parameters
  double nvrtc_seconds = 0;
  std::string fuse_failure;                // why Options::fuse fell back to one kernel per equation

  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  char* d_inputs = nullptr;
  char* d_statics = nullptr;
  char* d_arena = nullptr;
  void* d_workspace = nullptr;            // cuBLAS workspace (fixed, so graph capture allocates nothing)
  size_t workspace_bytes = 0;
  k::DeviceError* d_err = nullptr;
  k::DeviceError* h_err = nullptr;        // pinned
  size_t held_bytes = 0;

  // pinned staging for uploads, one per input, with the event of its last copy
  std::vector<void*> h_stage;
  std::vector<cudaEvent_t> stage_done;

  std::vector<Launch> launches;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  int steps_run = 0;
  bool graph_failed = false;

  ~Impl();
  char* addr(const plan::Loc& l) const;
  char* value_addr(int value) const { return addr(plan.values[static_cast<size_t>(value)].loc); }
  void* device_alloc(size_t bytes, const char* what);
  std::string eqn_what(int eqn) const;    // "equation 12 (%15 = dot_general(...) ...)"
  void compile_loop_kernels();            // fused_launch.cpp: NVRTC, then load
  void add_loop_launch(int group);        // fused_launch.cpp
  void build_launches();                  // compile.cpp
  void fill_statics();                    // compile.cpp
  void enqueue_step();                    // every launch, in order, on the stream
  void check_device_error();              // after a step: the gather/scatter error flag
};

}  // namespace capstep::cuda
