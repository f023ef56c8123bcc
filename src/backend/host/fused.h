// Fused host execution: the fusion groups that the GPU backend forms
// (backend/plan/fusion.h: loop, row and col groups) run on the host as one
// pass over memory each. A group is evaluated in tiles: every member runs on
// the tile before the next tile starts, so a value made and consumed inside
// the group ("tile-resident") never exists as a whole array: it lives in a
// small scratch area (a tile of it), which stays in the L1/L2 cache.
//
//   loop  tiles of `tile` elements of the group's N elements
//   row   tiles of whole rows (max(1, tile / C) rows of C elements): each
//         member runs on those rows' elements ("full" members) or on those
//         rows' one value each ("row" members: the reductions' results);
//         softmax, RMSNorm and cross-entropy rows in one pass
//   col   tiles of whole reduced rows (max(1, tile / K) rows of K kept
//         elements) for the members of N elements, the reductions adding each
//         tile's rows into their K results; then the members of K elements once
//
// Every member runs the very kernel the unfused interpreter runs on the same
// elements in the same order (elementwise kernels on a sub-range; a row's
// reduction in the order of the unfused reduce; a column's reduction row by
// row as the unfused reduce does), so fused and unfused results are bitwise
// equal. A group whose shape falls outside these cases (a member reading
// another member's value at a different index other than a row broadcast)
// runs unfused, one step per equation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/host/loop_jit.h"
#include "backend/host/step.h"
#include "backend/plan/fusion.h"
#include "backend/plan/device_plan.h"
#include "capstep/transforms.h"

namespace capstep::host {

// Where a member reads or writes one operand within a tile.
struct FusedOperand {
  int value = -1;        // slot of the value (the interpreter's slot table)
  int64_t tile_off = -1; // >= 0: tile-resident, at this byte offset of the group's scratch
  bool small = false;    // of the row/kept domain (R rows or K kept elements), not the N domain
  bool splat = false;    // every element the same (a splat constant): each tile reads the first ones
  size_t esz = 0;        // bytes per element
  DType dtype = DType::f32;
  int root = -1;         // the value whose buffer it is (aliases resolved)
};

struct JitSegment;

struct FusedMember {
  // jit: a run of kernel members compiled to one loop (loop_jit.h, JitSegment)
  enum class Kind : uint8_t { kernel, strided, row_bcast, reduce_row, reduce_col, jit };
  Kind kind = Kind::kernel;
  bool small = false;     // its result is of the small domain (row value, kept element)
  bool after = false;     // col groups: runs once after every tile (a member of K elements)
  bool hoisted = false;   // a broadcast of one value into a tile: filled once, before the tiles
  int64_t fill = 0;       // hoisted: elements filled (the tile)
  int nin = 0;
  FusedOperand in[3], out;
  Step step;              // kernel: the interpreter's kernel and Step with in = {0,1,2}, out = 3; n per call
  std::vector<Step> part_steps;  // copies of step for parts 1.. of the group (each sets its own n)
  Walk view;              // strided: the source walk over the whole result; reduce_row: {R, C} strides {1, 0}
  int64_t cols = 0;       // row_bcast, reduce_row: C; reduce_col: K
  DType dtype = DType::f32;
  bool max = false;       // reduce_*: reduce_max
  Op op = Op::add;        // the equation's op
  std::shared_ptr<JitSegment> jit;  // Kind::jit
};

inline constexpr size_t kMaxJitPtrs = 32;  // pointers a JitSegment's loop may take

// Consecutive f32 or bf16 kernel members (add, subtract, multiply, divide,
// negate, exponential, tanh, and converts between the two: jit_operands) on
// the N domain, compiled to one loop:
// values that only these members read stay in registers; those read later in
// the group, or kept outside it, are stored. Run on the largest multiple of 8
// elements of each tile, and the members themselves on the rest (members, in
// order). In a row group whose rows are a multiple of 8 long, a row broadcast
// (RMSNorm's 1/rms, softmax's max and sum) and a broadcast of a row's worth
// down the rows (a gain) join the loop too, read in place instead of filled
// into a tile first (and stored from the loop where something else reads
// them: the backward pass reads some of RMSNorm's).
struct JitSegment {
  std::unique_ptr<JitCode> code;
  std::vector<FusedOperand> ptrs;    // the loop's pointers, as operands of the tile
  std::vector<char> base;            // per pointer: the value's first element (a col input), not its tile's
  std::vector<FusedMember> members;  // the members it replaces
};

// A loop group that is exactly one parameter's AdamW update (the equations
// expand_adamw wrote for a parameter's adamw equations): run as the host AdamW
// kernel (one loop in registers, the same operations per element, so the same
// bits) instead of its 19 members tile by tile, unless its buffers overlap
// (fused.cpp, run_adamw). Values are slots (value ids); the constants
// and the four per-step scalars are read from their slots' first element.
struct AdamWShortcut {
  bool on = false;
  int p = -1, g = -1, m = -1, v = -1;              // the parameter, its gradient, the two moments
  int p_out = -1, m_out = -1, v_out = -1;          // their new values (the group's results)
  int b1 = -1, c1 = -1, b2 = -1, c2 = -1, eps = -1;  // beta1, 1 - beta1, beta2, 1 - beta2, eps
  int lr = -1, bc1 = -1, bc2 = -1, decay = -1;
  bool round_g = false;  // g (f32) is read rounded to bf16 (plan::Group::adamw_rounds_g)
};

struct FusedGroup {
  plan::GroupKind kind = plan::GroupKind::loop;
  int64_t numel = 0;      // N
  int64_t rows = 0;       // row: R; col: R reduced rows
  int64_t cols = 0;       // row: C; col: K
  int64_t tile = 0;       // loop: elements per tile; row/col: rows per tile
  std::vector<FusedMember> members;  // in equation order
  // Loop and row groups run as `parts` ranges of tiles (parallel.h), each
  // on its own scratch: part i's at scratch + i * scratch_stride. Elementwise
  // members and row reductions give the same result for an element whichever
  // range it falls in, so the results do not depend on the parts. Col groups
  // (sums over rows) run as one part.
  int parts = 1;
  char* scratch = nullptr;           // tile-resident values, set by the interpreter
  size_t scratch_bytes = 0;          // one part's
  size_t scratch_stride = 0;         // scratch_bytes rounded up to cache lines
  AdamWShortcut adamw;               // on: run as one AdamW loop (when its buffers allow)
  int jit_loops = 0;                 // members of Kind::jit
};

// Whether the group [g.first, g.last] of p, which the planner found to be
// exactly one parameter's AdamW update (plan::Group::adamw, an entry of
// `updates`, plan::Fused::adamw), can run as the host AdamW loop: all three
// results wanted, f32 of the group's size, every value it makes but the three
// results (and its constants) tile-resident (Home::tile in `values`, the
// interpreter's plan per value); fills a.
bool match_adamw_group(const Program& p, const plan::Group& g, const std::vector<plan::ValuePlan>& values,
                       const std::vector<ExpandedAdamW>& updates, AdamWShortcut& a);

// Whether the equations [g.first, g.last] of p (a loop, row or col group)
// can run tile by tile; why not in *why. member_steps as in FusedGroupSource.
bool host_fusable(const Program& p, const plan::Group& g, const std::vector<Step>& member_steps,
                  std::string* why = nullptr);

// Runs the group (Step::group) over slots; the Kernel of a group Step.
void run_fused_group(const Step& s, void* const* slots);

// What build_fused_group builds a group from: the group and the interpreter's
// decisions about the program's values, and how the group is to run. Only
// references: it lives for the one call.
struct FusedGroupSource {
  // The group: the equations [group.first, group.last] of `program` (the
  // equations in the order they run); `member_steps[d - group.first]` is the
  // Step the interpreter built for equation d (kernel chosen, views planned).
  const Program& program;
  const plan::Group& group;
  const std::vector<Step>& member_steps;
  // Per value id: the interpreter's plan of it (the value whose buffer it is,
  // root: slot of each value = its value id, views resolved through it; a
  // root whose home is Home::tile is a tile value); per root value: a splat
  // constant (splat); the program's AdamW updates (plan::Fused::adamw), which
  // a group that is one of them names.
  const std::vector<plan::ValuePlan>& values;
  const std::vector<char>& splat;
  const std::vector<ExpandedAdamW>& adamw;
  // How it runs: `tile_elems`, the tile size in elements; `max_parts`, the
  // most parts a loop or row group may run as (host_threads()); `jit`,
  // compile runs of elementwise members (JitSegment) where jit_available().
  struct Options {
    int64_t tile_elems = 0;  // (at least 1 is used)
    int max_parts = 1;
    bool jit = false;
  } options;
};

// Group g's tile at tile_elems elements a tile (at least 1): a loop group's
// elements, a row or col group's rows (whole ones, at least one).
int64_t group_tile(const plan::Group& g, int64_t tile_elems);
// The elements of a splat constant that g's kernel and reduction members read
// from its start on one tile (they read its first elements wherever the tile
// lies): a full-domain operand's tile, or a small one's (a row group's rows
// of the tile; a col group's K kept elements, read once after the tiles).
int64_t splat_read_elems(const plan::Group& g, int64_t tile_elems, bool small);

// Builds the executable group.
FusedGroup build_fused_group(const FusedGroupSource& src);

}  // namespace capstep::host
