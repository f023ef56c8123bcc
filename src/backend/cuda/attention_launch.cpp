// The attention items of the kernel plan on the device: the kernels of
// plan/attention_source.h, compiled by NVRTC once per executable (for the
// dtypes and widths its program needs) and launched with one signature.
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/executable_impl.h"
#include "backend/cuda/nvrtc.h"
#include "backend/plan/attention_source.h"

namespace capstep::cuda {

cudaKernel_t Executable::Impl::attention_kernel(const std::string& name) {
  if (!attn_lib) {
    std::vector<Type> qs;
    for (const Eqn& e : prog.eqns)
      if (e.op == Op::attention || e.op == Op::attention_grad) qs.push_back(prog.type(e.inputs[0]));
    load_generated(plan::attention_module_source(qs), "the attention kernels of program \"" + prog.name + "\"",
                   attn_lib);
  }
  auto it = attn_kernel.find(name);
  if (it != attn_kernel.end()) return it->second;
  cudaKernel_t k = nullptr;
  CAPSTEP_CU(cudaLibraryGetKernel(&k, attn_lib, name.c_str()), "(finding attention kernel " + name + ")");
  attn_kernel[name] = k;
  return k;
}

void Executable::Impl::add_attention_launch(const plan::Item& item) {
  const Eqn& e = prog.eqns[static_cast<size_t>(item.eqn)];
  const Type& qt = prog.type(e.inputs[0]);
  const plan::AttentionLaunch a = plan::attention_launch(qt);
  if (a.blocks == 0 || a.t == 0) return;
  const std::string what = eqn_what(item.eqn);
  std::vector<char*> in;
  for (int x : e.inputs) in.push_back(value_addr(x));
  while (in.size() < 5) in.push_back(nullptr);
  const bool f32 = qt.dtype == DType::f32;
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.dh));
  Impl* self = this;
  auto launch = [&](const std::string& name, char* res0, char* res1, char* lse, char* delta) {
    const cudaKernel_t kernel = attention_kernel(name);
    const unsigned blocks = a.blocks, threads = static_cast<unsigned>(a.rows);
    std::vector<void*> ptrs = {in[0], in[1], in[2], in[3], in[4], res0, res1, lse, delta};
    const int t = a.t, dh = a.dh;
    const float sf = static_cast<float>(scale);
    const double sd = scale;
    const std::string w = name + " in " + what;
    launches.push_back({item.eqn, [self, kernel, ptrs, t, dh, sf, sd, f32, blocks, threads, w]() mutable {
                          int tt = t, dd = dh;
                          float s32 = sf;
                          double s64 = sd;
                          std::vector<void*> args;
                          for (void*& p : ptrs) args.push_back(&p);
                          args.push_back(&tt);
                          args.push_back(&dd);
                          args.push_back(f32 ? static_cast<void*>(&s32) : static_cast<void*>(&s64));
                          CAPSTEP_CU(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(threads),
                                                      args.data(), 0, self->stream),
                                     "launching " + w);
                        }});
  };
  if (e.op == Op::attention) {
    launch(a.fwd, value_addr(e.out), nullptr, nullptr, nullptr);
    return;
  }
  char* res[3] = {nullptr, nullptr, nullptr};
  for (int m : item.eqns) {
    const Eqn& x = prog.eqns[static_cast<size_t>(m)];
    res[x.attrs.axis] = value_addr(x.out);
  }
  char* lse = addr(plan().scratch_loc[static_cast<size_t>(item.eqn)].at(0));
  char* delta = lse + a.scratch_bytes / 2;
  launch(a.dq, res[0], nullptr, lse, delta);
  if (res[1] || res[2]) launch(a.dkv, res[1], res[2], lse, delta);
}

}  // namespace capstep::cuda
