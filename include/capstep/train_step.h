// A model's training step with AdamW inside the program, on any backend
// (capstep/backend.h), addressed by name: the parameters and both moments
// live in the backend's slots (donated, so on a device they stay there), the
// four AdamW scalars are filled from the optimizer's settings and the step
// count, and a checkpoint is one call each way.
//
//   TrainStep step(value_and_grad(loss, names), names, adamw);  // the host; or BackendKind::cuda, ::pjrt
//   step.init(parameters);                 // by name; moments zero, step 0
//   step.set("x", x);                      // the other inputs, by name
//   for (...) loss = step.step();          // AdamW step steps() + 1
//   step.save("run.safetensors");          // parameters, moments, step count
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capstep/backend.h"
#include "capstep/checkpoint.h"
#include "capstep/optim.h"

namespace capstep {

class TrainStep {
 public:
  // grad: value_and_grad(loss, params), possibly through optim::clip_grad_norm
  // or data_parallel; its output "loss" is the loss. The step program is
  // optim::with_adamw(grad, params, o), compiled for `kind`.
  TrainStep(const Program& grad, std::vector<std::string> params, const optim::AdamW& o,
            BackendKind kind = BackendKind::host, const BackendOptions& bo = {});
  // A with_adamw program already compiled on a backend (`params`: its
  // parameters, in with_adamw's order).
  TrainStep(std::unique_ptr<Backend> with_adamw_program, std::vector<std::string> params, const optim::AdamW& o);
  ~TrainStep();
  TrainStep(TrainStep&&) noexcept;
  TrainStep& operator=(TrainStep&&) noexcept;

  // Every parameter by name, each of its input's type (Error naming a missing,
  // unknown or mistyped one); both moments zero; the step count 0.
  void init(const std::vector<NamedArray>& params);
  // Parameters and moments (and the step count) from a checkpoint, checked
  // against the program's parameters; or from the file.
  void load(const Checkpoint& c);
  void load(Checkpoint&& c);   // the same, taking c's arrays where the backend's slots are host Arrays
  void load(const std::string& path);
  // Parameters, moments and the step count into `c` (its arrays reused when
  // the names are already there); or saved to the file (atomically).
  void save(Checkpoint& c) const;
  void save(const std::string& path) const;

  // An input that is not state (the batch, a constant) by name.
  void set(const std::string& input, const Array& a);
  // AdamW step steps() + 1: its four scalars from the optimizer's settings
  // (lr_this_step, when given, in place of o.lr: a schedule's), one run;
  // returns the output "loss".
  double step();
  double step(double lr_this_step);
  // The same, with the scalars given (a training loop that computes its own).
  double step(const optim::AdamWScalars& s);
  int64_t steps() const;

  // A parameter, a moment ("adamw.m.<p>", "adamw.v.<p>") or any output, by name.
  Array read(const std::string& name) const;
  const std::vector<std::string>& parameters() const;
  Backend& backend();
  const Backend& backend() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace capstep
