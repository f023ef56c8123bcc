#include "backend/host/strided.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CAPSTEP_TRANSPOSE_AVX2 1
#endif

namespace capstep::host {

void strided_range_bytes(const Walk& v, size_t elem_bytes, const void* src, int64_t begin, int64_t count,
                         void* dst) {
  switch (elem_bytes) {
    case 1: strided_range(v, static_cast<const uint8_t*>(src), begin, count, static_cast<uint8_t*>(dst)); return;
    case 2: strided_range(v, static_cast<const uint16_t*>(src), begin, count, static_cast<uint16_t*>(dst)); return;
    case 4: strided_range(v, static_cast<const uint32_t*>(src), begin, count, static_cast<uint32_t*>(dst)); return;
    case 8: strided_range(v, static_cast<const uint64_t*>(src), begin, count, static_cast<uint64_t*>(dst)); return;
    default: throw Error("strided copy: unsupported element width " + std::to_string(elem_bytes));
  }
}

void strided_copy_bytes(const Walk& v, size_t elem_bytes, const void* src, void* dst) {
  strided_range_bytes(v, elem_bytes, src, 0, v.numel(), dst);
}

namespace {

// The element-by-element transpose of the block rows [r0, r1) x cols [c0, c1).
void transpose_scalar(const float* __restrict src, int64_t lds, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                      float* __restrict dst, int64_t ldd) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
}

#if CAPSTEP_TRANSPOSE_AVX2
// Whole 8 x 8 blocks through registers: 8 row loads, 24 shuffles, 8 stores.
__attribute__((target("avx2"))) void transpose_avx2(const float* src, int64_t lds, int64_t rows, int64_t cols,
                                                    float* dst, int64_t ldd) {
  const int64_t R8 = rows / 8 * 8, C8 = cols / 8 * 8;
  for (int64_t r0 = 0; r0 < R8; r0 += 8)
    for (int64_t c0 = 0; c0 < C8; c0 += 8) {
      const float* s = src + r0 * lds + c0;
      const __m256 x0 = _mm256_loadu_ps(s), x1 = _mm256_loadu_ps(s + lds), x2 = _mm256_loadu_ps(s + 2 * lds),
                   x3 = _mm256_loadu_ps(s + 3 * lds), x4 = _mm256_loadu_ps(s + 4 * lds),
                   x5 = _mm256_loadu_ps(s + 5 * lds), x6 = _mm256_loadu_ps(s + 6 * lds),
                   x7 = _mm256_loadu_ps(s + 7 * lds);
      const __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1), t2 = _mm256_unpacklo_ps(x2, x3),
                   t3 = _mm256_unpackhi_ps(x2, x3), t4 = _mm256_unpacklo_ps(x4, x5), t5 = _mm256_unpackhi_ps(x4, x5),
                   t6 = _mm256_unpacklo_ps(x6, x7), t7 = _mm256_unpackhi_ps(x6, x7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                   u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                   u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                   u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* d = dst + c0 * ldd + r0;
      _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
  transpose_scalar(src, lds, 0, R8, C8, cols, dst, ldd);     // the columns right of the blocks
  transpose_scalar(src, lds, R8, rows, 0, cols, dst, ldd);   // the rows below them
}

// GCC turns the row loop below into a call to memcpy per row (its loop
// distribution spots the copy), which costs more than the copy for the
// 128-byte rows of a panel (a profile of lane 1 shows those calls).
#if defined(__GNUC__) && !defined(__clang__)
#define CAPSTEP_NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define CAPSTEP_NO_MEMCPY_CALLS
#endif
__attribute__((target("avx2"))) CAPSTEP_NO_MEMCPY_CALLS void copy_rows_avx2(const float* __restrict src, int64_t lds,
                                                                            int64_t rows, int64_t cols,
                                                                            float* __restrict dst, int64_t ldd) {
  const int64_t C8 = cols / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    float* d = dst + r * ldd;
    int64_t c = 0;
    for (; c < C8; c += 8) _mm256_storeu_ps(d + c, _mm256_loadu_ps(s + c));
    for (; c < cols; ++c) d[c] = s[c];
  }
}

bool cpu_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

void copy_rows_f32(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  if (rows <= 0 || cols <= 0) return;
#if CAPSTEP_TRANSPOSE_AVX2
  if (cpu_avx2()) return copy_rows_avx2(src, lds, rows, cols, dst, ldd);
#endif
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * lds, cols, dst + r * ldd);
}

void transpose_f32(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  if (rows <= 0 || cols <= 0) return;
#if CAPSTEP_TRANSPOSE_AVX2
  if (cpu_avx2()) return transpose_avx2(src, lds, rows, cols, dst, ldd);
#endif
  for (int64_t r0 = 0; r0 < rows; r0 += 8)
    for (int64_t c0 = 0; c0 < cols; c0 += 8)
      transpose_scalar(src, lds, r0, std::min(rows, r0 + 8), c0, std::min(cols, c0 + 8), dst, ldd);
}

}  // namespace capstep::host
