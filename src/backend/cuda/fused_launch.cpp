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
#include "backend/plan/persistent.h"

namespace capstep::cuda {

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

void Executable::Impl::load_generated(const std::string& source, const std::string& what, cudaLibrary_t& lib) {
  int major = 0, minor = 0;
  CAPSTEP_CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CAPSTEP_CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const std::string arch = nvrtc_arch_for(major, minor);
  const NvrtcResult r = compile_cached(source, arch, what);
  nvrtc_seconds += r.seconds;
  CAPSTEP_CU(cudaLibraryLoadData(&lib, r.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "(loading " + what + ", compiled for " + arch + ")");
}

void Executable::Impl::compile_kernels() {
  const std::vector<plan::KernelSource>& ks = kp.sources;
  source_kernel.assign(ks.size(), nullptr);
  if (ks.empty()) return;
  load_generated(plan::kernel_module_source(ks), "the fused kernels of program \"" + prog.name + "\"", loop_lib);
  for (size_t k = 0; k < ks.size(); ++k)
    CAPSTEP_CU(cudaLibraryGetKernel(&source_kernel[k], loop_lib, ks[k].name.c_str()),
               "(finding fused kernel " + ks[k].name + ")");
  // The launch passes each kernel handle as the runtime's function pointer;
  // ask for one kernel's attributes that way now, so a runtime that refuses
  // it fails here (and the executor falls back) rather than in the first step.
  cudaFuncAttributes attr{};
  CAPSTEP_CU(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(source_kernel[0])),
             "(querying a fused kernel of program \"" + prog.name + "\")");
  if (attr.maxThreadsPerBlock < plan::kLoopThreads)
    throw Error("fused kernels of program \"" + prog.name + "\" allow only " + std::to_string(attr.maxThreadsPerBlock) +
                " threads per block");
}

void Executable::Impl::point_error_flag() {
  // Generated gathers and scatters report an index outside their table through
  // the module's capstep_err: point it at this executable's error flag.
  for (cudaLibrary_t lib : {loop_lib, persist_lib}) {
    if (!lib) continue;
    void* err_slot = nullptr;
    size_t err_slot_bytes = 0;
    CAPSTEP_CU(cudaLibraryGetGlobal(&err_slot, &err_slot_bytes, lib, "capstep_err"),
               "(finding the error flag pointer of program \"" + prog.name + "\")");
    if (err_slot_bytes != sizeof(void*))
      throw Error("fused kernels of program \"" + prog.name + "\": capstep_err has " + std::to_string(err_slot_bytes) +
                  " bytes, not a pointer's");
    void* flag = d_err;
    CAPSTEP_CU(cudaMemcpy(err_slot, &flag, sizeof flag, cudaMemcpyHostToDevice), "(setting the error flag pointer)");
  }
}

void Executable::Impl::compile_persistent() {
  persist_source = plan::persistent_kernel_source(kp);  // Error naming what is not a generated kernel
  int sms = 0, cooperative = 0;
  CAPSTEP_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CAPSTEP_CU(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  if (!cooperative) throw Error("the device does not support cooperative launches");
  load_generated(plan::kernel_module_source({persist_source}), "the persistent kernel of program \"" + prog.name + "\"",
                 persist_lib);
  CAPSTEP_CU(cudaLibraryGetKernel(&persist_kernel, persist_lib, persist_source.name.c_str()),
             "(finding the persistent kernel)");
  // Every block must be resident at once, or the grid barrier never opens:
  // at most what the device holds of this kernel, and the cooperative launch
  // refuses a grid larger than that.
  int per_sm = 0;
  CAPSTEP_CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(persist_kernel),
                                                           plan::kLoopThreads, 0),
             "(the occupancy of the persistent kernel)");
  if (per_sm < 1) throw Error("the persistent kernel does not fit on a multiprocessor");
  persist_grid = static_cast<unsigned>(std::min<long long>(static_cast<long long>(per_sm) * sms, persist_source.blocks));
}

void Executable::Impl::add_persistent_launch() {
  const plan::KernelSource& k = persist_source;
  const cudaKernel_t kernel = persist_kernel;
  std::vector<void*> ptrs;
  for (int x : k.params) ptrs.push_back(value_addr(x));
  long long n = k.numel;
  const unsigned blocks = persist_grid;
  Impl* self = this;
  launches.push_back({-1, [self, kernel, ptrs, n, blocks]() mutable {
                        std::vector<void*> args;
                        for (void*& p : ptrs) args.push_back(&p);
                        args.push_back(&n);
                        CAPSTEP_CU(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                                               dim3(plan::kLoopThreads), args.data(), 0, self->stream),
                                   "in the persistent kernel");
                      }});
}

void Executable::Impl::add_generated_launch(const plan::Item& it) {
  const plan::KernelSource& k = kp.sources.at(static_cast<size_t>(it.source));
  const cudaKernel_t kernel = source_kernel.at(static_cast<size_t>(it.source));
  const std::string what = "fused kernel " + k.name + " (" + it.what + ")";
  std::vector<void*> ptrs;
  for (int x : k.params) ptrs.push_back(value_addr(x));
  long long n = k.numel;  // not const: the launch passes its address
  const unsigned blocks = k.blocks;
  Impl* self = this;
  launches.push_back({it.eqn, [self, kernel, ptrs, n, blocks, what]() mutable {
                        std::vector<void*> args;
                        for (void*& p : ptrs) args.push_back(&p);
                        args.push_back(&n);
                        CAPSTEP_CU(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                                    dim3(plan::kLoopThreads), args.data(), 0, self->stream),
                                   "in " + what);
                      }});
}

}  // namespace capstep::cuda
