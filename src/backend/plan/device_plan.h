// The memory plan of a verified Program: where every value lives during one
// step, computed once when the Program is compiled, by one planner for every
// backend (plan_memory below): the CUDA backend plans the device's memory with
// it, the host interpreter its arena (PlanOptions says what differs). Pure C++
// (no CUDA), so that it is unit-tested on machines without a GPU.
//
// Three device allocations ("spaces"):
//   inputs   one resident region per Program input, never reused: what the
//            caller uploads stays there from step to step (lane 3).
//   statics  constant and iota results, filled once at compile time; equal
//            ones (op, type, literal, iota axis) share one location.
//   arena    every other value, and per-equation scratch; two buffers share
//            bytes only when their lifetimes do not overlap.
// The host has statics and an arena too; its inputs and outputs are the
// caller's Arrays (PlanOptions::caller_arrays).
// A reshape moves no bytes: its result is a view of its operand's buffer (the
// operand's "root"), and the root's lifetime covers every view's reads. Every
// value's home, root, lifetime and place is one ValuePlan (below).
//
// Donation (Program::aliases, output o -> input i): the output's producing
// equation writes straight into input i's region ("direct write") when the
// planner can prove that nothing reads input i after that equation (a read by
// that same equation is allowed only for an elementwise op with equal element
// widths, which reads index k before writing index k). Otherwise the output is
// computed into the arena and copied into input i's region at the end of the
// step (a "copy-back"); Plan::notes says which alias took that path and why.
// An output that is the old value of an input overwritten by a copy-back is
// first saved into the arena (a "snapshot"), so every output reads back as the
// Program defines it. The end-of-step copies run in end_copies order: all
// snapshots, then all copy-backs.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "capstep/ir.h"

namespace capstep::plan {

constexpr size_t kDeviceAlign = 256;

enum class Space : unsigned char { inputs, statics, arena };
const char* space_name(Space s);

struct Loc {
  Space space = Space::arena;
  size_t offset = 0;  // bytes from the start of the space; a multiple of PlanOptions::align
  bool operator==(const Loc& o) const { return space == o.space && offset == o.offset; }
};

// Where a value lives: the one vocabulary of every backend's memory plan, each
// value's ValuePlan::home. Two homes belong to one backend each (donated:
// the device; output: the host); the others mean the same on both.
enum class Home : unsigned char {
  input,     // a Program input: its resident region on the device; on the host
             // the caller's input Array, read in place (its address set per run)
  statics,   // constant / iota: filled once when the Program is compiled
  arena,     // an equation's result in a buffer of its own in the arena, which
             // it shares only with buffers whose lifetimes do not overlap
  donated,   // device: an equation's result written straight into an input's
             // region (Program::aliases; see "Donation" above)
  output,    // host: an equation's result written straight into the caller's
             // Array of a Program output (its address set per run), so that
             // nothing is copied out (PlanOptions::caller_arrays). The host's counterpart of donated: when
             // the caller passes an input's Array as that output's Array, the
             // result is written over the input where the plan allows it
  view,      // no buffer of its own, nothing moved: the bytes of `root`. A
             // reshape; a transpose (on the device also an f32 -> bf16 convert)
             // whose readers, all dot_generals, read its operand in place
             // (PlanOptions::view); on the host also a transpose written in its
             // layout by the dot_general it reads, a convert to its own dtype, a
             // broadcast or transpose that moves nothing, and an elementwise
             // result computed in place over an operand read for the last time
             // (PlanOptions::in_place)
  tile,      // a fused group's value that nothing outside the group reads: no
             // buffer, only the group's registers (device) or its scratch tiles
             // (host): PlanOptions::internal
};
const char* home_name(Home h);

// The facts a memory plan holds about one value: one table of them, indexed by
// value id (Plan::values). Equations are those of the Program as it runs (fused:
// in the fused order); E = number of equations stands for "after the last
// equation" (outputs, and the end-of-step copies).
struct ValuePlan {
  Home home = Home::arena;
  Loc loc;             // resolved address (a view has its root's). With
                       // PlanOptions::caller_arrays (host) only arena and statics
                       // values have one; inputs, outputs, views and tiles keep the default
  int root = -1;       // value whose buffer holds the bytes (itself unless a view)
  int input = -1;      // Home::input / Home::donated, and a view of one: which input
  int def = -1;        // defining equation; -1 for inputs
  // Per root (a view's stays -1): the last equation that reads it through any
  // view, a fused kernel's or group's reads counting at its span's last; E for
  // outputs; -1 when nothing reads it. A buffer also lives over its writer's
  // span, which the arena packer adds (a result nobody reads still gets
  // written). A buffer that a result is computed in place over lives to that
  // result's last reader (PlanOptions::in_place).
  int last = -1;
  size_t bytes = 0;
};

struct EndCopy {
  enum Kind : unsigned char { snapshot, copy_back } kind = copy_back;
  Loc from, to;
  size_t bytes = 0;
  int output = -1;     // the output this copy serves
  int input = -1;      // copy_back: the input written; snapshot: the input saved
};

struct Plan {
  std::vector<ValuePlan> values;       // per value id
  std::vector<Loc> input_loc;          // per input (Space::inputs)
  std::vector<Loc> output_loc;         // per output: where it is read after the step
  std::vector<std::vector<Loc>> scratch_loc;  // per equation: one per entry of PlanOptions::eqn_scratch[e]
  std::vector<EndCopy> end_copies;     // snapshots first, then copy-backs
  std::vector<std::string> notes;      // one line per alias that is not a direct write
  std::vector<int> donated_input;      // per output: the input written directly, or -1
  std::vector<char> output_direct;     // per output: computed in the caller's Array (its root's
                                       // Home::output; PlanOptions::caller_arrays), else 0
  size_t inputs_bytes = 0, statics_bytes = 0, arena_bytes = 0;
  size_t total_bytes() const { return inputs_bytes + statics_bytes + arena_bytes; }
  int num_eqns = 0;
};

// What differs between the backends' plans, and a fused executor's kernels
// (src/backend/plan/fusion.h). Every vector is empty (not used) or one entry
// per equation or per value, as said. The device's options come from
// memory_options (kernel_plan.h); the host interpreter's from its constructor.
struct PlanOptions {
  // Offsets and sizes in every space are multiples of `align`: kDeviceAlign on
  // the device, 64 bytes (a cache line, kArenaAlign) in the host interpreter.
  size_t align = kDeviceAlign;
  // Per equation: the scratch buffers equation e needs while it runs (the
  // device's dot_general transposes and attention_grad's lse and D; the host's
  // GEMM packing and bf16 reductions' accumulators, up to two). Each lives over
  // e's span; Plan::scratch_loc[e][k] is entry k's place.
  std::vector<std::vector<size_t>> eqn_scratch;
  // Per equation: `span[e]` = [first, last] of the equations that run together
  // with e (a fused kernel, a host fused group, two host dot_generals run side
  // by side). Every read by e counts as a read at `last` and every result of e
  // is live from `first`, since all of them happen during the one kernel or
  // step. A donated output may share its input's bytes inside a span only when
  // every reader of that input in the span is elementwise with equal widths
  // (the same thread reads element k of every operand before writing element k).
  std::vector<std::pair<int, int>> span;
  // Per value: v may live in its fused group's registers (device) or scratch
  // tiles (host) only, and gets no buffer (a result that would have an arena
  // buffer gets Home::tile).
  std::vector<char> internal;
  // Per equation (host): the fused group e runs in, -1 outside one. Given, an
  // internal value becomes a tile only when it is made in a group and nothing
  // outside that group reads it (through any view) and it is no output: the
  // host marks internal every value of its group's size and leaves this check
  // to the planner, which knows the roots. (The device's internal flags leave
  // out every value read outside its group already: plan::internal_values.)
  std::vector<int> group;
  // Per value (host): a constant whose every reader reads only its first N
  // elements (a splat constant read by fused groups' tiles, which read the
  // same values wherever they lie): N, fewer than its elements, of which
  // the statics then hold only those; 0 (or empty): all of them. Equal
  // constants share one copy of the most any of them needs. (Its
  // ValuePlan::bytes stay the type's.)
  std::vector<int64_t> static_elems;
  // Per equation: e reads its operands more than once during its kernel (a row
  // group's passes), so no output it writes may share a buffer with an input it
  // reads.
  std::vector<char> no_in_place;
  // Per equation: a span may hold several independent parts run by different
  // threads (the sinks kernel); a read in another part than the write is never
  // in place.
  std::vector<int> part;
  // Per equation: e's result is a view of its operand's buffer, as a reshape's
  // always is: no buffer of its own, its reads are its root's. A transpose (read
  // in place by the GEMMs that read it, or written in its layout by the GEMM it
  // reads), a convert, a broadcast_in_dim that moves nothing. Every one but a
  // convert holds its operand's bytes (the device's f32 -> bf16 convert is read
  // by GEMM kernels that round on load); the planner checks it.
  std::vector<char> view;
  // Host: whether equation e's kernel may write its result over operand k,
  // reading each element before it writes the same element (its elementwise
  // kernels). Asked only for an equation whose span is itself alone. When
  // that operand's buffer (its root) is an arena buffer of the result's size
  // whose last reader is e, the result takes it: a view of that root, which
  // then lives to the result's last reader. Equations in order, so a chain of
  // them shares one buffer. Given `group`, an elementwise result made in a
  // host fused group (whose members run in order on each tile), no program
  // output, likewise takes the buffer of a value made before the group that
  // the group reads for the last time, of its size, when every member reading
  // that value comes no later than e and reads the tile's own elements
  // (elementwise of equal widths, or a sum or maximum of them; never a
  // broadcast or transpose). The device's kernels write fresh buffers
  // (donation aside).
  std::function<bool(int eqn, int operand)> in_place;
  // Host: inputs and outputs are the caller's Arrays, their addresses set per
  // run. No inputs space and no donation (Program::aliases are the caller's to
  // honour by passing one Array as input and output; the host decides per run
  // whether an output may be written over it); each output's root that would
  // be an arena buffer of the output's size is computed straight into the
  // output's Array instead (Home::output, Plan::output_direct; the first such
  // output of a root). Only arena and statics values get a loc: every other
  // address is its root's slot, set once or per run.
  bool caller_arrays = false;
};
Plan plan_memory(const Program& p, const PlanOptions& o = {});

// A readable summary: sizes of each space, the donated and copied aliases.
std::string describe(const Program& p, const Plan& plan);

// The arena packer of every backend (greedy, largest first, lowest free
// offset): buffers with overlapping [first, last] get disjoint [offset,
// offset+bytes), each offset and size rounded up to `align` (kDeviceAlign on
// the device, 64 bytes in the host interpreter and its fused groups' tiles).
struct Interval {
  size_t bytes = 0;
  int first = 0, last = 0;
};
std::vector<size_t> pack(const std::vector<Interval>& buffers, size_t align, size_t* total);

}  // namespace capstep::plan
