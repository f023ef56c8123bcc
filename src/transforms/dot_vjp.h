// VJP of dot_general for arbitrary batch and contracting dimensions.
#pragma once

#include "capstep/trace.h"

namespace capstep::autodiff_detail {

// Cotangents of lhs and rhs of `out = dot_general(lhs, rhs, d)` given g = d(loss)/d(out).
Tensor dot_general_vjp_lhs(const Tensor& g, const Tensor& rhs, const Type& lhs_type, const DotDims& d);
Tensor dot_general_vjp_rhs(const Tensor& g, const Tensor& lhs, const Type& rhs_type, const DotDims& d);

}  // namespace capstep::autodiff_detail
