// make_backend: the one place that picks a backend by kind (the registry
// sits above every backend; each backend's folder knows only itself).
#include "backend/backends.h"

#include "capstep/cuda_options.h"

namespace capstep {

bool backend_available(BackendKind kind, const BackendOptions& o, std::string* why) {
  switch (kind) {
    case BackendKind::host: return true;
    case BackendKind::cuda: return cuda::available(why);
    case BackendKind::pjrt: return pjrt::available(o.pjrt, why);
  }
  return false;
}

Support supports(BackendKind kind, const Program& p, const BackendOptions& o) {
  Support s;
  switch (kind) {
    case BackendKind::host: s.why = host::unsupported(p); break;
    case BackendKind::cuda: s.why = cuda::unsupported(p); break;
    case BackendKind::pjrt: break;  // every verified program lowers to StableHLO
  }
  std::string why;
  if (s.why.empty() && !backend_available(kind, o, &why))
    s.why = why.empty() ? std::string("the ") + backend_name(kind) + " backend is not available here" : why;
  s.ok = s.why.empty();
  return s;
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
