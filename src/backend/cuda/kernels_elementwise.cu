// Elementwise kernels: unary, binary, compare, select, convert. The scalar
// formula of each op is the one in src/ir/scalar_math.h, shared with the host
// interpreter. Grid-stride loops; element k is read before element k is
// written by the same thread, so any of these may run in place (the device
// plan relies on it for donated buffers). bf16 (uint16_t here, no other dtype
// is stored in 16 bits): each operand widened to f32, the f32 formula, the
// result rounded to nearest even, as the host interpreter does.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/bf16_device.cuh"
#include "backend/cuda/kernels.h"
#include "ir/scalar_math.h"

namespace capstep::cuda::k {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;  // grid-stride covers the rest
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

#define CAPSTEP_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

// T in memory, R in registers: R = T, or for bf16 (uint16_t) R = float.
template <class T> struct Reg { using type = T; };
template <> struct Reg<uint16_t> { using type = float; };
template <class T> __device__ __forceinline__ typename Reg<T>::type widen(T x) {
  if constexpr (std::is_same_v<T, uint16_t>) return bf16_load(x);
  else return x;
}
template <class T> __device__ __forceinline__ T narrow(typename Reg<T>::type x) {
  if constexpr (std::is_same_v<T, uint16_t>) return bf16_store(x);
  else return x;
}

template <class T, UnaryOp F>
__global__ void k_unary(const T* a, T* out, int64_t n) {
  using R = typename Reg<T>::type;
  CAPSTEP_GRID_LOOP(i, n) {
    const R x = widen(a[i]);
    R y;
    // one `if constexpr` per row of CAPSTEP_UNARY_OPS: F's scalar::NAME
#define CAPSTEP_X(name, ...) \
  if constexpr (F == UnaryOp::name) y = scalar::name<R>(x);
    CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
    out[i] = narrow<T>(y);
  }
}

template <class T, BinaryOp F>
__global__ void k_binary(const T* a, const T* b, T* out, int64_t n) {
  using R = typename Reg<T>::type;
  CAPSTEP_GRID_LOOP(i, n) {
    const R x = widen(a[i]), y = widen(b[i]);
    R z;
    // one `if constexpr` per row of CAPSTEP_BINARY_OPS: F's scalar::NAME
#define CAPSTEP_X(name, ...) \
  if constexpr (F == BinaryOp::name) z = scalar::name<R>(x, y);
    CAPSTEP_BINARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
    out[i] = narrow<T>(z);
  }
}

// bf16 compares as f32 values (its bits do not order negative numbers)
template <class T>
__global__ void k_compare(int cmp, const T* a, const T* b, uint8_t* out, int64_t n) {
  using R = typename Reg<T>::type;
  CAPSTEP_GRID_LOOP(i, n) out[i] = scalar::compare<R>(cmp, widen(a[i]), widen(b[i])) ? 1 : 0;
}

template <class T>
__global__ void k_select(const uint8_t* p, const T* a, const T* b, T* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) out[i] = p[i] ? a[i] : b[i];
}

// i1 is one byte holding 0 or 1: read as bool, written as 0/1. bf16 (uint16_t):
// from it, exact to f32 then f32's rule; to it, rounded once to nearest even
// (f64 and i32 through bf16_store_double, which does not round twice).
template <class To, class From>
__global__ void k_convert(const From* a, To* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) {
    if constexpr (std::is_same_v<To, uint16_t>) {
      if constexpr (std::is_same_v<From, uint16_t>) out[i] = a[i];  // (the executor copies instead)
      else if constexpr (std::is_same_v<From, float>) out[i] = bf16_store(a[i]);
      else if constexpr (std::is_same_v<From, uint8_t>) out[i] = a[i] ? uint16_t{0x3F80} : uint16_t{0};
      else out[i] = bf16_store_double(static_cast<double>(a[i]));
    } else if constexpr (std::is_same_v<From, uint16_t>) {
      const float x = bf16_load(a[i]);
      if constexpr (std::is_same_v<To, uint8_t>) out[i] = scalar::convert<bool, float>(x) ? 1 : 0;
      else out[i] = scalar::convert<To, float>(x);
    } else if constexpr (std::is_same_v<From, uint8_t> && std::is_same_v<To, uint8_t>) out[i] = a[i] ? 1 : 0;
    else if constexpr (std::is_same_v<From, uint8_t>) out[i] = static_cast<To>(a[i] ? 1 : 0);
    else if constexpr (std::is_same_v<To, uint8_t>) out[i] = scalar::convert<bool, From>(a[i]) ? 1 : 0;
    else out[i] = scalar::convert<To, From>(a[i]);
  }
}

template <class T>
cudaError_t launch_unary(cudaStream_t s, UnaryOp f, const void* a, void* out, int64_t n) {
  const T* x = static_cast<const T*>(a);
  T* y = static_cast<T*>(out);
  const unsigned g = blocks_for(n);
  switch (f) {
#define CAPSTEP_X(name, ...) \
  case UnaryOp::name: k_unary<T, UnaryOp::name><<<g, kThreads, 0, s>>>(x, y, n); break;
    CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_binary(cudaStream_t s, BinaryOp f, const void* a, const void* b, void* out, int64_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  const unsigned g = blocks_for(n);
  switch (f) {
#define CAPSTEP_X(name, ...) \
  case BinaryOp::name: k_binary<T, BinaryOp::name><<<g, kThreads, 0, s>>>(x, y, z, n); break;
    CAPSTEP_BINARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
  }
  return cudaGetLastError();
}

template <class From>
cudaError_t launch_convert_from(cudaStream_t s, DType to, const void* a, void* out, int64_t n) {
  const From* x = static_cast<const From*>(a);
  const unsigned g = blocks_for(n);
  switch (to) {
    case DType::f32: k_convert<float, From><<<g, kThreads, 0, s>>>(x, static_cast<float*>(out), n); break;
    case DType::f64: k_convert<double, From><<<g, kThreads, 0, s>>>(x, static_cast<double*>(out), n); break;
    case DType::i32: k_convert<int32_t, From><<<g, kThreads, 0, s>>>(x, static_cast<int32_t*>(out), n); break;
    case DType::i1: k_convert<uint8_t, From><<<g, kThreads, 0, s>>>(x, static_cast<uint8_t*>(out), n); break;
    case DType::bf16: k_convert<uint16_t, From><<<g, kThreads, 0, s>>>(x, static_cast<uint16_t*>(out), n); break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, k_unary<float, UnaryOp::negate>);
}

cudaError_t unary(cudaStream_t s, UnaryOp f, DType t, const void* a, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  switch (t) {
    case DType::f32: return launch_unary<float>(s, f, a, out, n);
    case DType::f64: return launch_unary<double>(s, f, a, out, n);
    case DType::i32:  // only negate is defined on integers (the verifier refuses the rest)
      if (f != UnaryOp::negate) return cudaErrorInvalidValue;
      k_unary<int32_t, UnaryOp::negate><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const int32_t*>(a),
                                                               static_cast<int32_t*>(out), n);
      return cudaGetLastError();
    case DType::bf16: return launch_unary<uint16_t>(s, f, a, out, n);
    case DType::i1: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t binary(cudaStream_t s, BinaryOp f, DType t, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  switch (t) {
    case DType::f32: return launch_binary<float>(s, f, a, b, out, n);
    case DType::f64: return launch_binary<double>(s, f, a, b, out, n);
    case DType::i32: return launch_binary<int32_t>(s, f, a, b, out, n);
    case DType::bf16: return launch_binary<uint16_t>(s, f, a, b, out, n);
    case DType::i1: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t compare(cudaStream_t s, int cmp, DType t, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  uint8_t* o = static_cast<uint8_t*>(out);
  const unsigned g = blocks_for(n);
  switch (t) {
    case DType::f32:
      k_compare<float><<<g, kThreads, 0, s>>>(cmp, static_cast<const float*>(a), static_cast<const float*>(b), o, n);
      break;
    case DType::f64:
      k_compare<double><<<g, kThreads, 0, s>>>(cmp, static_cast<const double*>(a), static_cast<const double*>(b), o,
                                                n);
      break;
    case DType::i32:
      k_compare<int32_t><<<g, kThreads, 0, s>>>(cmp, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b),
                                                 o, n);
      break;
    case DType::i1:
      k_compare<uint8_t><<<g, kThreads, 0, s>>>(cmp, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                                                 o, n);
      break;
    case DType::bf16:
      k_compare<uint16_t><<<g, kThreads, 0, s>>>(cmp, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                                                  o, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t select(cudaStream_t s, size_t elem_bytes, const void* pred, const void* a, const void* b, void* out,
                   int64_t n) {
  if (n == 0) return cudaSuccess;
  const uint8_t* p = static_cast<const uint8_t*>(pred);
  const unsigned g = blocks_for(n);
  switch (elem_bytes) {
    case 1:
      k_select<uint8_t><<<g, kThreads, 0, s>>>(p, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                                                static_cast<uint8_t*>(out), n);
      break;
    case 2:
      k_select<uint16_t><<<g, kThreads, 0, s>>>(p, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                                                 static_cast<uint16_t*>(out), n);
      break;
    case 4:
      k_select<uint32_t><<<g, kThreads, 0, s>>>(p, static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b),
                                                 static_cast<uint32_t*>(out), n);
      break;
    case 8:
      k_select<uint64_t><<<g, kThreads, 0, s>>>(p, static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b),
                                                 static_cast<uint64_t*>(out), n);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t convert(cudaStream_t s, DType from, DType to, const void* a, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  switch (from) {
    case DType::f32: return launch_convert_from<float>(s, to, a, out, n);
    case DType::f64: return launch_convert_from<double>(s, to, a, out, n);
    case DType::i32: return launch_convert_from<int32_t>(s, to, a, out, n);
    case DType::i1: return launch_convert_from<uint8_t>(s, to, a, out, n);
    case DType::bf16: return launch_convert_from<uint16_t>(s, to, a, out, n);
  }
  return cudaErrorInvalidValue;
}

}  // namespace capstep::cuda::k
