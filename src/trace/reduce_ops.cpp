// Contractions, reductions and row gathers.
#include "trace/internal.h"

namespace capstep {

using trace_detail::tracer_of;

Tensor dot_general(const Tensor& a, const Tensor& b, const DotDims& d) {
  Tracer& tr = tracer_of("dot_general", {a, b});
  Attrs at;
  at.lhs_batch = d.lhs_batch;
  at.rhs_batch = d.rhs_batch;
  at.lhs_contract = d.lhs_contract;
  at.rhs_contract = d.rhs_contract;
  return tr.emit(Op::dot_general, {a, b}, std::move(at));
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const int ra = a.rank(), rb = b.rank();
  if (ra < 2 || rb < 2)
    throw Error("matmul: operands need rank >= 2, got " + a.type().str() + " and " + b.type().str());
  DotDims d;
  d.lhs_contract = {ra - 1};
  d.rhs_contract = {rb - 2};
  if (rb == 2) return dot_general(a, b, d);  // [..., M, K] x [K, N]
  if (ra != rb)
    throw Error("matmul: batched operands need equal ranks, got " + a.type().str() + " and " +
                b.type().str());
  for (int i = 0; i < ra - 2; ++i) {
    if (a.shape()[static_cast<size_t>(i)] != b.shape()[static_cast<size_t>(i)])
      throw Error("matmul: batch dimensions differ: " + a.type().str() + " and " + b.type().str());
    d.lhs_batch.push_back(i);
    d.rhs_batch.push_back(i);
  }
  return dot_general(a, b, d);
}

namespace {

Tensor reduce(Op op, const Tensor& a, std::vector<int64_t> axes, bool keepdims) {
  Tracer& tr = tracer_of(op_name(op), {a});
  const int r = a.rank();
  axes = trace_detail::normalize_axes(op_name(op), std::move(axes), r);
  if (axes.empty()) return a;
  Shape in = a.shape();
  Attrs at;
  at.dims = axes;
  Tensor out = tr.emit(op, {a}, std::move(at));
  if (!keepdims) return out;
  for (int64_t ax : axes) in[static_cast<size_t>(ax)] = 1;
  return reshape(out, in);
}

std::vector<int64_t> all_axes(const Tensor& a) {
  std::vector<int64_t> axes(static_cast<size_t>(a.rank()));
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  return axes;
}

}  // namespace

Tensor sum(const Tensor& a, std::vector<int64_t> axes, bool keepdims) {
  return reduce(Op::reduce_sum, a, std::move(axes), keepdims);
}
Tensor sum(const Tensor& a) { return sum(a, all_axes(a)); }

Tensor max(const Tensor& a, std::vector<int64_t> axes, bool keepdims) {
  return reduce(Op::reduce_max, a, std::move(axes), keepdims);
}

Tensor mean(const Tensor& a, std::vector<int64_t> axes, bool keepdims) {
  axes = trace_detail::normalize_axes("mean", std::move(axes), a.rank());
  int64_t count = 1;
  for (int64_t ax : axes) count *= a.shape()[static_cast<size_t>(ax)];
  Tensor s = sum(a, axes, keepdims);
  if (count == 1) return s;
  return s * (1.0 / static_cast<double>(count));
}
Tensor mean(const Tensor& a) { return mean(a, all_axes(a)); }

Tensor gather_rows(const Tensor& table, const Tensor& idx) {
  Tracer& tr = tracer_of("gather_rows", {table, idx});
  return tr.emit(Op::gather_rows, {table, idx});
}

Tensor scatter_add_rows(const Tensor& operand, const Tensor& idx, const Tensor& updates) {
  Tracer& tr = tracer_of("scatter_add_rows", {operand, idx, updates});
  return tr.emit(Op::scatter_add_rows, {operand, idx, updates});
}

Tensor all_reduce(const Tensor& a) {
  Tracer& tr = tracer_of("all_reduce", {a});
  return tr.emit(Op::all_reduce, {a});
}

}  // namespace capstep
