// Reverse mode: keep p's equations, then walk them backwards from the loss,
// accumulating one cotangent per value and emitting each VJP with the Tensor
// API, so the gradient is made of ordinary primitives.
#include <bit>
#include <cstdint>
#include <set>

#include "transforms/passes.h"
#include "transforms/vjp.h"
#include "capstep/transforms.h"
#include "capstep/trace.h"

namespace capstep {
namespace {

std::string input_list(const Program& p) {
  std::string s;
  for (const NamedValue& in : p.inputs) s += (s.empty() ? "" : ", ") + in.name;
  return s.empty() ? "none" : s;
}

// Indices of the wrt inputs, checked: known, float, listed once.
std::vector<int> wrt_inputs(const Program& p, const std::vector<std::string>& wrt) {
  std::vector<int> idx;
  std::set<std::string> seen;
  for (const std::string& name : wrt) {
    const int i = p.input_index(name);
    if (i < 0)
      throw Error("value_and_grad: '" + name + "' is not an input of program '" + p.name +
                  "' (inputs: " + input_list(p) + ")");
    if (!is_float(p.input_type(i).dtype))
      throw Error("value_and_grad: input '" + name + "' is " + p.input_type(i).str() +
                  "; only float inputs can be differentiated");
    if (!seen.insert(name).second) throw Error("value_and_grad: '" + name + "' is listed twice in wrt");
    idx.push_back(i);
  }
  return idx;
}

// The equation that defines value v of p, searched from the end (the
// cotangents folded below were recorded a few equations back); null for an input.
const Eqn* defining(const Program& p, int v) {
  for (auto it = p.eqns.rbegin(); it != p.eqns.rend(); ++it)
    if (it->out == v) return &*it;
  return nullptr;
}

// Whether t is scatter_add_rows(zeros, idx, upd) with a splat +0 constant for
// zeros (the cotangent of a gather_rows' table); its equation if so.
const Eqn* scatter_into_zeros(const Program& p, const Tensor& t) {
  const Eqn* e = defining(p, t.id());
  if (e == nullptr || e->op != Op::scatter_add_rows) return nullptr;
  const Eqn* z = defining(p, e->inputs[0]);
  if (z == nullptr || z->op != Op::constant || z->attrs.literal.size() != 1 ||
      std::bit_cast<uint64_t>(z->attrs.literal[0]) != std::bit_cast<uint64_t>(0.0))
    return nullptr;
  return e;
}

// acc + g, two cotangents of one value. Where one of them is a scatter into
// zeros, the sum is that scatter into the other one instead (the same sums,
// each scattered row's added in another order): neither a constant of the
// table's size (held for the whole run) nor a second buffer of that size
// exists, as for the logits' gradient through cross_entropy's gather and a
// tied embedding's. Nothing is rewritten: the scatter into zeros stays, and
// dead code elimination drops it where nothing else reads it (a gather's
// cotangent has no other reader).
Tensor accumulate(Tracer& tr, const Tensor& acc, const Tensor& g) {
  const Program& p = tr.program();
  const Eqn* s = scatter_into_zeros(p, g);
  Tensor other = acc;
  if (s == nullptr) {
    s = scatter_into_zeros(p, acc);
    other = g;
  }
  if (s == nullptr || p.type(s->out) != other.type()) return acc + g;
  const Tensor idx(&tr, s->inputs[1]), upd(&tr, s->inputs[2]);
  return scatter_add_rows(other, idx, upd);
}

}  // namespace

Program value_and_grad(const Program& p, const std::vector<std::string>& wrt) {
  if (p.outputs.empty())
    throw Error("value_and_grad: program '" + p.name + "' has no outputs; output 0 must be the scalar float loss");
  const Type loss_type = p.output_type(0);
  if (!is_float(loss_type.dtype) || loss_type.rank() != 0)
    throw Error("value_and_grad: output 0 ('" + p.outputs[0].name + "') must be a scalar float loss, got " +
                loss_type.str() + "; reduce it first (e.g. sum or mean)");
  const std::vector<int> wrt_idx = wrt_inputs(p, wrt);

  // Values that depend on a wrt input through float values: only these need
  // cotangents. Everything else (masks, one-hots, indices, constants, results
  // marked no_grad) is skipped.
  std::vector<char> active(static_cast<size_t>(p.num_values()), 0);
  for (int i : wrt_idx) active[static_cast<size_t>(p.inputs[static_cast<size_t>(i)].value)] = 1;
  for (const Eqn& e : p.eqns) {
    if (!is_float(p.type(e.out).dtype) || e.attrs.no_grad) continue;
    for (int v : e.inputs)
      if (active[static_cast<size_t>(v)]) active[static_cast<size_t>(e.out)] = 1;
  }

  Tracer tr;
  tr.program() = p;  // the forward equations, value ids unchanged
  std::vector<Tensor> ct(static_cast<size_t>(p.num_values()));
  const int loss = p.outputs[0].value;
  if (active[static_cast<size_t>(loss)]) ct[static_cast<size_t>(loss)] = tr.scalar(1.0, loss_type.dtype);

  for (auto it = p.eqns.rbegin(); it != p.eqns.rend(); ++it) {
    const Eqn& e = *it;  // an equation of p: stable while tr's program grows
    const Tensor g = ct[static_cast<size_t>(e.out)];
    if (!g.valid()) continue;
    std::vector<bool> need(e.inputs.size());
    bool any = false;
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      const int v = e.inputs[i];
      need[i] = active[static_cast<size_t>(v)] && is_float(p.type(v).dtype);
      any = any || need[i];
    }
    if (!any) continue;
    std::vector<Tensor> gx = autodiff_detail::vjp(tr, e, g, need);
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      if (!need[i] || !gx[i].valid()) continue;
      Tensor& acc = ct[static_cast<size_t>(e.inputs[i])];
      acc = acc.valid() ? accumulate(tr, acc, gx[i]) : gx[i];
    }
  }

  for (size_t k = 0; k < wrt_idx.size(); ++k) {
    const NamedValue& in = p.inputs[static_cast<size_t>(wrt_idx[k])];
    Tensor g = ct[static_cast<size_t>(in.value)];
    if (!g.valid()) g = tr.constant(p.type(in.value), {0.0});  // the loss does not depend on it
    tr.program().add_output("grad." + in.name, g.id());
  }
  // The gradient's equations belong to no checkpoint region, whatever attrs
  // their VJP rules copied from the forward's.
  for (size_t i = p.eqns.size(); i < tr.program().eqns.size(); ++i) tr.program().eqns[i].attrs.region = -1;
  // Clean-ups: splat algebra, widening before views, transposed products
  // swapped, shared subexpressions, negations off big arrays. The second
  // sinking pass sees the small negates the first one made.
  const size_t first = p.eqns.size();  // the gradient's equations (simplify keeps their places)
  Program g = eliminate_common_subexpressions(autodiff_detail::swap_transposed_dots(
      autodiff_detail::widen_before_views(autodiff_detail::simplify(tr.program()), first), first));
  return autodiff_detail::sink_negations(autodiff_detail::sink_negations(g));
}

}  // namespace capstep
