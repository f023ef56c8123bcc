// The device memory plan of a verified Program: where every value lives on the
// device during one step, computed once when the Program is compiled. Pure C++
// (no CUDA), so that it is unit-tested on machines without a GPU.
//
// Three device allocations ("spaces"):
//   inputs   one resident region per Program input, never reused: what the
//            caller uploads stays there from step to step (lane 3).
//   statics  constant and iota results, filled once at compile time.
//   arena    every other value, and per-equation scratch; two buffers share
//            bytes only when their lifetimes do not overlap.
// A reshape moves no bytes: its result is a view of its operand's buffer (the
// operand's "root"), and the root's lifetime covers every view's reads. Every
// value's home, root, lifetime and place is one ValuePlan (below), the table
// the host interpreter plans with too.
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
  size_t offset = 0;  // bytes from the start of the space; a multiple of kDeviceAlign
  bool operator==(const Loc& o) const { return space == o.space && offset == o.offset; }
};

// Where a value lives: the one vocabulary of every backend's memory plan (the
// device's here, the host interpreter's in src/backend/host/interpreter.cpp),
// each value's ValuePlan::home. Two homes belong to one backend each (donated:
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
             // nothing is copied out. The host's counterpart of donated: when
             // the caller passes an input's Array as that output's Array, the
             // result is written over the input where the plan allows it
  view,      // no buffer of its own, nothing moved: the bytes of `root`. A
             // reshape; a transpose (on the device also an f32 -> bf16 convert)
             // whose readers, all dot_generals, read its operand in place
             // (PlanOptions::view); on the host also a transpose written in its
             // layout by the dot_general it reads, a convert to its own dtype, a
             // broadcast or transpose that moves nothing, and an elementwise
             // result computed in place over an operand read for the last time
  tile,      // a fused group's value that nothing outside the group reads: no
             // buffer, only the group's registers (device: PlanOptions::internal)
             // or its scratch tiles (host)
};
const char* home_name(Home h);

// The facts a memory plan holds about one value: one table of them, indexed by
// value id, in both backends (Plan::values here; the host interpreter plans
// with the same table). Equations are those of the Program as it runs (fused:
// in the fused order); E = number of equations stands for "after the last
// equation" (outputs, and the end-of-step copies).
struct ValuePlan {
  Home home = Home::arena;
  Loc loc;             // resolved address (a view has its root's). The host sets it
                       // for arena and statics values only (offsets at kArenaAlign);
                       // its inputs, outputs, views and tiles keep the default
  int root = -1;       // value whose buffer holds the bytes (itself unless a view)
  int input = -1;      // Home::input / Home::donated, and a view of one: which input
  int def = -1;        // defining equation; -1 for inputs
  // Per root (a view's stays -1): the last equation that reads it through any
  // view, a fused kernel's or group's reads counting at its span's last; E for
  // outputs; -1 when nothing reads it. A buffer also lives over its writer's
  // span, which the arena packer adds (a result nobody reads still gets
  // written). The host extends it over the steps that run beside a reader
  // (dot pairs) and to the last reader of a result computed in place over it.
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
  std::vector<Loc> scratch_loc;        // per equation (meaningful when scratch was asked)
  std::vector<EndCopy> end_copies;     // snapshots first, then copy-backs
  std::vector<std::string> notes;      // one line per alias that is not a direct write
  std::vector<int> donated_input;      // per output: the input written directly, or -1
  size_t inputs_bytes = 0, statics_bytes = 0, arena_bytes = 0;
  size_t total_bytes() const { return inputs_bytes + statics_bytes + arena_bytes; }
  int num_eqns = 0;
};

// `eqn_scratch[e]` (optional; empty or one per equation) is the scratch that
// equation e needs while it runs (dot_general's transposed operands).
Plan plan_device_memory(const Program& p, const std::vector<size_t>& eqn_scratch = {});

// For a fused executor (src/backend/plan/fusion.h): equations that run as one
// kernel. `span[e]` = [first, last] of the equations that run together with e
// (empty: each on its own). Every read by e counts as a read at `last` and every
// result of e is live from `first`, since all of them happen during the one
// kernel. A donated output may share its input's bytes inside a span only when
// every reader of that input in the span is elementwise with equal widths (the
// same thread reads element k of every operand before writing element k).
// `internal[v]` (empty or one per value): v lives in registers only and gets no
// buffer (a result that would have an arena buffer gets Home::tile).
// `no_in_place[e]` (empty or one per equation): e reads its operands more
// than once during its kernel (a row group's passes), so no output it writes
// may share a buffer with an input it reads. `part[e]` (empty or one per
// equation): a span may hold several independent parts run by different
// threads (the sinks kernel); a read in another part than the write is never
// in place.
struct PlanOptions {
  std::vector<size_t> eqn_scratch;
  std::vector<std::pair<int, int>> span;
  std::vector<char> internal;
  std::vector<char> no_in_place;
  std::vector<int> part;
  // `view[e]` (empty or one per equation): e's result is a view of its
  // operand's buffer, as a reshape's always is (a transpose read in place by
  // generated GEMM kernels): no buffer of its own, its reads are its root's.
  std::vector<char> view;
};
Plan plan_device_memory(const Program& p, const PlanOptions& o);

// A readable summary: sizes of each space, the donated and copied aliases.
std::string describe(const Program& p, const Plan& plan);

// The arena packer of every backend (greedy, largest first, lowest free
// offset): buffers with overlapping [first, last] get disjoint [offset,
// offset+bytes), each offset and size rounded up to `align` (kDeviceAlign on
// the device, 64 bytes in the host interpreter).
struct Interval {
  size_t bytes = 0;
  int first = 0, last = 0;
};
std::vector<size_t> pack(const std::vector<Interval>& buffers, size_t align, size_t* total);

}  // namespace capstep::plan
