// The three lanes' steps. Same math as src/lanes/three_lanes.cpp (the
// benchmark), kept apart because training also needs the state back for
// checkpoints and must not allocate per step on the host.
#include <cmath>

#include "capstep/cuda.h"
#include "capstep/interpreter.h"
#include "stepper.h"

namespace capstep::train {
namespace {

cuda::Options exe_options(const cuda::Options& base, bool tf32, cuda::NcclCommunicator* nccl) {
  cuda::Options o = base;
  o.tf32 = tf32;
  o.cuda_graph = true;
  o.nccl = nccl;
  return o;
}

void copy_state(const std::vector<std::string>& names, const std::vector<Array>& from, std::vector<NamedArray>& to) {
  to.resize(names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    to[j].name = names[j];
    to[j].array = from[j];
  }
}

// Lane 1: the gradient program in the interpreter, AdamW on the host, each
// parameter's update started on idle host threads as soon as the run has its
// gradient (optim::HostAdamW), none when the loss is not finite. Inputs point
// at the held parameters; outputs (loss, gradients) are reused.
class HostStepper final : public Stepper {
 public:
  HostStepper(const Program& grad, const optim::AdamW& o, State s, float clip, Communicator* comm,
              const host::InterpreterOptions& io)
      : interp_(grad, io), adamw_(o), s_(std::move(s)), ins_(grad.inputs.size()) {
    interp_.set_communicator(comm);
    for (size_t j = 0; j < s_.params.size(); ++j) ins_[j] = &s_.params[j];
    clip_.data<float>()[0] = clip;
    if (const int c = grad.input_index(optim::kClipMaxNormName); c >= 0) ins_[static_cast<size_t>(c)] = &clip_;
    norm_out_ = grad.output_index(optim::kGradNormName);
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    const size_t n = s_.params.size();
    ins_[n] = &tokens;
    ins_[n + 1] = &targets;
    // Gradients after the loss; no update when the loss is not finite.
    adamw_.step(interp_, ins_, outs_, 1, sc, s_.params, s_.m, s_.v, 0);
    if (norm_out_ >= 0) norm_ = outs_[static_cast<size_t>(norm_out_)].data<float>()[0];
    return outs_[0].data<float>()[0];
  }
  void state(Checkpoint& c) override {
    copy_state(s_.names, s_.params, c.params);
    copy_state(s_.names, s_.m, c.adam_m);
    copy_state(s_.names, s_.v, c.adam_v);
  }
  double grad_norm() const override { return norm_; }

 private:
  host::Interpreter interp_;
  optim::HostAdamW adamw_;
  State s_;
  std::vector<const Array*> ins_;
  std::vector<Array> outs_;
  Array clip_{Type{DType::f32, {}}};
  int norm_out_ = -1;
  double norm_ = NAN;
};

// Lane 2: every parameter up, every gradient down, AdamW on the host. The
// parameters live in ins_[0..n) so they need no copy into the input list.
class GpuStepper final : public Stepper {
 public:
  GpuStepper(const Program& grad, const optim::AdamW& o, State s, bool tf32, float clip, cuda::NcclCommunicator* nccl,
             const cuda::Options& base)
      : exe_(grad, exe_options(base, tf32, nccl)), adamw_(o), names_(std::move(s.names)), m_(std::move(s.m)), v_(std::move(s.v)) {
    ins_ = std::move(s.params);
    ins_.resize(grad.inputs.size());
    if (const int c = grad.input_index(optim::kClipMaxNormName); c >= 0) ins_[static_cast<size_t>(c)] = Array::scalar(clip);
    norm_out_ = grad.output_index(optim::kGradNormName);
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    const size_t n = m_.size();
    ins_[n] = tokens;
    ins_[n + 1] = targets;
    std::vector<Array> outs = exe_.run(ins_);
    const float loss = static_cast<float>(outs[0].get(0));
    if (norm_out_ >= 0) norm_ = outs[static_cast<size_t>(norm_out_)].get(0);
    if (!std::isfinite(loss)) return loss;
    for (size_t j = 0; j < n; ++j) optim::adamw_update(adamw_, sc, ins_[j], outs[1 + j], m_[j], v_[j]);
    return loss;
  }
  void state(Checkpoint& c) override {
    std::vector<Array> p(ins_.begin(), ins_.begin() + static_cast<std::ptrdiff_t>(m_.size()));
    copy_state(names_, p, c.params);
    copy_state(names_, m_, c.adam_m);
    copy_state(names_, v_, c.adam_v);
  }
  double grad_norm() const override { return norm_; }

 private:
  cuda::Executable exe_;
  optim::AdamW adamw_;
  std::vector<std::string> names_;
  std::vector<Array> ins_, m_, v_;
  int norm_out_ = -1;
  double norm_ = NAN;
};

// Lane 3: parameters and moments go up once and stay on the device; each step
// moves the batch, the four scalars and the loss.
class GpuFusedStepper final : public Stepper {
 public:
  GpuFusedStepper(const Program& fused, State s, bool tf32, float clip, cuda::NcclCommunicator* nccl,
                  const cuda::Options& base)
      : exe_(fused, exe_options(base, tf32, nccl)), names_(std::move(s.names)), n_(static_cast<int>(names_.size())) {
    for (int j = 0; j < n_; ++j) {
      exe_.upload(j, s.params[static_cast<size_t>(j)]);
      exe_.upload(n_ + j, s.m[static_cast<size_t>(j)]);
      exe_.upload(2 * n_ + j, s.v[static_cast<size_t>(j)]);
    }
    tok_ = fused.input_index("tokens");
    tgt_ = fused.input_index("targets");
    for (int i = 0; i < 4; ++i) sc_[i] = fused.input_index(optim::kScalarNames[i]);
    loss_out_ = fused.output_index("loss");
    if (tok_ < 0 || tgt_ < 0 || loss_out_ < 0 || sc_[0] < 0 || sc_[1] < 0 || sc_[2] < 0 || sc_[3] < 0)
      throw Error("the fused program lacks tokens, targets, loss or an AdamW scalar");
    // The clipping limit goes up once and stays; the norm comes down each step.
    if (const int c = fused.input_index(optim::kClipMaxNormName); c >= 0) exe_.upload(c, Array::scalar(clip));
    norm_out_ = fused.output_index(optim::kGradNormName);
  }
  float step(const Array& tokens, const Array& targets, const optim::AdamWScalars& sc) override {
    exe_.upload(tok_, tokens);
    exe_.upload(tgt_, targets);
    const float vals[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
    for (int i = 0; i < 4; ++i) {
      scalar_.data<float>()[0] = vals[i];
      exe_.upload(sc_[i], scalar_);
    }
    exe_.step();
    exe_.download_output(loss_out_, loss_);
    if (norm_out_ >= 0) {
      exe_.download_output(norm_out_, norm_arr_);
      norm_ = norm_arr_.data<float>()[0];
    }
    return loss_.data<float>()[0];
  }
  double grad_norm() const override { return norm_; }
  void state(Checkpoint& c) override {
    std::vector<NamedArray>* groups[3] = {&c.params, &c.adam_m, &c.adam_v};
    for (int g = 0; g < 3; ++g) {
      groups[g]->resize(names_.size());
      for (int j = 0; j < n_; ++j) {
        NamedArray& t = (*groups[g])[static_cast<size_t>(j)];
        t.name = names_[static_cast<size_t>(j)];
        const Type& want = exe_.program().input_type(g * n_ + j);
        if (t.array.type() != want) t.array.reset(want);
        exe_.download_input(g * n_ + j, t.array);
      }
    }
  }

 private:
  cuda::Executable exe_;
  std::vector<std::string> names_;
  int n_;
  int tok_ = -1, tgt_ = -1, sc_[4] = {-1, -1, -1, -1}, loss_out_ = -1;
  Array scalar_{Type{DType::f32, {}}}, loss_{Type{DType::f32, {}}}, norm_arr_{Type{DType::f32, {}}};
  int norm_out_ = -1;
  double norm_ = NAN;
};

}  // namespace

std::unique_ptr<Stepper> host_stepper(const Program& grad, const optim::AdamW& o, State s, float clip,
                                      Communicator* comm, const host::InterpreterOptions& io) {
  return std::make_unique<HostStepper>(grad, o, std::move(s), clip, comm, io);
}
std::unique_ptr<Stepper> gpu_stepper(const Program& grad, const optim::AdamW& o, State s, bool tf32, float clip,
                                     cuda::NcclCommunicator* nccl, const cuda::Options& base) {
  return std::make_unique<GpuStepper>(grad, o, std::move(s), tf32, clip, nccl, base);
}
std::unique_ptr<Stepper> gpu_fused_stepper(const Program& fused, State s, bool tf32, float clip,
                                           cuda::NcclCommunicator* nccl, const cuda::Options& base) {
  return std::make_unique<GpuFusedStepper>(fused, std::move(s), tf32, clip, nccl, base);
}

}  // namespace capstep::train
