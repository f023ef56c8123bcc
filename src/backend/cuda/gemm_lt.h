// One dot_general GEMM planned through cuBLASLt, with the algorithm chosen once
// when the Program is compiled: preferably a split-K-free one, so the GEMM is
// one kernel (cuBLAS's default choice for small shapes adds a splitKreduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/plan/gemm_layout.h"
#include "capstep/ir.h"

namespace capstep::cuda {

// The column-major problem cuBLASLt sees for row-major C[b] = A[b] * B[b]:
// C^T (n x m) = op(B) (n x k) * op(A) (k x m), so Lt's "A" is our B.
struct LtGemmShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;  // GemmOperand::trans of lhs / rhs
  int64_t lda = 0, ldb = 0;               // GemmOperand::ld (elements)
  int64_t stride_a = 0, stride_b = 0;     // GemmOperand::batch_stride (elements); C's is m*n
  DType dtype = DType::f32;               // the operands': f32, f64, or bf16 (then an f32 result, f32 accumulation)
  bool tf32 = false;                      // f32 only: CUBLAS_COMPUTE_32F_FAST_TF32

  static LtGemmShape from(const plan::GemmLayout& g, DType dtype, bool tf32);
};

class LtGemm {  // one planned GEMM; created when the Program is compiled (not during graph capture)
 public:
  // Every pointer given to enqueue must be aligned to this many bytes (the
  // algorithm is chosen assuming it; enqueue checks it).
  static constexpr size_t kAlignBytes = 16;

  // Chooses an algorithm now (heuristics), preferring one with SPLITK_NUM <= 1
  // and reduction scheme NONE (one kernel), else the best heuristic result.
  // `workspace` (workspace_bytes) is used by enqueue; it may be shared with
  // other GEMMs on the same stream. Throws Error naming `what` when cuBLASLt
  // refuses the problem. `dtype` is the operands' (bf16: CUDA_R_16BF operands,
  // CUBLAS_COMPUTE_32F, an f32 result: dot_general bf16 x bf16 -> f32).
  LtGemm(cublasLtHandle_t h, const plan::GemmLayout& g, DType dtype, bool tf32, void* workspace,
         size_t workspace_bytes, const std::string& what);
  ~LtGemm();
  LtGemm(LtGemm&& o) noexcept;
  LtGemm& operator=(LtGemm&& o) noexcept;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues C = A*B on the stream (graph-capturable: no allocation, no sync).
  // a, b, c: device pointers to lhs, rhs (after any packing) and the output.
  void enqueue(cudaStream_t s, const void* a, const void* b, void* c) const;

  bool single_kernel() const { return single_; }
  std::string describe() const { return desc_; }  // e.g. "cublasLt algo 21 tile 64x64 splitK 1"
  const LtGemmShape& shape() const { return shape_; }

 private:
  void release() noexcept;
  void swap(LtGemm& o) noexcept;

  cublasLtHandle_t h_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;  // Lt's A (our B), B (our A), C/D
  cublasLtMatmulAlgo_t algo_{};
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;  // what the chosen algorithm needs (<= the workspace given)
  LtGemmShape shape_;
  bool single_ = false;
  std::string what_, desc_;
};

}  // namespace capstep::cuda
