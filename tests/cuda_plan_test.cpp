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
#include "capstep/cuda.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"
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


TEST(CudaPlan, SeedGradientThroughThePlanAgreesWithHostAndOldPath) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const nn::LmConfig c;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program p = value_and_grad(nn::lm_loss_program(c), names);
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
  const nn::LmConfig c;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program p = value_and_grad(nn::lm_loss_program(c), names);
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

}  // namespace
}  // namespace capstep
