// Elementwise operators. Binary operands broadcast as NumPy does; the
// broadcast is recorded explicitly as broadcast_in_dim so that every
// elementwise primitive in the Program sees operands of one type.
#include <algorithm>

#include "trace/internal.h"

namespace capstep {
namespace {

using trace_detail::tracer_of;

// g++ 12 warns -Wrestrict on the string concatenation of the error message
// below: a false positive of its std::string inlining (GCC bug 105329), so it
// is silenced for this one function only.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// NumPy result shape of several operands (trailing alignment, 1 stretches).
Shape broadcast_shapes(const char* what, const std::vector<Tensor>& ts) {
  size_t rank = 0;
  for (const Tensor& t : ts) rank = std::max(rank, t.shape().size());
  Shape out(rank, 1);
  for (const Tensor& t : ts) {
    const Shape s = t.shape();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) { o = s[i]; continue; }
      std::string msg = std::string(what) + ": shapes";
      for (const Tensor& u : ts) msg += " " + u.type().str();
      throw Error(msg + " do not broadcast (axis " + std::to_string(i) + " of " + t.type().str() +
                  " is " + std::to_string(s[i]) + ", others need " + std::to_string(o) + ")");
    }
  }
  return out;
}
#pragma GCC diagnostic pop

void require_same_dtype(const char* what, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw Error(std::string(what) + ": operand dtypes differ (" + a.type().str() + " and " +
                b.type().str() + "); convert one of them first");
}

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  Tracer& tr = tracer_of(op_name(op), {a, b});
  require_same_dtype(op_name(op), a, b);
  Shape s = broadcast_shapes(op_name(op), {a, b});
  return tr.emit(op, {broadcast_to(a, s), broadcast_to(b, s)});
}

Tensor unary(Op op, const Tensor& a) {
  Tracer& tr = tracer_of(op_name(op), {a});
  return tr.emit(op, {a});
}

// A scalar operand becomes one splat constant of the other operand's type:
// one equation, no separate broadcast.
Tensor splat_like(const Tensor& like, double v) {
  Tracer& tr = tracer_of("scalar operand", {like});
  Type t = like.type();
  return tr.constant(t, {v});
}

}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return binary(Op::add, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary(Op::subtract, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary(Op::multiply, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary(Op::divide, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(Op::maximum, a, b); }
Tensor operator-(const Tensor& a) { return unary(Op::negate, a); }

Tensor operator+(const Tensor& a, double b) { return a + splat_like(a, b); }
Tensor operator+(double a, const Tensor& b) { return splat_like(b, a) + b; }
Tensor operator-(const Tensor& a, double b) { return a - splat_like(a, b); }
Tensor operator-(double a, const Tensor& b) { return splat_like(b, a) - b; }
Tensor operator*(const Tensor& a, double b) { return a * splat_like(a, b); }
Tensor operator*(double a, const Tensor& b) { return splat_like(b, a) * b; }
Tensor operator/(const Tensor& a, double b) { return a / splat_like(a, b); }
Tensor operator/(double a, const Tensor& b) { return splat_like(b, a) / b; }

Tensor exp(const Tensor& a) { return unary(Op::exponential, a); }
Tensor log(const Tensor& a) { return unary(Op::log, a); }
Tensor tanh(const Tensor& a) { return unary(Op::tanh, a); }
Tensor rsqrt(const Tensor& a) { return unary(Op::rsqrt, a); }
Tensor sqrt(const Tensor& a) { return unary(Op::sqrt, a); }

Tensor compare(const Tensor& a, const Tensor& b, Cmp c) {
  Tracer& tr = tracer_of("compare", {a, b});
  require_same_dtype("compare", a, b);
  Shape s = broadcast_shapes("compare", {a, b});
  Attrs at;
  at.cmp = c;
  return tr.emit(Op::compare, {broadcast_to(a, s), broadcast_to(b, s)}, std::move(at));
}

Tensor select(const Tensor& pred, const Tensor& a, const Tensor& b) {
  Tracer& tr = tracer_of("select", {pred, a, b});
  if (pred.dtype() != DType::i1)
    throw Error("select: the predicate must be i1 (a compare result), got " + pred.type().str());
  require_same_dtype("select", a, b);
  Shape s = broadcast_shapes("select", {pred, a, b});
  return tr.emit(Op::select, {broadcast_to(pred, s), broadcast_to(a, s), broadcast_to(b, s)});
}

Tensor convert(const Tensor& a, DType to) {
  Tracer& tr = tracer_of("convert", {a});
  if (a.dtype() == to) return a;
  Type t{to, a.shape()};
  return trace_detail::emit_typed(tr, Op::convert, {a}, {}, t);
}

}  // namespace capstep
