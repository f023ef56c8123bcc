// The text of src/ir/scalar_math.h, for NVRTC (kernel_source.h). A copy, because
// the build may not generate files (CMakeLists.txt is not ours to change);
// fusion_test fails when it differs from the header by one byte, so the
// formulas still have one definition. To update: paste the header's text
// between R"CAPSTEP_SM( and )CAPSTEP_SM" below.
#include "backend/plan/kernel_source.h"

namespace capstep::plan {

const char* const kScalarMathText = R"CAPSTEP_SM(// The scalar formula of every elementwise primitive, written once and called
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
)CAPSTEP_SM";

const char* const kNvrtcCmathText =
    "#pragma once\n"
    "namespace std { using ::exp; using ::log; using ::tanh; using ::sqrt; }\n";

}  // namespace capstep::plan
