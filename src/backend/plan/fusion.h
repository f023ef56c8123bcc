// Fusion grouping: partitions a verified Program's equations into groups that
// a backend runs as one pass over memory each: a step's speed on a GPU is
// mostly its passes over memory (each launch reads its inputs and writes its
// outputs once), so fewer, larger groups are faster. Pure C++, so that the
// grouping is tested on any machine.
//
// Group kinds:
//   loop    a maximal connected set of elementwise ops, broadcast_in_dim and
//           transpose, every one producing the same number of elements N. One
//           kernel computes, per output element i, every member's value at i:
//           an elementwise member reads its operands at i; a broadcast_in_dim
//           whose operand has fewer elements reads it through the broadcast's
//           index map (plan::broadcast_walk), and that operand is always
//           produced outside the group; a transpose reads its operand, always
//           produced outside the group, through plan::transpose_walk. The
//           group writes only `outputs`.
//   row     reductions over trailing axes ("rows" of `cols` elements, R = `rows`
//           of them) with their elementwise producers and consumers: members
//           of N = R*C elements ("full", element i is row i / C) and of R
//           elements ("row" members, one per row). A full member reads a row
//           member only through a broadcast_in_dim onto the leading axes (the
//           softmax / RMSNorm / cross-entropy pattern). A small dot_general
//           whose result rows are the group's rows (its rhs free elements
//           are C) may be a full member: each element a dot product computed
//           in place (scores and their softmax, a projection and the RMSNorm
//           after it). One kernel: a warp per row, one pass over the row per
//           chain of reductions.
//   col     reductions over leading axes (R = `rows` reduced rows of K = `cols`
//           kept elements) with their elementwise producers (N elements) and
//           the elementwise consumers of the K results (K elements), e.g. the
//           gradient of a gain and its AdamW update), any R. One kernel:
//           each block takes tiles of 8 kept elements and its 32 row lanes
//           share the rows, combined in a fixed order (kernel_source.h).
//   gemm    one dot_general small enough for a generated GEMM kernel
//           (Target::gemm_max_macs), reading its operands through any
//           reshapes and "view" transposes in place (view_layout.h), with the
//           elementwise consumers of its result (loop members of its element
//           count: an epilogue computed from each result in registers), and
//           other dot_generals of the same result type that the epilogue
//           combines with it (dq Wq' + dk Wk' + dv Wv': one kernel).
//           A gather_rows may be a member of any of these (loop geometry: one
//           element per output element) when its table and indices are made
//           outside the group: element i reads table row idx[i / C].
//   scatter one scatter_add_rows whose work (output elements x index rows) is
//           at most kMaxScatterWork, as a generated kernel: a thread per output
//           element adds, in index order, the update rows whose index is its
//           row (no atomics: the same sums in the same order as the host).
//   single  one equation run as before (other dot_generals, gathers of a
//           table made in the group, larger scatters, other reductions):
//           never fused across.
//   free    constant, iota (filled once), reshape (a view), and a transpose
//           whose every reader is a gemm group, directly or through reshapes
//           (a view too: Fused::view): no launch.
//           A transpose whose every reader is a library GEMM (a dot_general of
//           no gemm group) that reads it in place is a view as well
//           (Target::library_gemm_reads_transpose), but its group of one keeps
//           the kind and place the grouping gives it (loop; single without
//           loops): the backend runs no step for it.
//           A fused group reads them like any outside value; a splat constant
//           is inlined into the kernel as a literal, except as an operand of a
//           dot_general or a gather_rows, which index its buffer.
//
// A merge is refused when it would make a cycle: no path may leave a group
// through an outside equation and come back into it. The groups are ordered by
// level (launches on the longest path to them); the fused groups of one level
// form a wave, one launch. Fused groups that only produce Program outputs (the
// AdamW update of each parameter) are "sinks": they share the last level
// (Target::sinks_last).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/plan/view_layout.h"
#include "capstep/ir.h"
#include "capstep/transforms.h"

namespace capstep::plan {

enum class GroupKind : unsigned char { loop, row, col, gemm, scatter, single, free };

// The largest scatter_add_rows (output elements x index rows) that runs as a
// generated scatter group; larger ones use the library kernel (atomics).
constexpr int64_t kMaxScatterWork = int64_t{1} << 28;
// Whether equation e is a scatter_add_rows that a scatter group runs.
bool scatter_group_eqn(const Program& p, const Eqn& e);
const char* group_kind_name(GroupKind k);

struct Group {
  GroupKind kind = GroupKind::single;
  int first = 0, last = 0;     // equations [first, last] of Fused::program (contiguous)
  int64_t numel = 0;           // loop: elements of every member's result; row/col: N, the full elements
  int64_t rows = 0, cols = 0;  // row: R rows of C = cols; col: R = rows reduced rows of K = cols kept elements
  bool sink = false;           // a fused group none of whose values is read by another group
  int wave = -1;               // fused groups: the wave (Fused::waves) it runs in
  std::vector<int> inputs;     // values read from outside the group, in first-read order
  std::vector<int> outputs;    // members' values read outside the group or Program outputs, in equation order
  // A loop group that is exactly one adamw equation's expansion (its index in
  // Fused::adamw): every equation of the group, constants aside, is one of
  // that update's, and every one of them is here. -1: none. A backend may run
  // such a group as its own AdamW kernel (the host does).
  int adamw = -1;
  // With adamw: the group starts with two converts that round the update's
  // gradient to bf16 and back (mixed_precision_bf16's weight cotangent), then
  // holds exactly the update. The host runs it as its AdamW kernel reading the
  // gradient rounded.
  bool adamw_rounds_g = false;
  int size() const { return last - first + 1; }
};

// The f32 gradient group g's update reads (g.adamw >= 0, x its record): the
// update's own, or with adamw_rounds_g the value g's first equation rounds.
inline int adamw_gradient(const Program& p, const Group& g, const ExpandedAdamW& x) {
  return g.adamw_rounds_g ? p.eqns[static_cast<size_t>(g.first)].inputs[0] : x.g;
}

// Program -> Program: each broadcast_in_dim of a value of more than one
// element to at least min_elems elements that an equation reads more than
// `near` equations after it is made gets a copy made just before that reader
// (one copy for readers within `near` of each other), so that the reader's
// fusion group computes it from the small value instead of the broadcast
// being held in a buffer of its full size until then (softmax's row sums
// broadcast over [B, H, T, T], read again in the backward; the causal mask,
// read by every block). The same values; an original nothing reads any more
// is dropped.
Program copy_far_broadcasts(const Program& p, int64_t min_elems, int near);

struct Fused {
  Program program;             // the input's equations reordered so that each group is contiguous
  // The program had adamw equations (ir.h): `program` is expand_adamw's, and
  // this its record, one entry per parameter's update (value ids of `program`).
  std::vector<ExpandedAdamW> adamw;
  std::vector<Group> groups;   // in execution order (a topological order of the groups)
  std::vector<int> group_of;   // per equation of `program`: its group
  std::vector<int> old_index;  // per equation of `program`: its index in the original Program
  std::vector<char> view;      // per equation of `program`: a reshape, a view transpose (a gemm group's or a library GEMM's operand) or a bf16 operand view (no buffer of its own)
  // Consecutive fused groups of one level: independent of each other, they run
  // as one kernel (each group on blocks of its own); a wave of one group is
  // that group's kernel.
  std::vector<std::vector<int>> waves;
  int launches_before = 0;     // equations that launch work one by one (all but free ones)
  int launches_after = 0;      // single groups + fused groups that write something
  std::string summary() const; // "839 equations: 700 launches -> 210 (120 loop groups, ...)"
};

// Whether broadcast_in_dim equation e puts a row value (shape P) onto the
// leading axes of its result, so that element i reads row i / C.
bool row_broadcast(const Program& p, const Eqn& e);

// Whether a member of a fused group (of that geometry) is a "full" member
// (N elements) rather than a row / kept-element one.
bool is_full_member(const Program& p, const Group& g, int eqn);

// The target: what differs between the backends that run a plan — which
// equations may share a kernel and what stays a library call. The grouping is
// one code for every backend (fuse_program); each backend describes itself
// with a Target (host_target, cuda_target) and runs the groups it is given.
// A backend may still run a group's members one by one where its kernels
// cannot take the group whole (the host's host_fusable: 2-byte elements,
// a member read at other indices); the groups themselves do not change.
struct Target {
  bool loops = true;           // false: every equation a group of its own (the unfused baseline)
  // dot_generals (f32 / f64) of at most this many multiply-adds become gemm
  // groups (a generated GEMM kernel with its epilogue); 0: none (every
  // dot_general is a single group, a GEMM library call: OpenBLAS on the host,
  // cuBLAS(Lt) on CUDA)
  int64_t gemm_max_macs = 0;
  // a reshape read only by one loop-geometry equation, between it and a loop
  // member of the same size (transpose -> reshape -> convert, as the bf16
  // step has before its GEMM operands), becomes a member of their group (the
  // same flat index: a register, no buffer) instead of a view that splits them
  bool fold_reshapes = false;
  // a convert f32 -> bf16 whose every reader is a gemm group (directly or
  // through reshapes and transposes, which are then views too) becomes a view
  // as well: the generated GEMM reads the f32 value and rounds each element
  // to bf16 as it loads it (the same values a stored bf16 copy would hold),
  // so no kernel stores the bf16 operand
  bool bf16_operand_views = false;
  // a broadcast_in_dim to more elements joins its readers' groups before its
  // operand's: merged with its operand's group only once every equation has
  // had its turn, so that a copy of it made for a reader far away
  // (copy_far_broadcasts) is computed in that reader's group rather than
  // held from its operand's (the host, which holds a group's escaping
  // values in buffers)
  bool broadcasts_join_readers_first = false;
  // the sinks share the last level (one wave of launches for every
  // parameter's update on a GPU); false: each runs at its own longest path's
  // level like any group, so that what it reads (the operands of a bias's or
  // a norm gain's gradient, a product of two [B, T, D] values summed over the
  // rows) is not held to the end of the step (the host, which runs a group
  // at a time)
  bool sinks_last = true;
  // Library GEMMs that read an operand through a transpose without copying
  // it: given dot_general `dot` of p, which of its operands (0 lhs, 1 rhs)
  // and the transpose equation that makes it, whether the backend's library
  // GEMM reads the transpose's operand with the dimension numbers mapped
  // through the permutation, with no transposed copy of it. A transpose (no Program output) whose every
  // reader is such a dot_general, directly, is a view (Fused::view): it moves
  // nothing. Its group (always of one equation) and the order of the groups
  // stay what they are without the rule. Computed with `loops` false too, so
  // that an unfused backend gets the same views. Empty: no library GEMM reads
  // through a transpose (each is a copy). The rule is the backend's (the
  // host's: its GEMM planning, src/backend/host/interpreter_program.cpp), hence a
  // function.
  std::function<bool(const Program& p, const Eqn& dot, int side, const Eqn& transpose)> library_gemm_reads_transpose;
};
// The host interpreter: loop, row and col groups run tile by tile in L1
// (InterpreterOptions::tile_elems), every dot_general a library call,
// reshapes views. Without library_gemm_reads_transpose, which depends on the
// host's GEMM planning: the interpreter adds it (interpreter_target in
// src/backend/host/interpreter_program.cpp), so this is the host's grouping with
// every transpose a copy.
Target host_target();
// The CUDA backend: with `fuse`, small dot_generals as generated GEMMs
// (gemm_max_macs) reading transposes, reshapes and bf16 rounding through
// views, and reshapes folded into loop groups; without, one kernel an
// equation (the baseline).
Target cuda_target(bool fuse, int64_t gemm_max_macs);
// A program with adamw equations (ir.h) is planned as expand_adamw(p): `program`
// and old_index are then the expansion's, Fused::adamw its record, and each
// loop group that is one whole update says so (Group::adamw): AdamW is known
// by name to the planner, never by the shape of its equations.
Fused fuse_program(const Program& p, const Target& t);
// The same for a program that its caller has expanded already: `expanded` =
// expand_adamw(p, &updates).
Fused fuse_expanded(const Program& expanded, std::vector<ExpandedAdamW> updates, const Target& t);
// The host's grouping (loops) or none.
inline Fused fuse_program(const Program& p, bool loops = true) {
  Target t = host_target();
  t.loops = loops;
  return fuse_program(p, t);
}

// Where the elements of value x lie: in the buffer of `root`, through the
// reshapes and view transposes (view[e] per equation of p) that make x
// (row-major when x has a buffer of its own); nullopt when that is no strided
// layout.
struct ViewOf {
  int root = -1;
  Layout layout;
  bool bf16_round = false;  // a convert f32 -> bf16 in the chain: the root is f32, each element rounded to bf16 on load
};
std::optional<ViewOf> view_of(const Program& p, const std::vector<char>& view, int x);

bool fused_kind(GroupKind k);  // loop, row, col, gemm or scatter: one generated kernel

// Per equation of f.program: [first, last] of its group when that group runs as
// one kernel (a fused group; all the sinks together are one kernel), else
// [d, d]; for plan_memory's spans.
std::vector<std::pair<int, int>> group_spans(const Fused& f);

// Values produced inside fused groups that are never written (no buffer needed).
std::vector<char> internal_values(const Fused& f);

}  // namespace capstep::plan
