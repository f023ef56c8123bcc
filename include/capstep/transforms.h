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

// ---- activation checkpointing ------------------------------------------------
// The checkpoint regions (Attrs::region >= 0; a causal LM's transformer
// blocks, numbered from 0) that p's equations carry, ascending.
std::vector<int> checkpoint_regions(const Program& p);
// The regions r of p with r % every == 0 (every = 1: all of them; K: every
// K-th block, from block 0). Error when every < 1.
std::vector<int> every_kth_region(const Program& p, int every);

// Activation checkpointing, a transform of value_and_grad's result (or of a
// transform of it: data_parallel, clip_grad_norm, with_adamw, in any order):
// for each listed region, the gradient equations' reads of the region's
// forward values go to copies of the region's forward equations (the same
// operations, in the same order, from the same operands), placed just before
// the first gradient equation that reads one; the originals then die inside
// the forward. The forward is what output 0 (the loss) depends on. A region
// value that a forward equation outside the region reads (the block's
// result on the residual stream, a constant shared with other blocks), or
// that is an output, is kept and read as it is. The copies read the region's
// main input (the largest value it reads from outside, other than p's inputs,
// that depends on p's inputs: the residual stream) through
// select(true, input, g), g the last gradient value
// of its type before them: the same bits, and a data dependency, so that no
// backend's scheduler runs the recomputation during the forward. The result has p's inputs,
// outputs and aliases and the same values bit for bit; it holds the
// activations of the regions listed for less of the step, at the cost of
// computing their forward twice. It applies no common-subexpression
// elimination afterwards (that would merge the copies back). Throws Error
// naming a listed region p has no equation in.
Program checkpoint_activations(const Program& p, const std::vector<int>& regions);

}  // namespace capstep
