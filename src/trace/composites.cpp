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

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  require_float("cross_entropy", logits);
  if (logits.rank() < 1) throw Error("cross_entropy: logits need rank >= 1, got " + logits.type().str());
  const Shape s = logits.shape();
  const Shape pos(s.begin(), s.end() - 1);
  if (targets.dtype() != DType::i32 || targets.shape() != pos)
    throw Error("cross_entropy: targets must be i32" + shape_str(pos) + " for logits " + logits.type().str() +
                ", got " + targets.type().str());
  Tracer& tr = *logits.tracer();
  const int64_t last = logits.rank() - 1;
  // The targets pass through a gather of the class numbers 0..C-1 (each
  // label gathers itself), so that a label outside [0, C) is the gather's
  // index error at run time, naming its position, on every backend; a bare
  // compare would match no class and drop that position from the loss.
  Tensor labels = gather_rows(tr.iota({DType::i32, {s.back()}}, 0), targets);
  // One-hot of the targets: iota along the classes == broadcast labels. It
  // depends on no float input, so autodiff sends nothing through it.
  Tensor classes = tr.iota({DType::i32, s}, last);
  Tensor hit = compare(classes, unreduce(labels, s, {last}), Cmp::EQ);
  Tensor onehot = convert(hit, logits.dtype());
  int64_t n = 1;
  for (int64_t v : pos) n *= v;
  Tensor picked = sum(log_softmax(logits, last) * onehot);
  return picked * (-1.0 / static_cast<double>(n));
}

Tensor causal_mask(Tracer& tr, int64_t T, DType d) {
  if (T < 1) throw Error("causal_mask: T must be positive, got " + std::to_string(T));
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
  const int64_t T = q.dim(2), dh = q.dim(3);
  // scores[b,h,t,s] = sum_d q[b,h,t,d] k[b,h,s,d]
  Tensor scores = dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}});
  scores = scores * (1.0 / std::sqrt(static_cast<double>(dh))) + causal_mask(tr, T, q.dtype());
  Tensor p = softmax(scores, -1);
  // out[b,h,t,d] = sum_s p[b,h,t,s] v[b,h,s,d]
  return dot_general(p, v, {{0, 1}, {0, 1}, {3}, {2}});
}

}  // namespace capstep
