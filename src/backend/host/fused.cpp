// Fused host execution (fused.h): a loop, row or col group run tile by tile.
// See kernels_layout.cpp: lets the NaN-propagating max vectorise.
#pragma GCC optimize("no-trapping-math")

#include "backend/host/fused.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "backend/host/memory_plan.h"
#include "backend/host/parallel.h"
#include "backend/host/reduce_combine.h"
#include "ir/scalar_math.h"
#include "backend/host/adamw_kernel.h"

namespace capstep::host {
namespace {

using plan::GroupKind;
using plan::row_broadcast;

size_t align_up(size_t n) { return (n + 63) / 64 * 64; }

bool suffix_axes(const std::vector<int64_t>& dims, int rank) {
  const int k = static_cast<int>(dims.size());
  for (int j = 0; j < k; ++j)
    if (dims[static_cast<size_t>(j)] != rank - k + j) return false;
  return k > 0;
}
bool prefix_axes(const std::vector<int64_t>& dims) {
  for (size_t j = 0; j < dims.size(); ++j)
    if (dims[j] != static_cast<int64_t>(j)) return false;
  return !dims.empty();
}

// dst[r * C + j] = src[r] for rows [0, rows).
template <class E>
void row_fill(const E* __restrict src, int64_t rows, int64_t C, E* __restrict dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const E x = src[r];
    for (int64_t j = 0; j < C; ++j) dst[j] = x;
    dst += C;
  }
}

void row_fill_bytes(size_t esz, const void* src, int64_t rows, int64_t C, void* dst) {
  switch (esz) {
    case 1: row_fill(static_cast<const uint8_t*>(src), rows, C, static_cast<uint8_t*>(dst)); return;
    case 2: row_fill(static_cast<const uint16_t*>(src), rows, C, static_cast<uint16_t*>(dst)); return;
    case 4: row_fill(static_cast<const uint32_t*>(src), rows, C, static_cast<uint32_t*>(dst)); return;
    case 8: row_fill(static_cast<const uint64_t*>(src), rows, C, static_cast<uint64_t*>(dst)); return;
  }
}

// out[j] (K of them) combined with rows [0, rows) of in; first: out starts at the identity.
template <class T, bool Max>
CAPSTEP_HOST_CLONES void col_accumulate(const void* vin, void* vout, int64_t rows, int64_t K, bool first) {
  const T* __restrict in = static_cast<const T*>(vin);
  T* __restrict out = static_cast<T*>(vout);
  if (first)
    for (int64_t j = 0; j < K; ++j) out[j] = identity<T, Max>();
  for (int64_t i = 0; i < rows; ++i) {
    const T* __restrict row = in + i * K;
    for (int64_t j = 0; j < K; ++j) out[j] = combine<T, Max>(out[j], row[j]);
  }
}

void col_accumulate_typed(DType t, bool max, const void* in, void* out, int64_t rows, int64_t K, bool first) {
  switch (t) {
    case DType::f32:
      return max ? col_accumulate<float, true>(in, out, rows, K, first) : col_accumulate<float, false>(in, out, rows, K, first);
    case DType::f64:
      return max ? col_accumulate<double, true>(in, out, rows, K, first)
                 : col_accumulate<double, false>(in, out, rows, K, first);
    case DType::i32:
      return max ? col_accumulate<int32_t, true>(in, out, rows, K, first)
                 : col_accumulate<int32_t, false>(in, out, rows, K, first);
    default:
      return;  // refused by host_fusable
  }
}

inline char* operand_ptr(const FusedOperand& o, void* const* slots, char* scratch, int64_t full_begin,
                         int64_t small_begin) {
  if (o.tile_off >= 0) return scratch + o.tile_off;
  if (o.splat) return static_cast<char*>(slots[o.value]);  // the first elements stay in the cache
  return static_cast<char*>(slots[o.value]) + (o.small ? small_begin : full_begin) * static_cast<int64_t>(o.esz);
}

// The Step a kernel or row reduction member runs on part `part` (each part
// sets its own element count).
Step& part_step(FusedMember& m, int part) {
  return part == 0 ? m.step : m.part_steps[static_cast<size_t>(part - 1)];
}

// A kernel member on the tile's elements from `off` on: [fb + off, fb + fc)
// of the N domain, or [sb + off, sb + sc) of the small one (off > 0: the tail
// of a JitSegment's, all on the N domain).
void run_kernel_from(FusedMember& m, int part, char* scr, void* const* slots, int64_t fb, int64_t fc, int64_t sb,
                     int64_t sc, int64_t off) {
  Step& st = part_step(m, part);
  void* q[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int k = 0; k < m.nin; ++k) {
    char* at = operand_ptr(m.in[k], slots, scr, fb, sb);
    q[k] = m.in[k].splat ? at : at + off * static_cast<int64_t>(m.in[k].esz);
  }
  q[3] = operand_ptr(m.out, slots, scr, fb, sb) + off * static_cast<int64_t>(m.out.esz);
  st.n = (m.small ? sc : fc) - off;
  st.fn(st, q);
}

// One member on one tile of one part (its scratch scr): elements [fb, fb + fc)
// of the N domain, [sb, sb + sc) of the small one.
void run_member(FusedMember& m, int part, char* scr, void* const* slots, int64_t fb, int64_t fc, int64_t sb,
                int64_t sc) {
  switch (m.kind) {
    case FusedMember::Kind::kernel:
      return run_kernel_from(m, part, scr, slots, fb, fc, sb, sc, 0);
    case FusedMember::Kind::strided:
      strided_range_bytes(m.view, m.out.esz, slots[m.in[0].value], m.small ? sb : fb, m.small ? sc : fc,
                          operand_ptr(m.out, slots, scr, fb, sb));
      return;
    case FusedMember::Kind::row_bcast:
      row_fill_bytes(m.out.esz, operand_ptr(m.in[0], slots, scr, fb, sb), sc, m.cols,
                     operand_ptr(m.out, slots, scr, fb, sb));
      return;
    case FusedMember::Kind::reduce_row: {
      Step& st = part_step(m, part);
      void* q[4] = {operand_ptr(m.in[0], slots, scr, fb, sb), nullptr, nullptr, operand_ptr(m.out, slots, scr, fb, sb)};
      st.n = sc;
      st.n_in = fc;
      st.fn(st, q);
      return;
    }
    case FusedMember::Kind::reduce_col:
      col_accumulate_typed(m.dtype, m.max, operand_ptr(m.in[0], slots, scr, fb, 0),
                           operand_ptr(m.out, slots, scr, fb, 0), fc / m.cols, m.cols, fb == 0);
      return;
    case FusedMember::Kind::jit: {
      JitSegment& J = *m.jit;
      void* ptrs[kMaxJitPtrs];
      for (size_t k = 0; k < J.ptrs.size(); ++k)
        ptrs[k] = J.base[k] ? slots[J.ptrs[k].value] : operand_ptr(J.ptrs[k], slots, scr, fb, sb);
      const int64_t n8 = fc & ~int64_t{7};
      J.code->fn(ptrs, n8);
      if (n8 < fc)  // the last elements of the tile: the members, one by one
        for (FusedMember& k : J.members) run_kernel_from(k, part, scr, slots, fb, fc, sb, sc, n8);
      return;
    }
  }
}

}  // namespace

bool host_fusable(const Program& p, const plan::Group& g, const std::vector<Step>& member_steps, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (g.kind != GroupKind::loop && g.kind != GroupKind::row && g.kind != GroupKind::col)
    return no(std::string(plan::group_kind_name(g.kind)) + " group");
  const int64_t N = g.numel;
  const int64_t small = g.kind == GroupKind::row ? g.rows : g.kind == GroupKind::col ? g.cols : -1;
  if (N <= 0) return no("no elements");
  if (g.kind == GroupKind::row && (g.rows <= 0 || g.cols <= 0 || g.rows * g.cols != N)) return no("row geometry");
  if (g.kind == GroupKind::col && (g.rows <= 0 || g.cols <= 0 || g.rows * g.cols != N)) return no("col geometry");
  // One kept element: the unfused reduce sees one run of R elements (its view
  // drops the axis of 1) and sums it in eight partials, not row by row.
  if (g.kind == GroupKind::col && g.cols == 1) return no("a column group of one column");
  std::vector<char> mine(static_cast<size_t>(p.num_values()), 0);
  for (int d = g.first; d <= g.last; ++d) mine[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = 1;
  for (int d = g.first; d <= g.last; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    const Step& st = member_steps[static_cast<size_t>(d - g.first)];
    const int64_t n_out = p.type(e.out).numel();
    if (n_out != N && n_out != small) return no("a member of " + std::to_string(n_out) + " elements");
    if (e.inputs.size() > 3) return no("more than 3 operands");
    // (every dtype's width, 1, 2, 4 or 8 bytes, is one the tile copies move:
    // strided_range_bytes, row_fill_bytes)
    if (is_elementwise(e.op)) continue;
    switch (op_fuse(e.op)) {
      case OpFuse::strided: {  // broadcast_in_dim, transpose
        if (!st.fn || !mine[static_cast<size_t>(e.inputs[0])]) continue;  // an alias, or a strided read from outside
        const int64_t n_in = p.type(e.inputs[0]).numel();
        if (e.op == Op::broadcast_in_dim && g.kind == GroupKind::row && n_in == g.rows && n_out == N &&
            row_broadcast(p, e))
          continue;
        return no("reads a member's value at other indices");
      }
      case OpFuse::reduce: {  // reduce_sum, reduce_max
        const Type& in = p.type(e.inputs[0]);
        if (in.dtype != DType::f32 && in.dtype != DType::f64 && in.dtype != DType::i32) return no("reduce dtype");
        if (in.numel() != N || n_out != small) return no("reduce geometry");
        const bool ok = g.kind == GroupKind::row ? suffix_axes(e.attrs.dims, static_cast<int>(in.shape.size()))
                                                 : prefix_axes(e.attrs.dims);
        if (!ok) return no("reduce axes");
        continue;
      }
      case OpFuse::none: case OpFuse::free: case OpFuse::elementwise: case OpFuse::gather: case OpFuse::gemm:
        return no(std::string(op_name(e.op)) + " in a group");
    }
  }
  return true;
}

bool match_adamw_group(const Program& p, const plan::Group& g, const std::vector<plan::ValuePlan>& values,
                       const std::vector<ExpandedAdamW>& updates, AdamWShortcut& a) {
  if (g.kind != GroupKind::loop || g.adamw < 0) return false;
  const ExpandedAdamW& x = updates[static_cast<size_t>(g.adamw)];
  if (x.p_out < 0 || x.m_out < 0 || x.v_out < 0 || x.b1 < 0 || x.c1 < 0 || x.b2 < 0 || x.c2 < 0 || x.eps < 0)
    return false;
  const int grad = plan::adamw_gradient(p, g, x);
  for (int v : {x.p, grad, x.m, x.v, x.p_out, x.m_out, x.v_out})
    if (p.type(v).dtype != DType::f32 || p.type(v).numel() != g.numel) return false;
  // Only the three results leave the group: they live in buffers of their
  // own, everything else it makes (constants aside) in its tiles.
  for (int d = g.first; d <= g.last; ++d) {
    const int out = p.eqns[static_cast<size_t>(d)].out;
    const bool result = out == x.p_out || out == x.m_out || out == x.v_out;
    const plan::ValuePlan& r = values[static_cast<size_t>(values[static_cast<size_t>(out)].root)];
    const bool resident = r.home == plan::Home::tile;
    if (result == resident && p.eqns[static_cast<size_t>(d)].op != Op::constant) return false;
  }
  a.p = x.p, a.g = grad, a.m = x.m, a.v = x.v;
  a.round_g = g.adamw_rounds_g;
  a.p_out = x.p_out, a.m_out = x.m_out, a.v_out = x.v_out;
  a.b1 = x.b1, a.c1 = x.c1, a.b2 = x.b2, a.c2 = x.c2, a.eps = x.eps;
  a.lr = x.lr, a.bc1 = x.bc1, a.bc2 = x.bc2, a.decay = x.decay;
  a.on = true;
  return true;
}

namespace {

// A member a JitSegment can take: a kernel on the N domain whose op
// loop_jit compiles, on f32 or bf16 values (not a splat bf16 one), all of
// one of the two but for a convert from one to the other.
bool jit_member(const FusedMember& m) {
  if (m.kind != FusedMember::Kind::kernel || m.small || m.after || m.hoisted) return false;
  const int arity = jit_operands(m.op);
  if (arity == 0 || m.nin != arity) return false;
  auto f32_or_bf16 = [](const FusedOperand& o) {
    return !o.small && (o.dtype == DType::f32 || (o.dtype == DType::bf16 && !o.splat));
  };
  if (!f32_or_bf16(m.out)) return false;
  for (int k = 0; k < m.nin; ++k)
    if (!f32_or_bf16(m.in[k]) || (m.op != Op::convert && m.in[k].dtype != m.out.dtype)) return false;
  return true;
}

// A broadcast member a row group's JitSegment can read in place: 0 (none),
// 'r' (a value per row along the row) or 'c' (a row's worth, from a buffer
// outside the group, down the rows).
char jit_bcast(const FusedGroup& G, const FusedMember& m) {
  if (G.kind != GroupKind::row || G.cols % 8 != 0 || m.hoisted || m.dtype != DType::f32 || m.out.esz != 4 ||
      m.in[0].esz != 4)
    return 0;
  if (m.kind == FusedMember::Kind::row_bcast) return 'r';
  const Walk& v = m.view;
  if (m.kind == FusedMember::Kind::strided && m.in[0].tile_off < 0 && !m.in[0].splat && v.rank == 2 &&
      v.stride[0] == 0 && v.stride[1] == 1 && v.size[1] == G.cols)
    return 'c';
  return 0;
}

// Members [b, e) of ms as one compiled loop, or nullptr (jit_compile's
// reasons: too many live values or pointers for the registers).
std::shared_ptr<JitSegment> make_segment(const FusedGroup& G, const std::vector<FusedMember>& ms, size_t b,
                                         size_t e) {
  auto seg = std::make_shared<JitSegment>();
  JitLoop loop;
  std::map<int, int> ptr_of;  // root -> pointer (col inputs' bases: -2 - root)
  auto ptr_for = [&](const FusedOperand& o, bool base = false) {
    auto [it, fresh] = ptr_of.try_emplace(base ? -2 - o.root : o.root, static_cast<int>(seg->ptrs.size()));
    if (fresh) {
      seg->ptrs.push_back(o);
      seg->base.push_back(base ? 1 : 0);
    }
    return it->second;
  };
  auto read_after = [&](int root) {
    for (size_t j = e; j < ms.size(); ++j)
      for (int k = 0; k < ms[j].nin; ++k)
        if (ms[j].in[k].root == root) return true;
    return false;
  };
  // Inputs: the roots read before (or without) being made here, and the broadcasts.
  std::map<int, int> value_of;  // root -> loop value
  std::set<int> made;
  for (size_t i = b; i < e; ++i) {
    const FusedMember& m = ms[i];
    if (const char c = jit_bcast(G, m)) {  // its value an input, read in place
      const JitLoop::Input in{ptr_for(m.in[0], c == 'c'), c == 'c' ? JitLoop::Kind::col : JitLoop::Kind::row};
      int v = -1;  // the same source broadcast twice: one input
      for (size_t k = 0; k < loop.inputs.size(); ++k)
        if (loop.inputs[k].ptr == in.ptr && loop.inputs[k].kind == in.kind) v = static_cast<int>(k);
      if (v < 0) {
        v = static_cast<int>(loop.inputs.size());
        loop.inputs.push_back(in);
      }
      value_of[m.out.root] = v;
      loop.row_bytes = G.cols * 4;
      made.insert(m.out.root);
      continue;
    }
    for (int k = 0; k < m.nin; ++k)
      if (!made.count(m.in[k].root) && !value_of.count(m.in[k].root)) {
        value_of[m.in[k].root] = static_cast<int>(loop.inputs.size());
        loop.inputs.push_back({ptr_for(m.in[k]), m.in[k].splat ? JitLoop::Kind::splat : JitLoop::Kind::full,
                               m.in[k].dtype == DType::bf16});
      }
    made.insert(m.out.root);
  }
  const int nin = static_cast<int>(loop.inputs.size());
  for (size_t i = b; i < e; ++i) {
    const FusedMember& m = ms[i];
    const bool stored = m.out.tile_off < 0 || read_after(m.out.root);
    JitLoop::Inst inst;
    if (jit_bcast(G, m)) {
      if (!stored) continue;
      inst.op = Op::broadcast_in_dim;  // kept too (the backward pass reads it): a copy, stored here
      inst.a = value_of.at(m.out.root);
    } else {
      inst.op = m.op;
      inst.a = value_of.at(m.in[0].root);
      if (m.nin == 2) inst.b = value_of.at(m.in[1].root);
      inst.bf16 = m.out.dtype == DType::bf16;
    }
    const int v = nin + static_cast<int>(loop.insts.size());
    value_of[m.out.root] = v;
    loop.insts.push_back(inst);
    // Stored when it is kept outside the group, or a later member reads it.
    if (stored) loop.stores.push_back({v, ptr_for(m.out), m.out.dtype == DType::bf16});
  }
  loop.num_ptrs = static_cast<int>(seg->ptrs.size());
  if (seg->ptrs.size() > kMaxJitPtrs || loop.insts.empty()) return nullptr;
  // The loop (and the members after it on the tile's last elements) runs the
  // members' work in another order than they do, element by element. The
  // scratch holds each tile value only for its members (memory_plan.h packs
  // them by the members' order), so two of its tiles here may share bytes;
  // at the same offset with the same element width they share elements index
  // for index, which that order keeps apart, but at different offsets (tiles
  // of another size, an f64 value's, packed between) or widths (an f32 tile
  // and a bf16 one) a store to one may come before the last read of the
  // other: refused.
  {
    const int64_t tile_elems = G.kind == GroupKind::loop ? G.tile : G.tile * G.cols;
    struct Tile {
      int64_t off;
      int root;
      size_t esz;
    };
    std::vector<Tile> tiles;
    for (size_t i = b; i < e; ++i) {
      const FusedMember& m = ms[i];
      for (int k = 0; k < m.nin; ++k)
        if (m.in[k].tile_off >= 0 && !m.in[k].small && !m.in[k].splat)
          tiles.push_back({m.in[k].tile_off, m.in[k].root, m.in[k].esz});
      if (m.out.tile_off >= 0 && !m.out.small) tiles.push_back({m.out.tile_off, m.out.root, m.out.esz});
    }
    for (size_t x = 0; x < tiles.size(); ++x)
      for (size_t y = x + 1; y < tiles.size(); ++y) {
        const Tile &s = tiles[x], &t = tiles[y];
        const int64_t s_end = s.off + tile_elems * static_cast<int64_t>(s.esz);
        const int64_t t_end = t.off + tile_elems * static_cast<int64_t>(t.esz);
        if (s.root != t.root && !(s.off == t.off && s.esz == t.esz) && s.off < t_end && t.off < s_end) return nullptr;
      }
  }
  // The members read a row value's tile before they store into a tile that
  // may share its scratch (memory_plan.h packs tiles by the members' order);
  // the loop reads row r's value after storing rows 0 to r - 1: refused
  // where the two overlap.
  for (const JitLoop::Input& in : loop.inputs) {
    const FusedOperand& o = seg->ptrs[static_cast<size_t>(in.ptr)];
    if (in.kind != JitLoop::Kind::row || o.tile_off < 0) continue;
    for (const JitLoop::Store& st : loop.stores) {
      const FusedOperand& d = seg->ptrs[static_cast<size_t>(st.ptr)];
      if (d.tile_off >= 0 && d.tile_off < o.tile_off + G.tile * 4 &&
          o.tile_off < d.tile_off + G.tile * G.cols * static_cast<int64_t>(d.esz))
        return nullptr;
    }
  }
  seg->code = jit_compile(loop);
  if (!seg->code) return nullptr;
  seg->members.assign(ms.begin() + static_cast<std::ptrdiff_t>(b), ms.begin() + static_cast<std::ptrdiff_t>(e));
  return seg;
}

// Replaces each run of two or more jit_members (and broadcasts, jit_bcast)
// by the longest leading part of it that compiles (JitSegment), and so on
// along the run.
void compile_runs(FusedGroup& G) {
  // A run is tried at this many members at most, then shorter until it
  // compiles: each try compiles the whole run, so a long chain's planning
  // would grow with the square of its length.
  constexpr size_t kMaxRun = 48;
  std::vector<FusedMember> out;
  const size_t n = G.members.size();
  for (size_t i = 0; i < n;) {
    size_t e = i;
    while (e < n && e - i < kMaxRun && (jit_member(G.members[e]) || jit_bcast(G, G.members[e]))) ++e;
    std::shared_ptr<JitSegment> seg;
    size_t end = e;
    for (; end >= i + 2; --end)
      if ((seg = make_segment(G, G.members, i, end))) break;
    if (!seg) {
      out.push_back(std::move(G.members[i]));
      ++i;
      continue;
    }
    FusedMember jm;
    jm.kind = FusedMember::Kind::jit;
    jm.jit = std::move(seg);
    out.push_back(std::move(jm));
    ++G.jit_loops;
    i = end;
  }
  G.members = std::move(out);
}

}  // namespace

int64_t group_tile(const plan::Group& g, int64_t tile_elems) {
  tile_elems = std::max<int64_t>(1, tile_elems);  // never more than the group holds (the scratch is sized by it)
  return g.kind == GroupKind::loop ? std::min(tile_elems, g.numel)
                                   : std::min(g.rows, std::max<int64_t>(1, tile_elems / g.cols));
}

int64_t splat_read_elems(const plan::Group& g, int64_t tile_elems, bool small) {
  const int64_t t = group_tile(g, tile_elems);
  if (!small) return g.kind == GroupKind::loop ? t : t * g.cols;
  return g.kind == GroupKind::row ? t : g.cols;
}

FusedGroup build_fused_group(const FusedGroupSource& src) {
  const Program& p = src.program;
  const plan::Group& g = src.group;
  const std::vector<Step>& member_steps = src.member_steps;
  const std::vector<plan::ValuePlan>& values = src.values;
  auto root = [&](int v) { return values[static_cast<size_t>(v)].root; };
  auto tile_resident = [&](int r) { return values[static_cast<size_t>(r)].home == plan::Home::tile; };
  const std::vector<char>& splat = src.splat;
  const std::vector<ExpandedAdamW>& adamw = src.adamw;
  const int64_t tile_elems = src.options.tile_elems;
  const int max_parts = src.options.max_parts;
  const bool jit = src.options.jit;
  FusedGroup G;
  G.kind = g.kind;
  G.numel = g.numel;
  G.rows = g.rows;
  G.cols = g.cols;
  G.tile = group_tile(g, tile_elems);
  const int64_t full_tile = g.kind == GroupKind::loop ? G.tile : G.tile * g.cols;
  const int64_t small_tile = g.kind == GroupKind::row ? G.tile : 0;
  // A broadcast of one value (an AdamW scalar, say) into a tile value: the
  // same at every position, so filled once before the tiles, and its tile
  // kept for the whole group.
  auto hoist = [&](int d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    return e.op == Op::broadcast_in_dim && member_steps[static_cast<size_t>(d - g.first)].fn &&
           p.type(e.inputs[0]).numel() == 1 && tile_resident(root(e.out));
  };
  // The tile values' scratch: packed by their lifetimes among the members
  // (memory_plan.h), so that a long group needs only a few tiles at a time and
  // they stay in the L1 cache. Each is 5 cache lines longer than its tile:
  // tiles of 4 KiB would otherwise lie a multiple of 4 KiB apart, and a load
  // from one would wait on a store to another (4K aliasing).
  std::vector<int64_t> off(static_cast<size_t>(p.num_values()), -1);
  {
    std::vector<int> tile_roots;
    std::vector<BufferLife> lives;
    std::vector<int> life_of(static_cast<size_t>(p.num_values()), -1);
    std::vector<int> hoisted_roots;
    int member = 0;
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      if (!member_steps[static_cast<size_t>(d - g.first)].fn) continue;
      if (hoist(d)) hoisted_roots.push_back(root(e.out));
      std::vector<int> touched(e.inputs.begin(), e.inputs.end());
      touched.push_back(e.out);
      for (int v : touched) {
        const int r = root(v);
        if (!tile_resident(r)) continue;
        int& l = life_of[static_cast<size_t>(r)];
        if (l < 0) {
          l = static_cast<int>(lives.size());
          const bool small = p.type(r).numel() != g.numel;
          const size_t b = align_up(static_cast<size_t>(small ? small_tile : full_tile) * dtype_size(p.type(r).dtype));
          lives.push_back({b + 5 * 64, member, member});
          tile_roots.push_back(r);
        }
        lives[static_cast<size_t>(l)].first = std::min(lives[static_cast<size_t>(l)].first, member);
        lives[static_cast<size_t>(l)].last = std::max(lives[static_cast<size_t>(l)].last, member);
      }
      ++member;
    }
    for (int r : hoisted_roots) {  // filled before the first tile, read in every tile: live throughout
      lives[static_cast<size_t>(life_of[static_cast<size_t>(r)])].first = 0;
      lives[static_cast<size_t>(life_of[static_cast<size_t>(r)])].last = member;
    }
    const ArenaPlan plan = pack_arena(lives);
    for (size_t k = 0; k < tile_roots.size(); ++k) off[static_cast<size_t>(tile_roots[k])] = static_cast<int64_t>(plan.offset[k]);
    G.scratch_bytes = plan.total;
  }
  auto operand = [&](int v) {
    FusedOperand o;
    o.value = v;
    o.esz = dtype_size(p.type(v).dtype);
    o.dtype = p.type(v).dtype;
    o.small = p.type(v).numel() != g.numel;
    const size_t r = static_cast<size_t>(root(v));
    o.root = static_cast<int>(r);
    o.splat = splat[r] != 0;
    if (tile_resident(o.root)) o.tile_off = off[r];
    return o;
  };
  for (int d = g.first; d <= g.last; ++d) {
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    const Step& st = member_steps[static_cast<size_t>(d - g.first)];
    if (!st.fn) continue;  // an alias: no work
    FusedMember m;
    m.out = operand(e.out);
    m.small = m.out.small;
    m.nin = static_cast<int>(e.inputs.size());
    for (int k = 0; k < m.nin; ++k) m.in[k] = operand(e.inputs[static_cast<size_t>(k)]);
    m.dtype = p.type(e.out).dtype;
    m.op = e.op;
    switch (op_fuse(e.op)) {
      case OpFuse::strided:  // broadcast_in_dim, transpose
        if (e.op == Op::broadcast_in_dim && g.kind == GroupKind::row && p.type(e.inputs[0]).numel() == g.rows &&
            p.type(e.out).numel() == g.numel && row_broadcast(p, e)) {
          m.kind = FusedMember::Kind::row_bcast;
          m.cols = g.cols;
        } else {
          m.kind = FusedMember::Kind::strided;
          m.view = st.view;
        }
        break;
      case OpFuse::reduce:  // reduce_sum, reduce_max
        m.max = e.op == Op::reduce_max;
        m.cols = g.cols;
        if (g.kind == GroupKind::row) {
          m.kind = FusedMember::Kind::reduce_row;
          m.step = st;
          m.step.in[0] = 0;
          m.step.out = 3;
          Walk v;  // R rows of C: output stride 1 per row, 0 along the row
          v.rank = 2;
          v.size[0] = g.rows;
          v.size[1] = g.cols;
          v.stride[0] = 1;
          v.stride[1] = 0;
          m.step.view = v;
        } else {
          m.kind = FusedMember::Kind::reduce_col;
        }
        break;
      case OpFuse::none: case OpFuse::free: case OpFuse::elementwise: case OpFuse::gather: case OpFuse::gemm:
        m.kind = FusedMember::Kind::kernel;
        m.step = st;
        m.step.in[0] = 0;
        m.step.in[1] = 1;
        m.step.in[2] = 2;
        m.step.out = 3;
        m.after = g.kind == GroupKind::col && m.small;
        break;
    }
    if (m.kind == FusedMember::Kind::strided) {
      m.after = g.kind == GroupKind::col && m.small;
      if (hoist(d)) {
        m.hoisted = true;
        m.fill = m.small ? small_tile : full_tile;
      }
    }
    G.members.push_back(std::move(m));
  }
  // Parts: each at least kMinWork member-elements (a part's start costs
  // about a microsecond; a member-element a nanosecond or less); col groups one.
  constexpr int64_t kMinWork = 16384;
  if (g.kind == GroupKind::loop || g.kind == GroupKind::row) {
    const int64_t units = g.kind == GroupKind::loop ? g.numel : g.rows;
    const int64_t work = g.numel * static_cast<int64_t>(G.members.size());
    G.parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({max_parts, work / kMinWork, units})));
  }
  G.scratch_stride = align_up(G.scratch_bytes);
  for (FusedMember& m : G.members) m.part_steps.assign(static_cast<size_t>(G.parts - 1), m.step);
  if (jit && jit_available()) compile_runs(G);
  AdamWShortcut a;
  if (match_adamw_group(p, g, values, adamw, a)) G.adamw = a;
  return G;
}

namespace {

// Part `part` of a loop or row group (all of a col group): its range of tiles,
// on its own scratch.
void run_part(FusedGroup& g, int part, void* const* slots) {
  char* scr = g.scratch + static_cast<size_t>(part) * g.scratch_stride;
  const int64_t N = g.numel, T = g.tile;
  for (FusedMember& m : g.members)
    if (m.hoisted) strided_range_bytes(m.view, m.out.esz, slots[m.in[0].value], 0, m.fill, scr + m.out.tile_off);
  switch (g.kind) {
    case GroupKind::row: {
      const int64_t C = g.cols;
      int64_t rb = 0, re = 0;
      part_range(g.rows, g.parts, part, 1, rb, re);
      for (int64_t r0 = rb; r0 < re; r0 += T) {
        const int64_t nr = std::min(T, re - r0);
        for (FusedMember& m : g.members)
          if (!m.hoisted) run_member(m, part, scr, slots, r0 * C, nr * C, r0, nr);
      }
      return;
    }
    case GroupKind::col: {
      const int64_t K = g.cols;
      for (int64_t i0 = 0; i0 < g.rows; i0 += T) {
        const int64_t nr = std::min(T, g.rows - i0);
        for (FusedMember& m : g.members)
          if (!m.after && !m.hoisted) run_member(m, 0, scr, slots, i0 * K, nr * K, 0, 0);
      }
      for (FusedMember& m : g.members)
        if (m.after) run_member(m, 0, scr, slots, 0, 0, 0, K);
      return;
    }
    default: {
      int64_t eb = 0, ee = 0;
      part_range(N, g.parts, part, T, eb, ee);
      for (int64_t b = eb; b < ee; b += T) {
        const int64_t c = std::min(T, ee - b);
        for (FusedMember& m : g.members)
          if (!m.hoisted) run_member(m, part, scr, slots, b, c, 0, 0);
      }
      return;
    }
  }
}

}  // namespace

namespace {

// AdamWShortcut: the group as the host AdamW kernel, in parts: from its
// inputs into its results (adamw_range_into) when no two of the seven buffers
// overlap (the interpreter's own layout); else in place on the results, each
// first a copy of its input unless it is that very buffer (lane 1f: p', m'
// and v' are written over p, m and v, Interpreter::outputs_in_place). Where
// the buffers overlap otherwise, false: the members run instead.
bool run_adamw(const FusedGroup& g, void* const* slots) {
  const AdamWShortcut& a = g.adamw;
  const int64_t n = g.numel;
  auto f = [&](int v) { return static_cast<float*>(slots[v]); };
  float *po = f(a.p_out), *mo = f(a.m_out), *vo = f(a.v_out);
  const float *pi = f(a.p), *gi = f(a.g), *mi = f(a.m), *vi = f(a.v);
  std::less<const float*> before;  // a total order, also across unrelated buffers
  auto apart = [&](const float* x, const float* y) { return !before(y, x + n) || !before(x, y + n); };
  auto same_or_apart = [&](const float* x, const float* y) { return x == y || apart(x, y); };
  const bool outs_apart = apart(po, mo) && apart(po, vo) && apart(mo, vo) && apart(po, gi) && apart(mo, gi) &&
                          apart(vo, gi) && apart(po, mi) && apart(po, vi) && apart(mo, pi) && apart(mo, vi) &&
                          apart(vo, pi) && apart(vo, mi);
  if (!outs_apart || !same_or_apart(po, pi) || !same_or_apart(mo, mi) || !same_or_apart(vo, vi)) return false;
  const bool into = apart(po, pi) && apart(mo, mi) && apart(vo, vi);
  auto first = [&](int v) { return *f(v); };
  const AdamWConstants k{first(a.b1), first(a.c1), first(a.b2), first(a.c2), first(a.eps)};
  const optim::AdamWScalars sc{first(a.lr), first(a.bc1), first(a.bc2), first(a.decay)};
  const int parts = adamw_parts(n);
  auto part_fn = [&](int i) {
    int64_t b = 0, e = 0;
    part_range(n, parts, i, 16, b, e);
    if (e <= b) return;
    if (into) return adamw_range_into(k, sc, pi + b, gi + b, mi + b, vi + b, po + b, mo + b, vo + b, e - b, a.round_g);
    const size_t bytes = static_cast<size_t>(e - b) * sizeof(float);
    if (po != pi) std::memcpy(po + b, pi + b, bytes);
    if (mo != mi) std::memcpy(mo + b, mi + b, bytes);
    if (vo != vi) std::memcpy(vo + b, vi + b, bytes);
    adamw_range(k, sc, po + b, gi + b, mo + b, vo + b, e - b, a.round_g);
  };
  if (parts <= 1) part_fn(0);
  else parallel_parts(parts, part_fn);
  return true;
}

}  // namespace

void run_fused_group(const Step& s, void* const* slots) {
  FusedGroup& g = *static_cast<FusedGroup*>(s.group);
  if (g.adamw.on && run_adamw(g, slots)) return;
  if (g.parts <= 1) return run_part(g, 0, slots);
  parallel_parts(g.parts, [&](int part) { run_part(g, part, slots); });
}

}  // namespace capstep::host
