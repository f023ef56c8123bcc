// fuse_program: union-find over equations, merging a fusible equation with the
// group of each fusible producer of equal element count, unless the merge would
// make a cycle among groups (checked by a forward search over groups from the
// merged pair's outside consumers). Then the groups are ordered topologically (earliest original
// equation first, to keep lifetimes short) and the equations renumbered so that
// each group is one contiguous range.
#include "backend/plan/fusion.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <sstream>

namespace capstep::plan {
namespace {

bool fusible(Op op) { return is_elementwise(op) || op == Op::broadcast_in_dim; }
bool is_free(Op op) { return op == Op::constant || op == Op::iota || op == Op::reshape; }

struct UnionFind {
  std::vector<int> parent;
  std::vector<std::vector<int>> members;
  explicit UnionFind(int n) : parent(static_cast<size_t>(n)), members(static_cast<size_t>(n)) {
    std::iota(parent.begin(), parent.end(), 0);
    for (int i = 0; i < n; ++i) members[static_cast<size_t>(i)] = {i};
  }
  int find(int x) {
    while (parent[static_cast<size_t>(x)] != x) {
      parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
      x = parent[static_cast<size_t>(x)];
    }
    return x;
  }
  void unite(int a, int b) {  // roots
    if (members[static_cast<size_t>(a)].size() < members[static_cast<size_t>(b)].size()) std::swap(a, b);
    parent[static_cast<size_t>(b)] = a;
    auto& ma = members[static_cast<size_t>(a)];
    auto& mb = members[static_cast<size_t>(b)];
    ma.insert(ma.end(), mb.begin(), mb.end());
    mb.clear();
  }
};

}  // namespace

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::loop: return "loop";
    case GroupKind::single: return "single";
    case GroupKind::free: return "free";
  }
  return "?";
}

Fused fuse_program(const Program& p, bool loops) {
  verify(p);
  const int E = static_cast<int>(p.eqns.size());
  std::vector<int> producer(static_cast<size_t>(p.num_values()), -1);
  for (int d = 0; d < E; ++d) producer[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = d;
  std::vector<std::vector<int>> consumers(static_cast<size_t>(E));
  for (int d = 0; d < E; ++d)
    for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
      const int q = producer[static_cast<size_t>(x)];
      if (q >= 0 && (consumers[static_cast<size_t>(q)].empty() || consumers[static_cast<size_t>(q)].back() != d))
        consumers[static_cast<size_t>(q)].push_back(d);
    }
  auto numel_of = [&](int d) { return p.type(p.eqns[static_cast<size_t>(d)].out).numel(); };

  UnionFind uf(E);
  // Merging groups a and b (roots) keeps the graph of groups acyclic unless
  // a path of groups leads from one to the other through a third group: a
  // search over groups (each visited group contributes every member's
  // consumers, since the group runs as one kernel).
  std::vector<int> seen(static_cast<size_t>(E), -1);
  int stamp = 0;
  auto safe_to_merge = [&](int a, int b) {
    ++stamp;
    std::vector<int> stack;
    auto visit_consumers_of = [&](int r) {
      for (int m : uf.members[static_cast<size_t>(r)])
        for (int c : consumers[static_cast<size_t>(m)]) {
          const int rc = uf.find(c);
          if (rc == a || rc == b) {
            if (r != a && r != b) return false;
            continue;
          }
          if (seen[static_cast<size_t>(rc)] != stamp) {
            seen[static_cast<size_t>(rc)] = stamp;
            stack.push_back(rc);
          }
        }
      return true;
    };
    visit_consumers_of(a);
    visit_consumers_of(b);
    while (!stack.empty()) {
      const int r = stack.back();
      stack.pop_back();
      if (!visit_consumers_of(r)) return false;
    }
    return true;
  };
  if (loops)
    for (int d = 0; d < E; ++d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      if (!fusible(e.op)) continue;
      const int64_t n = numel_of(d);
      for (int x : e.inputs) {
        const int q = producer[static_cast<size_t>(x)];
        if (q < 0 || !fusible(p.eqns[static_cast<size_t>(q)].op) || numel_of(q) != n) continue;
        // (an elementwise operand always has n elements; a broadcast's operand
        // with n elements only inserts axes of size 1: the same flat index)
        const int a = uf.find(d), b = uf.find(q);
        if (a != b && safe_to_merge(a, b)) uf.unite(a, b);
      }
    }

  // groups, then a topological order of them (earliest first member first)
  std::vector<int> root_group(static_cast<size_t>(E), -1);
  std::vector<std::vector<int>> members;
  for (int d = 0; d < E; ++d) {
    const int r = uf.find(d);
    if (root_group[static_cast<size_t>(r)] < 0) {
      root_group[static_cast<size_t>(r)] = static_cast<int>(members.size());
      members.emplace_back();
    }
    members[static_cast<size_t>(root_group[static_cast<size_t>(r)])].push_back(d);  // ascending
  }
  const int G = static_cast<int>(members.size());
  std::vector<int> gid(static_cast<size_t>(E));
  for (int g = 0; g < G; ++g)
    for (int d : members[static_cast<size_t>(g)]) gid[static_cast<size_t>(d)] = g;
  std::vector<std::vector<int>> succ(static_cast<size_t>(G));
  std::vector<int> indeg(static_cast<size_t>(G), 0);
  for (int d = 0; d < E; ++d)
    for (int c : consumers[static_cast<size_t>(d)]) {
      const int a = gid[static_cast<size_t>(d)], b = gid[static_cast<size_t>(c)];
      if (a != b) {
        succ[static_cast<size_t>(a)].push_back(b);
        ++indeg[static_cast<size_t>(b)];
      }
    }
  // members[g][0] ascends with g (groups were numbered by first member)
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int g = 0; g < G; ++g)
    if (indeg[static_cast<size_t>(g)] == 0) ready.push(g);
  std::vector<int> order;
  while (!ready.empty()) {
    const int g = ready.top();
    ready.pop();
    order.push_back(g);
    for (int s : succ[static_cast<size_t>(g)])
      if (--indeg[static_cast<size_t>(s)] == 0) ready.push(s);
  }
  if (static_cast<int>(order.size()) != G)
    throw Error("fuse_program: the fusion groups of program \"" + p.name + "\" form a cycle (a bug in the grouping)");

  Fused f;
  f.program = p;
  f.program.eqns.clear();
  std::vector<char> is_output(static_cast<size_t>(p.num_values()), 0);
  for (const NamedValue& o : p.outputs) is_output[static_cast<size_t>(o.value)] = 1;
  for (int g : order) {
    Group gr;
    const std::vector<int>& ms = members[static_cast<size_t>(g)];
    gr.first = static_cast<int>(f.program.eqns.size());
    gr.last = gr.first + static_cast<int>(ms.size()) - 1;
    const Op op0 = p.eqns[static_cast<size_t>(ms[0])].op;
    gr.kind = fusible(op0) && loops ? GroupKind::loop : is_free(op0) ? GroupKind::free : GroupKind::single;
    gr.numel = numel_of(ms[0]);
    for (int d : ms) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      for (int x : e.inputs) {
        const int q = producer[static_cast<size_t>(x)];
        if ((q < 0 || gid[static_cast<size_t>(q)] != g) &&
            std::find(gr.inputs.begin(), gr.inputs.end(), x) == gr.inputs.end())
          gr.inputs.push_back(x);
      }
      bool out = is_output[static_cast<size_t>(e.out)] != 0;
      for (int c : consumers[static_cast<size_t>(d)]) out |= gid[static_cast<size_t>(c)] != g;
      if (out) gr.outputs.push_back(e.out);
      f.program.eqns.push_back(e);
      f.old_index.push_back(d);
      f.group_of.push_back(static_cast<int>(f.groups.size()));
    }
    f.groups.push_back(std::move(gr));
  }
  f.launches_before = 0;
  for (const Eqn& e : p.eqns) f.launches_before += !is_free(e.op);
  for (const Group& g : f.groups)
    f.launches_after += g.kind == GroupKind::single || (g.kind == GroupKind::loop && !g.outputs.empty());
  return f;
}

std::string Fused::summary() const {
  int n_loop = 0, fused_eqns = 0, biggest = 0;
  for (const Group& g : groups)
    if (g.kind == GroupKind::loop) {
      ++n_loop;
      fused_eqns += g.size();
      biggest = std::max(biggest, g.size());
    }
  std::ostringstream s;
  s << program.eqns.size() << " equations: " << launches_before << " launches -> " << launches_after << " ("
    << n_loop << " loop kernels for " << fused_eqns << " elementwise/broadcast equations, largest " << biggest
    << ")";
  return s.str();
}

std::vector<std::pair<int, int>> group_spans(const Fused& f) {
  std::vector<std::pair<int, int>> s(f.program.eqns.size());
  for (size_t d = 0; d < s.size(); ++d) {
    const Group& g = f.groups[static_cast<size_t>(f.group_of[d])];
    s[d] = g.kind == GroupKind::loop ? std::make_pair(g.first, g.last)
                                     : std::make_pair(static_cast<int>(d), static_cast<int>(d));
  }
  return s;
}

std::vector<char> internal_values(const Fused& f) {
  std::vector<char> v(static_cast<size_t>(f.program.num_values()), 0);
  for (const Group& g : f.groups) {
    if (g.kind != GroupKind::loop) continue;
    for (int d = g.first; d <= g.last; ++d) v[static_cast<size_t>(f.program.eqns[static_cast<size_t>(d)].out)] = 1;
    for (int x : g.outputs) v[static_cast<size_t>(x)] = 0;
  }
  return v;
}

}  // namespace capstep::plan
