// Layout kernels: strided copy (broadcast_in_dim, transpose, dot packing),
// reductions over any axes, gather of rows and its transpose scatter-add.
// Copies are instantiated per element width, not per dtype.
#include <cfloat>
#include <climits>
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
  if (b > 65536) b = 65536;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

using plan::walk_offset;

template <class T>
__global__ void k_strided_copy(const T* __restrict__ src, T* __restrict__ out, Walk w, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = src[walk_offset(w, i)];
}

template <class T>
__global__ void k_strided_store(const T* __restrict__ src, T* __restrict__ out, Walk w, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[walk_offset(w, i)] = src[i];
}

// The accumulator: f32 sums in double (the device then rounds once, closer to
// the exact sum than any order of f32 additions); max in the element type;
// bf16 (uint16_t) in f32, as the host interpreter, rounded once at the end.
template <class T, bool Max> struct Acc { using type = T; };
template <> struct Acc<float, false> { using type = double; };
template <bool Max> struct Acc<uint16_t, Max> { using type = float; };

template <class T> __device__ __forceinline__ T lowest() { return -static_cast<T>(INFINITY); }
template <> __device__ __forceinline__ int32_t lowest<int32_t>() { return INT_MIN; }

template <class A, class T> __device__ __forceinline__ A to_acc(T x) {
  if constexpr (std::is_same_v<T, uint16_t>) return bf16_load(x);
  else return static_cast<A>(x);
}
template <class T, class A> __device__ __forceinline__ T from_acc(A x) {
  if constexpr (std::is_same_v<T, uint16_t>) return bf16_store(x);
  else return static_cast<T>(x);
}

template <class T, bool Max>
__global__ void k_reduce(const T* __restrict__ in, T* __restrict__ out, Walk kept, int64_t n_out, Walk red,
                         int64_t n_red) {
  using A = typename Acc<T, Max>::type;
  __shared__ A part[kThreads];
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    const T* base = in + walk_offset(kept, o);
    A acc = A(0);
    if constexpr (Max) {
      if constexpr (std::is_same_v<T, uint16_t>) acc = lowest<A>();
      else acc = static_cast<A>(lowest<T>());
    }
    for (int64_t r = threadIdx.x; r < n_red; r += blockDim.x) {
      const A x = to_acc<A>(base[walk_offset(red, r)]);
      acc = Max ? scalar::maximum<A>(acc, x) : scalar::add<A>(acc, x);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (static_cast<int>(threadIdx.x) < w)
        part[threadIdx.x] = Max ? scalar::maximum<A>(part[threadIdx.x], part[threadIdx.x + w])
                                : scalar::add<A>(part[threadIdx.x], part[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o] = from_acc<T>(part[0]);
    __syncthreads();
  }
}

__device__ void report(DeviceError* err, int eqn, int64_t position, int64_t value) {
  if (atomicCAS(&err->flag, 0, 1) == 0) {
    err->eqn = eqn;
    err->position = position;
    err->value = value;
  }
}

// Element i of a gather or scatter over rows of row_elems elements: its row r
// of the table (idx[i / row_elems]) and column j; false, after reporting the
// index (once per index, from its row's element 0), when r is outside [0, rows).
__device__ bool table_row(int64_t i, const int32_t* __restrict__ idx, int64_t rows, int64_t row_elems,
                          DeviceError* err, int eqn, int64_t& r, int64_t& j) {
  const int64_t s = i / row_elems;
  j = i % row_elems;
  r = idx[s];
  if (r >= 0 && r < rows) return true;
  if (j == 0) report(err, eqn, s, r);
  return false;
}

template <class T>
__global__ void k_gather(const T* __restrict__ table, const int32_t* __restrict__ idx, T* __restrict__ out,
                         int64_t rows, int64_t n, int64_t row_elems, DeviceError* err, int eqn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t r = 0, j = 0;
    out[i] = table_row(i, idx, rows, row_elems, err, eqn, r, j) ? table[r * row_elems + j] : T(0);
  }
}

template <class T>
__global__ void k_scatter_add(T* out, const int32_t* __restrict__ idx, const T* __restrict__ upd, int64_t rows,
                              int64_t n, int64_t row_elems, DeviceError* err, int eqn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t r = 0, j = 0;
    if (table_row(i, idx, rows, row_elems, err, eqn, r, j)) atomicAdd(out + r * row_elems + j, upd[i]);
  }
}

// bf16: each add in f32 rounded to bf16, as the host's (there in index order,
// here in the atomics' order): a compare-and-swap on the aligned 32-bit word
// that holds the element.
__global__ void k_scatter_add_bf16(uint16_t* out, const int32_t* __restrict__ idx, const uint16_t* __restrict__ upd,
                                   int64_t rows, int64_t n, int64_t row_elems, DeviceError* err, int eqn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t r = 0, j = 0;
    if (!table_row(i, idx, rows, row_elems, err, eqn, r, j)) continue;
    uint16_t* p = out + r * row_elems + j;
    unsigned* word = reinterpret_cast<unsigned*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
    const unsigned shift = (reinterpret_cast<uintptr_t>(p) & 2u) ? 16u : 0u;
    const float u = bf16_load(upd[i]);
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const uint16_t cur = static_cast<uint16_t>(assumed >> shift);
      const unsigned sum = bf16_store(scalar::add<float>(bf16_load(cur), u));
      const unsigned next = (assumed & ~(0xFFFFu << shift)) | (sum << shift);
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  }
}

template <class T, bool Max>
cudaError_t launch_reduce(cudaStream_t s, const void* in, void* out, const Walk& kept, int64_t n_out, const Walk& red,
                          int64_t n_red) {
  // threads per output: enough for the reduced length, a power of two
  int threads = 32;
  while (threads < kThreads && threads < n_red) threads *= 2;
  int64_t blocks = n_out < 65536 ? n_out : 65536;
  k_reduce<T, Max><<<static_cast<unsigned>(blocks), threads, 0, s>>>(static_cast<const T*>(in), static_cast<T*>(out),
                                                                      kept, n_out, red, n_red);
  return cudaGetLastError();
}

}  // namespace

cudaError_t strided_copy(cudaStream_t s, size_t elem_bytes, const void* src, void* out, const Walk& w, int64_t n) {
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  switch (elem_bytes) {
    case 1: k_strided_copy<uint8_t><<<g, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(out), w, n); break;
    case 2: k_strided_copy<uint16_t><<<g, kThreads, 0, s>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(out), w, n); break;
    case 4: k_strided_copy<uint32_t><<<g, kThreads, 0, s>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(out), w, n); break;
    case 8: k_strided_copy<uint64_t><<<g, kThreads, 0, s>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(out), w, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t strided_store(cudaStream_t s, size_t elem_bytes, const void* src, void* out, const Walk& w, int64_t n) {
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  switch (elem_bytes) {
    case 1: k_strided_store<uint8_t><<<g, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(out), w, n); break;
    case 2: k_strided_store<uint16_t><<<g, kThreads, 0, s>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(out), w, n); break;
    case 4: k_strided_store<uint32_t><<<g, kThreads, 0, s>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(out), w, n); break;
    case 8: k_strided_store<uint64_t><<<g, kThreads, 0, s>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(out), w, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t reduce(cudaStream_t s, bool is_max, DType t, const void* in, void* out, const Walk& kept, int64_t n_out,
                   const Walk& reduced, int64_t n_red) {
  if (n_out == 0) return cudaSuccess;
  switch (t) {
    case DType::f32:
      return is_max ? launch_reduce<float, true>(s, in, out, kept, n_out, reduced, n_red)
                    : launch_reduce<float, false>(s, in, out, kept, n_out, reduced, n_red);
    case DType::f64:
      return is_max ? launch_reduce<double, true>(s, in, out, kept, n_out, reduced, n_red)
                    : launch_reduce<double, false>(s, in, out, kept, n_out, reduced, n_red);
    case DType::i32:
      return is_max ? launch_reduce<int32_t, true>(s, in, out, kept, n_out, reduced, n_red)
                    : launch_reduce<int32_t, false>(s, in, out, kept, n_out, reduced, n_red);
    case DType::bf16:
      return is_max ? launch_reduce<uint16_t, true>(s, in, out, kept, n_out, reduced, n_red)
                    : launch_reduce<uint16_t, false>(s, in, out, kept, n_out, reduced, n_red);
    case DType::i1: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t gather_rows(cudaStream_t s, size_t elem_bytes, const void* table, const int32_t* idx, void* out,
                        int64_t rows, int64_t n_idx, int64_t row_elems, DeviceError* err, int eqn) {
  const int64_t n = n_idx * row_elems;
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  switch (elem_bytes) {
    case 1: k_gather<uint8_t><<<g, kThreads, 0, s>>>(static_cast<const uint8_t*>(table), idx, static_cast<uint8_t*>(out), rows, n, row_elems, err, eqn); break;
    case 2: k_gather<uint16_t><<<g, kThreads, 0, s>>>(static_cast<const uint16_t*>(table), idx, static_cast<uint16_t*>(out), rows, n, row_elems, err, eqn); break;
    case 4: k_gather<uint32_t><<<g, kThreads, 0, s>>>(static_cast<const uint32_t*>(table), idx, static_cast<uint32_t*>(out), rows, n, row_elems, err, eqn); break;
    case 8: k_gather<uint64_t><<<g, kThreads, 0, s>>>(static_cast<const uint64_t*>(table), idx, static_cast<uint64_t*>(out), rows, n, row_elems, err, eqn); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t scatter_add_rows(cudaStream_t s, DType t, void* out, const int32_t* idx, const void* upd, int64_t rows,
                             int64_t n_idx, int64_t row_elems, DeviceError* err, int eqn) {
  const int64_t n = n_idx * row_elems;
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  switch (t) {
    case DType::f32: k_scatter_add<float><<<g, kThreads, 0, s>>>(static_cast<float*>(out), idx, static_cast<const float*>(upd), rows, n, row_elems, err, eqn); break;
    case DType::f64: k_scatter_add<double><<<g, kThreads, 0, s>>>(static_cast<double*>(out), idx, static_cast<const double*>(upd), rows, n, row_elems, err, eqn); break;
    case DType::i32: k_scatter_add<int><<<g, kThreads, 0, s>>>(static_cast<int*>(out), idx, static_cast<const int*>(upd), rows, n, row_elems, err, eqn); break;
    case DType::bf16: k_scatter_add_bf16<<<g, kThreads, 0, s>>>(static_cast<uint16_t*>(out), idx, static_cast<const uint16_t*>(upd), rows, n, row_elems, err, eqn); break;
    case DType::i1: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace capstep::cuda::k
