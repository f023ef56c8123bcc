// The PJRT backend (capstep/backend.h, BackendKind::pjrt): not written yet.
#include "backend/backends.h"

namespace capstep::pjrt {

static const char* kWhy = "this build has no PJRT backend";

bool available(const PjrtOptions&, std::string* why) {
  if (why) *why = kWhy;
  return false;
}

std::unique_ptr<Backend> make_backend(Program, const PjrtOptions&) { throw Error(kWhy); }

}  // namespace capstep::pjrt
