// Times one GEMM library on the dot_generals of capstep's gradient programs:
// the seed model's and a larger one's. Each dot_general is planned exactly as
// the host interpreter plans it (host::plan_dot: batch, M, N, K, transposes,
// leading dimensions, batch offsets) and run as that many row-major GEMMs on
// buffers of the operands' real sizes, one thread. This is how the host's GEMM
// libraries were chosen: bench/results/2026-12-02-host-gemm-library.md.
//
// One binary per library (BLIS and OpenBLAS export the same BLAS symbols),
// from this file and a host build's libcapstep.a (here build-h3):
//   L="build-h3/libcapstep.a /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a -ldl -lrt -lpthread"
//   F="-O2 -std=c++20 -Iinclude -Isrc -I/usr/include/x86_64-linux-gnu/openblas-pthread"
//   g++ $F -DLIB_CAPSTEP  bench/gemm_libs.cpp $L -o /tmp/gemm_capstep    # what capstep runs
//   g++ $F -DLIB_OPENBLAS bench/gemm_libs.cpp -lopenblas $L -o /tmp/gemm_openblas
//   g++ $F -DLIB_XSMM     bench/gemm_libs.cpp $L -o /tmp/gemm_xsmm
//   g++ $F -DLIB_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp bench/gemm_libs.cpp -lblis $L -o /tmp/gemm_blis
//   g++ $F -DLIB_DNNL     bench/gemm_libs.cpp -ldnnl $L -o /tmp/gemm_dnnl
// (Debian 12: libopenblas-dev, libxsmm-dev, libblis-dev, libdnnl-dev.)
// Run: OMP_NUM_THREADS=1 /tmp/gemm_X [seed|large]; for OpenBLAS, pick its
// kernel set with OPENBLAS_CORETYPE. Prints one line per distinct GEMM shape:
// its count in the program, batch, M N K, transposes, median us per
// dot_general (all of its batch) and GFLOP/s; then the program's total.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/host/step.h"
#include "capstep/autodiff.h"
#include "capstep/nn.h"

#if defined(LIB_CAPSTEP)
#include "../tools/env_options.h"  // apply_openblas_environment, as the capstep command does
#include "backend/host/gemm.h"
#elif defined(LIB_OPENBLAS)
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
extern "C" void openblas_set_num_threads(int);
#elif defined(LIB_BLIS)
#include <blis.h>
#elif defined(LIB_DNNL)
#include <oneapi/dnnl/dnnl.h>
#elif defined(LIB_XSMM)
#include <libxsmm.h>
#else
#error "define one of LIB_CAPSTEP LIB_OPENBLAS LIB_BLIS LIB_DNNL LIB_XSMM"
#endif

using namespace capstep;
using Clock = std::chrono::steady_clock;

namespace {

struct GemmShape {
  int64_t batch, m, n, k;
  bool ta, tb;
  int64_t lda, ldb;
  auto key() const { return std::tie(batch, m, n, k, ta, tb, lda, ldb); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
};

#if defined(LIB_XSMM)
// Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T op(A)^T:
// libxsmm (column-major) gets B as its first operand.
struct Xk {
  libxsmm_smmfunction f = nullptr;
};
Xk xsmm_kernel(const GemmShape& s) {
  const libxsmm_blasint lda = s.ldb, ldb = s.lda, ldc = s.n;
  const float alpha = 1, beta = 0;
  const int flags = (s.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (s.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  return {libxsmm_smmdispatch(s.n, s.m, s.k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr)};
}
#endif

std::string lib_name() {
#if defined(LIB_CAPSTEP)
  return "capstep: " + host::gemm_info().line;
#elif defined(LIB_OPENBLAS)
  return std::string(openblas_get_config()) + ", core " + openblas_get_corename();
#elif defined(LIB_BLIS)
  return std::string("BLIS ") + bli_info_get_version_str() + ", " + bli_arch_string(bli_arch_query_id());
#elif defined(LIB_DNNL)
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         ", isa enum " + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
#elif defined(LIB_XSMM)
  return std::string("libxsmm ") + LIBXSMM_VERSION + ", " + libxsmm_get_target_arch();
#endif
}

// Runs every GEMM of one dot_general; returns false when the library has no
// kernel for the shape (libxsmm's JIT refuses some transposes).
struct Runner {
  GemmShape s;
  const float* a;
  const float* b;
  float* c;
  std::vector<int64_t> a_off, b_off;
#if defined(LIB_XSMM)
  Xk x;
#endif
  bool ok = true;
  void run() const {
#if defined(LIB_CAPSTEP)
    host::gemm_batch(s.ta, s.tb, s.m, s.n, s.k, a, s.lda, a_off.data(), b, s.ldb, b_off.data(), c, s.batch);
    return;
#endif
    const int64_t mn = s.m * s.n;
    for (int64_t i = 0; i < s.batch; ++i) {
      const float* A = a + a_off[static_cast<size_t>(i)];
      const float* B = b + b_off[static_cast<size_t>(i)];
      float* C = c + i * mn;
#if defined(LIB_OPENBLAS)
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, A,
                  static_cast<int>(s.lda), B, static_cast<int>(s.ldb), 0.0f, C, static_cast<int>(s.n));
#elif defined(LIB_BLIS)
      float one = 1, zero = 0;
      bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, s.m, s.n, s.k, &one, const_cast<float*>(A),
                s.ta ? 1 : s.lda, s.ta ? s.lda : 1, const_cast<float*>(B), s.tb ? 1 : s.ldb, s.tb ? s.ldb : 1, &zero,
                C, s.n, 1);
#elif defined(LIB_DNNL)
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, A, s.lda, B, s.ldb, 0.0f, C, s.n);
#elif defined(LIB_XSMM)
      x.f(B, A, C);
#else
      (void)A, (void)B, (void)C;
#endif
    }
  }
};

double time_us(const Runner& r) {
  for (int i = 0; i < 3; ++i) r.run();
  auto t0 = Clock::now();
  r.run();
  const double one = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const int reps = std::max(1, static_cast<int>(300.0 / std::max(one, 0.05)));
  std::vector<double> t;
  for (int s = 0; s < 15; ++s) {
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) r.run();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
#if defined(LIB_CAPSTEP)
  env::apply_openblas_environment();  // capstep's OpenBLAS kernel set and one thread, before it loads
#endif
  const std::string which = argc > 1 ? argv[1] : "seed";
  nn::LmConfig c;
  if (which == "large") {
    c.vocab = 256;
    c.d_model = 512;
    c.n_layers = 1;
    c.n_heads = 8;
    c.d_ff = 2048;
    c.batch = 8;
    c.seq = 64;
  } else if (which != "seed") {
    std::fprintf(stderr, "usage: %s [seed|large]\n", argv[0]);
    return 2;
  }
#if defined(LIB_OPENBLAS)
  openblas_set_num_threads(1);
#elif defined(LIB_CAPSTEP)
  host::configure_gemm_threads();
#endif
  Program loss = nn::lm_loss_program(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  Program grad = value_and_grad(loss, names);

  std::map<GemmShape, std::pair<int, host::DotPlan>> shapes;
  int dots = 0;
  for (const Eqn& e : grad.eqns) {
    if (e.op != Op::dot_general) continue;
    ++dots;
    host::DotPlan d = host::plan_dot(grad.type(e.inputs[0]), grad.type(e.inputs[1]), e.attrs, "bench");
    if (d.pack_a || d.pack_b) std::printf("note: a dot_general packs an operand first (not timed here)\n");
    GemmShape s{d.batch, d.m, d.n, d.k, d.trans_a, d.trans_b, d.lda, d.ldb};
    auto [it, fresh] = shapes.try_emplace(s, 0, d);
    it->second.first++;
    (void)fresh;
  }
  std::printf("%s\n%s: %d dot_generals, %zu distinct GEMM shapes\n", lib_name().c_str(), c.describe().c_str(), dots,
              shapes.size());
  std::printf("%5s %5s %5s %5s %5s %3s %3s %10s %8s\n", "count", "batch", "M", "N", "K", "tA", "tB", "us/dot", "GFLOP/s");
  double total = 0;
  bool complete = true;
  for (auto& [s, cd] : shapes) {
    const host::DotPlan& d = cd.second;
    int64_t a_max = 0, b_max = 0;
    for (int64_t o : d.a_off) a_max = std::max(a_max, o);
    for (int64_t o : d.b_off) b_max = std::max(b_max, o);
    std::vector<float> A(static_cast<size_t>(a_max + s.lda * (s.ta ? s.k : s.m) + 64), 0.5f);
    std::vector<float> B(static_cast<size_t>(b_max + s.ldb * (s.tb ? s.n : s.k) + 64), 0.25f);
    std::vector<float> C(static_cast<size_t>(s.batch * s.m * s.n));
    for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>((i * 7) % 13) * 0.1f - 0.6f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>((i * 5) % 11) * 0.1f - 0.5f;
    Runner r{s, A.data(), B.data(), C.data(), d.a_off, d.b_off};
#if defined(LIB_XSMM)
    r.x = xsmm_kernel(s);
    r.ok = r.x.f != nullptr;
#endif
    if (!r.ok) {
      std::printf("%5d %5ld %5ld %5ld %5ld %3d %3d %10s\n", cd.first, static_cast<long>(s.batch), static_cast<long>(s.m),
                  static_cast<long>(s.n), static_cast<long>(s.k), s.ta, s.tb, "no kernel");
      complete = false;
      continue;
    }
    // Check one result against a plain loop so that a fast wrong kernel shows.
    r.run();
    double err = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < s.k; ++p)
          acc += static_cast<double>(A[static_cast<size_t>(s.ta ? p * s.lda + i : i * s.lda + p)]) *
                 B[static_cast<size_t>(s.tb ? j * s.ldb + p : p * s.ldb + j)];
        err = std::max(err, std::abs(acc - C[static_cast<size_t>(i * s.n + j)]));
      }
    if (err > 1e-3) std::printf("WRONG RESULT: max abs error %.3g\n", err);
    const double us = time_us(r);
    total += us * cd.first;
    std::printf("%5d %5ld %5ld %5ld %5ld %3d %3d %10.2f %8.1f\n", cd.first, static_cast<long>(s.batch),
                static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k), s.ta, s.tb, us,
                2.0 * static_cast<double>(s.batch * s.m * s.n * s.k) / us / 1e3);
  }
  std::printf("total over the program's dot_generals: %.1f us%s\n", total, complete ? "" : " (shapes without a kernel left out)");
}
