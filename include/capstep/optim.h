// AdamW: decoupled weight decay, bias-corrected (Loshchilov & Hutter; the
// formula of torch.optim.AdamW). Two forms that round alike:
//  - adamw_update: the host update (lanes 1 and 2);
//  - with_adamw: a Program -> Program transform that appends the same update
//    as adamw equations (ir.h: AdamW known by name; expand_adamw writes them
//    out as plain equations), with output aliases params' -> params, m' -> m,
//    v' -> v (lane 3, and any backend or StableHLO consumer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"

namespace capstep::optim {

struct AdamW {
  double lr = 1e-2;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  void validate() const;   // Error naming the option out of range
};

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

// Names the fused program uses.
std::string moment1_name(const std::string& param);   // "adamw.m.<param>"
std::string moment2_name(const std::string& param);   // "adamw.v.<param>"
std::string updated_name(const std::string& input);   // "<input>.new"
extern const char* const kScalarNames[4];             // "adamw.lr", "adamw.bc1", "adamw.bc2", "adamw.decay"

// grad_program: value_and_grad's result, whose outputs include "grad.<p>" for
// every p in params (f32). Returns a Program whose inputs are: each param, each
// first moment, each second moment (in params order), then grad_program's other
// inputs, then the four scalars (f32[]). Outputs: grad_program's outputs that
// are not gradients (e.g. "loss"), then "<p>.new" for each param, each m, each v;
// aliased to the inputs they replace. Each parameter's update is three adamw
// equations (p', m', v', in that order), one after the other. grad_program's
// own aliases (accumulate_gradients' accumulators) are kept, renumbered.
// Inputs of grad_program that are not in params (frozen parameters, the
// batch) stay plain inputs: no gradient, no moments, not donated.
Program with_adamw(const Program& grad_program, const std::vector<std::string>& params, const AdamW& o);

// ---- global gradient-norm clipping (issue 15) --------------------------------
// A Program -> Program transform placed between value_and_grad and with_adamw:
//   with_adamw(clip_grad_norm(value_and_grad(loss, params), params), params, o)
// Appends ||g|| = sqrt(sum over params, in order, of sum(grad.p * grad.p)) as
// the output "grad_norm", and replaces every "grad.<p>" by
//   select(||g|| > C, grad.p * (C / ||g||), grad.p)
// i.e. scales by min(1, C/||g||), with C the f32[] scalar input
// "clip.max_norm" (never baked in). When ||g|| <= C the gradients pass through
// bit for bit. Inputs: grad_program's, then "clip.max_norm". Outputs:
// grad_program's in their places, then "grad_norm" (the norm before clipping);
// grad_program's aliases are kept. Error for a missing, repeated or non-f32 gradient.
extern const char* const kClipMaxNormName;            // "clip.max_norm"
extern const char* const kGradNormName;               // "grad_norm"
Program clip_grad_norm(const Program& grad_program, const std::vector<std::string>& params);

// ---- gradient accumulation (issue 39) -----------------------------------------
// N micro-batches, one update of their mean gradient, as one program run once
// per micro-batch, so that the parameters, moments and accumulators stay
// where the step runs (donated) and a backend holds one program:
//   update_on_last(with_adamw(clip_grad_norm(accumulate_gradients(
//       value_and_grad(loss, params), params, N), params), params, o), params)
// or, AdamW on the host, the program up to clip_grad_norm, and the update
// made by the caller after the last micro-batch only.
//
// accumulate_gradients: inputs grad_program's, then "accum.<p>" (of each
// gradient's type, in params order), then "accum.last" (f32[]: nonzero on
// the step's last micro-batch). With s_p = accum.<p> + grad.<p> (the
// micro-batches' gradients summed in their order), every "grad.<p>" output
// becomes s_p / N (on the last micro-batch: the mean gradient; before it, a
// value nobody uses), and the outputs "accum.<p>.new" = last ? 0 : s_p come
// after grad_program's, aliased to "accum.<p>" (so the accumulators are zero
// again after each update; they start zero). grad_program's other outputs
// (the loss: this micro-batch's) and aliases are kept. Error for N < 2 or a
// missing, repeated or non-f32 gradient.
// update_on_last: every with_adamw state output ("<x>.new" for each
// parameter and moment x) becomes select(accum.last != 0, <x>.new, x): before
// the last micro-batch the state passes through unchanged, bit for bit (the
// update is computed and dropped: an elementwise pass over the parameters
// per micro-batch, small beside the forward and backward passes). Error when
// the program has no "accum.last" or is not a with_adamw step of params.
extern const char* const kAccumLastName;              // "accum.last"
std::string accumulator_name(const std::string& param);   // "accum.<param>"
Program accumulate_gradients(const Program& grad_program, const std::vector<std::string>& params, int n);
Program update_on_last(const Program& step_program, const std::vector<std::string>& params);

// ---- bf16 mixed precision (issue 11) -------------------------------------------
// A Program -> Program transform applied to the forward (loss) program, before
// value_and_grad:
//   with_adamw(value_and_grad(mixed_precision_bf16(loss), params), params, o)
// Every dot_general whose operands are f32 gets them through convert(-> bf16)
// (one convert per distinct value, shared by the dots that read it), and its
// result stays f32: bf16 x bf16 -> f32 is a GEMM with f32 accumulation. All
// else is unchanged and stays f32: the inputs (master parameters, so AdamW's
// moments and update are f32 too), softmax, the norms, cross-entropy and every
// other reduction, the elementwise ops. value_and_grad then differentiates
// through the converts: the VJP of convert(f32 -> bf16) is convert(bf16 ->
// f32), and a bf16 dot's cotangents are bf16 x bf16 -> f32 dots of the
// cotangent rounded to bf16 (as autocast's backward does), rounded to bf16
// again as cotangents of the bf16 operands; the gradients reaching the f32
// parameters are f32. Inputs, outputs, names and aliases are p's.
enum class Precision { f32, bf16 };
const char* precision_name(Precision p);              // "f32", "bf16"
Precision parse_precision(const std::string& s);      // Error naming the allowed values
Program mixed_precision_bf16(const Program& forward);
// f32: forward itself; bf16: mixed_precision_bf16(forward).
Program with_precision(const Program& forward, Precision p);
// ---- data parallelism (issue 14) ------------------------------------------------
// A Program -> Program transform placed right after value_and_grad:
//   with_adamw(clip_grad_norm(data_parallel(value_and_grad(loss, params), params, N), params), params, o)
// Replaces every "grad.<p>" and the output "loss" (when there is one) by their
// mean over the N replicas: all_reduce(x) / N (all_reduce(x) alone for N = 1,
// where it is the identity). Every replica then applies the identical update,
// and the loss it reports is the global batch's. Inputs, outputs (names,
// places) and aliases are kept. Error for a missing, repeated or non-float
// gradient, N < 1, or a program that already has an all_reduce.
//
// pack (the default): the all_reduce equations are emitted as consecutive
// runs of equations (buckets, below), each run followed by its divisions; a
// backend sends such a run as ONE message (the host
// interpreter: one Communicator::all_reduce_sum of the run's values copied
// into one buffer; CUDA with NCCL: one ncclGroupStart/ncclGroupEnd).
// pack = false: each all_reduce directly followed by its division, so each is
// its own message. The values are the same either way (the sum is elementwise);
// docs/scaling.md has the measured step times of both.
extern const char* const kLossName;                   // "loss"
struct DataParallelOptions {
  bool pack = true;
  // With pack: the values in output order, in buckets of at most this many
  // bytes, one run (one message) each; a value larger than it is a bucket
  // alone. 0: every value in one bucket. docs/scaling.md has the measurement
  // behind the default (one message pays for many small values; for large
  // ones the copies into one buffer cost more than the messages they save).
  int64_t bucket_bytes = int64_t{4} << 20;
};
Program data_parallel(const Program& grad_program, const std::vector<std::string>& params, int num_replicas,
                      const DataParallelOptions& options = {});

}  // namespace capstep::optim
