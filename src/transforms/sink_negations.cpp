// Negation sinking (see passes.h): one full pass over memory saved per
// subtract whose operand's cotangent is reduced or accumulated.
#include "transforms/passes.h"

namespace capstep::autodiff_detail {

Program sink_negations(const Program& p) {
  const DefUse du(p);
  // x when v = negate(x) and v has no other use; -1 otherwise.
  auto negated = [&](int v) {
    const int d = du.sole(v);
    if (d < 0) return -1;
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    return e.op == Op::negate ? e.inputs[0] : -1;
  };

  Program q = p;
  q.eqns.clear();
  // y when v = broadcast_in_dim(negate(x)), both without other uses: y is a
  // new broadcast of x, recorded here, so that the caller can subtract it.
  auto negated_broadcast = [&](int v) {
    const int d = du.sole(v);
    if (d < 0) return -1;
    const Eqn& b = p.eqns[static_cast<size_t>(d)];
    if (b.op != Op::broadcast_in_dim) return -1;
    const int x = negated(b.inputs[0]);
    if (x < 0) return -1;
    const int y = q.num_values();
    q.types.push_back(p.type(v));
    q.eqns.push_back({Op::broadcast_in_dim, {x}, y, b.attrs});
    return y;
  };
  auto flipped = [&](int v) {
    const int x = negated(v);
    return x >= 0 ? x : negated_broadcast(v);
  };
  for (const Eqn& src : p.eqns) {
    Eqn e = src;
    if (e.op == Op::reduce_sum) {
      if (int x = negated(e.inputs[0]); x >= 0) {
        const int r = q.num_values();
        q.types.push_back(p.type(e.out));
        q.eqns.push_back({Op::reduce_sum, {x}, r, e.attrs});
        q.eqns.push_back({Op::negate, {r}, e.out, {}});
        continue;
      }
    } else if (e.op == Op::add) {
      if (int y = flipped(e.inputs[1]); y >= 0) {
        e = {Op::subtract, {e.inputs[0], y}, e.out, {}};
      } else if (int x = flipped(e.inputs[0]); x >= 0) {
        e = {Op::subtract, {e.inputs[1], x}, e.out, {}};
      }
    } else if (e.op == Op::subtract) {
      if (int y = flipped(e.inputs[1]); y >= 0) e = {Op::add, {e.inputs[0], y}, e.out, {}};
    }
    q.eqns.push_back(std::move(e));
  }
  return dead_code_eliminate(q);
}

}  // namespace capstep::autodiff_detail
