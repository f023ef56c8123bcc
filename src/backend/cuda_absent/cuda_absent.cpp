// The CUDA backend when this build has no CUDA toolkit: every entry point says
// so, and callers skip their GPU parts by name.
#include "backend/cuda/cuda.h"

namespace capstep::cuda {

static const char* kWhy = "built without CUDA (no CUDA toolkit was found at configure time)";

bool available(std::string* why) {
  if (why) *why = kWhy;
  return false;
}

std::string device_description() { return kWhy; }

struct Executable::Impl {};

Executable::Executable(Program p, Options) {
  check_supported(p);  // the same first refusal as the CUDA build's
  throw Error(std::string("cuda::Executable: ") + kWhy);
}
Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
std::vector<Array> Executable::run(const std::vector<Array>&) { throw Error(kWhy); }
void Executable::upload(int, const Array&) { throw Error(kWhy); }
void Executable::step() { throw Error(kWhy); }
void Executable::download_output(int, Array&) { throw Error(kWhy); }
void Executable::download_input(int, Array&) { throw Error(kWhy); }
const Program& Executable::program() const { throw Error(kWhy); }
size_t Executable::device_bytes() const { return 0; }
std::string Executable::describe_launches() const { return kWhy; }

}  // namespace capstep::cuda
