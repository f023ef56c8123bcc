// What the recomputing transforms (checkpoint_activations,
// recompute_in_backward) share: the forward's equations of a gradient
// program, and the anchors their copies read forward values through; and the
// definitions and uses the local rewrites read.
#include "transforms/passes.h"

namespace capstep::autodiff_detail {

DefUse::DefUse(const Program& p)
    : def(static_cast<size_t>(p.num_values()), -1), uses(static_cast<size_t>(p.num_values()), 0) {
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    def[static_cast<size_t>(p.eqns[i].out)] = static_cast<int>(i);
    for (int v : p.eqns[i].inputs) ++uses[static_cast<size_t>(v)];
  }
  for (const NamedValue& o : p.outputs) ++uses[static_cast<size_t>(o.value)];
}

std::vector<char> forward_equations(const Program& p) {
  std::vector<char> need(static_cast<size_t>(p.num_values()), 0), fwd(p.eqns.size(), 0);
  need[static_cast<size_t>(p.outputs[0].value)] = 1;
  for (size_t i = p.eqns.size(); i-- > 0;) {
    const Eqn& e = p.eqns[i];
    if (!need[static_cast<size_t>(e.out)]) continue;
    fwd[i] = 1;
    for (int v : e.inputs) need[static_cast<size_t>(v)] = 1;
  }
  return fwd;
}

int append(Program& q, std::vector<Eqn>& to, Op op, std::vector<int> ins, Attrs a, const Type& t) {
  q.types.push_back(t);
  to.push_back({op, std::move(ins), q.num_values() - 1, std::move(a)});
  return q.num_values() - 1;
}

int true_of(Program& q, std::vector<Eqn>& to, const Type& t, int region) {
  Attrs a;
  a.region = region;
  Attrs one = a;
  one.literal = {1.0};
  const int k = append(q, to, Op::constant, {}, one, {DType::i1, {}});
  return t.rank() == 0 ? k : append(q, to, Op::broadcast_in_dim, {k}, a, {DType::i1, t.shape});
}

int anchor(Program& q, std::map<std::string, int>& trues, int x, int g, int region) {
  const Type t = q.type(x);
  // One scalar true per region, broadcast afresh for each select: a
  // broadcast that many selects read would join them all, in whatever
  // blocks they are, into one fused group (they have one geometry), which
  // then runs after the last of them, holding what each reads (a block's
  // recomputed values, its cotangents, the weight gradients' operands) to
  // the end of the step.
  const std::string key = std::to_string(region);
  auto at = trues.find(key);
  if (at == trues.end()) at = trues.emplace(key, true_of(q, q.eqns, Type{DType::i1, {}}, region)).first;
  Attrs a;
  a.region = region;
  const int yes = t.rank() == 0 ? at->second
                                : append(q, q.eqns, Op::broadcast_in_dim, {at->second}, a, {DType::i1, t.shape});
  return append(q, q.eqns, Op::select, {yes, x, g}, a, t);
}

}  // namespace capstep::autodiff_detail
