#include "backend/plan/gemm_layout.h"

#include <algorithm>

#include "backend/plan/walk.h"

namespace capstep::plan {
namespace {

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

// The packed copy: [batch, rows, cols], each batch's matrix rows * cols after the last.
void pack_operand(DotGemmOperand& o, int64_t batch, int64_t rows, int64_t cols) {
  o.read = GemmRead::packed;
  o.ld = std::max<int64_t>(cols, 1);
  o.batch_offsets.resize(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) o.batch_offsets[static_cast<size_t>(i)] = i * rows * cols;
  o.batch_stride = rows * cols;
}

std::optional<int64_t> uniform_stride(const std::vector<int64_t>& offsets, int64_t rows, int64_t cols) {
  if (offsets.size() <= 1) return rows * cols;
  const int64_t s = offsets[1] - offsets[0];
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] != static_cast<int64_t>(i) * s) return std::nullopt;
  return s;
}

// One operand of the product (gemm_layout.h has the rule). A's rows are its
// free axes and its columns the contracting ones; B's the other way round.
DotGemmOperand operand(const Type& t, const std::vector<int64_t>& st, const std::vector<int64_t>& batch,
                       const std::vector<int64_t>& contract, DotSide side) {
  const std::vector<int64_t> free = dot_free_axes(t.rank(), batch, contract);
  const bool lhs = side == DotSide::lhs;
  const std::vector<int64_t>& row_axes = lhs ? free : contract;
  const std::vector<int64_t>& col_axes = lhs ? contract : free;
  const AxisRun rows = axis_run(t.shape, st, row_axes), cols = axis_run(t.shape, st, col_axes);
  int64_t nb = 1;
  for (int64_t a : batch) nb *= t.shape[static_cast<size_t>(a)];
  DotGemmOperand o;
  o.pack_order = cat(batch, row_axes, col_axes);
  // `inner` of stride 1, `outer` at a stride of at least inner's length
  auto runs = [](const AxisRun& inner, const AxisRun& outer) {
    return (inner.any || inner.stride == 1) && (outer.any || outer.stride >= inner.size);
  };
  if (rows.chained && cols.chained && runs(cols, rows)) {
    o.read = GemmRead::as_stored;
    o.ld = rows.any ? std::max<int64_t>(cols.size, 1) : rows.stride;
  } else if (rows.chained && cols.chained && runs(rows, cols)) {
    o.read = GemmRead::transposed;
    o.ld = cols.any ? std::max<int64_t>(rows.size, 1) : cols.stride;
  } else {
    pack_operand(o, nb, rows.size, cols.size);
    return o;
  }
  o.batch_offsets = batch_offsets(t.shape, st, batch);
  o.batch_stride = uniform_stride(o.batch_offsets, rows.size, cols.size);
  return o;
}

}  // namespace

AxisRun axis_run(const Shape& shape, const std::vector<int64_t>& strides, const std::vector<int64_t>& axes) {
  AxisRun g;
  for (int64_t a : axes) {
    const int64_t sz = shape[static_cast<size_t>(a)], st = strides[static_cast<size_t>(a)];
    if (sz == 1) continue;
    if (!g.any && g.stride != st * sz) g.chained = false;
    g.size *= sz;
    g.stride = st;
    g.any = false;
  }
  return g;
}

std::vector<int64_t> batch_offsets(const Shape& shape, const std::vector<int64_t>& strides,
                                   const std::vector<int64_t>& batch) {
  std::vector<int64_t> offs{0};
  for (int64_t a : batch) {
    const int64_t sz = shape[static_cast<size_t>(a)], st = strides[static_cast<size_t>(a)];
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(sz));
    for (int64_t o : offs)
      for (int64_t i = 0; i < sz; ++i) next.push_back(o + i * st);
    offs.swap(next);
  }
  return offs;
}

void DotGemm::pack(DotSide side) {
  switch (side) {
    case DotSide::lhs: return pack_operand(a, batch, m, k);
    case DotSide::rhs: return pack_operand(b, batch, k, n);
  }
}

DotGemm dot_gemm(const Type& lhs, const Type& rhs, const Attrs& at) {
  const std::vector<int64_t> lhs_strides = row_major_strides(lhs.shape), rhs_strides = row_major_strides(rhs.shape);
  DotGemm g;
  for (int64_t a : at.lhs_batch) g.batch *= lhs.shape[static_cast<size_t>(a)];
  g.m = axis_run(lhs.shape, lhs_strides, dot_free_axes(lhs.rank(), at.lhs_batch, at.lhs_contract)).size;
  g.k = axis_run(lhs.shape, lhs_strides, at.lhs_contract).size;
  g.n = axis_run(rhs.shape, rhs_strides, dot_free_axes(rhs.rank(), at.rhs_batch, at.rhs_contract)).size;
  g.a = operand(lhs, lhs_strides, at.lhs_batch, at.lhs_contract, DotSide::lhs);
  g.b = operand(rhs, rhs_strides, at.rhs_batch, at.rhs_contract, DotSide::rhs);
  return g;
}

bool dot_gemm_reads_in_place(const Type& t, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  // Either side: the two orientations are the same two conditions on (free, contracting) runs.
  return operand(t, row_major_strides(t.shape), batch, contract, DotSide::lhs).read != GemmRead::packed;
}

bool transpose_moves_nothing(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t prev = -1;
  for (int64_t d : perm) {
    if (shape[static_cast<size_t>(d)] == 1) continue;
    if (d < prev) return false;
    prev = d;
  }
  return true;
}

namespace {

// One operand of the CUDA executor's GEMM, from the shared description.
// cuBLAS's strided-batched GEMM takes one stride from each batch's matrix to
// the next: an operand that dot_gemm reads in place at uneven offsets (batch
// axes on both sides of one of its matrix's axes), which the host reads so,
// is packed here instead.
GemmOperand cuda_operand(DotGemm& g, DotSide side, const Type& t) {
  const DotGemmOperand& o = side == DotSide::lhs ? g.a : g.b;
  if (!o.batch_stride) g.pack(side);
  GemmOperand c;
  c.ld = o.ld;
  c.batch_stride = *o.batch_stride;
  switch (o.read) {
    case GemmRead::as_stored: break;
    case GemmRead::transposed: c.trans = true; break;
    case GemmRead::packed:
      c.pack = true;
      c.perm = o.pack_order;
      for (int64_t d : o.pack_order) c.packed_shape.push_back(t.shape[static_cast<size_t>(d)]);
      // rounded up, so that the rhs's scratch after it is aligned as a GEMM library wants
      c.scratch_bytes = (t.bytes() + 255) / 256 * 256;
      break;
  }
  return c;
}

}  // namespace

GemmLayout plan_gemm(const Type& lhs, const Type& rhs, const Attrs& at) {
  DotGemm d = dot_gemm(lhs, rhs, at);
  GemmLayout g;
  g.batch = d.batch;
  g.m = d.m;
  g.n = d.n;
  g.k = d.k;
  g.a = cuda_operand(d, DotSide::lhs, lhs);
  g.b = cuda_operand(d, DotSide::rhs, rhs);
  return g;
}

}  // namespace capstep::plan
