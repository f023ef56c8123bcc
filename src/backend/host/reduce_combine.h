// How the host's reductions combine elements: one definition for the unfused
// reduce kernel (kernels_layout.cpp) and the fused column groups (fused.cpp),
// so that both accumulate with the same operations in the same order.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ir/scalar_math.h"

namespace capstep::host {

// scalar::maximum's result (NaN propagates: acc's, else x's) as three
// selects, which GCC turns into compares and blends; the early returns there
// compile to two data-dependent branches per element in the reductions'
// unrolled partials (softmax rows of 16: a max took 6x a sum's time).
template <class T>
inline T max_select(T acc, T x) {
  T m = acc > x ? acc : x;
  m = x != x ? x : m;
  return acc != acc ? acc : m;
}

template <class T, bool Max>
inline T combine(T acc, T x) {
  if constexpr (Max && std::is_floating_point_v<T>) return max_select<T>(acc, x);
  else if constexpr (Max) return scalar::maximum<T>(acc, x);
  else if constexpr (std::is_same_v<T, int32_t>)  // wraps, as XLA does, instead of overflow UB
    return static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(x));
  else return scalar::add<T>(acc, x);
}

// The start of a reduction: 0 for a sum; -inf (or the lowest value) for a max.
template <class T, bool Max>
constexpr T identity() {
  if constexpr (!Max) return T(0);
  else if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

}  // namespace capstep::host
