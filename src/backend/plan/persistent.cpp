// persistent_kernel_source: the plan's generated kernels as the phases of one
// kernel, separated by grid-wide barriers (persistent.h).
#include "backend/plan/persistent.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace capstep::plan {

std::string persistent_blocker(const KernelPlan& kp) {
  if (kp.sources.empty()) return "the plan has no generated kernels";
  for (size_t k = 0; k < kp.items.size(); ++k) {
    const Item& it = kp.items[k];
    if (it.source < 0 && it.kind != ItemKind::end_copy)
      return "kernel " + std::to_string(k) + " (" + item_kind_name(it.kind) + ": " + it.what + ") is not a generated kernel";
  }
  return "";
}

KernelSource persistent_kernel_source(const KernelPlan& kp) {
  const std::string why = persistent_blocker(kp);
  if (!why.empty()) throw Error("persistent_kernel_source: program \"" + kp.fused.program.name + "\" cannot be one kernel: " + why);
  const Program& p = kp.fused.program;
  std::vector<const KernelSource*> phases;
  for (const Item& it : kp.items)
    if (it.source >= 0) phases.push_back(&kp.sources.at(static_cast<size_t>(it.source)));

  // Parameters: values that no phase writes (const, first), then the others;
  // each once, in order of first use.
  std::set<int> written;
  for (const KernelSource* s : phases)
    for (size_t a = static_cast<size_t>(s->n_inputs); a < s->params.size(); ++a) written.insert(s->params[a]);
  KernelSource k;
  k.name = "capstep_persistent";
  std::map<int, std::string> name;
  for (int pass = 0; pass < 2; ++pass) {
    for (const KernelSource* s : phases)
      for (int x : s->params) {
        if (name.count(x) || (written.count(x) != 0) != (pass == 1)) continue;
        name[x] = std::string("q").append(std::to_string(k.params.size()));
        k.params.push_back(x);
      }
    if (pass == 0) k.n_inputs = static_cast<int>(k.params.size());
  }

  std::ostringstream s;
  // The grid barrier: every block's thread 0 reads the generation, arrives on
  // the counter; the last to arrive resets the counter, then advances the
  // generation; the others wait for the generation to change. Fences order
  // each block's writes of the phase before its arrival, and the next phase's
  // reads after the release.
  s << "__device__ unsigned capstep_bar_count = 0;\n"
    << "__device__ volatile unsigned capstep_bar_gen = 0;\n"
    << "__device__ __forceinline__ void capstep_grid_sync() {\n"
    << "  __syncthreads();\n"
    << "  if (threadIdx.x == 0) {\n"
    << "    const unsigned gen = capstep_bar_gen;\n"
    << "    __threadfence();\n"
    << "    if (atomicAdd(&capstep_bar_count, 1u) == gridDim.x - 1u) {\n"
    << "      atomicExch(&capstep_bar_count, 0u);\n"
    << "      __threadfence();\n"
    << "      capstep_bar_gen = gen + 1u;\n"
    << "    } else {\n"
    << "      while (capstep_bar_gen == gen) __nanosleep(32);\n"
    << "    }\n"
    << "    __threadfence();\n"
    << "  }\n"
    << "  __syncthreads();\n"
    << "}\n\n";
  for (const KernelSource* ph : phases) s << device_function(*ph, "__noinline__") << "\n";
  s << kernel_head() << k.name << "(";
  for (size_t a = 0; a < k.params.size(); ++a)
    s << (static_cast<int>(a) < k.n_inputs ? "const " : "") << kernel_mem_type(p.type(k.params[a]).dtype) << "* "
      << name.at(k.params[a]) << ", ";
  s << "long long n) {\n";
  for (size_t j = 0; j < phases.size(); ++j) {
    const KernelSource& ph = *phases[j];
    if (j > 0) s << "  capstep_grid_sync();\n";
    s << "  for (unsigned b = blockIdx.x; b < " << ph.blocks << "u; b += gridDim.x) " << ph.name << "(";
    for (int x : ph.params) s << name.at(x) << ", ";
    s << ph.numel << "LL, b, " << ph.blocks << "u);\n";
    k.blocks = std::max(k.blocks, ph.blocks);
    k.numel = std::max<int64_t>(k.numel, ph.numel);
  }
  s << "}\n";
  k.code = s.str();
  return k;
}

}  // namespace capstep::plan
