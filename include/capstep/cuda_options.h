// The CUDA backend's switches (BackendOptions::cuda) and whether a device is
// here: its public face for code above the backends, which runs programs
// through capstep/backend.h and never includes the executor itself
// (src/backend/cuda/cuda.h).
#pragma once

#include <string>

namespace capstep::cuda {

// True when this build has the CUDA backend and a usable device is present.
// Otherwise false, with the reason in *why ("built without CUDA",
// "no CUDA device", "driver too old: ...").
bool available(std::string* why = nullptr);
// "NVIDIA H200 (sm_90, 139 GiB)" or the reason there is none.
std::string device_description();

class NcclCommunicator;  // src/backend/cuda/nccl.h (built with NCCL only)

// Every field has a fixed default; the library reads no environment variable.
// The capstep command and the example set fuse, lt_gemm, generated_gemm and
// persistent from CAPSTEP_CUDA_* (docs/cli.md, "Environment").
struct Options {
  bool tf32 = true;           // TF32 tensor cores for f32 dots
  bool cuda_graph = true;     // capture the whole step once, replay it
  // Launch the kernel plan (src/backend/plan/kernel_plan.h): elementwise
  // chains, row and column reductions with their elementwise neighbours, and
  // the parameter updates each one generated kernel, compiled with NVRTC when
  // the Program is compiled; false: one kernel per equation. Either way the equations may run
  // in another (valid) order, and program() returns them in that order.
  bool fuse = true;
  // GEMMs through cuBLASLt with an algorithm chosen at compile time, without
  // split-K where the library offers one (one kernel per GEMM); false: the
  // cuBLAS default (which adds a split-K reduction kernel to small GEMMs).
  bool lt_gemm = true;
  // With fuse: small dot_generals (up to 2^22 multiply-adds) as generated GEMM
  // kernels that read transposed operands in place and share launches with
  // other independent kernels (plan::KernelPlanOptions::gemm_max_macs); false:
  // every dot_general through the GEMM library.
  bool generated_gemm = true;
  // With fuse, when every kernel of the plan is generated (the seed's step):
  // the whole step as ONE kernel whose phases are the plan's kernels, with a
  // grid-wide barrier between them, launched cooperatively with as many
  // blocks as the device holds at once (plan/persistent.h). Off by default
  // (the launches are the tried path). A plan
  // that cannot be one kernel, or a device that refuses it, runs the plan's
  // launches as before and says why (describe_launches()).
  bool persistent = false;
  // The replicas Op::all_reduce sums over on the GPU (not owned; must outlive
  // the Executable): each all_reduce is an ncclAllReduce on the step's stream,
  // inside its CUDA graph. nullptr: one replica, all_reduce is a device copy.
  // Set by the CUDA backend (make_backend) from BackendOptions::communicator,
  // which builds and owns the NcclCommunicator; a caller of make_backend
  // leaves it alone (it is overwritten there); making one takes
  // src/backend/cuda/nccl.h, which is not installed.
  NcclCommunicator* nccl = nullptr;
};

}  // namespace capstep::cuda
