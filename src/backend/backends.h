// The backends behind capstep/backend.h, one factory each; make_backend()
// (backend.cpp) picks one by kind. Each lives in its own folder: host/,
// cuda/ (cuda_absent/ where the build has no CUDA toolkit), pjrt/.
#pragma once

#include <memory>
#include <string>

#include "capstep/backend.h"

namespace capstep::host {
std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o);
}
namespace capstep::cuda {
std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o);
}
namespace capstep::pjrt {
std::unique_ptr<Backend> make_backend(Program p, const PjrtOptions& o);
bool available(const PjrtOptions& o, std::string* why);
}
