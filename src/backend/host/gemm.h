// The host's GEMMs, on kernels picked from what the CPU can do rather than
// from its model number. bench/results/2026-12-02-host-gemm-library.md has the
// measurements behind the choice:
//  - OpenBLAS, loaded at run time (dlopen) on first use, with the kernel set
//    picked from the CPU's feature flags (openblas_core_from_cpu_flags) when
//    the program put it into OPENBLAS_CORETYPE, which OpenBLAS reads once,
//    when it loads. Debian 12's OpenBLAS 0.3.21 picks by model number and
//    runs its SSE3 "Prescott" kernels on CPUs newer than itself (far slower
//    than the AVX-512 ones: bench/results/2026-12-02-host-gemm-library.md). The library
//    sets no environment variable (changing the environment races with any
//    other thread reading it): openblas_environment() in
//    capstep/backend_options.h says what it would ask for, and the programs
//    in tools/, examples/, bench/ and the tests' main put that into the
//    environment at the start of main where the user has not
//    (tools/env_options.h). A user's own OPENBLAS_CORETYPE wins.
//  - libxsmm's JIT (when built with it), for f32 GEMMs whose three matrices fit in 256 KiB: its
//    kernels are generated for the instruction set at hand and skip BLAS's
//    packing, which is most of the cost at these sizes. libxsmm 1.17 has no
//    kernel for a transposed B: gemm_batch hands those to OpenBLAS, and the
//    interpreter copies such a B transposed and asks for the untransposed
//    GEMM instead where gemm_nn_small_f32 says libxsmm takes it: into
//    column panels for one matrix (DotPlan::panel, which also takes an
//    untransposed B too large for L1), whole for a batch (DotPlan::pack_bt).
//  - oneDNN's gemm_bf16bf16f32 (libdnnl, loaded at run time like OpenBLAS,
//    when the CPU has AVX512_BF16 and oneDNN runs its bf16 kernels there) for
//    the GEMMs of bf16 operands: bf16 products summed in f32 by the CPU's
//    bf16 dot instruction (vdpbf16ps), about twice as fast as the f32 GEMM at
//    GPT-2's shapes (bench/gemm_bf16.cpp; neither Debian 12's OpenBLAS, built
//    without BUILD_BFLOAT16, nor libxsmm 1.17's bf16 kernels, which want A
//    in a VNNI layout and do not block for the cache, serve). Elsewhere the
//    bf16 operands are widened to f32 (exact) and multiplied by the f32
//    GEMM, which is the same f32 sum of the same exact products.
#pragma once

#include <cstdint>
#include <string>

#include "capstep/backend_options.h"  // OpenblasEnvironment

namespace capstep::host {

struct GemmInfo {
  std::string openblas;        // "OpenBLAS 0.3.21"
  std::string openblas_core;   // the kernel set OpenBLAS runs: "Cooperlake" (openblas_get_corename)
  std::string openblas_isa;    // its instruction set: "AVX-512", "AVX2", "AVX", "SSE3", ...
  std::string core_source;     // how that kernel set was chosen, in words
  std::string xsmm;            // "libxsmm 1.17 JIT, cpx (AVX-512)", or why it is not used
  std::string xsmm_isa;        // "AVX-512", "AVX2"; empty when libxsmm is not used
  bool xsmm_built = false;     // built with libxsmm (optional at configure time)
  std::string bf16;            // "oneDNN 2.6.3 gemm_bf16bf16f32 (AVX512_BF16)", or why bf16 GEMMs run in f32
  bool bf16_native = false;    // gemm_batch on bf16 operands runs bf16 kernels (gemm_bf16_native)
  std::string cpu;             // "Intel(R) Xeon(R) Processor, family 6 model 207"
  std::string line;            // all of it on one line, without the "GEMM: " prefix
};

// Loads OpenBLAS on first use (thread-safe); throws Error when it cannot.
// Every Interpreter makes that first use in its constructor, before any step
// runs. core_source says how the kernel set was chosen, from what the program
// told describe_openblas_environment (the library reads no environment): the
// user's OPENBLAS_CORETYPE, "from the CPU's flags" where the program set
// capstep's, or, where the program told nothing, whether OpenBLAS runs the
// set capstep would ask for and how to ask for it.
const GemmInfo& gemm_info();

// The OpenBLAS kernel set for this CPU's flags ("" = leave it to OpenBLAS),
// and the instruction set a kernel-set name stands for ("SSE3" for Prescott).
std::string openblas_core_from_cpu_flags();
std::string openblas_core_isa(const std::string& core);
bool isa_is_sse_only(const std::string& isa);   // "SSE2", "SSE3", "SSE4.2", "x87/MMX", ...

// GemmInfo::core_source's words: how OpenBLAS came to run the kernel set
// `core`, given what the program told (env), whether the program had loaded
// OpenBLAS itself before capstep did (preloaded), and the set capstep asks
// for (`mine`, openblas_core_from_cpu_flags; "" below AVX).
std::string openblas_core_source(const OpenblasEnvironment& env, bool preloaded, const std::string& mine,
                                 const std::string& core);

// Sets OpenBLAS to one thread, once per process, unless the program told
// that the user set OPENBLAS_NUM_THREADS (OpenblasEnvironment); loads it
// first. (configure_blas_threads in step.h calls this.)
void configure_gemm_threads();

// Row-major C[i] = op(A + a_off[i]) * op(B + b_off[i]) for i < batch, C's
// matrices packed one after another (ldc = n); alpha 1, beta 0. m, n, k >= 1.
void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const int64_t* a_off, const float* b, int64_t ldb, const int64_t* b_off, float* c, int64_t batch);
void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                const int64_t* a_off, const double* b, int64_t ldb, const int64_t* b_off, double* c, int64_t batch);
// The same with C's matrix i at c + c_off[i] (c_off null: at c + i * m * n)
// and its rows ldc apart (ldc <= 0: n): a result written in another layout.
void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const int64_t* a_off, const float* b, int64_t ldb, const int64_t* b_off, float* c,
                const int64_t* c_off, int64_t ldc, int64_t batch);
void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                const int64_t* a_off, const double* b, int64_t ldb, const int64_t* b_off, double* c,
                const int64_t* c_off, int64_t ldc, int64_t batch);

// Generates the kernel gemm_batch will use for this f32 shape (and C's ldc;
// <= 0: n) now, when it is a libxsmm one, so that running it later allocates
// nothing. Returns whether the shape runs on libxsmm.
bool gemm_prepare_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc = 0);

// Whether libxsmm takes the untransposed f32 GEMM of this shape (libxsmm
// usable, the three matrices within its size): where B is stored transposed,
// libxsmm has no kernel, and the caller may copy B transposed (transpose_f32,
// strided.h) and call gemm_batch untransposed instead.
bool gemm_nn_small_f32(int64_t m, int64_t n, int64_t k);

// Whether GEMMs of bf16 operands run on bf16 kernels (oneDNN on a CPU with
// AVX512_BF16; decided once per process): then the interpreter hands bf16
// operands to gemm_batch below as they are stored, else it widens them to f32
// and calls the f32 gemm_batch. Either way each element of C is an f32 sum
// of the K exact products of bf16 values (in an order the kernel picks).
bool gemm_bf16_native();

// gemm_batch on bf16 operands (uint16_t bit patterns) with an f32 C, as the
// f32 one above. Only where gemm_bf16_native(); throws Error otherwise.
// oneDNN runs each GEMM on the calling thread (its OpenMP thread count is
// set to 1 for each thread that calls this: the host's parts are the
// parallelism) and allocates its packing buffers on each call.
void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                const int64_t* a_off, const uint16_t* b, int64_t ldb, const int64_t* b_off, float* c,
                const int64_t* c_off, int64_t ldc, int64_t batch);

}  // namespace capstep::host
