// The state of one compiled Program on the device, shared by executable.cpp
// (memory, upload/download, graph capture and replay) and compile.cpp (one
// launch per equation).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/kernels.h"
#include "backend/plan/kernel_plan.h"
#include "backend/cuda/cuda.h"
#include "backend/plan/device_plan.h"

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
  // The kernel plan (plan/kernel_plan.h): the fused grouping, GEMM layouts,
  // memory plan and launch list, all computed without the GPU. prog is the
  // plan's program (each fused group contiguous).
  plan::KernelPlan kp;
  const plan::Plan& plan() const { return kp.memory; }
  cudaLibrary_t loop_lib = nullptr;
  std::vector<cudaKernel_t> source_kernel;  // per kp.sources entry
  double nvrtc_seconds = 0;
  std::string fuse_failure;                // why Options::fuse fell back to one kernel per equation
  // Options::persistent: the whole step as one cooperative kernel
  cudaLibrary_t persist_lib = nullptr;
  cudaKernel_t persist_kernel = nullptr;
  plan::KernelSource persist_source;
  unsigned persist_grid = 0;               // blocks launched (all resident at once)
  std::string persist_failure;             // why Options::persistent was not used
  cublasLtHandle_t lt = nullptr;
  // The fused attention kernels (plan/attention_source.h), compiled by NVRTC
  // on the first attention item, fused or not.
  cudaLibrary_t attn_lib = nullptr;
  std::map<std::string, cudaKernel_t> attn_kernel;
  std::vector<std::unique_ptr<LtGemm>> lt_gemm;  // per equation (dot_general only)

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
  char* value_addr(int value) const { return addr(kp.memory.values[static_cast<size_t>(value)].loc); }
  void* device_alloc(size_t bytes, const char* what);
  std::string eqn_what(int eqn) const;    // "equation 12 (%15 = dot_general(...) ...)"
  // fused_launch.cpp: compile `source` with NVRTC for this device (cached per
  // process) and load it into lib; `what` names it in errors.
  void load_generated(const std::string& source, const std::string& what, cudaLibrary_t& lib);
  void compile_kernels();                 // fused_launch.cpp: NVRTC, then load
  void point_error_flag();                // fused_launch.cpp: the kernels' capstep_err -> d_err
  void compile_persistent();              // fused_launch.cpp: the persistent kernel, its grid
  void add_persistent_launch();           // fused_launch.cpp
  void add_generated_launch(const plan::Item& it);  // fused_launch.cpp
  void add_single_launch(const plan::Item& it);     // compile.cpp: one equation's kernel or library call
  void add_attention_launch(const plan::Item& it);  // attention_launch.cpp: the attention kernels of an item
  cudaKernel_t attention_kernel(const std::string& name);  // attention_launch.cpp
  void build_launches();                  // compile.cpp: every item of the kernel plan, then the end copies
  void fill_statics();                    // compile.cpp
  void enqueue_step();                    // every launch, in order, on the stream
  void check_device_error();              // after a step: the gather/scatter error flag
};

}  // namespace capstep::cuda
