// The host interpreter: runs any verified Program on the CPU.
//
// The constructor verifies the Program and computes a memory plan once
// (liveness, buffer reuse in one arena), so that a steady-state run() into
// caller-held outputs allocates nothing. dot_general goes through OpenBLAS.
// bf16 values are 2 bytes (ir/bf16.h): every op on them computes in f32 and
// rounds each stored result to nearest even; bf16 dot_general operands are
// widened to f32 while packed and multiplied by the f32 GEMM (f32
// accumulation), and bf16 reductions accumulate in f32, rounding once.
//
// By default the elementwise work runs fused: the loop, row and column groups
// of the fusion plan (the GPU backend's) each run as one pass over memory,
// tile by tile, with the values made and used inside a group kept in a
// cache-sized scratch tile (src/backend/host/fused.h). Results are bitwise
// those of the unfused interpreter (one pass per primitive), which stays
// selectable: InterpreterOptions::fuse = false.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "capstep/array.h"
#include "capstep/collective.h"
#include "capstep/host_options.h"
#include "capstep/ir.h"

namespace capstep::host {

class Interpreter {
 public:
  explicit Interpreter(Program p);  // InterpreterOptions::defaults()
  Interpreter(Program p, const InterpreterOptions& o);
  ~Interpreter();
  Interpreter(Interpreter&&) noexcept;
  Interpreter& operator=(Interpreter&&) noexcept;

  // Inputs in Program::inputs order. An input of the wrong dtype or shape throws
  // Error naming the input and both types; a gather index out of range throws
  // Error naming the index and its position.
  std::vector<Array> run(const std::vector<Array>& inputs);
  // The allocation-free form: `outputs` is resized/retyped only when needed.
  // An output Array may also be one of the inputs (an in-place update; every
  // input is read before it is overwritten); then `outputs` must already hold
  // one Array per output, since resizing it would move them (Error otherwise).
  // Such an output is computed straight into the Array when the plan shows
  // that every read of that input comes before the output's first write, or
  // in the same elementwise step or fused group at the same element (as in
  // the update of a parameter and its moments by optim::with_adamw's
  // program), no step that may still throw (a gather of computed indices,
  // an all_reduce) runs after its first write, and the Array already has the
  // output's type; otherwise into a buffer of the Interpreter's own, copied
  // into the Array after the last step. Indices of gathers and scatters that
  // are inputs or constants are checked before the first step, so a run that
  // throws leaves every input Array as it was.
  void run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs);
  // What a run tells while it runs, on the calling thread, between its steps:
  // output_ready(j) once outputs[j] holds its final value (as soon as the
  // step that writes it last has run, for an output computed straight into
  // its Array; else at the end, once copied in), and input_released(i) once
  // no later step reads inputs[i] (at the start for an input nothing reads,
  // at the end for one passed through to an output). Each is called once per
  // index, in the order of the steps. After input_released(i) the caller may
  // change inputs[i]'s values, unless that Array is also an output (which the
  // run may still write) or another input not yet released (the release is
  // per input, not per Array); after output_ready(j) it may read outputs[j],
  // and work on it on other threads while the run goes on (lane 1 starts
  // each parameter's AdamW update on the host's idle threads this way:
  // host::HostAdamW). Which step releases what is planned once, when the
  // Interpreter is built, so a run with events allocates no more than one
  // without. A run that throws may have made some of the calls.
  struct RunEvents {
    std::function<void(int output)> output_ready;
    std::function<void(int input)> input_released;
  };
  void run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs, const RunEvents& events);
  // Of the last run's computed outputs whose Array was also one of its inputs:
  // how many were computed in place, and how many aside and copied in at the
  // end. (Inputs passed through to an output, constants and second outputs
  // of one buffer are copied and counted in neither.)
  int outputs_in_place() const;
  int outputs_via_copy() const;

  // The replicas that all_reduce sums over (not owned; must outlive the runs
  // that use it). nullptr (the default) or a communicator of size 1: one
  // replica, all_reduce copies its operand.
  void set_communicator(Communicator* c);

  const InterpreterOptions& options() const;  // as given to the constructor
  // The program it runs: the one it was given, its adamw equations written
  // out (expand_adamw; inputs and outputs as given).
  const Program& program() const;
  size_t arena_bytes() const;        // bytes of the planned intermediate arena
  MemoryPlan memory() const;         // what this one allocated (memory_needed's figures)
  // Gives the arena's pages back to the system until the next run touches
  // them again (it holds nothing between runs): for an Interpreter that waits
  // while another runs, as the training step does during validation. Returns
  // the bytes given back (whole pages inside the arena).
  size_t release_arena();
  int fused_groups() const;          // groups run tile by tile (0 when unfused)
  int fused_equations() const;       // equations inside those groups
  // Of those groups, the ones that are one parameter's AdamW update (its
  // adamw equations, ir.h, written out): each runs as one loop (the host AdamW
  // kernel: the same operations per element, so the same bits), or, on a run
  // whose buffers overlap in a way the loop cannot take, as its members.
  int adamw_groups() const;
  // Loops compiled from runs of a group's elementwise members (InterpreterOptions::jit).
  int jit_loops() const;
  // Pairs of dot_generals that run side by side (InterpreterOptions::pair_dots).
  int dot_pairs() const;
  // Equations of `op` that run a kernel of their own: outside fused groups
  // and not aliases of their operand (a transpose that its dot_generals read
  // in place, or that moves nothing, runs none).
  int own_steps(Op op) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend MemoryPlan memory_needed(const Program& p, const InterpreterOptions& o);
};

// One-shot convenience.
std::vector<Array> run(const Program& p, const std::vector<Array>& inputs);
std::vector<Array> run(const Program& p, const std::vector<Array>& inputs, const InterpreterOptions& o);

}  // namespace capstep::host
