// LtGemm: a dot_general GEMM through cuBLASLt with the algorithm fixed at compile time.
//
// Why choose the algorithm ourselves. cublasGemmStridedBatchedEx(CUBLAS_GEMM_DEFAULT)
// asks cuBLASLt's heuristic on every call and, for our small shapes on an H200
// (m=64, n,k=128..256; batched 16x16x32), it picks split-K with an out-of-place
// reduction: the main kernel writes partial sums into the workspace and a second
// kernel (cublasLt::splitKreduce_kernel) adds them, so every GEMM is two launches.
// At these sizes a GEMM costs a few microseconds and the launch (or graph node)
// overhead dominates, so one kernel that uses fewer SMs is the better trade.
//
// How. 1) Ask the heuristic for up to kRequested results with the preference
// CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = NONE, which makes it search among
// configurations without any split-K reduction (split-K > 1 always needs a
// reduction scheme). 2) Keep results that really are single-kernel: read back
// CUBLASLT_ALGO_CONFIG_SPLITK_NUM (<= 1, 0 meaning unset) and
// CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME (NONE). Among those take the first (the
// heuristic orders by expected time) that needs no workspace, else the first:
// an algorithm without workspace cannot hide a reduction or a memset step.
// 3) If none qualifies, ask again without the mask, and take its best
// single-kernel result if any, else its best result (single_kernel() = false). The choice is made once, outside graph
// capture; enqueue only calls cublasLtMatmul with the stored algorithm, the fixed
// workspace and host-side alpha/beta, so it allocates nothing and is capturable.
//
// Layout: row-major C = A*B is column-major C^T = B^T A^T, exactly as the
// cublasGemmStridedBatchedEx call in compile.cpp: Lt's A is our B (op from
// b.trans, ld b.ld), Lt's B is our A (op from a.trans, ld a.ld), C is n x m
// column-major with ld n and batch stride m*n. Layouts describe matrices as stored
// (before op), so a transposed operand's rows and cols are swapped.

#include "backend/cuda/gemm_lt.h"

#include <cstdint>
#include <utility>

#include "backend/cuda/check.h"

namespace capstep::cuda {
namespace {

constexpr int kRequested = 16;

const char* tile_name(uint32_t t) {
  static const char* const names[] = {"undefined", "8x8",    "8x16",    "16x8",    "8x32",    "16x16",  "32x8",
                                      "8x64",      "16x32",  "32x16",   "64x8",    "32x32",   "32x64",  "64x32",
                                      "32x128",    "64x64",  "128x32",  "64x128",  "128x64",  "64x256", "128x128",
                                      "256x64",    "64x512", "128x256", "256x128", "512x64"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : nullptr;
}

template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T dflt) {
  T v = dflt;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return dflt;
  return v;
}

bool is_single_kernel(const cublasLtMatmulAlgo_t& algo) {
  const int32_t splits = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
  const uint32_t red = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE);
  return splits <= 1 && red == CUBLASLT_REDUCTION_SCHEME_NONE;
}

cublasLtMatrixLayout_t make_layout(cudaDataType dt, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride, const std::string& what) {
  cublasLtMatrixLayout_t l = nullptr;
  CAPSTEP_CU(cublasLtMatrixLayoutCreate(&l, dt, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
             "in " + what);
  if (batch != 1) {
    const int32_t count = static_cast<int32_t>(batch);
    try {
      CAPSTEP_CU(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                 "in " + what);
      CAPSTEP_CU(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)),
                 "in " + what);
    } catch (...) {
      cublasLtMatrixLayoutDestroy(l);
      throw;
    }
  }
  return l;
}

}  // namespace

LtGemmShape LtGemmShape::from(const plan::GemmLayout& g, DType dtype, bool tf32) {
  LtGemmShape s;
  s.batch = g.batch, s.m = g.m, s.n = g.n, s.k = g.k;
  s.trans_a = g.a.trans, s.trans_b = g.b.trans;
  s.lda = g.a.ld, s.ldb = g.b.ld;
  s.stride_a = g.a.batch_stride, s.stride_b = g.b.batch_stride;
  s.dtype = dtype;
  s.tf32 = tf32 && dtype == DType::f32;
  return s;
}

LtGemm::LtGemm(cublasLtHandle_t h, const plan::GemmLayout& g, DType dtype, bool tf32, void* workspace,
               size_t workspace_bytes, const std::string& what)
    : h_(h), ws_(workspace), shape_(LtGemmShape::from(g, dtype, tf32)), what_(what) {
  if (dtype != DType::f32 && dtype != DType::f64 && dtype != DType::bf16)
    throw Error(what + ": cuBLASLt GEMM supports f32, f64 and bf16 operands, not " + dtype_name(dtype));
  if (g.batch < 1 || g.batch > INT32_MAX || g.m < 1 || g.n < 1 || g.k < 1)
    throw Error(what + ": GEMM batch/m/n/k out of range for cuBLASLt");
  const LtGemmShape& s = shape_;
  const bool f64 = dtype == DType::f64;
  // dt: the scale type and the result's (bf16 operands: an f32 result); ot: the operands'
  const cudaDataType dt = f64 ? CUDA_R_64F : CUDA_R_32F;
  const cudaDataType ot = dtype == DType::bf16 ? CUDA_R_16BF : dt;
  const cublasComputeType_t ct = f64 ? CUBLAS_COMPUTE_64F : (s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const std::string ctx = "in " + what;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    CAPSTEP_CU(cublasLtMatmulDescCreate(&op_, ct, dt), ctx);
    const cublasOperation_t opa = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // Lt's A is our B
    const cublasOperation_t opb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CAPSTEP_CU(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), ctx);
    CAPSTEP_CU(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), ctx);
    la_ = s.trans_b ? make_layout(ot, s.k, s.n, s.ldb, s.batch, s.stride_b, what)
                    : make_layout(ot, s.n, s.k, s.ldb, s.batch, s.stride_b, what);
    lb_ = s.trans_a ? make_layout(ot, s.m, s.k, s.lda, s.batch, s.stride_a, what)
                    : make_layout(ot, s.k, s.m, s.lda, s.batch, s.stride_a, what);
    lc_ = make_layout(dt, s.n, s.m, s.n, s.batch, s.m * s.n, what);

    CAPSTEP_CU(cublasLtMatmulPreferenceCreate(&pref), ctx);
    const uint64_t max_ws = workspace ? workspace_bytes : 0;
    CAPSTEP_CU(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                    sizeof(max_ws)), ctx);
    const uint32_t align = kAlignBytes;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CAPSTEP_CU(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), ctx);

    cublasLtMatmulHeuristicResult_t res[kRequested] = {};
    int found = 0;
    auto query = [&](uint32_t reduction_mask) {
      // Only a filter: if this cuBLASLt refuses the mask, the search simply is unfiltered.
      (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &reduction_mask, sizeof(reduction_mask));
      found = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(h_, op_, la_, lb_, lc_, lc_, pref, kRequested, res, &found);
      if (st == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;  // no algorithm for this problem: not an error yet
      else CAPSTEP_CU(st, ctx);
    };
    // Best single-kernel result (no workspace preferred), else with any_ok the best result.
    auto choose = [&](bool any_ok) {
      int pick = -1;
      for (int i = 0; i < found; ++i) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || !is_single_kernel(res[i].algo)) continue;
        if (pick < 0 || (res[pick].workspaceSize > 0 && res[i].workspaceSize == 0)) pick = i;
      }
      for (int i = 0; i < found && pick < 0 && any_ok; ++i)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) pick = i;
      return pick;
    };
    query(CUBLASLT_REDUCTION_SCHEME_NONE);
    int pick = choose(false);
    if (pick < 0) {
      query(CUBLASLT_REDUCTION_SCHEME_MASK);
      pick = choose(true);
    }
    if (pick < 0)
      throw Error(what + ": cuBLASLt has no algorithm for this GEMM (" + dtype_name(dtype) +
                  (s.tf32 ? " tf32" : "") + ", batch " + std::to_string(s.batch) + ", m " + std::to_string(s.m) +
                  ", n " + std::to_string(s.n) + ", k " + std::to_string(s.k) + ")");
    cublasLtMatmulPreferenceDestroy(pref);
    pref = nullptr;

    algo_ = res[pick].algo;
    ws_bytes_ = res[pick].workspaceSize;
    single_ = is_single_kernel(algo_);
    const int32_t id = algo_config<int32_t>(algo_, CUBLASLT_ALGO_CONFIG_ID, -1);
    const uint32_t tile = algo_config<uint32_t>(algo_, CUBLASLT_ALGO_CONFIG_TILE_ID, 0);
    const int32_t splits = algo_config<int32_t>(algo_, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
    const char* tn = tile_name(tile);
    desc_ = "cublasLt algo " + std::to_string(id) + " tile " + (tn ? std::string(tn) : std::string("#").append(std::to_string(tile))) +
            " splitK " + std::to_string(splits < 1 ? 1 : splits);
    if (ws_bytes_ > 0) desc_ += " workspace " + std::to_string(ws_bytes_);
    if (!single_) desc_ += " (not single-kernel)";
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    release();
    throw;
  }
}

LtGemm::~LtGemm() { release(); }

LtGemm::LtGemm(LtGemm&& o) noexcept { swap(o); }

LtGemm& LtGemm::operator=(LtGemm&& o) noexcept {
  if (this != &o) {
    LtGemm tmp(std::move(o));
    swap(tmp);
  }
  return *this;
}

void LtGemm::swap(LtGemm& o) noexcept {
  std::swap(h_, o.h_), std::swap(op_, o.op_);
  std::swap(la_, o.la_), std::swap(lb_, o.lb_), std::swap(lc_, o.lc_);
  std::swap(algo_, o.algo_), std::swap(ws_, o.ws_), std::swap(ws_bytes_, o.ws_bytes_);
  std::swap(shape_, o.shape_), std::swap(single_, o.single_);
  std::swap(what_, o.what_), std::swap(desc_, o.desc_);
}

void LtGemm::release() noexcept {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (lc_) cublasLtMatrixLayoutDestroy(lc_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  la_ = lb_ = lc_ = nullptr;
  op_ = nullptr;
}

void LtGemm::enqueue(cudaStream_t s, const void* a, const void* b, void* c) const {
  if (!op_) throw Error(what_ + ": LtGemm used after move");
  for (const void* p : {a, b, static_cast<const void*>(c)})
    if (reinterpret_cast<uintptr_t>(p) % kAlignBytes != 0)
      throw Error(what_ + ": GEMM operand not " + std::to_string(kAlignBytes) + "-byte aligned for cuBLASLt");
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = shape_.dtype == DType::f64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  CAPSTEP_CU(cublasLtMatmul(h_, op_, alpha, b, la_, a, lb_, beta, c, lc_, c, lc_, &algo_, ws_bytes_ ? ws_ : nullptr,
                            ws_bytes_, s),
             "in " + what_);
}

}  // namespace capstep::cuda
