// The host's GEMM libraries (src/backend/host/gemm.h): on a CPU with AVX2 or
// AVX-512 the kernels that run are not SSE-only ones, whatever the CPU's model
// number; and both paths (OpenBLAS, libxsmm's JIT) compute what a plain triple
// loop computes, transposed operands, padded rows and batches included.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/host/gemm.h"
#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "backend/host/strided.h"
#include "backend/host/interpreter.h"

using namespace capstep;

namespace {

bool has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

TEST(HostGemm, CoreNamesMapToTheirInstructionSets) {
  for (const char* sse : {"Prescott", "Core2", "Nehalem", "Atom", "Penryn", "Dunnington", "Katmai", "Northwood",
                          "Opteron", "Barcelona", "PRESCOTT"})
    EXPECT_TRUE(host::isa_is_sse_only(host::openblas_core_isa(sse))) << sse;
  for (const char* wide : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Sandybridge"})
    EXPECT_FALSE(host::isa_is_sse_only(host::openblas_core_isa(wide))) << wide;
  EXPECT_EQ(host::openblas_core_isa("SkylakeX"), "AVX-512");
  EXPECT_EQ(host::openblas_core_isa("Haswell"), "AVX2");
}

TEST(HostGemm, KernelsAreNotSseOnlyOnAnAvx2OrAvx512Cpu) {
  const host::GemmInfo& g = host::gemm_info();
  std::printf("GEMM: %s\n", g.line.c_str());
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: SSE kernels are all there is";

  // The choice made from the flags alone, whatever the environment says.
  const std::string mine = host::openblas_core_from_cpu_flags();
  EXPECT_EQ(host::openblas_core_isa(mine), has_avx512() ? "AVX-512" : "AVX2") << mine;

  // What OpenBLAS actually runs. The tests' main (tests/test_main.cpp), as
  // the capstep command, put capstep's choice into OPENBLAS_CORETYPE unless
  // the user (or the machine) had set one, which wins: then the variable
  // holds theirs, and only an SSE-only one given that way is not capstep's
  // doing.
  const std::string forced = env("OPENBLAS_CORETYPE");
  if (!forced.empty() && host::isa_is_sse_only(host::openblas_core_isa(forced)))
    GTEST_SKIP() << "OPENBLAS_CORETYPE=" << forced << " in the environment asks for SSE kernels";
  EXPECT_FALSE(host::isa_is_sse_only(g.openblas_isa)) << g.line;
  EXPECT_NE(g.openblas_isa, "unknown") << g.line;
  if (g.core_source.rfind("OPENBLAS_CORETYPE=", 0) == 0) {
    EXPECT_EQ(g.core_source, "OPENBLAS_CORETYPE=" + forced + " from the environment") << g.line;
  } else {
    EXPECT_EQ(g.core_source, "from the CPU's flags") << g.line;
    EXPECT_EQ(forced, mine);
    EXPECT_EQ(g.openblas_isa, has_avx512() ? "AVX-512" : "AVX2") << g.line;
    EXPECT_EQ(g.openblas_core, mine) << g.line;
  }

  // libxsmm picks its target from the CPU's flags itself (LIBXSMM_TARGET overrides).
  if (g.xsmm_built && env("LIBXSMM_TARGET").empty()) {
    ASSERT_FALSE(g.xsmm_isa.empty()) << g.line;
    EXPECT_FALSE(host::isa_is_sse_only(g.xsmm_isa)) << g.line;
    EXPECT_EQ(g.xsmm_isa, has_avx512() ? "AVX-512" : "AVX2") << g.line;
  }
  EXPECT_EQ(g.line.find("Prescott"), std::string::npos) << g.line;
}

// ---- OpenBLAS's environment: computed by the library, set by the program -----

TEST(HostGemm, CapstepAsksForItsKernelSetAndOneThread) {
  const std::vector<host::EnvVariable> v = host::openblas_environment();
  const std::string mine = host::openblas_core_from_cpu_flags();
  ASSERT_EQ(v.size(), mine.empty() ? 1u : 2u);
  if (!mine.empty()) {
    EXPECT_EQ(v[0].name, "OPENBLAS_CORETYPE");
    EXPECT_EQ(v[0].value, mine);
  }
  EXPECT_EQ(v.back().name, "OPENBLAS_NUM_THREADS");
  EXPECT_EQ(v.back().value, "1");
}

TEST(HostGemm, CoreSourceSaysHowTheKernelSetWasChosen) {
  using host::openblas_core_source;
  host::OpenblasEnvironment untold, applied, users;
  applied.applied = users.applied = true;
  users.user_coretype = "Haswell";
  EXPECT_EQ(openblas_core_source(applied, false, "SkylakeX", "SkylakeX"), "from the CPU's flags");
  EXPECT_EQ(openblas_core_source(applied, false, "Cooperlake", "SkylakeX"),
            "from the CPU's flags, asked for Cooperlake, OpenBLAS chose SkylakeX");
  EXPECT_EQ(openblas_core_source(applied, false, "", "Prescott"), "OpenBLAS's own choice");
  EXPECT_EQ(openblas_core_source(users, false, "SkylakeX", "Haswell"), "OPENBLAS_CORETYPE=Haswell from the environment");
  EXPECT_EQ(openblas_core_source(users, true, "SkylakeX", "Haswell"),
            "OpenBLAS was loaded by the program before capstep could choose");
  // A program that did not say (the library reads no environment): whether
  // OpenBLAS runs capstep's set, and how to ask for it where it does not.
  EXPECT_EQ(openblas_core_source(untold, false, "", "Prescott"), "OpenBLAS's own choice");
  EXPECT_EQ(openblas_core_source(untold, false, "SkylakeX", "SKYLAKEX"),
            "the set capstep asks for; the program did not say whether it set OPENBLAS_CORETYPE");
  const std::string own = openblas_core_source(untold, false, "SkylakeX", "Prescott");
  for (const char* part : {"OpenBLAS's own choice", "capstep would ask for SkylakeX",
                           "set OPENBLAS_CORETYPE=SkylakeX before the program starts", "docs/cli.md"})
    EXPECT_NE(own.find(part), std::string::npos) << part << " in: " << own;
}

TEST(HostGemm, ADescriptionAfterOpenblasLoadedIsRefusedAndChangesNothing) {
  host::gemm_info();  // loaded: what it was told then stays
  const std::string before = host::gemm_info().core_source;
  host::OpenblasEnvironment e;
  e.applied = true;
  e.user_coretype = "Prescott";
  EXPECT_FALSE(host::describe_openblas_environment(e));
  EXPECT_EQ(host::gemm_info().core_source, before);
}

// ---- results against a triple loop ------------------------------------------

struct Case {
  int64_t batch, m, n, k;
  bool ta, tb;
  int64_t pad;  // extra elements in each row of A and B (leading dimension > minimum)
};

template <class T>
void check(const Case& c, bool* used_xsmm) {
  SCOPED_TRACE(testing::Message() << (sizeof(T) == 4 ? "f32" : "f64") << " batch " << c.batch << " m " << c.m
                                  << " n " << c.n << " k " << c.k << " ta " << c.ta << " tb " << c.tb << " pad "
                                  << c.pad);
  // Stored A: m x k, or k x m when transposed; rows padded.
  const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad;
  const int64_t a_mat = a_rows * lda + 5, b_mat = b_rows * ldb + 3;  // matrices not back to back
  std::vector<T> a(static_cast<size_t>(a_mat * c.batch)), b(static_cast<size_t>(b_mat * c.batch));
  uint32_t s = 12345;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<T>(static_cast<int>(s >> 9) % 2001 - 1000) / T(997);
  };
  for (T& x : a) x = next();
  for (T& x : b) x = next();
  std::vector<int64_t> a_off, b_off;
  for (int64_t i = 0; i < c.batch; ++i) {
    a_off.push_back(i * a_mat);
    b_off.push_back((c.batch - 1 - i) * b_mat);  // any order
  }
  // beta is 0: whatever C held must not leak into the result.
  std::vector<T> out(static_cast<size_t>(c.batch * c.m * c.n), std::numeric_limits<T>::quiet_NaN());
  if constexpr (sizeof(T) == 4) *used_xsmm = host::gemm_prepare_f32(c.ta, c.tb, c.m, c.n, c.k, lda, ldb);
  host::gemm_batch(c.ta, c.tb, c.m, c.n, c.k, a.data(), lda, a_off.data(), b.data(), ldb, b_off.data(), out.data(),
                   c.batch);
  const double eps = sizeof(T) == 4 ? 1.2e-7 : 2.3e-16;
  int bad = 0;
  for (int64_t q = 0; q < c.batch; ++q)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double x = a[static_cast<size_t>(a_off[static_cast<size_t>(q)] + (c.ta ? p * lda + i : i * lda + p))];
          const double y = b[static_cast<size_t>(b_off[static_cast<size_t>(q)] + (c.tb ? j * ldb + p : p * ldb + j))];
          sum += x * y;
          mag += std::abs(x * y);
        }
        const double got = out[static_cast<size_t>((q * c.m + i) * c.n + j)];
        // A float sum of k terms is off by at most about k * eps * sum |terms|.
        if (!(std::abs(got - sum) <= 2.0 * static_cast<double>(c.k) * eps * mag + 1e-30) && bad++ < 5)
          ADD_FAILURE() << "C[" << q << "][" << i << "][" << j << "] = " << got << ", the loop says " << sum;
      }
  EXPECT_EQ(bad, 0);
}

TEST(HostGemm, MatchesATripleLoop) {
  // The seed step's shapes (libxsmm for the f32 ones with B not transposed)
  // and larger ones (OpenBLAS), each with every transpose.
  const Case shapes[] = {
      {1, 64, 128, 128, false, false, 0}, {16, 16, 32, 16, false, false, 0}, {16, 16, 16, 32, false, false, 0},
      {1, 128, 256, 64, false, false, 0}, {3, 5, 7, 3, false, false, 2},    {2, 1, 9, 4, false, false, 1},
      {1, 300, 257, 190, false, false, 0}, {2, 96, 130, 530, false, false, 3}, {1, 1, 1, 1, false, false, 0},
  };
  bool any_xsmm = false, any_blas = false;
  for (Case c : shapes)
    for (int t = 0; t < 4; ++t) {
      c.ta = t & 1;
      c.tb = (t >> 1) & 1;
      bool xsmm = false;
      check<float>(c, &xsmm);
      (xsmm ? any_xsmm : any_blas) = true;
      check<double>(c, &xsmm);
    }
  EXPECT_TRUE(any_blas);
  if (!host::gemm_info().xsmm_isa.empty()) {
    EXPECT_TRUE(any_xsmm) << host::gemm_info().line;
  }
}

// The same through the interpreter: attention-like batched dot_generals with
// transposed operands, the planned path end to end.
TEST(HostGemm, DotGeneralInTheInterpreter) {
  struct D {
    Shape lhs, rhs;
    std::vector<int64_t> lb, rb, lc, rc;
  };
  const D cases[] = {
      {{4, 4, 16, 32}, {4, 4, 16, 32}, {0, 1}, {0, 1}, {3}, {3}},  // scores: rhs transposed
      {{4, 4, 16, 16}, {4, 4, 16, 32}, {0, 1}, {0, 1}, {3}, {2}},  // values
      {{4, 4, 16, 16}, {4, 4, 16, 32}, {0, 1}, {0, 1}, {2}, {2}},  // lhs transposed
      {{4, 16, 128}, {4, 16, 256}, {}, {}, {0, 1}, {0, 1}},        // weight gradient: [128,256]
      {{4, 16, 256}, {128, 256}, {}, {}, {2}, {1}},                // input gradient through W^T
      // W^T copied transposed in 3 parts of columns (64, 64, 72 wide), K = 77:
      // the copy's 8 x 8 blocks and its ragged edges
      {{4, 25, 77}, {200, 77}, {}, {}, {2}, {1}},
      {{3, 7, 45}, {130, 45}, {}, {}, {2}, {1}},                   // one part, ragged
      {{3, 5, 9, 13}, {3, 5, 11, 13}, {0, 1}, {0, 1}, {3}, {3}},   // batched, ragged
      // B untransposed, copied into panels: 32, 32, 32 and 4 columns, one part
      {{40, 90}, {90, 100}, {}, {}, {1}, {0}},
      // 7 panels (the last 8 wide) in 3 parts (2, 2, 3 panels); A transposed
      {{96, 64}, {96, 200}, {}, {}, {0}, {0}},
      // panels with A copied first (M = 4 * 10 over axes that do not chain)
      {{4, 96, 10}, {96, 100}, {}, {}, {1}, {0}},
      {{40, 2}, {70, 2}, {}, {}, {1}, {1}},  // B transposed, K = 2: panels of 32, 32, 6 (K = 1 reads B in place)
  };
  for (const D& d : cases) {
    Program p;
    const int l = p.add_input("l", Type{DType::f32, d.lhs}), r = p.add_input("r", Type{DType::f32, d.rhs});
    Attrs at;
    at.lhs_batch = d.lb;
    at.rhs_batch = d.rb;
    at.lhs_contract = d.lc;
    at.rhs_contract = d.rc;
    p.add_output("o", p.add_eqn(Op::dot_general, {l, r}, at));
    Array lv(Type{DType::f32, d.lhs}), rv(Type{DType::f32, d.rhs});
    for (int64_t i = 0; i < lv.numel(); ++i) lv.set(i, static_cast<double>((i * 37) % 101 - 50) / 50.0);
    for (int64_t i = 0; i < rv.numel(); ++i) rv.set(i, static_cast<double>((i * 53) % 97 - 48) / 48.0);
    host::Interpreter it(p);
    std::vector<Array> out;
    it.run({&lv, &rv}, out);
    // Reference: batch, lhs free, rhs free, each as one index (row-major).
    const Shape& ls = d.lhs;
    const Shape& rs = d.rhs;
    auto prod = [](const Shape& s, const std::vector<int64_t>& axes) {
      int64_t n = 1;
      for (int64_t a : axes) n *= s[static_cast<size_t>(a)];
      return n;
    };
    std::vector<int64_t> lf, rf;
    for (int64_t a = 0; a < static_cast<int64_t>(ls.size()); ++a)
      if (std::find(d.lb.begin(), d.lb.end(), a) == d.lb.end() && std::find(d.lc.begin(), d.lc.end(), a) == d.lc.end())
        lf.push_back(a);
    for (int64_t a = 0; a < static_cast<int64_t>(rs.size()); ++a)
      if (std::find(d.rb.begin(), d.rb.end(), a) == d.rb.end() && std::find(d.rc.begin(), d.rc.end(), a) == d.rc.end())
        rf.push_back(a);
    const int64_t B = prod(ls, d.lb), M = prod(ls, lf), N = prod(rs, rf), K = prod(ls, d.lc);
    ASSERT_EQ(out[0].numel(), B * M * N);
    auto strides = [](const Shape& s) {
      std::vector<int64_t> st(s.size(), 1);
      for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
      return st;
    };
    const std::vector<int64_t> lst = strides(ls), rst = strides(rs);
    // Offset of flat index v over these axes (row-major over them).
    auto offset = [](int64_t v, const Shape& s, const std::vector<int64_t>& st, const std::vector<int64_t>& axes) {
      int64_t o = 0;
      for (size_t i = axes.size(); i-- > 0;) {
        const int64_t a = axes[i], n = s[static_cast<size_t>(a)];
        o += (v % n) * st[static_cast<size_t>(a)];
        v /= n;
      }
      return o;
    };
    int bad = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double sum = 0, mag = 0;
          for (int64_t q = 0; q < K; ++q) {
            const double x = lv.get(offset(b, ls, lst, d.lb) + offset(i, ls, lst, lf) + offset(q, ls, lst, d.lc));
            const double y = rv.get(offset(b, rs, rst, d.rb) + offset(j, rs, rst, rf) + offset(q, rs, rst, d.rc));
            sum += x * y;
            mag += std::abs(x * y);
          }
          const double got = out[0].get((b * M + i) * N + j);
          if (!(std::abs(got - sum) <= 2.0 * static_cast<double>(K) * 1.2e-7 * mag + 1e-30) && bad++ < 5)
            ADD_FAILURE() << "case lhs rank " << ls.size() << ": [" << b << "," << i << "," << j << "] = " << got
                          << ", the loop says " << sum;
        }
    EXPECT_EQ(bad, 0);
  }
}

// libxsmm has no kernel for a transposed B; where it would take the
// untransposed GEMM, the interpreter copies B transposed rather than hand the
// transposed one to OpenBLAS: into column panels for one matrix, whole for a
// batch (pack_bt). An untransposed B as large as L1 goes into panels too.
// Which GEMMs do, and their parts. (The results: DotGeneralInTheInterpreter.)
TEST(HostGemm, BIsCopiedIntoPanelsWhereLibxsmmTakesTheGemm) {
  EXPECT_EQ(host::panel_parts(64, 128, 128), 2);  // the seed's W^T products: 2 panels each
  EXPECT_EQ(host::panel_parts(64, 256, 128), 4);
  EXPECT_EQ(host::panel_parts(64, 64, 128), 1);   // too narrow to cut
  EXPECT_EQ(host::panel_parts(16, 128, 64), 1);   // too little work
  EXPECT_EQ(host::panel_parts(100, 200, 77), 3);
  Attrs wt;  // [4,16,256] x [128,256]^T: an input gradient through W^T
  wt.lhs_contract = {2};
  wt.rhs_contract = {1};
  const Type x{DType::f32, {4, 16, 256}}, w{DType::f32, {128, 256}};
  const host::DotPlan d = host::plan_dot(x, w, wt, "test");
  EXPECT_TRUE(d.trans_b);
  Attrs nn;  // [M,K] x [K,N]
  nn.lhs_contract = {1};
  nn.rhs_contract = {0};
  Attrs nt;  // [M,K] x [N,K]^T
  nt.lhs_contract = {1};
  nt.rhs_contract = {1};
  auto plan = [](const Attrs& at, int64_t m, int64_t n, int64_t k, DType t = DType::f32) {
    const bool bt = at.rhs_contract[0] == 1;
    return host::plan_dot({t, {m, k}}, {t, bt ? Shape{n, k} : Shape{k, n}}, at, "test");
  };
  if (host::gemm_info().xsmm_isa.empty()) {
    EXPECT_EQ(d.panel, 0) << "no libxsmm: OpenBLAS takes the transposed B as it is";
    EXPECT_FALSE(d.pack_bt);
    EXPECT_EQ(plan(nn, 64, 128, 128).panel, 0);
    return;
  }
  EXPECT_EQ(d.panel, host::kPanelCols) << host::gemm_info().line;
  EXPECT_FALSE(d.pack_bt);
  EXPECT_EQ(d.parts, 2);
  EXPECT_EQ(plan(nt, 64, 128, 128).panel, host::kPanelCols);
  EXPECT_EQ(plan(nt, 16, 128, 64).panel, host::kPanelCols) << "a transposed B is copied whatever M";
  EXPECT_EQ(plan(nn, 64, 128, 128).panel, host::kPanelCols) << "B of 64 KiB";
  EXPECT_EQ(plan(nn, 64, 256, 128).parts, 4);
  EXPECT_EQ(plan(nn, 64, 64, 128).panel, 0) << "two panels wide: it fits L1 as it is";
  EXPECT_EQ(plan(nn, 16, 128, 128).panel, 0) << "too few rows of A to repay the copy";
  EXPECT_EQ(plan(nn, 64, 128, 32).panel, 0) << "B of 16 KiB";
  // Too large for libxsmm's kernels (gemm.h): OpenBLAS, transposed in place.
  const host::DotPlan big = plan(nt, 512, 512, 512);
  EXPECT_TRUE(big.trans_b);
  EXPECT_FALSE(big.pack_bt);
  EXPECT_EQ(big.panel, 0);
  // f64: libxsmm runs f32 only here.
  EXPECT_EQ(plan(nt, 64, 128, 128, DType::f64).panel, 0);
  EXPECT_FALSE(plan(nt, 64, 128, 128, DType::f64).pack_bt);
  // A batch with B transposed: whole matrices copied (pack_bt), no panels.
  Attrs bt;
  bt.lhs_batch = {0};
  bt.rhs_batch = {0};
  bt.lhs_contract = {2};
  bt.rhs_contract = {2};
  const host::DotPlan batched = host::plan_dot({DType::f32, {16, 16, 32}}, {DType::f32, {16, 16, 32}}, bt, "test");
  EXPECT_TRUE(batched.pack_bt);
  EXPECT_EQ(batched.panel, 0);
}

// The panel path against the one it replaced: the same libxsmm kernel on
// the whole B in place (B stored transposed: copied transposed first, as
// pack_bt did), bit for bit, on one thread and on two (the parts share the
// panels out).
TEST(HostGemm, PanelsGiveTheWholeMatrixBits) {
  if (host::gemm_info().xsmm_isa.empty()) GTEST_SKIP() << "no libxsmm: no panels";
  const int saved_threads = host::host_threads();
  struct C {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const C c : {C{64, 128, 128, false, false}, C{64, 128, 256, false, false}, C{128, 256, 64, true, false},
                    C{64, 128, 128, false, true}, C{40, 100, 90, false, false}, C{21, 130, 45, false, true},
                    C{96, 200, 64, true, true}, C{8, 70, 45, false, true}, C{11, 100, 32, true, true}}) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.ta ? " TA" : "") +
                 (c.tb ? " TB" : ""));
    const Shape ls = c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, rs = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
    Attrs at;
    at.lhs_contract = {c.ta ? 0 : 1};
    at.rhs_contract = {c.tb ? 1 : 0};
    const host::DotPlan d = host::plan_dot({DType::f32, ls}, {DType::f32, rs}, at, "test");
    ASSERT_EQ(d.panel, host::kPanelCols);
    Program p;
    const int l = p.add_input("l", Type{DType::f32, ls}), r = p.add_input("r", Type{DType::f32, rs});
    p.add_output("o", p.add_eqn(Op::dot_general, {l, r}, at));
    Array lv(Type{DType::f32, ls}), rv(Type{DType::f32, rs});
    for (int64_t i = 0; i < lv.numel(); ++i) lv.set(i, static_cast<double>((i * 37) % 101 - 50) / 51.0);
    for (int64_t i = 0; i < rv.numel(); ++i) rv.set(i, static_cast<double>((i * 53) % 97 - 48) / 47.0);
    // The whole-matrix GEMM: B as [K, N], untransposed, ldb = N.
    std::vector<float> b(static_cast<size_t>(c.k * c.n)), want(static_cast<size_t>(c.m * c.n));
    for (int64_t q = 0; q < c.k; ++q)
      for (int64_t j = 0; j < c.n; ++j)
        b[static_cast<size_t>(q * c.n + j)] = rv.data<float>()[c.tb ? j * c.k + q : q * c.n + j];
    const int64_t lda = c.ta ? c.m : c.k, zero = 0;
    ASSERT_TRUE(host::gemm_prepare_f32(c.ta, false, c.m, c.n, c.k, lda, c.n, c.n));
    host::gemm_batch(c.ta, false, c.m, c.n, c.k, lv.data<float>(), lda, &zero, b.data(), c.n, &zero, want.data(), 1);
    for (int threads : {1, 2}) {
      host::set_host_threads(threads);
      host::Interpreter it(p);
      std::vector<Array> out;
      it.run({&lv, &rv}, out);
      int bad = 0;
      for (int64_t i = 0; i < c.m * c.n; ++i)
        if (out[0].data<float>()[i] != want[static_cast<size_t>(i)] && bad++ < 3)
          ADD_FAILURE() << threads << " threads: element " << i << " = " << out[0].data<float>()[i] << ", whole: "
                        << want[static_cast<size_t>(i)];
      EXPECT_EQ(bad, 0) << threads << " threads";
    }
  }
  host::set_host_threads(saved_threads);
}

// What makes the panels, the row parts and the whole matrix agree on every
// kernel set (gemm.cpp, each_chain_piece): each element of an f32 GEMM that
// libxsmm runs is one chain of fused multiply-adds over k in order. Swept over
// every column count to 144 (two of libxsmm's AVX-512 remainders of 64), rows
// where its AVX-512 kernels change their blocking (1 to 67), both layouts of
// A, and a padded C, on the target libxsmm runs here (scripts/test runs this
// test again with each target the CPU can run forced by LIBXSMM_TARGET).
TEST(HostGemm, EveryLibxsmmGemmIsOneFmaChain) {
  if (host::gemm_info().xsmm_isa.empty()) GTEST_SKIP() << "no libxsmm: " << host::gemm_info().xsmm;
  struct Rows {
    int64_t m, k;
    bool ta;
  };
  int64_t gemms = 0, bad_gemms = 0;
  for (const Rows r : {Rows{1, 128, false}, Rows{2, 45, true}, Rows{3, 16, false}, Rows{8, 3, true}, Rows{11, 64, false},
                       Rows{12, 45, true}, Rows{21, 45, false}, Rows{67, 16, true}})
    for (int64_t n = 1; n <= 144; ++n) {
      const int64_t lda = r.ta ? r.m : r.k, ldc = n + 3;
      std::vector<float> a(static_cast<size_t>(r.m * r.k)), b(static_cast<size_t>(r.k * n)),
          c(static_cast<size_t>(r.m * ldc), -7.0f);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int64_t>(i * 37 % 101) - 50) / 51.0f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int64_t>(i * 53 % 97) - 48) / 47.0f;
      if (!host::gemm_prepare_f32(r.ta, false, r.m, n, r.k, lda, n, ldc)) continue;  // OpenBLAS's: not promised
      const int64_t zero = 0;
      host::gemm_batch(r.ta, false, r.m, n, r.k, a.data(), lda, &zero, b.data(), n, &zero, c.data(), nullptr, ldc, 1);
      ++gemms;
      int bad = 0;
      for (int64_t i = 0; i < r.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          float want = -7.0f;  // C's padding is left alone
          if (j < n) {
            want = 0.0f;
            for (int64_t q = 0; q < r.k; ++q)
              want = std::fma(a[static_cast<size_t>(r.ta ? q * r.m + i : i * r.k + q)], b[static_cast<size_t>(q * n + j)], want);
          }
          const float got = c[static_cast<size_t>(i * ldc + j)];
          if (got != want && bad++ < 2)
            ADD_FAILURE() << r.m << "x" << n << "x" << r.k << (r.ta ? " TA" : "") << ": C[" << i << "][" << j
                          << "] = " << got << ", the fma chain gives " << want;
        }
      bad_gemms += bad > 0;
    }
  EXPECT_EQ(bad_gemms, 0) << "of " << gemms << " GEMMs on " << host::gemm_info().xsmm;
  EXPECT_GE(gemms, 1000) << "libxsmm took too few of the swept shapes to say anything";
}

namespace {
// f(src, lds, rows, cols, dst, ldd) against the element-by-element copy
// dst[r * ldd + c] = src[r * lds + c] (transposed: dst[c * ldd + r]), every
// element of dst outside it left as it was, for each shape {rows, cols, lds, ldd}.
template <class F>
void expect_copies_every_element_once(F f, bool transposed, std::initializer_list<std::array<int64_t, 4>> shapes) {
  for (const auto& [rows, cols, lds, ldd] : shapes) {
    const int64_t dst_rows = transposed ? cols : rows, dst_cols = transposed ? rows : cols;
    std::vector<float> src(static_cast<size_t>(rows * lds)), dst(static_cast<size_t>(dst_rows * ldd), -1.0f);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
    f(src.data(), lds, rows, cols, dst.data(), ldd);
    int bad = 0;
    for (int64_t r = 0; r < dst_rows; ++r)
      for (int64_t c = 0; c < ldd; ++c) {
        const int64_t sr = transposed ? c : r, sc = transposed ? r : c;  // dst[r][c] comes from src[sr][sc]
        const float want = c < dst_cols ? src[static_cast<size_t>(sr * lds + sc)] : -1.0f;  // padding untouched
        const float got = dst[static_cast<size_t>(r * ldd + c)];
        if (got != want && bad++ < 3)
          ADD_FAILURE() << rows << "x" << cols << ": dst[" << r << "][" << c << "] = " << got << ", want " << want;
      }
    EXPECT_EQ(bad, 0) << rows << "x" << cols;
  }
}
}  // namespace

// The copy pack_bt makes: whole 8 x 8 blocks, ragged edges, padded rows.
TEST(HostGemm, TransposeCopiesEveryElementOnce) {
  expect_copies_every_element_once(host::transpose_f32, true,
                                   {{1, 1, 1, 1}, {8, 8, 8, 8}, {16, 24, 24, 16}, {13, 29, 31, 17}, {7, 3, 5, 9}, {64, 77, 80, 64}});
}

// The copy of B's column panels (DotPlan::panel): whole vectors and ragged
// ends, padded rows on both sides.
TEST(HostGemm, RowCopyCopiesEveryElementOnce) {
  expect_copies_every_element_once(host::copy_rows_f32, false,
                                   {{1, 1, 1, 1}, {128, 32, 128, 32}, {64, 8, 256, 8}, {13, 29, 31, 37}, {7, 3, 5, 9}, {5, 17, 17, 17}});
}

// ---- bf16 operands, f32 sums --------------------------------------------------
// The GEMMs of bf16 operands run on oneDNN's bf16 kernels where the CPU has
// AVX512_BF16 (host::gemm_bf16_native), else as the f32 GEMM on the operands
// widened to f32. Either way each element of C is an f32 sum of the K exact
// products of the bf16 values (two 8-bit significands multiply into at most
// 16 bits, which f32 holds), in an order and grouping the kernel picks
// (vdpbf16ps adds two products a step; oneDNN blocks K). The bound, for any
// order or tree: K - 1 additions that each round to nearest, relative error
// at most u = 2^-24, leave the sum off from the exact one by at most
// gamma_{K-1} sum_k |a_k b_k|, gamma_{K-1} = (K-1)u / (1 - (K-1)u), which is
// at most K u while K (K-1) u <= 1 (K <= 4096; Higham, "Accuracy and
// Stability of Numerical Algorithms", 4.2). vdpbf16ps also flushes subnormal
// results to zero: at most 2^-126 more per addition. So
//   |C - exact| <= K 2^-24 sum_k |a_k b_k| + K 2^-126,
// exact being the f64 sum of the same bf16 values' products (its own error,
// about K 2^-53 sum |a_k b_k|, is far below the bound). The same bound holds
// on every kernel set scripts/test-kernel-sets runs: where it lowers oneDNN's
// instruction set (DNNL_MAX_CPU_ISA) or the CPU has no AVX512_BF16, the f32
// GEMM sums the same exact products in f32 and the same derivation applies.
namespace {

struct Bf16Dot {
  Shape lhs, rhs;
  std::vector<int64_t> lb, rb, lc, rc;
};

Attrs attrs_of(const Bf16Dot& d) {
  Attrs at;
  at.lhs_batch = d.lb;
  at.rhs_batch = d.rb;
  at.lhs_contract = d.lc;
  at.rhs_contract = d.rc;
  return at;
}

Program bf16_dot_program(const Bf16Dot& d, DType t) {
  Program p;
  const int l = p.add_input("l", Type{t, d.lhs}), r = p.add_input("r", Type{t, d.rhs});
  p.add_output("o", p.add_eqn(Op::dot_general, {l, r}, attrs_of(d)));
  return p;
}

// bf16 values of several binades (2^-6 to 2^2), both signs, some exactly
// representable sums and some not.
Array bf16_values(const Shape& s, uint32_t seed) {
  Array a(Type{DType::bf16, s});
  uint32_t x = seed;
  for (int64_t i = 0; i < a.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    const double m = 1.0 + static_cast<double>((x >> 8) % 128) / 128.0;  // 8 significant bits: exact in bf16
    const int e = static_cast<int>((x >> 20) % 9) - 6;
    a.set(i, ((x >> 30) & 1 ? -1.0 : 1.0) * std::ldexp(m, e));
  }
  return a;
}

// Every layout the interpreter hands the GEMM: A and B each in place,
// stored transposed, or copied first (axes that do not chain); batched with
// the batch axes leading or not; and sizes where the GEMMs run in row parts
// or batch parts (DotPlan::parts).
const Bf16Dot kBf16Dots[] = {
    {{5, 67}, {67, 7}, {}, {}, {1}, {0}},                              // NN
    {{67, 5}, {7, 67}, {}, {}, {0}, {1}},                              // TA TB
    {{67, 5}, {67, 7}, {}, {}, {0}, {0}},                              // TA
    {{5, 67}, {7, 67}, {}, {}, {1}, {1}},                              // TB
    {{4, 4, 16, 32}, {4, 4, 16, 32}, {0, 1}, {0, 1}, {3}, {3}},        // attention scores: batched, B transposed
    {{4, 4, 16, 16}, {4, 4, 16, 32}, {0, 1}, {0, 1}, {3}, {2}},        // attention values
    {{5, 3, 67}, {67, 3, 7}, {1}, {1}, {2}, {0}},                      // batch axis in the middle: copied
    {{4, 16, 128}, {4, 16, 256}, {}, {}, {0, 1}, {0, 1}},              // weight gradient, K over two axes
    {{4, 96, 10}, {96, 100}, {}, {}, {1}, {0}},                        // A's axes do not chain: copied
    {{256, 160}, {160, 96}, {}, {}, {1}, {0}},                         // 4 row parts
    {{160, 256}, {96, 160}, {}, {}, {0}, {1}},                         // 4 row parts, TA TB
    {{6, 64, 64}, {6, 64, 64}, {0}, {0}, {2}, {2}},                    // batch parts, B transposed
    {{2, 300, 40}, {2, 40, 70}, {0}, {0}, {2}, {1}},                   // ragged
};

}  // namespace

TEST(HostGemmBf16, EveryLayoutIsWithinTheF32SumBoundOfTheExactProduct) {
  std::printf("GEMM: %s\n", host::gemm_info().line.c_str());
  for (const Bf16Dot& d : kBf16Dots) {
    SCOPED_TRACE(shape_str(d.lhs) + " x " + shape_str(d.rhs));
    const Program p = bf16_dot_program(d, DType::bf16), q = bf16_dot_program(d, DType::f64);
    const Array lv = bf16_values(d.lhs, 7), rv = bf16_values(d.rhs, 11);
    const Array got = host::run(p, {lv, rv})[0];
    const Array want = host::run(q, {lv.converted(DType::f64), rv.converted(DType::f64)})[0];
    Array la = lv.converted(DType::f64), ra = rv.converted(DType::f64);
    for (int64_t i = 0; i < la.numel(); ++i) la.set(i, std::fabs(la.get(i)));
    for (int64_t i = 0; i < ra.numel(); ++i) ra.set(i, std::fabs(ra.get(i)));
    const Array mag = host::run(q, {la, ra})[0];
    ASSERT_EQ(got.type(), (Type{DType::f32, want.shape()}));
    int64_t K = 1;
    for (int64_t a : d.lc) K *= d.lhs[static_cast<size_t>(a)];
    int bad = 0;
    double worst = 0;  // the largest error as a fraction of the bound
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double bound = static_cast<double>(K) * (0x1p-24 * mag.get(i) + 0x1p-126);
      const double err = std::fabs(got.get(i) - want.get(i));
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && bad++ < 3)
        ADD_FAILURE() << "element " << i << " = " << got.get(i) << ", exact " << want.get(i) << ", bound " << bound;
    }
    EXPECT_EQ(bad, 0);
    // The test can fail: the sums are not exact in f32 (a bf16 sum, 8 bits,
    // would be off by far more than the bound).
    EXPECT_GT(worst, 0.0);
  }
}

// The parts are decided from the shape (DotPlan::parts), and oneDNN runs
// each on one thread: 1 and 2 host threads give the same bits.
TEST(HostGemmBf16, OneAndTwoThreadsGiveTheSameBits) {
  const int saved_threads = host::host_threads();
  for (const Bf16Dot& d : kBf16Dots) {
    SCOPED_TRACE(shape_str(d.lhs) + " x " + shape_str(d.rhs));
    const Program p = bf16_dot_program(d, DType::bf16);
    const Array lv = bf16_values(d.lhs, 3), rv = bf16_values(d.rhs, 5);
    std::vector<Array> out[2];
    for (int threads : {1, 2}) {
      host::set_host_threads(threads);
      host::Interpreter it(p);
      it.run({&lv, &rv}, out[threads - 1]);
    }
    EXPECT_TRUE(out[0][0].bit_equal(out[1][0]));
  }
  host::set_host_threads(saved_threads);
}

// Where the GEMMs run on bf16 kernels, the interpreter hands them the bf16
// operands in place when their layout allows (no widened copy); elsewhere it
// widens both. And a CPU with AVX512_BF16 runs them on bf16 kernels unless
// oneDNN is missing or told a lower instruction set.
TEST(HostGemmBf16, Bf16KernelsWhereTheCpuHasThem) {
  const host::GemmInfo& g = host::gemm_info();
  EXPECT_EQ(g.bf16_native, host::gemm_bf16_native());
  Attrs at;
  at.lhs_contract = {1};
  at.rhs_contract = {1};
  const host::DotPlan d = host::plan_dot({DType::bf16, {64, 96}}, {DType::bf16, {32, 96}}, at, "test");
  EXPECT_EQ(d.pack_a, !g.bf16_native);
  EXPECT_EQ(d.pack_b, !g.bf16_native);
  if (g.bf16_native) {
    EXPECT_TRUE(d.trans_b);
    EXPECT_NE(g.bf16.find("oneDNN"), std::string::npos) << g.bf16;
  }
  bool cpu_bf16 = false;
#if defined(__x86_64__) || defined(__i386__)
  cpu_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  if (!cpu_bf16) {
    EXPECT_FALSE(g.bf16_native) << g.bf16;
    EXPECT_NE(g.bf16.find("no AVX512_BF16"), std::string::npos) << g.bf16;
    return;
  }
  if (!env("DNNL_MAX_CPU_ISA").empty()) GTEST_SKIP() << "DNNL_MAX_CPU_ISA is set: " << g.bf16;
  if (g.bf16.find("no oneDNN") != std::string::npos) GTEST_SKIP() << g.bf16;
  EXPECT_TRUE(g.bf16_native) << g.line;
}

// gemm_batch's bf16 overload directly, where it runs: every transpose,
// padded rows, batches at offsets in any order, C with padded rows.
TEST(HostGemmBf16, GemmBatchMatchesF64WithinTheBound) {
  if (!host::gemm_bf16_native()) GTEST_SKIP() << host::gemm_info().bf16;
  const Case shapes[] = {{1, 64, 128, 128, false, false, 0}, {3, 5, 7, 3, false, false, 2},
                         {2, 96, 130, 530, false, false, 3}, {1, 1, 1, 1, false, false, 0},
                         {4, 33, 17, 64, false, false, 1}};
  for (Case c : shapes)
    for (int t = 0; t < 4; ++t) {
      c.ta = t & 1;
      c.tb = (t >> 1) & 1;
      SCOPED_TRACE(testing::Message() << "batch " << c.batch << " " << c.m << "x" << c.n << "x" << c.k << " ta "
                                      << c.ta << " tb " << c.tb << " pad " << c.pad);
      const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
      const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
      const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + 2;
      const int64_t a_mat = a_rows * lda + 5, b_mat = b_rows * ldb + 3, c_mat = c.m * ldc + 1;
      const Array av = bf16_values({a_mat * c.batch}, 13), bv = bf16_values({b_mat * c.batch}, 17);
      std::vector<int64_t> a_off, b_off, c_off;
      for (int64_t i = 0; i < c.batch; ++i) {
        a_off.push_back(i * a_mat);
        b_off.push_back((c.batch - 1 - i) * b_mat);
        c_off.push_back((c.batch - 1 - i) * c_mat);
      }
      std::vector<float> out(static_cast<size_t>(c.batch * c_mat), std::numeric_limits<float>::quiet_NaN());
      host::gemm_batch(c.ta, c.tb, c.m, c.n, c.k, av.data<uint16_t>(), lda, a_off.data(), bv.data<uint16_t>(), ldb,
                       b_off.data(), out.data(), c_off.data(), ldc, c.batch);
      const Array a64 = av.converted(DType::f64), b64 = bv.converted(DType::f64);
      const double *A = a64.data<double>(), *B = b64.data<double>();
      int bad = 0;
      for (int64_t q = 0; q < c.batch; ++q)
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) {
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < c.k; ++p) {
              const double x = A[a_off[static_cast<size_t>(q)] + (c.ta ? p * lda + i : i * lda + p)];
              const double y = B[b_off[static_cast<size_t>(q)] + (c.tb ? j * ldb + p : p * ldb + j)];
              sum += x * y;
              mag += std::abs(x * y);
            }
            const double got = out[static_cast<size_t>(c_off[static_cast<size_t>(q)] + i * ldc + j)];
            if (!(std::abs(got - sum) <= static_cast<double>(c.k) * (0x1p-24 * mag + 0x1p-126)) && bad++ < 5)
              ADD_FAILURE() << "C[" << q << "][" << i << "][" << j << "] = " << got << ", exact " << sum;
          }
      EXPECT_EQ(bad, 0);
    }
}
