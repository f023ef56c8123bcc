// The GPU kernels a Program becomes, in words, without a GPU: what `capstep
// show --kernels` prints. The planner behind it is the CUDA backend's.
#pragma once

#include <string>

#include "capstep/ir.h"

namespace capstep {

// The plan of p's kernels as the CUDA backend would launch them, in words
// (fused: the fusion groups; unfused: one kernel per equation).
std::string describe_gpu_kernels(const Program& p, bool fused = true);

}  // namespace capstep
