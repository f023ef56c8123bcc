// One scheduled equation of the host interpreter: the kernel chosen for its op
// and dtypes, the slots it reads and writes, and every loop bound and stride it
// needs, all computed when the Interpreter is built so that running it is only
// pointer loads and loops.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/host/strided.h"
#include "capstep/collective.h"
#include "capstep/ir.h"

namespace capstep::host {

// Hot loops are compiled for AVX2 and AVX-512 as well as the baseline and the
// best is picked when the program loads (GCC function multi-versioning), so one
// portable binary uses the wide vectors where the CPU has them. The clones run
// the same IEEE operations in the same order, so results do not change.
// Not under ASan or TSan: the clones' resolvers, instrumented, run at load
// time before the sanitizer's runtime is set up.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define CAPSTEP_HOST_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CAPSTEP_HOST_CLONES
#endif

struct Step;
// slots[k] is the address of slot k: one per Program value, then scratch buffers.
using Kernel = void (*)(const Step& s, void* const* slots);

// dot_general as a batch of row-major gemms C[b] = op(A[b]) * op(B[b]). The
// fields up to a_view/b_view are plan::dot_gemm's description, the one the
// CUDA executor reads too (plan/gemm_layout.h), with both operands packed
// where bf16 ones are widened to f32; the rest are the host's own choices.
struct DotPlan {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  int64_t lda = 1, ldb = 1;               // leading dimensions as BLAS takes them
  std::vector<int64_t> a_off, b_off;      // element offset of each batch's matrix
  bool pack_a = false, pack_b = false;    // copy the operand into scratch first
  Walk a_view, b_view;                    // the packing walks ([B,M,K] and [B,K,N])
  // A batch (batch > 1, A not transposed) whose B is stored transposed
  // (trans_b, ldb) in f32 GEMMs that libxsmm would take untransposed
  // (gemm_nn_small_f32): the parts copy B's matrices transposed into the
  // scratch as [B, K, N] (transpose_f32), a share each, and run the
  // untransposed GEMM on them, which at these sizes costs less than BLAS's
  // transposed one (kernels_dot.cpp, gemm_bt_parts). One matrix: `panel`.
  bool pack_bt = false;
  std::vector<int64_t> bt_off;            // pack_bt: each batch's matrix in the copy (i * K * N)
  // One f32 matrix (batch 1) that libxsmm takes, B stored transposed, or B
  // at least as large as L1 (kPanelBytes), wider than two panels, with A of
  // 32 rows or more (plan_dot has the rule): the parts copy B into column
  // panels of `panel` columns, each K x panel and contiguous (the last one
  // narrower), and run libxsmm on one panel at a time while it sits in L1.
  // B's rows in place are ldb floats apart, which puts a panel's rows in a
  // few of L1's sets; libxsmm re-reads B for every few rows of A, so panels
  // make the seed's larger GEMMs faster on one thread (measurements:
  // bench/results/2026-12-01-host-lane-speed.md, "B in panels").
  int64_t panel = 0;
  // C's rows are ldc apart (n when C is a whole matrix); c_off, when not
  // empty, the offset of each batch's matrix (else i * m * n): a result that
  // a transpose of it reads in its own layout (dot_out_layout).
  int64_t ldc = 1;
  std::vector<int64_t> c_off;
  // The GEMMs run as `parts` calls that the host's threads share
  // (parallel.h): ranges of the batch when batch > 1, else ranges of M's rows
  // (multiples of 8), or of N's panels under `panel`.
  // Decided from the shape alone (dot_parts, panel_parts), so results do not
  // depend on the number of threads.
  int parts = 1;
};

// The parts of a gemm batch (DotPlan::parts): the batch's matrices when there
// are several (each part at least 2^16 multiply-adds), else rows of M when
// M >= 64 and each part keeps at least 32 rows and 2^18 multiply-adds; at
// most 4.
int dot_parts(int64_t batch, int64_t m, int64_t n, int64_t k);
// The parts of a GEMM of one matrix run in panels: ranges of N's panels,
// each at least 64 columns wide and 2^18 multiply-adds; at most 4.
int panel_parts(int64_t m, int64_t n, int64_t k);
// DotPlan::panel: the panel width, and the size of B from which an
// untransposed B is copied into panels too.
inline constexpr int64_t kPanelCols = 32;
inline constexpr int64_t kPanelBytes = 32 * 1024;

struct Step {
  Kernel fn = nullptr;
  int eqn = -1;                  // index into Program::eqns, for error messages
  const Program* program = nullptr;
  int out = -1;                  // output slot
  int in[5] = {-1, -1, -1, -1, -1};  // operand slots
  int scratch[2] = {-1, -1};     // scratch slots (dot_general packing)
  int64_t n = 0;                 // elements of the output
  int64_t n_in = 0;              // elements of the first operand (reduce)
  size_t elem_bytes = 0;         // width of one element (layout ops)
  Walk view;                     // broadcast/transpose: source walk; reduce: output walk over input
  // gather_rows / scatter_add_rows
  int64_t rows = 0;              // N: rows of the table / operand
  int64_t row_elems = 0;         // elements in one row
  int64_t n_idx = 0;             // number of indices
  // slice: the operand's element the walk starts at; pad: the result's
  // element the operand's first lands on (view: the operand's walk over
  // the result)
  int64_t offset = 0;
  // concatenate: every operand's slot, and for each the elements it gives
  // per index of the axes before the concatenated one (`rows` of them)
  std::vector<int> operands;
  std::vector<int64_t> widths;
  DotPlan dot;
  void* group = nullptr;         // a fused group (fused.h) run by run_fused_group
  const Step* pair = nullptr;    // two dot_general Steps that run side by side (run_dot_pair)
  // all_reduce: the interpreter's communicator (it may be set after planning)
  Communicator* const* comm = nullptr;
};

// Error for an index outside [0, rows): names the value, its position in the
// index array (flat and as coordinates) and the equation.
[[noreturn]] void throw_index_error(const Step& s, int64_t position, int64_t value);

// ---- kernel choice, one function per family; each throws Error for a dtype
// combination it has no kernel for (the verifier should have refused it).
Kernel binary_kernel(BinaryOp op, DType t);  // CAPSTEP_BINARY_OPS
Kernel unary_kernel(UnaryOp op, DType t);    // CAPSTEP_UNARY_OPS
Kernel compare_kernel(Cmp c, DType t);
Kernel select_kernel(DType t);
Kernel convert_kernel(DType from, DType to);
Kernel strided_copy_kernel(DType t);       // broadcast_in_dim, transpose
Kernel slice_kernel(DType t);
Kernel pad_kernel(DType t);
Kernel concatenate_kernel();
Kernel reduce_kernel(Op op, DType t);      // reduce_sum, reduce_max
Kernel gather_rows_kernel(DType t);
Kernel scatter_add_rows_kernel(DType t);
Kernel dot_general_kernel(DType t);       // t: the operands' dtype
Kernel attention_kernel(Op op, DType t);  // attention, attention_grad (kernels_attention.cpp)

// Sets OpenBLAS to one thread, once per process, unless the program told
// that the user set OPENBLAS_NUM_THREADS (configure_gemm_threads in gemm.h).
// Called by every Interpreter.
void configure_blas_threads();

// Plans dot_general for these operand types (strides from row-major layout).
// out_strides: the result is written through these strides (one per result
// axis, in elements) instead of row-major; dot_out_layout must accept them.
DotPlan plan_dot(const Type& lhs, const Type& rhs, const Attrs& a, const std::string& what,
                 const std::vector<int64_t>* out_strides = nullptr);
// Whether plan_dot reads an operand of type t (row-major) with these batch
// and contracting axes in place, without copying it to scratch first:
// plan::dot_gemm_reads_in_place, and bf16 operands always (kernels_dot.cpp).
bool dot_operand_in_place(const Type& t, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract);
// Whether a dot_general's result can be written through strides `st` (one
// per result axis): N's axes one run of stride 1, M's one run of stride >= N
// (ldc), the batch axes anywhere (c_off); sets d.ldc and d.c_off if so.
bool dot_out_layout(const Attrs& at, int lhs_rank, int rhs_rank, const std::vector<int64_t>& st, const Type& lhs,
                    const Type& rhs, DotPlan& d);

}  // namespace capstep::host
