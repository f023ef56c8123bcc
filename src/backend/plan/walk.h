// Strided walks: the one strided-layout type of both backends. A walk is the
// loop nest that broadcast_in_dim, transpose, slice, pad, concatenate,
// reductions and dot_general's operand packing share: for each axis of a
// row-major iteration space, its size and the stride (in elements) of a second
// array along it. The host interpreter runs its kernels' loops over walks
// (host/strided.h); the CUDA kernels map each element to its element of the
// other array (a copy's or reduction's source, a pad's or concatenate's
// destination) with walk_offset, built on the host when a Program is compiled, so
// that the index math the GPU uses is checked on machines without one; the
// generated kernels unroll the same offsets into their text (kernel_source.cpp).
//
// Every builder collapses: it drops size-1 axes and merges axis a into a+1
// when stride[a] == stride[a+1] * size[a+1]. That leaves walk_offset's result
// for every element unchanged (a merged pair of axes indexes the same offsets
// as one axis of their product), makes the host's innermost loop as long as
// possible (a plain copy is rank 1 with stride 1) and saves the device
// divisions.
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

// Axes that remain after collapsing: 16, as many as the host's loop counters
// on the stack hold. The CUDA kernels take walks by value as kernel
// parameters (two of 264 bytes for a reduce, far below the 4 KB parameter
// limit); the generated kernels only print a walk's constants, never the
// struct.
constexpr int kMaxRank = 16;

// Element i (row-major over size) has offset sum(c[d] * stride[d]) where c are
// its coordinates; stride 0 repeats (broadcast).
struct Walk {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  CAPSTEP_WALK_HD int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= size[i];
    return n;
  }
  // Every element at its own row-major offset: a copy that moves no byte.
  CAPSTEP_WALK_HD bool is_identity() const { return rank == 0 || (rank == 1 && stride[0] == 1); }
};

CAPSTEP_WALK_HD int64_t walk_offset(const Walk& w, int64_t i) {
  int64_t off = 0;
  for (int d = w.rank - 1; d >= 0; --d) {
    const int64_t c = i % w.size[d];
    i /= w.size[d];
    off += c * w.stride[d];
  }
  return off;
}

// The C++ expression of walk_offset(w, idx) with the walk's constants, for the
// text of generated kernels ("0" when no axis moves). idx must be a name or a
// parenthesized expression; the outermost axis takes no modulo, so idx must
// be below w.numel().
std::string offset_code(const Walk& w, const std::string& idx);

// Row-major strides (in elements) of a shape.
std::vector<int64_t> row_major_strides(const Shape& s);

// The walk with these per-axis sizes and strides, collapsed (above); an empty
// one (some size 0) is one axis of size 0. Throws Error when more than
// kMaxRank axes remain (`what` names the equation).
Walk make_walk(const std::vector<int64_t>& size, const std::vector<int64_t>& stride, const std::string& what);

// broadcast_in_dim(in) -> out with operand axis k feeding output axis dims[k]:
// the operand's offset of each output element.
Walk broadcast_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& dims, const std::string& what);
// transpose: output axis i is input axis perm[i]
Walk transpose_walk(const Shape& in, const std::vector<int64_t>& perm, const std::string& what);
// reduce over `axes`: `kept` walks the outputs (base offset of each), `reduced`
// the reduced elements from that base (the CUDA kernel: one block per output).
struct ReduceWalks {
  Walk kept, reduced;
  int64_t n_out = 1, n_red = 1;
};
ReduceWalks reduce_walks(const Shape& in, const std::vector<int64_t>& axes, const std::string& what);
// reduce over `axes` the other way round: the walk over the input, row-major,
// with the offset of the output each element goes into (the host kernel: one
// pass over the input). It is the output broadcast back to the input's shape.
Walk reduce_output_walk(const Shape& in, const std::vector<int64_t>& axes, const std::string& what);
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
