// TrainStep: a step program on a backend, AdamW where the lane says, its state
// addressed by name.
#include "capstep/train_step.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "capstep/host_adamw.h"
#include "capstep/transforms.h"

namespace capstep {

const char* lane_name(const Lane& l) {
  switch (l.backend) {
    case BackendKind::host: return l.adamw_in_program ? "host-fused" : "host";
    case BackendKind::cuda: return l.adamw_in_program ? "cuda-fused" : "cuda";
    case BackendKind::pjrt: return l.adamw_in_program ? "pjrt-fused" : "pjrt";
  }
  return "?";
}

Lane parse_lane(const std::string& s) {
  if (s == "gpu") return {BackendKind::cuda, false};
  if (s == "gpu-fused") return {BackendKind::cuda, true};
  for (BackendKind k : {BackendKind::host, BackendKind::cuda, BackendKind::pjrt})
    for (bool fused : {false, true})
      if (s == lane_name({k, fused})) return {k, fused};
  throw Error("unknown lane '" + s + "'; the lanes are host, host-fused, cuda (or gpu), cuda-fused (or gpu-fused), "
              "pjrt, pjrt-fused");
}

namespace {

// `names` (in that order) first among `slots` (a program's inputs or
// outputs), the others after them in their order; `moved_to` maps each old
// position to its new one. Error naming `what` for a name that is not there.
std::vector<NamedValue> put_first(const std::vector<NamedValue>& slots, const std::vector<std::string>& names,
                                  const std::string& what, std::vector<int>& moved_to) {
  std::vector<int> order;
  for (const std::string& n : names) {
    const auto it = std::find_if(slots.begin(), slots.end(), [&](const NamedValue& v) { return v.name == n; });
    if (it == slots.end()) throw Error(what + " \"" + n + "\"");
    order.push_back(static_cast<int>(it - slots.begin()));
  }
  for (size_t i = 0; i < slots.size(); ++i)
    if (std::find(names.begin(), names.end(), slots[i].name) == names.end()) order.push_back(static_cast<int>(i));
  std::vector<NamedValue> r;
  moved_to.assign(slots.size(), -1);
  for (size_t k = 0; k < order.size(); ++k) {
    r.push_back(slots[static_cast<size_t>(order[k])]);
    moved_to[static_cast<size_t>(order[k])] = static_cast<int>(k);
  }
  return r;
}

// The program with AdamW on the host: the parameters its first inputs, in
// `params` order; "loss" and then each parameter's gradient its first
// outputs (host::HostAdamW reads them there); the aliases follow.
Program host_adamw_order(Program p, const std::vector<std::string>& params) {
  std::vector<std::string> outs = {"loss"};
  for (const std::string& n : params) outs.push_back("grad." + n);
  std::vector<int> in_to, out_to;
  const std::string of = "program \"" + p.name + "\" has no ";
  p.inputs = put_first(p.inputs, params, of + "input", in_to);
  p.outputs = put_first(p.outputs, outs, of + "output", out_to);
  for (Alias& a : p.aliases) {
    a.input = in_to[static_cast<size_t>(a.input)];
    a.output = out_to[static_cast<size_t>(a.output)];
  }
  return p;
}

void no_duplicates(const std::vector<std::string>& names, const char* what) {
  for (size_t j = 0; j < names.size(); ++j)
    if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(j), names[j]) !=
        names.begin() + static_cast<std::ptrdiff_t>(j))
      throw Error("TrainStep: \"" + names[j] + "\" is listed twice among the " + what);
}

// Where the parameters and moments live, by lane.
enum class Where {
  program,      // AdamW in the program: all three in the backend's slots
  host_slots,   // the host backend, AdamW on the host: parameters in its slots, moments here
  host_copies,  // another backend, AdamW on the host: all three here, the parameters set each step
};

}  // namespace

Program TrainStep::program(const Program& grad, const std::vector<std::string>& params, const optim::AdamW& o,
                           const Lane& lane) {
  no_duplicates(params, "parameters");
  if (!lane.adamw_in_program) return host_adamw_order(grad, params);
  const Program s = optim::with_adamw(grad, params, o);
  return grad.input_index(optim::kAccumLastName) >= 0 ? optim::update_on_last(s, params) : s;
}

struct TrainStep::Impl {
  std::unique_ptr<Backend> b;
  std::vector<std::string> names, frozen;
  optim::AdamW o;
  Lane lane;
  Where where;
  // Input indices of the parameters and, AdamW in the program, of m and v.
  std::vector<int> state_in[3];
  std::vector<int> frozen_in;
  int sc[4] = {-1, -1, -1, -1};     // AdamW's scalars, in the program
  std::vector<char> role;           // per input: 0 the caller's, 1 state, 2 set by step()
  // Gradient accumulation (optim::accumulate_gradients): "accum.last" and
  // the accumulators' inputs; none when the program does not accumulate.
  int accum_last = -1;
  std::vector<int> accum_in;
  int micro = 1;  // optim::accumulated_micro_batches
  int loss_out = -1, norm_out = -1;
  // AdamW on the host: the moments (and, host_copies, the parameters) and
  // the update.
  std::vector<Array> p, m, v, grads;
  std::optional<host::HostAdamW> host_adamw;
  int64_t steps = 0;
  double norm = NAN;
  Array scalar{Type{DType::f32, {}}}, loss, norm_arr;

  Impl(std::unique_ptr<Backend> backend, std::vector<std::string> params, const optim::AdamW& adamw,
       const StepOptions& so)
      : b(std::move(backend)), names(std::move(params)), frozen(so.frozen), o(adamw), lane(so.lane) {
    const Program& prog = b->program();
    if (b->kind() != lane.backend)
      throw Error(std::string("TrainStep: lane ") + lane_name(lane) + " on a " + backend_name(b->kind()) + " backend");
    where = lane.adamw_in_program ? Where::program
            : lane.backend == BackendKind::host ? Where::host_slots
                                                : Where::host_copies;
    no_duplicates(names, "parameters");
    no_duplicates(frozen, "frozen parameters");
    role.assign(prog.inputs.size(), 0);
    for (int g = 0; g < (where == Where::program ? 3 : 1); ++g)
      for (const std::string& name : names) {
        const std::string in = state_name(g, name);
        state_in[g].push_back(b->input(in));
        role[static_cast<size_t>(state_in[g].back())] = 1;
        if (where == Where::program && prog.output_index(optim::updated_name(in)) < 0)
          throw Error("program \"" + prog.name + "\" is not a with_adamw step: no output \"" + optim::updated_name(in) + "\"");
      }
    for (const std::string& f : frozen) {
      if (std::find(names.begin(), names.end(), f) != names.end())
        throw Error("TrainStep: \"" + f + "\" is both a parameter that trains and a frozen one");
      frozen_in.push_back(b->input(f));
      role[static_cast<size_t>(frozen_in.back())] = 1;
    }
    if (where == Where::program)
      for (int i = 0; i < 4; ++i) role[static_cast<size_t>(sc[i] = b->input(optim::kScalarNames[i]))] = 2;
    loss_out = b->output("loss");
    norm_out = prog.output_index(optim::kGradNormName);
    accum_last = prog.input_index(optim::kAccumLastName);
    micro = optim::accumulated_micro_batches(prog);
    if (accum_last >= 0) {
      role[static_cast<size_t>(accum_last)] = 2;
      for (const std::string& n : names) {
        accum_in.push_back(b->input(optim::accumulator_name(n)));
        role[static_cast<size_t>(accum_in.back())] = 1;
      }
    }
    if (so.clip_max_norm > 0) b->set(optim::kClipMaxNormName, Array::scalar(so.clip_max_norm));
    if (where == Where::program) return;
    // AdamW on the host: parameter j is input j, its gradient output 1 + j
    // (TrainStep::program puts them there).
    for (size_t j = 0; j < names.size(); ++j) {
      const std::string g = "grad." + names[j];
      if (state_in[0][j] != static_cast<int>(j) || prog.output_index(g) != static_cast<int>(1 + j))
        throw Error("program \"" + prog.name + "\" is not TrainStep::program's for lane " + lane_name(lane) +
                    ": parameter \"" + names[j] + "\" must be input " + std::to_string(j) + " and \"" + g +
                    "\" output " + std::to_string(1 + j));
    }
    if (loss_out != 0) throw Error("program \"" + prog.name + "\": its output 0 must be \"loss\"");
    m.resize(names.size());
    v.resize(names.size());
    if (where == Where::host_slots) host_adamw.emplace(o);
    else p.resize(names.size()), grads.resize(names.size());
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
  // Whether group g (0 parameters, 1 m, 2 v) lives in the backend's slots:
  // everything with AdamW in the program, the parameters on the host
  // backend; else in the host arrays here.
  bool in_slots(int g) const { return where == Where::program || (g == 0 && where == Where::host_slots); }
  Array& held(int g, size_t j) { return g == 1 ? m[j] : g == 2 ? v[j] : p[j]; }
  const Array& held(int g, size_t j) const { return g == 1 ? m[j] : g == 2 ? v[j] : p[j]; }
  // Parameter j's value of group g, set: copied from const, moved from the others.
  template <class A>
  void put(int g, size_t j, A&& a) {
    if (in_slots(g)) {
      b->set_input(state_in[g][j], std::forward<A>(a));
      return;
    }
    const Type& t = b->program().input_type(state_in[0][j]);
    if (a.type() != t)
      throw Error("TrainStep: " + state_name(g, names[j]) + " is " + a.type().str() + ", the step's input \"" +
                  names[j] + "\" " + t.str());
    held(g, j) = std::forward<A>(a);
  }
  void get(int g, size_t j, Array& to) const {
    if (in_slots(g)) b->read_input(state_in[g][j], to);
    else to = held(g, j);
  }
  // Sets the parameters (trained and frozen) or a group of moments from
  // named arrays, every one once.
  template <class Arrays>
  void set_group(int g, Arrays& from, const char* what) {
    std::vector<char> seen(names.size(), 0), seen_frozen(frozen.size(), 0);
    for (auto& a : from) {
      if (g == 0) {
        const auto f = std::find(frozen.begin(), frozen.end(), a.name);
        if (f != frozen.end()) {
          const size_t k = static_cast<size_t>(f - frozen.begin());
          if (seen_frozen[k]) throw Error("TrainStep: frozen parameter \"" + a.name + "\" given twice");
          seen_frozen[k] = 1;
          if constexpr (std::is_const_v<Arrays>) b->set_input(frozen_in[k], a.array);
          else b->set_input(frozen_in[k], std::move(a.array));
          continue;
        }
      }
      const size_t j = param_index(a.name);
      if (seen[j]) throw Error(std::string("TrainStep: ") + what + " \"" + a.name + "\" given twice");
      seen[j] = 1;
      if constexpr (std::is_const_v<Arrays>) put(g, j, a.array);
      else put(g, j, std::move(a.array));
    }
    for (size_t j = 0; j < names.size(); ++j)
      if (!seen[j]) throw Error(std::string("TrainStep: no ") + what + " \"" + names[j] + "\" given");
    for (size_t k = 0; k < frozen.size() && g == 0; ++k)
      if (!seen_frozen[k]) throw Error("TrainStep: no frozen parameter \"" + frozen[k] + "\" given");
  }
  void zero_accumulators() {
    for (int i : accum_in) b->set_input(i, Array(b->program().input_type(i)));
  }
  // Parameters, moments and the step count from a checkpoint: copied from a
  // const one, moved from the other.
  template <class C>
  void load(C& c) {
    set_group(0, c.params, "parameter");
    set_group(1, c.adam_m, "first moment of");
    set_group(2, c.adam_v, "second moment of");
    zero_accumulators();
    steps = static_cast<int64_t>(c.step);
  }
  void get_group(int g, std::vector<NamedArray>& to) const {
    to.resize(names.size() + (g == 0 ? frozen.size() : 0));
    for (size_t j = 0; j < names.size(); ++j) {
      to[j].name = names[j];
      get(g, j, to[j].array);
    }
    if (g != 0) return;
    for (size_t k = 0; k < frozen.size(); ++k) {
      to[names.size() + k].name = frozen[k];
      b->read_input(frozen_in[k], to[names.size() + k].array);
    }
  }
  // A scalar input that step() sets, from an Array kept here (no allocation per step).
  void set_scalar(int i, float x) {
    scalar.data<float>()[0] = x;
    b->set_input(i, scalar);
  }
  float read_loss() {
    b->read_output(loss_out, loss);
    return loss.data<float>()[0];
  }
  // The n micro-batches' runs and the update; the mean loss.
  double step(int n, void (*set_micro_batch)(void*, int), void* f, const optim::AdamWScalars& s) {
    if (n != micro)
      throw Error("TrainStep: " + std::to_string(n) + " micro-batches for a step program that " +
                  (micro > 1 ? "accumulates " + std::to_string(micro) + " (optim::accumulate_gradients)"
                             : std::string("does not accumulate gradients")));
    if (where == Where::program) {
      const float v4[4] = {s.lr, s.bc1, s.bc2, s.decay};
      for (int i = 0; i < 4; ++i) set_scalar(sc[i], v4[i]);
    }
    if (where == Where::host_copies)
      for (size_t j = 0; j < names.size(); ++j) b->set_input(static_cast<int>(j), p[j]);
    // Every micro-batch but the last: gradients summed into the accumulators
    // (donated, so updated in place); AdamW in the program: update_on_last
    // passes the state through.
    double sum = 0;
    try {
      for (int i = 0; i < n; ++i) {
        if (accum_last >= 0) set_scalar(accum_last, i + 1 == n ? 1.f : 0.f);
        if (set_micro_batch) set_micro_batch(f, i);
        if (i + 1 == n && where == Where::host_slots && std::isfinite(sum)) {
          // The update overlapped with the run; none when its loss is not finite.
          host_adamw->step(*b, 1, s, m, v, loss_out);
        } else {
          b->run();
        }
        sum += read_loss();
      }
    } catch (...) {
      // A step cut short leaves no partial sums for the next one to add in.
      zero_accumulators();
      throw;
    }
    ++steps;
    if (norm_out >= 0) {
      b->read_output(norm_out, norm_arr);
      norm = norm_arr.data<float>()[0];
    }
    const double mean = sum / n;
    if (where == Where::host_copies && std::isfinite(mean))
      for (size_t j = 0; j < names.size(); ++j) {
        b->read_output(static_cast<int>(1 + j), grads[j]);
        optim::adamw_update(o, s, p[j], grads[j], m[j], v[j]);
      }
    return mean;
  }
};

TrainStep::TrainStep(const Program& grad, std::vector<std::string> params, const optim::AdamW& o,
                     const StepOptions& so)
    : TrainStep(make_backend(so.lane.backend, program(grad, params, o, so.lane), so.backend), params, o, so) {}

TrainStep::TrainStep(std::unique_ptr<Backend> b, std::vector<std::string> params, const optim::AdamW& o,
                     const StepOptions& so)
    : impl_(std::make_unique<Impl>(std::move(b), std::move(params), o, so)) {}

TrainStep::~TrainStep() = default;
TrainStep::TrainStep(TrainStep&&) noexcept = default;
TrainStep& TrainStep::operator=(TrainStep&&) noexcept = default;

void TrainStep::init(const std::vector<NamedArray>& params) {
  std::vector<NamedArray> copy = params;
  init(std::move(copy));
}

void TrainStep::init(std::vector<NamedArray>&& params) {
  Impl& s = *impl_;
  s.set_group(0, params, "parameter");
  for (int g = 1; g < 3; ++g)
    for (size_t j = 0; j < s.names.size(); ++j) s.put(g, j, Array(s.b->program().input_type(s.state_in[0][j])));
  s.zero_accumulators();
  s.steps = 0;
}

void TrainStep::load(const Checkpoint& c) { impl_->load(c); }
void TrainStep::load(Checkpoint&& c) { impl_->load(c); }

void TrainStep::load(const std::string& path) {
  std::vector<ParamSpec> expected;
  const Program& p = impl_->b->program();
  for (size_t j = 0; j < impl_->names.size(); ++j)
    expected.push_back({impl_->names[j], p.input_type(impl_->state_in[0][j])});
  for (size_t k = 0; k < impl_->frozen.size(); ++k)
    expected.push_back({impl_->frozen[k], p.input_type(impl_->frozen_in[k])});
  load(load_checkpoint(path, expected));
}

void TrainStep::save(Checkpoint& c) const {
  impl_->get_group(0, c.params);
  impl_->get_group(1, c.adam_m);
  impl_->get_group(2, c.adam_v);
  c.frozen = impl_->frozen;
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
    throw Error("TrainStep::set: \"" + input + "\" is an AdamW scalar or the accumulation's; step() fills it");
  impl_->b->set_input(i, a);
}

double TrainStep::step() { return step(optim::adamw_scalars(impl_->o, impl_->steps + 1)); }

double TrainStep::step(double lr_this_step) {
  return step(optim::adamw_scalars(impl_->o, impl_->steps + 1, lr_this_step));
}

double TrainStep::step(const optim::AdamWScalars& s) {
  return impl_->step(1, nullptr, nullptr, s);
}

double TrainStep::step_micro(int n, void (*set_micro_batch)(void*, int), void* f, const optim::AdamWScalars& s) {
  return impl_->step(n, set_micro_batch, f, s);
}

int64_t TrainStep::steps() const { return impl_->steps; }
double TrainStep::grad_norm() const { return impl_->norm; }

Array TrainStep::read(const std::string& name) const {
  const Impl& s = *impl_;
  Array a;
  for (int g = 0; g < 3; ++g)
    for (size_t j = 0; j < s.names.size(); ++j)
      if (Impl::state_name(g, s.names[j]) == name) {
        s.get(g, j, a);
        return a;
      }
  const Program& p = s.b->program();
  if (const int i = p.input_index(name); i >= 0) s.b->read_input(i, a);
  else s.b->read_output(s.b->output(name), a);
  return a;
}

std::vector<std::pair<std::string, const Array*>> TrainStep::parameters_in_place() const {
  const Impl& s = *impl_;
  std::vector<std::pair<std::string, const Array*>> r;
  for (size_t j = 0; j < s.names.size(); ++j)
    r.emplace_back(s.names[j], s.where == Where::program       ? nullptr
                               : s.where == Where::host_copies ? &s.p[j]
                                                               : s.b->host_input(s.state_in[0][j]));
  for (size_t k = 0; k < s.frozen.size(); ++k) r.emplace_back(s.frozen[k], s.b->host_input(s.frozen_in[k]));
  return r;
}

const std::vector<std::string>& TrainStep::parameters() const { return impl_->names; }
const std::vector<std::string>& TrainStep::frozen() const { return impl_->frozen; }
const Lane& TrainStep::lane() const { return impl_->lane; }
Backend& TrainStep::backend() { return *impl_->b; }
const Backend& TrainStep::backend() const { return *impl_->b; }

}  // namespace capstep
