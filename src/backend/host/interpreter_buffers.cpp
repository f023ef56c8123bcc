// Where the host Interpreter's values live: the memory plan (Impl::plan_buffers),
// the fused groups' members and tiles (make_fused_groups), the blocks and the
// slots that do not change from run to run (allocate_and_set_slots), and the
// outputs that may be written over an input (plan_outputs_over_inputs).
#include <algorithm>

#include "backend/host/interpreter_impl.h"
#include "backend/host/parallel.h"
#include "ir/bf16.h"

namespace capstep::host {
namespace {

template <class T>
void store_all(void* dst, int64_t n, const auto& value_at) {
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(value_at(i));
}

// Writes n values given as double into dst with dtype d (i1: nonzero -> 1).
void store_doubles(DType d, void* dst, int64_t n, const auto& value_at) {
  switch (d) {
    case DType::f32: store_all<float>(dst, n, value_at); return;
    case DType::f64: store_all<double>(dst, n, value_at); return;
    case DType::i32: store_all<int32_t>(dst, n, value_at); return;
    case DType::i1: store_all<uint8_t>(dst, n, [&](int64_t i) { return value_at(i) != 0.0 ? 1 : 0; }); return;
    case DType::bf16: store_all<uint16_t>(dst, n, [&](int64_t i) { return bf16::from_double(value_at(i)); }); return;
  }
}

// Its first n elements (a splat constant the statics hold only a tile of).
void fill_constant(const Attrs& a, const Type& t, int64_t n, void* dst) {
  const std::vector<double>& lit = a.literal;
  if (lit.size() == 1)
    store_doubles(t.dtype, dst, n, [&](int64_t) { return lit[0]; });
  else
    store_doubles(t.dtype, dst, n, [&](int64_t i) { return lit[static_cast<size_t>(i)]; });
}

void fill_iota(const Attrs& a, const Type& t, void* dst) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(a.axis) + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  const int64_t size = t.shape[static_cast<size_t>(a.axis)];
  store_doubles(t.dtype, dst, t.numel(), [&](int64_t i) { return static_cast<double>((i / inner) % size); });
}

// The operands [first, first + count) that an equation's kernel reads at the
// very element it writes, so that its result may be written over one of them
// (PlanOptions::in_place; in_place_takes); count 0: none. scatter_add_rows
// starts from a copy of its operand (none when it is the result's buffer) and
// then adds rows into the result: the cross-entropy's gradient over the
// logits' buffer.
struct InPlaceOperands {
  int first = 0, count = 0;
};
InPlaceOperands in_place_operands(Op op) {
  if (op_kind(op) == OpKind::binary) return {0, 2};
  if (op_kind(op) == OpKind::unary || op == Op::all_reduce || op == Op::scatter_add_rows) return {0, 1};
  if (op == Op::select) return {1, 2};
  return {};
}

// Whether fused group g reads buffer x only before, in the order its members
// run, it first writes buffer b, or in that very member, each member on its
// own tile's elements: kernels and row or column reductions of the tile,
// never a broadcast or a value filled once before the tiles. Members run:
// those filled once, then each tile's, then (col groups) those of K elements
// once after every tile; a K-element x that a col group's tiles read is read
// whole by every tile.
bool group_reads_before_writing(const FusedGroup& g, int x, int b, const Values& values) {
  auto rt = [&](const FusedOperand& o) { return of(values, o.value).root; };
  std::vector<const FusedMember*> order;
  for (const FusedMember& m : g.members)
    if (m.hoisted) order.push_back(&m);
  for (const FusedMember& m : g.members)
    if (m.kind == FusedMember::Kind::jit)  // its members in their order, at each element
      for (const FusedMember& k : m.jit->members) order.push_back(&k);
    else if (!m.hoisted && !m.after)
      order.push_back(&m);
  for (const FusedMember& m : g.members)
    if (!m.hoisted && m.after) order.push_back(&m);
  bool written = false;
  for (const FusedMember* m : order) {
    bool reads = false;
    for (int k = 0; k < m->nin; ++k)
      if (m->in[k].tile_off < 0 && rt(m->in[k]) == x) {
        reads = true;
        if (g.kind == plan::GroupKind::col && !m->after && m->in[k].small) return false;
      }
    if (reads && (written || m->hoisted ||
                  (m->kind != FusedMember::Kind::kernel && m->kind != FusedMember::Kind::reduce_row &&
                   m->kind != FusedMember::Kind::reduce_col)))
      return false;
    if (m->out.tile_off < 0 && rt(m->out) == b) written = true;
  }
  return true;
}

// Steps that may throw while a run is under way (an index out of range, a
// communicator's error): an output is written over an input only after the
// last of them, so that a run that fails leaves its input Arrays as they were.
// (The indices of a gather or scatter that are a program input or a constant
// are checked before the first step instead: Impl::index_checks.)
bool may_throw_at_run(Op op) { return op == Op::gather_rows || op == Op::scatter_add_rows || op == Op::all_reduce; }

// Whether output buffer b (a root, Home::output), first written by equation
// `first`, may be the very Array of the input value x: every step reading x
// (through any view) runs before that step, or the last reads are in that
// step and it reads each element of x before it writes that element of b
// (an op that in_place_operands lets write over an operand, or a fused group
// whose members read x before they write b; an all_reduce, also such an op,
// never gets here: it may throw, and b's first write comes after every step
// that may). An x passed through to an output is read after every step (last = ne):
// never.
bool in_place_takes(const Program& ex, int b, int first, int x, const Values& values,
                    const std::vector<std::pair<int, int>>& span, const std::vector<int>& in_group,
                    const std::vector<std::unique_ptr<FusedGroup>>& groups) {
  const int lx = of(values, x).last;
  const auto [s0, s1] = span[static_cast<size_t>(first)];
  if (lx < s0) return true;
  if (lx > s1) return false;
  const int g = in_group[static_cast<size_t>(first)];
  if (g >= 0) return group_reads_before_writing(*groups[static_cast<size_t>(g)], x, b, values);
  // One equation outside groups: a kernel that may write over x, x being
  // only among the operands it reads at the element it writes (elementwise:
  // any of them, of the result's element count; scatter_add_rows: its
  // operand alone, never its updates).
  const Eqn& e = ex.eqns[static_cast<size_t>(first)];
  const auto [k0, count] = in_place_operands(e.op);
  if (count == 0 || ex.type(e.out).bytes() != ex.type(x).bytes()) return false;
  int reads = 0;
  for (int k = 0; k < static_cast<int>(e.inputs.size()); ++k) {
    const int v = e.inputs[static_cast<size_t>(k)];
    if (of(values, v).root != x) continue;
    ++reads;
    if (k < k0 || k >= k0 + count || ex.type(v).numel() != ex.type(e.out).numel()) return false;
  }
  return is_elementwise(e.op) || reads <= 1;
}

}  // namespace

// Per value: a splat constant read only by fused groups' kernel and
// reduction members needs only the elements their tiles read from its start
// (splat_read_elems; a transpose or broadcast member reads it at other
// indices, an equation outside a group or an output reads it whole): that
// many (PlanOptions::static_elems), or 0 for all of them. A [8, 12, 1024,
// 1024] splat would otherwise take 384 MiB of the statics.
std::vector<int64_t> Interpreter::Impl::splat_static_elems(const Build& b) const {
  const Program& ex = ordered();
  std::vector<int64_t> need(static_cast<size_t>(b.nv), 0);
  auto splat = [&](int v) {
    const int d = b.def[static_cast<size_t>(v)];
    return d >= 0 && ex.eqns[static_cast<size_t>(d)].op == Op::constant && ex.eqns[static_cast<size_t>(d)].attrs.literal.size() == 1;
  };
  auto view = [&](int d) { return b.alias[static_cast<size_t>(d)] != 0; };  // reshapes among them
  auto root = [&](int v) {  // through the views that hold their operand's bytes
    for (int d = b.def[static_cast<size_t>(v)]; d >= 0 && view(d); d = b.def[static_cast<size_t>(v)])
      v = ex.eqns[static_cast<size_t>(d)].inputs[0];
    return v;
  };
  std::vector<char> whole(static_cast<size_t>(b.nv), 0);
  // A group that is one AdamW update may run as the AdamW kernel, which reads
  // the parameter, the gradient (or the value rounded to it) and the moments
  // whole (a gradient that is a splat zero, of a parameter the loss does not
  // read) and the constants' first element.
  for (const plan::Group* gr : b.group_src) {
    if (gr->adamw < 0) continue;
    const ExpandedAdamW& x = fusion->adamw[static_cast<size_t>(gr->adamw)];
    for (int v : {x.p, plan::adamw_gradient(ex, *gr, x), x.m, x.v}) whole[static_cast<size_t>(root(v))] = 1;
  }
  for (int i = 0; i < b.ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    if (view(i)) continue;  // its readers read the constant
    const int g = b.in_group[static_cast<size_t>(i)];
    const bool tile_read = g >= 0 && (is_elementwise(e.op) || op_fuse(e.op) == OpFuse::reduce);
    for (int x : e.inputs) {
      const int r = root(x);
      if (!splat(r)) continue;
      if (!tile_read) {
        whole[static_cast<size_t>(r)] = 1;
        continue;
      }
      const plan::Group& gr = *b.group_src[static_cast<size_t>(g)];
      const int64_t n = splat_read_elems(gr, options.tile_elems, ex.type(x).numel() != gr.numel);
      need[static_cast<size_t>(r)] = std::max(need[static_cast<size_t>(r)], n);
    }
  }
  for (const NamedValue& o : prog.outputs) whole[static_cast<size_t>(root(o.value))] = 1;
  for (int v = 0; v < b.nv; ++v)
    if (whole[static_cast<size_t>(v)]) need[static_cast<size_t>(v)] = 0;
  return need;
}

// The memory plan, by the planner of every backend (plan::plan_memory) with
// the host's options: 64-byte alignment; the steps' scratch; each fused
// group's and dot pair's equations one span; views (Build::alias); tiles: a
// group's values of its element count (or, in a row group, one per row) that
// nothing outside the group reads; elementwise results (and scatter_add_rows)
// in place over an operand of their dtype read for the last time (each
// element is read before the same element is written, so the loop stays
// correct: the elementwise kernels carry no __restrict for this reason), and
// a fused group's elementwise result over a buffer of its dtype and size its
// members read first, tile by tile (the planner's rule); splat constants that
// only groups' tiles read held as one tile (splat_static_elems); outputs
// computed in the caller's Arrays
// (Home::output, Direct: the first output on each arena buffer of its size,
// so that nothing is copied out and the arena holds only true intermediates).
void Interpreter::Impl::plan_buffers(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  const std::vector<int>& in_group = b.in_group;
  plan::PlanOptions o;
  o.align = kArenaAlign;
  o.eqn_scratch = b.scratch;
  o.span = b.span;
  for (int i = 0; i < ne; ++i) {
    const int j = b.pair_of[static_cast<size_t>(i)];
    if (j >= 0) o.span[static_cast<size_t>(i)] = {std::min(i, j), std::max(i, j)};
  }
  o.view = b.alias;
  o.group = in_group;
  o.internal.assign(static_cast<size_t>(nv), 0);
  for (int i = 0; i < ne; ++i) {
    const int g = in_group[static_cast<size_t>(i)];
    if (g < 0) continue;
    const plan::Group& gr = *b.group_src[static_cast<size_t>(g)];
    const int v = ex.eqns[static_cast<size_t>(i)].out;
    const int64_t n = prog.type(v).numel();
    o.internal[static_cast<size_t>(v)] = n == gr.numel || (gr.kind == plan::GroupKind::row && n == gr.rows);
  }
  o.in_place = [&](int i, int k) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const auto [first, count] = in_place_operands(e.op);
    return in_group[static_cast<size_t>(i)] < 0 && k >= first && k < first + count &&
           prog.type(e.inputs[static_cast<size_t>(k)]).dtype == prog.type(e.out).dtype;
  };
  o.caller_arrays = true;
  b.static_elems = splat_static_elems(b);
  o.static_elems = b.static_elems;
  plan::Plan pl = plan::plan_memory(ex, o);
  b.values = std::move(pl.values);
  arena_bytes = pl.arena_bytes;
  static_bytes = pl.statics_bytes;
  for (const std::vector<plan::Loc>& locs : pl.scratch_loc)
    for (const plan::Loc& l : locs) b.scratch_offset.push_back(l.offset);

  output_is_direct = pl.output_direct;
  for (size_t j = 0; j < prog.outputs.size(); ++j) {
    if (!output_is_direct[j]) continue;
    const int r = of(b.values, prog.outputs[j].value).root;
    Direct d;
    d.output = static_cast<int>(j);
    for (int v = 0; v < nv; ++v)
      if (of(b.values, v).root == r) d.slots.push_back(v);
    d.fallback_offset = fallback_bytes;
    fallback_bytes += align_up(prog.output_type(static_cast<int>(j)).bytes());
    direct.push_back(std::move(d));
  }
}

// The fused groups' members (build_fused_group) and their scratch tiles: one
// block for all, as groups run one after another, of the largest group's
// tiles (a group's parts each have their own). Splat constants: a tile reads
// the first elements of the static array whatever its position (the same
// values), which stay in the cache. plan_only compiles no loop.
void Interpreter::Impl::make_fused_groups(const InterpreterOptions& opt, bool plan_only, Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv;
  const Values& values = b.values;
  const std::vector<Step>& built = b.built;
  const std::vector<const plan::Group*>& group_src = b.group_src;
  std::vector<char> splat(static_cast<size_t>(nv), 0);
  for (const Eqn& e : ex.eqns)
    if (e.op == Op::constant && e.attrs.literal.size() == 1 && of(values, e.out).home == Home::statics)
      splat[static_cast<size_t>(e.out)] = 1;
  for (size_t k = 0; k < groups.size(); ++k) {
    const plan::Group& g = *group_src[k];
    const std::vector<Step> members(built.begin() + g.first, built.begin() + g.last + 1);
    *groups[k] = build_fused_group(FusedGroupSource{
        .program = ex,
        .group = g,
        .member_steps = members,
        .values = values,
        .splat = splat,
        .adamw = fusion->adamw,
        .options = {.tile_elems = opt.tile_elems, .max_parts = host_threads(), .jit = opt.jit && !plan_only}});
    tile_bytes = std::max(tile_bytes, groups[k]->scratch_stride * static_cast<size_t>(groups[k]->parts));
  }
}

// Allocates the arena, the statics and the tiles, fills the statics, and
// sets every slot that does not change from run to run: arena buffers,
// statics, views through their root; the slots of inputs are listed
// (input_slots) and those of Direct outputs left, both set per run. Lists the
// outputs that pass an input through (pass_through) and the others.
void Interpreter::Impl::allocate_and_set_slots(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  const Values& values = b.values;
  arena = alloc_block(arena_bytes);
  statics = alloc_block(static_bytes);
  tiles = alloc_block(tile_bytes);
  for (auto& g : groups) g->scratch = static_cast<char*>(tiles.get());
  slots.assign(static_cast<size_t>(nv + b.scratch_slots), nullptr);
  char* arena_base = static_cast<char*>(arena.get());
  char* static_base = static_cast<char*>(statics.get());
  for (int v = 0; v < nv; ++v)
    if (of(values, v).home == Home::arena && of(values, v).bytes)
      slots[static_cast<size_t>(v)] = arena_base + of(values, v).loc.offset;
  size_t k = 0;
  for (const std::vector<size_t>& sizes : b.scratch)
    for (size_t bytes : sizes) {
      if (bytes) slots[static_cast<size_t>(nv) + k] = arena_base + b.scratch_offset[k];
      ++k;
    }
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const Type& t = prog.type(e.out);
    if (of(values, e.out).home != Home::statics || t.bytes() == 0) continue;
    void* dst = static_base + of(values, e.out).loc.offset;
    slots[static_cast<size_t>(e.out)] = dst;
    const int64_t n = b.static_elems.empty() ? 0 : b.static_elems[static_cast<size_t>(e.out)];
    if (e.op == Op::constant) fill_constant(e.attrs, t, n > 0 && n < t.numel() ? n : t.numel(), dst);
    else fill_iota(e.attrs, t, dst);
  }
  for (int v = 0; v < nv; ++v) {
    const int r = of(values, v).root;
    const Home w = of(values, r).home;
    if (w == Home::input) input_slots.emplace_back(v, of(values, r).input);
    else if (w == Home::output) continue;  // set per run
    else if (r != v) slots[static_cast<size_t>(v)] = slots[static_cast<size_t>(r)];
  }
  for (const NamedValue& out : prog.outputs) output_slot.push_back(out.value);
  for (size_t j = 0; j < prog.outputs.size(); ++j) {
    const plan::ValuePlan& r = of(values, of(values, prog.outputs[j].value).root);
    if (r.home == Home::input) {
      pass_through.push_back({static_cast<int>(j), r.input, staging_bytes});
      staging_bytes += align_up(prog.output_type(static_cast<int>(j)).bytes());
    } else {
      computed_outputs.push_back(static_cast<int>(j));
    }
  }
}

// Outputs that may be written in place of an input (Direct::takes_input): of
// the input's type (run() writes in place only into an Array of the output's
// type), first written after every step that may throw (may_throw_at_run),
// and where in_place_takes allows it. The gathers and scatters whose indices
// are an input or a constant are checked before the first step instead
// (index_checks), so that they do not hold the outputs back.
void Interpreter::Impl::plan_outputs_over_inputs(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  const Values& values = b.values;
  const std::vector<Step>& built = b.built;
  const std::vector<int>& in_group = b.in_group;
  const std::vector<std::pair<int, int>>& span = b.span;
  int throws_until = -1;  // the last equation (its group's last) that may throw
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    if (!may_throw_at_run(e.op)) continue;
    if (e.op != Op::all_reduce && built[static_cast<size_t>(i)].fn) {
      const Home w = of(values, of(values, e.inputs[1]).root).home;
      if (w == Home::input || w == Home::statics) {
        index_checks.push_back(built[static_cast<size_t>(i)]);
        continue;
      }
    }
    throws_until = std::max(throws_until, span[static_cast<size_t>(i)].second);
  }
  std::vector<int> first_write(static_cast<size_t>(nv), ne);  // per root: the first equation writing its buffer
  for (int v = 0; v < nv; ++v) {
    const int d = of(values, v).def;
    int& f = first_write[static_cast<size_t>(of(values, v).root)];
    if (d >= 0) f = std::min(f, d);
  }
  for (Direct& d : direct) {
    d.takes_input.assign(prog.inputs.size(), 0);
    const int r = of(values, prog.outputs[static_cast<size_t>(d.output)].value).root;
    const int first = first_write[static_cast<size_t>(r)];
    if (first >= ne || span[static_cast<size_t>(first)].first <= throws_until) continue;
    const Type& t = prog.output_type(d.output);
    for (size_t k = 0; k < prog.inputs.size(); ++k)
      if (prog.input_type(static_cast<int>(k)) == t)
        d.takes_input[k] = in_place_takes(ex, r, first, prog.inputs[k].value, values, span, in_group, groups);
  }
}

}  // namespace capstep::host
