// The packs of a program's all_reduce equations
// (optim::DataParallelOptions::pack): maximal runs of 2 or more consecutive
// all_reduce equations of one dtype, none reading another's result. A backend
// sends a pack as ONE message (the host interpreter: one all_reduce_sum of the
// members copied into one buffer); the StableHLO writer emits it as one
// variadic stablehlo.all_reduce, which the reader splits again.
#pragma once

#include <vector>

#include "capstep/ir.h"

namespace capstep {

// pack[i]: equation i's pack (0, 1, ... in program order), or -1.
std::vector<int> all_reduce_packs(const Program& p);

}  // namespace capstep
