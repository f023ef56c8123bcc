// One VJP rule per primitive, in a switch with no default: a primitive added to
// the table without a rule here fails the build (-Werror=switch).
#include <algorithm>

#include "transforms/dot_vjp.h"
#include "transforms/vjp.h"

namespace capstep::autodiff_detail {
namespace {

Tensor zeros(Tracer& tr, const Type& t) { return tr.constant(t, {0.0}); }

// Sum g over the axes broadcast_in_dim created or stretched, then restore the
// operand's size-1 axes.
Tensor unbroadcast(const Tensor& g, const Type operand, const std::vector<int64_t>& dims) {
  const Shape out = g.shape();
  std::vector<bool> from_operand(out.size(), false);
  std::vector<int64_t> axes;
  for (size_t i = 0; i < dims.size(); ++i) {
    const size_t o = static_cast<size_t>(dims[i]);
    from_operand[o] = true;
    if (operand.shape[i] == 1 && out[o] != 1) axes.push_back(dims[i]);
  }
  for (size_t o = 0; o < out.size(); ++o)
    if (!from_operand[o]) axes.push_back(static_cast<int64_t>(o));
  Tensor r = sum(g, axes);
  return reshape(r, operand.shape);  // records nothing when the shape already matches
}

// The cotangent of slice(a): g put back where the slice read it, zeros
// elsewhere. A stride s > 1 along an axis first spreads g's n elements s
// apart there (each followed by s - 1 zeros: a new axis of 1 padded to s and
// merged, then the trailing zeros cut), so that the one pad leaves every
// element at start + k * s. The operand's type comes by value: emitting
// grows the program's type table, which p.type() refers into.
Tensor unslice(Tensor g, const Type operand, const Attrs& a) {
  const size_t r = operand.shape.size();
  std::vector<int64_t> lows(r), highs(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t n = g.shape()[d], st = a.strides[d];
    int64_t span = n;  // elements from the first read to the last, inclusive
    if (st > 1 && n > 1) {  // (one element needs no spreading, whatever the stride)
      const Shape gs = g.shape();
      Shape split;  // g's shape with an axis of 1 after d
      for (size_t k = 0; k < r; ++k) {
        split.push_back(gs[k]);
        if (k == d) split.push_back(1);
      }
      std::vector<int64_t> lo(r + 1, 0), hi(r + 1, 0);
      hi[d + 1] = st - 1;
      Shape merged = g.shape();
      merged[d] = n * st;
      g = reshape(pad(reshape(g, split), lo, hi), merged);
      span = (n - 1) * st + 1;
      std::vector<int64_t> st0(r, 0), lim = g.shape();
      lim[d] = span;
      g = slice(g, st0, lim);
    }
    lows[d] = a.starts[d];
    highs[d] = operand.shape[d] - a.starts[d] - span;
  }
  return pad(g, lows, highs);
}

std::vector<int64_t> kept(int rank, const std::vector<int64_t>& reduced) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i)
    if (std::find(reduced.begin(), reduced.end(), i) == reduced.end()) out.push_back(i);
  return out;
}

}  // namespace

std::vector<Tensor> vjp(Tracer& tr, const Eqn& e, const Tensor& g, const std::vector<bool>& need) {
  // Types are copied out of p before emitting: emitting grows its type table.
  const Program& p = tr.program();
  std::vector<Tensor> x;  // operands as Tensors
  for (int v : e.inputs) x.emplace_back(&tr, v);
  const Tensor out(&tr, e.out);
  const Type out_type = p.type(e.out);
  std::vector<Tensor> gx(e.inputs.size());
  auto wants = [&](size_t i) { return need[i]; };

  switch (e.op) {
    // Values that depend on no operand, or only through comparisons: nothing flows.
    case Op::constant:
    case Op::iota:
    case Op::compare:
      break;

    case Op::add:
      if (wants(0)) gx[0] = g;
      if (wants(1)) gx[1] = g;
      break;
    case Op::subtract:
      if (wants(0)) gx[0] = g;
      if (wants(1)) gx[1] = -g;
      break;
    case Op::multiply:
      if (wants(0)) gx[0] = g * x[1];
      if (wants(1)) gx[1] = g * x[0];
      break;
    case Op::divide: {
      // out = a / b:  da = g / b,  db = -g a / b^2 = -(g / b) * out
      Tensor gb_ = g / x[1];
      if (wants(0)) gx[0] = gb_;
      if (wants(1)) gx[1] = -(gb_ * out);
      break;
    }
    case Op::maximum: {
      // Ties go to the first operand, so that exactly one side receives g.
      Tensor first = compare(x[0], x[1], Cmp::GE);
      Tensor z = zeros(tr, out_type);
      if (wants(0)) gx[0] = select(first, g, z);
      if (wants(1)) gx[1] = select(first, z, g);
      break;
    }
    case Op::negate:
      gx[0] = -g;
      break;
    case Op::exponential:
      gx[0] = g * out;
      break;
    case Op::log:
      gx[0] = g / x[0];
      break;
    case Op::tanh:
      gx[0] = g * (1.0 - out * out);
      break;
    case Op::rsqrt:
      // d/da a^(-1/2) = -1/2 a^(-3/2) = -1/2 * out / a
      gx[0] = (g * out / x[0]) * -0.5;
      break;
    case Op::sqrt:
      // d/da sqrt(a) = 1 / (2 sqrt(a))
      gx[0] = g / (out * 2.0);
      break;

    case Op::select: {
      // The predicate is boolean: no cotangent. Each branch gets g where chosen.
      Tensor z = zeros(tr, out_type);
      if (wants(1)) gx[1] = select(x[0], g, z);
      if (wants(2)) gx[2] = select(x[0], z, g);
      break;
    }
    case Op::convert: {
      // Only float -> float conversions carry derivatives; to or from integers
      // and booleans the function is piecewise constant.
      const DType from = p.type(e.inputs[0]).dtype;
      if (is_float(from) && is_float(out_type.dtype)) gx[0] = convert(g, from);
      break;
    }

    case Op::broadcast_in_dim:
      gx[0] = unbroadcast(g, p.type(e.inputs[0]), e.attrs.dims);
      break;
    case Op::reshape:
      gx[0] = reshape(g, Shape(p.type(e.inputs[0]).shape));
      break;
    case Op::transpose: {
      std::vector<int64_t> inv(e.attrs.dims.size());
      for (size_t i = 0; i < inv.size(); ++i) inv[static_cast<size_t>(e.attrs.dims[i])] = static_cast<int64_t>(i);
      gx[0] = transpose(g, inv);
      break;
    }
    case Op::dot_general: {
      const DotDims d{e.attrs.lhs_batch, e.attrs.rhs_batch, e.attrs.lhs_contract, e.attrs.rhs_contract};
      // bf16 operands, f32 result: the two cotangent GEMMs are bf16 x bf16 -> f32
      // too, on g rounded to bf16 (as autocast's backward), and each result is
      // rounded to bf16, the dtype of the operand it is the cotangent of.
      const DType od = p.type(e.inputs[0]).dtype;
      const bool bf = od == DType::bf16;
      const Tensor gd = bf ? convert(g, DType::bf16) : g;
      if (wants(0)) {
        gx[0] = dot_general_vjp_lhs(gd, x[1], Type(p.type(e.inputs[0])), d);
        if (bf) gx[0] = convert(gx[0], od);
      }
      if (wants(1)) {
        gx[1] = dot_general_vjp_rhs(gd, x[0], Type(p.type(e.inputs[1])), d);
        if (bf) gx[1] = convert(gx[1], od);
      }
      break;
    }
    case Op::reduce_sum: {
      const Type in = p.type(e.inputs[0]);
      gx[0] = broadcast_in_dim(g, in.shape, kept(in.rank(), e.attrs.dims));
      break;
    }
    case Op::reduce_max: {
      // The cotangent is shared equally by the positions equal to the max (as
      // in JAX): a tie of n positions gives each g/n, so the gradient still
      // sums to g, the max's derivative along x + t*(1,...,1). Without ties
      // the division is by exactly 1.
      const Type in = p.type(e.inputs[0]);
      const std::vector<int64_t> k = kept(in.rank(), e.attrs.dims);
      Tensor at_max = compare(x[0], broadcast_in_dim(out, in.shape, k), Cmp::EQ);
      Tensor ties = sum(convert(at_max, in.dtype), e.attrs.dims);
      gx[0] = select(at_max, broadcast_in_dim(g / ties, in.shape, k), zeros(tr, in));
      break;
    }
    case Op::gather_rows:
      // The indices are integers: no cotangent. The table's is the transpose.
      if (wants(0)) gx[0] = scatter_add_rows(zeros(tr, p.type(e.inputs[0])), x[1], g);
      break;
    case Op::scatter_add_rows:
      if (wants(0)) gx[0] = g;
      if (wants(2)) gx[2] = gather_rows(g, x[1]);
      break;
    case Op::attention:
      // One attention_grad per cotangent wanted (axis 0 dq, 1 dk, 2 dv), all
      // reading the same operands: the kernel plan runs them as one item.
      for (size_t i = 0; i < 3; ++i)
        if (wants(i)) {
          Attrs a;
          a.axis = static_cast<int64_t>(i);
          gx[i] = tr.emit(Op::attention_grad, {x[0], x[1], x[2], out, g}, a);
        }
      break;
    case Op::attention_grad:
      throw Error("value_and_grad: attention_grad has no VJP (second derivatives of attention are not supported)");
    case Op::adamw:
      throw Error("value_and_grad: adamw has no VJP (an optimizer update is not differentiated; apply with_adamw "
                  "to the gradient program instead)");
    case Op::slice:
      gx[0] = unslice(g, p.type(e.inputs[0]), e.attrs);
      break;
    case Op::pad: {
      // The operand's elements sit at lows[d] + i: read them back.
      const Type in = p.type(e.inputs[0]);
      std::vector<int64_t> lim(in.shape.size());
      for (size_t d = 0; d < lim.size(); ++d) lim[d] = e.attrs.lows[d] + in.shape[d];
      gx[0] = slice(g, e.attrs.lows, lim);
      break;
    }
    case Op::concatenate: {
      // Each operand's cotangent is its own stretch of g along the axis.
      const size_t ax = static_cast<size_t>(e.attrs.axis);
      int64_t at = 0;
      for (size_t i = 0; i < e.inputs.size(); ++i) {
        const Type in = p.type(e.inputs[i]);
        if (wants(i)) {
          std::vector<int64_t> st(in.shape.size(), 0), lim = out_type.shape;
          st[ax] = at;
          lim[ax] = at + in.shape[ax];
          gx[i] = slice(g, st, lim);
        }
        at += in.shape[ax];
      }
      break;
    }
    case Op::all_reduce:
      // out = sum over replicas r of a_r, so d(sum_r L_r)/d a_r = sum over
      // replicas of g_r: the transpose of an all-reduce is an all-reduce.
      gx[0] = all_reduce(g);
      break;
  }
  return gx;
}

}  // namespace capstep::autodiff_detail
