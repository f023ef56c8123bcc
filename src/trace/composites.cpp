// Composites written from primitives only, so that autodiff, both backends and
// the StableHLO export need nothing beyond the primitive table.
#include <cmath>

#include "trace/internal.h"

namespace capstep {

using trace_detail::normalize_axis;
using trace_detail::unreduce;

namespace {

void require_float(const char* what, const Tensor& x) {
  if (!is_float(x.dtype())) throw Error(std::string(what) + ": needs a float tensor, got " + x.type().str());
}

// x - max(x, axis), broadcast back directly (no keepdims reshape). The max
// only keeps exp() in range and cancels: softmax(x - c) = softmax(x) for any
// c, so the gradient through it is zero. Its reduce_max is marked no_grad (as
// JAX's softmax stops the gradient of its max), and value_and_grad does not
// differentiate it: no arg-max ties, counts and selects in the backward pass,
// only the rounding noise they carried is gone.
Tensor shifted(const Tensor& x, int64_t axis) {
  const Shape s = x.shape();
  Tensor m = max(x, {axis});
  trace_detail::mark_no_grad(m);
  return x - unreduce(m, s, {axis});
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
  require_float("softmax", x);
  const int64_t ax = normalize_axis("softmax", axis, x.rank());
  const Shape s = x.shape();
  Tensor e = exp(shifted(x, ax));
  return e / unreduce(sum(e, {ax}), s, {ax});
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  require_float("log_softmax", x);
  const int64_t ax = normalize_axis("log_softmax", axis, x.rank());
  const Shape s = x.shape();
  Tensor z = shifted(x, ax);
  return z - unreduce(log(sum(exp(z), {ax})), s, {ax});
}

Tensor gelu_tanh(const Tensor& x) {
  require_float("gelu_tanh", x);
  const double c = std::sqrt(2.0 / M_PI);
  Tensor inner = (x + x * x * x * 0.044715) * c;
  return x * 0.5 * (tanh(inner) + 1.0);
}

// exp(-x) overflows f32 (and bf16) for x below about -88.7: 1 / (1 + inf)
// is the right 0, but the VJP of exp multiplies the cotangent (0) by the
// infinite result, a NaN. Clamping the argument at 80 keeps every value
// finite (exp(80) = 5.5e34); below x = -80 sigmoid is then 1.8e-35 instead of
// smaller still, and its gradient there 0 (the maximum's), where the true one
// is below 1e-34.
static Tensor one_plus_exp_neg(const Tensor& x) { return exp(-maximum(x, x.tracer()->full(x.shape(), -80.0, x.dtype()))) + 1.0; }

Tensor sigmoid(const Tensor& x) {
  require_float("sigmoid", x);
  return 1.0 / one_plus_exp_neg(x);
}

Tensor silu(const Tensor& x) {
  require_float("silu", x);
  return x / one_plus_exp_neg(x);
}

RopeTables rope_tables(Tracer& tr, int64_t positions, int64_t head_dim, double theta, DType d) {
  if (positions < 0 || head_dim < 2 || head_dim % 2 != 0 || !(theta > 0))
    throw Error("rope_tables: need positions >= 0, an even head_dim >= 2 and theta > 0, got positions " +
                std::to_string(positions) + ", head_dim " + std::to_string(head_dim) + ", theta " + std::to_string(theta));
  if (!is_float(d)) throw Error(std::string("rope_tables: needs a float dtype, got ") + dtype_name(d));
  const int64_t half = head_dim / 2;
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), every step in f32
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv[static_cast<size_t>(j)] = 1.0f / std::pow(static_cast<float>(theta), e);
  }
  return rope_tables(tr, positions, inv, d);
}

RopeTables rope_tables(Tracer& tr, int64_t positions, const std::vector<float>& inv, DType d) {
  const int64_t half = static_cast<int64_t>(inv.size()), head_dim = 2 * half;
  if (positions < 0 || half < 1)
    throw Error("rope_tables: need positions >= 0 and at least one frequency, got positions " +
                std::to_string(positions) + ", " + std::to_string(half) + " frequencies");
  if (!is_float(d)) throw Error(std::string("rope_tables: needs a float dtype, got ") + dtype_name(d));
  std::vector<double> c(static_cast<size_t>(positions * head_dim)), s(c.size());
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t j = 0; j < head_dim; ++j) {
      // the angle as transformers' f32 product (inv_freq @ position_ids)
      const float a = static_cast<float>(p) * inv[static_cast<size_t>(j % half)];
      const size_t k = static_cast<size_t>(p * head_dim + j);
      c[k] = static_cast<double>(static_cast<float>(std::cos(static_cast<double>(a))));
      s[k] = static_cast<double>(static_cast<float>(std::sin(static_cast<double>(a))));
    }
  const Type t{d, {positions, head_dim}};
  return {tr.constant(t, std::move(c)), tr.constant(t, std::move(s))};
}

Tensor rotate_half(const Tensor& x) {
  if (x.rank() < 1 || x.dim(-1) % 2 != 0)
    throw Error("rotate_half: needs an even last axis, got " + x.type().str());
  const Shape s = x.shape();
  const int64_t h = s.back() / 2;
  std::vector<int64_t> zero(s.size(), 0), mid(s.begin(), s.end());
  mid.back() = h;
  std::vector<int64_t> from_mid(s.size(), 0);
  from_mid.back() = h;
  return concatenate({-slice(x, from_mid, s), slice(x, zero, mid)}, -1);
}

Tensor rms_norm(const Tensor& x, const Tensor& gain, double eps) {
  require_float("rms_norm", x);
  if (x.rank() < 1) throw Error("rms_norm: needs rank >= 1, got " + x.type().str());
  const int64_t d = x.dim(-1);
  if (gain.rank() != 1 || gain.dim(0) != d)
    throw Error("rms_norm: gain must be [" + std::to_string(d) + "] for x " + x.type().str() + ", got " +
                gain.type().str());
  const Shape s = x.shape();
  const int64_t last = x.rank() - 1;
  Tensor ms = sum(x * x, {last}) * (1.0 / static_cast<double>(d));
  Tensor r = rsqrt(ms + eps);
  return x * unreduce(r, s, {last}) * gain;
}

namespace {

// The checks shared by cross_entropy and masked_cross_entropy: float logits
// [..., C], i32 targets of the positions' shape.
void check_cross_entropy(const char* what, const Tensor& logits, const Tensor& targets) {
  require_float(what, logits);
  if (logits.rank() < 1) throw Error(std::string(what) + ": logits need rank >= 1, got " + logits.type().str());
  const Shape s = logits.shape();
  const Shape pos(s.begin(), s.end() - 1);
  if (targets.dtype() != DType::i32 || targets.shape() != pos)
    throw Error(std::string(what) + ": targets must be i32" + shape_str(pos) + " for logits " + logits.type().str() +
                ", got " + targets.type().str());
}

// log_softmax(logits)[label] at every position (shape of the positions), for
// labels in [0, C). The log-sum-exp is computed along the classes, and the
// label's logit is gathered from the logits seen as one flat row of n * C
// values, at (position * C + label): no one-hot, iota or other [..., C]
// value besides exp(logits - max), which the gradient needs, and that
// gradient's one-hot part is a scatter_add_rows of the n picked cotangents
// (value_and_grad adds it onto the softmax part in place of a scatter into
// zeros). Each position's value is (logit[label] - max) - log(sum(exp(logits
// - max))), rounded as log_softmax's element at the label.
// Flat positions past the i32 range (n * C >= 2^31) take a one-hot of the
// labels instead, which needs [..., C] values of its own.
Tensor label_log_prob(const Tensor& logits, const Tensor& labels) {
  Tracer& tr = *logits.tracer();
  const Shape s = logits.shape();
  const Shape pos(s.begin(), s.end() - 1);
  const int64_t last = logits.rank() - 1, classes = s.back();
  int64_t n = 1;
  for (int64_t v : pos) n *= v;
  if (n * classes > int64_t{2147483647}) {
    // One-hot of the labels: iota along the classes == broadcast labels. It
    // depends on no float input, so autodiff sends nothing through it.
    Tensor hit = compare(tr.iota({DType::i32, s}, last), unreduce(labels, s, {last}), Cmp::EQ);
    return sum(log_softmax(logits, last) * convert(hit, logits.dtype()), {last});
  }
  Tensor flat = reshape(logits, {n * classes});
  Tensor at = reshape(tr.iota({DType::i32, {n}}, 0) * tr.full({n}, static_cast<double>(classes), DType::i32), pos);
  Tensor picked = gather_rows(flat, at + labels);
  // The max only keeps exp() in range (as in shifted(): no gradient through
  // it). It is taken with the label's logit too, which changes no value (that
  // logit is one of the row's), so that the gather runs before the
  // exponentials: otherwise only the loss output reads it, and the group that
  // computes an output nothing else reads runs at the end of the step
  // (src/backend/plan/fusion.h: a sink), holding the logits until then.
  Tensor x = reshape(flat, s);
  Tensor m = max(x, {last});
  trace_detail::mark_no_grad(m);
  m = maximum(m, picked);
  trace_detail::mark_no_grad(m);
  Tensor lse = log(sum(exp(x - unreduce(m, s, {last})), {last}));
  return (picked - m) - lse;
}

}  // namespace

Tensor ordered_after(const Tensor& x, const Tensor& after) {
  Tracer& tr = trace_detail::tracer_of("ordered_after", {x, after});
  if (after.rank() != 0) throw Error("ordered_after: `after` must be a scalar, got " + after.type().str());
  // Always an equation of its own (broadcast_to records none for a scalar
  // x), so that no_grad marks it and not `after`.
  Tensor spread = broadcast_in_dim(convert(after, x.dtype()), x.shape(), {});
  trace_detail::mark_no_grad(spread);
  return select(tr.full(x.shape(), 1.0, DType::i1), x, spread);
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, Tensor* counted) {
  check_cross_entropy(counted ? "masked_cross_entropy" : "cross_entropy", logits, targets);
  Tracer& tr = *logits.tracer();
  const Shape s = logits.shape();
  if (!counted) {
    // The targets pass through a gather of the class numbers 0..C-1 (each
    // label gathers itself), so that a label outside [0, C) is the gather's
    // index error at run time, naming its position, on every backend; a bare
    // compare would match no class and drop that position from the loss.
    Tensor labels = gather_rows(tr.iota({DType::i32, {s.back()}}, 0), targets);
    return sum(label_log_prob(logits, labels));
  }
  const Shape pos(s.begin(), s.end() - 1);
  // valid = targets >= 0; a negative target (-100, PyTorch's ignore_index)
  // is clamped to class 0 for the gather and then zeroed by `valid`.
  Tensor zero = tr.full(pos, 0.0, DType::i32);
  Tensor valid = compare(targets, zero, Cmp::GE);
  Tensor labels = gather_rows(tr.iota({DType::i32, {s.back()}}, 0), maximum(targets, zero));
  Tensor validf = convert(valid, logits.dtype());
  Tensor picked = sum(label_log_prob(logits, labels) * validf);
  *counted = sum(validf);
  return picked;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  int64_t n = 1;
  for (int64_t d = 0; d + 1 < logits.rank(); ++d) n *= logits.dim(d);
  return cross_entropy_sum(logits, targets) * (-1.0 / static_cast<double>(n));
}

Tensor masked_cross_entropy(const Tensor& logits, const Tensor& targets) {
  Tensor count;
  Tensor picked = cross_entropy_sum(logits, targets, &count);
  return -(picked / maximum(count, logits.tracer()->scalar(1.0, logits.dtype())));
}

Tensor causal_mask(Tracer& tr, int64_t T, DType d) {
  if (T < 0) throw Error("causal_mask: T must be at least 0, got " + std::to_string(T));
  Tensor row = tr.iota({DType::i32, {T, T}}, 0);
  Tensor col = tr.iota({DType::i32, {T, T}}, 1);
  Tensor future = compare(col, row, Cmp::GT);
  return select(future, tr.full({T, T}, -1e9, d), tr.full({T, T}, 0.0, d));
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  Tracer& tr = trace_detail::tracer_of("causal_attention", {q, k, v});
  if (q.rank() != 4 || q.type() != k.type() || q.type() != v.type())
    throw Error("causal_attention: q, k, v must share one [B,H,T,Dh] type, got " + q.type().str() + ", " +
                k.type().str() + ", " + v.type().str());
  require_float("causal_attention", q);
  // bf16: computed in f32 and rounded once (bf16 scores would come out of
  // their dot_general as f32, which the mask and v do not match).
  if (q.dtype() == DType::bf16)
    return convert(causal_attention(convert(q, DType::f32), convert(k, DType::f32), convert(v, DType::f32)), DType::bf16);
  const int64_t T = q.dim(2), dh = q.dim(3);
  // scores[b,h,t,s] = sum_d q[b,h,t,d] k[b,h,s,d]
  Tensor scores = dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}});
  scores = scores * (1.0 / std::sqrt(static_cast<double>(dh))) + causal_mask(tr, T, q.dtype());
  Tensor p = softmax(scores, -1);
  // out[b,h,t,d] = sum_s p[b,h,t,s] v[b,h,s,d]
  return dot_general(p, v, {{0, 1}, {0, 1}, {3}, {2}});
}

// The attention primitive recorded directly (the passes over it: src/transforms/attention.cpp).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  Tracer& tr = trace_detail::tracer_of("attention", {q, k, v});
  return tr.emit(Op::attention, {q, k, v});
}

}  // namespace capstep
