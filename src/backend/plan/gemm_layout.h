// dot_general as a batch of row-major matrix products, the shape every GEMM
// library takes:
//   C[b] (M x N, row-major) = op(A[b]) (M x K) * op(B[b]) (K x N)
// with B = product of the batch dims, M = lhs's free dims, N = rhs's free
// dims, K = the contracting dims (free dims in axis order, dot_free_axes).
//
// DotGemm (dot_gemm) is the one description of how each operand reaches the
// GEMM, and every backend reads it: the host's plan_dot (host/kernels_dot.cpp)
// takes it whole and adds its own choices (panels, parts, libxsmm kernels,
// the result's layout); plan_gemm below turns it into the CUDA executor's
// strided-batched call. Pure C++: tests check both on the host.
//
// An operand is read in place when its free axes and its contracting axes
// each form one strided run (AxisRun: size-1 axes aside), one of them of
// stride 1 and the other at a stride of at least the first one's length:
// as stored (A's rows its free axes, B's rows its contracting axes) or
// transposed (stored [K,M] / [N,K]), with the outer run's stride as the
// leading dimension. Its batch axes may sit anywhere, each batch's matrix at
// its own offset. Any other layout is packed: copied in the order (batch,
// rows, columns), [B,M,K] for A and [B,K,N] for B, and read as stored.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "capstep/ir.h"

namespace capstep::plan {

// A list of axes seen as one: its total size and its innermost stride, when
// their strides chain (stride[a] == stride[next] * size[next]). Size-1 axes
// never matter; `any` says every axis had size 1, so the stride is free.
struct AxisRun {
  int64_t size = 1;
  int64_t stride = 1;
  bool any = true;
  bool chained = true;
};
AxisRun axis_run(const Shape& shape, const std::vector<int64_t>& strides, const std::vector<int64_t>& axes);

// Offsets of every batch element (row-major over the batch axes).
std::vector<int64_t> batch_offsets(const Shape& shape, const std::vector<int64_t>& strides,
                                   const std::vector<int64_t>& batch);

// Which operand of the GEMM: lhs is A (M x K), rhs is B (K x N).
enum class DotSide { lhs, rhs };

enum class GemmRead {
  as_stored,   // in place: A as [M,K] rows, B as [K,N] rows
  transposed,  // in place, stored [K,M] (A) or [N,K] (B): the GEMM's transpose flag
  packed,      // copied first, in pack_order, then read as stored
};

struct DotGemmOperand {
  GemmRead read = GemmRead::packed;
  int64_t ld = 1;                        // leading dimension: elements from one stored row to the next
  std::vector<int64_t> batch_offsets;    // element offset of each batch's matrix (in the packed copy when packed)
  // Set when batch_offsets[i] == i * batch_stride for every i (always when
  // packed or the batch has at most one matrix; then rows * cols).
  std::optional<int64_t> batch_stride;
  // The operand's axes in the packed copy's order: batch, rows, columns.
  // Set whatever `read` is, for a backend that packs for its own reasons.
  std::vector<int64_t> pack_order;
};

struct DotGemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  DotGemmOperand a, b;  // lhs, rhs
  // The operand of `side` packed whatever its layout (a backend's own reason:
  // the host widens bf16 operands while packing them, cuBLAS takes one batch stride).
  void pack(DotSide side);
};

// The description for row-major operands (every dot_general's operands are
// row-major buffers; a transpose folded into the product changes the
// dimension numbers, not the strides).
DotGemm dot_gemm(const Type& lhs, const Type& rhs, const Attrs& at);

// Whether dot_gemm reads an operand of type t (row-major) with these batch and
// contracting axes in place, whichever side of the product it is on (the rule
// is the same for both).
bool dot_gemm_reads_in_place(const Type& t, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract);

// The CUDA executor's form of DotGemm: one cuBLAS strided-batched GEMM, each
// packed operand transposed into scratch first.
struct GemmOperand {
  bool pack = false;              // transpose into scratch first (perm), then use as not transposed
  std::vector<int64_t> perm;      // the transpose when packing: packed[i] = operand axis perm[i]
  Shape packed_shape;             // operand shape after the transpose
  bool trans = false;             // stored as [B,K,M] (lhs) or [B,N,K] (rhs) instead
  int64_t ld = 0;                 // row length of each stored row-major matrix
  int64_t batch_stride = 0;       // elements from one batch's matrix to the next
  size_t scratch_bytes = 0;       // bytes of scratch when packing
};

struct GemmLayout {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  GemmOperand a, b;               // lhs, rhs
  size_t scratch_bytes() const { return a.scratch_bytes + b.scratch_bytes; }  // a's, then b's
};

GemmLayout plan_gemm(const Type& lhs, const Type& rhs, const Attrs& at);

// True when transposing `shape` by `perm` moves no byte (only size-1 axes move).
bool transpose_moves_nothing(const Shape& shape, const std::vector<int64_t>& perm);

}  // namespace capstep::plan
