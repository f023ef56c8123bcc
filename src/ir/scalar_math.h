// The scalar formula of every elementwise primitive, written once and called
// by both backends: the host interpreter's loops and the CUDA kernels.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define CAPSTEP_HD __host__ __device__ __forceinline__
#else
#define CAPSTEP_HD inline
#endif

namespace capstep::scalar {

template <class T> CAPSTEP_HD T add(T a, T b) { return a + b; }
template <class T> CAPSTEP_HD T subtract(T a, T b) { return a - b; }
template <class T> CAPSTEP_HD T multiply(T a, T b) { return a * b; }
template <class T> CAPSTEP_HD T divide(T a, T b) { return a / b; }
// StableHLO maximum propagates NaN.
template <class T> CAPSTEP_HD T maximum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}
template <class T> CAPSTEP_HD T negate(T a) { return -a; }
template <class T> CAPSTEP_HD T exponential(T a) { using std::exp; return exp(a); }
template <class T> CAPSTEP_HD T log(T a) { using std::log; return log(a); }
template <class T> CAPSTEP_HD T tanh(T a) { using std::tanh; return tanh(a); }

// ---- f32 exp and tanh: branch-free formulas for both backends -----------------
// glibc's expf and tanhf (through expm1f: a fifth of a host training step) are
// scalar calls the host's loops cannot vectorise, and CUDA's are their own
// approximations; these vectorise on the host, and the GPU computes the same
// bits (no FMA contraction on either side).
CAPSTEP_HD float float_from_bits(int b) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(b);
#else
  float f;
  __builtin_memcpy(&f, &b, sizeof f);
  return f;
#endif
}

// x = k ln2 + r with k a whole number (returned as a float), r in
// [-ln2/2, ln2/2]: the Cephes expf polynomial p(r) ~ e^r.
CAPSTEP_HD float exp_reduced(float x, float& k) {
  k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// exp(x): 2^k * p(r) (exp_reduced), with 2^k applied in two halves so that
// subnormal results and overflow to inf come out of the same
// multiplications. NaN passes. Within 2 ulp of the correctly rounded value
// (tested in interpreter_test).
template <> CAPSTEP_HD float exponential<float>(float x) {
  const float xc = x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x);  // exp(89) = inf, exp(-104) = 0 in f32
  float k;
  const float p = exp_reduced(xc, k);
  const int ki = static_cast<int>(k);      // in [-150, 128]
  const int k1 = ki / 2, k2 = ki - k1;     // each in [-75, 64]: 2^k1 and 2^k2 are normal floats
  const float y = p * float_from_bits((k1 + 127) << 23) * float_from_bits((k2 + 127) << 23);
  return x != x ? x : y;
}

// exp(x) for x in [-20, 0] (tanh's e^(-2|x|) below): exponential<float>'s
// operations without its clamp, its NaN pass and its scaling in two halves,
// none of which can act there (k is in [-29, 0], so 2^k, 2^k1 and 2^k2 are
// normal floats and p * 2^k is exact either way): the same bits in fewer
// instructions (tanh was two fifths of a GELU group on the host).
CAPSTEP_HD float exp_nonpositive_small(float x) {
  float k;
  const float p = exp_reduced(x, k);
  return p * float_from_bits((static_cast<int>(k) + 127) << 23);
}

// tanh: within 2 ulp of the correctly rounded value (tested in interpreter_test).
// Odd; for |x| < 0.625 the Cephes polynomial x + x^3 P(x^2), else
// (1 - e) / (1 + e) with e = exp(-2|x|), free of cancellation there. NaN passes.
template <> CAPSTEP_HD float tanh<float>(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = ax * ax;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = ax + ax * z * p;
  const float e = exp_nonpositive_small(-2.0f * (ax < 10.0f ? ax : 10.0f));
  const float big = (1.0f - e) / (1.0f + e);
  const float m = ax < 0.625f ? small : big;
  // tanh(+-0) = +-0 and NaN -> NaN: both are x itself.
  return x < 0.0f ? -m : (x > 0.0f ? m : x);
}
template <class T> CAPSTEP_HD T sqrt(T a) { using std::sqrt; return sqrt(a); }
template <class T> CAPSTEP_HD T rsqrt(T a) { using std::sqrt; return T(1) / sqrt(a); }

// compare directions, in the order of capstep::Cmp (EQ, NE, LT, LE, GT, GE).
template <class T> CAPSTEP_HD bool compare(int dir, T a, T b) {
  switch (dir) {
    case 0: return a == b;
    case 1: return a != b;
    case 2: return a < b;
    case 3: return a <= b;
    case 4: return a > b;
    default: return a >= b;  // 5
  }
}

// convert: float -> int truncates toward zero (StableHLO); any -> i1 is != 0.
template <class To, class From> CAPSTEP_HD To convert(From a) { return static_cast<To>(a); }
template <> CAPSTEP_HD bool convert<bool, float>(float a) { return a != 0.0f; }
template <> CAPSTEP_HD bool convert<bool, double>(double a) { return a != 0.0; }
template <> CAPSTEP_HD bool convert<bool, int>(int a) { return a != 0; }
// float -> i32 saturates and sends NaN to 0, as XLA and CUDA's cvt.rzi.sat do;
// a plain cast is undefined in C++ for those values, and x86 would give INT_MIN.
template <class F> CAPSTEP_HD int saturating_to_i32(F a) {
  if (a != a) return 0;
  if (a >= F(2147483647.0)) return 2147483647;
  if (a <= F(-2147483648.0)) return -2147483647 - 1;
  return static_cast<int>(a);
}
template <> CAPSTEP_HD int convert<int, float>(float a) { return saturating_to_i32(a); }
template <> CAPSTEP_HD int convert<int, double>(double a) { return saturating_to_i32(a); }

}  // namespace capstep::scalar
