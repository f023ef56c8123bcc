// NVRTC: compiles the fused loop kernels' source (plan/kernel_source.h) to a
// device image. Needs no device, so the code generation is tested on machines
// with the toolkit and no GPU.
#pragma once

#include <string>
#include <vector>

namespace capstep::cuda {

struct NvrtcResult {
  std::vector<char> image;   // a cubin (arch "sm_XY") or NUL-terminated PTX (arch "compute_XY")
  std::string log;           // the compiler's log (warnings)
  double seconds = 0;        // compile time
};

// Compiles `source` (which includes "ir/scalar_math.h", supplied from the
// library's copy) for `arch`. Throws Error with the compiler's log on failure;
// `what` names the program in the message.
NvrtcResult nvrtc_compile(const std::string& source, const std::string& arch, const std::string& what);

// The target for a device of compute capability major.minor: "sm_XY" when
// this NVRTC can emit it, else PTX for the newest virtual architecture it
// knows that is not newer than the device ("compute_XY"), which the driver
// compiles when it loads it.
std::string nvrtc_arch_for(int major, int minor);

// nvrtc_compile through a per-process cache by (arch, source)
// (fused_launch.cpp): a source compiled before costs nothing (seconds 0).
NvrtcResult compile_cached(const std::string& source, const std::string& arch, const std::string& what);

}  // namespace capstep::cuda
