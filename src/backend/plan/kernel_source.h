// CUDA C++ source of the fused kernels: one __global__ function per loop group
// (fusion.h), all of a Program's kernels in one NVRTC program. Pure C++ (text
// only), so the generated source is golden-tested on any machine; the CUDA
// backend compiles it with NVRTC when a Program is compiled.
//
// Each kernel is a grid-stride loop over the group's N elements. For element i
// it evaluates every member in order, with the formulas of src/ir/scalar_math.h
// (the same header the host interpreter and the per-equation kernels call,
// handed to NVRTC as text: kScalarMathText), keeps members' values in
// registers, and stores only the group's outputs, after every load (so that a
// donated output may share its input's bytes; see device_plan.h).
//   - an elementwise member reads an outside operand at i;
//   - a broadcast_in_dim with a smaller operand reads it at the broadcast's
//     index map (plan::broadcast_walk, unrolled with constant sizes and strides);
//   - a splat constant is a literal (exact: hex floats or bit patterns),
//     except as a dot_general's or a gather_rows' operand (read from its buffer).
#pragma once

#include <string>
#include <vector>

#include "backend/plan/fusion.h"
#include "capstep/ir.h"

namespace capstep::plan {

// The text of src/ir/scalar_math.h, compiled into the library (fusion_test
// checks that it equals the file).
extern const char* const kScalarMathText;
// A stand-in for <cmath> under NVRTC: the CUDA math overloads in namespace std.
extern const char* const kNvrtcCmathText;

struct KernelSource {
  std::string name;            // "capstep_loop_12", "capstep_row_3", "capstep_col_7", "capstep_gemm_9" (the group's index), "capstep_wave_4" (the wave's)
  std::vector<int> params;     // value ids: the group's inputs read from memory, then its outputs
  int n_inputs = 0;            // params[0, n_inputs) are inputs
  int64_t numel = 0;           // elements (the last parameter, a long long)
  unsigned blocks = 1;         // the launch: blocks of kLoopThreads threads
  std::string code;            // the extern "C" __global__ function
};

// The kernel of loop group `index` of f (Error unless it is a loop group).
KernelSource loop_kernel_source(const Fused& f, int index);
// A row group: a warp per row, one pass over the row per level of reductions.
KernelSource row_kernel_source(const Fused& f, int index);
// A col group: blocks take tiles of 8 kept elements, 32 row lanes each,
// combined by shuffles and shared memory in a fixed order.
KernelSource col_kernel_source(const Fused& f, int index);
// A gemm group: one dot_general, its operands read through their views.
KernelSource gemm_kernel_source(const Fused& f, int index);
// Wave `wave` of f (Fused::waves) as one kernel: each group's kernel a
// __device__ function on a range of blocks of its own.
KernelSource wave_kernel_source(const Fused& f, int wave);
// A scatter group: a thread per output element adds its update rows in order.
KernelSource scatter_kernel_source(const Fused& f, int index);
// "extern \"C\" __global__ void __launch_bounds__(kLoopThreads) ": how every
// generated kernel begins.
std::string kernel_head();
// The C type of a kernel parameter's elements ("float", "unsigned char" for i1, ...).
const char* kernel_mem_type(DType t);
// Kernel k (a group's or a wave's) as a __device__ function (with `qualifier`,
// e.g. "__forceinline__") that takes its block index and block count as its
// last arguments (blk, grd) instead of blockIdx.x and gridDim.x: a part of a
// wave kernel, or a phase of the persistent kernel.
std::string device_function(const KernelSource& k, const std::string& qualifier);
// The kernel of a loop, row, col, gemm or scatter group (Error for any other).
KernelSource group_kernel_source(const Fused& f, int index);
// Every loop group that writes something (sinks included, each on its own).
std::vector<KernelSource> loop_kernel_sources(const Fused& f);
// What a backend launches: one kernel per wave (a group's own kernel for a
// wave of one group), in launch order.
std::vector<KernelSource> kernel_sources(const Fused& f);
// One translation unit with all of them.
std::string kernel_module_source(const std::vector<KernelSource>& ks);
// NVRTC options for an architecture ("sm_90"): no FMA contraction, so that the
// fused kernels round as the host interpreter does; IEEE division and sqrt.
std::vector<std::string> nvrtc_options(const std::string& arch);

constexpr int kLoopThreads = 256;

}  // namespace capstep::plan
