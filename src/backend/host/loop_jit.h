// Straight runs of f32 and bf16 elementwise members of a fused group,
// compiled to one AVX2 loop (Xbyak), so that the values they pass to each
// other stay in registers: the tile interpreter (fused.h) runs every member as
// its own pass over the tile, a load and a store per element and operand,
// which on the seed's step made such members about 60% of the fused groups'
// time.
//
// Add, subtract, multiply, divide and negate, each one AVX instruction whose
// result is the correctly rounded IEEE operation, as the scalar kernels' are
// (no FMA contraction), and f32 exp and tanh as the instructions of
// ir/scalar_math.h's formulas, one for one; in the members' order: so the
// same bits as the members, element for element, NaNs aside (where both
// operands of an add or a multiply are NaN, the instruction returns its first
// operand's payload and sign, and the compiled kernels may put either first;
// any NaN stays a NaN). A bf16 value lives in a register as the f32 of the
// same value (its low 16 bits zero): loaded widened, rounded where a member
// makes one (bf16::from_float's integer steps: nearest, ties to even, NaN
// quieted), stored as its high 16 bits; a convert between f32 and bf16 is a
// copy or that rounding.
// The code is built when the interpreter plans
// the step; without Xbyak (libxbyak-dev) at build time, without AVX2 at run
// time, or with InterpreterOptions::jit off, the members run as before.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/host/interpreter.h"
#include "capstep/host.h"
#include "capstep/ir.h"

namespace capstep::host {

// The loop as data: values are numbered, inputs first, then one per
// instruction. The code is called as fn(ptrs, n) and runs, for every element
// i = 0, 8, ... below n (a multiple of 8), on elements i to i + 7: each input
// loaded from ptrs[ptr] (splat: the float at ptrs[ptr] in every lane), each
// instruction, and each store of a value to ptrs[ptr], in order; a bf16
// input or store at 2 bytes an element, everything else 4.
// With row_bytes > 0 (a multiple of 32 that divides 4 n), i runs over rows
// of row_bytes / 4 elements: a row input is the float at ptrs[ptr] + 4 * row
// in every lane (a value per row broadcast along it), a col input is read at
// element i % (row_bytes / 4) of ptrs[ptr] (a row's worth broadcast down the
// rows). Row, col and splat inputs are f32.
struct JitLoop {
  enum class Kind : uint8_t { full, splat, row, col };
  struct Input {
    int ptr = 0;
    Kind kind = Kind::full;
    bool bf16 = false;  // 2-byte elements, widened as loaded
  };
  struct Inst {
    Op op = Op::add;     // also broadcast_in_dim and convert: a copy of a
    int a = -1, b = -1;  // value numbers; b = -1 for the one-operand ones
    bool bf16 = false;   // the result rounded to bf16 (a bf16 member's)
  };
  struct Store {
    int value = -1;
    int ptr = 0;
    bool bf16 = false;   // 2-byte elements: the value must be a bf16 one
  };
  int num_ptrs = 0;
  int64_t row_bytes = 0;
  std::vector<Input> inputs;
  std::vector<Inst> insts;
  std::vector<Store> stores;
};

using JitFn = void (*)(void* const* ptrs, int64_t n);

class JitCode {
 public:
  virtual ~JitCode() = default;
  JitFn fn = nullptr;
};

// The operands of a primitive a loop computes: 2 (add, subtract, multiply,
// divide), 1 (negate, exponential, tanh, convert: between f32 and bf16 only,
// which the caller checks), 0 for any other op. (Inside a loop,
// broadcast_in_dim is also a copy of one value; see JitLoop::Inst.)
int jit_operands(Op op);

// Whether this build has the compiler (Xbyak) and this CPU AVX2.
bool jit_available();
// Why not, when jit_available() is false ("this build has no Xbyak", "this
// CPU has no AVX2"); empty when it is true.
const char* jit_missing();
// host_loops_line (what runs a fused group's elementwise work, for a
// report's "host:" line) is declared in capstep/host.h.
// The compiled loop, or nullptr: not available, an op it does not take, or
// more live values or pointers than the registers hold (the caller then
// compiles a shorter run).
std::unique_ptr<JitCode> jit_compile(const JitLoop& loop);

}  // namespace capstep::host
