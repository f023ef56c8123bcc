// make_backend: the one place that picks a backend by kind (the registry
// sits above every backend; each backend's folder knows only itself).
#include "backend/backends.h"

#include "capstep/cuda.h"

namespace capstep {

bool backend_available(BackendKind kind, const BackendOptions& o, std::string* why) {
  switch (kind) {
    case BackendKind::host: return true;
    case BackendKind::cuda: return cuda::available(why);
    case BackendKind::pjrt: return pjrt::available(o.pjrt, why);
  }
  return false;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, Program p, const BackendOptions& o) {
  switch (kind) {
    case BackendKind::host: return host::make_backend(std::move(p), o);
    case BackendKind::cuda: return cuda::make_backend(std::move(p), o);
    case BackendKind::pjrt: return pjrt::make_backend(std::move(p), o);
  }
  throw Error("make_backend: unknown backend kind");
}

}  // namespace capstep
