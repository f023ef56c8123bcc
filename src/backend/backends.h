// The backends behind capstep/backend.h, one factory each; make_backend()
// (backend.cpp) picks one by kind. Each lives in its own folder: host/,
// cuda/ (cuda_absent/ where the build has no CUDA toolkit), pjrt/.
#pragma once

#include <memory>
#include <string>

#include "capstep/backend.h"

namespace capstep::host {
std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o);
// Why the host interpreter has no kernel for p, or "" when it has them all
// (its attention kernels are f32 and f64 only).
std::string unsupported(const Program& p);
}
namespace capstep::cuda {
std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o);
// Why the CUDA backend has no kernels for p, or "" when it has them all.
std::string unsupported(const Program& p);
}
namespace capstep::pjrt {
// o.pjrt; o.communicator of more than one replica is an Error (one replica).
std::unique_ptr<Backend> make_backend(Program p, const BackendOptions& o);
bool available(const PjrtOptions& o, std::string* why);
// What a PJRT backend lets one observe of donation (for the tests; Error for
// another backend): the device address of input `input`'s slot (the
// plugin's opaque pointer), and of the last run, how many inputs were
// donated and how many of their buffers the plugin then reported deleted.
const void* slot_address(const Backend& b, int input);
struct RunFacts {
  int donated = 0, deleted = 0;
};
RunFacts last_run(const Backend& b);
}
