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

namespace capstep::host {
class Interpreter;
class Background;  // src/backend/host/parallel.h
}

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
// unless the caller set x86's DAZ/FTZ; HostAdamW below follows its
// interpreter's InterpreterOptions::flush_subnormals instead).
void adamw_update(const AdamW& o, const AdamWScalars& s, float* p, const float* g, float* m, float* v, int64_t n);
void adamw_update(const AdamW& o, const AdamWScalars& s, Array& p, const Array& g, Array& m, Array& v);
// Every parameter's update: p[j] from g[j] (g points at p.size() gradients),
// m[j], v[j]. The same bits as one call per parameter, but all their
// elements are shared by the host's threads in one go, so that the many
// small parameters do not each run alone.
void adamw_update(const AdamW& o, const AdamWScalars& s, std::vector<Array>& p, const Array* g, std::vector<Array>& m,
                  std::vector<Array>& v);

// AdamW on the host overlapped with the host interpreter's run of a gradient
// program (lane 1): step() runs interp on `inputs` into `outputs`, where
// inputs[j] is &p[j] for every parameter j and its gradient is the output
// first_grad + j, and updates every p[j], m[j], v[j] to what
// adamw_update(o, s, p, outputs.data() + first_grad, m, v) after the run
// gives (the same bits: the same operations per element; subnormals as the
// interpreter's InterpreterOptions::flush_subnormals says). Each parameter's
// update is cut into chunks of kChunk elements that the host's idle threads
// take (host::Background) as soon as the run has its gradient and reads
// p[j] no more (Interpreter::RunEvents): in the backward pass, while a
// thread would otherwise wait at the end of a GEMM's or a group's parts, or
// while the other runs a step that has no parts. What is left runs on every
// thread after the run. The parameters must be f32, m and v of their types
// (Error otherwise, before anything runs); nothing is allocated per step
// after the first. A run that throws may leave some parameters updated.
// With finite_output >= 0 (a scalar f32 output made before the gradients:
// the loss), no update starts before that output is final, and none is made
// when it is not finite (NaN or infinite): step() then returns false, having
// only run the interpreter, as a training loop that skips such a step wants.
class HostAdamW {
 public:
  static constexpr int64_t kChunk = 2048;
  explicit HostAdamW(const AdamW& o);
  bool step(host::Interpreter& interp, const std::vector<const Array*>& inputs, std::vector<Array>& outputs,
            int first_grad, const AdamWScalars& s, std::vector<Array>& p, std::vector<Array>& m, std::vector<Array>& v,
            int finite_output = -1);
  // Of the last step's chunks, how many ran before the run ended (on idle
  // threads), and how many there were.
  int early_chunks() const { return early_; }
  int chunks() const { return count_; }

 private:
  struct Chunk {
    float *p, *m, *v;
    const float* g;
    int64_t n;
  };
  static void run_chunk(void* self, int i);
  void ready(int j);  // parameter j's gradient is final and the run reads p[j] no more: its chunks may run
  AdamW o_;
  AdamWScalars s_{};
  std::vector<Chunk> chunks_;  // in the order the parameters became ready
  int count_ = 0, early_ = 0;
  std::vector<char> grad_done_, param_done_;
  std::vector<int> waiting_;  // parameters ready before finite_output was known
  int finite_output_ = -1;
  enum class Gate { open, waiting, shut } gate_ = Gate::open;
  std::vector<Array>*p_ = nullptr, *m_ = nullptr, *v_ = nullptr, *outputs_ = nullptr;
  int first_grad_ = 0;
  host::Background* background_ = nullptr;  // the step under way's idle-thread work
};

}  // namespace capstep::optim
