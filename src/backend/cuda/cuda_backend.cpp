// The CUDA executor behind capstep/backend.h. Written against cuda::Executable's
// public calls only, so it is built with or without the CUDA toolkit (without
// one, Executable's constructor throws "built without CUDA"). Each input's
// slot is its device buffer (Executable::upload); a donated output is written
// back into its input's buffer by the executable, so state stays on the device.
//
// Data parallel (BackendOptions::communicator): the backend builds and owns
// the NCCL communicator its all_reduce equations run on (built with NCCL
// only), so that a caller passes the same Communicator to every backend.
#include <algorithm>

#include "backend/backends.h"
#include "backend/cuda/nccl.h"
#include "backend/cuda/cuda.h"

namespace capstep::cuda {
namespace {

#ifdef CAPSTEP_HAVE_NCCL
using Nccl = NcclCommunicator;
#else
struct Nccl {};  // never made: without NCCL only one replica runs here
#endif

// The NCCL communicator over `c`'s ranks for a program with all_reduce
// equations (every rank calls this at the same point with the same program:
// it is a collective), or nullptr without a communicator or without an
// all_reduce to run (a program that sums nothing joins no collective, so a
// backend made on one rank only, for an evaluation, waits for no other).
// Without NCCL in the build, a communicator of one rank is one replica
// (nullptr) and of several an Error.
std::unique_ptr<Nccl> nccl_for(Communicator* c, const Program& p) {
  if (c == nullptr ||
      std::none_of(p.eqns.begin(), p.eqns.end(), [](const Eqn& e) { return e.op == Op::all_reduce; }))
    return nullptr;
#ifdef CAPSTEP_HAVE_NCCL
  return std::make_unique<NcclCommunicator>(*c);
#else
  if (c->size() > 1)
    throw Error("the cuda backend cannot sum over the " + std::to_string(c->size()) +
                " replicas of BackendOptions::communicator: this capstep was built without NCCL (CMake found no "
                "nccl.h and libnccl: see docs/scaling.md); the host backend runs them over the Communicator");
  return nullptr;
#endif
}

Options with_nccl(Options o, Nccl* n) {
#ifdef CAPSTEP_HAVE_NCCL
  o.nccl = n;
#else
  (void)n;
  o.nccl = nullptr;
#endif
  return o;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(Program p, const BackendOptions& o)
      : nccl_(nccl_for(o.communicator, p)), exe_(std::move(p), with_nccl(o.cuda, nccl_.get())) {}
  const Program& program() const override { return exe_.program(); }
  BackendKind kind() const override { return BackendKind::cuda; }
  BackendInfo describe() const override {
    BackendInfo b{device_description(), exe_.describe_launches(), exe_.device_bytes(), {}};
#ifdef CAPSTEP_HAVE_NCCL
    if (nccl_) b.collective = nccl_version();
#endif
    return b;
  }
  Support supports(const Program& q) const override {
    Support s;
    s.why = unsupported(q);
    s.ok = s.why.empty();
    return s;
  }

 protected:
  void set_slot(int i, const Array& a) override { exe_.upload(i, a); }
  using Backend::execute;
  void execute() override { exe_.step(); }
  void get_output(int j, Array& dst) override { exe_.download_output(j, dst); }
  void get_input(int i, Array& dst) override { exe_.download_input(i, dst); }

 private:
  // Declared before exe_: made first (the NCCL set-up precedes the compile,
  // as every rank's does), destroyed after the executable that enqueues on it.
  std::unique_ptr<Nccl> nccl_;
  Executable exe_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o) {
  check_supported(p);
  std::string why;
  if (!available(&why)) throw Error("the cuda backend cannot run here: " + why);
  return std::make_unique<CudaBackend>(std::move(p), o);
}

std::string unsupported(const Program& p) {
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if ((e.op == Op::attention || e.op == Op::attention_grad) && p.type(e.inputs[0]).dtype == DType::bf16)
      return "program \"" + p.name + "\" has a bf16 attention (equation " + std::to_string(i) + ": " + eqn_text(p, e) +
             "); the GPU's attention kernels are f32 and f64 only, as the host's are: keep attention in f32, or run the "
             "program on the PJRT backend";
  }
  return "";
}

}  // namespace capstep::cuda
