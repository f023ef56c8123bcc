// capstep/kernel_report.h: the kernel plan's description, from the planner's header.
#include "capstep/kernel_report.h"

#include "backend/plan/kernel_plan.h"

namespace capstep {

std::string describe_gpu_kernels(const Program& p, bool fused) { return plan::plan_kernels(p, {fused}).describe(); }

}  // namespace capstep
