// Branch-free f32 formulas that GCC vectorises, for the host's hot loops where
// the libm call is the cost (glibc's tanhf is a scalar call through expm1f:
// a fifth of a training step). Each stays within 2 ulp of the correctly rounded
// value (tested in interpreter_test); the CUDA backend's tanhf is within 2 ulp
// too, so host and device agree as before.
//
// Kept beside the host kernels rather than in ir/scalar_math.h, which the lead
// owns; it is plain C++ and could move there as a CAPSTEP_HD function.
#pragma once

#include <bit>
#include <cstdint>

namespace capstep::host::vmath {

// exp(x) for x in [-87, 0] (clamped below): 2^k * p(r), r = x - k ln2 in [-ln2/2, ln2/2],
// p a degree-6 Taylor/minimax polynomial (Cephes expf coefficients).
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // Round to nearest by the 1.5 * 2^23 trick: SSE2 has no round instruction
  // and a call to roundf would stop vectorisation.
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln2 split in two so that x - k ln2 is exact enough.
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^k by building the exponent bits (k in [-126, 0]).
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// tanh(x): odd; for |x| < 0.625 the Cephes minimax polynomial x + x^3 P(x^2),
// else 1 - 2 / (exp(2|x|) + 1) computed from e = exp(-2|x|) as (1 - e) / (1 + e),
// which has no cancellation there (e < 0.29). NaN passes through.
inline float tanh(float x) {
  const float ax = __builtin_fabsf(x);
  const float z = ax * ax;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = ax + ax * z * p;
  const float e = exp_nonpositive(-2.0f * (ax < 10.0f ? ax : 10.0f));
  const float big = (1.0f - e) / (1.0f + e);
  const float r = __builtin_copysignf(ax < 0.625f ? small : big, x);  // odd, and tanh(-0) = -0
  return x != x ? x : r;
}

}  // namespace capstep::host::vmath
