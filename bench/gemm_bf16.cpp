// Times bf16 GEMMs (bf16 operands, f32 accumulation and result) against the
// f32 GEMMs the host runs, at the shapes of one GPT-2 124M training step at
// batch 2 x 256 tokens (M = 512 token rows; d 768, d_ff 3072, vocab 50257, 12
// heads of 64): the forward GEMMs NN, the two gradients of each (NT: dX =
// dY W^T; TN: dW = X^T dY), and the attention's batched 256x256x64 ones. This
// is how the host's bf16 GEMM library was chosen (gemm.h). One thread.
//
//   g++ -O2 -std=c++20 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/gemm_bf16.cpp \
//       -lopenblas -ldnnl /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a -lrt -ldl -lpthread -o /tmp/gemm_bf16
//   OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/gemm_bf16
//
// (Debian 12: libopenblas-dev, libdnnl-dev, libxsmm-dev.) Debian's OpenBLAS
// 0.3.21 is built without BUILD_BFLOAT16: it has no cblas_sbgemm (nm -D shows
// none), so it is not in the table. Columns: us per GEMM (median of 7) for
// OpenBLAS sgemm, oneDNN sgemm, oneDNN gemm_bf16bf16f32
// (dnnl_gemm_bf16bf16f32, exported by libdnnl 2.6 though not in its header),
// libxsmm 1.17's bf16 JIT (libxsmm_bsmmdispatch; its bf16 kernels take their
// first operand, our B, in the VNNI layout [K/2][N][2], made here before the
// timing, so the copy a caller would need is not counted; no kernel for a
// transposed operand: NN shapes only), and the step's total weighted by each
// shape's count; each bf16 result is checked against an f64 product of the
// same bf16 operands (the largest error as a share of sum |a b|).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include <cblas.h>
#include <libxsmm.h>
#include <oneapi/dnnl/dnnl.h>

extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const uint16_t* A, dnnl_dim_t lda, const uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);
extern "C" char* openblas_get_corename(void);

namespace {
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* what;
  int count, batch, m, n, k;
  bool ta, tb;
};

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double median_us(const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const int M = 512, D = 768, F = 3072, V = 50257, L = 12, H = 12, T = 256, HD = 64;
  // count = how many times a step runs the shape (12 layers; the tied lm head once)
  const Shape shapes[] = {
      {"qkv fwd", L, 1, M, 3 * D, D, false, false},      {"qkv dX", L, 1, M, D, 3 * D, false, true},
      {"qkv dW", L, 1, D, 3 * D, M, true, false},        {"proj fwd", L, 1, M, D, D, false, false},
      {"proj dX", L, 1, M, D, D, false, true},           {"proj dW", L, 1, D, D, M, true, false},
      {"fc fwd", L, 1, M, F, D, false, false},           {"fc dX", L, 1, M, D, F, false, true},
      {"fc dW", L, 1, D, F, M, true, false},             {"fc2 fwd", L, 1, M, D, F, false, false},
      {"fc2 dX", L, 1, M, F, D, false, true},            {"fc2 dW", L, 1, F, D, M, true, false},
      {"head fwd", 1, 1, M, V, D, false, true},          {"head dX", 1, 1, M, D, V, false, false},
      {"head dW", 1, 1, V, D, M, true, false},           {"att QK^T", 3 * L, 2 * H, T, T, HD, false, true},
      {"att PV", 3 * L, 2 * H, T, HD, T, false, false},
  };
  std::printf("OpenBLAS core %s; oneDNN %d.%d.%d, isa %d\n", openblas_get_corename(), dnnl_version()->major,
              dnnl_version()->minor, dnnl_version()->patch, static_cast<int>(dnnl_get_effective_cpu_isa()));
  libxsmm_init();
  std::printf("libxsmm %s, target %s\n", LIBXSMM_VERSION, libxsmm_get_target_arch());
  std::printf("%-9s %5s %5s %6s %6s %6s %2s %2s %11s %11s %11s %8s %11s %8s\n", "gemm", "count", "batch", "M", "N", "K",
              "tA", "tB", "OB sgemm", "dnnl sgemm", "dnnl bf16", "err", "xsmm bf16", "err");
  double tot[3] = {0, 0, 0};
  for (const Shape& s : shapes) {
    const int64_t asz = int64_t(s.m) * s.k, bsz = int64_t(s.k) * s.n, csz = int64_t(s.m) * s.n;
    std::vector<float> a(asz * s.batch), b(bsz * s.batch), c(csz * s.batch);
    std::vector<uint16_t> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); ++i) ah[i] = to_bf16(a[i] = float((i * 7919) % 1999) / 1999.0f - 0.5f);
    for (size_t i = 0; i < b.size(); ++i) bh[i] = to_bf16(b[i] = float((i * 104729) % 2003) / 2003.0f - 0.5f);
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    auto ob = [&] {
      for (int i = 0; i < s.batch; ++i)
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                    1.0f, a.data() + i * asz, lda, b.data() + i * bsz, ldb, 0.0f, c.data() + i * csz, s.n);
    };
    auto ds = [&] {
      for (int i = 0; i < s.batch; ++i)
        dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data() + i * asz, lda,
                   b.data() + i * bsz, ldb, 0.0f, c.data() + i * csz, s.n);
    };
    auto dh = [&] {
      for (int i = 0; i < s.batch; ++i)
        dnnl_gemm_bf16bf16f32(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, ah.data() + i * asz, lda,
                              bh.data() + i * bsz, ldb, 0.0f, c.data() + i * csz, s.n);
    };
    // the bf16 result of the last run, on a few rows, against f64 on the same bf16 operands
    auto err_of = [&] {
      double err = 0;
      for (int i = 0; i < s.m; i += std::max(1, s.m / 7))
        for (int j = 0; j < s.n; j += std::max(1, s.n / 13)) {
          double acc = 0, mag = 0;
          for (int p = 0; p < s.k; ++p) {
            const double x =
                from_bf16(ah[s.ta ? p * lda + i : i * lda + p]) * double(from_bf16(bh[s.tb ? j * ldb + p : p * ldb + j]));
            acc += x;
            mag += std::abs(x);
          }
          err = std::max(err, std::abs(acc - c[i * s.n + j]) / mag);
        }
      return err;
    };
    const double t0 = median_us(ob), t1 = median_us(ds), t2 = median_us(dh);
    const double e2 = err_of();
    // libxsmm: column-major C^T[n,m] = B^T[n,k] A^T[k,m]; its A (our B) in VNNI pairs of k.
    double t3 = -1, e3 = -1;
    if (!s.ta && !s.tb && s.k % 2 == 0) {
      std::vector<uint16_t> bv(bh.size());
      for (int q = 0; q < s.batch; ++q)
        for (int p = 0; p < s.k; ++p)
          for (int j = 0; j < s.n; ++j)
            bv[q * bsz + (p / 2) * s.n * 2 + j * 2 + p % 2] = bh[q * bsz + p * s.n + j];
      const libxsmm_blasint xl = s.n, yl = s.k, zl = s.n;
      const float alpha = 1, beta = 0;
      const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
      libxsmm_bsmmfunction f = libxsmm_bsmmdispatch(s.n, s.m, s.k, &xl, &yl, &zl, &alpha, &beta, &flags, nullptr);
      if (f != nullptr) {
        auto xs = [&] {
          for (int i = 0; i < s.batch; ++i)
            f(reinterpret_cast<const libxsmm_bfloat16*>(bv.data() + i * bsz),
              reinterpret_cast<const libxsmm_bfloat16*>(ah.data() + i * asz), c.data() + i * csz);
        };
        t3 = median_us(xs);
        e3 = err_of();
      }
    }
    tot[0] += t0 * s.count, tot[1] += t1 * s.count, tot[2] += t2 * s.count;
    char xcol[64] = "-", xerr[32] = "-";
    if (t3 >= 0) std::snprintf(xcol, sizeof xcol, "%.0f", t3), std::snprintf(xerr, sizeof xerr, "%.1e", e3);
    else if (!s.ta && !s.tb) std::snprintf(xcol, sizeof xcol, "no kernel");
    std::printf("%-9s %5d %5d %6d %6d %6d %2d %2d %11.0f %11.0f %11.0f %8.1e %11s %8s\n", s.what, s.count, s.batch, s.m,
                s.n, s.k, s.ta, s.tb, t0, t1, t2, e2, xcol, xerr);
  }
  std::printf("step total (ms): OpenBLAS sgemm %.0f, oneDNN sgemm %.0f, oneDNN bf16 %.0f\n", tot[0] / 1e3, tot[1] / 1e3,
              tot[2] / 1e3);
}
