// The lanes' steps over capstep/backend.h, for training and for the benchmark.
#include <cmath>

#include "capstep/interpreter.h"
#include "capstep/train_step.h"
#include "stepper.h"

namespace capstep::train {
namespace {

void copy_state(const std::vector<std::string>& names, const std::vector<Array>& from, std::vector<NamedArray>& to) {
  to.resize(names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    to[j].name = names[j];
    to[j].array = from[j];
  }
}

void check_names(const State& s, const std::vector<std::string>& names) {
  if (s.names != names || s.params.size() != names.size() || s.m.size() != names.size() || s.v.size() != names.size())
    throw Error("set_state: the state's parameters are not the ones the step was made with");
}

// The host backend, AdamW on the host: the gradient program in the
// interpreter, each parameter's update started on idle host threads as soon
// as the run has its gradient (optim::HostAdamW), none when the loss is not
// finite. Inputs point at the held parameters; outputs (loss, gradients) are
// reused, so a step allocates nothing. (The Interpreter is driven directly:
// the early start of each update needs its run events.)
class HostStepper final : public Stepper {
 public:
  HostStepper(const Program& grad, const std::vector<std::string>& names, const optim::AdamW& o, float clip,
              const BackendOptions& bo)
      : interp_(grad, bo.host), adamw_(o), names_(names), ins_(grad.inputs.size()),
        communicator_(bo.communicator != nullptr) {
    interp_.set_communicator(bo.communicator);
    clip_.data<float>()[0] = clip;
    if (const int c = grad.input_index(optim::kClipMaxNormName); c >= 0) ins_[static_cast<size_t>(c)] = &clip_;
    norm_out_ = grad.output_index(optim::kGradNormName);
  }
  void set_state(const State& s) override {
    check_names(s, names_);
    s_ = s;
    for (size_t j = 0; j < s_.params.size(); ++j) ins_[j] = &s_.params[j];
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    const size_t n = names_.size();
    ins_[n] = &tokens;
    ins_[n + 1] = &targets;
    // Gradients after the loss; no update when the loss is not finite.
    adamw_.step(interp_, ins_, outs_, 1, sc, s_.params, s_.m, s_.v, 0);
    if (norm_out_ >= 0) norm_ = outs_[static_cast<size_t>(norm_out_)].data<float>()[0];
    return outs_[0].data<float>()[0];
  }
  void state(Checkpoint& c) override {
    copy_state(names_, s_.params, c.params);
    copy_state(names_, s_.m, c.adam_m);
    copy_state(names_, s_.v, c.adam_v);
  }
  double grad_norm() const override { return norm_; }
  BackendInfo describe() const override {
    BackendInfo b;
    b.device = "host";
    b.plan = interp_.fused_groups() > 0 ? "fused: " + std::to_string(interp_.fused_groups()) + " groups" : "unfused";
    b.bytes = interp_.memory().held();
    if (communicator_) b.collective = "Communicator";
    return b;
  }

 private:
  host::Interpreter interp_;
  optim::HostAdamW adamw_;
  std::vector<std::string> names_;
  State s_;
  std::vector<const Array*> ins_;
  std::vector<Array> outs_;
  Array clip_{Type{DType::f32, {}}};
  bool communicator_;  // all_reduce sums over BackendOptions::communicator
  int norm_out_ = -1;
  double norm_ = NAN;
};

// Any backend, AdamW on the host: every parameter up, every gradient down
// each step (on a GPU, lane [2]).
class HostAdamWStepper final : public Stepper {
 public:
  HostAdamWStepper(std::unique_ptr<Backend> b, const std::vector<std::string>& names, const optim::AdamW& o, float clip)
      : b_(std::move(b)), adamw_(o), names_(names), grads_(names.size()) {
    tok_ = b_->input("tokens");
    tgt_ = b_->input("targets");
    if (const int c = b_->program().input_index(optim::kClipMaxNormName); c >= 0) b_->set_input(c, Array::scalar(clip));
    norm_out_ = b_->program().output_index(optim::kGradNormName);
  }
  void set_state(const State& s) override {
    check_names(s, names_);
    p_ = s.params;
    m_ = s.m;
    v_ = s.v;
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    const size_t n = names_.size();
    for (size_t j = 0; j < n; ++j) b_->set_input(static_cast<int>(j), p_[j]);
    b_->set_input(tok_, tokens);
    b_->set_input(tgt_, targets);
    b_->run();
    b_->read_output(0, loss_);
    const float loss = loss_.data<float>()[0];
    if (norm_out_ >= 0) {
      b_->read_output(norm_out_, norm_arr_);
      norm_ = norm_arr_.data<float>()[0];
    }
    if (!std::isfinite(loss)) return loss;
    for (size_t j = 0; j < n; ++j) {
      b_->read_output(static_cast<int>(1 + j), grads_[j]);  // gradients after the loss
      optim::adamw_update(adamw_, sc, p_[j], grads_[j], m_[j], v_[j]);
    }
    return loss;
  }
  void state(Checkpoint& c) override {
    copy_state(names_, p_, c.params);
    copy_state(names_, m_, c.adam_m);
    copy_state(names_, v_, c.adam_v);
  }
  double grad_norm() const override { return norm_; }
  BackendInfo describe() const override { return b_->describe(); }

 private:
  std::unique_ptr<Backend> b_;
  optim::AdamW adamw_;
  std::vector<std::string> names_;
  std::vector<Array> p_, m_, v_, grads_;
  int tok_ = -1, tgt_ = -1, norm_out_ = -1;
  Array loss_, norm_arr_;
  double norm_ = NAN;
};

// Any backend, AdamW in the program (optim::with_adamw) through TrainStep:
// parameters and moments are set once and stay in the backend's slots
// (donated); each step moves the batch, the four scalars and the loss. Lane
// [1f] on the host, [3] on a GPU, [4] through PJRT.
class FusedStepper final : public Stepper {
 public:
  FusedStepper(std::unique_ptr<Backend> b, const std::vector<std::string>& names, const optim::AdamW& o, float clip)
      : step_(std::move(b), names, o) {
    // The clipping limit goes in once and stays; the norm comes out each step.
    if (step_.backend().program().input_index(optim::kClipMaxNormName) >= 0)
      step_.set(optim::kClipMaxNormName, Array::scalar(clip));
    norm_out_ = step_.backend().program().output_index(optim::kGradNormName);
  }
  void set_state(const State& s) override {
    check_names(s, step_.parameters());
    Checkpoint c;
    copy_state(s.names, s.params, c.params);
    copy_state(s.names, s.m, c.adam_m);
    copy_state(s.names, s.v, c.adam_v);
    step_.load(c);
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    step_.set("tokens", tokens);
    step_.set("targets", targets);
    const float loss = static_cast<float>(step_.step(sc));
    if (norm_out_ >= 0) {
      step_.backend().read_output(norm_out_, norm_arr_);
      norm_ = norm_arr_.data<float>()[0];
    }
    return loss;
  }
  double grad_norm() const override { return norm_; }
  void state(Checkpoint& c) override {
    const uint64_t step = c.step;
    step_.save(c);
    c.step = step;  // the training loop's count
  }
  BackendInfo describe() const override { return step_.backend().describe(); }

 private:
  TrainStep step_;
  Array norm_arr_;
  int norm_out_ = -1;
  double norm_ = NAN;
};

}  // namespace

BackendOptions lane_backend_options(const BackendOptions& base, bool tf32, Communicator* comm) {
  BackendOptions bo = base;
  bo.cuda.tf32 = tf32;
  bo.cuda.cuda_graph = true;
  bo.communicator = comm;
  return bo;
}

Program step_program(const Lane& lane, const Program& grad, const std::vector<std::string>& names, const optim::AdamW& o) {
  return lane.adamw_in_program ? optim::with_adamw(grad, names, o) : grad;
}

std::unique_ptr<Stepper> make_stepper(const Lane& lane, const Program& step, const std::vector<std::string>& names,
                                      const optim::AdamW& o, float clip, const BackendOptions& bo) {
  if (lane.adamw_in_program) return std::make_unique<FusedStepper>(make_backend(lane.backend, step, bo), names, o, clip);
  const Program& grad = step;
  if (lane.backend == BackendKind::host) return std::make_unique<HostStepper>(grad, names, o, clip, bo);
  return std::make_unique<HostAdamWStepper>(make_backend(lane.backend, grad, bo), names, o, clip);
}

}  // namespace capstep::train
