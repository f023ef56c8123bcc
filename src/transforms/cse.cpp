// Common-subexpression elimination. VJP rules re-derive things the forward pass
// already has (the broadcast max of a softmax, splat constants, zeros); merging
// them keeps the gradient program, the hot path of training, lean.
#include <functional>
#include <unordered_map>

#include "capstep/transforms.h"

namespace capstep {
namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

size_t hash_ints(size_t h, const std::vector<int64_t>& v) {
  for (int64_t x : v) h = mix(h, std::hash<int64_t>{}(x));
  return mix(h, v.size());
}

size_t eqn_hash(const Eqn& e, const Type& t) {
  size_t h = std::hash<int>{}(static_cast<int>(e.op));
  for (int v : e.inputs) h = mix(h, std::hash<int>{}(v));
  h = mix(h, static_cast<size_t>(t.dtype));
  h = hash_ints(h, t.shape);
  for (double d : e.attrs.literal) h = mix(h, std::hash<double>{}(d));
  h = mix(h, static_cast<size_t>(e.attrs.axis));
  h = mix(h, static_cast<size_t>(e.attrs.cmp));
  h = hash_ints(h, e.attrs.dims);
  h = hash_ints(h, e.attrs.lhs_batch);
  h = hash_ints(h, e.attrs.rhs_batch);
  h = hash_ints(h, e.attrs.lhs_contract);
  for (const std::vector<int64_t>* v : {&e.attrs.starts, &e.attrs.limits, &e.attrs.strides, &e.attrs.lows, &e.attrs.highs})
    h = hash_ints(h, *v);
  h = mix(h, static_cast<size_t>(e.attrs.no_grad));
  return hash_ints(h, e.attrs.rhs_contract);
}

}  // namespace

Program eliminate_common_subexpressions(const Program& p) {
  Program q = p;
  std::vector<int> rep(static_cast<size_t>(q.num_values()));
  for (size_t v = 0; v < rep.size(); ++v) rep[v] = static_cast<int>(v);
  std::unordered_multimap<size_t, size_t> seen;  // hash -> index of a kept equation
  for (size_t i = 0; i < q.eqns.size(); ++i) {
    Eqn& e = q.eqns[i];
    for (int& v : e.inputs) v = rep[static_cast<size_t>(v)];
    const Type& t = q.type(e.out);
    const size_t h = eqn_hash(e, t);
    bool merged = false;
    auto [lo, hi] = seen.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const Eqn& f = q.eqns[it->second];
      if (f.op == e.op && f.inputs == e.inputs && f.attrs == e.attrs && q.type(f.out) == t) {
        rep[static_cast<size_t>(e.out)] = f.out;
        merged = true;
        break;
      }
    }
    if (!merged) seen.emplace(h, i);
  }
  for (NamedValue& o : q.outputs) o.value = rep[static_cast<size_t>(o.value)];
  return dead_code_eliminate(q);
}

}  // namespace capstep
