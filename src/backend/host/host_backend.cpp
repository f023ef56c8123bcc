// The host interpreter behind capstep/backend.h. Each input's slot is an
// Array held here; a donated input's slot is the Array of the output it is
// donated to, so the Interpreter computes that output straight over the input
// (Interpreter::run's in-place form: with fusion, every parameter and moment
// of a with_adamw step) and the state is held once.
#include <algorithm>
#include <cstring>

#include "backend/backends.h"
#include "capstep/host_adamw.h"
#include "backend/host/parallel.h"
#include "backend/host/interpreter.h"

namespace capstep::host {
namespace {

class HostBackend final : public Backend {
 public:
  HostBackend(Program p, const BackendOptions& o)
      : interp_(std::move(p), o.host), outs_(interp_.program().outputs.size()),
        own_(interp_.program().inputs.size()), ins_(interp_.program().inputs.size()),
        donated_to_(interp_.program().inputs.size(), -1), communicator_(o.communicator != nullptr) {
    interp_.set_communicator(o.communicator);
    const Program& q = interp_.program();
    for (const Alias& a : q.aliases) donated_to_[static_cast<size_t>(a.input)] = a.output;
    for (size_t i = 0; i < q.inputs.size(); ++i) {
      const int j = donated_to_[i];
      ins_[i] = j >= 0 ? &outs_[static_cast<size_t>(j)] : &own_[i];
      if (j >= 0) outs_[static_cast<size_t>(j)].reset(q.input_type(static_cast<int>(i)));
    }
  }
  const Program& program() const override { return interp_.program(); }
  BackendKind kind() const override { return BackendKind::host; }
  BackendInfo describe() const override {
    BackendInfo b;
    b.device = "host (" + std::to_string(host_threads()) + " thread" + (host_threads() == 1 ? "" : "s") + ")";
    if (interp_.fused_groups() > 0)
      b.plan = "fused: " + std::to_string(interp_.fused_groups()) + " groups of " +
               std::to_string(interp_.fused_equations()) + " equations, " + std::to_string(interp_.jit_loops()) +
               " compiled loops, " + std::to_string(interp_.adamw_groups()) + " AdamW loops, " +
               std::to_string(interp_.dot_pairs()) + " dot pairs";
    else
      b.plan = "unfused: one pass per equation";
    const MemoryPlan m = interp_.memory();
    b.bytes = m.held();
    for (const Array& a : own_) b.bytes += a.bytes();
    for (const Array& a : outs_) b.bytes += a.bytes();
    if (communicator_) b.collective = "Communicator";
    return b;
  }
  const Interpreter& interpreter() const { return interp_; }
  Array* host_input(int i) override {
    if (i < 0 || static_cast<size_t>(i) >= ins_.size() || ins_[static_cast<size_t>(i)] != slot(i)) return nullptr;
    return slot(i);
  }
  size_t release_scratch() override { return interp_.release_arena(); }
  const Array* host_output(int j) const override {
    if (j < 0 || static_cast<size_t>(j) >= outs_.size() || runs() == 0) return nullptr;
    return &outs_[static_cast<size_t>(j)];
  }
  Support supports(const Program& q) const override {
    Support s;
    s.why = unsupported(q);
    s.ok = s.why.empty();
    return s;
  }

 protected:
  void set_slot(int i, const Array& a) override {
    ins_[static_cast<size_t>(i)] = slot(i);
    *slot(i) = a;
  }
  void move_slot(int i, Array&& a) override {
    ins_[static_cast<size_t>(i)] = slot(i);
    *slot(i) = std::move(a);
  }
  // A borrowed input is read where it lies; its own slot gives its memory back.
  bool borrow_slot(int i, const Array& a) override {
    if (donated_to_[static_cast<size_t>(i)] >= 0) return false;
    ins_[static_cast<size_t>(i)] = &a;
    own_[static_cast<size_t>(i)] = Array();
    return true;
  }
  using Backend::execute;
  void execute() override { interp_.run(ins_, outs_); }
  void execute(const RunEvents& events) override {
    Interpreter::RunEvents ev{events.output_ready, events.input_released};
    interp_.run(ins_, outs_, ev);
  }
  void get_output(int j, Array& dst) override { copy(outs_[static_cast<size_t>(j)], dst); }
  void get_input(int i, Array& dst) override { copy(*ins_[static_cast<size_t>(i)], dst); }

 private:
  Array* slot(int i) {
    const int j = donated_to_[static_cast<size_t>(i)];
    return j >= 0 ? &outs_[static_cast<size_t>(j)] : &own_[static_cast<size_t>(i)];
  }
  static void copy(const Array& src, Array& dst) {
    if (src.bytes() > 0) std::memcpy(dst.raw(), src.raw(), src.bytes());
  }

  Interpreter interp_;
  std::vector<Array> outs_;  // one per output; a donated input's slot is its output's Array
  std::vector<Array> own_;   // the slots of the inputs that are not donated
  std::vector<const Array*> ins_;  // what each run reads: the input's slot, or the Array it borrows
  std::vector<int> donated_to_;  // per input: the output it is donated to, or -1
  bool communicator_;            // all_reduce sums over BackendOptions::communicator
};

}  // namespace

std::string unsupported(const Program& p) {
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if (e.op != Op::attention && e.op != Op::attention_grad) continue;
    const DType d = p.type(e.inputs[0]).dtype;
    if (d != DType::f32 && d != DType::f64)
      return "program \"" + p.name + "\" has a " + dtype_name(d) + " attention (equation " + std::to_string(i) + ": " +
             eqn_text(p, e) + "); the host's attention kernels are f32 and f64 only: keep attention in f32";
  }
  return "";
}

const InterpreterOptions& interpreter_options(const Backend& b) {
  const auto* h = dynamic_cast<const HostBackend*>(&b);
  if (!h) throw Error(std::string("not the host backend: ") + backend_name(b.kind()));
  return h->interpreter().options();
}

std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o) {
  return std::make_unique<HostBackend>(std::move(p), o);
}

}  // namespace capstep::host
