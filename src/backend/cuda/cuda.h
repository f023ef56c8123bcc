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
#include "capstep/cuda_options.h"
#include "capstep/ir.h"

namespace capstep::cuda {

// Throws Error unless the CUDA backend has kernels for everything in p. bf16
// values run (stored as bf16, f32 arithmetic, rounded to nearest even on every
// store as the host interpreter does; bf16 x bf16 -> f32 GEMMs through
// cuBLASLt), except in the attention primitives: their kernels are f32 and f64
// only (optim::mixed_precision_bf16 leaves attention in f32). Executable calls
// it first, before it looks for a device, so the refusal is the same with or
// without a GPU.
// Why the CUDA backend has no kernels for p, or "" when it has them all.
std::string unsupported(const Program& p);   // defined in cuda_backend.cpp
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
