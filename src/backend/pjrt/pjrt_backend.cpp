// The PJRT backend behind capstep/backend.h: the Program exported as
// StableHLO text (to_stablehlo, with tf.aliasing_output on each donated
// input), compiled by the plugin, one PJRT_Buffer per input slot. A run
// donates every aliased input: the plugin deletes its buffer and the output
// takes over its memory, and that output's buffer becomes the input's slot,
// so the next run reads the updated state where it already lives. Inputs the
// program does not alias are passed as non-donatable.
#include <filesystem>

#include "backend/backends.h"
#include "backend/pjrt/pjrt.h"
#include "capstep/stablehlo.h"
#include "capstep/transforms.h"

namespace capstep::pjrt {
namespace {

// XLA reduces a bf16 stablehlo.reduce in bf16, rounding every partial sum;
// capstep's reduce_sum of bf16 accumulates in f32 and rounds once (ir.h).
// Each such equation becomes: convert to f32, the f32 sum, convert back.
Program sum_bf16_in_f32(const Program& p) {
  bool any = false;
  for (const Eqn& e : p.eqns) any = any || (e.op == Op::reduce_sum && p.type(e.out).dtype == DType::bf16);
  if (!any) return p;
  Program q;
  q.name = p.name;
  std::vector<int> to(static_cast<size_t>(p.num_values()), -1);
  for (const NamedValue& in : p.inputs) to[static_cast<size_t>(in.value)] = q.add_input(in.name, p.type(in.value));
  for (const Eqn& e : p.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(to[static_cast<size_t>(v)]);
    const Type& out = p.type(e.out);
    int r;
    if (e.op == Op::reduce_sum && out.dtype == DType::bf16) {
      const int wide = q.add_eqn_typed(Op::convert, ins, {}, {DType::f32, p.type(e.inputs[0]).shape});
      r = q.add_eqn_typed(Op::convert, {q.add_eqn(Op::reduce_sum, {wide}, e.attrs)}, {}, out);
    } else {
      r = has_given_type(e.op) ? q.add_eqn_typed(e.op, ins, e.attrs, out) : q.add_eqn(e.op, ins, e.attrs);
    }
    to[static_cast<size_t>(e.out)] = r;
  }
  for (const NamedValue& o : p.outputs) q.add_output(o.name, to[static_cast<size_t>(o.value)]);
  q.aliases = p.aliases;
  return q;
}

class PjrtBackend final : public Backend {
 public:
  PjrtBackend(Program p, const PjrtOptions& o)
      : p_(sum_bf16_in_f32(expand_adamw(p))), c_(client(o)), mlir_(to_stablehlo(p_)), exe_(c_, mlir_, o.cache_dir),
        slots_(p_.inputs.size()), outs_(p_.outputs.size()), donated_to_(p_.inputs.size(), -1),
        donated_from_(p_.outputs.size(), -1) {
    if (exe_.num_outputs() != p_.outputs.size())
      throw Error("PJRT: the executable of program \"" + p_.name + "\" has " + std::to_string(exe_.num_outputs()) +
                  " outputs, the program " + std::to_string(p_.outputs.size()));
    for (const Alias& a : p_.aliases) {
      donated_to_[static_cast<size_t>(a.input)] = a.output;
      donated_from_[static_cast<size_t>(a.output)] = a.input;
    }
    for (size_t i = 0; i < p_.inputs.size(); ++i)
      if (donated_to_[i] < 0) non_donatable_.push_back(static_cast<int64_t>(i));
  }

  const Program& program() const override { return p_; }
  BackendKind kind() const override { return BackendKind::pjrt; }
  // Every verified program lowers to StableHLO; the plugin's compile is the
  // only other refusal, and it comes from make_backend.
  Support supports(const Program&) const override { return {}; }
  BackendInfo describe() const override {
    BackendInfo b;
    // "PJRT cpu (plugin pjrt_c_api_cpu_plugin.so, PJRT C API 0.115)"; a GPU's kind
    // and the platform's version where they say more than the platform's name.
    const auto more = [&](const std::string& s, const char* sep) { return s.empty() || s == c_.platform ? "" : sep + s; };
    b.device = "PJRT " + c_.platform + more(c_.device_kind, " ") + " (plugin " +
               std::filesystem::path(c_.plugin->path).filename().string() + ", PJRT C API " + c_.plugin->version() +
               more(c_.platform_version, ", ") + ")";
    b.plan = "XLA executable of " + std::to_string(mlir_.size()) + " bytes of StableHLO, " +
             std::to_string(p_.eqns.size()) + " equations, " + std::to_string(p_.aliases.size()) + " donated inputs; " +
             exe_.origin();
    for (const Buffer& s : slots_)
      if (s) b.bytes += device_bytes(c_, s.get());
    for (const Buffer& s : outs_)
      if (s) b.bytes += device_bytes(c_, s.get());
    return b;
  }

  const void* slot_address(int i) const { return device_pointer(c_, slots_[static_cast<size_t>(i)].get()); }
  RunFacts last_run() const { return facts_; }

 protected:
  void set_slot(int i, const Array& a) override { slots_[static_cast<size_t>(i)] = upload(c_, a); }

  using Backend::execute;
  void execute() override {
    std::vector<c::PJRT_Buffer*> args(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) args[i] = slots_[i].get();
    std::vector<Buffer> outs = exe_.execute(args, non_donatable_);
    facts_ = {};
    for (size_t j = 0; j < outs.size(); ++j) {
      const int i = donated_from_[j];
      if (i < 0) {
        outs_[j] = std::move(outs[j]);
        continue;
      }
      Buffer& slot = slots_[static_cast<size_t>(i)];
      ++facts_.donated;
      if (is_deleted(c_, slot.get())) ++facts_.deleted;
      slot = std::move(outs[j]);
    }
  }

  void get_output(int j, Array& dst) override {
    const int i = donated_from_[static_cast<size_t>(j)];
    download(c_, i >= 0 ? slots_[static_cast<size_t>(i)].get() : outs_[static_cast<size_t>(j)].get(), dst);
  }
  void get_input(int i, Array& dst) override { download(c_, slots_[static_cast<size_t>(i)].get(), dst); }

 private:
  Program p_;
  const Client& c_;
  std::string mlir_;
  Executable exe_;
  std::vector<Buffer> slots_;         // one per input; a donated input's holds its output after a run
  std::vector<Buffer> outs_;          // the outputs of the last run that no input is donated to
  std::vector<int> donated_to_;       // per input: the output it is donated to, or -1
  std::vector<int> donated_from_;     // per output: the input donated to it, or -1
  std::vector<int64_t> non_donatable_;
  RunFacts facts_;
};

const PjrtBackend& as_pjrt(const Backend& b) {
  const auto* p = dynamic_cast<const PjrtBackend*>(&b);
  if (!p) throw Error(std::string("not a PJRT backend: ") + backend_name(b.kind()));
  return *p;
}

}  // namespace

bool available(const PjrtOptions& o, std::string* why) {
  try {
    client(o);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o) {
  // Refused before the plugin loads: a step whose all_reduce should sum over
  // several replicas would otherwise run as if it were alone (XLA's
  // all-reduce over one replica is the identity), each rank on its own.
  if (o.communicator != nullptr && o.communicator->size() > 1)
    throw Error("the PJRT backend runs one replica: BackendOptions::communicator has " +
                std::to_string(o.communicator->size()) + " (rank " + std::to_string(o.communicator->rank()) +
                "); data parallelism runs on the host and cuda backends");
  return std::make_unique<PjrtBackend>(std::move(p), o.pjrt);
}

const void* slot_address(const Backend& b, int input) { return as_pjrt(b).slot_address(input); }
RunFacts last_run(const Backend& b) { return as_pjrt(b).last_run(); }

}  // namespace capstep::pjrt
