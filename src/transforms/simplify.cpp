// Algebraic clean-up around splat constants (see passes.h). Each rewrite keeps
// the value's type, so the verifier's view of the program is unchanged.
#include <bit>
#include <cstdint>
#include <optional>

#include "transforms/passes.h"
#include "ir/bf16.h"

namespace capstep::autodiff_detail {
namespace {

// The value of a float constant after rounding to `d`.
double round_to(double v, DType d) {
  if (d == DType::bf16) return bf16::round_double(v);
  return d == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
}

}  // namespace

Program simplify(const Program& p) {
  Program q = p;
  const size_t n = static_cast<size_t>(q.num_values());
  std::vector<int> rep(n);
  for (size_t v = 0; v < n; ++v) rep[v] = static_cast<int>(v);
  std::vector<std::optional<double>> splat(n);  // value of a splat constant

  for (Eqn& e : q.eqns) {
    for (int& v : e.inputs) v = rep[static_cast<size_t>(v)];
    const size_t out = static_cast<size_t>(e.out);
    const Type& t = q.types[out];
    auto sp = [&](size_t i) { return splat[static_cast<size_t>(e.inputs[i])]; };
    auto is = [&](size_t i, double v) { return sp(i).has_value() && *sp(i) == v; };
    auto make_splat = [&](double v) {
      e.op = Op::constant;
      e.inputs.clear();
      e.attrs = Attrs{};
      e.attrs.literal = {v};
      splat[out] = v;
    };

    switch (e.op) {
      case Op::constant:
        if (e.attrs.literal.size() == 1) splat[out] = e.attrs.literal[0];
        break;
      case Op::broadcast_in_dim:
      case Op::reshape:
      case Op::transpose:
      case Op::slice:
        if (sp(0)) make_splat(*sp(0));
        break;
      case Op::pad:  // +0 padded with zeros (bits compared: -0 is not padding's value)
        if (sp(0) && std::bit_cast<uint64_t>(*sp(0)) == std::bit_cast<uint64_t>(0.0)) make_splat(0.0);
        break;
      case Op::concatenate: {  // one splat value throughout (bit for bit)
        bool same = sp(0).has_value();
        for (size_t i = 1; same && i < e.inputs.size(); ++i)
          same = sp(i).has_value() && std::bit_cast<uint64_t>(*sp(i)) == std::bit_cast<uint64_t>(*sp(0));
        if (same) make_splat(*sp(0));
        break;
      }
      case Op::convert:
        if (sp(0) && is_float(t.dtype) && is_float(q.types[static_cast<size_t>(e.inputs[0])].dtype))
          make_splat(round_to(*sp(0), t.dtype));
        break;
      case Op::multiply:
        if (is(1, 1.0)) rep[out] = e.inputs[0];
        else if (is(0, 1.0)) rep[out] = e.inputs[1];
        break;
      case Op::divide:
        if (is(1, 1.0)) rep[out] = e.inputs[0];
        break;
      case Op::add:
        if (is(1, 0.0)) rep[out] = e.inputs[0];
        else if (is(0, 0.0)) rep[out] = e.inputs[1];
        break;
      case Op::subtract:
        if (is(1, 0.0)) rep[out] = e.inputs[0];
        break;
      case Op::select:
        if (e.inputs[1] == e.inputs[2]) rep[out] = e.inputs[1];
        break;
      // Everything else is kept as it is.
      case Op::iota:
      case Op::maximum:
      CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
      case Op::compare:
      case Op::dot_general:
      case Op::reduce_sum:
      case Op::reduce_max:
      case Op::gather_rows:
      case Op::scatter_add_rows:
      case Op::attention: case Op::attention_grad: case Op::adamw: case Op::all_reduce:
        break;
    }
  }
  for (NamedValue& o : q.outputs) o.value = rep[static_cast<size_t>(o.value)];
  return q;
}

}  // namespace capstep::autodiff_detail
