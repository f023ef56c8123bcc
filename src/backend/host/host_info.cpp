// capstep/host.h: the host backend's setting and reports, from its own headers.
#include "capstep/host.h"

#include "backend/host/gemm.h"
#include "backend/host/loop_jit.h"
#include "backend/host/parallel.h"

namespace capstep::host {

std::string gemm_line() { return gemm_info().line; }
bool subnormal_flush_available() { return SubnormalMode::available(); }

}  // namespace capstep::host
