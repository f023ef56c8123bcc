// The host's GEMMs: OpenBLAS loaded at run time with a kernel set picked from
// the CPU's flags, libxsmm's JIT for small f32 ones, oneDNN (loaded at run
// time) for bf16 ones on CPUs with AVX512_BF16. See gemm.h for why, and
// bench/results/2026-12-02-host-gemm-library.md for the measurements.
#include "backend/host/gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>

#include <cblas.h>

// Set by CMake when libxsmm was found.
#ifndef CAPSTEP_HAVE_LIBXSMM
#define CAPSTEP_HAVE_LIBXSMM 0
#endif
#if CAPSTEP_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CAPSTEP_X86 1
#endif

#include "capstep/backend_options.h"
#include "capstep/ir.h"

// Set by CMake from the library it found: the file name to dlopen (found
// through the loader's search path, LD_LIBRARY_PATH included) and, failing
// that, the absolute path it was found at.
#ifndef CAPSTEP_OPENBLAS_SONAME
#define CAPSTEP_OPENBLAS_SONAME "libopenblas.so.0"
#endif
#ifndef CAPSTEP_OPENBLAS_PATH
#define CAPSTEP_OPENBLAS_PATH ""
#endif
// The same for oneDNN (optional: CMake sets them when it finds libdnnl; the
// soname is tried either way).
#ifndef CAPSTEP_DNNL_SONAME
#define CAPSTEP_DNNL_SONAME "libdnnl.so.2"
#endif
#ifndef CAPSTEP_DNNL_PATH
#define CAPSTEP_DNNL_PATH ""
#endif

namespace capstep::host {
namespace {

// The three matrices of a GEMM that goes to libxsmm fit in this many bytes
// (half of a 512 KiB L2): at the seed's sizes (at most 224 KiB) libxsmm beats
// OpenBLAS, at a few MiB it loses, since its kernels do not block for the
// cache (bench/results/2026-12-01-host-lane-speed.md).
constexpr int64_t kSmallBytes = 256 * 1024;

struct Cpu {
  std::string brand;
  int family = 0, model = 0;
  bool avx = false, avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false,
       avx512dq = false, avx512bf16 = false;
};

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

Cpu read_cpu() {
  Cpu c;
#ifdef CAPSTEP_X86
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  c.avx = __builtin_cpu_supports("avx");
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
  c.avx512dq = __builtin_cpu_supports("avx512dq");
  c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &cx, &d)) {
    c.family = static_cast<int>((a >> 8) & 0xf);
    c.model = static_cast<int>((a >> 4) & 0xf);
    if (c.family == 0xf) c.family += static_cast<int>((a >> 20) & 0xff);
    if (c.family == 6 || c.family >= 0xf) c.model |= static_cast<int>(((a >> 16) & 0xf) << 4);
  }
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      unsigned r[4];
      __get_cpuid(0x80000002 + i, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * i, r, 16);
    }
    c.brand = trim(brand);
  }
#endif
  if (c.brand.empty()) c.brand = "unknown CPU";
  return c;
}

const Cpu& cpu() {
  static const Cpu c = read_cpu();
  return c;
}

bool equal_nocase(const std::string& x, const std::string& y) {
  return x.size() == y.size() &&
         std::equal(x.begin(), x.end(), y.begin(), [](char p, char q) { return std::tolower(p) == std::tolower(q); });
}

// ---- OpenBLAS, through dlopen -------------------------------------------------
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  bool user_num_threads = false;  // the user chose OpenBLAS's thread count (OpenblasEnvironment)
  GemmInfo info;
};

template <class F>
F symbol(void* h, const char* name) {
  void* p = dlsym(h, name);
  if (p == nullptr)
    throw Error(std::string("host GEMM: the OpenBLAS library that was loaded has no ") + name +
                " (is it OpenBLAS? capstep needs Debian's libopenblas0-pthread or another OpenBLAS build)");
  return reinterpret_cast<F>(p);
}

// How the program set OpenBLAS's environment up (describe_openblas_environment),
// and whether OpenBLAS has loaded since, after which it no longer matters.
struct Told {
  std::mutex mutex;
  OpenblasEnvironment env;
  bool loaded = false;
};

Told& told() {
  static Told t;
  return t;
}

}  // namespace

std::string openblas_core_source(const OpenblasEnvironment& env, bool preloaded, const std::string& mine,
                                 const std::string& core) {
  if (preloaded) return "OpenBLAS was loaded by the program before capstep could choose";
  const bool same = equal_nocase(mine, core);
  if (!env.applied) {
    // The library reads no environment: OPENBLAS_CORETYPE may or may not be
    // set, and the program did not say.
    if (mine.empty()) return "OpenBLAS's own choice";
    if (same) return "the set capstep asks for; the program did not say whether it set OPENBLAS_CORETYPE";
    return "OpenBLAS's own choice or an OPENBLAS_CORETYPE capstep was not told of; capstep would ask for " + mine +
           ": set OPENBLAS_CORETYPE=" + mine + " before the program starts, see docs/cli.md";
  }
  if (!env.user_coretype.empty()) return "OPENBLAS_CORETYPE=" + env.user_coretype + " from the environment";
  if (mine.empty()) return "OpenBLAS's own choice";
  if (same) return "from the CPU's flags";
  return "from the CPU's flags, asked for " + mine + ", OpenBLAS chose " + core;
}

namespace {

Blas* load_blas() {
  auto b = std::make_unique<Blas>();
  GemmInfo& info = b->info;
  const Cpu& c = cpu();
  info.cpu = c.brand + " (family " + std::to_string(c.family) + ", model " + std::to_string(c.model) + ")";

  // From here on the environment OpenBLAS sees is fixed: a later
  // describe_openblas_environment changes nothing.
  OpenblasEnvironment env;
  {
    std::lock_guard<std::mutex> lock(told().mutex);
    env = told().env;
    told().loaded = true;
  }
  // OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS once, in its
  // constructor, i.e. inside this dlopen: what the program put into the
  // environment at its start (openblas_environment) is what it gets. Linked
  // instead of loaded here, its constructor would run before main, too early
  // for that.
  void* h = dlopen(CAPSTEP_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  const bool preloaded = h != nullptr;
  if (h == nullptr) {
    std::string errors;
    for (const char* name : {CAPSTEP_OPENBLAS_SONAME, CAPSTEP_OPENBLAS_PATH}) {
      if (*name == '\0') continue;
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      const char* e = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
    }
    if (h == nullptr)
      throw Error("host GEMM: cannot load OpenBLAS (" + errors +
                  "); on Debian 12 install libopenblas0-pthread (scripts/install-deps does)");
  }
  b->sgemm = symbol<decltype(&cblas_sgemm)>(h, "cblas_sgemm");
  b->dgemm = symbol<decltype(&cblas_dgemm)>(h, "cblas_dgemm");
  b->set_num_threads = symbol<decltype(&openblas_set_num_threads)>(h, "openblas_set_num_threads");
  b->user_num_threads = env.user_num_threads;
  const char* core = symbol<decltype(&openblas_get_corename)>(h, "openblas_get_corename")();
  const char* config = symbol<decltype(&openblas_get_config)>(h, "openblas_get_config")();
  info.openblas_core = core ? trim(core) : "unknown";
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21"
  const std::string cfg = config ? config : "OpenBLAS";
  size_t sp = cfg.find(' ');
  if (sp != std::string::npos) sp = cfg.find(' ', sp + 1);
  info.openblas = cfg.substr(0, sp);
  info.openblas_isa = openblas_core_isa(info.openblas_core);
  info.core_source = openblas_core_source(env, preloaded, openblas_core_from_cpu_flags(), info.openblas_core);
  return b.release();  // lives as long as the process, like the library
}

Blas& blas() {
  static Blas* b = load_blas();  // a throw leaves it unset: the next call tries again
  return *b;
}

// ---- libxsmm ------------------------------------------------------------------
#if CAPSTEP_HAVE_LIBXSMM
std::string xsmm_isa(int id) {
  if (id >= LIBXSMM_X86_AVX512) return "AVX-512";
  if (id >= LIBXSMM_X86_AVX2) return "AVX2";
  if (id >= LIBXSMM_X86_AVX) return "AVX";
  if (id >= LIBXSMM_X86_SSE4) return "SSE4.2";
  if (id >= LIBXSMM_X86_SSE3) return "SSE3";
  return "no JIT";
}

struct Xsmm {
  bool usable = false;
  bool avx512 = false;  // its kernels are AVX-512 ones: see each_chain_piece
  std::string arch, isa, about;
};

const Xsmm& xsmm() {
  static const Xsmm x = [] {
    Xsmm r;
    libxsmm_init();
    const int id = libxsmm_get_target_archid();
    const char* arch = libxsmm_get_target_arch();
    r.arch = arch ? arch : "?";
    r.isa = xsmm_isa(id);
    // Measured only against AVX2 and AVX-512 OpenBLAS kernels; below AVX2
    // OpenBLAS does all GEMMs.
    r.usable = id >= LIBXSMM_X86_AVX2;
    r.avx512 = id >= LIBXSMM_X86_AVX512;
    const std::string name = std::string("libxsmm ") + LIBXSMM_VERSION;
    if (r.usable)
      r.about = name + " JIT, " + r.arch + " (" + r.isa + "), for GEMMs up to " + std::to_string(kSmallBytes / 1024) +
                " KiB";
    else
      r.about = name + " not used (its target here is " + r.arch + ", below AVX2)";
    return r;
  }();
  return x;
}

// Every f32 GEMM capstep hands to libxsmm computes each element of C as one
// chain of fused multiply-adds over k in order, c = fma(a[i,k-1], b[k-1,j],
// ... fma(a[i,0], b[0,j], 0)): then a GEMM gives the same bits whether it runs
// whole, in column panels (DotPlan::panel) or in row parts, on any kernel set,
// which is what makes fused and unfused steps agree bit for bit (the two can
// plan one dot_general with B in different layouts, so one in panels).
// libxsmm 1.17's AVX2 kernels are such chains for every shape. Its AVX-512
// ones (skx, clx, cpx) are not where a block of C is one vector wide (at most
// 16 columns) and has few accumulators: C's last n % 64 columns when n > 64
// and n % 64 is 1 to 16, and a C of at most 16 columns and 2 to 11 rows.
// There they keep several partial sums over k and add them at the end. So on
// AVX-512 such a GEMM runs in pieces that are chains: the first n - n % 64
// columns, then the rest; and a piece of at most 16 columns and 2 to 11 rows
// one row at a time. HostGemm.EveryLibxsmmGemmIsOneFmaChain sweeps shapes on
// whichever target libxsmm runs (scripts/test runs it on each).
struct Piece {
  int64_t row, rows, col, cols;
};

constexpr int kMaxPieces = 2 * 11;  // two column ranges, each at most 11 rows of one

// Calls f(Piece) for each piece of an m x n C, in order (at most kMaxPieces);
// stops at the first false and returns it.
template <class F>
bool each_chain_piece(int64_t m, int64_t n, F&& f) {
  if (!xsmm().avx512) return f(Piece{0, m, 0, n});
  const int64_t tail = n > 64 && n % 64 >= 1 && n % 64 <= 16 ? n % 64 : 0;
  for (const auto& [col, cols] : {std::pair<int64_t, int64_t>{0, n - tail}, {n - tail, tail}}) {
    if (cols == 0) continue;
    if (cols <= 16 && m >= 2 && m <= 11) {
      for (int64_t i = 0; i < m; ++i)
        if (!f(Piece{i, 1, col, cols})) return false;
    } else if (!f(Piece{0, m, col, cols})) {
      return false;
    }
  }
  return true;
}

bool small_enough(bool tb, int64_t m, int64_t n, int64_t k) {
  return !tb && (m * k + k * n + m * n) * static_cast<int64_t>(sizeof(float)) <= kSmallBytes;
}

// Row-major C[m,n] = op(A) B is column-major C^T[n,m] = B^T op(A)^T: libxsmm,
// which is column-major, takes B first. A transposed A is its TRANS_B.
// C's leading dimension is ldc (n when C is a whole matrix).
libxsmm_smmfunction xsmm_kernel(bool ta, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if (!xsmm().usable) return nullptr;
  const libxsmm_blasint xa = static_cast<libxsmm_blasint>(ldb), xb = static_cast<libxsmm_blasint>(lda),
                        xc = static_cast<libxsmm_blasint>(ldc);
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  return libxsmm_smmdispatch(static_cast<libxsmm_blasint>(n), static_cast<libxsmm_blasint>(m),
                             static_cast<libxsmm_blasint>(k), &xa, &xb, &xc, &alpha, &beta, &flags, nullptr);
}
#else
struct Xsmm {
  bool usable = false;
  std::string arch, isa, about = "libxsmm not built in (libxsmm-dev was missing at configure time)";
};
const Xsmm& xsmm() {
  static const Xsmm x;
  return x;
}
#endif


// ---- oneDNN, through dlopen: the bf16 GEMMs ----------------------------------
// Declared here rather than from oneDNN's headers, which leave out
// dnnl_gemm_bf16bf16f32 (libdnnl exports it, row-major like dnnl_sgemm:
// C = alpha op(A) op(B) + beta C, leading dimensions in elements).
using DnnlGemmBf16 = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                             const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                             int64_t ldc);
struct DnnlVersion {  // dnnl_version_t
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
// dnnl_cpu_isa_avx512_core_bf16: the bits of the ISAs oneDNN runs bf16
// kernels on (AMX's values include them).
constexpr unsigned kDnnlIsaAvx512Bf16 = 0xe7;

struct Dnnl {
  DnnlGemmBf16 gemm = nullptr;  // null: bf16 GEMMs run in f32 on widened operands
  void (*omp_set_num_threads)(int) = nullptr;
  std::string about;
};

const Dnnl& dnnl() {
  static const Dnnl d = [] {
    Dnnl r;
    if (!cpu().avx512bf16) {
      r.about = "bf16 GEMMs in f32 on widened operands (the CPU has no AVX512_BF16)";
      return r;
    }
    void* h = nullptr;
    for (const char* name : {CAPSTEP_DNNL_SONAME, CAPSTEP_DNNL_PATH}) {
      if (*name != '\0' && (h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (h == nullptr) {
      r.about = std::string("bf16 GEMMs in f32 on widened operands (no oneDNN: ") + CAPSTEP_DNNL_SONAME +
                " not found; on Debian 12 install libdnnl-dev)";
      return r;
    }
    auto gemm = reinterpret_cast<DnnlGemmBf16>(dlsym(h, "dnnl_gemm_bf16bf16f32"));
    auto version = reinterpret_cast<const DnnlVersion* (*)()>(dlsym(h, "dnnl_version"));
    auto isa = reinterpret_cast<int (*)()>(dlsym(h, "dnnl_get_effective_cpu_isa"));
    // dlsym on the handle searches oneDNN's dependencies too: its OpenMP runtime.
    r.omp_set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "omp_set_num_threads"));
    if (gemm == nullptr || version == nullptr || isa == nullptr) {
      r.about = "bf16 GEMMs in f32 on widened operands (the oneDNN loaded has no dnnl_gemm_bf16bf16f32)";
      return r;
    }
    const DnnlVersion* v = version();
    const std::string name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                             std::to_string(v->patch);
    // oneDNN's own choice, which DNNL_MAX_CPU_ISA can lower (scripts/test-kernel-sets does).
    if ((static_cast<unsigned>(isa()) & kDnnlIsaAvx512Bf16) != kDnnlIsaAvx512Bf16) {
      r.about = "bf16 GEMMs in f32 on widened operands (" + name +
                " runs below AVX512_BF16 here, as DNNL_MAX_CPU_ISA can ask)";
      return r;
    }
    r.gemm = gemm;
    r.about = "bf16 GEMMs: " + name + " gemm_bf16bf16f32 (AVX512_BF16)";
    return r;
  }();
  return d;
}

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

std::string openblas_core_from_cpu_flags() {
  const Cpu& c = cpu();
  // SkylakeX's kernels need F, BW, VL and DQ; Cooperlake's are those plus
  // BF16 (and ran fastest on the AVX512_BF16 CPU of
  // bench/results/2026-12-02-host-gemm-library.md).
  if (c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq) return c.avx512bf16 ? "Cooperlake" : "SkylakeX";
  if (c.avx2 && c.fma) return "Haswell";
  if (c.avx) return "Sandybridge";
  return "";
}

std::string openblas_core_isa(const std::string& core) {
  static const std::pair<const char*, const char*> table[] = {
      {"SapphireRapids", "AVX-512"}, {"Cooperlake", "AVX-512"}, {"SkylakeX", "AVX-512"},
      {"Haswell", "AVX2"},           {"Zen", "AVX2"},           {"Excavator", "AVX2"},
      {"Sandybridge", "AVX"},        {"Bulldozer", "AVX"},      {"Piledriver", "AVX"},
      {"Steamroller", "AVX"},        {"Nehalem", "SSE4.2"},     {"Penryn", "SSE4.1"},
      {"Dunnington", "SSE4.1"},      {"Core2", "SSSE3"},        {"Atom", "SSSE3"},
      {"Prescott", "SSE3"},          {"Opteron_SSE3", "SSE3"},  {"Barcelona", "SSE3"},
      {"Bobcat", "SSE3"},            {"Nano", "SSE3"},          {"Opteron", "SSE2"},
      {"Athlon", "SSE2"},            {"Northwood", "SSE2"},     {"Banias", "SSE2"},
      {"Coppermine", "SSE"},         {"Katmai", "SSE"},
  };
  for (const auto& [name, isa] : table)
    if (equal_nocase(core, name)) return isa;
  return "unknown";
}

bool isa_is_sse_only(const std::string& isa) {
  return isa.rfind("SSE", 0) == 0 || isa.rfind("SSSE", 0) == 0 || isa == "no JIT";
}

// The thread count: OpenBLAS starts its worker threads when it loads, one per
// further core (or as OPENBLAS_NUM_THREADS, then GOTO_NUM_THREADS, then
// OMP_NUM_THREADS say), and each spins (sched_yield) for a while after
// start-up even when openblas_set_num_threads(1) follows
// (configure_gemm_threads), competing with the host pool's threads for the
// cores (bench/results/2026-12-01-host-lane-speed.md measures it). Only the variable
// keeps them from starting.
std::vector<EnvVariable> openblas_environment() {
  std::vector<EnvVariable> v;
  if (std::string core = openblas_core_from_cpu_flags(); !core.empty()) v.push_back({"OPENBLAS_CORETYPE", core});
  v.push_back({"OPENBLAS_NUM_THREADS", "1"});
  return v;
}

bool describe_openblas_environment(const OpenblasEnvironment& e) {
  std::lock_guard<std::mutex> lock(told().mutex);
  if (told().loaded) return false;
  told().env = e;
  return true;
}

const GemmInfo& gemm_info() {
  static const GemmInfo info = [] {
    GemmInfo i = blas().info;
    const Xsmm& x = xsmm();
    i.xsmm = x.about;
    i.xsmm_isa = x.usable ? x.isa : "";
    i.xsmm_built = CAPSTEP_HAVE_LIBXSMM != 0;
    i.bf16 = dnnl().about;
    i.bf16_native = dnnl().gemm != nullptr;
    i.line = i.openblas + ", " + i.openblas_core + " kernels (" + i.openblas_isa + ", " + i.core_source + "); " +
             i.xsmm + "; " + i.bf16 + "; CPU: " + i.cpu;
    return i;
  }();
  return info;
}

void configure_gemm_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The step's matrices are tiny (64x128x128 and smaller): OpenBLAS's worker
    // threads cost more in wake-ups and sched_yield spinning than they save
    // (lane 1 runs faster with one of them), and
    // results then do not depend on the thread count either. A user who sets
    // OPENBLAS_NUM_THREADS keeps their choice, as the program told
    // (describe_openblas_environment). This is process-wide. Where the
    // program put OPENBLAS_NUM_THREADS=1 into the environment, OpenBLAS
    // started none and this changes nothing; where it did not, its workers
    // were started when it loaded and are idle from here on.
    Blas& b = blas();
    if (!b.user_num_threads) b.set_num_threads(1);
  });
}

bool gemm_prepare_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  blas();
#if CAPSTEP_HAVE_LIBXSMM
  if (!small_enough(tb, m, n, k)) return false;
  if (ldc <= 0) ldc = n;
  return each_chain_piece(m, n, [&](const Piece& p) {
    return xsmm_kernel(ta, p.rows, p.cols, k, lda, ldb, ldc) != nullptr;
  });
#else
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)lda, (void)ldb, (void)ldc;
  return false;
#endif
}

namespace {

// The batch as one OpenBLAS call (cblas_sgemm or cblas_dgemm) per matrix.
template <class T, class Gemm>
void blas_batch(Gemm gemm, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const int64_t* a_off, const T* b, int64_t ldb, const int64_t* b_off, T* c, const int64_t* c_off,
                int64_t ldc, int64_t batch) {
  if (ldc <= 0) ldc = n;
  for (int64_t i = 0; i < batch; ++i)
    gemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), T(1),
         a + a_off[i], static_cast<blasint>(lda), b + b_off[i], static_cast<blasint>(ldb), T(0),
         c + (c_off ? c_off[i] : i * m * n), static_cast<blasint>(ldc));
}

}  // namespace

void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const int64_t* a_off,
                const float* b, int64_t ldb, const int64_t* b_off, float* c, const int64_t* c_off, int64_t ldc,
                int64_t batch) {
  const int64_t mn = m * n;
  if (ldc <= 0) ldc = n;
#if CAPSTEP_HAVE_LIBXSMM
  if (small_enough(tb, m, n, k)) {
    // One look-up in libxsmm's registry (tens of ns) per piece (one piece
    // but for the shapes each_chain_piece splits); the kernels were generated
    // when the step was planned (gemm_prepare_f32).
    Piece piece[kMaxPieces];
    libxsmm_smmfunction fn[kMaxPieces];
    int pieces = 0;
    const bool all = each_chain_piece(m, n, [&](const Piece& p) {
      piece[pieces] = p;
      fn[pieces] = xsmm_kernel(ta, p.rows, p.cols, k, lda, ldb, ldc);
      return fn[pieces++] != nullptr;
    });
    if (all) {
      for (int64_t i = 0; i < batch; ++i) {
        const float *ai = a + a_off[i], *bi = b + b_off[i];
        float* ci = c + (c_off ? c_off[i] : i * mn);
        // A's row r starts at a + r * lda, or at a + r when A is stored transposed.
        for (int q = 0; q < pieces; ++q)
          fn[q](bi + piece[q].col, ai + (ta ? piece[q].row : piece[q].row * lda), ci + piece[q].row * ldc + piece[q].col);
      }
      return;
    }
  }
#endif
  blas_batch(blas().sgemm, ta, tb, m, n, k, a, lda, a_off, b, ldb, b_off, c, c_off, ldc, batch);
}

void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const int64_t* a_off,
                const float* b, int64_t ldb, const int64_t* b_off, float* c, int64_t batch) {
  gemm_batch(ta, tb, m, n, k, a, lda, a_off, b, ldb, b_off, c, nullptr, n, batch);
}

bool gemm_nn_small_f32(int64_t m, int64_t n, int64_t k) {
#if CAPSTEP_HAVE_LIBXSMM
  return xsmm().usable && small_enough(false, m, n, k);
#else
  (void)m, (void)n, (void)k;
  return false;
#endif
}

bool gemm_bf16_native() { return dnnl().gemm != nullptr; }

void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                const int64_t* a_off, const uint16_t* b, int64_t ldb, const int64_t* b_off, float* c,
                const int64_t* c_off, int64_t ldc, int64_t batch) {
  const Dnnl& d = dnnl();
  if (d.gemm == nullptr) throw Error("host GEMM: internal: a bf16 GEMM without bf16 kernels (" + d.about + ")");
  // One OpenMP thread for oneDNN on each thread that calls it (the setting
  // is the calling thread's own): the host's parts already share the cores.
  thread_local bool one_thread = false;
  if (!one_thread) {
    if (d.omp_set_num_threads != nullptr) d.omp_set_num_threads(1);
    one_thread = true;
  }
  if (ldc <= 0) ldc = n;
  for (int64_t i = 0; i < batch; ++i) {
    const int status = d.gemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a + a_off[i], lda, b + b_off[i], ldb,
                              0.0f, c + (c_off ? c_off[i] : i * m * n), ldc);
    if (status != 0)
      throw Error("host GEMM: oneDNN's gemm_bf16bf16f32 failed (status " + std::to_string(status) + ") on " +
                  std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  }
}

void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const int64_t* a_off,
                const double* b, int64_t ldb, const int64_t* b_off, double* c, const int64_t* c_off, int64_t ldc,
                int64_t batch) {
  blas_batch(blas().dgemm, ta, tb, m, n, k, a, lda, a_off, b, ldb, b_off, c, c_off, ldc, batch);
}

void gemm_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const int64_t* a_off,
                const double* b, int64_t ldb, const int64_t* b_off, double* c, int64_t batch) {
  gemm_batch(ta, tb, m, n, k, a, lda, a_off, b, ldb, b_off, c, nullptr, n, batch);
}

}  // namespace capstep::host
