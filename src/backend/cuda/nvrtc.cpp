// nvrtc_compile: one NVRTC program per Program (all its loop kernels), so the
// front end parses the shared header once.
#include "backend/cuda/nvrtc.h"

#include <chrono>
#include <memory>

#include <nvrtc.h>

#include "backend/plan/kernel_source.h"
#include "capstep/ir.h"

namespace capstep::cuda {
namespace {

void check_nvrtc(nvrtcResult r, const char* call, const std::string& what) {
  if (r != NVRTC_SUCCESS)
    throw Error(std::string(call) + " failed for " + what + ": " + nvrtcGetErrorString(r));
}

}  // namespace

NvrtcResult nvrtc_compile(const std::string& source, const std::string& arch, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  const char* headers[] = {plan::kScalarMathText, plan::kNvrtcCmathText};
  const char* names[] = {"ir/scalar_math.h", "cmath"};
  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtcCreateProgram(&prog, source.c_str(), "capstep_fused.cu", 2, headers, names), "nvrtcCreateProgram",
              what);
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) {
    (void)nvrtcDestroyProgram(p);
  });
  const std::vector<std::string> opts = plan::nvrtc_options(arch);
  std::vector<const char*> o;
  for (const std::string& s : opts) o.push_back(s.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(o.size()), o.data());
  NvrtcResult res;
  size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(prog, &log_size), "nvrtcGetProgramLogSize", what);
  res.log.assign(log_size, '\0');
  if (log_size > 0) check_nvrtc(nvrtcGetProgramLog(prog, res.log.data()), "nvrtcGetProgramLog", what);
  while (!res.log.empty() && (res.log.back() == '\0' || res.log.back() == '\n')) res.log.pop_back();
  if (r != NVRTC_SUCCESS) {
    std::string log = res.log.size() > 4000 ? res.log.substr(0, 4000) + "\n..." : res.log;
    throw Error("NVRTC could not compile the fused kernels of " + what + " for " + arch + " (" +
                nvrtcGetErrorString(r) + "); this is a bug in capstep's code generation:\n" + log);
  }
  const bool ptx = arch.rfind("compute_", 0) == 0;
  size_t n = 0;
  if (ptx) {
    check_nvrtc(nvrtcGetPTXSize(prog, &n), "nvrtcGetPTXSize", what);
    res.image.resize(n);
    check_nvrtc(nvrtcGetPTX(prog, res.image.data()), "nvrtcGetPTX", what);
  } else {
    check_nvrtc(nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize", what);
    res.image.resize(n);
    check_nvrtc(nvrtcGetCUBIN(prog, res.image.data()), "nvrtcGetCUBIN", what);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string nvrtc_arch_for(int major, int minor) {
  const int want = major * 10 + minor;
  int num = 0;
  std::vector<int> archs;
  if (nvrtcGetNumSupportedArchs(&num) == NVRTC_SUCCESS && num > 0) {
    archs.resize(static_cast<size_t>(num));
    if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  int best = 0;
  for (int a : archs) {
    if (a == want) return "sm_" + std::to_string(want);
    if (a < want && a > best) best = a;
  }
  if (best == 0) return "sm_" + std::to_string(want);  // let NVRTC say what it thinks
  return "compute_" + std::to_string(best);
}

}  // namespace capstep::cuda
