// A training step with AdamW on any backend (capstep/backend.h), its state
// addressed by name: the one step that `capstep train`, the lanes of the
// benchmark and a model of your own all run. Where AdamW runs is the lane's:
//   in the program (optim::with_adamw): the parameters and both moments live
//     in the backend's slots (donated, so on a device they stay there); a step
//     moves the batch, four scalars and the loss;
//   on the host: the gradient program on the backend and the update in C++;
//     on the host backend each parameter's update starts on the idle host
//     threads as soon as the run has its gradient (host::HostAdamW) and the
//     parameters are updated in the backend's slots; elsewhere every parameter
//     goes up and every gradient comes down each step.
// Every lane takes the same steps: on the host, the same bits.
//
//   TrainStep step(value_and_grad(loss, names), names, adamw);  // the host, AdamW in the program
//   step.init(parameters);                 // by name; moments zero, step 0
//   step.set("x", x);                      // the other inputs, by name
//   for (...) loss = step.step();          // AdamW step steps() + 1
//   step.save("run.safetensors");          // parameters, moments, step count
#pragma once

#include <cstdint>
#include <type_traits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capstep/backend.h"
#include "capstep/backend_options.h"
#include "capstep/checkpoint.h"
#include "capstep/optim.h"

namespace capstep {

// Where a step runs: a backend, and where AdamW runs.
struct Lane {
  BackendKind backend = BackendKind::host;
  bool adamw_in_program = false;  // optim::with_adamw: state donated, kept where the backend computes
  bool operator==(const Lane& o) const { return backend == o.backend && adamw_in_program == o.adamw_in_program; }
  bool operator!=(const Lane& o) const { return !(*this == o); }
};
const char* lane_name(const Lane& l);          // "host", "host-fused", "cuda", "cuda-fused", "pjrt", "pjrt-fused"
Lane parse_lane(const std::string& s);         // those, "gpu", "gpu-fused"; Error naming them otherwise

// Every switch of a TrainStep.
struct StepOptions {
  Lane lane = {BackendKind::host, true};
  // Parameters that do not train (a LoRA run's base): inputs of the program
  // with no gradient and no moments, given with the parameters (init, load),
  // set once (on a device they stay there), saved with them
  // (Checkpoint::frozen names them).
  std::vector<std::string> frozen = {};
  // optim::clip_grad_norm's limit, set once (Error when the program does
  // not clip); 0: the caller sets "clip.max_norm" with set().
  float clip_max_norm = 0;
  BackendOptions backend = {};
};

class TrainStep {
 public:
  // grad: value_and_grad(loss, params), possibly through
  // optim::data_parallel, optim::accumulate_gradients and
  // optim::clip_grad_norm; its output "loss" is the loss. The step runs
  // program(grad, params, o, so.lane) on so.lane.backend.
  TrainStep(const Program& grad, std::vector<std::string> params, const optim::AdamW& o, const StepOptions& so = {});
  // The same with program(grad, params, o, so.lane) already compiled on its
  // backend (so.backend is not read; the backend's kind must be so.lane's).
  TrainStep(std::unique_ptr<Backend> step, std::vector<std::string> params, const optim::AdamW& o,
            const StepOptions& so);
  ~TrainStep();
  TrainStep(TrainStep&&) noexcept;
  TrainStep& operator=(TrainStep&&) noexcept;

  // What a lane's step runs: AdamW in the program, optim::with_adamw of grad
  // (through optim::update_on_last when grad accumulates); on the host, grad
  // with the parameters as its first inputs, in params order, and "loss" then
  // their gradients as its first outputs (the aliases renumbered with them).
  static Program program(const Program& grad, const std::vector<std::string>& params, const optim::AdamW& o,
                         const Lane& lane);

  // Every parameter by name, each of its input's type, the frozen ones too
  // (Error naming a missing, unknown or mistyped one); both moments and the
  // accumulators zero; the step count 0.
  void init(const std::vector<NamedArray>& params);
  void init(std::vector<NamedArray>&& params);  // the same, taking the arrays where the step holds host Arrays
  // Parameters (the frozen ones too), moments and the step count from a
  // checkpoint, checked against the program's; or from the file.
  void load(const Checkpoint& c);
  void load(Checkpoint&& c);   // the same, taking c's arrays where the step holds host Arrays
  void load(const std::string& path);
  // Parameters (the trained ones, then the frozen ones, which c.frozen
  // names), moments and the step count into `c` (its arrays reused when the
  // names are already there); or saved to the file (atomically).
  void save(Checkpoint& c) const;
  void save(const std::string& path) const;

  // An input that is not state (the batch, a constant) by name.
  void set(const std::string& input, const Array& a);
  // AdamW step steps() + 1: its four scalars from the optimizer's settings
  // (lr_this_step, when given, in place of o.lr: a schedule's), one run;
  // returns the output "loss". With AdamW on the host no update is made when
  // the loss is not finite (a training loop stops there).
  double step();
  double step(double lr_this_step);
  // The same, with the scalars given (a training loop that computes its own).
  double step(const optim::AdamWScalars& s);
  // Gradient accumulation (grad through optim::accumulate_gradients of n):
  // n runs, set_micro_batch(i) setting micro-batch i's inputs (set()) before
  // run i; one AdamW update of the mean gradient after the last; returns the
  // mean of the n losses. Error when n is not the program's count
  // (optim::accumulated_micro_batches: 1 without accumulation). A step cut
  // short by a throw leaves the accumulators zero.
  // (set_micro_batch is called, never copied: a step allocates nothing.)
  template <class F>
  double step(int n, F&& set_micro_batch, const optim::AdamWScalars& s) {
    using Fn = std::remove_reference_t<F>;
    return step_micro(n, [](void* f, int i) { (*static_cast<Fn*>(f))(i); },
                      const_cast<void*>(static_cast<const void*>(&set_micro_batch)), s);
  }
  // Steps taken: the count init() zeroes and load() sets, one more for each
  // step(), an update skipped for a non-finite loss included.
  int64_t steps() const;
  // optim::clip_grad_norm's global gradient norm (before clipping) of the
  // last step; NaN when the program does not clip.
  double grad_norm() const;

  // A parameter, a moment ("adamw.m.<p>", "adamw.v.<p>"), a frozen
  // parameter, or any output of the last step, by name.
  Array read(const std::string& name) const;
  // The current parameters (trained, then frozen) where the step holds them
  // as host Arrays, without a copy: (name, array) pairs, valid until the next
  // step, init or load; the array nullptr for one that lives elsewhere (a
  // device, a plugin's buffers, a donated slot), which read() copies out.
  std::vector<std::pair<std::string, const Array*>> parameters_in_place() const;
  const std::vector<std::string>& parameters() const;
  const std::vector<std::string>& frozen() const;
  const Lane& lane() const;
  Backend& backend();
  const Backend& backend() const;

 private:
  double step_micro(int n, void (*set_micro_batch)(void*, int), void* f, const optim::AdamWScalars& s);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace capstep
