// dot_general through the host's GEMM libraries (gemm.h: OpenBLAS with kernels
// picked from the CPU's flags, libxsmm's JIT for small f32 ones, oneDNN for
// bf16 ones where the CPU has AVX512_BF16): any
// batch/contracting dims become a batch of row-major gemms
// [M,K] x [K,N] -> [M,N]. Which operand is handed to the GEMM in place (with a
// transpose flag, leading dimension and each batch's offset) and which is
// first packed into a planned scratch buffer is plan::dot_gemm's rule
// (plan/gemm_layout.h), the one the CUDA executor reads too; plan_dot adds the
// host's own choices on top (bf16 widening, panels, pack_bt, parts, libxsmm
// kernels, the result's layout).
#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/host/gemm.h"
#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "backend/plan/gemm_layout.h"
#include "ir/bf16.h"

namespace capstep::host {
namespace {

using plan::axis_run;
using plan::AxisRun;
using plan::batch_offsets;

Walk pack_view(const Shape& shape, const std::vector<int64_t>& strides, const std::vector<int64_t>& order,
               const std::string& what) {
  std::vector<int64_t> sz, st;
  for (int64_t a : order) {
    sz.push_back(shape[static_cast<size_t>(a)]);
    st.push_back(strides[static_cast<size_t>(a)]);
  }
  return plan::make_walk(sz, st, what);
}

// Rows [lo, hi) of op(A) that part `part` of a single GEMM (batch 1) computes:
// the run computes these and plan_dot prepares libxsmm kernels for them.
void dot_part_rows(const DotPlan& d, int part, int64_t& lo, int64_t& hi) { part_range(d.m, d.parts, part, 8, lo, hi); }

// The batch of GEMMs of d on a (A's matrices at a + a_off[i]), b, c, as
// d.parts calls that the host's threads share.
template <class T, class C = T>
void gemm_parts(const DotPlan& d, const T* a, const T* b, C* c) {
  const int64_t* c_off = d.c_off.empty() ? nullptr : d.c_off.data();
  if (d.parts <= 1) {
    gemm_batch(d.trans_a, d.trans_b, d.m, d.n, d.k, a, d.lda, d.a_off.data(), b, d.ldb, d.b_off.data(), c, c_off,
               d.ldc, d.batch);
    return;
  }
  parallel_parts(d.parts, [&](int part) {
    int64_t lo = 0, hi = 0;
    if (d.batch > 1) {
      part_range(d.batch, d.parts, part, 1, lo, hi);
      if (hi > lo)
        gemm_batch(d.trans_a, d.trans_b, d.m, d.n, d.k, a, d.lda, d.a_off.data() + lo, b, d.ldb, d.b_off.data() + lo,
                   c_off ? c : c + lo * d.m * d.n, c_off ? c_off + lo : nullptr, d.ldc, hi - lo);
      return;
    }
    dot_part_rows(d, part, lo, hi);
    if (hi <= lo) return;
    // rows [lo, hi) of op(A): of A's rows, or of its columns when it is stored transposed
    const int64_t a_off = d.a_off[0] + (d.trans_a ? lo : lo * d.lda);
    gemm_batch(d.trans_a, d.trans_b, hi - lo, d.n, d.k, a, d.lda, &a_off, b, d.ldb, d.b_off.data(),
               c + (c_off ? c_off[0] : 0) + lo * d.ldc, nullptr, d.ldc, 1);
  });
}

// pack_bt (step.h), batch > 1: B's matrices copied transposed into bt
// ([B, K, N]) and multiplied untransposed; each part copies and multiplies its
// own matrices.
void gemm_bt_parts(const DotPlan& d, const float* a, const float* b, float* bt, float* c) {
  const int64_t M = d.m, N = d.n, K = d.k;
  parallel_parts(d.parts, [&](int part) {
    int64_t lo = 0, hi = 0;
    part_range(d.batch, d.parts, part, 1, lo, hi);
    if (hi <= lo) return;
    for (int64_t i = lo; i < hi; ++i)
      transpose_f32(b + d.b_off[static_cast<size_t>(i)], d.ldb, N, K, bt + i * K * N, N);
    gemm_batch(false, false, M, N, K, a, d.lda, d.a_off.data() + lo, bt, N, d.bt_off.data() + lo,
               d.c_off.empty() ? c + lo * M * N : c, d.c_off.empty() ? nullptr : d.c_off.data() + lo, d.ldc, hi - lo);
  });
}

// DotPlan::panel (step.h): part `part` copies its panels of B, one at a time,
// as K x w (transposed when B is stored transposed), and multiplies A by each
// while it is in L1 into C's columns [j, j + w).
void gemm_panel_parts(const DotPlan& d, const float* a, const float* b, float* pan, float* c) {
  const int64_t M = d.m, N = d.n, K = d.k, W = d.panel;
  const int64_t panels = (N + W - 1) / W;
  const int64_t zero = 0;
  b += d.b_off[0];
  c += d.c_off.empty() ? 0 : d.c_off[0];
  auto part_fn = [&](int part) {
    int64_t lo = 0, hi = 0;
    part_range(panels, d.parts, part, 1, lo, hi);
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t j = q * W, w = std::min(W, N - j);
      float* __restrict dst = pan + j * K;
      if (d.trans_b) {
        transpose_f32(b + j * d.ldb, d.ldb, w, K, dst, w);
      } else {
        copy_rows_f32(b + j, d.ldb, K, w, dst, w);
      }
      gemm_batch(d.trans_a, false, M, w, K, a, d.lda, d.a_off.data(), dst, w, &zero, c + j, nullptr, d.ldc, 1);
    }
  };
  if (d.parts <= 1) return part_fn(0);
  parallel_parts(d.parts, part_fn);
}

template <class T>
void k_dot(const Step& s, void* const* p) {
  const DotPlan& d = s.dot;
  T* c = static_cast<T*>(p[s.out]);
  if (s.n == 0) return;
  if (d.k == 0) {  // an empty sum
    std::fill(c, c + s.n, T(0));
    return;
  }
  const T* a = static_cast<const T*>(p[s.in[0]]);
  const T* b = static_cast<const T*>(p[s.in[1]]);
  if (d.pack_a) {
    strided_copy_bytes(d.a_view, sizeof(T), a, p[s.scratch[0]]);
    a = static_cast<const T*>(p[s.scratch[0]]);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (d.panel > 0) return gemm_panel_parts(d, a, b, static_cast<float*>(p[s.scratch[1]]), c);
    if (d.pack_bt) return gemm_bt_parts(d, a, b, static_cast<float*>(p[s.scratch[1]]), c);
  }
  if (d.pack_b) {
    strided_copy_bytes(d.b_view, sizeof(T), b, p[s.scratch[1]]);
    b = static_cast<const T*>(p[s.scratch[1]]);
  }
  gemm_parts(d, a, b, c);
}

// The packing walk of strided_copy, widening bf16 to f32 (exact) on the way.
void widen_strided(const Walk& v, const uint16_t* __restrict src, float* __restrict dst) {
  if (v.rank == 0) {
    dst[0] = bf16::to_float(src[0]);
    return;
  }
  const int r = v.rank;
  const int64_t inner = v.size[r - 1], is = v.stride[r - 1];
  if (inner == 0) return;
  int64_t outer = 1;
  for (int a = 0; a < r - 1; ++a) outer *= v.size[a];
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const uint16_t* s = src + off;
    for (int64_t j = 0; j < inner; ++j) dst[j] = bf16::to_float(s[j * is]);
    dst += inner;
    next_outer(v, idx, off);
  }
}

// bf16 operands, f32 result. Where the GEMMs run on bf16 kernels
// (gemm_bf16_native), the operands go to them as stored when plan_dot found
// their layout a GEMM can read, else packed as bf16, and the kernels sum the
// exact products in f32. Elsewhere both operands are packed (plan_dot),
// widened to f32, and multiplied by the f32 GEMM, which accumulates in f32:
// the products of two bf16 values are exact in f32, so this is the f32
// accumulation of exact products that a bf16 tensor core performs.
void k_dot_bf16(const Step& s, void* const* p) {
  const DotPlan& d = s.dot;
  float* c = static_cast<float*>(p[s.out]);
  if (s.n == 0) return;
  if (d.k == 0) {
    std::fill(c, c + s.n, 0.0f);
    return;
  }
  if (gemm_bf16_native()) {
    const uint16_t* a = static_cast<const uint16_t*>(p[s.in[0]]);
    const uint16_t* b = static_cast<const uint16_t*>(p[s.in[1]]);
    if (d.pack_a) {
      strided_copy_bytes(d.a_view, sizeof(uint16_t), a, p[s.scratch[0]]);
      a = static_cast<const uint16_t*>(p[s.scratch[0]]);
    }
    if (d.pack_b) {
      strided_copy_bytes(d.b_view, sizeof(uint16_t), b, p[s.scratch[1]]);
      b = static_cast<const uint16_t*>(p[s.scratch[1]]);
    }
    return gemm_parts<uint16_t, float>(d, a, b, c);
  }
  float* a = static_cast<float*>(p[s.scratch[0]]);
  float* b = static_cast<float*>(p[s.scratch[1]]);
  widen_strided(d.a_view, static_cast<const uint16_t*>(p[s.in[0]]), a);
  widen_strided(d.b_view, static_cast<const uint16_t*>(p[s.in[1]]), b);
  gemm_parts<float>(d, a, b, c);
}

}  // namespace

bool dot_operand_in_place(const Type& t, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  // Copied (widened) anyway where bf16 GEMMs run in f32: through any strides.
  // On bf16 kernels a layout they cannot read is copied too (as bf16), as
  // the transpose would have been.
  if (t.dtype == DType::bf16) return true;
  return plan::dot_gemm_reads_in_place(t, batch, contract);
}

bool dot_out_layout(const Attrs& at, int lhs_rank, int rhs_rank, const std::vector<int64_t>& st, const Type& lhs,
                    const Type& rhs, DotPlan& d) {
  // The result's axes: the batch axes, lhs's free axes, rhs's free axes.
  const size_t nb = at.lhs_batch.size();
  const std::vector<int64_t> lfree = dot_free_axes(lhs_rank, at.lhs_batch, at.lhs_contract);
  const std::vector<int64_t> rfree = dot_free_axes(rhs_rank, at.rhs_batch, at.rhs_contract);
  if (st.size() != nb + lfree.size() + rfree.size()) return false;
  Shape out;
  for (int64_t a : at.lhs_batch) out.push_back(lhs.shape[static_cast<size_t>(a)]);
  for (int64_t a : lfree) out.push_back(lhs.shape[static_cast<size_t>(a)]);
  for (int64_t a : rfree) out.push_back(rhs.shape[static_cast<size_t>(a)]);
  std::vector<int64_t> baxes, maxes, naxes;
  for (size_t i = 0; i < out.size(); ++i)
    (i < nb ? baxes : i < nb + lfree.size() ? maxes : naxes).push_back(static_cast<int64_t>(i));
  const AxisRun gm = axis_run(out, st, maxes), gn = axis_run(out, st, naxes);
  // C's rows: N's elements adjacent, M's rows one stride apart, not overlapping.
  if (!gm.chained || !gn.chained || !(gn.any || gn.stride == 1)) return false;
  const int64_t N = std::max<int64_t>(gn.size, 1);
  if (!gm.any && gm.stride < N) return false;
  d.ldc = gm.any ? N : gm.stride;
  if (d.ldc > INT_MAX) return false;  // BLAS's int range
  d.c_off = batch_offsets(out, st, baxes);
  return true;
}

int panel_parts(int64_t m, int64_t n, int64_t k) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({4, n / 64, m * n * k / (int64_t{1} << 18)})));
}

int dot_parts(int64_t batch, int64_t m, int64_t n, int64_t k) {
  // A batch is cut by whole matrices, which share nothing: worth it from
  // less work than rows of one matrix, which all read B (the seed's attention
  // batches, 2^17 multiply-adds, run as 2 parts).
  constexpr int64_t kMaxParts = 4, kMinRows = 32, kMinWork = int64_t{1} << 18, kMinBatchWork = int64_t{1} << 16;
  if (batch > 1)
    return static_cast<int>(std::max<int64_t>(1, std::min({kMaxParts, batch, batch * m * n * k / kMinBatchWork})));
  if (m < 2 * kMinRows) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min({kMaxParts, m / kMinRows, m * n * k / kMinWork})));
}

DotPlan plan_dot(const Type& lhs, const Type& rhs, const Attrs& at, const std::string& what,
                 const std::vector<int64_t>* out_strides) {
  DotPlan d;
  // B, M, N, K and how each operand reaches the GEMM: in place (transposed or
  // not, lda/ldb, each batch's offset) or packed (plan/gemm_layout.h).
  plan::DotGemm g = plan::dot_gemm(lhs, rhs, at);
  d.batch = g.batch;
  d.m = g.m;
  d.n = g.n;
  d.k = g.k;
  for (int64_t v : {d.m, d.n, d.k})
    if (v > INT_MAX) throw Error(what + ": a matrix dimension of " + std::to_string(v) + " exceeds BLAS's int range");
  // widened to f32 while packing, unless bf16 kernels read them (gemm.h)
  if (lhs.dtype == DType::bf16 && !gemm_bf16_native()) {
    g.pack(plan::DotSide::lhs);
    g.pack(plan::DotSide::rhs);
  }
  const int64_t M = d.m, N = d.n, K = d.k;
  d.pack_a = g.a.read == plan::GemmRead::packed;
  d.trans_a = g.a.read == plan::GemmRead::transposed;
  d.lda = g.a.ld;
  d.a_off = std::move(g.a.batch_offsets);
  if (d.pack_a) d.a_view = pack_view(lhs.shape, row_major_strides(lhs.shape), g.a.pack_order, what);
  d.pack_b = g.b.read == plan::GemmRead::packed;
  d.trans_b = g.b.read == plan::GemmRead::transposed;
  d.ldb = g.b.ld;
  d.b_off = std::move(g.b.batch_offsets);
  if (d.pack_b) d.b_view = pack_view(rhs.shape, row_major_strides(rhs.shape), g.b.pack_order, what);

  // libxsmm has no kernel for a transposed B: when it would take the GEMM
  // untransposed, B is copied by the parts instead, transposed: into panels
  // (one matrix), or whole (pack_bt, a batch). An untransposed B of L1's size
  // or more goes into panels too when it is more than two panels wide, unless
  // A has so few rows that the copy is not repaid (each element of a panel is
  // used M times); smaller or transposed-A shapes run no faster in panels
  // (bench/results/2026-12-01-host-lane-speed.md, "B in panels").
  const bool xsmm_f32 = !d.pack_b && lhs.dtype == DType::f32 && rhs.dtype == DType::f32 && gemm_nn_small_f32(M, N, K);
  if (xsmm_f32 && d.batch == 1 &&
      (d.trans_b || (M >= 32 && N > 2 * kPanelCols && K * N * static_cast<int64_t>(sizeof(float)) >= kPanelBytes)))
    d.panel = kPanelCols;
  else if (xsmm_f32 && d.trans_b && !d.trans_a)
    d.pack_bt = true;
  d.ldc = std::max<int64_t>(d.n, 1);
  if (out_strides) {  // the result written through these strides (a transpose of it)
    if (!dot_out_layout(at, lhs.rank(), rhs.rank(), *out_strides, lhs, rhs, d))
      throw Error(what + ": internal: the result cannot be written through strides " +
                  std::to_string(out_strides->size()));
  }
  if (d.pack_bt)
    for (int64_t i = 0; i < d.batch; ++i) d.bt_off.push_back(i * K * N);
  d.parts = d.panel > 0 ? panel_parts(d.m, d.n, d.k) : dot_parts(d.batch, d.m, d.n, d.k);
  // The libxsmm kernels are generated now (one per part's row count, or per
  // panel width), so that running the step allocates nothing.
  if (d.panel > 0 && d.m > 0 && d.n > 0 && d.k > 0) {  // the untransposed kernels, on panels (ldb = width)
    const int64_t w = std::min(d.panel, d.n), tail = d.n % d.panel;
    gemm_prepare_f32(d.trans_a, false, d.m, w, d.k, d.lda, w, d.ldc);
    if (tail > 0 && tail != w) gemm_prepare_f32(d.trans_a, false, d.m, tail, d.k, d.lda, tail, d.ldc);
  } else if (d.pack_bt && d.m > 0 && d.n > 0 && d.k > 0) {  // the untransposed kernel, on B^T (ldb = N)
    gemm_prepare_f32(false, false, d.m, d.n, d.k, d.lda, d.n, d.ldc);
  } else if ((lhs.dtype == DType::f32 || (lhs.dtype == DType::bf16 && !gemm_bf16_native())) && d.m > 0 && d.n > 0 &&
             d.k > 0) {
    if (d.batch > 1 || d.parts == 1) {
      gemm_prepare_f32(d.trans_a, d.trans_b, d.m, d.n, d.k, d.lda, d.ldb, d.ldc);
    } else {
      for (int i = 0; i < d.parts; ++i) {
        int64_t lo = 0, hi = 0;
        dot_part_rows(d, i, lo, hi);
        if (hi > lo) gemm_prepare_f32(d.trans_a, d.trans_b, hi - lo, d.n, d.k, d.lda, d.ldb, d.ldc);
      }
    }
  }
  return d;
}

void configure_blas_threads() { configure_gemm_threads(); }

Kernel dot_general_kernel(DType t) {
  switch (t) {
    case DType::f32: return &k_dot<float>;
    case DType::f64: return &k_dot<double>;
    case DType::bf16: return &k_dot_bf16;
    case DType::i32: case DType::i1: break;
  }
  throw Error(std::string("host interpreter: no kernel for dot_general on ") + dtype_name(t) +
              " (dot_general takes f32, f64 or bf16)");
}

}  // namespace capstep::host
