// The fused kernels' source (src/backend/plan/kernel_source.h), checked
// without a device:
//  - golden text for small groups (elementwise chain, broadcast index map,
//    inlined splat constant, compare/select/convert through i1 and i32);
//  - the library's copy of src/ir/scalar_math.h equals the file;
//  - with the CUDA toolkit (CAPSTEP_HAVE_CUDA): NVRTC compiles every kernel
//    of the seed's gradient and fused AdamW programs (loop, row and column
//    groups, the sinks) for sm_90, in one program, and f32 groups use no
//    double-precision arithmetic.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backend/plan/attention_source.h"
#include "backend/plan/fusion.h"
#include "backend/plan/kernel_plan.h"
#include "backend/plan/kernel_source.h"
#include "backend/plan/persistent.h"
#include "capstep/autodiff.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"

#ifdef CAPSTEP_HAVE_CUDA
#include "backend/cuda/nvrtc.h"
#endif

namespace capstep {
namespace {

Type f32(Shape s) { return {DType::f32, std::move(s)}; }

std::string source_dir() {
  if (const char* s = std::getenv("CAPSTEP_SOURCE_DIR")) return s;
  std::string f = __FILE__;
  return f.substr(0, f.rfind("/tests/"));
}

TEST(CudaCodegen, EmbeddedScalarMathEqualsTheHeader) {
  const std::string path = source_dir() + "/src/ir/scalar_math.h";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), plan::kScalarMathText)
      << "the generated scalar_math_text.cpp is out of date: re-run cmake";
}

// y = exp(x) * broadcast(b) + 2 ; x [2,3], b [3] along axis 1
TEST(CudaCodegen, GoldenElementwiseChainWithBroadcastAndSplat) {
  Program p;
  const int x = p.add_input("x", f32({2, 3}));
  const int b = p.add_input("b", f32({3}));
  Attrs c;
  c.literal = {2.0};
  const int two = p.add_eqn_typed(Op::constant, {}, c, f32({2, 3}));
  Attrs bd;
  bd.dims = {1};
  const int bb = p.add_eqn_typed(Op::broadcast_in_dim, {b}, bd, f32({2, 3}));
  const int e = p.add_eqn(Op::exponential, {x}, {});
  const int m = p.add_eqn(Op::multiply, {e, bb}, {});
  const int y = p.add_eqn(Op::add, {m, two}, {});
  p.add_output("y", y);
  const plan::Fused f = plan::fuse_program(p);
  const std::vector<plan::KernelSource> ks = plan::loop_kernel_sources(f);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].params, (std::vector<int>{b, x, y}));
  EXPECT_EQ(ks[0].n_inputs, 2);
  EXPECT_EQ(ks[0].numel, 6);
  EXPECT_EQ(ks[0].code,
            "extern \"C\" __global__ void __launch_bounds__(256) capstep_loop_1(const float* in0, const float* in1, "
            "float* out0, long long n) {\n"
            "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
            "       i += (long long)blockDim.x * gridDim.x) {\n"
            "    const float v3 = in0[(i % 3LL)];\n"
            "    const float x0 = in1[i];\n"
            "    const float v4 = capstep::scalar::exponential<float>(x0);\n"
            "    const float v5 = capstep::scalar::multiply<float>(v4, v3);\n"
            "    const float v6 = capstep::scalar::add<float>(v5, 0x1p+1f);\n"
            "    out0[i] = v6;\n"
            "  }\n}\n");
}

// column broadcast [4] -> [4,5] along axis 0, and a scalar broadcast
TEST(CudaCodegen, GoldenIndexMaps) {
  Program p;
  const int r = p.add_input("r", f32({4}));
  const int s = p.add_input("s", f32({}));
  Attrs d0;
  d0.dims = {0};
  const int rb = p.add_eqn_typed(Op::broadcast_in_dim, {r}, d0, f32({4, 5}));
  Attrs none;
  const int sb = p.add_eqn_typed(Op::broadcast_in_dim, {s}, none, f32({4, 5}));
  p.add_output("y", p.add_eqn(Op::subtract, {rb, sb}, {}));
  const plan::Fused f = plan::fuse_program(p);
  const std::vector<plan::KernelSource> ks = plan::loop_kernel_sources(f);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_NE(ks[0].code.find("const float v2 = in0[(i / 5LL)];"), std::string::npos) << ks[0].code;
  EXPECT_NE(ks[0].code.find("const float v3 = in1[0];"), std::string::npos) << ks[0].code;
}

// z = select(a < b, convert<f32>(convert<i32>(a)), b); also writes the i1 mask
TEST(CudaCodegen, GoldenCompareSelectConvert) {
  Program p;
  const int a = p.add_input("a", f32({7}));
  const int b = p.add_input("b", f32({7}));
  Attrs lt;
  lt.cmp = Cmp::LT;
  const int c = p.add_eqn(Op::compare, {a, b}, lt);
  const int i = p.add_eqn_typed(Op::convert, {a}, {}, {DType::i32, {7}});
  const int back = p.add_eqn_typed(Op::convert, {i}, {}, f32({7}));
  const int z = p.add_eqn(Op::select, {c, back, b}, {});
  p.add_output("z", z);
  p.add_output("mask", c);
  const std::vector<plan::KernelSource> ks = plan::loop_kernel_sources(plan::fuse_program(p));
  ASSERT_EQ(ks.size(), 1u);
  const std::string& k = ks[0].code;
  // outputs in equation order: the mask first
  for (const char* want : {"unsigned char* out0, float* out1, long long n",
                           "const bool v2 = capstep::scalar::compare<float>(2, x0, x1);",
                           "const int v3 = capstep::scalar::convert<int, float>(x0);",
                           "const float v4 = capstep::scalar::convert<float, int>(v3);",
                           "const float v5 = (v2 ? v4 : x1);", "out0[i] = v2 ? 1 : 0;", "out1[i] = v5;"})
    EXPECT_NE(k.find(want), std::string::npos) << want << "\nin\n" << k;
  // loads come before every store (a donated output may share an input's bytes)
  EXPECT_LT(k.rfind("= in"), k.find("out0[i]"));
}

TEST(CudaCodegen, NonLoopGroupIsRefused) {
  Program p;
  const int x = p.add_input("x", f32({2, 3}));
  Attrs r;
  r.dims = {1};
  p.add_output("y", p.add_eqn(Op::reduce_sum, {x}, r));
  const plan::Fused f = plan::fuse_program(p);
  EXPECT_THROW(plan::loop_kernel_source(f, 0), Error);
  EXPECT_TRUE(plan::loop_kernel_sources(f).empty());
}

[[maybe_unused]] std::vector<Program> seed_programs() {
  const nn::LmConfig c;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  Program grad = value_and_grad(nn::lm_loss_program(c), names);
  Program fused = optim::with_adamw(grad, names, optim::AdamW{});
  return {grad, fused};
}

TEST(CudaCodegen, NvrtcCompilesEverySeedKernelForSm90) {
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  for (const Program& p : seed_programs()) {
    // every kernel the plan launches: loop, row, column and GEMM groups, waves
    const plan::KernelPlan kp = plan::plan_kernels(p);
    const plan::Fused& f = kp.fused;
    const std::vector<plan::KernelSource>& ks = kp.sources;
    ASSERT_FALSE(ks.empty());
    cuda::NvrtcResult r;
    ASSERT_NO_THROW(r = cuda::nvrtc_compile(plan::kernel_module_source(ks), "sm_90", "the seed's program"));
    EXPECT_GT(r.image.size(), 1000u);
    std::printf("[codegen] %zu kernels: cubin %zu bytes in %.2f s\n", ks.size(), r.image.size(), r.seconds);
    const cuda::NvrtcResult ptx = cuda::nvrtc_compile(plan::kernel_module_source(ks), "compute_90", "the seed's program");
    const std::string text(ptx.image.begin(), ptx.image.end());
    // PTX of the loop and GEMM kernels alone: no f64 instruction where every
    // value is f32 (row and column kernels sum f32 in double on purpose)
    std::vector<plan::KernelSource> loops;
    for (const plan::KernelSource& k : ks)
      if (k.name.rfind("capstep_loop_", 0) == 0 || k.name.rfind("capstep_gemm_", 0) == 0) loops.push_back(k);
    const cuda::NvrtcResult lptx = cuda::nvrtc_compile(plan::kernel_module_source(loops), "compute_90", "the seed's loops");
    const std::string ltext(lptx.image.begin(), lptx.image.end());
    bool any_f64 = false;
    for (const plan::KernelSource& k : loops)
      for (int x : k.params) any_f64 |= f.program.type(x).dtype == DType::f64;
    if (!any_f64) {
      EXPECT_EQ(ltext.find(".f64"), std::string::npos) << "an f32 loop kernel computes in double";
    }
    for (const plan::KernelSource& k : ks) EXPECT_NE(text.find(".entry " + k.name), std::string::npos) << k.name;
  }
#endif
}

// Rotate-half (slices, a concatenate) with its gradient (pads): those run as
// library kernels (kernels_layout.cu, compiled with the build); the fused
// groups before and after them are generated and must compile.
TEST(CudaCodegen, NvrtcCompilesTheKernelsAroundRotateHalf) {
  Tracer tr;
  Tensor x = tr.input("x", f32({2, 3, 6, 8}));
  Tensor cs = tr.input("cos", f32({6, 8}));
  Tensor sn = tr.input("sin", f32({6, 8}));
  Tensor r = x * cs + concatenate({-slice(x, {0, 0, 0, 4}, {2, 3, 6, 8}), slice(x, {0, 0, 0, 0}, {2, 3, 6, 4})}, -1) * sn;
  const Program p = value_and_grad(tr.finish({{"loss", sum(tanh(r) * r)}}), {"x"});
  const plan::KernelPlan kp = plan::plan_kernels(p);
  ASSERT_FALSE(kp.sources.empty());
  int library = 0;  // the slices, the concatenate's two stores, the pads' fills and stores
  for (const plan::Item& it : kp.items) library += it.kind == plan::ItemKind::strided || it.kind == plan::ItemKind::fill;
  EXPECT_GE(library, 6) << kp.describe();
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  cuda::NvrtcResult r2;
  ASSERT_NO_THROW(r2 = cuda::nvrtc_compile(plan::kernel_module_source(kp.sources), "sm_90", "rotate-half"));
  EXPECT_GT(r2.image.size(), 1000u);
#endif
}

// The seed's bf16 mixed-precision AdamW step (optim::mixed_precision_bf16),
// every kernel of two plans compiled by NVRTC for sm_90: the default one
// (generated GEMMs round their f32 operands to bf16 as they load them), whose
// loop and GEMM kernels use no f64 (bf16 works in f32, not double); and the
// one with library GEMMs, whose loop kernels store the bf16 operands as
// unsigned short (capstep_bf16_store; 16-bit stores in the PTX).
TEST(CudaCodegen, NvrtcCompilesEveryBf16SeedKernelForSm90) {
  const nn::LmConfig c;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program fused =
      optim::with_adamw(value_and_grad(optim::mixed_precision_bf16(nn::lm_loss_program(c)), names), names, optim::AdamW{});
  const plan::KernelPlan kp = plan::plan_kernels(fused);
  const std::string src = plan::kernel_module_source(kp.sources);
  EXPECT_NE(src.find("capstep_bf16_round(a0["), std::string::npos) << "a GEMM operand rounded on load";
  plan::KernelPlanOptions library;
  library.gemm_max_macs = 0;
  const plan::KernelPlan lp = plan::plan_kernels(fused, library);
  const std::string lsrc = plan::kernel_module_source(lp.sources);
  EXPECT_NE(lsrc.find("unsigned short* out"), std::string::npos);
  EXPECT_NE(lsrc.find("= capstep_bf16_store(v"), std::string::npos) << "a bf16 value stored";
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  cuda::NvrtcResult r;
  ASSERT_NO_THROW(r = cuda::nvrtc_compile(src, "sm_90", "the seed's bf16 step"));
  EXPECT_GT(r.image.size(), 1000u);
  std::printf("[codegen] bf16 step: %zu kernels: cubin %zu bytes in %.2f s\n", kp.sources.size(), r.image.size(), r.seconds);
  const cuda::NvrtcResult ptx = cuda::nvrtc_compile(src, "compute_90", "the seed's bf16 step");
  const std::string text(ptx.image.begin(), ptx.image.end());
  for (const plan::KernelSource& k : kp.sources) EXPECT_NE(text.find(".entry " + k.name), std::string::npos) << k.name;
  const cuda::NvrtcResult lptx16 = cuda::nvrtc_compile(lsrc, "compute_90", "the seed's bf16 step, library GEMMs");
  const std::string ltext16(lptx16.image.begin(), lptx16.image.end());
  for (const plan::KernelSource& k : lp.sources) EXPECT_NE(ltext16.find(".entry " + k.name), std::string::npos) << k.name;
  EXPECT_NE(ltext16.find("st.global.u16"), std::string::npos) << "no 16-bit store";
  std::vector<plan::KernelSource> loops;
  for (const plan::KernelSource& k : kp.sources)
    if (k.name.rfind("capstep_loop_", 0) == 0 || k.name.rfind("capstep_gemm_", 0) == 0) loops.push_back(k);
  ASSERT_FALSE(loops.empty());
  const cuda::NvrtcResult lptx = cuda::nvrtc_compile(plan::kernel_module_source(loops), "compute_90", "the bf16 loops");
  const std::string ltext(lptx.image.begin(), lptx.image.end());
  EXPECT_EQ(ltext.find(".f64"), std::string::npos) << "a bf16/f32 loop or GEMM kernel computes in double";
#endif
}

// The persistent kernel of the seed's fused step (plan/persistent.h): one
// entry, every phase a function of its own (noinline), compiled for sm_90.
TEST(CudaCodegen, NvrtcCompilesTheSeedPersistentKernelForSm90) {
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  const plan::KernelPlan kp = plan::plan_kernels(seed_programs()[1]);
  ASSERT_EQ(plan::persistent_blocker(kp), "");
  const plan::KernelSource pk = plan::persistent_kernel_source(kp);
  cuda::NvrtcResult r;
  ASSERT_NO_THROW(r = cuda::nvrtc_compile(plan::kernel_module_source({pk}), "sm_90", "the seed's persistent kernel"));
  std::printf("[codegen] persistent kernel of %zu phases: cubin %zu bytes in %.2f s\n", kp.sources.size(),
              r.image.size(), r.seconds);
  const cuda::NvrtcResult ptx = cuda::nvrtc_compile(plan::kernel_module_source({pk}), "compute_90", "the seed's persistent kernel");
  const std::string text(ptx.image.begin(), ptx.image.end());
  size_t entries = 0;
  for (size_t at = text.find(".entry "); at != std::string::npos; at = text.find(".entry ", at + 1)) ++entries;
  EXPECT_EQ(entries, 1u);
  EXPECT_NE(text.find(".entry capstep_persistent"), std::string::npos);
  for (const plan::KernelSource& k : kp.sources) EXPECT_NE(text.find(k.name), std::string::npos) << k.name;
#endif
}

// The fused attention kernels (plan/attention_source.h) of every width and
// dtype compile for sm_90; the f32 ones compute in f32 only (no .f64 in their
// PTX).
TEST(CudaCodegen, NvrtcCompilesTheAttentionKernelsForSm90) {
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  std::vector<Type> f32s, all;
  for (int64_t dh : {16, 64, 128}) {
    f32s.push_back(f32({2, 4, 100, dh}));
    all.push_back(f32({2, 4, 100, dh}));
    all.push_back({DType::f64, {2, 4, 100, dh}});
  }
  cuda::NvrtcResult r;
  ASSERT_NO_THROW(r = cuda::nvrtc_compile(plan::attention_module_source(all), "sm_90", "the attention kernels"));
  EXPECT_GT(r.image.size(), 1000u);
  std::printf("[codegen] 18 attention kernels: cubin %zu bytes in %.2f s\n", r.image.size(), r.seconds);
  const cuda::NvrtcResult ptx = cuda::nvrtc_compile(plan::attention_module_source(f32s), "compute_90", "the f32 attention kernels");
  const std::string text(ptx.image.begin(), ptx.image.end());
  EXPECT_EQ(text.find(".f64"), std::string::npos) << "an f32 attention kernel computes in double";
  for (const Type& q : f32s) {
    const plan::AttentionLaunch a = plan::attention_launch(q);
    for (const std::string& k : {a.fwd, a.dq, a.dkv}) EXPECT_NE(text.find(".entry " + k), std::string::npos) << k;
  }
#endif
}

TEST(CudaCodegen, AttentionLaunchShapes) {
  const plan::AttentionLaunch a = plan::attention_launch(f32({8, 12, 512, 64}));
  EXPECT_EQ(a.width, 64);
  EXPECT_EQ(a.rows, 32);                 // 4 tiles of 32 x 64 floats: 32 KiB of shared memory
  EXPECT_EQ(a.blocks, 8u * 12u * 16u);   // 512 / 32 query tiles per head
  EXPECT_EQ(a.fwd, "capstep_attn_fwd_f32_d64");
  EXPECT_EQ(a.scratch_bytes, 2u * 8 * 12 * 512 * 4);
  EXPECT_EQ(plan::attention_launch({DType::f64, {1, 1, 5, 100}}).rows, 8);
  EXPECT_EQ(plan::attention_launch(f32({1, 1, 5, 1})).width, 32);
  try {
    plan::attention_launch(f32({1, 1, 5, 129}));
    FAIL() << "Dh 129 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Dh up to 128"), std::string::npos) << e.what();
  }
}

TEST(CudaCodegen, NvrtcReportsABrokenSourceWithItsLog) {
#ifndef CAPSTEP_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#else
  try {
    cuda::nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }\n", "sm_90", "a test");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined_thing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda::nvrtc_arch_for(9, 0), "sm_90");
  EXPECT_EQ(cuda::nvrtc_arch_for(99, 9).rfind("compute_", 0), 0u) << "an unknown future device gets PTX";
#endif
}

}  // namespace
}  // namespace capstep
