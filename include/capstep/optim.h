// AdamW: decoupled weight decay, bias-corrected (Loshchilov & Hutter; the
// formula of torch.optim.AdamW). Two forms that round alike:
//  - adamw_update: the host update (lanes 1 and 2);
//  - with_adamw (transforms.h): a Program -> Program transform that appends the same update
//    as adamw equations (ir.h: AdamW known by name; expand_adamw writes them
//    out as plain equations), with output aliases params' -> params, m' -> m,
//    v' -> v (lane 3, and any backend or StableHLO consumer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"
#include "capstep/transforms.h"  // AdamW, with_adamw and the other optimizer passes

namespace capstep::optim {

// The four per-step scalars, inputs of the fused program (never baked in, so a
// learning-rate schedule changes no compiled program). `step` counts from 1.
struct AdamWScalars {
  float lr;      // learning rate of this step
  float bc1;     // 1 / (1 - beta1^step)
  float bc2;     // 1 / (1 - beta2^step)
  float decay;   // 1 - lr * weight_decay
};
AdamWScalars adamw_scalars(const AdamW& o, int64_t step);
AdamWScalars adamw_scalars(const AdamW& o, int64_t step, double lr_this_step);

// One parameter's update in place, f32, in the exact operation order of the
// program that with_adamw appends:
//   m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*(g*g)
//   p = p*decay - lr * ((m*bc1) / (sqrt(v*bc2) + eps))
// Subnormal numbers as the calling thread's floating-point mode says (IEEE
// unless the caller set x86's DAZ/FTZ; the host lane's update, overlapped
// with the run, follows its backend's InterpreterOptions::flush_subnormals).
void adamw_update(const AdamW& o, const AdamWScalars& s, float* p, const float* g, float* m, float* v, int64_t n);
void adamw_update(const AdamW& o, const AdamWScalars& s, Array& p, const Array& g, Array& m, Array& v);
// Every parameter's update: p[j] from g[j] (g points at p.size() gradients),
// m[j], v[j]. The same bits as one call per parameter, but all their
// elements are shared by the host's threads in one go, so that the many
// small parameters do not each run alone.
void adamw_update(const AdamW& o, const AdamWScalars& s, std::vector<Array>& p, const Array* g, std::vector<Array>& m,
                  std::vector<Array>& v);


}  // namespace capstep::optim
