// fuse_program: union-find over equations, merging a fusible equation with the
// group of each fusible producer when their geometries agree (fusion.h), the
// merged group is valid, and the merge makes no cycle among groups (checked by
// a forward search over groups from the merged pair's outside consumers). Then
// the groups are ordered topologically: by level (the launches on the longest
// path to a group), so that the generated kernels of one level form a wave
// that runs as one launch, and the sinks are last; and the equations
// renumbered so that each group is one contiguous range.
#include "backend/plan/fusion.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <sstream>

#include "capstep/transforms.h"

namespace capstep::plan {
namespace {

// The fusion roles are the primitive table's column (OpFuse).
bool loop_op(Op op) { return op_fuse(op) == OpFuse::elementwise || op_fuse(op) == OpFuse::strided; }
bool is_free(Op op) { return op_fuse(op) == OpFuse::free; }

// Beyond this size a warp per row (row groups) leaves the device idle: such
// reductions stay single kernels. Col groups take any number of rows (their
// blocks share the rows of a tile of kept elements).
constexpr int64_t kMaxRowCols = 8192;

// The geometry of a group: loop (n elements), row or col (n full elements,
// `small` rows or kept elements).
enum class Geo : unsigned char { none, loop, row, col, gemm };
struct Geometry {
  Geo kind = Geo::none;
  int64_t n = 0, small = 0;
};

// A reduction over trailing axes (row) or leading axes (col) that fuses.
Geometry reduce_geometry(const Program& p, const Eqn& e) {
  if (op_fuse(e.op) != OpFuse::reduce) return {};
  const Shape& in = p.type(e.inputs[0]).shape;
  const int64_t n = p.type(e.inputs[0]).numel(), s = p.type(e.out).numel();
  const int rank = static_cast<int>(in.size());
  const int k = static_cast<int>(e.attrs.dims.size());
  if (k == 0 || s <= 0 || n <= s || n % s != 0) return {};
  bool suffix = true, prefix = true;
  for (int j = 0; j < k; ++j) {
    suffix &= e.attrs.dims[static_cast<size_t>(j)] == rank - k + j;
    prefix &= e.attrs.dims[static_cast<size_t>(j)] == j;
  }
  if (suffix && n / s <= kMaxRowCols) return {Geo::row, n, s};
  if (prefix) return {Geo::col, n, s};
  return {};
}

Geometry eqn_geometry(const Program& p, const Eqn& e) {
  if (loop_op(e.op) || op_fuse(e.op) == OpFuse::gather) return {Geo::loop, p.type(e.out).numel(), 0};
  return reduce_geometry(p, e);
}

// The geometry of two groups merged, or none. A gemm group takes loop groups
// of its output's element count (its elementwise epilogue).
Geometry merged(const Geometry& a, const Geometry& b) {
  if (a.kind == Geo::none || b.kind == Geo::none) return {};
  if (a.kind == Geo::gemm || b.kind == Geo::gemm) {  // (two gemm groups: results of one shape, summed)
    const Geometry& g = a.kind == Geo::gemm ? a : b;
    const Geometry& o = a.kind == Geo::gemm ? b : a;
    if (o.kind == Geo::row && o.n == g.n) return o;  // products computed inside the row kernel
    return (o.kind == Geo::loop || o.kind == Geo::gemm) && o.n == g.n ? g : Geometry{};
  }
  if (a.kind == Geo::loop && b.kind == Geo::loop) return a.n == b.n ? a : Geometry{};
  if (a.kind == Geo::loop) return a.n == b.n || a.n == b.small ? b : Geometry{};
  if (b.kind == Geo::loop) return merged(b, a);
  return a.kind == b.kind && a.n == b.n && a.small == b.small ? a : Geometry{};
}

}  // namespace

bool row_broadcast(const Program& p, const Eqn& e) {
  const Shape& in = p.type(e.inputs[0]).shape;
  const Shape& out = p.type(e.out).shape;
  if (in.size() > out.size()) return false;
  for (size_t a = 0; a < in.size(); ++a)
    if (e.attrs.dims[a] != static_cast<int64_t>(a) || in[a] != out[a]) return false;
  return true;
}

namespace {

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

int64_t dot_macs(const Program& p, const Eqn& e) {
  int64_t k = 1;
  const Shape& l = p.type(e.inputs[0]).shape;
  for (int64_t a : e.attrs.lhs_contract) k *= l[static_cast<size_t>(a)];
  return p.type(e.out).numel() * k;
}

// the product of a dot_general's rhs free axes: its result's trailing run
int64_t dot_cols(const Program& p, const Eqn& e) {
  const Shape& r = p.type(e.inputs[1]).shape;
  int64_t n = 1;
  for (int64_t a : dot_free_axes(static_cast<int>(r.size()), e.attrs.rhs_batch, e.attrs.rhs_contract))
    n *= r[static_cast<size_t>(a)];
  return n;
}

bool gemm_group_eqn(const Program& p, const Eqn& e, int64_t max_macs) {
  if (e.op != Op::dot_general || max_macs <= 0) return false;
  const DType t = p.type(e.out).dtype;
  if (t != DType::f32 && t != DType::f64) return false;
  const int64_t macs = dot_macs(p, e);
  return macs > 0 && macs <= max_macs;
}

}  // namespace

std::optional<ViewOf> view_of(const Program& p, const std::vector<char>& view, int x) {
  // the chain of views from x up to the value with a buffer
  std::vector<int> producer(static_cast<size_t>(p.num_values()), -1);
  for (int d = 0; d < static_cast<int>(p.eqns.size()); ++d) producer[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = d;
  std::vector<int> chain;  // equations, x's first
  int v = x;
  for (;;) {
    const int d = producer[static_cast<size_t>(v)];
    if (d < 0 || view.empty() || !view[static_cast<size_t>(d)]) break;
    chain.push_back(d);
    v = p.eqns[static_cast<size_t>(d)].inputs[0];
  }
  ViewOf r;
  r.root = v;
  r.layout = row_major_layout(p.type(v).shape);
  for (size_t j = chain.size(); j-- > 0;) {
    const Eqn& e = p.eqns[static_cast<size_t>(chain[j])];
    if (e.op == Op::transpose) {
      r.layout = transpose_layout(r.layout, e.attrs.dims);
    } else if (e.op == Op::convert) {  // f32 -> bf16 (Target::bf16_operand_views): the same layout, rounded on load
      r.bf16_round = true;
    } else {
      std::optional<Layout> l = reshape_layout(r.layout, p.type(e.out).shape);
      if (!l) return std::nullopt;
      r.layout = std::move(*l);
    }
  }
  return r;
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::loop: return "loop";
    case GroupKind::row: return "row";
    case GroupKind::col: return "col";
    case GroupKind::gemm: return "gemm";
    case GroupKind::scatter: return "scatter";
    case GroupKind::single: return "single";
    case GroupKind::free: return "free";
  }
  return "?";
}

namespace {

// Whether equations d and d + 1 of p are convert(x: f32 -> bf16) and its
// convert back to f32, which is the value g.
bool rounds_to_bf16_and_back(const Program& p, int d, int g) {
  if (d + 1 >= static_cast<int>(p.eqns.size())) return false;
  const Eqn& a = p.eqns[static_cast<size_t>(d)];
  const Eqn& b = p.eqns[static_cast<size_t>(d + 1)];
  return a.op == Op::convert && b.op == Op::convert && p.type(a.inputs[0]).dtype == DType::f32 &&
         p.type(a.out).dtype == DType::bf16 && b.inputs[0] == a.out && p.type(b.out).dtype == DType::f32 && b.out == g;
}

// Group::adamw of each loop group that is exactly one update of `updates`
// (expand_adamw's record for f.program): its last equation's value is the
// update's, every other equation's too (or a constant), and the group holds
// every one of the update's values that is no constant; or the same after two
// converts that round the update's gradient to bf16 and back
// (Group::adamw_rounds_g).
void mark_adamw_groups(Fused& f, std::vector<ExpandedAdamW> updates) {
  const Program& p = f.program;
  std::vector<int> of(static_cast<size_t>(p.num_values()), -1);  // per value: its update
  std::vector<char> constant(static_cast<size_t>(p.num_values()), 0);
  for (const Eqn& e : p.eqns) constant[static_cast<size_t>(e.out)] = e.op == Op::constant;
  std::vector<int> computed(updates.size(), 0);  // per update: its values that are no constant
  for (size_t k = 0; k < updates.size(); ++k)
    for (int v : updates[k].values) {
      of[static_cast<size_t>(v)] = static_cast<int>(k);
      computed[k] += constant[static_cast<size_t>(v)] ? 0 : 1;
    }
  for (Group& g : f.groups) {
    if (g.kind != GroupKind::loop) continue;
    const int u = of[static_cast<size_t>(p.eqns[static_cast<size_t>(g.last)].out)];
    if (u < 0) continue;
    const bool rounds = g.size() > 2 && rounds_to_bf16_and_back(p, g.first, updates[static_cast<size_t>(u)].g);
    int mine = 0;
    bool only_u = true;
    for (int d = g.first + (rounds ? 2 : 0); d <= g.last && only_u; ++d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      if (e.op == Op::constant) continue;
      only_u = of[static_cast<size_t>(e.out)] == u;
      ++mine;
    }
    if (only_u && mine == computed[static_cast<size_t>(u)]) {
      g.adamw = u;
      g.adamw_rounds_g = rounds;
    }
  }
  f.adamw = std::move(updates);
}

}  // namespace

Target host_target() {
  return Target{.loops = true,
                .gemm_max_macs = 0,
                .fold_reshapes = false,
                .bf16_operand_views = false,
                .library_gemm_reads_transpose = {}};
}

Target cuda_target(bool fuse, int64_t gemm_max_macs) {
  return Target{.loops = fuse,
                .gemm_max_macs = fuse ? gemm_max_macs : 0,
                .fold_reshapes = fuse,
                .bf16_operand_views = fuse,
                .library_gemm_reads_transpose = {}};
}

Fused fuse_expanded(const Program& expanded, std::vector<ExpandedAdamW> updates, const Target& target) {
  Fused f = fuse_program(expanded, target);
  mark_adamw_groups(f, std::move(updates));
  return f;
}

Fused fuse_program(const Program& p, const Target& target) {
  if (has_adamw(p)) {  // planned as the plain equations, each update known by its record
    std::vector<ExpandedAdamW> updates;
    const Program expanded = expand_adamw(p, &updates);
    return fuse_expanded(expanded, std::move(updates), target);
  }
  verify(p);
  const bool loops = target.loops;
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

  // gemm groups, and the transposes that only they read (through reshapes):
  // views, as long as every gemm operand keeps a strided layout
  std::vector<char> is_gemm(static_cast<size_t>(E), 0), view(static_cast<size_t>(E), 0);
  std::vector<char> is_output(static_cast<size_t>(p.num_values()), 0);
  for (const NamedValue& o : p.outputs) is_output[static_cast<size_t>(o.value)] = 1;
  for (int d = 0; d < E; ++d) {
    is_gemm[static_cast<size_t>(d)] = loops && gemm_group_eqn(p, p.eqns[static_cast<size_t>(d)], target.gemm_max_macs);
    view[static_cast<size_t>(d)] = p.eqns[static_cast<size_t>(d)].op == Op::reshape;
  }
  auto bf16_operand = [&](int d) {  // a convert f32 -> bf16 that may be read through as a view
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    return target.bf16_operand_views && e.op == Op::convert && p.type(e.out).dtype == DType::bf16 &&
           p.type(e.inputs[0]).dtype == DType::f32;
  };
  // Every reader of equation d's value is a gemm group, directly or through
  // reshapes and bf16 operand converts; under such a convert (mixed
  // precision converts a transposed operand's source, optim.h) through
  // transposes too, which are then views as well.
  std::function<bool(int, bool)> gemm_only = [&](int d, bool under_convert) {
    if (is_output[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] || consumers[static_cast<size_t>(d)].empty())
      return false;
    for (int c : consumers[static_cast<size_t>(d)]) {
      const Op op = p.eqns[static_cast<size_t>(c)].op;
      if (is_gemm[static_cast<size_t>(c)]) continue;
      if (bf16_operand(c) && gemm_only(c, true)) continue;
      if ((op == Op::reshape || (under_convert && op == Op::transpose)) && gemm_only(c, under_convert)) continue;
      return false;
    }
    return true;
  };
  // Transposes that library GEMMs read in place (Target::library_gemm_reads_transpose):
  // views too, but kept out of `view` while the groups are made: such a
  // transpose is a group of its own either way (its readers join no group and
  // its operand is made outside its group), and its group keeps the kind and
  // the level the grouping gives a transpose, so that the order of the groups,
  // and with it a backend's memory plan, does not depend on the backend's rule.
  std::vector<char> library_view(static_cast<size_t>(E), 0);
  auto library_gemms_only = [&](int d) {  // every reader of transpose d such a library GEMM
    const Eqn& tr = p.eqns[static_cast<size_t>(d)];
    if (!target.library_gemm_reads_transpose || is_output[static_cast<size_t>(tr.out)] || consumers[static_cast<size_t>(d)].empty())
      return false;
    for (int c : consumers[static_cast<size_t>(d)]) {
      const Eqn& e = p.eqns[static_cast<size_t>(c)];
      if (e.op != Op::dot_general || is_gemm[static_cast<size_t>(c)]) return false;
      for (int k = 0; k < 2; ++k)
        if (e.inputs[static_cast<size_t>(k)] == tr.out && !target.library_gemm_reads_transpose(p, e, k, tr)) return false;
    }
    return true;
  };
  // The transposes between a view convert and its gemm groups (gemm_only's
  // walk under a convert): views with it.
  std::function<void(int)> view_transposes_above = [&](int d) {
    for (int c : consumers[static_cast<size_t>(d)]) {
      const Op op = p.eqns[static_cast<size_t>(c)].op;
      if (op != Op::reshape && op != Op::transpose) continue;
      view[static_cast<size_t>(c)] = 1;
      view_transposes_above(c);
    }
  };
  for (int d = 0; d < E; ++d) {
    const Op op = p.eqns[static_cast<size_t>(d)].op;
    if (view[static_cast<size_t>(d)]) continue;  // a reshape, or a transpose above a view convert
    if (bf16_operand(d) && gemm_only(d, true)) {
      view[static_cast<size_t>(d)] = 1;
      view_transposes_above(d);
    } else if (op == Op::transpose && gemm_only(d, false)) {
      view[static_cast<size_t>(d)] = 1;
    } else if (op == Op::transpose && library_gemms_only(d)) {
      library_view[static_cast<size_t>(d)] = 1;
    }
  }
  // A gemm operand without a strided layout: the transposes in its chain of
  // views are copies, and so is a convert under such a transpose (only gemm
  // groups read through a convert).
  for (bool changed = true; changed;) {
    changed = false;
    for (int d = 0; d < E; ++d) {
      if (!is_gemm[static_cast<size_t>(d)]) continue;
      for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
        if (view_of(p, view, x)) continue;
        bool under_copy = false;
        for (int q = producer[static_cast<size_t>(x)]; q >= 0 && view[static_cast<size_t>(q)];
             q = producer[static_cast<size_t>(p.eqns[static_cast<size_t>(q)].inputs[0])]) {
          const bool copy = p.eqns[static_cast<size_t>(q)].op == Op::transpose || (under_copy && bf16_operand(q));
          if (!copy) continue;
          view[static_cast<size_t>(q)] = 0;
          under_copy = changed = true;
        }
      }
    }
  }

  UnionFind uf(E);
  // Merging groups a and b (roots) keeps the graph of groups acyclic unless
  // a path of groups leads from one to the other through a third group: a
  // search over groups (each visited group contributes every member's
  // consumers, since the group runs as one kernel).
  std::vector<int> seen(static_cast<size_t>(E), -1);
  int stamp = 0;
  // (`also`: a third group merged with them, a folded reshape's; -1: none)
  auto safe_to_merge = [&](int a, int b, int also = -1) {
    ++stamp;
    std::vector<int> stack;
    auto visit_consumers_of = [&](int r) {
      for (int m : uf.members[static_cast<size_t>(r)])
        for (int c : consumers[static_cast<size_t>(m)]) {
          const int rc = uf.find(c);
          if (rc == a || rc == b || rc == also) {
            if (r != a && r != b && r != also) return false;
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
    if (also >= 0) visit_consumers_of(also);
    while (!stack.empty()) {
      const int r = stack.back();
      stack.pop_back();
      if (!visit_consumers_of(r)) return false;
    }
    return true;
  };
  // Geometry of each group (by root) and which group each equation is in.
  std::vector<Geometry> geo(static_cast<size_t>(E));
  for (int d = 0; d < E; ++d)
    if (is_gemm[static_cast<size_t>(d)]) geo[static_cast<size_t>(d)] = {Geo::gemm, numel_of(d), 0};
    else if (!view[static_cast<size_t>(d)]) geo[static_cast<size_t>(d)] = eqn_geometry(p, p.eqns[static_cast<size_t>(d)]);
  // Whether the members of a and b (roots) form a valid group of geometry g:
  // a transpose reads an operand made outside the group; a broadcast_in_dim
  // of a member to more elements is a row broadcast in a row group.
  auto valid = [&](int a, int b, const Geometry& g) {
    auto in_group = [&](int x) {
      const int q = producer[static_cast<size_t>(x)];
      if (q < 0) return false;
      const int r = uf.find(q);
      return r == a || r == b;
    };
    const Type* dot_type = nullptr;
    for (int r : {a, b})
      for (int m : uf.members[static_cast<size_t>(r)]) {
        const Eqn& e = p.eqns[static_cast<size_t>(m)];
        if (e.op == Op::transpose && in_group(e.inputs[0])) return false;
        if (e.op == Op::gather_rows && (in_group(e.inputs[0]) || in_group(e.inputs[1]))) return false;
        if (e.op == Op::dot_general) {
          if (in_group(e.inputs[0]) || in_group(e.inputs[1])) return false;  // no prologue
          if (dot_type && !(p.type(e.out) == *dot_type)) return false;       // one tile for all products
          dot_type = &p.type(e.out);
          // in a row group each product element is one of a row's: its rows are the rows
          if (g.kind == Geo::row && dot_cols(p, e) != g.n / g.small) return false;
        }
        if (e.op == Op::broadcast_in_dim && in_group(e.inputs[0]) &&
            p.type(e.inputs[0]).numel() != p.type(e.out).numel() &&
            !(g.kind == Geo::row && p.type(e.inputs[0]).numel() == g.small && p.type(e.out).numel() == g.n &&
              row_broadcast(p, e)))
          return false;
      }
    return true;
  };
  // fold_reshapes: a reshape between two loop-geometry equations, read by
  // nothing else, takes the loop geometry (and stops being a view) when its
  // reader merges with its operand's group; otherwise it stays a view.
  auto fold_reshape = [&](int d, int q) {
    // (the reader elementwise: a transpose or gather reader must read its operand from memory)
    if (!target.fold_reshapes || q < 0 || !view[static_cast<size_t>(q)] || p.eqns[static_cast<size_t>(q)].op != Op::reshape ||
        !is_elementwise(p.eqns[static_cast<size_t>(d)].op))
      return -1;
    if (is_output[static_cast<size_t>(p.eqns[static_cast<size_t>(q)].out)] || consumers[static_cast<size_t>(q)].size() != 1 ||
        consumers[static_cast<size_t>(q)][0] != d)
      return -1;
    const int r = producer[static_cast<size_t>(p.eqns[static_cast<size_t>(q)].inputs[0])];
    if (r < 0 || geo[static_cast<size_t>(uf.find(r))].kind != Geo::loop || geo[static_cast<size_t>(d)].kind != Geo::loop ||
        geo[static_cast<size_t>(uf.find(r))].n != numel_of(q))
      return -1;
    return r;
  };
  // A broadcast to more elements (Target::broadcasts_join_readers_first):
  // its own merge with its operand's group waits for the second pass.
  auto deferred = [&](int d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    return target.broadcasts_join_readers_first && e.op == Op::broadcast_in_dim &&
           p.type(e.inputs[0]).numel() < p.type(e.out).numel();
  };
  if (loops)
    for (int pass = 0; pass < (target.broadcasts_join_readers_first ? 2 : 1); ++pass)
      for (int d = 0; d < E; ++d) {
        const Eqn& e = p.eqns[static_cast<size_t>(d)];
        if (geo[static_cast<size_t>(d)].kind == Geo::none || deferred(d) != (pass == 1)) continue;
        for (int x : e.inputs) {
          const int q = producer[static_cast<size_t>(x)];
          if (const int r = fold_reshape(d, q); r >= 0) {
            // the reshape and its reader join its operand's group, all three at once
            const int a = uf.find(r), b = uf.find(q), c = uf.find(d);
            const Geometry g = merged(geo[static_cast<size_t>(a)], geo[static_cast<size_t>(c)]);
            if (a != c && g.kind == Geo::loop && valid(a, c, g) && safe_to_merge(a, c, b)) {
              view[static_cast<size_t>(q)] = 0;
              geo[static_cast<size_t>(q)] = {Geo::loop, numel_of(q), 0};
              uf.unite(a, b);
              uf.unite(uf.find(a), c);
              geo[static_cast<size_t>(uf.find(a))] = g;
            }
            continue;
          }
          if (q < 0 || geo[static_cast<size_t>(q)].kind == Geo::none) continue;
          const int a = uf.find(d), b = uf.find(q);
          if (a == b) continue;
          const Geometry g = merged(geo[static_cast<size_t>(a)], geo[static_cast<size_t>(b)]);
          if (g.kind == Geo::none || !valid(a, b, g) || !safe_to_merge(a, b)) continue;
          uf.unite(a, b);
          geo[static_cast<size_t>(uf.find(a))] = g;
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
  // Each group's kind; a loop group without successors is a sink.
  std::vector<GroupKind> kind(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    const int d0 = members[static_cast<size_t>(g)][0];
    const Geometry& gg = geo[static_cast<size_t>(uf.find(d0))];
    const Op op0 = p.eqns[static_cast<size_t>(d0)].op;
    kind[static_cast<size_t>(g)] = gg.kind == Geo::gemm            ? GroupKind::gemm
                                   : view[static_cast<size_t>(d0)] ? GroupKind::free
                                   : loops && scatter_group_eqn(p, p.eqns[static_cast<size_t>(d0)]) ? GroupKind::scatter
                                   : !loops || gg.kind == Geo::none ? (is_free(op0) ? GroupKind::free : GroupKind::single)
                                   : gg.kind == Geo::loop         ? GroupKind::loop
                                   : gg.kind == Geo::row          ? GroupKind::row
                                                                  : GroupKind::col;
  }
  auto is_sink = [&](int g) { return fused_kind(kind[static_cast<size_t>(g)]) && succ[static_cast<size_t>(g)].empty(); };
  // A topological order (earliest first member first among the ready groups).
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
  // Waves (fused programs only): a group's level is the number of launching
  // groups on the longest path to it; the sinks (nothing waits for them: the
  // parameter updates) share the last level where the target says so
  // (Target::sinks_last). Groups of one level are independent, so the
  // generated kernels among them run as one launch.
  std::vector<int> level(static_cast<size_t>(G), 0);
  if (loops && static_cast<int>(order.size()) == G) {
    int top = 0;
    for (int g : order) {
      const int next = level[static_cast<size_t>(g)] + (kind[static_cast<size_t>(g)] == GroupKind::free ? 0 : 1);
      for (int s : succ[static_cast<size_t>(g)]) level[static_cast<size_t>(s)] = std::max(level[static_cast<size_t>(s)], next);
      top = std::max(top, next);
    }
    if (target.sinks_last)
      for (int g = 0; g < G; ++g)
        if (is_sink(g)) level[static_cast<size_t>(g)] = top;
    // A group that reads only the program's inputs and constants (a bf16
    // weight widened to f32, a mask from the targets), and a view of what
    // such a group makes, is at a low level by the longest path however late
    // it is read: what it makes would be made in an early wave and held
    // until then. Such groups go to the latest level that still precedes
    // every reader, so that what they make lives only as long as it is
    // needed. Moving them holds nothing longer: what they read is the
    // caller's, a constant, or (for a view) made by a group moved with it.
    // Groups that read values made in the step stay at their longest path's
    // level (a weight gradient moved later would hold the activations it
    // reads longer).
    std::vector<char> costless(static_cast<size_t>(G), 0), movable(static_cast<size_t>(G), 0);
    for (int g : order) {   // topological: the groups a group reads are decided before it
      const bool free_group = kind[static_cast<size_t>(g)] == GroupKind::free;
      bool holds_nothing = free_group, moves = true;
      for (int d : members[static_cast<size_t>(g)])
        for (int x : p.eqns[static_cast<size_t>(d)].inputs) {
          const int q = producer[static_cast<size_t>(x)];
          if (q < 0) continue;
          const int h = gid[static_cast<size_t>(q)];
          if (h == g || costless[static_cast<size_t>(h)]) continue;
          holds_nothing = false;
          if (!(free_group && movable[static_cast<size_t>(h)])) moves = false;
        }
      costless[static_cast<size_t>(g)] = holds_nothing;
      movable[static_cast<size_t>(g)] = moves;
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int g = *it;
      if (!movable[static_cast<size_t>(g)] || is_sink(g) || succ[static_cast<size_t>(g)].empty()) continue;
      const int inc = kind[static_cast<size_t>(g)] == GroupKind::free ? 0 : 1;
      int latest = top;
      for (int s : succ[static_cast<size_t>(g)]) latest = std::min(latest, level[static_cast<size_t>(s)] - inc);
      level[static_cast<size_t>(g)] = std::max(level[static_cast<size_t>(g)], latest);
    }
    // within a level: views and constants, then library calls, then the generated kernels
    auto rank = [&](int g) {
      const GroupKind k = kind[static_cast<size_t>(g)];
      return k == GroupKind::free ? 0 : fused_kind(k) ? 2 : 1;
    };
    std::vector<int> pos(static_cast<size_t>(G));
    for (size_t i = 0; i < order.size(); ++i) pos[static_cast<size_t>(order[i])] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (level[static_cast<size_t>(a)] != level[static_cast<size_t>(b)]) return level[static_cast<size_t>(a)] < level[static_cast<size_t>(b)];
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
    });
  }
  if (static_cast<int>(order.size()) != G)
    throw Error("fuse_program: the fusion groups of program \"" + p.name + "\" form a cycle (a bug in the grouping)");

  Fused f;
  f.program = p;
  f.program.eqns.clear();
  int last_level = -1;
  for (int g : order) {
    Group gr;
    const std::vector<int>& ms = members[static_cast<size_t>(g)];
    gr.first = static_cast<int>(f.program.eqns.size());
    gr.last = gr.first + static_cast<int>(ms.size()) - 1;
    gr.kind = kind[static_cast<size_t>(g)];
    gr.sink = is_sink(g);
    if (loops && fused_kind(gr.kind)) {  // the wave: consecutive generated groups of one level
      const bool join = !f.groups.empty() && f.groups.back().wave >= 0 && level[static_cast<size_t>(g)] == last_level;
      gr.wave = join ? f.groups.back().wave : static_cast<int>(f.waves.size());
      if (!join) f.waves.emplace_back();
      f.waves[static_cast<size_t>(gr.wave)].push_back(static_cast<int>(f.groups.size()));
    }
    last_level = level[static_cast<size_t>(g)];
    gr.numel = numel_of(ms[0]);
    if (gr.kind == GroupKind::row || gr.kind == GroupKind::col) {
      const Geometry& gg = geo[static_cast<size_t>(uf.find(ms[0]))];
      gr.numel = gg.n;
      gr.rows = gr.kind == GroupKind::row ? gg.small : gg.n / gg.small;
      gr.cols = gr.kind == GroupKind::row ? gg.n / gg.small : gg.small;
    }
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
      f.view.push_back(view[static_cast<size_t>(d)] || library_view[static_cast<size_t>(d)]);
      f.group_of.push_back(static_cast<int>(f.groups.size()));
    }
    f.groups.push_back(std::move(gr));
  }
  // A library GEMM's view transpose is a group of its own (its readers join
  // no group and its operand is made outside it): a backend that runs no step
  // for it relies on that, so a grouping that ever breaks it fails here.
  for (size_t d = 0; d < f.program.eqns.size(); ++d)
    if (library_view[static_cast<size_t>(f.old_index[d])] && f.groups[static_cast<size_t>(f.group_of[d])].size() != 1)
      throw Error("fuse_program: equation " + std::to_string(f.old_index[d]) + " (transpose) of program \"" + p.name +
                  "\", read in place by library GEMMs, was grouped with others (a bug in the grouping)");
  f.launches_before = 0;
  for (const Eqn& e : p.eqns) f.launches_before += !is_free(e.op);
  for (const Group& g : f.groups)
    f.launches_after += g.kind == GroupKind::single || (g.kind != GroupKind::free && !g.outputs.empty());
  return f;
}

bool is_full_member(const Program& p, const Group& g, int eqn) {
  return p.type(p.eqns[static_cast<size_t>(eqn)].out).numel() == g.numel;
}

std::string Fused::summary() const {
  int n_loop = 0, n_row = 0, n_col = 0, n_gemm = 0, n_sink = 0, fused_eqns = 0, biggest = 0;
  for (const Group& g : groups)
    if (fused_kind(g.kind)) {
      n_gemm += g.kind == GroupKind::gemm;
      n_loop += g.kind == GroupKind::loop;
      n_row += g.kind == GroupKind::row;
      n_col += g.kind == GroupKind::col;
      n_sink += g.sink;
      fused_eqns += g.size();
      biggest = std::max(biggest, g.size());
    }
  std::ostringstream s;
  s << program.eqns.size() << " equations: " << launches_before << " launches -> " << launches_after << " ("
    << n_loop << " loop groups, " << n_row << " row and " << n_col << " column reductions, " << n_gemm
    << " GEMMs, for " << fused_eqns << " equations, largest " << biggest << "; " << n_sink << " sinks; "
    << waves.size() << " waves)";
  return s.str();
}

bool fused_kind(GroupKind k) {
  return k == GroupKind::loop || k == GroupKind::row || k == GroupKind::col || k == GroupKind::gemm ||
         k == GroupKind::scatter;
}

bool scatter_group_eqn(const Program& p, const Eqn& e) {
  if (e.op != Op::scatter_add_rows) return false;
  const DType t = p.type(e.out).dtype;
  if (t != DType::f32 && t != DType::f64 && t != DType::i32 && t != DType::bf16) return false;
  const int64_t n = p.type(e.out).numel(), r = p.type(e.inputs[1]).numel();
  return n > 0 && r >= 0 && (r == 0 || n <= kMaxScatterWork / r);
}

std::vector<std::pair<int, int>> group_spans(const Fused& f) {
  // the groups of a wave run as one kernel: one span from its first equation to its last
  std::vector<std::pair<int, int>> s(f.program.eqns.size());
  for (size_t d = 0; d < s.size(); ++d) {
    const Group& g = f.groups[static_cast<size_t>(f.group_of[d])];
    if (g.wave >= 0) {
      const std::vector<int>& w = f.waves[static_cast<size_t>(g.wave)];
      s[d] = {f.groups[static_cast<size_t>(w.front())].first, f.groups[static_cast<size_t>(w.back())].last};
    } else {
      s[d] = {static_cast<int>(d), static_cast<int>(d)};
    }
  }
  return s;
}

std::vector<char> internal_values(const Fused& f) {
  std::vector<char> v(static_cast<size_t>(f.program.num_values()), 0);
  for (const Group& g : f.groups) {
    if (!fused_kind(g.kind)) continue;
    for (int d = g.first; d <= g.last; ++d) v[static_cast<size_t>(f.program.eqns[static_cast<size_t>(d)].out)] = 1;
    for (int x : g.outputs) v[static_cast<size_t>(x)] = 0;
  }
  return v;
}

}  // namespace capstep::plan
