// Strided walks: how the CUDA kernels for broadcast_in_dim, transpose,
// reductions and dot_general packing find the source element of each output
// element. Built on the host when a Program is compiled; walk_offset is the one
// loop both the device kernels and the host tests run, so the index math that
// the GPU uses is checked on machines without one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/ir.h"

#if defined(__CUDACC__)
#define CAPSTEP_WALK_HD __host__ __device__ __forceinline__
#else
#define CAPSTEP_WALK_HD inline
#endif

namespace capstep::plan {

constexpr int kMaxRank = 8;

// Element i (row-major over dims) has source offset sum(c[d] * stride[d]) where
// c are its coordinates; stride 0 repeats (broadcast).
struct Walk {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

CAPSTEP_WALK_HD int64_t walk_offset(const Walk& w, int64_t i) {
  int64_t off = 0;
  for (int d = w.rank - 1; d >= 0; --d) {
    const int64_t c = i % w.dims[d];
    i /= w.dims[d];
    off += c * w.stride[d];
  }
  return off;
}

// broadcast_in_dim(in) -> out with operand axis k feeding output axis dims[k]
Walk broadcast_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& dims, const std::string& what);
// transpose: output axis i is input axis perm[i]
Walk transpose_walk(const Shape& in, const std::vector<int64_t>& perm, const std::string& what);
// reduce over `axes`: `kept` walks the outputs (base offset of each), `reduced`
// the reduced elements from that base.
struct ReduceWalks {
  Walk kept, reduced;
  int64_t n_out = 1, n_red = 1;
};
ReduceWalks reduce_walks(const Shape& in, const std::vector<int64_t>& axes, const std::string& what);
// A walk that starts at an element other than the first.
struct OffsetWalk {
  Walk walk;
  int64_t offset = 0;
};
// slice of `in` to `out`: the walk over the result (the operand's strides
// times the slice's) and the operand's element it starts at (the starts').
OffsetWalk slice_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& strides, const std::string& what);
// An array of shape `part` written into one of shape `whole` from position
// `at` (pad: the lows; concatenate: the operand's start along the axis): the
// walk over the part with the whole's strides, and the whole's element the
// part's first lands on. out[offset + walk_offset(i)] = part[i].
OffsetWalk embed_walk(const Shape& part, const Shape& whole, const std::vector<int64_t>& at, const std::string& what);

}  // namespace capstep::plan
