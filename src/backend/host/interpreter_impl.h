// The host Interpreter's state (Interpreter::Impl) and what the files that
// build and run it share; private to src/backend/host/interpreter*.cpp.
// The constructor runs its phases in the order Impl lists them; each file
// holds one job:
//   interpreter.cpp             the constructor's phase list, run() and the
//                               public Interpreter API
//   interpreter_program.cpp     the program that runs and its order (AdamW
//                               expanded, fused groups, all_reduce packs
//                               gathered) and the transposes that dot_generals
//                               read or write in place
//   interpreter_steps.cpp       one Step per equation (its kernel, views, GEMM
//                               plan and scratch) and the fused groups that
//                               run tile by tile
//   interpreter_buffers.cpp     the memory plan, the fused groups' members and
//                               tiles, the slots, and which outputs may be
//                               written over inputs
//   interpreter_schedule.cpp    dot_generals paired side by side, the Steps in
//                               order, and the RunEvents each step raises
//   interpreter_all_reduce.cpp  all_reduce steps and their packs (one message
//                               per run of them)
#pragma once

#include <array>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "backend/host/fused.h"
#include "backend/host/memory_plan.h"
#include "backend/host/step.h"
#include "backend/plan/fusion.h"
#include "backend/host/interpreter.h"

namespace capstep::host {

using plan::Home;
using Values = std::vector<plan::ValuePlan>;  // per value id (the plan's table)

// Value v's entry of the table.
inline plan::ValuePlan& of(Values& t, int v) { return t[static_cast<size_t>(v)]; }
inline const plan::ValuePlan& of(const Values& t, int v) { return t[static_cast<size_t>(v)]; }

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t{kArenaAlign}); }
};
using Block = std::unique_ptr<void, AlignedFree>;

inline Block alloc_block(size_t bytes) {
  if (bytes == 0) return Block(nullptr);
  return Block(::operator new(bytes, std::align_val_t{kArenaAlign}));
}

inline size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Shared by the phases; each is described where it is defined.
bool fold_transpose_dims(Attrs& at, int side, const std::vector<int64_t>& perm);  // interpreter_program.cpp
void all_reduce_step(const Step& s, void* const* slots);  // interpreter_all_reduce.cpp
void gather_packs(plan::Fused& f, const std::vector<int>& pack_of_old);  // interpreter_all_reduce.cpp

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

  // plan_only: the constructor stops once the sizes are known (host::memory_needed):
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
  std::vector<int64_t> splat_static_elems(const Build& b) const;
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
  // each scratch slot's offset in the arena; and the elements each constant
  // is filled with (PlanOptions::static_elems: 0 for all)
  Values values;
  std::vector<int64_t> static_elems;
  std::vector<size_t> scratch_offset;
  std::vector<int> step_at;        // per equation: the step that runs it (order_steps)
};

}  // namespace capstep::host
