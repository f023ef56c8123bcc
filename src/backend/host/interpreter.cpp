// capstep::host::Interpreter: verifies a Program, plans its memory once and runs
// it with one precomputed Step per equation.
//
// Where each value lives, decided at construction by the memory planner of
// every backend (backend/plan/device_plan.h: plan::plan_memory, with the host's
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
//
// The constructor's phases and what they share are in interpreter_impl.h,
// which lists the file that holds each job.
#include "backend/host/interpreter.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <sys/mman.h>
#include <unistd.h>

#include "backend/host/interpreter_impl.h"
#include "backend/host/parallel.h"
#include "capstep/transforms.h"

namespace capstep::host {

InterpreterOptions InterpreterOptions::defaults() {
  return InterpreterOptions{};
}

// Plans the program once: a short sequence of phases, each deciding one thing
// that the ones after it read (Build). plan_only stops once every size is
// known (host::memory_needed).
Interpreter::Impl::Impl(Program p, const InterpreterOptions& opt, bool plan_only) : options(opt) {
  Build b;
  expand_and_order(std::move(p), opt, b);
  fold_transposes(b);
  plan_steps(b);
  choose_fused_groups(b);
  pair_dot_generals(opt, b);
  plan_buffers(b);
  make_fused_groups(opt, plan_only, b);
  // Every size is known: host::memory_needed() stops here, before allocating them.
  if (plan_only) return;
  allocate_and_set_slots(b);
  plan_outputs_over_inputs(b);
  order_steps(b);
  pack_all_reduces(b);
  plan_run_events(b);
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

MemoryPlan memory_needed(const Program& p, const InterpreterOptions& o) {
  return Interpreter::Impl(p, o, /*plan_only=*/true).memory();
}

Program recompute_where_smaller(const Program& grad, const InterpreterOptions& o) {
  Program r = recompute_in_backward(grad);
  return memory_needed(r, o).arena < memory_needed(grad, o).arena ? r : grad;
}
// The whole pages inside the arena block (its first partial page, where the
// allocator keeps its header, left alone) go back to the system; the next
// run faults them in again, zero-filled, and writes every value it reads
// (the arena holds nothing from one run to the next).
size_t Interpreter::release_arena() {
  if (!impl_->arena || impl_->arena_bytes == 0) return 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(impl_->arena.get());
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + impl_->arena_bytes) / page * page;
  if (last <= first) return 0;
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
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
