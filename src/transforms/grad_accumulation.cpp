// Gradient accumulation as two Program -> Program transforms (optim.h): the
// gradients of N micro-batches summed into donated accumulators, and the
// update (with_adamw's) applied only on the last of them, all in one program
// so that parameters, moments and accumulators stay where the step runs.
#include <algorithm>
#include <cmath>

#include "capstep/transforms.h"
#include "transforms/passes.h"
#include "capstep/trace.h"

namespace capstep::optim {

const char* const kAccumLastName = "accum.last";

std::string accumulator_name(const std::string& p) { return "accum." + p; }

namespace {

// g's inputs and equations copied into tr; remap[old value] = new value.
std::vector<int> copy_into(Tracer& tr, const Program& g) {
  std::vector<int> remap(static_cast<size_t>(g.num_values()), -1);
  for (const NamedValue& in : g.inputs) remap[static_cast<size_t>(in.value)] = tr.input(in.name, g.type(in.value)).id();
  return remap;
}
void copy_eqns(Tracer& tr, const Program& g, std::vector<int>& remap) {
  Program& q = tr.program();
  for (const Eqn& e : g.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    remap[static_cast<size_t>(e.out)] = q.add_eqn_typed(e.op, std::move(ins), e.attrs, g.type(e.out));
  }
}

}  // namespace

Program accumulate_gradients(const Program& g, const std::vector<std::string>& params, int n) {
  verify(g);
  if (params.empty()) throw Error("accumulate_gradients: no parameters given");
  if (n < 2) throw Error("accumulate_gradients: " + std::to_string(n) + " micro-batches; accumulation needs at least 2");
  if (g.input_index(kAccumLastName) >= 0)
    throw Error("accumulate_gradients: the program already has \"accum.last\" (accumulated twice?)");
  std::vector<int> gout;
  for (const std::string& p : params) {
    const int k = g.output_index("grad." + p);
    if (k < 0) throw Error("accumulate_gradients: the gradient program has no output \"grad." + p + "\"");
    if (std::find(gout.begin(), gout.end(), k) != gout.end())
      throw Error("accumulate_gradients: parameter \"" + p + "\" is listed twice");
    if (g.output_type(k).dtype != DType::f32)
      throw Error("accumulate_gradients: output \"grad." + p + "\" is " + g.output_type(k).str() + "; accumulation here is f32");
    if (g.input_index(accumulator_name(p)) >= 0)
      throw Error("accumulate_gradients: the program already has an input \"" + accumulator_name(p) + "\"");
    gout.push_back(k);
  }
  Tracer tr;
  std::vector<int> remap = copy_into(tr, g);
  std::vector<Tensor> acc;
  for (size_t j = 0; j < params.size(); ++j) acc.push_back(tr.input(accumulator_name(params[j]), g.output_type(gout[j])));
  const Tensor last = tr.input(kAccumLastName, {DType::f32, {}});
  copy_eqns(tr, g, remap);
  auto out = [&](int k) { return Tensor(&tr, remap[static_cast<size_t>(g.outputs[static_cast<size_t>(k)].value)]); };
  const Tensor is_last = compare(last, tr.scalar(0), Cmp::NE);
  std::vector<int> which(g.outputs.size(), -1);
  for (size_t j = 0; j < gout.size(); ++j) which[static_cast<size_t>(gout[j])] = static_cast<int>(j);
  std::vector<std::pair<std::string, Tensor>> outs;
  std::vector<Tensor> sums(params.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Tensor v = out(static_cast<int>(k));
    if (which[k] < 0) {
      outs.push_back({g.outputs[k].name, v});
      continue;
    }
    const size_t j = static_cast<size_t>(which[k]);
    sums[j] = acc[j] + v;  // the micro-batches' gradients in their order
    outs.push_back({g.outputs[k].name, sums[j] / static_cast<double>(n)});
  }
  const size_t first_acc = outs.size();
  for (size_t j = 0; j < params.size(); ++j)
    outs.push_back({updated_name(accumulator_name(params[j])),
                    select(is_last, tr.full(sums[j].type().shape, 0.0), sums[j])});
  Program r = tr.finish(outs);
  r.name = g.name + "_accum";
  r.aliases = g.aliases;
  const int first_acc_in = static_cast<int>(g.inputs.size());
  for (size_t j = 0; j < params.size(); ++j)
    r.aliases.push_back({static_cast<int>(first_acc + j), first_acc_in + static_cast<int>(j)});
  r = dead_code_eliminate(r);
  verify(r);
  return r;
}

int accumulated_micro_batches(const Program& p) {
  if (p.input_index(kAccumLastName) < 0) return 1;
  int acc = -1;  // the first accumulator's value
  for (const NamedValue& in : p.inputs)
    if (in.name.rfind("accum.", 0) == 0 && in.name != kAccumLastName) {
      acc = in.value;
      break;
    }
  const std::vector<int> def = autodiff_detail::DefUse(p).def;
  // A splat constant's value, through broadcasts, reshapes and converts; NaN otherwise.
  auto constant_of = [&](int v) {
    while (def[static_cast<size_t>(v)] >= 0) {
      const Eqn& e = p.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])];
      if (e.op == Op::constant) return e.attrs.literal.size() == 1 ? e.attrs.literal[0] : NAN;
      if (e.op != Op::broadcast_in_dim && e.op != Op::reshape && e.op != Op::convert) break;
      v = e.inputs[0];
    }
    return static_cast<double>(NAN);
  };
  // accumulate_gradients' mean: (accum.<p> + grad) / N.
  for (const Eqn& sum : p.eqns) {
    if (acc < 0 || sum.op != Op::add || (sum.inputs[0] != acc && sum.inputs[1] != acc)) continue;
    for (const Eqn& d : p.eqns) {
      if (d.op != Op::divide || d.inputs[0] != sum.out) continue;
      const double n = constant_of(d.inputs[1]);
      if (n >= 2 && n <= 1e9 && n == std::floor(n)) return static_cast<int>(n);
    }
  }
  throw Error("program \"" + p.name + "\" has an input \"" + kAccumLastName +
              "\" but no accumulator summed and divided by a micro-batch count, as accumulate_gradients makes");
}

Program update_on_last(const Program& s, const std::vector<std::string>& params) {
  verify(s);
  const int last_in = s.input_index(kAccumLastName);
  if (last_in < 0) throw Error("update_on_last: the program has no input \"accum.last\" (not from accumulate_gradients)");
  // The state outputs with_adamw aliases: each parameter's and moments' ".new".
  std::vector<char> gated(s.outputs.size(), 0);
  for (const std::string& p : params)
    for (const std::string& in : {p, moment1_name(p), moment2_name(p)}) {
      const int k = s.output_index(updated_name(in));
      const int i = s.input_index(in);
      if (k < 0 || i < 0)
        throw Error("update_on_last: the program has no input \"" + in + "\" and output \"" + updated_name(in) +
                    "\" (not a with_adamw step?)");
      gated[static_cast<size_t>(k)] = 1;
    }
  Tracer tr;
  std::vector<int> remap = copy_into(tr, s);
  copy_eqns(tr, s, remap);
  const Tensor is_last = compare(Tensor(&tr, remap[static_cast<size_t>(s.inputs[static_cast<size_t>(last_in)].value)]),
                                 tr.scalar(0), Cmp::NE);
  std::vector<std::pair<std::string, Tensor>> outs;
  for (size_t k = 0; k < s.outputs.size(); ++k) {
    const Tensor v(&tr, remap[static_cast<size_t>(s.outputs[k].value)]);
    if (!gated[k]) {
      outs.push_back({s.outputs[k].name, v});
      continue;
    }
    const std::string& name = s.outputs[k].name;
    const int i = s.input_index(name.substr(0, name.size() - 4));  // "<in>.new" -> "<in>"
    const Tensor old(&tr, remap[static_cast<size_t>(s.inputs[static_cast<size_t>(i)].value)]);
    outs.push_back({name, select(is_last, v, old)});
  }
  Program r = tr.finish(outs);
  r.name = s.name + "_on_last";
  r.aliases = s.aliases;
  r = dead_code_eliminate(r);
  verify(r);
  return r;
}

}  // namespace capstep::optim
