// Kernels that move or combine elements by position: broadcast_in_dim,
// transpose and slice (one strided walk), pad and concatenate (copies into
// the result's positions), reduce_sum/reduce_max, gather_rows and
// scatter_add_rows.
// See kernels_elementwise.cpp: lets the NaN-propagating max vectorise.
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <cstring>
#include <limits>

#include <type_traits>

#include "backend/host/reduce_combine.h"
#include "backend/host/step.h"
#include "ir/bf16.h"
#include "ir/scalar_math.h"

namespace capstep::host {
namespace {

template <class E>
void k_strided(const Step& s, void* const* p) {
  if (s.n == 0) return;
  strided_copy(s.view, static_cast<const E*>(p[s.in[0]]), static_cast<E*>(p[s.out]));
}

// slice: the walk from the first element read.
template <class E>
void k_slice(const Step& s, void* const* p) {
  if (s.n == 0) return;
  strided_copy(s.view, static_cast<const E*>(p[s.in[0]]) + s.offset, static_cast<E*>(p[s.out]));
}

// pad: zeros (all-zero bits are 0 in every dtype), then the operand's
// elements in order, each to its place in the result: s.view walks the
// operand's axes with the result's strides from element s.offset.
template <class E>
void k_pad(const Step& s, void* const* p) {
  E* __restrict dst = static_cast<E*>(p[s.out]);
  const E* __restrict src = static_cast<const E*>(p[s.in[0]]);
  if (s.n == 0) return;
  std::memset(dst, 0, static_cast<size_t>(s.n) * sizeof(E));
  if (s.n_in == 0) return;
  dst += s.offset;
  const Walk& v = s.view;
  if (v.rank == 0) {  // one element
    dst[0] = src[0];
    return;
  }
  const int r = v.rank;
  const int64_t inner = v.size[r - 1], os = v.stride[r - 1], outer = s.n_in / inner;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o, src += inner) {
    if (os == 1) std::memcpy(dst + off, src, static_cast<size_t>(inner) * sizeof(E));
    else for (int64_t j = 0; j < inner; ++j) dst[off + j * os] = src[j];
    next_outer(v, idx, off);
  }
}

// concatenate: for each index of the axes before the concatenated one
// (s.rows of them), each operand's run of s.widths[i] elements in turn.
void k_concatenate(const Step& s, void* const* p) {
  char* dst = static_cast<char*>(p[s.out]);
  const size_t eb = s.elem_bytes;
  for (int64_t o = 0; o < s.rows; ++o)
    for (size_t i = 0; i < s.operands.size(); ++i) {
      const size_t w = static_cast<size_t>(s.widths[i]) * eb;
      if (w == 0) continue;
      std::memcpy(dst, static_cast<const char*>(p[s.operands[i]]) + static_cast<size_t>(o) * w, w);
      dst += w;
    }
}

// Walks the input row-major; view.stride[a] is the output stride of input axis
// a (0 for reduced axes). The innermost axis is either reduced (reduce_run
// below) or kept (a vector update of contiguous outputs).
// An element of the input as the accumulator's type (bf16 widens to f32).
template <class T, class In>
inline T load(In x) {
  if constexpr (std::is_same_v<In, uint16_t>) return bf16::to_float(x);
  else return x;
}

// acc = combine(acc, x) lane by lane on vectors (GCC's vector extension): a
// max as three selects (max_select's NaN rule), a sum as an add. (By
// reference: a vector passed by value changes the ABI between the clones.)
template <bool Max, class V>
inline void combine_lanes(V& acc, const V& x) {
  if constexpr (Max) {
    V m = acc > x ? acc : x;
    m = x != x ? x : m;
    acc = acc != acc ? acc : m;
  } else {
    acc = acc + x;
  }
}

// One reduced run of n contiguous elements: eight interleaved partial results
// (element j into partial j % 8), combined pairwise at the end, so that the
// loop vectorises instead of waiting on one accumulator's add latency per
// element; the order is fixed by n alone, so every run of a row is the same
// bits (and the fused row groups, which call this kernel, match the unfused).
template <class T, bool Max, class In>
inline T reduce_run(const In* __restrict in, int64_t n) {
  constexpr int W = 8;
  if (n < 2 * W) {
    T acc = identity<T, Max>();
    for (int64_t j = 0; j < n; ++j) acc = combine<T, Max>(acc, load<T>(in[j]));
    return acc;
  }
  T part[W];
  int64_t j = W;
  if constexpr (std::is_same_v<T, In> && std::is_floating_point_v<T>) {
    // The partials as one vector (GCC's vector extension, any target): the
    // per-lane loop below does not vectorise a max's selects. Lane l is
    // part[l], combined the same way (max_select or +), so the same bits.
    using V [[gnu::vector_size(W * sizeof(T))]] = T;
    V acc, x;
    std::memcpy(&acc, in, sizeof acc);
    for (; j + W <= n; j += W) {
      std::memcpy(&x, in + j, sizeof x);
      combine_lanes<Max>(acc, x);
    }
    if (j == n) {
      // The pairwise combination below, w = 4, 2, 1, on halves of the vector
      // (the same lanes combined in the same order) instead of seven scalar
      // steps: a row of 16 (the attention's softmax) is mostly this part.
      using V4 [[gnu::vector_size(4 * sizeof(T))]] = T;
      using V2 [[gnu::vector_size(2 * sizeof(T))]] = T;
      V4 a4 = {acc[0], acc[1], acc[2], acc[3]};
      combine_lanes<Max>(a4, V4{acc[4], acc[5], acc[6], acc[7]});
      V2 a2 = {a4[0], a4[1]};
      combine_lanes<Max>(a2, V2{a4[2], a4[3]});
      return combine<T, Max>(a2[0], a2[1]);
    }
    for (int l = 0; l < W; ++l) part[l] = acc[l];
  } else {
    for (int l = 0; l < W; ++l) part[l] = load<T>(in[l]);
    for (; j + W <= n; j += W)
      for (int l = 0; l < W; ++l) part[l] = combine<T, Max>(part[l], load<T>(in[j + l]));
  }
  for (int l = 0; j < n; ++j, ++l) part[l] = combine<T, Max>(part[l], load<T>(in[j]));
  for (int w = W / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) part[l] = combine<T, Max>(part[l], part[l + w]);
  return part[0];
}

template <class T, bool Max, class In>
CAPSTEP_HOST_CLONES void reduce_into(const Step& s, const In* __restrict in, T* __restrict out) {
  for (int64_t i = 0; i < s.n; ++i) out[i] = identity<T, Max>();
  if (s.n_in == 0) return;
  const Walk& v = s.view;
  if (v.rank == 0) {  // every axis had size 1
    out[0] = combine<T, Max>(out[0], load<T>(in[0]));
    return;
  }
  const int r = v.rank;
  const int64_t inner = v.size[r - 1], os = v.stride[r - 1];
  const int64_t outer = s.n_in / inner;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    if (os == 0) {
      out[off] = combine<T, Max>(out[off], reduce_run<T, Max>(in, inner));
    } else if (os == 1) {
      T* __restrict dst = out + off;
      for (int64_t j = 0; j < inner; ++j) dst[j] = combine<T, Max>(dst[j], load<T>(in[j]));
    } else {
      for (int64_t j = 0; j < inner; ++j) out[off + j * os] = combine<T, Max>(out[off + j * os], load<T>(in[j]));
    }
    in += inner;
    next_outer(v, idx, off);
  }
}

template <class T, bool Max>
void k_reduce(const Step& s, void* const* p) {
  reduce_into<T, Max>(s, static_cast<const T*>(p[s.in[0]]), static_cast<T*>(p[s.out]));
}

// bf16: accumulated in f32 (the step's scratch buffer), rounded once at the end.
template <bool Max>
void k_reduce_bf16(const Step& s, void* const* p) {
  float* acc = static_cast<float*>(p[s.scratch[0]]);
  reduce_into<float, Max>(s, static_cast<const uint16_t*>(p[s.in[0]]), acc);
  uint16_t* out = static_cast<uint16_t*>(p[s.out]);
  for (int64_t i = 0; i < s.n; ++i) out[i] = bf16::from_float(acc[i]);
}

void k_gather_rows(const Step& s, void* const* p) {
  const char* table = static_cast<const char*>(p[s.in[0]]);
  const int32_t* idx = static_cast<const int32_t*>(p[s.in[1]]);
  char* out = static_cast<char*>(p[s.out]);
  const size_t row_bytes = static_cast<size_t>(s.row_elems) * s.elem_bytes;
  for (int64_t i = 0; i < s.n_idx; ++i) {
    const int64_t k = idx[i];
    if (k < 0 || k >= s.rows) throw_index_error(s, i, k);
    if (row_bytes) std::memcpy(out + static_cast<size_t>(i) * row_bytes, table + static_cast<size_t>(k) * row_bytes, row_bytes);
  }
}

template <class T>
void k_scatter_add_rows(const Step& s, void* const* p) {
  const T* operand = static_cast<const T*>(p[s.in[0]]);
  const int32_t* idx = static_cast<const int32_t*>(p[s.in[1]]);
  const T* upd = static_cast<const T*>(p[s.in[2]]);
  T* __restrict out = static_cast<T*>(p[s.out]);
  if (s.n && out != operand) std::memcpy(out, operand, static_cast<size_t>(s.n) * sizeof(T));
  const int64_t R = s.row_elems;
  for (int64_t i = 0; i < s.n_idx; ++i) {
    const int64_t k = idx[i];
    if (k < 0 || k >= s.rows) throw_index_error(s, i, k);
    T* __restrict dst = out + k * R;
    const T* __restrict src = upd + i * R;
    for (int64_t j = 0; j < R; ++j) dst[j] = scalar::add<T>(dst[j], src[j]);
  }
}

// Integer adds wrap rather than overflow (undefined in C++).
template <>
void k_scatter_add_rows<int32_t>(const Step& s, void* const* p) {
  const uint32_t* operand = static_cast<const uint32_t*>(p[s.in[0]]);
  const int32_t* idx = static_cast<const int32_t*>(p[s.in[1]]);
  const uint32_t* upd = static_cast<const uint32_t*>(p[s.in[2]]);
  uint32_t* __restrict out = static_cast<uint32_t*>(p[s.out]);
  if (s.n && out != operand) std::memcpy(out, operand, static_cast<size_t>(s.n) * sizeof(uint32_t));
  const int64_t R = s.row_elems;
  for (int64_t i = 0; i < s.n_idx; ++i) {
    const int64_t k = idx[i];
    if (k < 0 || k >= s.rows) throw_index_error(s, i, k);
    for (int64_t j = 0; j < R; ++j) out[k * R + j] += upd[i * R + j];
  }
}

// bf16: each add in f32, rounded to bf16 on every store.
void k_scatter_add_rows_bf16(const Step& s, void* const* p) {
  const uint16_t* operand = static_cast<const uint16_t*>(p[s.in[0]]);
  const int32_t* idx = static_cast<const int32_t*>(p[s.in[1]]);
  const uint16_t* upd = static_cast<const uint16_t*>(p[s.in[2]]);
  uint16_t* __restrict out = static_cast<uint16_t*>(p[s.out]);
  if (s.n && out != operand) std::memcpy(out, operand, static_cast<size_t>(s.n) * sizeof(uint16_t));
  const int64_t R = s.row_elems;
  for (int64_t i = 0; i < s.n_idx; ++i) {
    const int64_t k = idx[i];
    if (k < 0 || k >= s.rows) throw_index_error(s, i, k);
    for (int64_t j = 0; j < R; ++j)
      out[k * R + j] = bf16::from_float(bf16::to_float(out[k * R + j]) + bf16::to_float(upd[i * R + j]));
  }
}

[[noreturn]] void no_kernel(const char* what, DType t) {
  throw Error(std::string("host interpreter: no kernel for ") + what + " on " + dtype_name(t));
}

}  // namespace

void throw_index_error(const Step& s, int64_t position, int64_t value) {
  throw Error(index_error_text(*s.program, s.eqn, position, value));
}

Kernel strided_copy_kernel(DType t) {
  switch (dtype_size(t)) {
    case 1: return &k_strided<uint8_t>;
    case 2: return &k_strided<uint16_t>;
    case 4: return &k_strided<uint32_t>;
    case 8: return &k_strided<uint64_t>;
  }
  no_kernel("broadcast/transpose", t);
}

Kernel slice_kernel(DType t) {
  switch (dtype_size(t)) {
    case 1: return &k_slice<uint8_t>;
    case 2: return &k_slice<uint16_t>;
    case 4: return &k_slice<uint32_t>;
    case 8: return &k_slice<uint64_t>;
  }
  no_kernel("slice", t);
}

Kernel pad_kernel(DType t) {
  switch (dtype_size(t)) {
    case 1: return &k_pad<uint8_t>;
    case 2: return &k_pad<uint16_t>;
    case 4: return &k_pad<uint32_t>;
    case 8: return &k_pad<uint64_t>;
  }
  no_kernel("pad", t);
}

Kernel concatenate_kernel() { return &k_concatenate; }

Kernel reduce_kernel(Op op, DType t) {
  const bool max = op == Op::reduce_max;
  switch (t) {
    case DType::f32: return max ? &k_reduce<float, true> : &k_reduce<float, false>;
    case DType::f64: return max ? &k_reduce<double, true> : &k_reduce<double, false>;
    case DType::i32: return max ? &k_reduce<int32_t, true> : &k_reduce<int32_t, false>;
    case DType::bf16: return max ? &k_reduce_bf16<true> : &k_reduce_bf16<false>;  // needs s.scratch[0]
    case DType::i1: break;
  }
  no_kernel(op_name(op), t);
}

Kernel gather_rows_kernel(DType) { return &k_gather_rows; }

Kernel scatter_add_rows_kernel(DType t) {
  switch (t) {
    case DType::f32: return &k_scatter_add_rows<float>;
    case DType::f64: return &k_scatter_add_rows<double>;
    case DType::i32: return &k_scatter_add_rows<int32_t>;
    case DType::bf16: return &k_scatter_add_rows_bf16;
    case DType::i1: break;
  }
  no_kernel("scatter_add_rows", t);
}

}  // namespace capstep::host
