// dot_general as a strided batch of row-major matrix products, the shape that
// cuBLAS (or any BLAS) takes in one call:
//   C[b] (M x N, contiguous) = A[b] (M x K) * B[b] (K x N)
// with B = product of batch dims, M = lhs free dims, N = rhs free dims,
// K = contracting dims. An operand whose dims already sit in the order
// (batch, free, contract) or (batch, contract, free) is used in place (the
// second as a transposed operand); any other order is first transposed into
// scratch. Pure C++: the CUDA executor uses it, tests check it on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "capstep/ir.h"

namespace capstep::plan {

struct GemmOperand {
  bool pack = false;              // transpose into scratch first (perm), then use as not transposed
  std::vector<int64_t> perm;      // the transpose when packing: packed[i] = operand axis perm[i]
  Shape packed_shape;             // operand shape after the transpose
  bool trans = false;             // stored as [B,K,M] (lhs) or [B,N,K] (rhs) instead
  int64_t ld = 0;                 // row length of each stored row-major matrix
  int64_t batch_stride = 0;       // elements from one batch's matrix to the next
  size_t scratch_bytes = 0;       // bytes of scratch when packing
};

struct GemmLayout {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  GemmOperand a, b;               // lhs, rhs
  size_t scratch_bytes() const { return a.scratch_bytes + b.scratch_bytes; }  // a's, then b's
};

GemmLayout plan_gemm(const Type& lhs, const Type& rhs, const Attrs& at);

// True when transposing `shape` by `perm` moves no byte (only size-1 axes move).
bool transpose_moves_nothing(const Shape& shape, const std::vector<int64_t>& perm);

}  // namespace capstep::plan
