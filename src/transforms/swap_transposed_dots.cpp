// Transposed products computed as such (see passes.h).
#include <numeric>

#include "transforms/passes.h"

namespace capstep::autodiff_detail {

Program swap_transposed_dots(const Program& p, size_t first) {
  const DefUse du(p);
  auto sole = [&](int v) { return du.sole(v, first); };
  auto float_convert = [&](int d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    return e.op == Op::convert && is_float(p.type(e.inputs[0]).dtype) && is_float(p.type(e.out).dtype);
  };
  Program q = p;
  q.eqns.clear();
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    std::vector<int> converts;  // equations of p, the transpose's operand's first
    int dot = -1;
    if (i >= first && e.op == Op::transpose) {
      int d = sole(e.inputs[0]);
      for (; d >= 0 && float_convert(d); d = sole(p.eqns[static_cast<size_t>(d)].inputs[0])) converts.push_back(d);
      if (d >= 0 && p.eqns[static_cast<size_t>(d)].op == Op::dot_general) dot = d;
    }
    // The permutation that swaps the product's lhs-free and rhs-free axes,
    // its batch axes staying first: the product with its operands swapped.
    bool swaps = false;
    if (dot >= 0 && !converts.empty()) {
      const Eqn& de = p.eqns[static_cast<size_t>(dot)];
      const int64_t nb = static_cast<int64_t>(de.attrs.lhs_batch.size());
      const int64_t nl = p.type(de.inputs[0]).rank() - nb - static_cast<int64_t>(de.attrs.lhs_contract.size());
      const int64_t nr = p.type(de.inputs[1]).rank() - nb - static_cast<int64_t>(de.attrs.rhs_contract.size());
      std::vector<int64_t> perm(static_cast<size_t>(nb + nl + nr));
      std::iota(perm.begin(), perm.begin() + nb, 0);
      std::iota(perm.begin() + nb, perm.begin() + nb + nr, nb + nl);
      std::iota(perm.begin() + nb + nr, perm.end(), nb);
      swaps = e.attrs.dims == perm;
    }
    if (!swaps) {
      q.eqns.push_back(e);
      continue;
    }
    // transpose(convert..(dot_general(a, b))) -> convert..(dot_general(b, a)):
    // each element the same sum of the same products, the converts
    // elementwise. Where converts stand between, no backend writes the
    // product in the transpose's layout (the host does for a transpose of
    // the product itself), and the transpose is a strided copy of the whole
    // result: the tied head's cotangent [d_model, vocab], rounded to bf16,
    // into the embedding's gradient [vocab, d_model].
    const Eqn& de = p.eqns[static_cast<size_t>(dot)];
    Attrs sw = de.attrs;
    std::swap(sw.lhs_batch, sw.rhs_batch);
    std::swap(sw.lhs_contract, sw.rhs_contract);
    const Shape& shape = p.type(e.out).shape;
    int x = q.num_values();
    q.types.push_back(Type{p.type(de.out).dtype, shape});
    q.eqns.push_back({Op::dot_general, {de.inputs[1], de.inputs[0]}, x, sw});
    for (size_t j = converts.size(); j-- > 0;) {
      const Eqn& c = p.eqns[static_cast<size_t>(converts[j])];
      int out = e.out;
      if (j > 0) {
        out = q.num_values();
        q.types.push_back(Type{p.type(c.out).dtype, shape});
      }
      q.eqns.push_back({Op::convert, {x}, out, c.attrs});
      x = out;
    }
  }
  return dead_code_eliminate(q);
}

}  // namespace capstep::autodiff_detail
