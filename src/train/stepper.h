// One training step of each lane behind one interface, so the loop in
// train_loop.cpp (progress, checkpoints, the non-finite stop) is shared.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/checkpoint.h"
#include "capstep/cuda.h"
#include "capstep/interpreter.h"
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
  // The global gradient norm of the last step (before clipping) when the
  // program clips (optim::clip_grad_norm: output "grad_norm"), else NaN.
  virtual double grad_norm() const = 0;
};

// grad: value_and_grad of the loss program over every parameter, or that
// program through optim::clip_grad_norm; then clip_max_norm feeds its
// "clip.max_norm" input (once: it is the same every step).
// comm: the replicas the program's all_reduce equations sum over (or nullptr).
// io: the Interpreter's options (BackendOptions::host).
std::unique_ptr<Stepper> host_stepper(const Program& grad, const optim::AdamW& o, State s, float clip_max_norm,
                                      Communicator* comm, const host::InterpreterOptions& io);
// nccl: the replicas the program's all_reduce equations sum over on the GPU
// (or nullptr: one replica). base: the executable's switches
// (BackendOptions::cuda); tf32, the CUDA graph and nccl are set over them.
std::unique_ptr<Stepper> gpu_stepper(const Program& grad, const optim::AdamW& o, State s, bool tf32, float clip_max_norm,
                                     cuda::NcclCommunicator* nccl, const cuda::Options& base);
// fused: with_adamw(grad, ...).
std::unique_ptr<Stepper> gpu_fused_stepper(const Program& fused, State s, bool tf32, float clip_max_norm,
                                           cuda::NcclCommunicator* nccl, const cuda::Options& base);

}  // namespace capstep::train
