// to_stablehlo -> from_stablehlo gives back the same Program (primitives,
// attributes, names, aliases; adamw written out as expand_adamw does), the
// text is a fixed point, and the host
// interpreter gives bit-identical outputs for the original and the read-back
// program -- up to the full fused training step of the seed's model.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "backend/host/interpreter.h"
#include "capstep/stablehlo.h"
#include "capstep/trace.h"
#include "stablehlo_programs.h"
#include "stablehlo_test_util.h"

using namespace capstep;
using namespace capstep::hlo_test;

namespace {

void check_round_trip(const Case& c) {
  std::string text = to_stablehlo(c.program);
  Program back = from_stablehlo(text);
  // adamw (with_adamw's steps) has no StableHLO op: to_stablehlo writes it
  // out, and that is what comes back.
  EXPECT_EQ(program_difference(with_f32_literals_rounded(expand_adamw(c.program)), back), "") << c.name;
  EXPECT_EQ(to_stablehlo(back), text) << c.name << ": the text is not a fixed point";
  std::vector<Array> want = host::run(c.program, c.inputs);
  std::vector<Array> got = host::run(back, c.inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(want[i].bit_equal(got[i])) << c.name << ": output " << c.program.outputs[i].name
                                           << " differs after the round trip";
}

}  // namespace

TEST(StablehloRoundTrip, Elementwise) { check_round_trip(elementwise_case()); }
TEST(StablehloRoundTrip, ShapesReductionsConstants) { check_round_trip(shapes_case()); }
TEST(StablehloRoundTrip, GatherScatterRows) { check_round_trip(rows_case()); }
TEST(StablehloRoundTrip, SgdStepWithAlias) { check_round_trip(sgd_step_case()); }
TEST(StablehloRoundTrip, F64AndI32) { check_round_trip(f64_i32_case()); }
TEST(StablehloRoundTrip, Bf16) { check_round_trip(bf16_case()); }
TEST(StablehloRoundTrip, SlicePadConcatenate) { check_round_trip(slices_case()); }

// slice, concatenate and pad as JAX 0.10.2 prints them (jax.lax.slice with
// strides, jnp.concatenate, jnp.pad's stablehlo.pad with an f32 zero).
TEST(StablehloRoundTrip, ReadsJaxsSliceConcatenatePad) {
  const char* jax_text = R"MLIR(module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<3x4xf32>) -> (tensor<5x4xf32> {jax.result_info = "result[0]"}, tensor<7x9xf32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.slice %arg0 [1:3, 0:8:2] : (tensor<4x8xf32>) -> tensor<2x4xf32>
    %1 = stablehlo.concatenate %0, %arg1, dim = 0 : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.pad %arg0, %cst, low = [1, 0], high = [2, 1], interior = [0, 0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<7x9xf32>
    return %1, %2 : tensor<5x4xf32>, tensor<7x9xf32>
  }
}
)MLIR";
  Program p = from_stablehlo(jax_text);
  ASSERT_EQ(p.eqns.size(), 3u);  // the pad's zero folded in
  EXPECT_EQ(p.eqns[0].op, Op::slice);
  EXPECT_EQ(p.eqns[0].attrs.strides, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(p.eqns[1].op, Op::concatenate);
  EXPECT_EQ(p.eqns[2].op, Op::pad);
  std::vector<float> xv(32), yv(12, -1.0f);
  for (int i = 0; i < 32; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  auto out = host::run(p, {Array::f32({4, 8}, xv), Array::f32({3, 4}, yv)});
  // rows 1 and 2 of x at even columns, then y
  EXPECT_EQ(out[0].get(0), 8);
  EXPECT_EQ(out[0].get(3), 14);
  EXPECT_EQ(out[0].get(4), 16);
  EXPECT_EQ(out[0].get(8), -1);
  // x[i][j] at [i + 1][j], zeros around
  EXPECT_EQ(out[1].get(0), 0);
  EXPECT_EQ(out[1].get(9), 0);
  EXPECT_EQ(out[1].get(9 + 8), 0);
  EXPECT_EQ(out[1].get(2 * 9 + 3), 11);
}
TEST(StablehloRoundTrip, PrefillAndDecodePrograms) {
  for (const nn::Arch a : {nn::Arch::gpt2, nn::Arch::llama}) {
    nn::LmConfig c = tiny_lm();
    c.arch = a;
    check_round_trip(kv_cache_case(c, false, std::string("prefill_") + nn::arch_name(a)));
    check_round_trip(kv_cache_case(c, true, std::string("decode_") + nn::arch_name(a), 2));
  }
}
TEST(StablehloRoundTrip, TinyFusedTrainingStep) { check_round_trip(fused_step_case(tiny_lm(), "tiny_step")); }

// The issue's check: the seed's full fused training step (311,936 parameters,
// AdamW in the program, params/m/v aliased) survives export -> read back ->
// interpret with bit-identical outputs.
TEST(StablehloRoundTrip, FullFusedTrainingStepIsBitIdentical) {
  Case c = fused_step_case(nn::LmConfig{}, "full_step");
  ASSERT_EQ(nn::count_parameters(nn::LmConfig{}), 311936);
  ASSERT_FALSE(c.program.aliases.empty());
  check_round_trip(c);
}

// Every f32 and f64 bit pattern class (normals, denormals, +-0, +-inf, NaN
// payloads) prints and reads back to the same bits, as splats, lists and hex.
TEST(StablehloRoundTrip, ConstantsAreBitExact) {
  std::vector<double> f32s, f64s;
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 400; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    float f = std::bit_cast<float>(static_cast<uint32_t>(s));
    if (!std::isnan(f)) f32s.push_back(static_cast<double>(f));  // NaN payloads: below
    double d = std::bit_cast<double>(s);
    f64s.push_back(d);
  }
  for (uint32_t b : {0x00000001u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7FC00123u, 0x7F7FFFFFu,
                     0x00800000u, 0x007FFFFFu, 0x3DCCCCCDu})
    f32s.push_back(static_cast<double>(std::bit_cast<float>(b)));
  for (uint64_t b : {1ull, 0x8000000000000000ull, 0x7FF0000000000000ull, 0x7FF8000000000123ull, 0x000FFFFFFFFFFFFFull})
    f64s.push_back(std::bit_cast<double>(b));

  Program p;
  auto add = [&](DType d, const std::vector<double>& v, const std::string& name) {
    Type big{d, {static_cast<int64_t>(v.size())}};
    p.add_output(name + "_hex", p.add_eqn_typed(Op::constant, {}, literal(v), big));
    for (size_t i = 0; i < v.size(); i += 8) {
      std::vector<double> small(v.begin() + static_cast<long>(i), v.begin() + static_cast<long>(std::min(i + 8, v.size())));
      p.add_output(name + "_list" + std::to_string(i),
                   p.add_eqn_typed(Op::constant, {}, literal(small), {d, {static_cast<int64_t>(small.size())}}));
      p.add_output(name + "_splat" + std::to_string(i), p.add_eqn_typed(Op::constant, {}, literal({v[i]}), {d, {2}}));
    }
  };
  add(DType::f32, f32s, "f32");
  add(DType::f64, f64s, "f64");
  Program back = from_stablehlo(to_stablehlo(p));
  ASSERT_EQ(back.eqns.size(), p.eqns.size());
  for (size_t k = 0; k < p.eqns.size(); ++k) {
    const auto& a = p.eqns[k].attrs.literal;
    const auto& b = back.eqns[k].attrs.literal;
    ASSERT_EQ(a.size(), b.size()) << k;
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint64_t>(a[i]), std::bit_cast<uint64_t>(b[i]))
          << "constant " << k << " element " << i << ": " << a[i] << " read back as " << b[i];
  }
}

// Constants without elements print as MLIR does, dense<>: the nested list
// "[[]]" the writer used to print for f32[0,3] reads as shape [1,0], and the
// reader refused its own output.
TEST(StablehloRoundTrip, ConstantsWithoutElements) {
  Program p;
  int x = p.add_input("x", {DType::f32, {0, 3}});
  const Type empty2{DType::f32, {0, 3}}, empty1{DType::i32, {0}};
  int c2 = p.add_eqn_typed(Op::constant, {}, literal({}), empty2);
  p.add_output("sum", p.add_eqn(Op::add, {x, c2}, {}));
  p.add_output("c1", p.add_eqn_typed(Op::constant, {}, literal({}), empty1));
  p.add_output("splat", p.add_eqn_typed(Op::constant, {}, literal({2.0}), empty2));
  const std::string text = to_stablehlo(p);
  EXPECT_NE(text.find("stablehlo.constant dense<> : tensor<0x3xf32>"), std::string::npos) << text;
  EXPECT_NE(text.find("stablehlo.constant dense<> : tensor<0xi32>"), std::string::npos) << text;
  Program back = from_stablehlo(text);
  EXPECT_EQ(program_difference(p, back), "");
  EXPECT_EQ(to_stablehlo(back), text);
  try {
    from_stablehlo(
        "module @m {\n  func.func public @main() -> (tensor<2xf32>) {\n"
        "    %0 = stablehlo.constant dense<> : tensor<2xf32>\n    return %0 : tensor<2xf32>\n  }\n}\n");
    ADD_FAILURE() << "dense<> for a tensor with elements was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stablehlo:3:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dense<> has no elements but f32[2] has 2"), std::string::npos) << e.what();
  }
}

// What JAX itself prints (jax 0.10.2, jax.jit(f, donate_argnums=0).lower(...)
// .as_text(), debug info on) reads as the same computation.
TEST(StablehloRoundTrip, ReadsJaxsOwnText) {
  const char* jax_text = R"MLIR(#loc1 = loc("w")
module @jit_f attributes {jax.uses_shape_polymorphism = false, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x4xf32> {tf.aliasing_output = 1 : i32} loc("w"), %arg1: tensor<2x4xf32> loc("x")) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<2x4xf32> {jax.result_info = "result[1]"}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32> loc(#loc11)
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc15)
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<2x4xf32> loc(#loc16)
    %1 = stablehlo.reduce(%0 init: %cst_0) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x4xf32>, tensor<f32>) -> tensor<f32> loc(#loc15)
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4xf32> loc(#loc17)
    %3 = stablehlo.multiply %arg0, %2 : tensor<2x4xf32> loc(#loc17)
    return %1, %3 : tensor<f32>, tensor<2x4xf32> loc(#loc11)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc11 = loc("jit(f)"(#loc1))
)MLIR";
  Program p = from_stablehlo(jax_text);
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[0].name, "w");
  EXPECT_EQ(p.outputs[1].name, "result[1]");
  ASSERT_EQ(p.aliases.size(), 1u);
  EXPECT_EQ(p.aliases[0], (Alias{1, 0}));
  // constant 2, multiply, reduce_sum (its init folded in), broadcast, multiply.
  ASSERT_EQ(p.eqns.size(), 5u);
  EXPECT_EQ(p.eqns[2].op, Op::reduce_sum);
  Array w = Array::f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Array x = Array::f32({2, 4}, {1, 1, 1, 1, 2, 2, 2, 2});
  auto out = host::run(p, {w, x});
  EXPECT_EQ(out[0].get(0), 1 + 2 + 3 + 4 + 2 * (5 + 6 + 7 + 8));
  EXPECT_EQ(out[1].get(7), 16);
}
