// One training step of each lane behind one interface, so the loop in
// train_loop.cpp (progress, checkpoints, the non-finite stop) is shared.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/checkpoint.h"
#include "capstep/ir.h"
#include "capstep/optim.h"

namespace capstep::train {

// Where training starts: parameters and both moments, in lm_parameters order.
struct State {
  std::vector<std::string> names;
  std::vector<Array> params, m, v;
};

class Stepper {
 public:
  virtual ~Stepper() = default;
  // The loss of (parameters, batch) before the update, then the AdamW update
  // with these scalars. The host-AdamW lanes skip the update when the loss is
  // not finite (training stops there anyway).
  virtual float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& s) = 0;
  // The current parameters and moments, into c.params / c.adam_m / c.adam_v
  // (reusing their arrays when the names are already there).
  virtual void state(Checkpoint& c) = 0;
};

// grad: value_and_grad of the loss program over every parameter.
std::unique_ptr<Stepper> host_stepper(const Program& grad, const optim::AdamW& o, State s);
std::unique_ptr<Stepper> gpu_stepper(const Program& grad, const optim::AdamW& o, State s, bool tf32);
// fused: with_adamw(grad, ...).
std::unique_ptr<Stepper> gpu_fused_stepper(const Program& fused, State s, bool tf32);

}  // namespace capstep::train
