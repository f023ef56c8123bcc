// mixed_precision_bf16: the forward program with its GEMM operands in bf16 and
// everything else in f32 (see optim.h).
#include <functional>
#include <unordered_map>
#include <vector>

#include "capstep/transforms.h"
#include "transforms/passes.h"

namespace capstep::optim {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "f32") return Precision::f32;
  if (s == "bf16") return Precision::bf16;
  throw Error("precision \"" + s + "\" is not one of f32, bf16");
}

Program mixed_precision_bf16(const Program& f) {
  verify(f);
  const size_t nv = static_cast<size_t>(f.num_values());
  const std::vector<int> def = autodiff_detail::DefUse(f).def;  // the equation of f that makes each value
  auto def_op = [&](int v, Op op) {
    const int d = def[static_cast<size_t>(v)];
    return d >= 0 && f.eqns[static_cast<size_t>(d)].op == op;
  };
  auto bf16_dot = [&](const Eqn& e) {
    return e.op == Op::dot_general && f.type(e.inputs[0]).dtype == DType::f32 && f.type(e.inputs[1]).dtype == DType::f32;
  };
  // The views between a dot's operand and the value that is converted: a
  // transpose that makes the operand, and the reshapes under it. The dot then
  // reads transpose(reshape..(convert(x))), which a GEMM folds into its
  // layout (a transposed or strided operand; no copy), where
  // convert(transpose(..)) would be a transposed f32 copy and then a convert.
  // Convert and the views commute exactly, so the values are the same bits.
  // An operand made by reshapes only keeps its convert (a reshape moves
  // nothing either way), and a reshape over a transpose (the attention's heads
  // merged back) is no layout a GEMM reads in place: converted after it.
  auto views_under = [&](int v) {
    std::vector<int> chain;  // values of f, from the operand down
    if (!def_op(v, Op::transpose)) return chain;
    chain.push_back(v);
    v = f.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])].inputs[0];
    while (def_op(v, Op::reshape)) {
      chain.push_back(v);
      v = f.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])].inputs[0];
    }
    return chain;
  };
  // Which of those views are made in bf16 only: the ones that no equation
  // staying f32 and no output reads (read from the last equation back, so
  // that a view's readers are known before it). A view that is read in f32
  // too (Llama's heads, which the rotary embedding multiplies) is made in
  // f32 anyway, and so are the views under it: converted as it is, in one
  // pass as its source's convert would be, with no bf16 transpose besides
  // (a second copy of the values where a GEMM cannot fold it).
  std::vector<char> under_dot(nv, 0), f32_read(nv, 0), bf16_only(nv, 0);
  for (const NamedValue& o : f.outputs) f32_read[static_cast<size_t>(o.value)] = 1;
  for (const Eqn& e : f.eqns)
    if (bf16_dot(e))
      for (int v : e.inputs)
        for (int w : views_under(v)) under_dot[static_cast<size_t>(w)] = 1;
  for (size_t i = f.eqns.size(); i-- > 0;) {
    const Eqn& e = f.eqns[i];
    const size_t o = static_cast<size_t>(e.out);
    bf16_only[o] = under_dot[o] && !f32_read[o];
    if (bf16_only[o] || bf16_dot(e)) continue;
    for (int v : e.inputs) f32_read[static_cast<size_t>(v)] = 1;
  }

  Program out;
  out.name = f.name;
  std::vector<int> remap(nv, -1);
  for (const NamedValue& in : f.inputs) remap[static_cast<size_t>(in.value)] = out.add_input(in.name, f.type(in.value));
  // One bf16 value per value of f that a dot reads in bf16 (an operand, a
  // view under one, the value under the views), emitted where the first dot
  // needs it (after the value's definition, so the order stays valid): one
  // convert per converted value, shared by every dot that reads it directly
  // or through views, and one bf16 view per view.
  std::unordered_map<int, int> as_bf16;
  // Emitted in the checkpoint region of the dot that first needs it.
  std::function<int(int, int32_t)> bf16_of = [&](int v, int32_t region) {
    auto it = as_bf16.find(v);
    if (it != as_bf16.end()) return it->second;
    Attrs a;
    Op op = Op::convert;
    int from = remap[static_cast<size_t>(v)];
    const int d = def[static_cast<size_t>(v)];
    if (bf16_only[static_cast<size_t>(v)]) {
      const Eqn& view = f.eqns[static_cast<size_t>(d)];
      a = view.attrs;
      op = view.op;
      from = bf16_of(view.inputs[0], region);
    }
    a.region = region;
    const int c = out.add_eqn_typed(op, {from}, a, Type{DType::bf16, f.type(v).shape});
    as_bf16.emplace(v, c);
    return c;
  };
  for (size_t i = 0; i < f.eqns.size(); ++i) {
    const Eqn& e = f.eqns[i];
    if (bf16_only[static_cast<size_t>(e.out)]) continue;  // made in bf16 where a dot needs it
    std::vector<int> ins;
    int o;
    if (bf16_dot(e)) {
      for (int v : e.inputs) ins.push_back(bf16_of(v, e.attrs.region));
      o = out.add_eqn(Op::dot_general, ins, e.attrs);  // bf16 x bf16 -> f32, the type it had
    } else {
      for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
      o = out.add_eqn_typed(e.op, ins, e.attrs, f.type(e.out));
    }
    remap[static_cast<size_t>(e.out)] = o;
  }
  for (const NamedValue& o : f.outputs) out.add_output(o.name, remap[static_cast<size_t>(o.value)]);
  out.aliases = f.aliases;
  verify(out);
  return out;
}

Program with_precision(const Program& forward, Precision p) {
  switch (p) {
    case Precision::f32: return forward;
    case Precision::bf16: return mixed_precision_bf16(forward);
  }
  return forward;
}

}  // namespace capstep::optim
