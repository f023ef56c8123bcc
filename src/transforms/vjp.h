// The VJP rules of the primitives (internal to src/autodiff).
#pragma once

#include <vector>

#include "capstep/trace.h"

namespace capstep::autodiff_detail {

// Cotangents of the operands of equation `e` (whose operands and result are
// values of tr.program()) given the cotangent `g` of its result. need[i] says
// whether operand i wants one; an entry left empty (invalid Tensor) means
// "contributes nothing".
std::vector<Tensor> vjp(Tracer& tr, const Eqn& e, const Tensor& g, const std::vector<bool>& need);

}  // namespace capstep::autodiff_detail
