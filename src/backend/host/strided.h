// The host's loops over a strided walk (plan/walk.h, the one strided type of
// both backends): the loop nest that broadcast_in_dim, transpose, slice, pad,
// dot_general's operand packing and reduce all share, with fast inner loops
// for the innermost axis (a memcpy where it is contiguous, a fill where it
// repeats). Walks come collapsed, so a plain copy is rank 1 with stride 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/plan/walk.h"
#include "capstep/ir.h"

namespace capstep::host {

using plan::kMaxRank;
using plan::row_major_strides;
using plan::Walk;

// One step of the row-major walk over the outer axes [0, rank-1) of v (the
// innermost axis is the caller's own loop): advances idx and moves off by the
// strides. Shared by strided_copy and the host's reduce kernel.
inline void next_outer(const Walk& v, int64_t* idx, int64_t& off) {
  for (int a = v.rank - 2; a >= 0; --a) {
    if (++idx[a] < v.size[a]) {
      off += v.stride[a];
      return;
    }
    off -= (v.size[a] - 1) * v.stride[a];
    idx[a] = 0;
  }
}

// dst[0, count) = the elements [begin, begin + count) of the row-major walk v
// over src (dst[k] = src[offset of element begin + k]). E is a storage type of
// the element's width (uint8_t, uint16_t, uint32_t, uint64_t): copying never
// looks at values.
template <class E>
void strided_range(const Walk& v, const E* __restrict src, int64_t begin, int64_t count, E* __restrict dst) {
  if (count <= 0) return;
  if (v.rank == 0) {
    dst[0] = src[0];
    return;
  }
  const int r = v.rank;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0, rest = begin;
  for (int a = r - 1; a >= 0; --a) {
    idx[a] = rest % v.size[a];
    rest /= v.size[a];
    off += idx[a] * v.stride[a];
  }
  const int64_t inner = v.size[r - 1], is = v.stride[r - 1];
  while (count > 0) {
    const int64_t j0 = idx[r - 1];
    const int64_t n = std::min(inner - j0, count);
    const E* s = src + off;
    if (is == 1) {
      std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(E));
    } else if (is == 0) {
      const E x = s[0];
      for (int64_t j = 0; j < n; ++j) dst[j] = x;
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j] = s[j * is];
    }
    dst += n;
    count -= n;
    off -= j0 * is;
    idx[r - 1] = 0;
    next_outer(v, idx, off);
  }
}

// dst[0..n) (row-major over v) = src[offset(v)]: the whole walk.
template <class E>
void strided_copy(const Walk& v, const E* __restrict src, E* __restrict dst) {
  strided_range(v, src, 0, v.numel(), dst);
}

// Dispatch strided_range on an element width in bytes (1, 2, 4 or 8).
void strided_range_bytes(const Walk& v, size_t elem_bytes, const void* src, int64_t begin, int64_t count, void* dst);
// Dispatches strided_copy on an element width in bytes (1, 2, 4 or 8).
void strided_copy_bytes(const Walk& v, size_t elem_bytes, const void* src, void* dst);

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: a 2-D f32
// transpose, in 8 x 8 blocks (held in AVX2 registers when the CPU has them:
// an element-by-element copy is bound by one store per element).
void transpose_f32(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd);
// dst[r * ldd + c] = src[r * lds + c] for r < rows, c < cols: a block of
// rows copied as they are, with the rows' own loads and stores (AVX2 where
// the CPU has it) rather than a memcpy call per row, which costs more than
// the copy at a panel's 32 floats a row.
void copy_rows_f32(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd);

}  // namespace capstep::host
