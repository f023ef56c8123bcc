// mixed_precision_bf16: the forward program with its GEMM operands in bf16 and
// everything else in f32 (see optim.h).
#include <unordered_map>

#include "capstep/transforms.h"

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
  Program out;
  out.name = f.name;
  std::vector<int> remap(static_cast<size_t>(f.num_values()), -1);
  for (const NamedValue& in : f.inputs) remap[static_cast<size_t>(in.value)] = out.add_input(in.name, f.type(in.value));
  // One convert per f32 value that feeds any dot, emitted where the first dot
  // needs it (after the value's definition, so the order stays valid).
  std::unordered_map<int, int> as_bf16;
  // The convert is in the checkpoint region of the dot that first needs it.
  auto bf16_of = [&](int v, int32_t region) {
    auto it = as_bf16.find(v);
    if (it != as_bf16.end()) return it->second;
    const Type& t = out.type(v);
    Attrs a;
    a.region = region;
    const int c = out.add_eqn_typed(Op::convert, {v}, a, Type{DType::bf16, t.shape});
    as_bf16.emplace(v, c);
    return c;
  };
  for (const Eqn& e : f.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    const Type& t = f.type(e.out);
    int o;
    if (e.op == Op::dot_general && f.type(e.inputs[0]).dtype == DType::f32 && f.type(e.inputs[1]).dtype == DType::f32) {
      for (int& v : ins) v = bf16_of(v, e.attrs.region);
      o = out.add_eqn(Op::dot_general, ins, e.attrs);  // bf16 x bf16 -> f32, the type it had
    } else {
      o = out.add_eqn_typed(e.op, ins, e.attrs, t);
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
