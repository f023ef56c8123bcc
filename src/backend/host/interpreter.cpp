// capstep::host::Interpreter: verifies a Program, plans its memory once and runs
// it with one precomputed Step per equation.
//
// Where each value lives, decided at construction by the memory planner of
// every backend (capstep/device_plan.h: plan::plan_memory, with the host's
// options: plan_buffers), in its vocabulary and table of facts per value
// (plan::Home; plan::ValuePlan: home, root, def, last, loc):
//   input      the caller's Array, read in place (its address is set per run)
//   statics    constant and iota: computed once into storage owned here
//   view       (an "alias") reshape, and any broadcast/transpose/convert
//              that moves nothing: the same bytes as its operand (its root), no
//              step at all. Two views hold another layout than their type's
//              row-major one: a transpose that only dot_generals read holds
//              its operand as it is (the dots read it through the permuted
//              strides), and a dot_general whose one reader is a transpose
//              holds its result in the transpose's layout (the transpose is
//              then the view); no other step reads either (see "transposes
//              that their dot_generals read in place"). Also an elementwise
//              result computed in place (below).
//   arena      everything else: an offset in one arena shared by buffers whose
//              lifetimes do not overlap (see memory_plan.h)
//   output     a buffer that ends as a program output: the caller's output Array
//              itself (its address is set per run), so nothing is copied out and
//              the arena holds only true intermediates (Direct)
//   tile       a fused group's value that only the group reads (below)
// dot_general's packing scratch lives in the same arena for the one step that
// uses it. Elementwise results take over the buffer of an operand read for the
// last time (in place: a view of the operand's root). run() then only stores
// the input and output addresses, calls each step's kernel and copies out what
// was not computed in place (pass-through inputs, constants, a second output
// of one buffer, and an output whose Array is also an input that it cannot be
// written over: see Direct): no lookups, no allocation once the caller's
// output Arrays have their types.
//
// run() writes the Interpreter's own arena and slot table: one Interpreter runs
// on one thread at a time (make one per thread to run in parallel).
//
// Fused (the default, InterpreterOptions::fuse): the equations run in the
// order of plan::fuse_program, and each loop, row or col group that
// host_fusable accepts is one Step (run_fused_group, fused.h) instead of one
// per equation. Its members' values that nothing outside the group reads are
// "tile" values: no arena buffer, only a tile in the group's scratch. Every
// value a group reads or writes lives in the arena for the group's whole span
// of equations, and no member of a group works in place on another value's
// buffer (a group's result may be written over a program input, though, when
// the caller passes that input's Array as the output's: Direct).
#include "capstep/interpreter.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <cstring>
#include <new>
#include <optional>

#include "backend/host/fused.h"
#include "backend/host/memory_plan.h"
#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "backend/plan/fusion.h"
#include "ir/all_reduce_packs.h"
#include "ir/bf16.h"

namespace capstep::host {
namespace {

using plan::Home;
using Values = std::vector<plan::ValuePlan>;  // per value id (the plan's table)

// Value v's entry of the table.
plan::ValuePlan& of(Values& t, int v) { return t[static_cast<size_t>(v)]; }
const plan::ValuePlan& of(const Values& t, int v) { return t[static_cast<size_t>(v)]; }

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t{kArenaAlign}); }
};
using Block = std::unique_ptr<void, AlignedFree>;

Block alloc_block(size_t bytes) {
  if (bytes == 0) return Block(nullptr);
  return Block(::operator new(bytes, std::align_val_t{kArenaAlign}));
}

size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

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

void fill_constant(const Attrs& a, const Type& t, void* dst) {
  const std::vector<double>& lit = a.literal;
  if (lit.size() == 1)
    store_doubles(t.dtype, dst, t.numel(), [&](int64_t) { return lit[0]; });
  else
    store_doubles(t.dtype, dst, t.numel(), [&](int64_t i) { return lit[static_cast<size_t>(i)]; });
}

void fill_iota(const Attrs& a, const Type& t, void* dst) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(a.axis) + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  const int64_t size = t.shape[static_cast<size_t>(a.axis)];
  store_doubles(t.dtype, dst, t.numel(), [&](int64_t i) { return static_cast<double>((i / inner) % size); });
}

// The strides, in transpose(x, perm)'s row-major buffer of type `out`, of
// x's axes: result axis i is x's axis perm[i].
std::vector<int64_t> strides_through_transpose(const Type& out, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> ys = row_major_strides(out.shape);
  std::vector<int64_t> st(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) st[static_cast<size_t>(perm[i])] = ys[i];
  return st;
}

// dot_general reading transpose(x, perm) as its lhs (side 0) or rhs (side 1)
// is dot_general reading x with the operand's batch and contracting axes
// mapped through perm (transposed axis a is x's axis perm[a]), provided x's
// free axes come in the order of the transposed operand's: the result lists
// them in axis order. Maps them in `at` and says whether it could.
bool fold_transpose_dims(Attrs& at, int side, const std::vector<int64_t>& perm) {
  std::vector<int64_t>& batch = side == 0 ? at.lhs_batch : at.rhs_batch;
  std::vector<int64_t>& contract = side == 0 ? at.lhs_contract : at.rhs_contract;
  std::vector<char> bound(perm.size(), 0);
  for (int64_t a : batch) bound[static_cast<size_t>(a)] = 1;
  for (int64_t a : contract) bound[static_cast<size_t>(a)] = 1;
  int64_t prev = -1;
  for (size_t a = 0; a < perm.size(); ++a) {
    if (bound[a]) continue;
    if (perm[a] <= prev) return false;
    prev = perm[a];
  }
  for (int64_t& a : batch) a = perm[static_cast<size_t>(a)];
  for (int64_t& a : contract) a = perm[static_cast<size_t>(a)];
  return true;
}

// The host's rule for plan::Target::library_gemm_reads_transpose: plan_dot
// reads transpose(x, perm) as operand `side` of `dot` in place when the
// dimension numbers map onto x (fold_transpose_dims) and it reads x so
// without copying it first (dot_operand_in_place; a bf16 operand is read
// through any strides: copied, widened, where bf16 GEMMs run in f32, and
// copied as bf16 where bf16 kernels cannot read its layout).
bool gemm_reads_transpose(const Program& p, const Eqn& dot, int side, const Eqn& transpose) {
  Attrs at = dot.attrs;
  return fold_transpose_dims(at, side, transpose.attrs.dims) &&
         dot_operand_in_place(p.type(transpose.inputs[0]), side == 0 ? at.lhs_batch : at.rhs_batch,
                              side == 0 ? at.lhs_contract : at.rhs_contract);
}

// The interpreter's plan::Target: the host's grouping (loops: fuse) and its
// GEMMs' rule for reading transposes in place.
plan::Target interpreter_target(bool fuse) {
  plan::Target t = plan::host_target();
  t.loops = fuse;
  t.library_gemm_reads_transpose = gemm_reads_transpose;
  return t;
}

// The operands [first, first + count) that an equation's kernel reads at the
// very element it writes, so that its result may be written over one of them
// (PlanOptions::in_place; in_place_takes); count 0: none.
struct InPlaceOperands {
  int first = 0, count = 0;
};
InPlaceOperands in_place_operands(Op op) {
  if (op_kind(op) == OpKind::binary) return {0, 2};
  if (op_kind(op) == OpKind::unary || op == Op::all_reduce) return {0, 1};
  if (op == Op::select) return {1, 2};
  return {};
}

// all_reduce: the operand's bytes (unless it was computed in place), then the
// sum over the replicas when there are several.
void all_reduce_step(const Step& s, void* const* slots) {
  void* out = slots[s.out];
  const void* in = slots[s.in[0]];
  if (out != in && s.n > 0) std::memcpy(out, in, static_cast<size_t>(s.n) * s.elem_bytes);
  Communicator* c = *s.comm;
  if (c != nullptr && c->size() > 1 && s.n > 0) c->all_reduce_sum(out, s.program->type(s.out).dtype, s.n);
}

// A run of consecutive all_reduce steps of one dtype, none reading another's
// result (optim::data_parallel's packed form): ONE message. Every operand is
// copied into `buffer` first, then the buffer is summed over the replicas,
// then each result is copied out; an output may share memory only with an
// operand already copied (its own, in place, or one dead before it), so
// reading every operand first is what keeps that safe.
struct AllReducePack {
  struct Member {
    int in = -1, out = -1;
    int64_t n = 0;
  };
  std::vector<Member> members;
  DType dtype = DType::f32;
  size_t elem_bytes = 0;
  std::vector<char> buffer;        // the concatenated values (allocated on first use with replicas)
  Communicator* const* comm = nullptr;
};

void all_reduce_pack_step(const Step& s, void* const* slots) {
  AllReducePack& p = *static_cast<AllReducePack*>(s.group);
  Communicator* c = *p.comm;
  if (c == nullptr || c->size() <= 1) {  // one replica: each result is its operand
    for (const AllReducePack::Member& m : p.members)
      if (slots[m.out] != slots[m.in] && m.n > 0)
        std::memmove(slots[m.out], slots[m.in], static_cast<size_t>(m.n) * p.elem_bytes);
    return;
  }
  int64_t total = 0;
  for (const AllReducePack::Member& m : p.members) total += m.n;
  if (p.buffer.size() < static_cast<size_t>(total) * p.elem_bytes) p.buffer.resize(static_cast<size_t>(total) * p.elem_bytes);
  size_t at = 0;
  for (const AllReducePack::Member& m : p.members) {
    const size_t b = static_cast<size_t>(m.n) * p.elem_bytes;
    if (b) std::memcpy(p.buffer.data() + at, slots[m.in], b);
    at += b;
  }
  if (total > 0) c->all_reduce_sum(p.buffer.data(), p.dtype, total);
  at = 0;
  for (const AllReducePack::Member& m : p.members) {
    const size_t b = static_cast<size_t>(m.n) * p.elem_bytes;
    if (b) std::memcpy(slots[m.out], p.buffer.data() + at, b);
    at += b;
  }
}

// Host fusion orders its groups by level, which scatters a pack's all_reduce
// equations over the step (each right after its operand's producer). Moves
// each pack's members together, to just after the last of them is ready: the
// groups between the first member and the last that read a member's result
// (directly or not) move after the pack, in their order; the others stay.
// Every group still comes after the groups it reads. A pack whose member would
// read a moved group is left as it is (then it is sent as several messages).
void gather_packs(plan::Fused& f, const std::vector<int>& pack_of_old) {
  const int G = static_cast<int>(f.groups.size());
  int packs = 0;
  for (int k : pack_of_old) packs = std::max(packs, k + 1);
  if (packs == 0) return;
  std::vector<int> order(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) order[static_cast<size_t>(g)] = g;
  std::vector<int> def_group(static_cast<size_t>(f.program.num_values()), -1);
  for (size_t e = 0; e < f.program.eqns.size(); ++e) def_group[static_cast<size_t>(f.program.eqns[e].out)] = f.group_of[e];
  auto group_pack = [&](int g) {
    const plan::Group& gr = f.groups[static_cast<size_t>(g)];
    return gr.size() == 1 ? pack_of_old[static_cast<size_t>(f.old_index[static_cast<size_t>(gr.first)])] : -1;
  };
  for (int k = 0; k < packs; ++k) {
    int first = -1, last = -1;
    for (int i = 0; i < G; ++i)
      if (group_pack(order[static_cast<size_t>(i)]) == k) {
        if (first < 0) first = i;
        last = i;
      }
    if (first < 0) continue;
    std::vector<char> moved(static_cast<size_t>(G), 0);  // members and what reads them
    bool ok = true;
    for (int i = first; i <= last && ok; ++i) {
      const int g = order[static_cast<size_t>(i)];
      const plan::Group& gr = f.groups[static_cast<size_t>(g)];
      bool reads_moved = false;
      for (int e = gr.first; e <= gr.last; ++e)
        for (int v : f.program.eqns[static_cast<size_t>(e)].inputs) {
          const int d = def_group[static_cast<size_t>(v)];
          if (d >= 0 && d != g && moved[static_cast<size_t>(d)]) reads_moved = true;
        }
      if (group_pack(g) == k) {
        if (reads_moved) ok = false;  // a member reading another's result: leave this pack alone
        moved[static_cast<size_t>(g)] = 1;
      } else if (reads_moved) {
        moved[static_cast<size_t>(g)] = 2;
      }
    }
    if (!ok) continue;
    std::vector<int> next;
    for (int i = 0; i < G; ++i) {
      const int g = order[static_cast<size_t>(i)];
      if (i < first || i > last || !moved[static_cast<size_t>(g)]) next.push_back(g);
      if (i == last) {
        for (int j = first; j <= last; ++j)
          if (moved[static_cast<size_t>(order[static_cast<size_t>(j)])] == 1) next.push_back(order[static_cast<size_t>(j)]);
        for (int j = first; j <= last; ++j)
          if (moved[static_cast<size_t>(order[static_cast<size_t>(j)])] == 2) next.push_back(order[static_cast<size_t>(j)]);
      }
    }
    order = std::move(next);
  }
  // Renumber: each group's equations in the new group order.
  plan::Fused r = f;
  r.program.eqns.clear();
  r.old_index.clear();
  r.view.clear();
  r.group_of.clear();
  std::vector<int> new_group(static_cast<size_t>(G));
  for (int i = 0; i < G; ++i) new_group[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  for (int i = 0; i < G; ++i) {
    plan::Group g = f.groups[static_cast<size_t>(order[static_cast<size_t>(i)])];
    const int at = static_cast<int>(r.program.eqns.size());
    for (int e = g.first; e <= g.last; ++e) {
      r.program.eqns.push_back(f.program.eqns[static_cast<size_t>(e)]);
      r.old_index.push_back(f.old_index[static_cast<size_t>(e)]);
      r.view.push_back(f.view[static_cast<size_t>(e)]);
      r.group_of.push_back(i);
    }
    g.last = at + g.size() - 1;
    g.first = at;
    r.groups[static_cast<size_t>(i)] = g;
  }
  for (std::vector<int>& w : r.waves)
    for (int& g : w) g = new_group[static_cast<size_t>(g)];
  f = std::move(r);
}

}  // namespace

InterpreterOptions InterpreterOptions::defaults() {
  return InterpreterOptions{};
}

struct Interpreter::Impl {
  Program prog;
  InterpreterOptions options;
  std::optional<plan::Fused> fusion;             // fused: the equations in group order
  std::vector<std::unique_ptr<FusedGroup>> groups;  // run tile by tile, one Step each
  std::vector<std::unique_ptr<plan::Group>> peeled;   // fusion groups less their leading members (below)
  int fused_eqns = 0;
  Communicator* comm = nullptr;        // all_reduce's replicas (none: one replica)
  std::vector<std::unique_ptr<AllReducePack>> packs;  // runs of all_reduce steps, one message each
  std::vector<std::unique_ptr<std::array<Step, 2>>> dot_pairs;  // Step::pair of run_dot_pair's steps
  std::vector<Step> steps;
  std::vector<void*> slots;                      // one per value, then scratch
  std::vector<std::pair<int, int>> input_slots;  // (slot, input index) set per run
  std::vector<int> output_slot;                  // per Program output
  // Outputs that are program inputs, copied out first, from the caller's input
  // Arrays. One whose output Array is itself one of the input Arrays (an
  // in-place caller) is written only after every pass-through has read its
  // input: through `staging` (allocated on first need, then kept), so that
  // outputs (b, a) of inputs (a, b) swap rather than both becoming b.
  struct PassThrough {
    int output = -1;            // index into Program::outputs
    int input = -1;             // index into Program::inputs
    size_t staging_offset = 0;
  };
  std::vector<PassThrough> pass_through;
  std::vector<int> computed_outputs;  // the other outputs not computed in place
  // Buffers computed straight into the caller's output Arrays. When the caller
  // passes an output Array that is also an input Array, the buffer is that
  // Array still where the plan allows it (takes_input, in_place_takes: every
  // read of that input comes before the buffer's first write, or in that step
  // at the same element, and after every step that may throw) and the Array
  // has the output's type; else it goes to `fallback` (allocated on first
  // need, then kept) and is copied in after the last step.
  struct Direct {
    int output = -1;            // index into Program::outputs
    std::vector<int> slots;     // every value living in this buffer
    std::vector<char> takes_input;  // per Program input: may be written in that input's Array
    size_t fallback_offset = 0;
    bool in_fallback = false;   // this run
  };
  std::vector<Direct> direct;
  // The gathers and scatters whose indices are a program input or a constant:
  // their indices are checked before the first step, so that they cannot fail
  // once an output has been written over an input.
  std::vector<Step> index_checks;
  // RunEvents: after steps[k], the outputs whose buffer holds its final value
  // (Direct outputs: their last writing step) and the inputs that no later
  // step reads (through any view); the rest at the start or the end.
  std::vector<std::vector<int>> ready_after, released_after;
  std::vector<int> ready_at_end, released_at_start, released_at_end;
  std::vector<int> direct_of_output;  // per output: its index in `direct`, or -1
  int last_in_place = 0, last_via_copy = 0;  // the last run's Direct outputs whose Array was an input
  std::vector<char> output_is_direct;
  Block arena, statics, fallback, staging, tiles;
  size_t arena_bytes = 0, fallback_bytes = 0, staging_bytes = 0, static_bytes = 0, tile_bytes = 0;

  // plan_only: the constructor stops once the sizes are known (host::plan_memory):
  // nothing is allocated, no constant filled, no loop compiled, and the Impl
  // cannot run.
  Impl(Program p, const InterpreterOptions& opt, bool plan_only = false);
  MemoryPlan memory() const;
  void run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs, const RunEvents* ev = nullptr);
  void check_inputs(const std::vector<const Array*>& inputs) const;
  // Output j's bytes from src into outputs[j], retyped if needed.
  void copy_out(int j, const void* src, std::vector<Array>& outputs) const;

 private:
  // The constructor's working state (defined with the constructor): what one
  // phase decides and a later one reads; dropped once the Impl is built.
  struct Build;
  // The constructor's phases, in the order it calls them; each says at its
  // definition what it decides and why.
  void expand_and_order(Program p, const InterpreterOptions& opt, Build& b);
  void fold_transposes(Build& b);
  void plan_steps(Build& b);
  void choose_fused_groups(Build& b);
  void pair_dot_generals(const InterpreterOptions& opt, Build& b);
  void plan_buffers(Build& b);
  void make_fused_groups(const InterpreterOptions& opt, bool plan_only, Build& b);
  void allocate_and_set_slots(Build& b);
  void plan_outputs_over_inputs(Build& b);
  void order_steps(Build& b);
  void pack_all_reduces(Build& b);
  void plan_run_events(Build& b);
  // The equations in the order they run (fused: fusion->program; its values
  // and types are prog's), and the index in prog of the i-th of them.
  const Program& ordered() const { return fusion ? fusion->program : prog; }
  int orig_index(int i) const { return fusion ? fusion->old_index[static_cast<size_t>(i)] : i; }
};

namespace {

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

// Two dot_generals side by side (InterpreterOptions::pair_dots): part k runs
// step k whole, its own parts in turn on this thread (a parallel_parts inside
// a part runs inline), so each GEMM's result is that of its parts as ever.
void run_dot_pair(const Step& s, void* const* p) {
  const Step* two = s.pair;
  parallel_parts(2, [&](int k) { two[k].fn(two[k], p); });
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
  // One equation outside groups: an elementwise kernel over the same elements.
  const Eqn& e = ex.eqns[static_cast<size_t>(first)];
  if (in_place_operands(e.op).count == 0 || ex.type(e.out).bytes() != ex.type(x).bytes()) return false;
  for (int v : e.inputs)
    if (of(values, v).root == x && ex.type(v).numel() != ex.type(e.out).numel()) return false;
  return true;
}

}  // namespace

// What the constructor's phases hand on to later ones. Per value (nv of them,
// value ids of prog) or per equation (ne, in the order of ordered()).
struct Interpreter::Impl::Build {
  std::vector<int> pack_of;  // per equation of prog: its all_reduce pack (all_reduce_packs), or -1
  int nv = 0, ne = 0;
  std::vector<int> def;      // per value: its defining equation, -1 for an input
  // per equation: the planner's Fused::view (the unfused program's too)
  std::vector<char> view;
  // fold_transposes: per value, a transpose that its dot_generals read in
  // place (folded), one that its dot_general wrote in its layout
  // (folded_out), and such a dot_general's result (writes_transposed, with
  // the strides it writes with in out_strides).
  std::vector<char> folded, folded_out, writes_transposed;
  std::vector<std::vector<int64_t>> out_strides;
  std::vector<Step> built;       // per equation (fn null: no work)
  // plan_steps, per equation: its result is a view of its operand's buffer
  // (no step; PlanOptions::view), and the scratch buffers its step needs (slot
  // nv + k for the k-th of them over all equations in order).
  std::vector<char> alias;
  std::vector<std::vector<size_t>> scratch;
  int scratch_slots = 0;
  std::vector<int> in_group;     // per equation: its fused group, -1 outside one
  std::vector<std::pair<int, int>> span;      // per equation: its group's [first, last] ({i, i} alone)
  std::vector<const plan::Group*> group_src;  // per fused group: the plan's group it runs
  std::vector<int> pair_of;      // per equation: the dot_general it runs beside, or -1
  // plan_buffers: the memory plan's table (home, root, def, last per root,
  // input, and the offset of an arena or statics value at kArenaAlign), and
  // each scratch slot's offset in the arena
  Values values;
  std::vector<size_t> scratch_offset;
  std::vector<int> step_at;        // per equation: the step that runs it (order_steps)
};

// Plans the program once: a short sequence of phases, each deciding one thing
// that the ones after it read (Build). plan_only stops once every size is
// known (host::plan_memory).
Interpreter::Impl::Impl(Program p, const InterpreterOptions& opt, bool plan_only) : options(opt) {
  Build b;
  expand_and_order(std::move(p), opt, b);
  fold_transposes(b);
  plan_steps(b);
  choose_fused_groups(b);
  pair_dot_generals(opt, b);
  plan_buffers(b);
  make_fused_groups(opt, plan_only, b);
  // Every size is known: host::plan_memory() stops here, before allocating them.
  if (plan_only) return;
  allocate_and_set_slots(b);
  plan_outputs_over_inputs(b);
  order_steps(b);
  pack_all_reduces(b);
  plan_run_events(b);
}

// The program to run and its order. AdamW known by name (ir.h adamw): the
// interpreter runs its expansion, the plain equations (unfused, the reference
// path, one by one); fused, each parameter's update is one loop group that
// runs as the host AdamW kernel: the planner names the groups that are one
// update each (plan::Group::adamw, from the expansion's record), and
// match_adamw_group checks the host can run it so. Fused, the equations run in plan::fuse_program's
// order with each all_reduce pack's members together (gather_packs).
void Interpreter::Impl::expand_and_order(Program p, const InterpreterOptions& opt, Build& b) {
  std::vector<ExpandedAdamW> updates;
  prog = expand_adamw(p, &updates);  // verifies p
  configure_blas_threads();
  b.pack_of = all_reduce_packs(prog);  // per equation of prog
  if (opt.fuse) {
    fusion = plan::fuse_expanded(prog, std::move(updates), interpreter_target(true));
    gather_packs(*fusion, b.pack_of);
  }
  const Program& ex = ordered();
  const int nv = b.nv = prog.num_values();
  const int ne = b.ne = static_cast<int>(prog.eqns.size());
  if (fusion) {
    b.view = fusion->view;
  } else {  // unfused: the planner's views without its groups (loops false), in prog's order
    const plan::Fused one_by_one = plan::fuse_program(prog, interpreter_target(false));
    b.view.assign(static_cast<size_t>(ne), 0);
    for (int i = 0; i < ne; ++i)
      b.view[static_cast<size_t>(one_by_one.old_index[static_cast<size_t>(i)])] = one_by_one.view[static_cast<size_t>(i)];
  }
  b.def.assign(static_cast<size_t>(nv), -1);
  for (int i = 0; i < ne; ++i) b.def[static_cast<size_t>(ex.eqns[static_cast<size_t>(i)].out)] = i;  // of ex
}

// Transposes that their dot_generals read in place (folded): the planner's
// views (Fused::view, decided with the host's GEMM rule, interpreter_target):
// every reader of the transpose is a dot_general that plan_dot runs on x with
// the dimension numbers mapped through the permutation and without a
// transposed copy of x (a bf16 operand is copied, widened, either way); the
// transpose is no output, and as a view it joins no fused group.
// It moves nothing (a view of x, read by those dots only) and each dot is
// planned on x. The attention heads' transposes of q, k, v and their
// cotangents are these.
void Interpreter::Impl::fold_transposes(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  auto def = [&](size_t v) { return b.def[v]; };
  std::vector<char>& folded = b.folded;
  std::vector<char>& folded_out = b.folded_out;
  std::vector<char>& writes_transposed = b.writes_transposed;
  std::vector<std::vector<int64_t>>& out_strides = b.out_strides;
  folded.assign(static_cast<size_t>(nv), 0);
  folded_out.assign(static_cast<size_t>(nv), 0);
  writes_transposed.assign(static_cast<size_t>(nv), 0);
  out_strides.assign(static_cast<size_t>(nv), {});
  std::vector<int> readers(static_cast<size_t>(nv), 0);
  std::vector<char> grouped(static_cast<size_t>(ne), 0);
  if (fusion)
    for (const plan::Group& g : fusion->groups)
      if (g.size() > 1)
        for (int d = g.first; d <= g.last; ++d) grouped[static_cast<size_t>(d)] = 1;
  for (const NamedValue& out : prog.outputs) readers[static_cast<size_t>(out.value)] = -1;
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    for (int v : e.inputs)
      if (readers[static_cast<size_t>(v)] >= 0) ++readers[static_cast<size_t>(v)];
    // (a group of its own: fuse_program checks it)
    folded[static_cast<size_t>(e.out)] = e.op == Op::transpose && b.view[static_cast<size_t>(i)];
  }
  // The other way round: a transpose that is the one reader of a
  // dot_general's result (the attention output and dq, dk, dv, back to
  // token-major): the dot writes its result in the transpose's layout
  // (DotPlan::ldc, c_off), and the transpose is a view of it. Decided here,
  // not by the planner: it depends on the groups the planner makes (such a
  // transpose may join its readers' loop group, and is then read tile by
  // tile), and its root, the dot's result, is stored in a layout that is not
  // its type's row-major one, which Fused::view does not describe (plan::view_of
  // reads every root as row-major).
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const size_t o = static_cast<size_t>(e.out);
    if (e.op != Op::transpose || folded[o] || grouped[static_cast<size_t>(i)] || readers[o] < 0) continue;
    const size_t x = static_cast<size_t>(e.inputs[0]);
    const int d = def(x);
    if (d < 0 || readers[x] != 1 || grouped[static_cast<size_t>(d)]) continue;
    const Eqn& dot = ex.eqns[static_cast<size_t>(d)];
    if (dot.op != Op::dot_general || prog.type(dot.out).numel() == 0) continue;
    const Type &lt = prog.type(dot.inputs[0]), &rt = prog.type(dot.inputs[1]);
    int64_t k = 1;
    for (int64_t a : dot.attrs.lhs_contract) k *= lt.shape[static_cast<size_t>(a)];
    if (k == 0) continue;  // an empty sum fills C whole
    DotPlan probe;
    std::vector<int64_t> st = strides_through_transpose(prog.type(e.out), e.attrs.dims);
    if (!dot_out_layout(dot.attrs, lt.rank(), rt.rank(), st, lt, rt, probe)) continue;
    writes_transposed[x] = 1;
    out_strides[x] = std::move(st);
    folded_out[o] = 1;
  }
}

// One Step per equation (Build::built): its kernel chosen and its views,
// GEMM plan and scratch planned; the values that move nothing are marked
// views of their operand (Build::alias; constants and iota run no step
// either: the planner makes them statics). The switch has no default so that
// a primitive without a host kernel does not compile.
void Interpreter::Impl::plan_steps(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  const std::vector<char>& folded = b.folded;
  const std::vector<char>& folded_out = b.folded_out;
  const std::vector<char>& writes_transposed = b.writes_transposed;
  const std::vector<std::vector<int64_t>>& out_strides = b.out_strides;
  std::vector<Step>& built = b.built;
  b.alias.assign(static_cast<size_t>(ne), 0);
  b.scratch.assign(static_cast<size_t>(ne), {});
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const Type& t = prog.type(e.out);
    const std::string what = "equation " + std::to_string(orig_index(i)) + " (" + op_name(e.op) + ")";
    const size_t o = static_cast<size_t>(e.out);
    Step s;
    s.eqn = orig_index(i);
    s.program = &prog;
    s.out = e.out;
    for (size_t k = 0; k < e.inputs.size() && k < 5; ++k) s.in[k] = e.inputs[k];
    s.n = t.numel();
    s.elem_bytes = dtype_size(t.dtype);
    auto alias_of_operand = [&] { b.alias[static_cast<size_t>(i)] = 1; };  // a view of its operand's buffer
    auto add_scratch = [&](size_t bytes) {  // its slot
      b.scratch[static_cast<size_t>(i)].push_back(bytes);
      return nv + b.scratch_slots++;
    };
    switch (e.op) {
      case Op::constant:
      case Op::iota:
        break;
      CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
        s.fn = binary_kernel(binary_op(e.op), t.dtype);
        break;
      CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
        s.fn = unary_kernel(unary_op(e.op), t.dtype);
        break;
      case Op::compare:
        s.fn = compare_kernel(e.attrs.cmp, prog.type(e.inputs[0]).dtype);
        break;
      case Op::select:
        s.fn = select_kernel(t.dtype);
        break;
      case Op::convert: {
        const DType from = prog.type(e.inputs[0]).dtype;
        if (from == t.dtype) alias_of_operand();
        else s.fn = convert_kernel(from, t.dtype);
        break;
      }
      case Op::broadcast_in_dim:
        s.view = plan::broadcast_walk(prog.type(e.inputs[0]).shape, t.shape, e.attrs.dims, what);
        if (s.view.is_identity()) alias_of_operand();
        else s.fn = strided_copy_kernel(t.dtype);
        break;
      case Op::reshape:
        alias_of_operand();
        break;
      case Op::transpose:
        if (folded[o] || folded_out[o]) {  // its dot_generals read the operand in place, or
          alias_of_operand();               // the dot_general it reads wrote it in its layout
          break;
        }
        s.view = plan::transpose_walk(prog.type(e.inputs[0]).shape, e.attrs.dims, what);
        if (s.view.is_identity()) alias_of_operand();
        else s.fn = strided_copy_kernel(t.dtype);
        break;
      case Op::dot_general: {
        s.fn = dot_general_kernel(prog.type(e.inputs[0]).dtype);
        // An operand that is a folded transpose: its slot holds x's bytes
        // (an alias), read with x's type and the dims mapped onto x.
        Attrs at = e.attrs;
        Type operand[2] = {prog.type(e.inputs[0]), prog.type(e.inputs[1])};
        for (int k = 0; k < 2; ++k) {
          if (!folded[static_cast<size_t>(e.inputs[static_cast<size_t>(k)])]) continue;
          const Eqn& tr = ex.eqns[static_cast<size_t>(b.def[static_cast<size_t>(e.inputs[static_cast<size_t>(k)])])];
          if (!fold_transpose_dims(at, k, tr.attrs.dims))
            throw Error(what + ": internal: a folded transpose that this dot_general cannot read in place");
          operand[k] = prog.type(tr.inputs[0]);
        }
        s.dot = plan_dot(operand[0], operand[1], at, what, writes_transposed[o] ? &out_strides[o] : nullptr);
        // packed in the result's dtype (bf16 operands: widened to f32, or as
        // bf16 where bf16 kernels run them, which then fills half the space)
        const size_t es = dtype_size(t.dtype);
        if (s.dot.pack_a) s.scratch[0] = add_scratch(static_cast<size_t>(s.dot.batch * s.dot.m * s.dot.k) * es);
        if (s.dot.pack_b || s.dot.pack_bt || s.dot.panel > 0)  // pack_bt: B transposed, [B, K, N]; panel: K x N in panels (f32)
          s.scratch[1] = add_scratch(static_cast<size_t>(s.dot.batch * s.dot.k * s.dot.n) * es);
        break;
      }
      case Op::reduce_sum:
      case Op::reduce_max: {
        const Type& in = prog.type(e.inputs[0]);
        s.fn = reduce_kernel(e.op, in.dtype);
        s.n_in = in.numel();
        s.view = plan::reduce_output_walk(in.shape, e.attrs.dims, what);
        if (in.dtype == DType::bf16)  // the f32 accumulators
          s.scratch[0] = add_scratch(static_cast<size_t>(s.n) * sizeof(float));
        break;
      }
      case Op::gather_rows:
      case Op::scatter_add_rows: {
        const Type& table = prog.type(e.inputs[0]);
        s.fn = e.op == Op::gather_rows ? gather_rows_kernel(table.dtype) : scatter_add_rows_kernel(table.dtype);
        s.rows = table.shape[0];
        s.row_elems = 1;
        for (size_t d = 1; d < table.shape.size(); ++d) s.row_elems *= table.shape[d];
        s.n_idx = prog.type(e.inputs[1]).numel();
        break;
      }
      case Op::attention:
      case Op::attention_grad:
        s.fn = attention_kernel(e.op, t.dtype);
        break;
      case Op::adamw:  // the constructor runs expand_adamw's program: never here
        throw Error("host interpreter: adamw reached a kernel unexpanded (expand_adamw first)");
      case Op::all_reduce:
        s.fn = &all_reduce_step;
        s.comm = &comm;
        break;
      case Op::slice: {
        // A copy always, even of a contiguous part: an alias would have to
        // start inside its operand's buffer, which no slot can.
        const plan::OffsetWalk w =
            plan::slice_walk(prog.type(e.inputs[0]).shape, t.shape, e.attrs.starts, e.attrs.strides, what);
        s.view = w.walk;
        s.offset = w.offset;
        s.fn = slice_kernel(t.dtype);
        break;
      }
      case Op::pad: {
        const Type& in = prog.type(e.inputs[0]);
        const plan::OffsetWalk w = plan::embed_walk(in.shape, t.shape, e.attrs.lows, what);
        s.view = w.walk;
        s.offset = w.offset;
        s.n_in = in.numel();
        s.fn = pad_kernel(t.dtype);
        break;
      }
      case Op::concatenate: {
        const size_t ax = static_cast<size_t>(e.attrs.axis);
        int64_t inner = 1;
        s.rows = 1;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          if (d < ax) s.rows *= t.shape[d];
          if (d > ax) inner *= t.shape[d];
        }
        for (int x : e.inputs) {
          s.operands.push_back(x);
          s.widths.push_back(prog.type(x).shape[ax] * inner);
        }
        if (t.numel() == 0) s.rows = 0;
        s.fn = concatenate_kernel();
        break;
      }
    }
    built.push_back(s);
  }
}

// The fused groups that run tile by tile (one Step each, run_fused_group):
// each loop, row or col group of the plan that host_fusable accepts, or its
// tail from the first member on that it accepts. in_group[i]: equation i's
// group; span[i] = the equations [first, last] of equation i's group (i alone
// outside one).
void Interpreter::Impl::choose_fused_groups(Build& b) {
  const Program& ex = ordered();
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  std::vector<int>& in_group = b.in_group;
  std::vector<std::pair<int, int>>& span = b.span;
  std::vector<const plan::Group*>& group_src = b.group_src;
  in_group.assign(static_cast<size_t>(ne), -1);
  span.resize(static_cast<size_t>(ne));
  for (int i = 0; i < ne; ++i) span[static_cast<size_t>(i)] = {i, i};
  if (fusion)
    for (const plan::Group& whole : fusion->groups) {
      if (!plan::fused_kind(whole.kind) || whole.kind == plan::GroupKind::gemm || whole.size() < 2) continue;
      // A group the host cannot run tile by tile may still from a later
      // member on: the first block's row group starts with the embedding's
      // gather_rows (fused on the GPU), which then runs as a step of its own.
      const plan::Group* gp = nullptr;
      for (int f = whole.first; f < whole.last && !gp; ++f) {
        plan::Group sub = whole;
        sub.first = f;
        if (f > whole.first) sub.adamw = -1;  // a part of an update is not the update
        const std::vector<Step> members(built.begin() + sub.first, built.begin() + sub.last + 1);
        if (!host_fusable(ex, sub, members)) continue;
        if (f == whole.first) {
          gp = &whole;
        } else {
          peeled.push_back(std::make_unique<plan::Group>(std::move(sub)));
          gp = peeled.back().get();
        }
      }
      if (!gp) continue;
      const plan::Group& g = *gp;
      for (int d = g.first; d <= g.last; ++d) {
        in_group[static_cast<size_t>(d)] = static_cast<int>(groups.size());
        span[static_cast<size_t>(d)] = {g.first, g.last};
      }
      groups.push_back(std::make_unique<FusedGroup>());
      group_src.push_back(&g);
      fused_eqns += g.size();
    }
}

// dot_generals side by side (InterpreterOptions::pair_dots, on two
// threads: measured there; with more, one thread per GEMM would leave
// threads idle that the GEMMs' own parts use): a
// dot_general (equation i) and the next equation that runs a step (j), when
// that is a dot_general too, neither in a fused group, j reads nothing that
// i writes (every operand made before i, or a constant or a view made
// between them of something made before i), and neither does more than twice
// the other's multiply-adds. They run at once, so every buffer either touches
// lives over both: the memory plan sees them as one span [i, j] (plan_buffers).
// The GEMMs' own parts (DotPlan::parts) are fixed by their shapes, so their
// results do not change.
void Interpreter::Impl::pair_dot_generals(const InterpreterOptions& opt, Build& b) {
  const Program& ex = ordered();
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  const std::vector<int>& in_group = b.in_group;
  std::vector<int>& pair_of = b.pair_of;
  pair_of.assign(static_cast<size_t>(ne), -1);
  if (!opt.pair_dots || host_threads() != 2) return;
  auto plain_dot = [&](int i) {
    return ex.eqns[static_cast<size_t>(i)].op == Op::dot_general && built[static_cast<size_t>(i)].fn &&
           in_group[static_cast<size_t>(i)] < 0;
  };
  auto work = [&](int i) {
    const DotPlan& d = built[static_cast<size_t>(i)].dot;
    return static_cast<double>(d.batch) * static_cast<double>(d.m) * static_cast<double>(d.n) *
           static_cast<double>(d.k);
  };
  // Whether the bytes of x were made before equation i: x is an input or made
  // before i, or it is a constant or a view made after i (the equations that
  // run no step, all there is between i and j) of such bytes.
  auto made_before = [&](int x, int i) {
    for (;;) {
      const int d = b.def[static_cast<size_t>(x)];
      if (d < i) return true;
      if (d == i) return false;
      const Op op = ex.eqns[static_cast<size_t>(d)].op;
      if (op == Op::constant || op == Op::iota) return true;
      if (!b.alias[static_cast<size_t>(d)]) return false;
      x = ex.eqns[static_cast<size_t>(d)].inputs[0];
    }
  };
  for (int i = 0; i < ne; ++i) {
    if (!plain_dot(i)) continue;
    int j = i + 1;
    while (j < ne && in_group[static_cast<size_t>(j)] < 0 && !built[static_cast<size_t>(j)].fn) ++j;
    if (j >= ne || !plain_dot(j)) continue;
    bool independent = true;
    for (int v : ex.eqns[static_cast<size_t>(j)].inputs) independent = independent && made_before(v, i);
    const double wi = work(i), wj = work(j);
    if (!independent || wi > 2 * wj || wj > 2 * wi) continue;
    pair_of[static_cast<size_t>(i)] = j;
    pair_of[static_cast<size_t>(j)] = i;
    i = j;
  }
}

// The memory plan, by the planner of every backend (plan::plan_memory) with
// the host's options: 64-byte alignment; the steps' scratch; each fused
// group's and dot pair's equations one span; views (Build::alias); tiles: a
// group's values of its element count (or, in a row group, one per row) that
// nothing outside the group reads; elementwise results in place over an
// operand of their dtype read for the last time (each element is read before
// the same element is written, so the loop stays correct: the elementwise
// kernels carry no __restrict for this reason; outside fused groups, whose
// members run tile by tile); outputs computed in the caller's Arrays
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
    if (e.op == Op::constant) fill_constant(e.attrs, t, dst);
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

// The Steps in order: a step per equation that does work, one per fused
// group (at its last member) and one per dot pair (at its first).
// step_at[i]: the step that runs equation i (the members of a group: the
// group's; an equation that runs no step, such as a view: the step before
// it, -1 before the first).
void Interpreter::Impl::order_steps(Build& b) {
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  const std::vector<int>& in_group = b.in_group;
  const std::vector<std::pair<int, int>>& span = b.span;
  const std::vector<int>& pair_of = b.pair_of;
  std::vector<int>& step_at = b.step_at;
  step_at.assign(static_cast<size_t>(ne), -1);
  for (int i = 0; i < ne; ++i) {
    const int g = in_group[static_cast<size_t>(i)];
    const int p = pair_of[static_cast<size_t>(i)];
    if (p > i) {
      dot_pairs.push_back(std::make_unique<std::array<Step, 2>>(
          std::array<Step, 2>{built[static_cast<size_t>(i)], built[static_cast<size_t>(p)]}));
      Step s = built[static_cast<size_t>(i)];
      s.fn = &run_dot_pair;
      s.pair = dot_pairs.back()->data();
      steps.push_back(s);
    } else if (p >= 0) {
      // runs beside equation p, in its step
    } else if (g < 0) {
      if (built[static_cast<size_t>(i)].fn) steps.push_back(built[static_cast<size_t>(i)]);
    } else if (i == span[static_cast<size_t>(i)].second) {
      Step s;
      s.fn = &run_fused_group;
      s.group = groups[static_cast<size_t>(g)].get();
      s.program = &prog;
      s.eqn = orig_index(i);
      steps.push_back(s);
      for (int d = span[static_cast<size_t>(i)].first; d < i; ++d)
        step_at[static_cast<size_t>(d)] = static_cast<int>(steps.size()) - 1;
    }
    step_at[static_cast<size_t>(i)] = p >= 0 && p < i ? step_at[static_cast<size_t>(p)] : static_cast<int>(steps.size()) - 1;
  }
}

// Packs (all_reduce_packs): the members, consecutive here (fused:
// gather_packs), become one step, one message; step_at follows the steps to
// their new places.
void Interpreter::Impl::pack_all_reduces(Build& b) {
  const std::vector<int>& pack_of = b.pack_of;
  std::vector<int>& step_at = b.step_at;
  std::vector<Step> packed;
  std::vector<int> packed_at(steps.size(), -1);  // old step index -> new
  for (size_t i = 0; i < steps.size();) {
    packed_at[i] = static_cast<int>(packed.size());
    if (steps[i].fn != &all_reduce_step) {
      packed.push_back(steps[i++]);
      continue;
    }
    const int k = pack_of[static_cast<size_t>(steps[i].eqn)];
    size_t j = i + 1;
    while (k >= 0 && j < steps.size() && steps[j].fn == &all_reduce_step && pack_of[static_cast<size_t>(steps[j].eqn)] == k) ++j;
    if (j - i == 1) {
      packed.push_back(steps[i++]);
      continue;
    }
    auto pack = std::make_unique<AllReducePack>();
    pack->dtype = prog.type(steps[i].out).dtype;
    pack->elem_bytes = dtype_size(pack->dtype);
    pack->comm = &comm;
    for (size_t k = i; k < j; ++k) {
      pack->members.push_back({steps[k].in[0], steps[k].out, steps[k].n});
      packed_at[k] = static_cast<int>(packed.size());
    }
    Step s = steps[i];
    s.fn = &all_reduce_pack_step;
    s.group = pack.get();
    packs.push_back(std::move(pack));
    packed.push_back(s);
    i = j;
  }
  steps = std::move(packed);
  for (int& a : step_at)
    if (a >= 0) a = packed_at[static_cast<size_t>(a)];
}

// RunEvents: after which step each output is final (a Direct output: after
// its last writing step; the others at the end) and each input read no more
// (after the step of its last reader; passed through: at the end).
void Interpreter::Impl::plan_run_events(Build& b) {
  const int ne = b.ne;
  const Values& values = b.values;
  const std::vector<int>& step_at = b.step_at;
  ready_after.assign(steps.size(), {});
  released_after.assign(steps.size(), {});
  direct_of_output.assign(prog.outputs.size(), -1);
  for (size_t k = 0; k < direct.size(); ++k) direct_of_output[static_cast<size_t>(direct[k].output)] = static_cast<int>(k);
  for (size_t j = 0; j < prog.outputs.size(); ++j) {
    const int k = direct_of_output[j];
    int writer = -1;  // the last equation writing the output's buffer
    if (k >= 0)
      for (int v : direct[static_cast<size_t>(k)].slots) writer = std::max(writer, of(values, v).def);
    const int at = writer >= 0 ? step_at[static_cast<size_t>(writer)] : -1;
    (at >= 0 ? ready_after[static_cast<size_t>(at)] : ready_at_end).push_back(static_cast<int>(j));
  }
  for (size_t i = 0; i < prog.inputs.size(); ++i) {
    const int l = of(values, of(values, prog.inputs[i].value).root).last;
    if (l >= ne) released_at_end.push_back(static_cast<int>(i));  // read at the end: passed through
    else if (l < 0 || step_at[static_cast<size_t>(l)] < 0) released_at_start.push_back(static_cast<int>(i));
    else released_after[static_cast<size_t>(step_at[static_cast<size_t>(l)])].push_back(static_cast<int>(i));
  }
}

void Interpreter::Impl::check_inputs(const std::vector<const Array*>& inputs) const {
  if (inputs.size() != prog.inputs.size()) {
    std::string names;
    for (size_t i = 0; i < prog.inputs.size(); ++i) names += (i ? ", " : "") + prog.inputs[i].name;
    throw Error("program \"" + prog.name + "\": expected " + std::to_string(prog.inputs.size()) + " inputs (" +
                names + "), got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type& want = prog.input_type(static_cast<int>(i));
    if (inputs[i] == nullptr)
      throw Error("input \"" + prog.inputs[i].name + "\": expected " + want.str() + ", got no array (null)");
    if (inputs[i]->type() != want)
      throw Error("input \"" + prog.inputs[i].name + "\": expected " + want.str() + ", got " +
                  inputs[i]->type().str());
  }
}

void Interpreter::Impl::run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs, const RunEvents* ev) {
  const SubnormalMode mode(options.flush_subnormals);
  last_in_place = last_via_copy = 0;
  check_inputs(inputs);
  void** sl = slots.data();
  for (const auto& [slot, i] : input_slots) sl[slot] = const_cast<void*>(inputs[static_cast<size_t>(i)]->raw());
  if (outputs.size() != output_slot.size()) {
    // Resizing may move the Arrays, and an input pointing at one would dangle.
    const std::less<const Array*> before;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!outputs.empty() && !before(inputs[i], outputs.data()) && before(inputs[i], outputs.data() + outputs.size()))
        throw Error("program \"" + prog.name + "\": input \"" + prog.inputs[i].name + "\" is one of the output Arrays, " +
                    "but the outputs vector has " + std::to_string(outputs.size()) + " Arrays, not " +
                    std::to_string(output_slot.size()) + ": size it to the outputs before an in-place run");
    outputs.resize(output_slot.size());
  }
  for (const Step& c : index_checks) {
    const int32_t* idx = static_cast<const int32_t*>(sl[c.in[1]]);
    for (int64_t i = 0; i < c.n_idx; ++i)
      if (idx[i] < 0 || idx[i] >= c.rows) throw_index_error(c, i, idx[i]);
  }
  for (Direct& d : direct) {
    Array& out = outputs[static_cast<size_t>(d.output)];
    const Type& t = prog.output_type(d.output);
    // The caller reads this Array as an input too: in place where every such
    // input allows it (Direct::takes_input) and the Array has the output's
    // type already (retyping it would lose the input), else written only at
    // the end, from `fallback`.
    bool is_input = false, in_place = out.type() == t && out.raw() != nullptr;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == &out) {
        is_input = true;
        in_place = in_place && d.takes_input[i];
      }
    d.in_fallback = is_input && !in_place;
    if (is_input) ++(d.in_fallback ? last_via_copy : last_in_place);
    void* dst;
    if (d.in_fallback) {  // the caller reads this Array as an input: write it only at the end
      if (!fallback) fallback = alloc_block(fallback_bytes);
      dst = static_cast<char*>(fallback.get()) + d.fallback_offset;
    } else {
      // A default Array claims f32[] but owns no bytes: reset allocates for it.
      if (out.type() != t || out.raw() == nullptr) out.reset(t);
      dst = out.raw();
    }
    for (int v : d.slots) sl[v] = dst;
  }
  // With events: an output computed aside this run (its Array is an input)
  // is final only once copied in, at the end.
  auto ready_now = [&](int j) {
    const int k = direct_of_output[static_cast<size_t>(j)];
    return k < 0 || !direct[static_cast<size_t>(k)].in_fallback;
  };
  if (!ev) {
    for (const Step& s : steps) s.fn(s, sl);
  } else {
    if (ev->input_released)
      for (int i : released_at_start) ev->input_released(i);
    for (size_t k = 0; k < steps.size(); ++k) {
      steps[k].fn(steps[k], sl);
      if (ev->output_ready)
        for (int j : ready_after[k])
          if (ready_now(j)) ev->output_ready(j);
      if (ev->input_released)
        for (int i : released_after[k]) ev->input_released(i);
    }
  }
  // Pass-throughs: straight copies, except into an Array that is an input:
  // staged until every input has been read, or, when it is the very input it
  // passes through, only retyped (a reshape may pass an input through).
  auto into_input = [&](const Array& out) { return std::find(inputs.begin(), inputs.end(), &out) != inputs.end(); };
  bool deferred = false;
  for (const PassThrough& pt : pass_through) {
    const Array& out = outputs[static_cast<size_t>(pt.output)];
    const Array* src = inputs[static_cast<size_t>(pt.input)];
    if (!into_input(out)) {
      copy_out(pt.output, src->raw(), outputs);
      continue;
    }
    deferred = true;
    if (&out == src || src->bytes() == 0) continue;
    if (!staging) staging = alloc_block(staging_bytes);
    std::memcpy(static_cast<char*>(staging.get()) + pt.staging_offset, src->raw(), src->bytes());
  }
  if (deferred)
    for (const PassThrough& pt : pass_through) {
      Array& out = outputs[static_cast<size_t>(pt.output)];
      const Array* src = inputs[static_cast<size_t>(pt.input)];
      if (&out == src) {
        if (out.type() != prog.output_type(pt.output)) out.reset(prog.output_type(pt.output));  // same bytes
      } else if (into_input(out)) {
        copy_out(pt.output, static_cast<char*>(staging.get()) + pt.staging_offset, outputs);
      }
    }
  for (const int j : computed_outputs)
    if (!output_is_direct[static_cast<size_t>(j)])
      copy_out(j, sl[output_slot[static_cast<size_t>(j)]], outputs);
  for (const Direct& d : direct)
    if (d.in_fallback)
      copy_out(d.output, static_cast<char*>(fallback.get()) + d.fallback_offset, outputs);
  if (!ev) return;
  if (ev->output_ready) {
    for (int j : ready_at_end) ev->output_ready(j);
    for (const auto& after : ready_after)
      for (int j : after)
        if (!ready_now(j)) ev->output_ready(j);
  }
  if (ev->input_released)
    for (int i : released_at_end) ev->input_released(i);
}

void Interpreter::Impl::copy_out(int j, const void* src, std::vector<Array>& outputs) const {
  const Type& t = prog.output_type(j);
  Array& out = outputs[static_cast<size_t>(j)];
  // A default Array claims f32[] but owns no bytes: reset allocates for it.
  if (out.type() != t || (out.raw() == nullptr && t.bytes() != 0)) out.reset(t);
  if (t.bytes()) std::memcpy(out.raw(), src, t.bytes());
}

Interpreter::Interpreter(Program p) : Interpreter(std::move(p), InterpreterOptions::defaults()) {}
Interpreter::Interpreter(Program p, const InterpreterOptions& o) : impl_(std::make_unique<Impl>(std::move(p), o)) {}
Interpreter::~Interpreter() = default;
Interpreter::Interpreter(Interpreter&&) noexcept = default;
Interpreter& Interpreter::operator=(Interpreter&&) noexcept = default;

const InterpreterOptions& Interpreter::options() const { return impl_->options; }

std::vector<Array> Interpreter::run(const std::vector<Array>& inputs) {
  std::vector<const Array*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Array& a : inputs) ptrs.push_back(&a);
  std::vector<Array> outputs;
  impl_->run(ptrs, outputs);
  return outputs;
}

void Interpreter::run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs) {
  impl_->run(inputs, outputs);
}

void Interpreter::run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs, const RunEvents& events) {
  impl_->run(inputs, outputs, &events);
}

void Interpreter::set_communicator(Communicator* c) { impl_->comm = c; }
const Program& Interpreter::program() const { return impl_->prog; }
size_t Interpreter::arena_bytes() const { return impl_->arena_bytes; }
MemoryPlan Interpreter::memory() const { return impl_->memory(); }

MemoryPlan Interpreter::Impl::memory() const {
  MemoryPlan m;
  m.arena = arena_bytes;
  m.statics = static_bytes;
  m.tiles = tile_bytes;
  for (const NamedValue& in : prog.inputs) m.inputs += prog.type(in.value).bytes();
  for (const NamedValue& out : prog.outputs) m.outputs += prog.type(out.value).bytes();
  return m;
}

MemoryPlan plan_memory(const Program& p, const InterpreterOptions& o) {
  return Interpreter::Impl(p, o, /*plan_only=*/true).memory();
}
int Interpreter::fused_groups() const { return static_cast<int>(impl_->groups.size()); }
int Interpreter::fused_equations() const { return impl_->fused_eqns; }
int Interpreter::adamw_groups() const {
  return static_cast<int>(std::count_if(impl_->groups.begin(), impl_->groups.end(), [](const auto& g) { return g->adamw.on; }));
}
int Interpreter::jit_loops() const {
  int n = 0;
  for (const auto& g : impl_->groups) n += g->jit_loops;
  return n;
}
int Interpreter::dot_pairs() const { return static_cast<int>(impl_->dot_pairs.size()); }
int Interpreter::outputs_in_place() const { return impl_->last_in_place; }
int Interpreter::outputs_via_copy() const { return impl_->last_via_copy; }
int Interpreter::own_steps(Op op) const {
  int n = 0;
  for (const Step& s : impl_->steps) {
    if (s.group != nullptr) continue;
    if (s.pair) {
      for (int k = 0; k < 2; ++k) n += impl_->prog.eqns[static_cast<size_t>(s.pair[k].eqn)].op == op;
    } else if (impl_->prog.eqns[static_cast<size_t>(s.eqn)].op == op) {
      ++n;
    }
  }
  return n;
}

std::vector<Array> run(const Program& p, const std::vector<Array>& inputs) {
  return Interpreter(p).run(inputs);
}

std::vector<Array> run(const Program& p, const std::vector<Array>& inputs, const InterpreterOptions& o) {
  return Interpreter(p, o).run(inputs);
}

}  // namespace capstep::host
