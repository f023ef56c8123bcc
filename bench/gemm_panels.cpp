// B in panels: each single-matrix GEMM shape of the seed step (one thread,
// libxsmm), B read in place against B copied into contiguous K x w column
// panels (the copy timed with it), w = 64, 32, 16. This is the measurement
// behind DotPlan::panel (src/backend/host/step.h); bench/results/2026-12-01-host-lane-speed.md, "B in
// panels", has a run. Built by CMake as bench_gemm_panels (without libxsmm it
// times OpenBLAS, which copies B itself). Run: build/bench_gemm_panels
// [rounds]. Per shape, the variants run interleaved (50 calls each, `rounds`
// times, default 41); it prints the median and the fastest round, in us per
// GEMM, and GFLOP/s of the median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "../tools/env_options.h"  // apply_openblas_environment, as the capstep command does
#include "backend/host/gemm.h"

using capstep::host::gemm_batch;
using capstep::host::gemm_prepare_f32;

int main(int argc, char** argv) {
  capstep::env::apply_openblas_environment();  // capstep's OpenBLAS kernel set and one thread, before it loads
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 41;
  struct Shape {
    bool ta;
    int m, n, k;
  };
  // The seed step's single-matrix dot_generals (A transposed: weight gradients).
  const Shape shapes[] = {{false, 64, 128, 128}, {false, 64, 256, 128}, {false, 64, 128, 256}, {true, 128, 128, 64},
                          {true, 128, 256, 64},  {true, 256, 128, 64},  {false, 64, 64, 128},  {true, 128, 64, 64},
                          {false, 16, 128, 128}, {false, 32, 128, 128}};
  std::vector<float> A(256 * 256), B(256 * 256), C(256 * 256), P(256 * 256);
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 97) / 97.0f, B[i] = static_cast<float>(i % 89) / 89.0f;
  std::printf("%-16s %-24s %-24s %-24s %-24s\n", "GEMM (M N K)", "B in place", "panels of 64", "panels of 32",
              "panels of 16");
  for (const Shape s : shapes) {
    const int lda = s.ta ? s.m : s.k, ldb = s.n;
    const int64_t zero = 0;
    const int widths[4] = {s.n, 64, 32, 16};
    std::vector<std::function<void()>> run;
    gemm_prepare_f32(s.ta, false, s.m, s.n, s.k, lda, ldb, s.n);
    run.emplace_back([&] { gemm_batch(s.ta, false, s.m, s.n, s.k, A.data(), lda, &zero, B.data(), ldb, &zero, C.data(), nullptr, s.n, 1); });
    for (int v = 1; v < 4; ++v) {
      const int w = widths[v];
      gemm_prepare_f32(s.ta, false, s.m, w, s.k, lda, w, s.n);
      run.emplace_back([&, w] {
        for (int j = 0; j < s.n; j += w) {
          for (int r = 0; r < s.k; ++r) std::copy_n(B.data() + r * ldb + j, w, P.data() + r * w);
          gemm_batch(s.ta, false, s.m, w, s.k, A.data(), lda, &zero, P.data(), w, &zero, C.data() + j, nullptr, s.n, 1);
        }
      });
    }
    std::vector<std::vector<double>> t(run.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t v = 0; v < run.size(); ++v) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 50; ++i) run[v]();
        t[v].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 50);
      }
    char name[64];
    std::snprintf(name, sizeof name, "%s%d %d %d", s.ta ? "TA " : "", s.m, s.n, s.k);
    std::printf("%-16s", name);
    for (auto& x : t) {
      std::sort(x.begin(), x.end());
      const double med = x[x.size() / 2];
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.2f (%.2f) %.0f GF", med, x[0], 2.0 * s.m * s.n * s.k / med / 1e3);
      std::printf(" %-24s", cell);
    }
    std::printf("\n");
  }
}
