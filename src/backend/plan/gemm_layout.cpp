#include "backend/plan/gemm_layout.h"

#include <algorithm>

namespace capstep::plan {
namespace {

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

int64_t prod(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= s[static_cast<size_t>(d)];
  return p;
}

// `direct` is the order used untransposed ([B,M,K] / [B,K,N]), `swapped` the
// order used as a transposed operand ([B,K,M] / [B,N,K]); `rows` x `cols` the
// matrix in the direct order.
GemmOperand plan_operand(const Type& t, const std::vector<int64_t>& direct, const std::vector<int64_t>& swapped,
                         int64_t rows, int64_t cols) {
  GemmOperand o;
  o.batch_stride = rows * cols;
  if (transpose_moves_nothing(t.shape, direct)) {
    o.ld = cols;
  } else if (transpose_moves_nothing(t.shape, swapped)) {
    o.trans = true;
    o.ld = rows;
  } else {
    o.pack = true;
    o.perm = direct;
    for (int64_t d : direct) o.packed_shape.push_back(t.shape[static_cast<size_t>(d)]);
    o.ld = cols;
    // rounded up, so that the rhs's scratch after it is aligned as a GEMM library wants
    o.scratch_bytes = (t.bytes() + 255) / 256 * 256;
  }
  return o;
}

}  // namespace

bool transpose_moves_nothing(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t prev = -1;
  for (int64_t d : perm) {
    if (shape[static_cast<size_t>(d)] == 1) continue;
    if (d < prev) return false;
    prev = d;
  }
  return true;
}

GemmLayout plan_gemm(const Type& lhs, const Type& rhs, const Attrs& at) {
  GemmLayout g;
  const std::vector<int64_t> lf = dot_free_axes(lhs.rank(), at.lhs_batch, at.lhs_contract);
  const std::vector<int64_t> rf = dot_free_axes(rhs.rank(), at.rhs_batch, at.rhs_contract);
  g.batch = prod(lhs.shape, at.lhs_batch);
  g.m = prod(lhs.shape, lf);
  g.k = prod(lhs.shape, at.lhs_contract);
  g.n = prod(rhs.shape, rf);
  g.a = plan_operand(lhs, cat(at.lhs_batch, lf, at.lhs_contract), cat(at.lhs_batch, at.lhs_contract, lf), g.m, g.k);
  g.b = plan_operand(rhs, cat(at.rhs_batch, at.rhs_contract, rf), cat(at.rhs_batch, rf, at.rhs_contract), g.k, g.n);
  return g;
}

}  // namespace capstep::plan
