// Reverse mode: keep p's equations, then walk them backwards from the loss,
// accumulating one cotangent per value and emitting each VJP with the Tensor
// API, so the gradient is made of ordinary primitives.
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
      acc = acc.valid() ? acc + gx[i] : gx[i];
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
  // Clean-ups: splat algebra, shared subexpressions, negations off big arrays.
  // The second sinking pass sees the small negates the first one made.
  Program g = eliminate_common_subexpressions(autodiff_detail::simplify(tr.program()));
  return autodiff_detail::sink_negations(autodiff_detail::sink_negations(g));
}

}  // namespace capstep
