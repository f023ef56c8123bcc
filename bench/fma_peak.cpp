// What this machine's cores can multiply-add right now: a register-only loop
// of independent FMA chains (12 accumulators, enough to cover the FMA latency
// on two ports), timed in short rounds on one core, then on every core at once.
// On a shared VM the figure moves from minute to minute (2026-12-01, the AMD
// EPYC development machine: medians of 75 to 101 GFLOP/s for one core), and
// every host timing moves with it; bench/results/2026-12-01-host-lane-speed.md, "Machine speed", reads the
// lane timings against it. Built by CMake as bench_fma_peak. Run:
// build/bench_fma_peak [rounds] (default 21); prints, per instruction set the
// CPU has (AVX2+FMA, AVX-512F), the median, fastest and slowest round in
// GFLOP/s (f32, 2 flops per lane per FMA).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

constexpr long kIters = 1 << 20;  // per round: 12 * kIters FMAs per lane set (~10-20 ms)

__attribute__((target("avx2,fma"))) double round_avx2() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += _mm256_cvtss_f32(a[i]);
  if (sink == 12345.0f) std::puts("");  // keeps the chains alive
  return 12.0 * kIters * 8 * 2 / s / 1e9;
}

__attribute__((target("avx512f"))) double round_avx512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  alignas(64) float lane[16];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lane, a[i]);
    sink += lane[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 12.0 * kIters * 16 * 2 / s / 1e9;
}

void report(const char* what, std::vector<double> g) {
  std::sort(g.begin(), g.end());
  std::printf("%-34s median %6.1f  fastest %6.1f  slowest %6.1f GFLOP/s\n", what, g[g.size() / 2], g.back(), g.front());
}

void measure(const char* isa, double (*round)(), int rounds, int threads) {
  std::vector<double> one;
  for (int r = 0; r < rounds; ++r) one.push_back(round());
  char what[96];
  std::snprintf(what, sizeof what, "%s, one core:", isa);
  report(what, one);
  if (threads < 2) return;
  std::vector<std::vector<double>> each(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) each[static_cast<size_t>(t)].push_back(round());
    });
  for (std::thread& t : pool) t.join();
  for (int t = 0; t < threads; ++t) {
    std::snprintf(what, sizeof what, "%s, %d cores at once, core %d:", isa, threads, t);
    report(what, each[static_cast<size_t>(t)]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  const int threads = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  bool any = false;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    measure("AVX2+FMA (8 lanes)", &round_avx2, rounds, threads);
    any = true;
  }
  if (__builtin_cpu_supports("avx512f")) {
    measure("AVX-512F (16 lanes)", &round_avx512, rounds, threads);
    any = true;
  }
  if (!any) std::printf("this CPU has neither AVX2+FMA nor AVX-512F: nothing to measure\n");
  return 0;
}
#else
int main() {
  std::printf("bench_fma_peak measures x86 FMA units only\n");
  return 0;
}
#endif
