// The host interpreter: runs any verified Program on the CPU.
//
// The constructor verifies the Program and computes a memory plan once
// (liveness, buffer reuse in one arena), so that a steady-state run() into
// caller-held outputs allocates nothing. dot_general goes through OpenBLAS.
#pragma once

#include <memory>
#include <vector>

#include "capstep/array.h"
#include "capstep/collective.h"
#include "capstep/ir.h"

namespace capstep::host {

class Interpreter {
 public:
  explicit Interpreter(Program p);
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
  void run(const std::vector<const Array*>& inputs, std::vector<Array>& outputs);

  // The replicas that all_reduce sums over (not owned; must outlive the runs
  // that use it). nullptr (the default) or a communicator of size 1: one
  // replica, all_reduce copies its operand.
  void set_communicator(Communicator* c);

  const Program& program() const;
  size_t arena_bytes() const;        // bytes of the planned intermediate arena

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience.
std::vector<Array> run(const Program& p, const std::vector<Array>& inputs);

}  // namespace capstep::host
