// Activation checkpointing (rematerialization) on a gradient program: the
// backward's reads of a checkpoint region's intermediate values go to copies
// of the region's forward equations, recomputed just before the first
// backward equation that needs them, so the originals die inside the forward
// and only what leaves the region (the residual stream, the values other
// regions share) stays alive until the backward.
#include <algorithm>
#include <map>
#include <set>

#include "capstep/transforms.h"
#include "transforms/passes.h"

namespace capstep {
namespace {

std::string region_list(const std::vector<int>& r) {
  std::string s;
  for (int x : r) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s.empty() ? "none" : s;
}

}  // namespace

std::vector<int> checkpoint_regions(const Program& p) {
  std::set<int> r;
  for (const Eqn& e : p.eqns)
    if (e.attrs.region >= 0) r.insert(e.attrs.region);
  return {r.begin(), r.end()};
}

std::vector<int> every_kth_region(const Program& p, int every) {
  if (every < 1) throw Error("checkpoint every " + std::to_string(every) + " blocks: it must be at least 1");
  std::vector<int> r;
  for (int x : checkpoint_regions(p))
    if (x % every == 0) r.push_back(x);
  return r;
}

Program checkpoint_activations(const Program& p, const std::vector<int>& regions) {
  verify(p);
  if (p.outputs.empty())
    throw Error("checkpoint_activations: program '" + p.name + "' has no outputs; output 0 must be the loss");
  const std::vector<int> present = checkpoint_regions(p);
  std::set<int> chosen;
  for (int r : regions) {
    if (!std::binary_search(present.begin(), present.end(), r))
      throw Error("checkpoint_activations: program '" + p.name + "' has no equation in region " + std::to_string(r) +
                  " (its regions: " + region_list(present) + ")");
    chosen.insert(r);
  }
  const size_t n = p.eqns.size(), nv = static_cast<size_t>(p.num_values());
  const std::vector<char> fwd = autodiff_detail::forward_equations(p);
  const std::vector<int> def = autodiff_detail::DefUse(p).def;
  // rg[i]: the chosen region forward equation i belongs to, or -1.
  std::vector<int> rg(n, -1);
  for (size_t i = 0; i < n; ++i)
    if (fwd[i] && chosen.count(p.eqns[i].attrs.region)) rg[i] = p.eqns[i].attrs.region;
  auto region_of_value = [&](int v) {
    const int d = def[static_cast<size_t>(v)];
    return d < 0 ? -1 : rg[static_cast<size_t>(d)];
  };
  // Kept: a region's value that forward equations outside it read (its
  // results, shared constants) or that is an output. It lives anyway, so
  // the backward reads it rather than a copy.
  std::vector<char> kept(nv, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!fwd[i]) continue;
    for (int v : p.eqns[i].inputs) {
      const int r = region_of_value(v);
      if (r >= 0 && r != rg[i]) kept[static_cast<size_t>(v)] = 1;
    }
  }
  for (const NamedValue& o : p.outputs) kept[static_cast<size_t>(o.value)] = 1;
  // Recomputed: a region's value that is not kept, where a gradient
  // equation reads it. Each copy goes just before the first equation that
  // needs it (after the copies of its own operands), so a block's values are
  // recomputed as late as they can be, as its backward reaches them.
  auto recomputed = [&](int v) { return region_of_value(v) >= 0 && !kept[static_cast<size_t>(v)]; };
  // The anchor: a scheduler that orders by dependencies alone (the fusion
  // planner runs each group at the longest path to it) would run the copies,
  // whose operands all exist during the forward, in the forward, and hold
  // their values as long as before. So a region's copies read its main
  // input (the largest value it reads from outside that depends on the
  // program's inputs, not only on constants as a causal mask does: the
  // residual stream) through select(true, input, anchor), the same bits, with
  // `anchor` the gradient value of the input's type computed last before the
  // equation that needs the copies (the cotangent flowing into the block): no
  // scheduler can start the recomputation before the backward reaches it.
  std::vector<char> varies(nv, 0);  // depends on a program input
  for (const NamedValue& in : p.inputs) varies[static_cast<size_t>(in.value)] = 1;
  for (const Eqn& e : p.eqns)
    for (int v : e.inputs) varies[static_cast<size_t>(e.out)] |= varies[static_cast<size_t>(v)];
  std::map<int, int> main_input;  // region -> value
  for (size_t i = 0; i < n; ++i) {
    if (rg[i] < 0) continue;
    for (int v : p.eqns[i].inputs) {
      const int d = def[static_cast<size_t>(v)];
      if (d < 0 || rg[static_cast<size_t>(d)] == rg[i] || !varies[static_cast<size_t>(v)]) continue;
      auto [it, fresh] = main_input.emplace(rg[i], v);
      if (!fresh && p.type(v).bytes() > p.type(it->second).bytes()) it->second = v;
    }
  }
  Program q = p;
  q.eqns.clear();
  q.eqns.reserve(n);
  std::vector<int> copy(nv, -1);
  std::map<std::string, int> all_true;  // region -> the scalar true its anchors broadcast
  // Before equation i of p: main input x, anchored (or as it is where no
  // gradient value of its type precedes i).
  auto anchor = [&](int r, int x, size_t i) {
    const Type t = p.type(x);
    int g = -1;
    for (size_t j = i; j-- > 0 && g < 0;)
      if (!fwd[j] && p.type(p.eqns[j].out) == t) g = p.eqns[j].out;
    return g >= 0 ? autodiff_detail::anchor(q, all_true, x, g, r) : x;
  };
  // Depth-first over the operands, in order: for a chain of equations, the
  // forward's own order. Iterative (a block is hundreds of equations deep).
  auto copy_of = [&](int root, size_t before) {
    const int r = region_of_value(root);
    const int x = main_input.count(r) ? main_input[r] : -1;
    int ax = -1;  // x anchored at `before`, made when a copy first reads x
    std::vector<std::pair<int, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto& [v, k] = stack.back();
      const Eqn& e = p.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])];
      if (k < e.inputs.size()) {
        const int u = e.inputs[k++];
        if (recomputed(u) && copy[static_cast<size_t>(u)] < 0) stack.push_back({u, 0});
        continue;
      }
      Eqn c = e;  // the same operation on the same operands: the same bits
      for (int& u : c.inputs)
        if (recomputed(u)) u = copy[static_cast<size_t>(u)];
        else if (u == x) u = ax >= 0 ? ax : (ax = anchor(r, x, before));
      c.out = q.num_values();
      q.types.push_back(p.type(e.out));
      copy[static_cast<size_t>(v)] = c.out;
      q.eqns.push_back(std::move(c));
      stack.pop_back();
    }
    return copy[static_cast<size_t>(root)];
  };
  for (size_t i = 0; i < n; ++i) {
    Eqn e = p.eqns[i];
    if (!fwd[i])
      for (int& v : e.inputs)
        if (recomputed(v)) v = copy[static_cast<size_t>(v)] >= 0 ? copy[static_cast<size_t>(v)] : copy_of(v, i);
    q.eqns.push_back(std::move(e));
  }
  // Renumbered in equation order (nothing is dead: every copy has a reader).
  q = dead_code_eliminate(q);
  verify(q);
  return q;
}

}  // namespace capstep
