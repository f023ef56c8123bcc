// Reverse-mode differentiation: Program -> Program.
//
//   Program g = capstep::value_and_grad(loss_program, {"w", "b"});
//   // g: same inputs; outputs = loss_program's outputs, then "grad.w", "grad.b"
//
// The gradient equations are ordinary primitives (emitted through the Tensor
// API), so every backend and the StableHLO export run them unchanged.
#pragma once

#include <string>
#include <vector>

#include "capstep/ir.h"

namespace capstep {

// Output 0 of `p` must be a scalar float (the loss). Each name in `wrt` must be
// a float input of `p`, listed once. The result has p's inputs and aliases;
// its outputs are p's outputs followed by "grad.<name>" for each wrt name, in
// order, of the input's type (zeros when the loss does not depend on it).
// Throws Error otherwise.
Program value_and_grad(const Program& p, const std::vector<std::string>& wrt);

// Merges equations that compute the same thing (same op, operands, attributes
// and type), then drops what no output needs. value_and_grad applies it; it is
// exposed for other transforms that append equations.
Program eliminate_common_subexpressions(const Program& p);

}  // namespace capstep
