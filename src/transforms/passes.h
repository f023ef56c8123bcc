// Program -> Program pieces the transforms share: the clean-ups that
// value_and_grad runs on its result, and what the two recomputing transforms
// (checkpoint_activations, recompute_in_backward) build their copies with.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "capstep/transforms.h"

namespace capstep::autodiff_detail {

// Each value's defining equation (-1: an input) and its number of readers
// (each operand slot of an equation, each output), for the local rewrites.
struct DefUse {
  std::vector<int> def, uses;
  explicit DefUse(const Program& p);
  // The equation at or after `first` that makes v, when v has exactly one
  // reader; -1 otherwise.
  int sole(int v, size_t first = 0) const {
    const int d = def[static_cast<size_t>(v)];
    return d < 0 || static_cast<size_t>(d) < first || uses[static_cast<size_t>(v)] != 1 ? -1 : d;
  }
};

// Local algebra on splat constants, which the VJP rules produce (the seed 1,
// its broadcasts, zeros of select): shape ops and float converts of a splat
// become a splat constant; x*1, 1*x, x/1, x+0, 0+x, x-0 and select(p, x, x)
// become x. Unused equations remain; dead_code_eliminate drops them.
Program simplify(const Program& p);

// Moves negations off full-size arrays, where subtract's VJP puts them:
// reduce_sum(-x) -> -reduce_sum(x) (the negate runs on the smaller result),
// a + -b -> a - b, -a + b -> b - a, a - -b -> a + b (also through a
// broadcast_in_dim of the negate); only where the negate has
// no other use. Dead negates remain for dead_code_eliminate.
Program sink_negations(const Program& p);

// Moves a widening convert (bf16 -> f32) at or after equation `first` (the
// gradient's equations) below the transposes and reshapes it reads, when
// each of those views has no other reader: convert(view(..view(y))) becomes
// view(..view(convert(y))), the same bits. Mixed precision converts the
// source of a transposed GEMM operand (optim.h), so the cotangent of that
// source is a bf16 value's views widened; widened first, the views are the
// f32 ones of an f32 program: a GEMM that reads the cotangent reads the f32
// transpose in place, and the widening joins the narrowing convert that
// made the bf16 value (both in the producing GEMM's epilogue on the GPU),
// instead of a bf16 value stored only to be transposed and widened.
Program widen_before_views(const Program& p, size_t first);

// A transpose at or after equation `first` of float converts of a
// dot_general's result, each value read by the next alone, whose permutation
// swaps the product's lhs-free and rhs-free axes (its batch axes first):
// the converts of the dot_general with its operands swapped, the result in
// the transpose's layout (C^T = B^T A^T: each element the same sum of the
// same products). A transpose of the product itself stays as it is: the
// host's GEMM writes its result through the transpose's strides.
Program swap_transposed_dots(const Program& p, size_t first);

// Per equation of a gradient program: whether output 0 (the loss) depends on
// it, the forward. value_and_grad's gradient equations never feed the loss;
// an equation the common-subexpression pass shared between the two counts as
// forward.
std::vector<char> forward_equations(const Program& p);

// An equation op(ins) of type t, appended to `to` (q.eqns, or equations to
// be placed in q later), its result a new value of q; returns it.
int append(Program& q, std::vector<Eqn>& to, Op op, std::vector<int> ins, Attrs a, const Type& t);

// A constant true of type t's shape (i1; broadcast unless t is a scalar),
// appended to `to`, equations of q (whose types grow), each in region `region`.
int true_of(Program& q, std::vector<Eqn>& to, const Type& t, int region = -1);

// select(true, x, g) appended to q: x's bits, which a scheduler that orders by
// dependencies alone cannot read before g (a gradient value of x's type)
// exists, so a recomputation that reads x through it cannot run in the
// forward, where its values would be held as long as the originals. The
// scalar true is made once per region (`trues`), its broadcast to x's shape
// once per select (a broadcast shared by many selects would fuse them all
// into one group, run after the last). Every equation made is in region
// `region`.
int anchor(Program& q, std::map<std::string, int>& trues, int x, int g, int region = -1);

}  // namespace capstep::autodiff_detail
