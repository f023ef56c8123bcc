// Elementwise kernels: unary, binary, compare, select, convert. The scalar
// formula of each op is the one in src/ir/scalar_math.h, shared with the host
// interpreter. Grid-stride loops; element k is read before element k is
// written by the same thread, so any of these may run in place (the device
// plan relies on it for donated buffers).
#include <cstdint>
#include <type_traits>

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

template <class T, int F>
__global__ void k_unary(const T* a, T* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) {
    const T x = a[i];
    T y;
    if constexpr (F == static_cast<int>(Unary::negate)) y = scalar::negate<T>(x);
    else if constexpr (F == static_cast<int>(Unary::exponential)) y = scalar::exponential<T>(x);
    else if constexpr (F == static_cast<int>(Unary::log)) y = scalar::log<T>(x);
    else if constexpr (F == static_cast<int>(Unary::tanh)) y = scalar::tanh<T>(x);
    else if constexpr (F == static_cast<int>(Unary::rsqrt)) y = scalar::rsqrt<T>(x);
    else if constexpr (F == static_cast<int>(Unary::sqrt)) y = scalar::sqrt<T>(x);
    else static_assert(F != F, "a Unary without a kernel");
    out[i] = y;
  }
}

template <class T, int F>
__global__ void k_binary(const T* a, const T* b, T* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) {
    const T x = a[i], y = b[i];
    T z;
    if constexpr (F == static_cast<int>(Binary::add)) z = scalar::add<T>(x, y);
    else if constexpr (F == static_cast<int>(Binary::subtract)) z = scalar::subtract<T>(x, y);
    else if constexpr (F == static_cast<int>(Binary::multiply)) z = scalar::multiply<T>(x, y);
    else if constexpr (F == static_cast<int>(Binary::divide)) z = scalar::divide<T>(x, y);
    else if constexpr (F == static_cast<int>(Binary::maximum)) z = scalar::maximum<T>(x, y);
    else static_assert(F != F, "a Binary without a kernel");
    out[i] = z;
  }
}

template <class T>
__global__ void k_compare(int cmp, const T* a, const T* b, uint8_t* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) out[i] = scalar::compare<T>(cmp, a[i], b[i]) ? 1 : 0;
}

template <class T>
__global__ void k_select(const uint8_t* p, const T* a, const T* b, T* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) out[i] = p[i] ? a[i] : b[i];
}

// i1 is one byte holding 0 or 1: read as bool, written as 0/1.
template <class To, class From>
__global__ void k_convert(const From* a, To* out, int64_t n) {
  CAPSTEP_GRID_LOOP(i, n) {
    if constexpr (std::is_same_v<From, uint8_t> && std::is_same_v<To, uint8_t>) out[i] = a[i] ? 1 : 0;
    else if constexpr (std::is_same_v<From, uint8_t>) out[i] = static_cast<To>(a[i] ? 1 : 0);
    else if constexpr (std::is_same_v<To, uint8_t>) out[i] = scalar::convert<bool, From>(a[i]) ? 1 : 0;
    else out[i] = scalar::convert<To, From>(a[i]);
  }
}

template <class T>
cudaError_t launch_unary(cudaStream_t s, Unary f, const void* a, void* out, int64_t n) {
  const T* x = static_cast<const T*>(a);
  T* y = static_cast<T*>(out);
  const unsigned g = blocks_for(n);
  switch (f) {
    case Unary::negate: k_unary<T, 0><<<g, kThreads, 0, s>>>(x, y, n); break;
    case Unary::exponential: k_unary<T, 1><<<g, kThreads, 0, s>>>(x, y, n); break;
    case Unary::log: k_unary<T, 2><<<g, kThreads, 0, s>>>(x, y, n); break;
    case Unary::tanh: k_unary<T, 3><<<g, kThreads, 0, s>>>(x, y, n); break;
    case Unary::rsqrt: k_unary<T, 4><<<g, kThreads, 0, s>>>(x, y, n); break;
    case Unary::sqrt: k_unary<T, 5><<<g, kThreads, 0, s>>>(x, y, n); break;
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_binary(cudaStream_t s, Binary f, const void* a, const void* b, void* out, int64_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  const unsigned g = blocks_for(n);
  switch (f) {
    case Binary::add: k_binary<T, 0><<<g, kThreads, 0, s>>>(x, y, z, n); break;
    case Binary::subtract: k_binary<T, 1><<<g, kThreads, 0, s>>>(x, y, z, n); break;
    case Binary::multiply: k_binary<T, 2><<<g, kThreads, 0, s>>>(x, y, z, n); break;
    case Binary::divide: k_binary<T, 3><<<g, kThreads, 0, s>>>(x, y, z, n); break;
    case Binary::maximum: k_binary<T, 4><<<g, kThreads, 0, s>>>(x, y, z, n); break;
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
    case DType::bf16: return cudaErrorInvalidValue;  // no bf16 kernels yet (cuda::check_supported)
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, k_unary<float, 0>);
}

cudaError_t unary(cudaStream_t s, Unary f, DType t, const void* a, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  switch (t) {
    case DType::f32: return launch_unary<float>(s, f, a, out, n);
    case DType::f64: return launch_unary<double>(s, f, a, out, n);
    case DType::i32:  // only negate is defined on integers (the verifier refuses the rest)
      if (f != Unary::negate) return cudaErrorInvalidValue;
      k_unary<int32_t, 0><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const int32_t*>(a),
                                                               static_cast<int32_t*>(out), n);
      return cudaGetLastError();
    case DType::i1: case DType::bf16: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t binary(cudaStream_t s, Binary f, DType t, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  switch (t) {
    case DType::f32: return launch_binary<float>(s, f, a, b, out, n);
    case DType::f64: return launch_binary<double>(s, f, a, b, out, n);
    case DType::i32: return launch_binary<int32_t>(s, f, a, b, out, n);
    case DType::i1: case DType::bf16: return cudaErrorInvalidValue;
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
    case DType::bf16: return cudaErrorInvalidValue;
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
    case DType::bf16: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace capstep::cuda::k
