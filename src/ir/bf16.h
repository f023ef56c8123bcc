// bfloat16 as the host stores it: the top 16 bits of an IEEE f32 (1 sign,
// 8 exponent, 7 mantissa bits) in a uint16_t. Every store rounds to nearest,
// ties to even; NaN stays NaN (quieted, sign kept); infinities stay infinite.
// Arithmetic on bf16 values is done in f32, in which every bf16 value is exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace capstep::bf16 {

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Exact: a bf16 value is an f32 whose low 16 bits are zero.
inline float to_float(uint16_t h) { return float_of_bits(static_cast<uint32_t>(h) << 16); }

// f32 -> bf16, round to nearest even. Adding 0x7FFF plus the lowest kept bit
// and truncating rounds ties to even; a carry into the exponent is the correct
// result (up to infinity on overflow).
// Without a branch, so that loops of it vectorise.
inline uint16_t from_float(float f) {
  const uint32_t b = bits_of(f);
  const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (b >> 16) | 0x0040u;  // NaN: keep sign, force the quiet bit
  return static_cast<uint16_t>((b & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// f64 -> bf16 rounded once (not f64 -> f32 -> bf16, which can round twice):
// the f64 is first rounded to f32 "to odd" (truncate, then set the last bit if
// anything was dropped), which keeps enough information for the second
// rounding to be exact, since f32 has more than 8 + 2 significand bits.
inline uint16_t from_double(double d) {
  if (std::isnan(d)) return from_float(static_cast<float>(d));
  float f = static_cast<float>(d);  // round to nearest
  if (std::isinf(f) || static_cast<double>(f) == d) return from_float(f);
  // Truncate toward zero: step back when rounding went away from zero.
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return from_float(float_of_bits(bits_of(f) | 1u));
}

// The value a bf16 store of d holds, as a double.
inline double round_double(double d) { return static_cast<double>(to_float(from_double(d))); }

// Largest finite bf16: (2 - 2^-7) * 2^127.
constexpr double kMax = 3.3895313892515355e38;

}  // namespace capstep::bf16
