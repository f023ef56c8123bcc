// bf16 in the library kernels (kernels_*.cu), as the host stores it
// (src/ir/bf16.h): the top 16 bits of an f32 in a uint16_t, widened exactly,
// rounded to nearest even on every store (NaN stays a quiet NaN with its
// sign; infinities stay; overflow rounds to infinity); an f64 (or i32, through
// f64) rounded once, through f32 rounded "to odd". The generated kernels carry
// the same functions as text (plan/kernel_emitter.h, kBf16DeviceText); the
// plan emulation test checks those bit for bit against the interpreter.
#pragma once

#include <cstdint>

namespace capstep::cuda::k {

__device__ __forceinline__ float bf16_load(uint16_t h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }

__device__ __forceinline__ uint16_t bf16_store(float f) {
  const unsigned b = __float_as_uint(f);
  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint16_t bf16_store_double(double d) {
  if (d != d) {  // NaN: sign and top payload bits, quieted (the host's f64 -> f32 keeps them; the device's does not)
    const unsigned hi = static_cast<unsigned>(static_cast<unsigned long long>(__double_as_longlong(d)) >> 32);
    return static_cast<uint16_t>(((hi >> 16) & 0x8000u) | 0x7FC0u | ((hi >> 13) & 0x7Fu));
  }
  float f = static_cast<float>(d);  // to nearest
  if ((__float_as_uint(f) & 0x7FFFFFFFu) == 0x7F800000u || static_cast<double>(f) == d) return bf16_store(f);
  const double af = f < 0.0f ? -static_cast<double>(f) : static_cast<double>(f), ad = d < 0.0 ? -d : d;
  if (af > ad) f = __uint_as_float(__float_as_uint(f) - 1u);  // toward zero
  return bf16_store(__uint_as_float(__float_as_uint(f) | 1u));  // to odd: the second rounding is exact
}

}  // namespace capstep::cuda::k
