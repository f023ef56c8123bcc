// The host backend's switches (BackendOptions::host) and what it would take
// in memory to run a program: the host's public face for code above the
// backends, which runs programs through capstep/backend.h and never includes
// the interpreter itself (src/backend/host/interpreter.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "capstep/ir.h"

namespace capstep::host {

struct InterpreterOptions {
  bool fuse = true;           // run the fusion groups tile by tile; false: one pass per primitive
  int64_t tile_elems = 1024;  // elements per tile (row/column groups: whole rows, at least one)
  // With fuse: runs of f32 add/subtract/multiply/divide/negate in a group
  // compiled to one AVX2 loop each (the same bits), where this build has
  // Xbyak and the CPU AVX2; false: every member runs its own kernel.
  bool jit = true;
  // On two host threads: two dot_generals that run one after the
  // other and do not read each other's results run side by side, each on
  // one thread, instead of each cut into parts that all threads share (the
  // same bits: a GEMM's parts are fixed by its shape, and run in turn on
  // one thread). Only where neither costs more than twice the other.
  bool pair_dots = true;
  // Subnormal f32 and f64 numbers during a run: true reads a subnormal
  // operand as zero and writes a result that would be subnormal as zero
  // (x86's DAZ and FTZ, on every host thread of the run; as XLA's CPU client
  // computes), false keeps IEEE's gradual underflow. Arithmetic on subnormals
  // takes a slow path on many x86 CPUs (on a Xeon, the seed's training step
  // twice as long once a few values underflow); the results start to differ
  // only where a value falls below 1.2e-38 (f32) or 2.2e-308 (f64). The
  // calling thread's own mode is restored when the run returns; RunEvents'
  // callbacks run in the run's mode. No effect on a CPU without such a mode (not x86).
  bool flush_subnormals = true;
  // The defaults above, which are fixed: the library reads no environment
  // variable (the capstep command and the example set these fields from
  // CAPSTEP_HOST_*: docs/cli.md, "Environment").
  static InterpreterOptions defaults();
};

// The bytes a run of a program takes on the host, as the Interpreter plans
// them: its own blocks, allocated when it is built, and the caller's Arrays.
// (Not counted: the GEMM libraries' own buffers, and the block an in-place
// run allocates on first need for an output it cannot write over its input.)
struct MemoryPlan {
  size_t arena = 0;    // intermediate values and GEMM packing, packed by lifetime (arena_bytes())
  size_t statics = 0;  // constants and iotas, computed once
  size_t tiles = 0;    // the fused groups' scratch tiles
  size_t inputs = 0;   // the program's inputs (the caller's Arrays)
  size_t outputs = 0;  // its outputs (the caller's Arrays)
  size_t held() const { return arena + statics + tiles; }  // what the Interpreter allocates
};

// What Interpreter(p, o) would allocate, planned as its constructor plans it
// (fusion, liveness, the arena's packing) without allocating any of it: for
// refusing a step that will not fit in memory before the first run.
MemoryPlan memory_needed(const Program& p, const InterpreterOptions& o = InterpreterOptions::defaults());
// recompute_in_backward(grad) (transforms.h) where the host's plan of it
// (memory_needed) has the smaller arena, else grad: the gradient program
// `capstep train` runs. (The recomputed one holds less when the activations
// held at the start of the backward are the peak, as in every model of
// several layers; a step whose peak is inside its backward, as one layer
// over very long sequences, can hold more, the copies made for that point's
// GEMMs coming on top of it.)
Program recompute_where_smaller(const Program& grad, const InterpreterOptions& o = InterpreterOptions::defaults());

}  // namespace capstep::host
