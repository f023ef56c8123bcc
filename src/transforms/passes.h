// Program -> Program clean-ups that value_and_grad runs on its result.
#pragma once

#include "capstep/transforms.h"

namespace capstep::autodiff_detail {

// Local algebra on splat constants, which the VJP rules produce (the seed 1,
// its broadcasts, zeros of select): shape ops and float converts of a splat
// become a splat constant; x*1, 1*x, x/1, x+0, 0+x, x-0 and select(p, x, x)
// become x. Unused equations remain; dead_code_eliminate drops them.
Program simplify(const Program& p);

}  // namespace capstep::autodiff_detail

namespace capstep::autodiff_detail {

// Moves negations off full-size arrays, where subtract's VJP puts them:
// reduce_sum(-x) -> -reduce_sum(x) (the negate runs on the smaller result),
// a + -b -> a - b, -a + b -> b - a, a - -b -> a + b (also through a
// broadcast_in_dim of the negate); only where the negate has
// no other use. Dead negates remain for dead_code_eliminate.
Program sink_negations(const Program& p);

}  // namespace capstep::autodiff_detail

namespace capstep::autodiff_detail {

// Per equation of a gradient program: whether output 0 (the loss) depends on
// it, the forward. value_and_grad's gradient equations never feed the loss;
// an equation the common-subexpression pass shared between the two counts as
// forward.
std::vector<char> forward_equations(const Program& p);

}  // namespace capstep::autodiff_detail
