// The CUDA executor: compiles a verified Program for the device once and runs
// it many times. Built whenever the CUDA toolkit is present; at run time,
// available() says whether a device is there, and why not.
//
// Lane 2 uses run(inputs): upload everything, run, download every output.
// Lane 3 uses upload()/step()/download(): inputs stay resident in device
// memory, and an output aliased to an input (Program::aliases) is written back
// into that input's buffer, so parameters and moments never leave the device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"

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

// Throws Error unless the CUDA backend has kernels for everything in p. bf16
// values run (stored as bf16, f32 arithmetic, rounded to nearest even on every
// store as the host interpreter does; bf16 x bf16 -> f32 GEMMs through
// cuBLASLt), except in the attention primitives: their kernels are f32 and f64
// only (optim::mixed_precision_bf16 leaves attention in f32). Executable calls
// it first, before it looks for a device, so the refusal is the same with or
// without a GPU.
// Why the CUDA backend has no kernels for p, or "" when it has them all.
inline std::string unsupported(const Program& p) {
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if ((e.op == Op::attention || e.op == Op::attention_grad) && p.type(e.inputs[0]).dtype == DType::bf16)
      return "program \"" + p.name + "\" has a bf16 attention (equation " + std::to_string(i) + ": " + eqn_text(p, e) +
             "); the GPU's attention kernels are f32 and f64 only, as the host's are: keep attention in f32, or run the "
             "program on the PJRT backend";
  }
  return "";
}
inline void check_supported(const Program& p) {
  if (std::string why = unsupported(p); !why.empty()) throw Error("cuda::Executable: " + why);
}

class Executable {
 public:
  // Throws Error when the program has a bf16 attention (check_supported), no device
  // is available, or the program cannot be compiled.
  explicit Executable(Program p, Options o = {});
  ~Executable();
  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;

  // Lane 2: uploads every input, runs, downloads every output.
  std::vector<Array> run(const std::vector<Array>& inputs);

  // Lane 3: resident inputs.
  void upload(int input, const Array& a);          // into the input's device buffer
  void step();                                     // run once on the resident inputs
  void download_output(int output, Array& dst);    // an output to the host
  void download_input(int input, Array& dst);      // an input's current contents

  const Program& program() const;
  size_t device_bytes() const;                     // all device memory held
  // "fused: 839 equations: 703 launches -> 180 (...), NVRTC 1.2 s" or "unfused: ..."
  std::string describe_launches() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace capstep::cuda
