// Every Program -> Program pass, in src/transforms/: differentiation,
// common-subexpression and dead-code elimination, activation checkpointing,
// the attention and AdamW expansions, the optimizer's passes (AdamW's update,
// clipping, accumulation, mixed precision, data parallelism) and LoRA.
//
//   Program g = capstep::value_and_grad(loss_program, {"w", "b"});
//   // g: same inputs; outputs = loss_program's outputs, then "grad.w", "grad.b"
//
// Each result is an ordinary Program of the primitives of ir.h (emitted
// through the Tensor API), so every backend and the StableHLO export run it
// unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"

namespace capstep {

// ---- differentiation ------------------------------------------------------------
// Output 0 of `p` must be a scalar float (the loss). Each name in `wrt` must be
// a float input of `p`, listed once. The result has p's inputs and aliases;
// its outputs are p's outputs followed by "grad.<name>" for each wrt name, in
// order, of the input's type (zeros when the loss does not depend on it).
// Throws Error otherwise.
Program value_and_grad(const Program& p, const std::vector<std::string>& wrt);

// Merges equations that compute the same thing (same op, operands, attributes
// and type), then drops what no output needs. value_and_grad applies it; it is
// exposed for other transforms that append equations.
Program eliminate_common_subexpressions(const Program& p);

// ---- activation checkpointing ------------------------------------------------
// The checkpoint regions (Attrs::region >= 0; a causal LM's transformer
// blocks, numbered from 0) that p's equations carry, ascending.
std::vector<int> checkpoint_regions(const Program& p);
// The regions r of p with r % every == 0 (every = 1: all of them; K: every
// K-th block, from block 0). Error when every < 1.
std::vector<int> every_kth_region(const Program& p, int every);

// Activation checkpointing, a transform of value_and_grad's result (or of a
// transform of it: data_parallel, clip_grad_norm, with_adamw, in any order):
// for each listed region, the gradient equations' reads of the region's
// forward values go to copies of the region's forward equations (the same
// operations, in the same order, from the same operands), placed just before
// the first gradient equation that reads one; the originals then die inside
// the forward. The forward is what output 0 (the loss) depends on. A region
// value that a forward equation outside the region reads (the block's
// result on the residual stream, a constant shared with other blocks), or
// that is an output, is kept and read as it is. The copies read the region's
// main input (the largest value it reads from outside, other than p's inputs,
// that depends on p's inputs: the residual stream) through
// select(true, input, g), g the last gradient value
// of its type before them: the same bits, and a data dependency, so that no
// backend's scheduler runs the recomputation during the forward. The result has p's inputs,
// outputs and aliases and the same values bit for bit; it holds the
// activations of the regions listed for less of the step, at the cost of
// computing their forward twice. It applies no common-subexpression
// elimination afterwards (that would merge the copies back). Throws Error
// naming a listed region p has no equation in.
Program checkpoint_activations(const Program& p, const std::vector<int>& regions);

// Recomputation of the cheap kind, a transform of value_and_grad's result
// (capstep train applies it to the step, before checkpoint_activations): a
// forward value that gradient equations read, made by elementwise
// equations, broadcasts and reshapes from values that live into the backward
// anyway (inputs, constants, values the backward reads itself) or are
// smaller than it (a broadcast's operand), is recomputed by a copy of those
// equations just before each gradient equation that reads it (the same
// operations on the same operands: the same bits). The copies read forward
// values through select(true, x, g) of a gradient value g, so that no
// scheduler runs them in the forward, and inputs that train (those with a
// "grad.<name>" output) through a snapshot made before the first equation,
// so that an update written over such an input comes after its last read
// (a value read from one is recomputed only when the input is the smaller:
// a gain's broadcast, not a weight's bf16 convert); the other inputs (a
// frozen base) as they are. Such a value is then no buffer held from the forward
// to the backward: an RMSNorm's broadcast scale and its products, a
// softmax's broadcast denominator and quotient, SiLU's exponential, sum,
// quotient and gated product, grouped-query attention's repeated keys and
// values. The result has p's inputs, outputs and aliases and the same values
// bit for bit. It applies no common-subexpression elimination afterwards
// (that would merge the copies back).
Program recompute_in_backward(const Program& p);


// Removes equations whose results no output needs; renumbers values densely.
Program dead_code_eliminate(const Program& p);

// ---- fused attention (the attention primitives of ir.h) ---------------------------
// Program -> Program: each causal_attention traced (trace.h) (the scores' dot_general,
// the scale 1/sqrt(Dh), an additive causal mask of -1e9 or below, softmax, the
// product with v) becomes one attention equation; other equations are kept, and
// those no output needs any more are dropped. Run it on a forward program before
// value_and_grad, whose VJP of attention is attention_grad. Equal to the unfused
// program within rounding (the masked weights are exactly 0 in both).
Program fuse_attention(const Program& p);
// Program -> Program: attention and attention_grad written out as the primitives
// they stand for (causal_attention, and the formulas of ir.h for the cotangents);
// a program without them comes back unchanged. The StableHLO export runs it.
Program expand_attention(const Program& p);
bool has_attention(const Program& p);

// ---- AdamW by name (the adamw primitive of ir.h) -------------------------------
// One parameter's update as expand_adamw wrote it: value ids of the expanded
// program. The fused host runs the equations that make `values` as one AdamW
// loop (host::AdamWShortcut) instead of one by one.
struct ExpandedAdamW {
  int p = -1, g = -1, m = -1, v = -1;               // the adamw equations' operands
  int lr = -1, bc1 = -1, bc2 = -1, decay = -1;
  int p_out = -1, m_out = -1, v_out = -1;           // p', m', v' (-1: no equation wants it)
  int b1 = -1, c1 = -1, b2 = -1, c2 = -1, eps = -1;  // the splat constants beta1, 1-beta1, beta2, 1-beta2, eps
  std::vector<int> values;                          // every value written out for it, constants included
};
// Program -> Program: each adamw equation written out as the plain equations
// it stands for (ir.h), the ones of one parameter (same operands and
// constants) once, in the order m', v', then the step and p' (the host
// AdamW kernel's operation order, so both round alike). A program without adamw comes back
// unchanged. StableHLO export, the GPU planner and the host interpreter run
// it; `updates` (when given) receives one entry per parameter.
Program expand_adamw(const Program& p, std::vector<ExpandedAdamW>* updates = nullptr);
bool has_adamw(const Program& p);

}  // namespace capstep

namespace capstep::optim {

// AdamW's settings (optim.h has the host update that takes them too).
struct AdamW {
  double lr = 1e-2;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  void validate() const;   // Error naming the option out of range
};

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

// ---- global gradient-norm clipping --------------------------------
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

// ---- gradient accumulation -----------------------------------------
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
// The N of a program made through accumulate_gradients(..., N) (and any
// transform after it that keeps the accumulators' mean); 1 for a program
// without "accum.last". Error for one with "accum.last" whose mean it cannot find.
int accumulated_micro_batches(const Program& p);

// ---- bf16 mixed precision -------------------------------------------
// A Program -> Program transform applied to the forward (loss) program, before
// value_and_grad:
//   with_adamw(value_and_grad(mixed_precision_bf16(loss), params), params, o)
// Every dot_general whose operands are f32 gets them through convert(-> bf16)
// (one convert per distinct value, shared by the dots that read it), and its
// result stays f32: bf16 x bf16 -> f32 is a GEMM with f32 accumulation. An
// operand made by a transpose (over reshapes) that nothing else reads in f32
// is that transpose of its source's convert, made in bf16 (the same bits):
// a GEMM folds the transpose into its layout, where a transposed f32 copy
// would be made and converted; the source's convert is shared with the dots
// that read it directly or through other views. All
// else is unchanged and stays f32: the inputs (master parameters, so AdamW's
// moments and update are f32 too), softmax, the norms, cross-entropy and every
// other reduction, the elementwise ops. value_and_grad then differentiates
// through the converts: the VJP of convert(f32 -> bf16) is convert(bf16 ->
// f32), and a bf16 dot's cotangents are bf16 x bf16 -> f32 dots of the
// cotangent rounded to bf16 (as autocast's backward does), rounded to bf16
// again as cotangents of the bf16 operands (summed in bf16 where dots share
// one); the gradients reaching the f32
// parameters are f32. Inputs, outputs, names and aliases are p's.
enum class Precision { f32, bf16 };
const char* precision_name(Precision p);              // "f32", "bf16"
Precision parse_precision(const std::string& s);      // Error naming the allowed values
Program mixed_precision_bf16(const Program& forward);
// f32: forward itself; bf16: mixed_precision_bf16(forward).
Program with_precision(const Program& forward, Precision p);
// ---- data parallelism ------------------------------------------------
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

namespace capstep::lora {

// ---- LoRA (lora.h has the targets in capstep's models and PEFT's files) -----------
// One LoRA pair, A [r, in] and B [out, r], the program inputs
// "lora.A.<name>" and "lora.B.<name>". `weights` are the base matrices it
// adapts, each an input [in, out_j] of one `in`; B's rows are their outs end
// to end (out = the sum), so each weight j gets the rows of B from
// out_0 + ... + out_{j-1} on. One weight is the usual case, and then `name`
// is that weight's name; GPT-2's c_attn (capstep's wq | wk | wv, one
// transformers tensor) is one pair over three weights, named
// "blocks.L.attn.wqkv": PEFT's one lora_A [r, D] and lora_B [3D, r] on it.
struct Target {
  std::string name;
  std::vector<std::string> weights;
};
std::string a_name(const std::string& target);   // "lora.A.<target>"
std::string b_name(const std::string& target);   // "lora.B.<target>"
// The new inputs of lora(p, targets, ...), in its order: A then B of each target.
std::vector<std::string> adapter_inputs(const std::vector<Target>& targets);

struct Options {
  int64_t r = 8;           // the rank, >= 1
  double alpha = 8;        // PEFT's lora_alpha
  bool rslora = false;     // PEFT's use_rslora: scale alpha / sqrt(r) instead of alpha / r
  // lora() only: the target weights (the frozen base) become bf16 inputs of
  // the same names, each converted to f32 once where the program starts, so
  // they take half the memory; the program computes as with f32 weights
  // rounded to bf16. f32 targets only.
  bool base_bf16 = false;
  void validate() const;   // Error naming the option out of range
};
double scale(const Options& o);   // alpha / r, or alpha / sqrt(r) with rslora

// The transform. Every weight of every target must be a rank-2 f32 input of p
// (or f64, for gradient checks; A and B take the weight's type) used only as
// the right operand of dot_general equations contracting the left operand's
// last axis (of the weight's type, any rank) with the weight's first axis, no
// batch axes (what trace.h's matmul(x, W) records for x [..., in]); not an
// output. Error naming the weight, and the equation that uses it otherwise
// (also for an unknown or repeated weight or target name, weights of one
// target with different `in`, names already taken). Each such equation
// y = dot_general(x, W) is kept, and after it come
//   t  = dot_general(x, A)  {lhs_contract=[last], rhs_contract=[1]}    [..., r]
//        (one per target and x: GPT-2's q, k and v share it)
//   Bj = slice(B, rows of weight j)                                    (only for several weights)
//   u  = dot_general(t, Bj) {lhs_contract=[last], rhs_contract=[1]}    [..., out_j]
//   y' = y + u * scale
// with y' in y's place for every later use. With base_bf16, each weight input
// is bf16 and the first equations are its convert to f32, which every use
// reads. Inputs: p's, then A and B of each
// target (adapter_inputs order). Outputs, names and aliases: p's. With B
// all zeros, y' = y bit for bit (y + 0), so the loss is the base model's.
Program lora(const Program& p, const std::vector<Target>& targets, const Options& o);

// A program (a gradient program of lora() with base_bf16, usually) with every
// convert of a bf16 input to f32 made again just before each equation that
// reads it, instead of once where the step starts: the f32 copy of a frozen
// bf16 weight then lives from its convert to its one reader (the forward's
// x W, the backward's dY W^T), not from the forward through the backward.
// Each converted weight costs one more convert a step; the numbers are the
// same bit for bit. Other equations, inputs, outputs and aliases: p's.
Program convert_at_each_use(const Program& p);

// An adapter: the options, its targets, and per target A [r, in] and B
// [out, r] (f32), with what PEFT's adapter_config.json records besides.
struct Adapter {
  Options options;
  std::vector<Target> targets;
  std::vector<Array> a, b;                      // targets' order
  std::vector<std::string> target_modules;      // as given to targets_for (written to the config)
  std::string base_model;                       // base_model_name_or_path; may be empty
  // The program inputs of adapter_inputs(targets) in its order: A, B, A, B, ...
  std::vector<Array> inputs() const;
};
// PEFT's initialisation (LoraLayer.reset_lora_parameters with
// init_lora_weights=True): A kaiming-uniform with a = sqrt(5) over its [r, in]
// (uniform in +-1/sqrt(in)), B zeros, so the adapted model starts as the base.
// Deterministic from the seed (SplitMix64, the same on every platform, not
// torch's generator). The shapes are read from the weights' input types in p;
// A and B are f32 (for an f64 program, convert them).
Adapter init_adapter(const Program& p, const std::vector<Target>& targets, const Options& o, uint64_t seed);

// The merged weights: for every target and each of its weights j,
//   W_j += scale * (B_j A)^T    (capstep's [in, out]; B_j: weight j's rows of B)
// in f32 (B_j A summed in double, rounded to f32, times scale in f32, added
// in f32). names[i] is params[i]'s input name (lm_parameters' for a model);
// Error for a weight not there or of another shape.
void merge(const Adapter& a, const std::vector<std::string>& names, std::vector<Array>& params);

}  // namespace capstep::lora
