// The kernel plan on the GPU (skipped without a device): the seed's gradient
// program through the planned kernels (row and column reductions, the sinks,
// GEMMs through cuBLASLt) against the host interpreter and against the old
// path (one kernel per equation, the cuBLAS default GEMM), in full f32 where
// the bound is tight; and every GEMM of the seed's shapes found an algorithm
// without split-K (one kernel each).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "capstep/autodiff.h"
#include "backend/cuda/cuda.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/trace.h"
#include "test_util.h"

namespace capstep {
namespace {
using test::norm_diff;

std::vector<Array> seed_inputs(const Program& p) {
  std::mt19937_64 rng(3);
  std::vector<Array> in;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Type& t = p.input_type(static_cast<int>(i));
    Array a(t);
    for (int64_t k = 0; k < a.numel(); ++k)
      a.set(k, t.dtype == DType::i32 ? static_cast<double>(rng() % 64)
                                     : std::uniform_real_distribution<double>(-0.1, 0.1)(rng));
    in.push_back(std::move(a));
  }
  return in;
}


Program seed_gradient_program() {
  const nn::LmConfig c;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  return value_and_grad(nn::lm_loss_program(c), names);
}

TEST(CudaPlan, SeedGradientThroughThePlanAgreesWithHostAndOldPath) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Program p = seed_gradient_program();
  const std::vector<Array> in = seed_inputs(p);
  const std::vector<Array> want = host::run(p, in);
  cuda::Options planned;
  planned.tf32 = false;
  planned.fuse = true;
  planned.lt_gemm = true;
  cuda::Options library = planned;  // the plan with every GEMM through cuBLASLt
  library.generated_gemm = false;
  cuda::Options old = planned;
  old.fuse = false;
  old.lt_gemm = false;
  cuda::Executable a(p, planned), l(p, library), b(p, old);
  std::printf("[cuda plan] %s\n[cuda plan] library GEMMs: %s\n[cuda plan] old path: %s\n",
              a.describe_launches().c_str(), l.describe_launches().c_str(), b.describe_launches().c_str());
  EXPECT_EQ(a.describe_launches().rfind("fused: ", 0), 0u) << a.describe_launches();
  EXPECT_EQ(l.describe_launches().find("split-K"), std::string::npos) << l.describe_launches();
  for (int rep = 0; rep < 2; ++rep) {  // eager, then the captured graph
    const std::vector<Array> ga = a.run(in), gl = l.run(in), gb = b.run(in);
    double worst_host = 0, worst_lib = 0, worst_old = 0;
    for (size_t o = 0; o < want.size(); ++o) {
      const double dh = norm_diff(ga[o], want[o]), dl = norm_diff(gl[o], want[o]), dold = norm_diff(ga[o], gb[o]);
      EXPECT_LE(dh, 1e-5) << p.outputs[o].name << " vs host, run " << rep;
      EXPECT_LE(dl, 1e-5) << p.outputs[o].name << " (library GEMMs) vs host, run " << rep;
      EXPECT_LE(dold, 1e-5) << p.outputs[o].name << " vs the old path, run " << rep;
      worst_host = std::max(worst_host, dh);
      worst_lib = std::max(worst_lib, dl);
      worst_old = std::max(worst_old, dold);
    }
    std::printf("[cuda plan] run %d: worst normalised difference vs host %.3g (library GEMMs %.3g), vs the old path %.3g\n",
                rep, worst_host, worst_lib, worst_old);
  }
}

// The persistent kernel (Options::persistent; plan/persistent.h): the seed's
// gradient step as one cooperative kernel of the plan's kernels as phases.
// Its phases are the plan's kernels, so it must agree with the plan's
// launches to f32 rounding (full f32), eager and then captured, over
// several steps (the grid barrier's counter is reset by every step).
TEST(CudaPlan, PersistentKernelAgreesWithThePlanAndTheHost) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Program p = seed_gradient_program();
  const std::vector<Array> in = seed_inputs(p);
  const std::vector<Array> want = host::run(p, in);
  cuda::Options planned;
  planned.tf32 = false;
  planned.persistent = false;
  cuda::Options persistent = planned;
  persistent.persistent = true;
  cuda::Executable a(p, planned), one(p, persistent);
  std::printf("[cuda plan] persistent: %s\n", one.describe_launches().c_str());
  ASSERT_NE(one.describe_launches().find("persistent: the step as 1 cooperative kernel"), std::string::npos)
      << one.describe_launches();
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<Array> ga = a.run(in), g1 = one.run(in);
    double worst = 0;
    for (size_t o = 0; o < want.size(); ++o) {
      EXPECT_LE(norm_diff(g1[o], want[o]), 1e-5) << p.outputs[o].name << " vs host, run " << rep;
      EXPECT_LE(norm_diff(g1[o], ga[o]), 1e-6) << p.outputs[o].name << " vs the plan's launches, run " << rep;
      worst = std::max(worst, norm_diff(g1[o], ga[o]));
    }
    std::printf("[cuda plan] persistent run %d: worst normalised difference vs the plan's launches %.3g\n", rep, worst);
  }
}

// The fused attention kernels (plan/attention_source.h) on the device: a
// model's gradient program with fuse_attention (several query/key tiles: seq
// 80 over tiles of 32 rows at Dh 64), and attention alone at every register
// width in f32 and f64, against the host interpreter running the same program
// (1e-5 of the output's largest magnitude in f32, full f32 dots; 1e-12 in
// f64), fused and one kernel per equation, eager and from the graph.
TEST(CudaPlan, FusedAttentionAgreesWithTheHost) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  nn::LmConfig c;
  c.d_model = 128;
  c.n_heads = 2;
  c.seq = 80;
  c.context = 128;
  c.batch = 2;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  std::vector<Program> programs = {value_and_grad(fuse_attention(nn::lm_loss_program(c)), names)};
  for (const Type& t : std::vector<Type>{{DType::f32, {2, 3, 70, 20}}, {DType::f32, {1, 2, 45, 128}},
                                         {DType::f64, {1, 2, 37, 40}}, {DType::f32, {3, 1, 1, 64}}}) {
    Tracer tr;
    Tensor q = tr.input("q", t), k = tr.input("k", t), v = tr.input("v", t), r = tr.input("r", t);
    Tensor out = attention(q, k, v);
    programs.push_back(value_and_grad(tr.finish({{"loss", sum(out * r)}, {"out", out}}), {"q", "k", "v"}));
  }
  for (const Program& p : programs) {
    const std::vector<Array> in = seed_inputs(p);
    const std::vector<Array> want = host::run(p, in);
    cuda::Options fused;
    fused.tf32 = false;
    cuda::Options unfused = fused;
    unfused.fuse = false;
    cuda::Executable a(p, fused), b(p, unfused);
    std::printf("[cuda attention] %s\n", a.describe_launches().c_str());
    EXPECT_EQ(a.describe_launches().rfind("fused: ", 0), 0u) << a.describe_launches();
    for (int rep = 0; rep < 2; ++rep) {
      const std::vector<Array> ga = a.run(in), gb = b.run(in);
      double worst = 0;
      for (size_t o = 0; o < want.size(); ++o) {
        const double bound = want[o].dtype() == DType::f64 ? 1e-12 : 1e-5;
        const double da = norm_diff(ga[o], want[o]), db = norm_diff(gb[o], want[o]);
        EXPECT_LE(da, bound) << p.outputs[o].name << " (fused) vs host, run " << rep;
        EXPECT_LE(db, bound) << p.outputs[o].name << " (one kernel per equation) vs host, run " << rep;
        worst = std::max({worst, da, db});
      }
      std::printf("[cuda attention] %s run %d: worst normalised difference vs host %.3g\n",
                  p.type(p.inputs[0].value).str().c_str(), rep, worst);
    }
  }
}

}  // namespace
}  // namespace capstep
