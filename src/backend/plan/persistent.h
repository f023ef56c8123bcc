// The persistent kernel (issue "GPU step at the launch floor", item 3): the
// whole kernel plan of one step as ONE launch. Every generated kernel of the
// plan (plan::KernelPlan::sources, in launch order) becomes a __device__
// function of its block index and block count (device_function); the one
// __global__ kernel runs them as phases: in phase k each resident block takes
// the phase's blocks b = blockIdx.x, blockIdx.x + gridDim.x, ... and calls the
// phase's function for each, then every block meets at a grid-wide barrier
// before phase k+1 (what the end of a launch guaranteed before). So the
// phases read and write exactly what the launches did, in the same order,
// and the device memory plan holds unchanged.
//
// The barrier is a counter and a generation in device memory (module
// globals): the last block to arrive resets the counter and advances the
// generation, the others wait for it. It is only correct when every block of
// the grid is resident at once: the executor launches at most as many blocks
// as the device holds together (occupancy x multiprocessors), cooperatively.
//
// Only a plan whose every item is a generated kernel (or an end copy, which
// the executor does after the step) can be one kernel; persistent_kernel_source
// says which item stops it otherwise.
#pragma once

#include <string>

#include "backend/plan/kernel_plan.h"

namespace capstep::plan {

// Why kp cannot run as one persistent kernel ("" when it can).
std::string persistent_blocker(const KernelPlan& kp);

// The persistent kernel of kp, named "capstep_persistent": its params are
// every value any phase reads or writes (those no phase writes first, as
// const inputs); `blocks` is the most blocks any phase can use (the launch
// may use fewer: each phase strides over its own). Error naming the
// blocker when persistent_blocker(kp) is not empty.
KernelSource persistent_kernel_source(const KernelPlan& kp);

}  // namespace capstep::plan
