// The kernel plan: what a backend launches for one step of a Program, as data
// computed without a GPU, since a step's speed on a GPU comes from fewer
// kernels (each launch costs time and a pass over memory). A pass
// over the fused grouping (fusion.h) and the device memory plan
// (device_plan.h) that lists kernel items in launch order, each naming
// the values it reads and writes. The CUDA executor launches the items; it
// decides no fusion itself. `capstep show --kernels` prints the plan, and the
// tests count its kernels, so a count cannot creep back unseen.
#pragma once

#include <string>
#include <vector>

#include "backend/plan/attention_source.h"
#include "backend/plan/fusion.h"
#include "backend/plan/gemm_layout.h"
#include "backend/plan/kernel_source.h"
#include "backend/plan/device_plan.h"

namespace capstep::plan {

enum class ItemKind : unsigned char {
  loop,         // a generated loop kernel (one loop group)
  row,          // a generated row-reduction kernel (a row group)
  col,          // a generated column-reduction kernel (a col group)
  wave,         // one generated kernel for several independent fused groups (Fused::waves)
  gemm,         // one dot_general: a GEMM library call, one kernel
  small_gemm,   // one dot_general as a generated kernel (operands read through their views)
  pack,         // a dot_general operand transposed into scratch before its GEMM
  fill,         // a memset (a dot_general with nothing to contract)
  copy,         // a device-to-device copy (a same-size broadcast, convert or transpose; a scatter's operand)
  strided,      // broadcast_in_dim or transpose through a strided walk (unfused)
  elementwise,  // one elementwise equation (unfused)
  reduce,       // one reduction the fused kinds do not take
  gather,       // gather_rows
  scatter,      // scatter_add_rows (after the copy of its operand): the library kernel, atomics
  scatter_gen,  // a generated scatter_add_rows (a scatter group): sums in index order, no atomics
  attention,    // attention: the fused causal attention forward; attention_grad:
                // the equations of one group (same operands: dq, dk, dv) as
                // two items at the group's first equation, dq (with the rows'
                // lse and D) and dk/dv (attention_source.h)
  end_copy,     // an alias copied back, or an old input saved, after the step
  collective,   // all_reduce: a sum over the replicas; a kernel boundary (nothing fuses across it)
};
const char* item_kind_name(ItemKind k);

struct Item {
  ItemKind kind = ItemKind::loop;
  int group = -1;              // the fused group (loop/row/col), or -1
  int eqn = -1;                // the equation (single items; the first of a group), or -1
  int source = -1;             // generated kernels: index into KernelPlan::sources (= the wave)
  std::vector<int> reads, writes;  // value ids (end copies: none)
  std::vector<int> eqns;       // attention: the equations the item computes (attention_grad: its group)
  std::string what;            // one line: what the kernel computes
};

struct KernelPlanOptions {
  bool fuse = true;            // false: one item per equation (the baseline)
  // with fuse: dot_generals of at most this many multiply-adds run as
  // generated GEMM kernels that read transposed operands in place (a GEMM
  // library call and a transpose kernel each otherwise); 0: none
  int64_t gemm_max_macs = int64_t{1} << 22;
};

struct KernelPlan {
  Fused fused;                 // fused.program is the Program as the backend runs it
  std::vector<GemmLayout> gemm;     // per equation of fused.program (dot_general only)
  Plan memory;                 // the device memory plan of fused.program
  std::vector<KernelSource> sources;  // the generated kernels (fuse only)
  std::vector<Item> items;     // in launch order
  // Per equation of fused.program: the first equation of its attention_grad
  // group (the attention_grad equations with the same operands, dq, dk and dv
  // of one attention: one item at the first, which writes every member's
  // result; the memory plan sees the group as one span), or -1.
  std::vector<int> attention_group;
  int kernels() const { return static_cast<int>(items.size()); }
  // One line per kernel, then the counts by kind, and last "total N kernels".
  std::string describe() const;
};

KernelPlan plan_kernels(const Program& p, const KernelPlanOptions& o = {});

// The memory planner's options for running f's groups as its kernels: spans,
// register-only values, row groups never in place, each group a part.
PlanOptions memory_options(const Fused& f);

}  // namespace capstep::plan
