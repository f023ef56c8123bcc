// Capture: Tensor handles whose operators record equations into a Program.
//
//   capstep::Tracer tr;
//   Tensor x = tr.input("x", {DType::f32, {4, 8}});
//   Tensor loss = sum(x * x);            // records multiply, reduce_sum
//   Program p = tr.finish({{"loss", loss}});
//
// Elementwise binary operators broadcast as NumPy does; the broadcast is made
// explicit as broadcast_in_dim in the Program. Scalars (double) become constants
// of the other operand's dtype.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capstep/ir.h"

namespace capstep {

class Tracer;

// A handle to a value recorded by a Tracer. It is usable only while that
// Tracer lives: a Tensor whose Tracer is gone throws Error when used, rather
// than reading freed memory.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Tracer* t, int id);

  Tracer* tracer() const;  // Error when the Tracer no longer exists
  int id() const { return id_; }
  bool valid() const { return tracer_ != nullptr; }
  // By value: the program's type table grows (and moves) as ops are recorded,
  // so a reference into it would dangle.
  Type type() const;
  DType dtype() const { return type().dtype; }
  Shape shape() const { return type().shape; }
  int rank() const { return type().rank(); }
  int64_t dim(int axis) const;   // negative axis counts from the end

 private:
  Tracer* tracer_ = nullptr;
  std::weak_ptr<const bool> alive_;  // expires with the Tracer
  int id_ = -1;
};

class Tracer {
 public:
  Tracer() = default;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  Tensor input(const std::string& name, const Type& t);
  // Records op(inputs) with its inferred type.
  Tensor emit(Op op, const std::vector<Tensor>& inputs, Attrs attrs = {});
  // Constants of the given type: a splat value, or numel values.
  Tensor constant(const Type& t, std::vector<double> values);
  Tensor scalar(double v, DType d = DType::f32) { return constant({d, {}}, {v}); }
  Tensor full(const Shape& s, double v, DType d = DType::f32) { return constant({d, s}, {v}); }
  Tensor iota(const Type& t, int64_t axis);

  // Returns the program recorded so far with these outputs (in order). The
  // Tracer keeps its record: a later call (after more ops, or with other
  // outputs) returns another program of the same inputs, which is how one
  // trace gives several programs.
  Program finish(const std::vector<std::pair<std::string, Tensor>>& outputs);
  // The checkpoint region (Attrs::region) of the equations recorded from here
  // on, until the next call; -1 (the start): none. causal LMs put each
  // transformer block in its own region, for checkpoint_activations.
  void set_region(int region);
  int region() const { return region_; }
  // The program as recorded so far (for transforms that keep tracing into it).
  Program& program() { return prog_; }
  const Program& program() const { return prog_; }

 private:
  friend class Tensor;
  Program prog_;
  int region_ = -1;
  size_t tagged_ = 0;  // equations before this one carry their region already
  void tag_recorded();  // gives the equations recorded since tagged_ region_
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);  // Tensors hold it weakly
};

// ---- elementwise (NumPy broadcasting) --------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor compare(const Tensor& a, const Tensor& b, Cmp c);   // broadcasts; -> i1
Tensor select(const Tensor& pred, const Tensor& a, const Tensor& b);  // broadcasts
Tensor convert(const Tensor& a, DType to);

// ---- shape ------------------------------------------------------------------
// Broadcast to `shape` with NumPy rules (trailing alignment).
Tensor broadcast_to(const Tensor& a, const Shape& shape);
Tensor broadcast_in_dim(const Tensor& a, const Shape& shape, const std::vector<int64_t>& dims);
Tensor reshape(const Tensor& a, const Shape& shape);   // one -1 allowed
Tensor transpose(const Tensor& a, const std::vector<int64_t>& perm);
Tensor swap_last2(const Tensor& a);
// a[starts : limits : strides] along every axis (Op::slice): one entry per
// axis, 0 <= start <= limit <= size; strides empty means 1 everywhere. The
// whole of `a` records nothing.
Tensor slice(const Tensor& a, const std::vector<int64_t>& starts, const std::vector<int64_t>& limits,
             const std::vector<int64_t>& strides = {});
// The operands one after the other along `axis` (negative counts from the
// end; Op::concatenate, any number of operands). One operand records nothing.
Tensor concatenate(const std::vector<Tensor>& parts, int64_t axis);
// `a` with lows[d] zeros before and highs[d] zeros after it along each axis d
// (Op::pad; all >= 0). No padding records nothing.
Tensor pad(const Tensor& a, const std::vector<int64_t>& lows, const std::vector<int64_t>& highs);

// ---- contractions and reductions ------------------------------------------------
struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};
Tensor dot_general(const Tensor& a, const Tensor& b, const DotDims& d);
// a[..., M, K] x b[K, N] or batched b[..., K, N] (equal leading dims).
Tensor matmul(const Tensor& a, const Tensor& b);
// Axes may be negative; keepdims keeps them as size 1.
Tensor sum(const Tensor& a, std::vector<int64_t> axes, bool keepdims = false);
Tensor sum(const Tensor& a);                 // all axes -> scalar
Tensor max(const Tensor& a, std::vector<int64_t> axes, bool keepdims = false);
Tensor mean(const Tensor& a, std::vector<int64_t> axes, bool keepdims = false);
Tensor mean(const Tensor& a);

// ---- rows ---------------------------------------------------------------------
Tensor gather_rows(const Tensor& table, const Tensor& idx);
Tensor scatter_add_rows(const Tensor& operand, const Tensor& idx, const Tensor& updates);

// ---- collectives ------------------------------------------------------------------
// The sum of `a` over every replica of the run (see Op::all_reduce); floats only.
Tensor all_reduce(const Tensor& a);

// ---- composites, written from primitives ------------------------------------------
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
Tensor gelu_tanh(const Tensor& x);
// 1 / (1 + exp(-x)), with exp's argument clamped at 80 so that neither the
// value nor its gradient meets an infinity (see composites.cpp).
Tensor sigmoid(const Tensor& x);
// SiLU (swish): x * sigmoid(x), computed as x / (1 + exp(-x)) as PyTorch's
// F.silu does (one rounding fewer than the product); the clamp of sigmoid.
Tensor silu(const Tensor& x);
// x * rsqrt(mean(x^2, -1) + eps) * gain
Tensor rms_norm(const Tensor& x, const Tensor& gain, double eps = 1e-5);
// Mean over positions of -log_softmax(logits)[target]; logits [..., V], targets i32[...].
// A target outside [0, V) is an error at run time (the targets go through a
// gather_rows, whose index error names the position); an exported program
// clamps it instead (docs/stablehlo.md).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
// cross_entropy with positions left out, as PyTorch's cross_entropy with
// ignore_index: a target < 0 (-100 in the SFT batches, data::SftRows) takes
// no part; the loss is sum over the other positions of -log_softmax[target]
// divided by max(their count, 1), so a batch with none gives 0 (PyTorch: NaN).
// A target >= V is the gather's error at run time, as for cross_entropy.
Tensor masked_cross_entropy(const Tensor& logits, const Tensor& targets);
// The sum over positions of log_softmax(logits)[target] (cross_entropy is it
// times -1 / positions); with `counted`, masked_cross_entropy's (targets < 0
// take no part) and the count of the positions that do in *counted. The
// parts of a cross-entropy taken over row chunks of the logits
// (nn::lm_loss_program), each chunk's logits made and dropped in turn.
Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, Tensor* counted = nullptr);
// x, made no earlier than the scalar `after`: select(true, x, after
// broadcast), the same bits as x, with a dependency on `after` that no
// scheduler can reorder (value_and_grad sends nothing through it). For work
// that should run in turn, each part's operand ordered after the previous
// part's result (lm_loss_program's chunks), not all parts at once.
Tensor ordered_after(const Tensor& x, const Tensor& after);
// Rotary position embedding as transformers' LlamaRotaryEmbedding computes it
// (rope_type "default"): tables cos and sin of [positions, head_dim], captured
// as constants of dtype d (no sin/cos primitive: docs/api.md, "Rotary
// embeddings"). Column j and j + head_dim/2 hold the angle p * inv_freq[j],
// inv_freq[j] = 1 / theta^(2j / head_dim), both in f32 as transformers has
// them; cos and sin of that f32 angle in double, rounded to f32, then to d.
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(Tracer& tr, int64_t positions, int64_t head_dim, double theta, DType d = DType::f32);
// The same tables for given inverse frequencies inv_freq[j], j < head_dim / 2
// (a scaled rotary embedding's, as Llama 3's): column j and j + head_dim/2
// hold p * inv_freq[j] (an f32 product), rounded as above.
RopeTables rope_tables(Tracer& tr, int64_t positions, const std::vector<float>& inv_freq, DType d = DType::f32);
// transformers' rotate_half: concatenate(-x[..., h:], x[..., :h]) along the
// last axis (h = half its size, which must be even). The rotation is then
// x * cos + rotate_half(x) * sin.
Tensor rotate_half(const Tensor& x);
// [T, T] additive mask: 0 on and below the diagonal, -1e9 above (dtype of the model).
Tensor causal_mask(Tracer& tr, int64_t T, DType d = DType::f32);
// Scaled dot-product attention with the causal mask. q, k, v: [B, H, T, Dh].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v);

// ---- fused attention (the attention primitives of ir.h) ---------------------------
// The attention primitive recorded directly: causal_attention as one equation.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace capstep
