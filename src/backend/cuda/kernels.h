// Launchers of the CUDA kernels, one family per file (kernels_*.cu), callable
// from plain C++. Each returns the launch's cudaError_t (from
// cudaGetLastError); the caller turns it into a capstep::Error. Dispatch on
// dtype and op happens here, in the launchers, so that a kernel template is
// instantiated only for the combinations the verifier admits.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/plan/walk.h"
#include "capstep/ir.h"

namespace capstep::cuda::k {

// The strided walks (plan/walk.h): built on the host, walked by the kernels
// with the same plan::walk_offset that the host tests check.
using plan::Walk;

// Where a device kernel reports a bad index (gather/scatter); zeroed before
// each step, read after it. The first error wins.
struct DeviceError {
  int flag;           // 0: none
  int eqn;            // equation index
  long long position; // flat position in the index array
  long long value;    // the index found there
};

// Whether this build carries a kernel image the current device can run.
cudaError_t probe_kernel_image();

// A unary or binary primitive of the table (CAPSTEP_UNARY_OPS,
// CAPSTEP_BINARY_OPS), named by the IR's own sub-enums.
cudaError_t unary(cudaStream_t s, UnaryOp f, DType t, const void* a, void* out, int64_t n);
cudaError_t binary(cudaStream_t s, BinaryOp f, DType t, const void* a, const void* b, void* out, int64_t n);
// cmp in capstep::Cmp order (scalar::compare's direction)
cudaError_t compare(cudaStream_t s, int cmp, DType t, const void* a, const void* b, void* out, int64_t n);
cudaError_t select(cudaStream_t s, size_t elem_bytes, const void* pred, const void* a, const void* b, void* out,
                   int64_t n);
cudaError_t convert(cudaStream_t s, DType from, DType to, const void* a, void* out, int64_t n);

// out[i] = src[walk offset of i]; broadcast_in_dim, transpose, dot packing.
cudaError_t strided_copy(cudaStream_t s, size_t elem_bytes, const void* src, void* out, const Walk& w, int64_t n);

// out[walk offset of i] = src[i]: pad and concatenate put an operand in place.
cudaError_t strided_store(cudaStream_t s, size_t elem_bytes, const void* src, void* out, const Walk& w, int64_t n);

// reduce_sum / reduce_max: `kept` walks the outputs over the input, `reduced`
// walks the reduced axes; one block per output.
cudaError_t reduce(cudaStream_t s, bool is_max, DType t, const void* in, void* out, const Walk& kept,
                   int64_t n_out, const Walk& reduced, int64_t n_red);

// out[s, j] = table[idx[s], j]; an index outside [0, rows) writes 0 and sets err.
cudaError_t gather_rows(cudaStream_t s, size_t elem_bytes, const void* table, const int32_t* idx, void* out,
                        int64_t rows, int64_t n_idx, int64_t row_elems, DeviceError* err, int eqn);
// out[idx[s], j] += upd[s, j] (out already holds the operand).
cudaError_t scatter_add_rows(cudaStream_t s, DType t, void* out, const int32_t* idx, const void* upd, int64_t rows,
                             int64_t n_idx, int64_t row_elems, DeviceError* err, int eqn);

}  // namespace capstep::cuda::k
