// Widening before views (see passes.h): the cotangent of a bf16 GEMM operand
// that mixed precision reads through a transpose reaches its f32 source as
// convert(reshape(transpose(g))), g rounded to bf16 in the GEMM's epilogue.
#include "transforms/passes.h"

namespace capstep::autodiff_detail {

Program widen_before_views(const Program& p, size_t first) {
  const DefUse du(p);
  // The view equation (at or after `first`) that makes v, when v has no other
  // reader; -1 otherwise.
  auto sole_view = [&](int v) {
    const int d = du.sole(v, first);
    if (d < 0) return -1;
    const Op op = p.eqns[static_cast<size_t>(d)].op;
    return op == Op::transpose || op == Op::reshape ? d : -1;
  };
  Program q = p;
  q.eqns.clear();
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    const bool widens = i >= first && e.op == Op::convert && p.type(e.inputs[0]).dtype == DType::bf16 &&
                        p.type(e.out).dtype == DType::f32;
    std::vector<int> views;  // equations of p, the convert's operand's first
    for (int d = widens ? sole_view(e.inputs[0]) : -1; d >= 0; d = sole_view(p.eqns[static_cast<size_t>(d)].inputs[0]))
      views.push_back(d);
    if (views.empty()) {
      q.eqns.push_back(e);
      continue;
    }
    // convert(view_1(..view_k(y))) -> view_1(..view_k(convert(y))): exact,
    // the widened value's bits are the bf16 ones. The views left without a
    // reader are dead_code_eliminate's.
    const int y = p.eqns[static_cast<size_t>(views.back())].inputs[0];
    int x = q.num_values();
    q.types.push_back(Type{DType::f32, p.type(y).shape});
    q.eqns.push_back({Op::convert, {y}, x, e.attrs});
    for (size_t j = views.size(); j-- > 0;) {
      const Eqn& v = p.eqns[static_cast<size_t>(views[j])];
      int out = e.out;
      if (j > 0) {
        out = q.num_values();
        q.types.push_back(Type{DType::f32, p.type(v.out).shape});
      }
      q.eqns.push_back({v.op, {x}, out, v.attrs});
      x = out;
    }
  }
  return dead_code_eliminate(q);
}

}  // namespace capstep::autodiff_detail
