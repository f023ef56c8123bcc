// Helpers for the StableHLO tests: source paths, file IO and Program equality
// up to value renumbering.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "capstep/ir.h"

namespace capstep::hlo_test {

// The checkout, as ctest passes it (CMakeLists sets CAPSTEP_SOURCE_DIR).
inline std::string source_dir() {
  const char* s = std::getenv("CAPSTEP_SOURCE_DIR");
  return s ? s : "";
}
inline std::string binary_dir() {
  const char* s = std::getenv("CAPSTEP_BINARY_DIR");
  return s ? s : ".";
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::ostringstream o;
  o << f.rdbuf();
  return o.str();
}
inline void write_file(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
  if (!f) throw Error("cannot write " + path);
}

// The program as it reads back from its StableHLO: f32 constants stored as
// doubles that are not floats (0.1 written by a user) as their float value
// (the value every consumer computes with), and no no_grad marks (StableHLO
// has no stop-gradient; docs/stablehlo.md).
inline Program with_f32_literals_rounded(Program p) {
  for (Eqn& e : p.eqns) {
    e.attrs.no_grad = false;
    if (e.op == Op::constant && p.type(e.out).dtype == DType::f32)
      for (double& v : e.attrs.literal) v = static_cast<double>(static_cast<float>(v));
  }
  return p;
}

// "" when a and b are the same program up to the numbering of values (same
// inputs, equations in the same order with the same ops, attrs and types,
// same outputs and aliases); else the first difference.
inline std::string program_difference(const Program& a, const Program& b) {
  if (a.inputs.size() != b.inputs.size()) return "input count differs";
  if (a.eqns.size() != b.eqns.size())
    return "equation count differs: " + std::to_string(a.eqns.size()) + " vs " + std::to_string(b.eqns.size());
  if (a.outputs.size() != b.outputs.size()) return "output count differs";
  std::vector<int> map(static_cast<size_t>(a.num_values()), -1);
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (a.inputs[i].name != b.inputs[i].name) return "input " + std::to_string(i) + " name differs";
    if (a.input_type(static_cast<int>(i)) != b.input_type(static_cast<int>(i)))
      return "input " + std::to_string(i) + " type differs";
    map[static_cast<size_t>(a.inputs[i].value)] = b.inputs[i].value;
  }
  for (size_t k = 0; k < a.eqns.size(); ++k) {
    const Eqn& x = a.eqns[k];
    const Eqn& y = b.eqns[k];
    std::string where = "equation " + std::to_string(k) + " (" + eqn_text(a, x) + " vs " + eqn_text(b, y) + ")";
    if (x.op != y.op || x.inputs.size() != y.inputs.size()) return where + ": op differs";
    for (size_t j = 0; j < x.inputs.size(); ++j)
      if (map[static_cast<size_t>(x.inputs[j])] != y.inputs[j]) return where + ": operand " + std::to_string(j) + " differs";
    if (!(x.attrs == y.attrs)) return where + ": attributes differ";
    if (a.type(x.out) != b.type(y.out)) return where + ": type differs";
    map[static_cast<size_t>(x.out)] = y.out;
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    if (a.outputs[i].name != b.outputs[i].name) return "output " + std::to_string(i) + " name differs";
    if (map[static_cast<size_t>(a.outputs[i].value)] != b.outputs[i].value)
      return "output " + std::to_string(i) + " value differs";
  }
  auto sorted = [](std::vector<Alias> v) {
    std::sort(v.begin(), v.end(), [](const Alias& p, const Alias& q) { return p.input < q.input; });
    return v;
  };
  if (sorted(a.aliases) != sorted(b.aliases)) return "aliases differ";
  return "";
}

}  // namespace capstep::hlo_test
