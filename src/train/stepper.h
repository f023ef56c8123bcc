// One training step of a lane behind one interface: the loop in
// train_loop.cpp (progress, checkpoints, the non-finite stop) and the lanes of
// the benchmark (src/lanes/three_lanes.cpp) are written once over it.
//
// A lane is a backend (capstep/backend.h) and where AdamW runs:
//   AdamW on the host: the gradient program on the backend, the update in C++
//     (on the host backend, each parameter's update starts on the idle host
//     threads as soon as the run has its gradient: host::HostAdamW);
//   AdamW in the program: optim::with_adamw's program on the backend, the
//     parameters and both moments donated, so they stay where it computes and
//     only the batch, four scalars and the loss cross.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/backend.h"
#include "capstep/checkpoint.h"
#include "capstep/ir.h"
#include "capstep/optim.h"
#include "capstep/train.h"

namespace capstep::train {

// The parameters that train and both moments (lm_parameters order among
// them), and the frozen parameters (Options::freeze): inputs of the step with
// no gradient and no moments, set once (on a device they stay there).
struct State {
  std::vector<std::string> names;
  std::vector<Array> params, m, v;
  std::vector<std::string> frozen_names = {};
  std::vector<Array> frozen = {};
};

class Stepper {
 public:
  virtual ~Stepper() = default;
  // Replaces the parameters and moments (names in the order the stepper was
  // made with).
  virtual void set_state(const State& s) = 0;
  // The same, taking s's arrays where the stepper keeps host copies (the
  // host lane: one copy of a LoRA run's frozen base, not two).
  virtual void set_state(State&& s) { set_state(static_cast<const State&>(s)); }
  // The loss of (parameters, batch) before the update, then the AdamW update
  // with these scalars. The host-AdamW lanes skip the update when the loss is
  // not finite (training stops there anyway).
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& s) {
    return step_n(&tokens, &targets, 1, s);
  }
  // Gradient accumulation (a step program through optim::accumulate_gradients
  // of N, n = N): micro-batch i is (tokens[i], targets[i]); one update of the
  // mean gradient after the last; returns the mean of the micro-batches'
  // losses. Without accumulation n is 1. Error when n is not the program's.
  virtual float step_n(const Array* tokens, const Array* targets, int n, const optim::AdamWScalars& s) = 0;
  // The current parameters (the trained ones, then the frozen ones) and the
  // trained ones' moments, into c.params / c.adam_m / c.adam_v (reusing their
  // arrays when the names are already there); c.frozen names the frozen ones.
  virtual void state(Checkpoint& c) = 0;
  // The current parameters (trained, then frozen) as the stepper holds them
  // on the host, without a copy: (name, array) pairs valid until the next
  // step or set_state; empty where it holds none there (a backend's slots:
  // then state() copies them out). Validation reads them so, instead of a
  // copy of the parameters and both moments.
  virtual std::vector<std::pair<std::string, const Array*>> params_in_place() const { return {}; }
  // Gives back the host memory the step's intermediate values take until the
  // next step (host::Interpreter::release_arena), for validation to run in
  // it; the bytes given back (0 where the step runs elsewhere).
  virtual size_t release_scratch() { return 0; }
  // The global gradient norm of the last step (before clipping) when the
  // program clips (optim::clip_grad_norm: output "grad_norm"), else NaN.
  virtual double grad_norm() const = 0;
  virtual BackendInfo describe() const = 0;
};

// `base` with what a lane sets itself: a CUDA graph, and
// the replicas its all_reduce equations sum over (comm, on every backend: the
// CUDA backend makes its NCCL communicator from it; nullptr: one replica).
BackendOptions lane_backend_options(const BackendOptions& base, Communicator* comm);

// The program a lane's step runs: `grad` (value_and_grad of the loss program
// over the parameters that train, its first inputs in `names` order, then any
// frozen parameters, "tokens" and "targets", possibly through
// optim::data_parallel, optim::accumulate_gradients and
// optim::clip_grad_norm), or with AdamW in the program optim::with_adamw of it
// (and optim::update_on_last when it accumulates).
Program step_program(const Lane& lane, const Program& grad, const std::vector<std::string>& names, const optim::AdamW& o);
// `step`: step_program's. clip_max_norm feeds optim::clip_grad_norm's
// "clip.max_norm" input once. The backend is built with `bo` (the caller has
// set cuda.tf32 and communicator as it wants). The state is set by
// set_state() before the first step.
std::unique_ptr<Stepper> make_stepper(const Lane& lane, const Program& step, const std::vector<std::string>& names,
                                      const optim::AdamW& o, float clip_max_norm, const BackendOptions& bo);

}  // namespace capstep::train
