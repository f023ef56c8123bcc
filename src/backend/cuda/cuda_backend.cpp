// The CUDA executor behind capstep/backend.h. Written against cuda::Executable's
// public calls only, so it is built with or without the CUDA toolkit (without
// one, Executable's constructor throws "built without CUDA"). Each input's
// slot is its device buffer (Executable::upload); a donated output is written
// back into its input's buffer by the executable, so state stays on the device.
#include "backend/backends.h"
#include "capstep/cuda.h"

namespace capstep::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(Program p, const BackendOptions& o) : exe_(std::move(p), o.cuda) {}
  const Program& program() const override { return exe_.program(); }
  BackendKind kind() const override { return BackendKind::cuda; }
  BackendInfo describe() const override { return {device_description(), exe_.describe_launches(), exe_.device_bytes()}; }

 protected:
  void set_slot(int i, const Array& a) override { exe_.upload(i, a); }
  void execute() override { exe_.step(); }
  void get_output(int j, Array& dst) override { exe_.download_output(j, dst); }
  void get_input(int i, Array& dst) override { exe_.download_input(i, dst); }

 private:
  Executable exe_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o) {
  check_supported(p);
  std::string why;
  if (!available(&why)) throw Error("the cuda backend cannot run here: " + why);
  return std::make_unique<CudaBackend>(std::move(p), o);
}

}  // namespace capstep::cuda
