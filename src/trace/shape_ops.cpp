// Shape operators: broadcast, reshape, transpose, slice, concatenate, pad.
#include <numeric>

#include "trace/internal.h"

namespace capstep {

using trace_detail::tracer_of;

Tensor broadcast_in_dim(const Tensor& a, const Shape& shape, const std::vector<int64_t>& dims) {
  Tracer& tr = tracer_of("broadcast_in_dim", {a});
  Attrs at;
  at.dims = dims;
  Type t{a.dtype(), shape};
  return trace_detail::emit_typed(tr, Op::broadcast_in_dim, {a}, std::move(at), t);
}

Tensor broadcast_to(const Tensor& a, const Shape& shape) {
  const Shape s = a.shape();
  if (s == shape) return a;  // nothing to record
  if (s.size() > shape.size())
    throw Error("broadcast_to: cannot broadcast " + a.type().str() + " to the lower-rank shape " +
                shape_str(shape));
  const size_t lead = shape.size() - s.size();
  std::vector<int64_t> dims(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 1 && s[i] != shape[lead + i])
      throw Error("broadcast_to: cannot broadcast " + a.type().str() + " to " + shape_str(shape) +
                  " (axis " + std::to_string(i) + " is " + std::to_string(s[i]) + ")");
    dims[i] = static_cast<int64_t>(lead + i);
  }
  return broadcast_in_dim(a, shape, dims);
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Tracer& tr = tracer_of("reshape", {a});
  Type in = a.type();
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw Error("reshape " + in.str() + " to " + shape_str(shape) + ": more than one -1");
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      throw Error("reshape " + in.str() + " to " + shape_str(shape) + ": negative dimension");
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || in.numel() % known != 0)
      throw Error("reshape " + in.str() + " to " + shape_str(shape) + ": cannot infer the -1 dimension");
    out[static_cast<size_t>(infer)] = in.numel() / known;
  }
  Type t{in.dtype, out};
  if (t.numel() != in.numel())
    throw Error("reshape " + in.str() + " to " + shape_str(shape) + ": element counts differ (" +
                std::to_string(in.numel()) + " vs " + std::to_string(t.numel()) + ")");
  if (out == in.shape) return a;
  return trace_detail::emit_typed(tr, Op::reshape, {a}, {}, t);
}

Tensor transpose(const Tensor& a, const std::vector<int64_t>& perm) {
  Tracer& tr = tracer_of("transpose", {a});
  std::vector<int64_t> p = perm;
  const int r = a.rank();
  for (int64_t& d : p) d = trace_detail::normalize_axis("transpose", d, r);
  std::vector<int64_t> iota(static_cast<size_t>(r));
  std::iota(iota.begin(), iota.end(), 0);
  if (p == iota) return a;  // identity: nothing to record
  Attrs at;
  at.dims = std::move(p);
  return tr.emit(Op::transpose, {a}, std::move(at));
}

Tensor swap_last2(const Tensor& a) {
  const int r = a.rank();
  if (r < 2) throw Error("swap_last2: needs rank >= 2, got " + a.type().str());
  std::vector<int64_t> perm(static_cast<size_t>(r));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  return transpose(a, perm);
}

Tensor slice(const Tensor& a, const std::vector<int64_t>& starts, const std::vector<int64_t>& limits,
             const std::vector<int64_t>& strides) {
  Tracer& tr = tracer_of("slice", {a});
  Attrs at;
  at.starts = starts;
  at.limits = limits;
  at.strides = strides.empty() ? std::vector<int64_t>(starts.size(), 1) : strides;
  const Shape s = a.shape();
  bool whole = at.starts.size() == s.size() && at.limits.size() == s.size() && at.strides.size() == s.size();
  for (size_t d = 0; whole && d < s.size(); ++d)
    whole = at.starts[d] == 0 && at.limits[d] == s[d] && at.strides[d] == 1;
  if (whole) return a;  // nothing to record
  return tr.emit(Op::slice, {a}, std::move(at));
}

Tensor concatenate(const std::vector<Tensor>& parts, int64_t axis) {
  if (parts.empty()) throw Error("concatenate: needs at least one operand");
  Tracer& tr = tracer_of("concatenate", parts);
  Attrs at;
  at.axis = trace_detail::normalize_axis("concatenate", axis, parts[0].rank());
  if (parts.size() == 1) return parts[0];  // nothing to record
  return tr.emit(Op::concatenate, parts, std::move(at));
}

Tensor pad(const Tensor& a, const std::vector<int64_t>& lows, const std::vector<int64_t>& highs) {
  Tracer& tr = tracer_of("pad", {a});
  bool none = lows.size() == static_cast<size_t>(a.rank()) && highs.size() == lows.size();
  for (size_t d = 0; none && d < lows.size(); ++d) none = lows[d] == 0 && highs[d] == 0;
  if (none) return a;  // nothing to record
  Attrs at;
  at.lows = lows;
  at.highs = highs;
  return tr.emit(Op::pad, {a}, std::move(at));
}

}  // namespace capstep
