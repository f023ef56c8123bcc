// recompute_in_backward (transforms.h): cheap forward values recomputed where
// the backward reads them, instead of held from the forward to the backward.
#include <functional>
#include <map>
#include <string>

#include "capstep/transforms.h"
#include "transforms/passes.h"

namespace capstep {
Program recompute_in_backward(const Program& p) {
  using autodiff_detail::anchor;
  using autodiff_detail::append;
  using autodiff_detail::forward_equations;
  using autodiff_detail::true_of;
  if (p.outputs.empty()) return p;
  const size_t n = p.eqns.size(), nv = static_cast<size_t>(p.num_values());
  const std::vector<char> fwd = forward_equations(p);
  const std::vector<int> def = autodiff_detail::DefUse(p).def;
  std::vector<char> output(nv, 0), read_back(nv, 0);  // read_back: a gradient equation reads it
  for (const NamedValue& o : p.outputs) output[static_cast<size_t>(o.value)] = 1;
  for (size_t i = 0; i < n; ++i)
    if (!fwd[i])
      for (int v : p.eqns[i].inputs) read_back[static_cast<size_t>(v)] = 1;
  auto numel = [&](int v) { return p.type(v).numel(); };
  // An input with a gradient output ("grad.<name>": a parameter that trains)
  // may be written over by the update after the run reads it (with_adamw
  // donates it), so a copy reads it through a snapshot taken at the start
  // (below), a copy of it held until its last reader. The other inputs (the
  // batch, a frozen base) are read as they are.
  std::vector<char> overwritten(nv, 0);
  for (const NamedValue& in : p.inputs)
    overwritten[static_cast<size_t>(in.value)] = p.output_index("grad." + in.name) >= 0;
  // Recomputable: a forward elementwise, broadcast_in_dim or reshape result,
  // not an output, each of whose operands lives into the backward anyway (an
  // input, a constant or iota, a value the backward reads), or is smaller
  // than it (a broadcast's operand, a row's scale), or is recomputable in
  // turn, up to a few equations deep (the recomputation is a few more
  // operations per element). A value that needs a GEMM's, a reduction's or a
  // gather's result that nothing else holds is not: recomputing it would
  // hold that result instead, as large. Nor is one read from an input that
  // needs a snapshot, unless that input is smaller than it (a gain's
  // broadcast): the snapshot would hold as much as the value (a weight's
  // bf16 convert would hold an f32 copy of the weight instead).
  constexpr int kDepth = 6;
  std::vector<signed char> memo(nv, -1);
  std::function<bool(int, int)> recomputable = [&](int v, int depth) -> bool {
    const int d = def[static_cast<size_t>(v)];
    if (d < 0 || !fwd[static_cast<size_t>(d)] || output[static_cast<size_t>(v)] || depth > kDepth) return false;
    if (memo[static_cast<size_t>(v)] >= 0) return memo[static_cast<size_t>(v)] != 0;
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    bool ok = is_elementwise(e.op) || e.op == Op::broadcast_in_dim || e.op == Op::reshape;
    for (size_t k = 0; ok && k < e.inputs.size(); ++k) {
      const int u = e.inputs[k], du = def[static_cast<size_t>(u)];
      if (du < 0) ok = !overwritten[static_cast<size_t>(u)] || numel(u) < numel(v);
      else
        ok = op_kind(p.eqns[static_cast<size_t>(du)].op) == OpKind::source || read_back[static_cast<size_t>(u)] ||
             numel(u) < numel(v) || recomputable(u, depth + 1);
    }
    memo[static_cast<size_t>(v)] = ok;
    return ok;
  };
  // Replaced: a recomputable value that gradient equations read. Each of
  // them reads a copy made just before it, so the original dies in the
  // forward; an elementwise reader's copy joins its fused group (no buffer),
  // a GEMM's is a buffer only from the copy to that GEMM.
  std::vector<char> replaced(nv, 0);
  for (size_t v = 0; v < nv; ++v)
    replaced[v] = read_back[v] && recomputable(static_cast<int>(v), 0);

  Program q = p;
  q.eqns.clear();
  q.eqns.reserve(n);
  std::vector<Eqn> front;  // equations that go before the first one (snapshots)
  // A program input that trains, read by a copy, is read through a snapshot
  // made before the first equation, select(true, x, x): the same bits, so
  // that no equation of the backward reads the input itself, and an update
  // written over it (with_adamw's, donated) still comes after its last read.
  std::map<int, int> snapshot;
  auto snapshot_of = [&](int x) {
    auto it = snapshot.find(x);
    if (it == snapshot.end())
      it = snapshot.emplace(x, append(q, front, Op::select, {true_of(q, front, p.type(x)), x, x}, Attrs{}, p.type(x))).first;
    return it->second;
  };
  // The anchor: a scheduler that orders by dependencies alone (the fusion
  // planner runs each group at the longest path to it, and may merge a copy
  // into the forward group that made its operand) would run copies whose
  // operands all exist in the forward during the forward, where they would
  // be held as long as the originals were. So the copies read each forward
  // value through select(true, value, g), the same bits, g a gradient value
  // of its type (one the reader reads, else the last made before it): no
  // copy can run before the backward reaches its reader.
  std::map<std::string, int> last_grad, all_true;
  const Eqn* reader = nullptr;
  auto anchored = [&](int u) {
    if (def[static_cast<size_t>(u)] < 0) {
      if (!overwritten[static_cast<size_t>(u)]) return u;  // never written: read as it is
      u = snapshot_of(u);
    }
    const Type t = q.type(u);
    const std::string key = t.str();
    int g = -1;
    for (int w : reader->inputs)
      if (def[static_cast<size_t>(w)] >= 0 && !fwd[static_cast<size_t>(def[static_cast<size_t>(w)])] && p.type(w) == t) g = w;
    if (g < 0 && last_grad.count(key)) g = last_grad[key];
    if (g < 0) return u;
    return anchor(q, all_true, u, g);
  };
  // The copy of v for the gradient equation `reader`: its operands' copies
  // first where they are replaced or only recomputed (read by no gradient
  // equation), the anchored originals otherwise (constants as they are).
  std::vector<int> copy(nv, -1), leaf(nv, -1), made;
  std::function<int(int)> copy_of = [&](int v) -> int {
    if (copy[static_cast<size_t>(v)] >= 0) return copy[static_cast<size_t>(v)];
    Eqn c = p.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])];  // the same operation: the same bits
    for (int& u : c.inputs) {
      const int du = def[static_cast<size_t>(u)];
      if (du >= 0 && op_kind(p.eqns[static_cast<size_t>(du)].op) == OpKind::source) continue;
      if (replaced[static_cast<size_t>(u)] || (du >= 0 && !read_back[static_cast<size_t>(u)] && numel(u) >= numel(v))) {
        u = copy_of(u);
      } else {
        if (leaf[static_cast<size_t>(u)] < 0) leaf[static_cast<size_t>(u)] = anchored(u);
        made.push_back(u);
        u = leaf[static_cast<size_t>(u)];
      }
    }
    c.attrs.region = -1;
    c.out = q.num_values();
    q.types.push_back(p.type(v));
    q.eqns.push_back(std::move(c));
    made.push_back(v);
    return copy[static_cast<size_t>(v)] = q.num_values() - 1;
  };
  for (size_t i = 0; i < n; ++i) {
    Eqn e = p.eqns[i];
    if (!fwd[i]) {
      for (int v : made) copy[static_cast<size_t>(v)] = leaf[static_cast<size_t>(v)] = -1;  // one set per reader
      made.clear();
      reader = &p.eqns[i];
      for (int& v : e.inputs)
        if (replaced[static_cast<size_t>(v)]) v = copy_of(v);
    }
    const int out = e.out;
    q.eqns.push_back(std::move(e));
    if (!fwd[i]) last_grad[p.type(out).str()] = out;
  }
  q.eqns.insert(q.eqns.begin(), front.begin(), front.end());
  return dead_code_eliminate(q);
}

}  // namespace capstep
