// The fused path of the CUDA executor (Options::fuse): every loop group's
// kernel source (plan/kernel_source.h) goes into one NVRTC program, compiled
// once when the Program is compiled for this device's architecture, loaded
// with the runtime's library API (no driver-API link needed), and launched in
// place of the group's per-equation kernels, inside the captured graph.
#include <algorithm>
#include <map>
#include <mutex>

#include "backend/cuda/check.h"
#include "backend/cuda/executable_impl.h"
#include "backend/cuda/nvrtc.h"
#include "backend/plan/kernel_source.h"

namespace capstep::cuda {
namespace {

// Compiled images by (architecture, source), for this process: a program
// compiled again (lane 2 and a retry, checkpoint resume, the tests) costs no
// second NVRTC run. Images are small (under a MiB for the seed's model).
NvrtcResult compile_cached(const std::string& source, const std::string& arch, const std::string& what) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, NvrtcResult> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({arch, source});
    if (it != cache.end()) {
      NvrtcResult r = it->second;
      r.seconds = 0;
      return r;
    }
  }
  NvrtcResult r = nvrtc_compile(source, arch, what);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 256) cache.clear();
  cache.emplace(std::make_pair(arch, source), r);
  return r;
}

}  // namespace

void Executable::Impl::compile_loop_kernels() {
  const std::vector<plan::KernelSource> ks = plan::loop_kernel_sources(fused);
  group_kernel.assign(fused.groups.size(), nullptr);
  group_params.assign(fused.groups.size(), {});
  if (ks.empty()) return;
  int major = 0, minor = 0;
  CAPSTEP_CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CAPSTEP_CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const std::string arch = nvrtc_arch_for(major, minor);
  const NvrtcResult r = compile_cached(plan::kernel_module_source(ks), arch, "program \"" + prog.name + "\"");
  nvrtc_seconds = r.seconds;
  CAPSTEP_CU(cudaLibraryLoadData(&loop_lib, r.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "(loading the fused kernels of program \"" + prog.name + "\", compiled for " + arch + ")");
  for (const plan::KernelSource& k : ks) {
    const int g = std::stoi(k.name.substr(k.name.rfind('_') + 1));
    CAPSTEP_CU(cudaLibraryGetKernel(&group_kernel[static_cast<size_t>(g)], loop_lib, k.name.c_str()),
               "(finding fused kernel " + k.name + ")");
    group_params[static_cast<size_t>(g)] = k.params;
  }
  // The launch passes each kernel handle as the runtime's function pointer;
  // ask for one kernel's attributes that way now, so a runtime that refuses
  // it fails here (and the executor falls back) rather than in the first step.
  cudaFuncAttributes attr{};
  for (cudaKernel_t kern : group_kernel)
    if (kern) {
      CAPSTEP_CU(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kern)),
                 "(querying a fused kernel of program \"" + prog.name + "\")");
      if (attr.maxThreadsPerBlock < plan::kLoopThreads)
        throw Error("fused kernels of program \"" + prog.name + "\" allow only " +
                    std::to_string(attr.maxThreadsPerBlock) + " threads per block");
      break;
    }
}

void Executable::Impl::add_loop_launch(int group) {
  const plan::Group& g = fused.groups[static_cast<size_t>(group)];
  const cudaKernel_t kernel = group_kernel[static_cast<size_t>(group)];
  if (!kernel || g.numel == 0) return;  // nothing to write
  std::string what = "fused kernel capstep_loop_" + std::to_string(group) + " (equations " +
                     std::to_string(g.first) + ".." + std::to_string(g.last) + ":";
  for (int d = g.first; d <= g.last && d < g.first + 6; ++d)
    what += std::string(" ") + op_name(prog.eqns[static_cast<size_t>(d)].op);
  what += g.size() > 6 ? " ...)" : ")";
  std::vector<void*> ptrs;
  for (int x : group_params[static_cast<size_t>(group)]) ptrs.push_back(value_addr(x));
  long long n = g.numel;  // not const: the launch passes its address
  // enough blocks to fill the device a few times over; the loop strides past that
  const long long want = (n + plan::kLoopThreads - 1) / plan::kLoopThreads;
  const unsigned blocks = static_cast<unsigned>(std::clamp<long long>(want, 1, 4096));
  Impl* self = this;
  launches.push_back({g.first, [self, kernel, ptrs, n, blocks, what]() mutable {
                        std::vector<void*> args;
                        for (void*& p : ptrs) args.push_back(&p);
                        args.push_back(&n);
                        CAPSTEP_CU(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                                    dim3(plan::kLoopThreads), args.data(), 0, self->stream),
                                   "in " + what);
                      }});
}

}  // namespace capstep::cuda
