// Building a Program and checking it.
#include <unordered_set>

#include "capstep/ir.h"
#include "ir/bf16.h"

namespace capstep {

int Program::add_input(const std::string& nm, const Type& t) {
  if (input_index(nm) >= 0) throw Error("input \"" + nm + "\" defined twice");
  validate_type(t, "input \"" + nm + "\"");
  int id = num_values();
  types.push_back(t);
  inputs.push_back({nm, id});
  return id;
}

int Program::add_eqn(Op op, std::vector<int> ins, Attrs attrs) {
  std::vector<Type> ts;
  for (int v : ins) {
    if (v < 0 || v >= num_values())
      throw Error(std::string(op_name(op)) + ": operand %" + std::to_string(v) + " is not a value of the program");
    ts.push_back(types[static_cast<size_t>(v)]);
  }
  Type out = infer_type(op, ts, attrs);
  int id = num_values();
  types.push_back(out);
  eqns.push_back({op, std::move(ins), id, std::move(attrs)});
  return id;
}

// A constant's literal is kept as the values the dtype holds (f32 rounded,
// integers truncated, i1 as 0/1), so that the text form, the interpreter and
// every export see one canonical value.
static void canonicalise_literal(std::vector<double>& lit, DType d) {
  for (double& v : lit) {
    switch (d) {
      case DType::f32:
        if (!literal_fits(v, d)) throw Error("constant: " + std::to_string(v) + " does not fit in f32");
        v = static_cast<double>(static_cast<float>(v));
        break;
      case DType::f64: break;
      case DType::i32:
        if (!literal_fits(v, d)) throw Error("constant: " + std::to_string(v) + " does not fit in i32");
        v = static_cast<double>(static_cast<int32_t>(v));
        break;
      case DType::i1: v = v != 0 ? 1.0 : 0.0; break;
      case DType::bf16:
        if (!literal_fits(v, d)) throw Error("constant: " + std::to_string(v) + " does not fit in bf16");
        v = bf16::round_double(v);
        break;
    }
  }
}

int Program::add_eqn_typed(Op op, std::vector<int> ins, Attrs attrs, const Type& out) {
  if (op == Op::constant) canonicalise_literal(attrs.literal, out.dtype);
  std::vector<Type> ts;
  for (int v : ins) {
    if (v < 0 || v >= num_values())
      throw Error(std::string(op_name(op)) + ": operand %" + std::to_string(v) + " is not a value of the program");
    ts.push_back(types[static_cast<size_t>(v)]);
  }
  check_type(op, ts, attrs, out);
  int id = num_values();
  types.push_back(out);
  eqns.push_back({op, std::move(ins), id, std::move(attrs)});
  return id;
}

void Program::add_output(const std::string& nm, int value) {
  if (output_index(nm) >= 0) throw Error("output \"" + nm + "\" defined twice");
  if (value < 0 || value >= num_values())
    throw Error("output \"" + nm + "\": %" + std::to_string(value) + " is not a value of the program");
  outputs.push_back({nm, value});
}

int Program::input_index(const std::string& nm) const {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == nm) return static_cast<int>(i);
  return -1;
}

int Program::output_index(const std::string& nm) const {
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].name == nm) return static_cast<int>(i);
  return -1;
}

void verify(const Program& p) {
  const int n = p.num_values();
  std::vector<char> defined(static_cast<size_t>(n), 0);
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const NamedValue& in = p.inputs[i];
    if (in.name.empty()) throw Error("input " + std::to_string(i) + " has no name");
    if (!names.insert(in.name).second) throw Error("input \"" + in.name + "\" defined twice");
    if (in.value < 0 || in.value >= n)
      throw Error("input \"" + in.name + "\": %" + std::to_string(in.value) + " is not a value of the program");
    if (defined[static_cast<size_t>(in.value)]) throw Error("input \"" + in.name + "\": %" + std::to_string(in.value) + " defined twice");
    validate_type(p.types[static_cast<size_t>(in.value)], "input \"" + in.name + "\"");
    defined[static_cast<size_t>(in.value)] = 1;
  }
  for (size_t k = 0; k < p.eqns.size(); ++k) {
    const Eqn& e = p.eqns[k];
    auto where = [&]() {
      std::string s = "equation " + std::to_string(k) + " (%" + std::to_string(e.out) + " = " + op_name(e.op) + "(";
      for (size_t j = 0; j < e.inputs.size(); ++j) s += (j ? ", %" : "%") + std::to_string(e.inputs[j]);
      return s + "))";
    };
    if (e.out < 0 || e.out >= n) throw Error(where() + ": result is not a value of the program");
    if (defined[static_cast<size_t>(e.out)]) throw Error(where() + ": %" + std::to_string(e.out) + " defined twice");
    std::vector<Type> ts;
    for (int v : e.inputs) {
      if (v < 0 || v >= n || !defined[static_cast<size_t>(v)])
        throw Error(where() + ": operand %" + std::to_string(v) + " is used before it is defined");
      ts.push_back(p.types[static_cast<size_t>(v)]);
    }
    try {
      check_type(e.op, ts, e.attrs, p.types[static_cast<size_t>(e.out)]);
    } catch (const Error& err) {
      throw Error(where() + ": " + err.what());
    }
    defined[static_cast<size_t>(e.out)] = 1;
  }
  std::unordered_set<std::string> onames;
  for (const NamedValue& o : p.outputs) {
    if (o.name.empty()) throw Error("an output has no name");
    if (!onames.insert(o.name).second) throw Error("output \"" + o.name + "\" defined twice");
    if (o.value < 0 || o.value >= n || !defined[static_cast<size_t>(o.value)])
      throw Error("output \"" + o.name + "\": %" + std::to_string(o.value) + " is not defined");
  }
  std::vector<char> aliased_in(p.inputs.size(), 0), aliased_out(p.outputs.size(), 0);
  for (const Alias& a : p.aliases) {
    if (a.output < 0 || a.output >= static_cast<int>(p.outputs.size()) || a.input < 0 ||
        a.input >= static_cast<int>(p.inputs.size()))
      throw Error("alias output " + std::to_string(a.output) + " -> input " + std::to_string(a.input) +
                  " is out of range");
    const Type& ot = p.output_type(a.output);
    const Type& it = p.input_type(a.input);
    if (ot != it)
      throw Error("alias output \"" + p.outputs[static_cast<size_t>(a.output)].name + "\" " + ot.str() +
                  " -> input \"" + p.inputs[static_cast<size_t>(a.input)].name + "\" " + it.str() +
                  ": types differ");
    if (aliased_in[static_cast<size_t>(a.input)]++)
      throw Error("input \"" + p.inputs[static_cast<size_t>(a.input)].name + "\" is aliased twice");
    if (aliased_out[static_cast<size_t>(a.output)]++)
      throw Error("output \"" + p.outputs[static_cast<size_t>(a.output)].name + "\" is aliased twice");
  }
}

}  // namespace capstep
