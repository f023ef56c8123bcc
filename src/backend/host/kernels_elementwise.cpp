// Elementwise kernels: one tight loop per (op, dtype), each calling the shared
// formula in ir/scalar_math.h so that the CUDA backend computes the same thing.
// No __restrict here: the memory plan may give an output the very bytes of an
// operand (in place, same index); GCC's runtime overlap check lets equal
// pointers take the vector loop.

#include <climits>

#include <type_traits>

#include "backend/host/step.h"
#include "ir/bf16.h"
#include "ir/scalar_math.h"

namespace capstep::host {
namespace {

// i1 is stored as one byte holding 0 or 1.
template <class T> struct Storage { using type = T; };
template <> struct Storage<bool> { using type = uint8_t; };
template <class T> using S = typename Storage<T>::type;

// StableHLO leaves integer division by zero implementation-defined and C++
// makes it undefined (a trap on x86); the host follows XLA: x / 0 = -1 and
// INT_MIN / -1 = INT_MIN.
inline int32_t int_divide(int32_t a, int32_t b) {
  if (b == 0) return -1;
  if (a == INT32_MIN && b == -1) return INT32_MIN;
  return scalar::divide<int32_t>(a, b);
}
// Integer add/subtract/multiply/negate wrap (as in XLA) instead of being UB.
inline int32_t int_add(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}
inline int32_t int_subtract(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}
inline int32_t int_multiply(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
}
inline int32_t int_maximum(int32_t a, int32_t b) { return scalar::maximum<int32_t>(a, b); }
inline int32_t int_negate(int32_t a) { return static_cast<int32_t>(0u - static_cast<uint32_t>(a)); }

template <class T, T (*F)(T, T)>
CAPSTEP_HOST_CLONES void k_binary(const Step& s, void* const* p) {
  const T* a = static_cast<const T*>(p[s.in[0]]);
  const T* b = static_cast<const T*>(p[s.in[1]]);
  T* o = static_cast<T*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = F(a[i], b[i]);
}

template <class T, T (*F)(T)>
CAPSTEP_HOST_CLONES void k_unary(const Step& s, void* const* p) {
  const T* a = static_cast<const T*>(p[s.in[0]]);
  T* o = static_cast<T*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = F(a[i]);
}

template <class T, int Dir>
CAPSTEP_HOST_CLONES void k_compare(const Step& s, void* const* p) {
  const S<T>* a = static_cast<const S<T>*>(p[s.in[0]]);
  const S<T>* b = static_cast<const S<T>*>(p[s.in[1]]);
  uint8_t* o = static_cast<uint8_t*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = scalar::compare<S<T>>(Dir, a[i], b[i]) ? 1 : 0;
}

template <class E>
CAPSTEP_HOST_CLONES void k_select(const Step& s, void* const* p) {
  const uint8_t* c = static_cast<const uint8_t*>(p[s.in[0]]);
  const E* a = static_cast<const E*>(p[s.in[1]]);
  const E* b = static_cast<const E*>(p[s.in[2]]);
  E* o = static_cast<E*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
}

template <class To, class From>
CAPSTEP_HOST_CLONES void k_convert(const Step& s, void* const* p) {
  const S<From>* a = static_cast<const S<From>*>(p[s.in[0]]);
  S<To>* o = static_cast<S<To>*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i)
    o[i] = static_cast<S<To>>(scalar::convert<To, From>(static_cast<From>(a[i])));
}

// bf16: each operand widened to f32 (exact), the f32 formula, the result
// rounded to nearest even. For add, subtract, multiply, divide and sqrt this is
// the correctly rounded bf16 result: f32 has more than 2 * 8 + 2 significand
// bits, so rounding to f32 first cannot change the final rounding.
template <float (*F)(float, float)>
CAPSTEP_HOST_CLONES void k_binary_bf16(const Step& s, void* const* p) {
  const uint16_t* a = static_cast<const uint16_t*>(p[s.in[0]]);
  const uint16_t* b = static_cast<const uint16_t*>(p[s.in[1]]);
  uint16_t* o = static_cast<uint16_t*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = bf16::from_float(F(bf16::to_float(a[i]), bf16::to_float(b[i])));
}

template <float (*F)(float)>
CAPSTEP_HOST_CLONES void k_unary_bf16(const Step& s, void* const* p) {
  const uint16_t* a = static_cast<const uint16_t*>(p[s.in[0]]);
  uint16_t* o = static_cast<uint16_t*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = bf16::from_float(F(bf16::to_float(a[i])));
}

template <int Dir>
CAPSTEP_HOST_CLONES void k_compare_bf16(const Step& s, void* const* p) {
  const uint16_t* a = static_cast<const uint16_t*>(p[s.in[0]]);
  const uint16_t* b = static_cast<const uint16_t*>(p[s.in[1]]);
  uint8_t* o = static_cast<uint8_t*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = scalar::compare<float>(Dir, bf16::to_float(a[i]), bf16::to_float(b[i])) ? 1 : 0;
}

// bf16 -> any: exact to f32, then f32's convert rule.
template <class To>
CAPSTEP_HOST_CLONES void k_convert_from_bf16(const Step& s, void* const* p) {
  const uint16_t* a = static_cast<const uint16_t*>(p[s.in[0]]);
  S<To>* o = static_cast<S<To>*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<S<To>>(scalar::convert<To, float>(bf16::to_float(a[i])));
}

// any -> bf16, rounded once to nearest even (f64 and i32 through
// bf16::from_double, which does not round twice).
template <class From>
CAPSTEP_HOST_CLONES void k_convert_to_bf16(const Step& s, void* const* p) {
  const S<From>* a = static_cast<const S<From>*>(p[s.in[0]]);
  uint16_t* o = static_cast<uint16_t*>(p[s.out]);
  const int64_t n = s.n;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<From, float>) o[i] = bf16::from_float(a[i]);
    else o[i] = bf16::from_double(static_cast<double>(static_cast<From>(a[i])));
  }
}

[[noreturn]] void no_kernel(const char* what, DType t) {
  throw Error(std::string("host interpreter: no kernel for ") + what + " on " + dtype_name(t));
}

template <class To>
Kernel convert_from(DType from) {
  switch (from) {
    case DType::f32: return &k_convert<To, float>;
    case DType::f64: return &k_convert<To, double>;
    case DType::i32: return &k_convert<To, int32_t>;
    case DType::i1: return &k_convert<To, bool>;
    case DType::bf16: return &k_convert_from_bf16<To>;
  }
  return nullptr;
}

Kernel convert_to_bf16(DType from) {
  switch (from) {
    case DType::f32: return &k_convert_to_bf16<float>;
    case DType::f64: return &k_convert_to_bf16<double>;
    case DType::i32: return &k_convert_to_bf16<int32_t>;
    case DType::i1: return &k_convert_to_bf16<bool>;
    case DType::bf16: break;  // an alias, never a kernel
  }
  return nullptr;
}

template <int Dir> Kernel compare_bf16() { return &k_compare_bf16<Dir>; }

template <class T>
Kernel compare_dir(Cmp c) {
  switch (c) {
    case Cmp::EQ: return &k_compare<T, 0>;
    case Cmp::NE: return &k_compare<T, 1>;
    case Cmp::LT: return &k_compare<T, 2>;
    case Cmp::LE: return &k_compare<T, 3>;
    case Cmp::GT: return &k_compare<T, 4>;
    case Cmp::GE: return &k_compare<T, 5>;
  }
  return nullptr;
}

}  // namespace

// One case per row of the sub-table, each calling that op's scalar::NAME.
Kernel binary_kernel(BinaryOp op, DType t) {
  switch (op) {
#define CAPSTEP_X(name, ...)                                                       \
  case BinaryOp::name:                                                             \
    if (t == DType::f32) return &k_binary<float, &scalar::name<float>>;            \
    if (t == DType::f64) return &k_binary<double, &scalar::name<double>>;          \
    if (t == DType::bf16) return &k_binary_bf16<&scalar::name<float>>;             \
    if (t == DType::i32) return &k_binary<int32_t, &int_##name>; /* XLA i32 rules */ \
    break;
    CAPSTEP_BINARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
  }
  no_kernel(op_name(op_of(op)), t);
}

// f32 tanh and exponential: scalar_math.h's branch-free formulas, which vectorise.
Kernel unary_kernel(UnaryOp op, DType t) {
  switch (op) {
#define CAPSTEP_X(name, ...)                                                \
  case UnaryOp::name:                                                       \
    if (t == DType::f32) return &k_unary<float, &scalar::name<float>>;      \
    if (t == DType::f64) return &k_unary<double, &scalar::name<double>>;    \
    if (t == DType::bf16) return &k_unary_bf16<&scalar::name<float>>;       \
    if (t == DType::i32 && op == UnaryOp::negate) return &k_unary<int32_t, &int_negate>; \
    break;
    CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
  }
  no_kernel(op_name(op_of(op)), t);
}

Kernel compare_kernel(Cmp c, DType t) {
  switch (t) {
    case DType::f32: return compare_dir<float>(c);
    case DType::f64: return compare_dir<double>(c);
    case DType::i32: return compare_dir<int32_t>(c);
    case DType::i1: return compare_dir<bool>(c);  // bytes 0/1: false < true
    case DType::bf16:  // compared as f32 values (the bits do not order negative numbers)
      switch (c) {
        case Cmp::EQ: return compare_bf16<0>();
        case Cmp::NE: return compare_bf16<1>();
        case Cmp::LT: return compare_bf16<2>();
        case Cmp::LE: return compare_bf16<3>();
        case Cmp::GT: return compare_bf16<4>();
        case Cmp::GE: return compare_bf16<5>();
      }
      break;
  }
  no_kernel("compare", t);
}

Kernel select_kernel(DType t) {
  switch (dtype_size(t)) {
    case 1: return &k_select<uint8_t>;
    case 2: return &k_select<uint16_t>;
    case 4: return &k_select<uint32_t>;
    case 8: return &k_select<uint64_t>;
  }
  no_kernel("select", t);
}

Kernel convert_kernel(DType from, DType to) {
  switch (to) {
    case DType::f32: return convert_from<float>(from);
    case DType::f64: return convert_from<double>(from);
    case DType::i32: return convert_from<int32_t>(from);
    case DType::i1: return convert_from<bool>(from);
    case DType::bf16:
      if (Kernel k = convert_to_bf16(from)) return k;
      break;
  }
  no_kernel("convert", to);
}

}  // namespace capstep::host
