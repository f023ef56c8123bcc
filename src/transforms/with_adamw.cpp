// with_adamw: appends the AdamW update to a gradient program, as three adamw
// equations per parameter (AdamW known by name: ir.h, expand_adamw in
// trace.h), and records which outputs replace which inputs.
#include <algorithm>

#include "capstep/transforms.h"
#include "capstep/trace.h"

namespace capstep::optim {

const char* const kScalarNames[4] = {"adamw.lr", "adamw.bc1", "adamw.bc2", "adamw.decay"};

std::string moment1_name(const std::string& p) { return "adamw.m." + p; }
std::string moment2_name(const std::string& p) { return "adamw.v." + p; }
std::string updated_name(const std::string& in) { return in + ".new"; }

Program with_adamw(const Program& g, const std::vector<std::string>& params, const AdamW& o) {
  o.validate();
  verify(g);
  if (params.empty()) throw Error("with_adamw: no parameters given");
  std::vector<int> pin, gout;
  for (const std::string& p : params) {
    int i = g.input_index(p);
    if (i < 0) throw Error("with_adamw: \"" + p + "\" is not an input of the gradient program");
    if (std::find(pin.begin(), pin.end(), i) != pin.end()) throw Error("with_adamw: parameter \"" + p + "\" is listed twice");
    if (g.input_type(i).dtype != DType::f32)
      throw Error("with_adamw: parameter \"" + p + "\" is " + g.input_type(i).str() + "; AdamW here is f32");
    int k = g.output_index("grad." + p);
    if (k < 0) throw Error("with_adamw: the gradient program has no output \"grad." + p + "\"");
    // The update's arithmetic broadcasts, so a mistyped gradient would not fail on its own.
    if (g.output_type(k) != g.input_type(i))
      throw Error("with_adamw: output \"grad." + p + "\" is " + g.output_type(k).str() + " but parameter \"" + p +
                  "\" is " + g.input_type(i).str());
    pin.push_back(i);
    gout.push_back(k);
  }

  // Inputs first (params, m, v, the rest, scalars), so values stay numbered in
  // order; then the gradient program's equations, renumbered.
  Tracer tr;
  std::vector<int> remap(static_cast<size_t>(g.num_values()), -1);
  std::vector<Tensor> P, M, V, S;
  for (int i : pin) {
    const NamedValue& in = g.inputs[static_cast<size_t>(i)];
    P.push_back(tr.input(in.name, g.type(in.value)));
    remap[static_cast<size_t>(in.value)] = P.back().id();
  }
  for (size_t j = 0; j < params.size(); ++j) M.push_back(tr.input(moment1_name(params[j]), P[j].type()));
  for (size_t j = 0; j < params.size(); ++j) V.push_back(tr.input(moment2_name(params[j]), P[j].type()));
  for (const NamedValue& in : g.inputs)
    if (remap[static_cast<size_t>(in.value)] < 0) remap[static_cast<size_t>(in.value)] = tr.input(in.name, g.type(in.value)).id();
  for (const char* s : kScalarNames) S.push_back(tr.input(s, {DType::f32, {}}));

  Program& q = tr.program();
  for (const Eqn& e : g.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    remap[static_cast<size_t>(e.out)] = q.add_eqn_typed(e.op, std::move(ins), e.attrs, g.type(e.out));
  }

  // The update: three adamw equations per parameter (p', m', v'; ir.h), which
  // expand_adamw writes out in the operation order of the host AdamW kernel.
  const Tensor &lr = S[0], &bc1 = S[1], &bc2 = S[2], &decay = S[3];
  std::vector<Tensor> newP, newM, newV;
  for (size_t j = 0; j < params.size(); ++j) {
    Tensor gr(&tr, remap[static_cast<size_t>(g.outputs[static_cast<size_t>(gout[j])].value)]);
    Attrs a;
    a.literal = {o.beta1, o.beta2, o.eps};
    const std::vector<Tensor> operands{P[j], gr, M[j], V[j], lr, bc1, bc2, decay};
    std::vector<Tensor>* results[3] = {&newP, &newM, &newV};
    for (int64_t axis = 0; axis < 3; ++axis) {
      a.axis = axis;
      results[axis]->push_back(tr.emit(Op::adamw, operands, a));
    }
  }

  std::vector<std::pair<std::string, Tensor>> outs;
  std::vector<char> is_grad(g.outputs.size(), 0);
  for (int k : gout) is_grad[static_cast<size_t>(k)] = 1;
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (!is_grad[k]) outs.push_back({g.outputs[k].name, Tensor(&tr, remap[static_cast<size_t>(g.outputs[k].value)])});
  const size_t first_new = outs.size();
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({updated_name(params[j]), newP[j]});
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({updated_name(moment1_name(params[j])), newM[j]});
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({updated_name(moment2_name(params[j])), newV[j]});
  Program r = tr.finish(outs);
  r.name = g.name + "_adamw";
  // params are inputs 0..n-1, m n..2n-1, v 2n..3n-1; outputs follow the same order.
  for (size_t j = 0; j < 3 * params.size(); ++j)
    r.aliases.push_back({static_cast<int>(first_new + j), static_cast<int>(j)});
  // grad_program's own aliases (accumulate_gradients' accumulators) move with
  // their output, among the outputs kept before first_new, and their input.
  for (const Alias& al : g.aliases) {
    if (is_grad[static_cast<size_t>(al.output)]) throw Error("with_adamw: a gradient output is aliased to an input");
    int k = 0;
    for (int i = 0; i < al.output; ++i) k += is_grad[static_cast<size_t>(i)] ? 0 : 1;
    r.aliases.push_back({k, r.input_index(g.inputs[static_cast<size_t>(al.input)].name)});
  }
  r = dead_code_eliminate(r);
  verify(r);
  return r;
}

}  // namespace capstep::optim
