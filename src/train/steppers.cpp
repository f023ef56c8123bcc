// The lanes' steps over capstep/backend.h, for training and for the benchmark.
#include <algorithm>
#include <cmath>

#include "capstep/host_adamw.h"
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

void move_state(const std::vector<std::string>& names, std::vector<Array>& from, std::vector<NamedArray>& to) {
  to.resize(names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    to[j].name = names[j];
    to[j].array = std::move(from[j]);
  }
}

void check_names(const State& s, const std::vector<std::string>& names) {
  if (s.names != names || s.params.size() != names.size() || s.m.size() != names.size() || s.v.size() != names.size() ||
      s.frozen.size() != s.frozen_names.size())
    throw Error("set_state: the state's parameters are not the ones the step was made with");
}

// The frozen parameters after the trained ones in c.params; c.frozen names them.
void append_frozen(const State& s, Checkpoint& c) {
  const size_t n = c.params.size();
  c.params.resize(n + s.frozen.size());
  for (size_t j = 0; j < s.frozen.size(); ++j) {
    c.params[n + j].name = s.frozen_names[j];
    c.params[n + j].array = s.frozen[j];
  }
  c.frozen = s.frozen_names;
}

// (name, array) of the trained parameters, then the frozen ones, in place.
std::vector<std::pair<std::string, const Array*>> in_place(const std::vector<std::string>& names,
                                                           const std::vector<Array>& params, const State& frozen) {
  std::vector<std::pair<std::string, const Array*>> r;
  for (size_t j = 0; j < names.size(); ++j) r.emplace_back(names[j], &params[j]);
  for (size_t j = 0; j < frozen.frozen.size(); ++j) r.emplace_back(frozen.frozen_names[j], &frozen.frozen[j]);
  return r;
}

// Gradient accumulation's inputs and outputs in a step program
// (optim::accumulate_gradients): none when it does not accumulate.
struct Accum {
  int last = -1;                  // input "accum.last"
  std::vector<int> in, out;       // per trained parameter: "accum.<p>" and "accum.<p>.new"
  bool on() const { return last >= 0; }
  Accum(const Program& p, const std::vector<std::string>& names) {
    last = p.input_index(optim::kAccumLastName);
    if (last < 0) return;
    for (const std::string& n : names) {
      in.push_back(p.input_index(optim::accumulator_name(n)));
      out.push_back(p.output_index(optim::updated_name(optim::accumulator_name(n))));
      if (in.back() < 0) throw Error("step program \"" + p.name + "\" has no input \"" + optim::accumulator_name(n) + "\"");
    }
  }
  // n micro-batches given for this program
  void check(int n) const {
    if (n < 1 || (n > 1) != on())
      throw Error("step: " + std::to_string(n) + " micro-batches for a step program that " +
                  (on() ? "accumulates gradients" : "does not accumulate gradients"));
  }
};

// The host backend, AdamW on the host: the gradient program on the host
// backend, each parameter's update started on idle host threads as soon as
// the run has its gradient (host::HostAdamW, over the backend's run events),
// none when the loss is not finite. The parameters live in the backend's
// slots and are updated there in place; the gradient accumulators are
// donated (updated in place by the run), so a step allocates nothing and
// copies only the batch.
class HostStepper final : public Stepper {
 public:
  HostStepper(std::unique_ptr<Backend> b, const std::vector<std::string>& names, const optim::AdamW& o, float clip)
      : b_(std::move(b)), adamw_(o), names_(names), accum_(b_->program(), names) {
    const Program& p = b_->program();
    if (const int c = p.input_index(optim::kClipMaxNormName); c >= 0) b_->set_input(c, Array::scalar(clip));
    norm_out_ = p.output_index(optim::kGradNormName);
    tok_ = b_->input("tokens");
    tgt_ = b_->input("targets");
  }
  void set_state(const State& s) override {
    State copy = s;
    set_state(std::move(copy));
  }
  // The parameters and the frozen ones move into the backend's slots, the
  // moments here: the state is held once, never copied.
  void set_state(State&& s) override {
    check_names(s, names_);
    for (size_t j = 0; j < s.params.size(); ++j) b_->set_input(static_cast<int>(j), std::move(s.params[j]));
    m_ = std::move(s.m);
    v_ = std::move(s.v);
    frozen_names_ = s.frozen_names;
    for (size_t j = 0; j < s.frozen.size(); ++j) b_->set_input(b_->input(s.frozen_names[j]), std::move(s.frozen[j]));
    for (size_t j = 0; j < accum_.in.size(); ++j)
      b_->set_input(accum_.in[j], Array(b_->program().input_type(accum_.in[j])));
  }
  float step_n(const Array* tokens, const Array* targets, int n, const optim::AdamWScalars& sc) override {
    accum_.check(n);
    // Micro-batches before the last: gradients summed into the accumulators
    // (donated: the run updates them in place).
    double loss = 0;
    for (int i = 0; i + 1 < n; ++i) {
      b_->set_input(accum_.last, last_(0.f));
      b_->set_input(tok_, tokens[i]);
      b_->set_input(tgt_, targets[i]);
      b_->run();
      loss += b_->host_output(0)->data<float>()[0];
    }
    if (accum_.on()) b_->set_input(accum_.last, last_(1.f));
    b_->set_input(tok_, tokens[n - 1]);
    b_->set_input(tgt_, targets[n - 1]);
    // Gradients after the loss; no update when the loss is not finite.
    if (std::isfinite(loss)) adamw_.step(*b_, 1, sc, m_, v_, 0);
    else b_->run();
    if (norm_out_ >= 0) norm_ = b_->host_output(norm_out_)->data<float>()[0];
    loss += b_->host_output(0)->data<float>()[0];
    return static_cast<float>(loss / n);
  }
  void state(Checkpoint& c) override {
    c.params.resize(names_.size() + frozen_names_.size());
    for (size_t j = 0; j < names_.size(); ++j) {
      c.params[j].name = names_[j];
      b_->read_input(static_cast<int>(j), c.params[j].array);
    }
    for (size_t j = 0; j < frozen_names_.size(); ++j) {
      c.params[names_.size() + j].name = frozen_names_[j];
      b_->read_input(b_->input(frozen_names_[j]), c.params[names_.size() + j].array);
    }
    c.frozen = frozen_names_;
    copy_state(names_, m_, c.adam_m);
    copy_state(names_, v_, c.adam_v);
  }
  // The parameters in the host backend's slots (where HostAdamW updates them).
  std::vector<std::pair<std::string, const Array*>> params_in_place() const override {
    std::vector<std::pair<std::string, const Array*>> r;
    for (size_t j = 0; j < names_.size(); ++j) r.emplace_back(names_[j], b_->host_input(static_cast<int>(j)));
    for (const std::string& n : frozen_names_) r.emplace_back(n, b_->host_input(b_->input(n)));
    for (const auto& [name, a] : r)
      if (!a) return {};
    return r;
  }
  size_t release_scratch() override { return b_->release_scratch(); }
  double grad_norm() const override { return norm_; }
  BackendInfo describe() const override { return b_->describe(); }

 private:
  // The scalar "accum.last" = x, in an Array kept here (no allocation per step).
  const Array& last_(float x) {
    last_arr_.data<float>()[0] = x;
    return last_arr_;
  }
  std::unique_ptr<Backend> b_;
  host::HostAdamW adamw_;
  std::vector<std::string> names_, frozen_names_;
  std::vector<Array> m_, v_;
  int norm_out_ = -1, tok_ = -1, tgt_ = -1;
  double norm_ = NAN;
  Accum accum_;
  Array last_arr_{Type{DType::f32, {}}};
};

// Any backend, AdamW on the host: every parameter up, every gradient down
// each step (on a GPU, lane [2]).
class HostAdamWStepper final : public Stepper {
 public:
  HostAdamWStepper(std::unique_ptr<Backend> b, const std::vector<std::string>& names, const optim::AdamW& o, float clip)
      : b_(std::move(b)), adamw_(o), names_(names), grads_(names.size()), accum_(b_->program(), names) {
    tok_ = b_->input("tokens");
    tgt_ = b_->input("targets");
    if (const int c = b_->program().input_index(optim::kClipMaxNormName); c >= 0) b_->set_input(c, Array::scalar(clip));
    norm_out_ = b_->program().output_index(optim::kGradNormName);
  }
  using Stepper::set_state;
  void set_state(const State& s) override {
    check_names(s, names_);
    p_ = s.params;
    m_ = s.m;
    v_ = s.v;
    frozen_ = State{{}, {}, {}, {}, s.frozen_names, s.frozen};
    // Frozen parameters once (they stay in the backend's slots), accumulators zero.
    for (size_t j = 0; j < s.frozen.size(); ++j) b_->set(s.frozen_names[j], s.frozen[j]);
    for (size_t j = 0; j < accum_.in.size(); ++j)
      b_->set_input(accum_.in[j], Array(b_->program().input_type(accum_.in[j])));
  }
  float step_n(const Array* tokens, const Array* targets, int n, const optim::AdamWScalars& sc) override {
    accum_.check(n);
    const size_t np = names_.size();
    for (size_t j = 0; j < np; ++j) b_->set_input(static_cast<int>(j), p_[j]);
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      if (accum_.on()) b_->set_input(accum_.last, Array::scalar(i + 1 == n ? 1.0f : 0.0f));
      b_->set_input(tok_, tokens[i]);
      b_->set_input(tgt_, targets[i]);
      b_->run();
      b_->read_output(0, loss_);
      sum += loss_.data<float>()[0];
    }
    const float loss = static_cast<float>(sum / n);
    if (norm_out_ >= 0) {
      b_->read_output(norm_out_, norm_arr_);
      norm_ = norm_arr_.data<float>()[0];
    }
    if (!std::isfinite(loss)) return loss;
    for (size_t j = 0; j < np; ++j) {
      b_->read_output(static_cast<int>(1 + j), grads_[j]);  // gradients after the loss
      optim::adamw_update(adamw_, sc, p_[j], grads_[j], m_[j], v_[j]);
    }
    return loss;
  }
  void state(Checkpoint& c) override {
    copy_state(names_, p_, c.params);
    copy_state(names_, m_, c.adam_m);
    copy_state(names_, v_, c.adam_v);
    append_frozen(frozen_, c);
  }
  std::vector<std::pair<std::string, const Array*>> params_in_place() const override {
    return in_place(names_, p_, frozen_);
  }
  double grad_norm() const override { return norm_; }
  BackendInfo describe() const override { return b_->describe(); }

 private:
  std::unique_ptr<Backend> b_;
  optim::AdamW adamw_;
  std::vector<std::string> names_;
  std::vector<Array> p_, m_, v_, grads_;
  State frozen_;  // its frozen parameters only
  int tok_ = -1, tgt_ = -1, norm_out_ = -1;
  Array loss_, norm_arr_;
  double norm_ = NAN;
  Accum accum_;
};

// Any backend, AdamW in the program (optim::with_adamw) through TrainStep:
// parameters and moments are set once and stay in the backend's slots
// (donated); each step moves the batch, the four scalars and the loss. Lane
// [1f] on the host, [3] on a GPU, [4] through PJRT.
class FusedStepper final : public Stepper {
 public:
  FusedStepper(std::unique_ptr<Backend> b, const std::vector<std::string>& names, const optim::AdamW& o, float clip)
      : step_(std::move(b), names, o), accum_(step_.backend().program(), names) {
    // The clipping limit goes in once and stays; the norm comes out each step.
    if (step_.backend().program().input_index(optim::kClipMaxNormName) >= 0)
      step_.set(optim::kClipMaxNormName, Array::scalar(clip));
    norm_out_ = step_.backend().program().output_index(optim::kGradNormName);
  }
  void set_state(const State& s) override {
    State copy = s;
    set_state(std::move(copy));
  }
  // The parameters and moments move into the backend's slots (on the host:
  // held once, never copied).
  void set_state(State&& s) override {
    check_names(s, step_.parameters());
    Checkpoint c;
    move_state(s.names, s.params, c.params);
    move_state(s.names, s.m, c.adam_m);
    move_state(s.names, s.v, c.adam_v);
    step_.load(std::move(c));
    // Frozen parameters: plain inputs, set once, never donated; accumulators zero.
    frozen_ = State{{}, {}, {}, {}, s.frozen_names, s.frozen};
    for (size_t j = 0; j < s.frozen.size(); ++j) step_.set(s.frozen_names[j], s.frozen[j]);
    Backend& b = step_.backend();
    for (size_t j = 0; j < accum_.in.size(); ++j) b.set_input(accum_.in[j], Array(b.program().input_type(accum_.in[j])));
  }
  float step_n(const Array* tokens, const Array* targets, int n, const optim::AdamWScalars& sc) override {
    accum_.check(n);
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      // update_on_last: the update of the run with accum.last = 1 only
      if (accum_.on()) step_.set(optim::kAccumLastName, Array::scalar(i + 1 == n ? 1.0f : 0.0f));
      step_.set("tokens", tokens[i]);
      step_.set("targets", targets[i]);
      sum += static_cast<float>(step_.step(sc));
    }
    const float loss = static_cast<float>(sum / n);
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
    append_frozen(frozen_, c);
  }
  size_t release_scratch() override { return step_.backend().release_scratch(); }
  BackendInfo describe() const override { return step_.backend().describe(); }

 private:
  TrainStep step_;
  Accum accum_;
  State frozen_;  // its frozen parameters only
  Array norm_arr_;
  int norm_out_ = -1;
  double norm_ = NAN;
};

}  // namespace

BackendOptions lane_backend_options(const BackendOptions& base, Communicator* comm) {
  BackendOptions bo = base;
  bo.cuda.cuda_graph = true;
  bo.communicator = comm;
  return bo;
}

Program step_program(const Lane& lane, const Program& grad, const std::vector<std::string>& names, const optim::AdamW& o) {
  if (!lane.adamw_in_program) return grad;
  const Program s = optim::with_adamw(grad, names, o);
  return grad.input_index(optim::kAccumLastName) >= 0 ? optim::update_on_last(s, names) : s;
}

std::unique_ptr<Stepper> make_stepper(const Lane& lane, const Program& step, const std::vector<std::string>& names,
                                      const optim::AdamW& o, float clip, const BackendOptions& bo) {
  if (lane.adamw_in_program) return std::make_unique<FusedStepper>(make_backend(lane.backend, step, bo), names, o, clip);
  const Program& grad = step;
  if (lane.backend == BackendKind::host)
    return std::make_unique<HostStepper>(make_backend(BackendKind::host, grad, bo), names, o, clip);
  return std::make_unique<HostAdamWStepper>(make_backend(lane.backend, grad, bo), names, o, clip);
}

}  // namespace capstep::train
