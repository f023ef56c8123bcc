// Whether a usable CUDA device is present, and why not. Asked once per
// process (the answer is cached): no driver, a driver older than this build's
// runtime, no device, a device this build has no kernel image for, or any
// initialisation error. Never throws.
#include <mutex>

#include "backend/cuda/kernels.h"
#include "backend/cuda/cuda.h"

namespace capstep::cuda {
namespace {

std::string version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
std::string err_str(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

struct Probe {
  bool ok = false;
  std::string why;          // when !ok
  std::string description;  // when ok
};

Probe probe_device() {
  Probe p;
  int drv = 0, rt = 0;
  cudaError_t e = cudaRuntimeGetVersion(&rt);
  if (e != cudaSuccess) {
    p.why = "CUDA runtime unusable (" + err_str(e) + ")";
    return p;
  }
  e = cudaDriverGetVersion(&drv);
  if (e != cudaSuccess || drv == 0) {
    p.why = "no CUDA driver (cudaDriverGetVersion: " + (e != cudaSuccess ? err_str(e) : std::string("no driver")) + ")";
    return p;
  }
  if (drv < rt) {
    p.why = "driver too old: the installed driver supports CUDA " + version_str(drv) + ", this build needs CUDA " +
            version_str(rt);
    return p;
  }
  int n = 0;
  e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    p.why = "no CUDA device" + (e != cudaSuccess ? " (cudaGetDeviceCount: " + err_str(e) + ")" : std::string());
    (void)cudaGetLastError();
    return p;
  }
  if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(nullptr)) != cudaSuccess) {
    p.why = "CUDA device 0 failed to initialise (" + err_str(e) + ")";
    (void)cudaGetLastError();
    return p;
  }
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    p.why = "cudaGetDeviceProperties failed (" + err_str(e) + ")";
    return p;
  }
  const std::string sm = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  if ((e = k::probe_kernel_image()) != cudaSuccess) {
    p.why = "this build has no kernel image for " + std::string(prop.name) + " (" + sm + "): " + err_str(e) +
            "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(prop.major) + std::to_string(prop.minor);
    (void)cudaGetLastError();
    return p;
  }
  const double gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  p.ok = true;
  p.description = std::string(prop.name) + " (" + sm + ", " + std::to_string(static_cast<int>(gib + 0.5)) +
                  " GiB, driver CUDA " + version_str(drv) + ", runtime " + version_str(rt) + ")";
  return p;
}

const Probe& probe() {
  static std::once_flag once;
  static Probe p;
  std::call_once(once, [] {
    try {
      p = probe_device();
    } catch (const std::exception& ex) {
      p.ok = false;
      p.why = std::string("CUDA probe failed: ") + ex.what();
    }
  });
  return p;
}

}  // namespace

bool available(std::string* why) {
  const Probe& p = probe();
  if (why) *why = p.ok ? std::string() : p.why;
  return p.ok;
}

std::string device_description() {
  const Probe& p = probe();
  return p.ok ? p.description : p.why;
}

}  // namespace capstep::cuda
