// TrainStep: a with_adamw program on a backend, its state addressed by name.
#include "capstep/train_step.h"

#include <cmath>
#include <type_traits>

#include "capstep/autodiff.h"

namespace capstep {

struct TrainStep::Impl {
  std::unique_ptr<Backend> b;
  std::vector<std::string> names;
  optim::AdamW o;
  std::vector<int> state_in[3];  // parameters, m, v: their input indices
  int sc[4] = {-1, -1, -1, -1};
  std::vector<char> role;        // per input: 0 the caller's, 1 state, 2 an AdamW scalar
  int loss_out = -1;
  int64_t steps = 0;
  Array scalar{Type{DType::f32, {}}}, loss;

  Impl(std::unique_ptr<Backend> backend, std::vector<std::string> params, const optim::AdamW& adamw)
      : b(std::move(backend)), names(std::move(params)), o(adamw) {
    const Program& p = b->program();
    for (int g = 0; g < 3; ++g)
      for (const std::string& name : names) {
        const std::string in = state_name(g, name);
        state_in[g].push_back(b->input(in));
        if (p.output_index(optim::updated_name(in)) < 0)
          throw Error("program \"" + p.name + "\" is not a with_adamw step: no output \"" + optim::updated_name(in) + "\"");
      }
    for (int i = 0; i < 4; ++i) sc[i] = b->input(optim::kScalarNames[i]);
    loss_out = b->output("loss");
    role.assign(p.inputs.size(), 0);
    for (const std::vector<int>& g : state_in)
      for (int i : g) role[static_cast<size_t>(i)] = 1;
    for (int i : sc) role[static_cast<size_t>(i)] = 2;
  }
  static std::string state_name(int g, const std::string& name) {
    return g == 0 ? name : g == 1 ? optim::moment1_name(name) : optim::moment2_name(name);
  }
  // Input index of `name`'s parameter, or Error naming the program's parameters.
  size_t param_index(const std::string& name) const {
    for (size_t j = 0; j < names.size(); ++j)
      if (names[j] == name) return j;
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    throw Error("TrainStep: \"" + name + "\" is not a parameter of the step (its parameters: " + all + ")");
  }
  // Sets group g (0 parameters, 1 m, 2 v) from named arrays, every parameter
  // once: copied from const arrays, moved from the others (left empty).
  template <class Arrays>
  void set_group(int g, Arrays& from, const char* what) {
    std::vector<char> seen(names.size(), 0);
    for (auto& a : from) {
      const size_t j = param_index(a.name);
      if (seen[j]) throw Error(std::string("TrainStep: ") + what + " \"" + a.name + "\" given twice");
      seen[j] = 1;
      if constexpr (std::is_const_v<Arrays>) b->set_input(state_in[g][j], a.array);
      else b->set_input(state_in[g][j], std::move(a.array));
    }
    for (size_t j = 0; j < names.size(); ++j)
      if (!seen[j]) throw Error(std::string("TrainStep: no ") + what + " \"" + names[j] + "\" given");
  }
  // Parameters, moments and the step count from a checkpoint: copied from a
  // const one, moved from the other.
  template <class C>
  void load(C& c) {
    set_group(0, c.params, "parameter");
    set_group(1, c.adam_m, "first moment of");
    set_group(2, c.adam_v, "second moment of");
    steps = static_cast<int64_t>(c.step);
  }
  void get_group(int g, std::vector<NamedArray>& to) const {
    to.resize(names.size());
    for (size_t j = 0; j < names.size(); ++j) {
      to[j].name = names[j];
      b->read_input(state_in[g][j], to[j].array);
    }
  }
};

TrainStep::TrainStep(const Program& grad, std::vector<std::string> params, const optim::AdamW& o, BackendKind kind,
                     const BackendOptions& bo)
    : TrainStep(make_backend(kind, optim::with_adamw(grad, params, o), bo), params, o) {}

TrainStep::TrainStep(std::unique_ptr<Backend> b, std::vector<std::string> params, const optim::AdamW& o)
    : impl_(std::make_unique<Impl>(std::move(b), std::move(params), o)) {}

TrainStep::~TrainStep() = default;
TrainStep::TrainStep(TrainStep&&) noexcept = default;
TrainStep& TrainStep::operator=(TrainStep&&) noexcept = default;

void TrainStep::init(const std::vector<NamedArray>& params) {
  impl_->set_group(0, params, "parameter");
  for (int g = 1; g < 3; ++g)
    for (size_t j = 0; j < impl_->names.size(); ++j) {
      const int i = impl_->state_in[g][j];
      impl_->b->set_input(i, Array(impl_->b->program().input_type(i)));
    }
  impl_->steps = 0;
}

void TrainStep::load(const Checkpoint& c) { impl_->load(c); }
void TrainStep::load(Checkpoint&& c) { impl_->load(c); }

void TrainStep::load(const std::string& path) {
  std::vector<ParamSpec> expected;
  for (size_t j = 0; j < impl_->names.size(); ++j)
    expected.push_back({impl_->names[j], impl_->b->program().input_type(impl_->state_in[0][j])});
  load(load_checkpoint(path, expected));
}

void TrainStep::save(Checkpoint& c) const {
  impl_->get_group(0, c.params);
  impl_->get_group(1, c.adam_m);
  impl_->get_group(2, c.adam_v);
  c.step = static_cast<uint64_t>(impl_->steps);
}

void TrainStep::save(const std::string& path) const {
  Checkpoint c;
  save(c);
  save_checkpoint(path, c);
}

void TrainStep::set(const std::string& input, const Array& a) {
  const int i = impl_->b->input(input);
  if (impl_->role[static_cast<size_t>(i)] == 1)
    throw Error("TrainStep::set: \"" + input + "\" is the step's state; set it with init() or load()");
  if (impl_->role[static_cast<size_t>(i)] == 2)
    throw Error("TrainStep::set: \"" + input + "\" is an AdamW scalar; step() fills it");
  impl_->b->set_input(i, a);
}

double TrainStep::step() { return step(optim::adamw_scalars(impl_->o, impl_->steps + 1)); }

double TrainStep::step(double lr_this_step) {
  return step(optim::adamw_scalars(impl_->o, impl_->steps + 1, lr_this_step));
}

double TrainStep::step(const optim::AdamWScalars& s) {
  const float v[4] = {s.lr, s.bc1, s.bc2, s.decay};
  for (int i = 0; i < 4; ++i) {
    impl_->scalar.data<float>()[0] = v[i];
    impl_->b->set_input(impl_->sc[i], impl_->scalar);
  }
  impl_->b->run();
  ++impl_->steps;
  impl_->b->read_output(impl_->loss_out, impl_->loss);
  return impl_->loss.get(0);
}

int64_t TrainStep::steps() const { return impl_->steps; }

Array TrainStep::read(const std::string& name) const {
  Array a;
  const Program& p = impl_->b->program();
  if (const int i = p.input_index(name); i >= 0) impl_->b->read_input(i, a);
  else impl_->b->read_output(impl_->b->output(name), a);
  return a;
}

const std::vector<std::string>& TrainStep::parameters() const { return impl_->names; }
Backend& TrainStep::backend() { return *impl_->b; }
const Backend& TrainStep::backend() const { return *impl_->b; }

}  // namespace capstep
