// The fused attention primitives (ir.h attention, attention_grad) against the
// unfused composite causal_attention, on the host interpreter:
//  - fuse_attention finds the traced pattern (and only it) and the fused
//    program's forward and gradients equal the unfused ones, f64 to 1e-12 and
//    f32 within the bound stated below;
//  - expand_attention writes them back as primitives with the same numbers;
//  - the model's programs with --fused-attention (one attention per layer);
//  - the text form and the shape rules' errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/trace.h"
#include "gradcheck_util.h"
#include "test_util.h"

namespace capstep {
namespace {
using test::expect_error;
using test::norm_diff;

int count_op(const Program& p, Op op) {
  int n = 0;
  for (const Eqn& e : p.eqns) n += e.op == op;
  return n;
}

// loss = sum(causal_attention(q, k, v) * r) with r an input, so the
// cotangent reaching attention is r: the program, unfused.
Program attention_loss(DType d, const Shape& s) {
  Tracer tr;
  Tensor q = tr.input("q", {d, s});
  Tensor k = tr.input("k", {d, s});
  Tensor v = tr.input("v", {d, s});
  Tensor r = tr.input("r", {d, s});
  Tensor out = causal_attention(q, k, v);
  return tr.finish({{"loss", sum(out * r)}, {"out", out}});
}

std::vector<Array> inputs_for(DType d, const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Array> in;
  for (int i = 0; i < 4; ++i) in.push_back(gradcheck::random_array(rng, {d, s}, -2, 2));
  return in;
}

// f32: every output of the fused program against the unfused one, relative to
// the largest magnitude of the unfused output (norm_diff). The unfused program
// rounds the scores, the scaled scores, exp, the row sums and each product to
// f32 (a few ulps each, over rows of T <= 33 terms); the host reference sums
// in f64 and rounds once. Observed up to 7.2e-7 (f32[2,3,7,5]); the bound is 2e-6.
constexpr double kF32Bound = 2e-6;

TEST(Attention, FuseFindsThePatternAndMatchesTheUnfusedProgram) {
  for (DType d : {DType::f64, DType::f32}) {
    for (const Shape& s : std::vector<Shape>{{2, 3, 7, 5}, {1, 1, 1, 4}, {1, 2, 33, 16}}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + shape_str(s));
      const Program p = attention_loss(d, s);
      const Program f = fuse_attention(p);
      EXPECT_EQ(count_op(f, Op::attention), 1);
      EXPECT_EQ(count_op(f, Op::dot_general), 0) << to_text(f);
      EXPECT_EQ(count_op(f, Op::exponential), 0);
      const std::vector<Array> in = inputs_for(d, s, 5);
      const std::vector<Array> a = host::Interpreter(p).run(in);
      const std::vector<Array> b = host::Interpreter(f).run(in);
      const double bound = d == DType::f64 ? 1e-12 : kF32Bound;
      EXPECT_LT(norm_diff(b[0], a[0]), bound);
      EXPECT_LT(norm_diff(b[1], a[1]), bound);

      const std::vector<std::string> wrt = {"q", "k", "v"};
      const Program gp = value_and_grad(p, wrt);
      const Program gf = value_and_grad(f, wrt);
      EXPECT_EQ(count_op(gf, Op::attention_grad), 3);
      EXPECT_EQ(count_op(gf, Op::dot_general), 0) << to_text(gf);
      const std::vector<Array> ga = host::Interpreter(gp).run(in);
      const std::vector<Array> gb = host::Interpreter(gf).run(in);
      ASSERT_EQ(ga.size(), gb.size());
      double worst = std::max(norm_diff(b[0], a[0]), norm_diff(b[1], a[1]));
      for (size_t o = 0; o < ga.size(); ++o) {
        EXPECT_LT(norm_diff(gb[o], ga[o]), bound) << gp.outputs[o].name;
        worst = std::max(worst, norm_diff(gb[o], ga[o]));
      }
      std::printf("[attention] %s%s: fused vs unfused, worst normalised difference %.3g\n", dtype_name(d),
                  shape_str(s).c_str(), worst);

      // written back as primitives: the same numbers (the unfused formulas)
      const Program ex = expand_attention(gf);
      EXPECT_EQ(count_op(ex, Op::attention) + count_op(ex, Op::attention_grad), 0);
      const std::vector<Array> gx = host::Interpreter(ex).run(in);
      for (size_t o = 0; o < ga.size(); ++o) EXPECT_LT(norm_diff(gx[o], gb[o]), bound) << gp.outputs[o].name;
    }
  }
}

// expand_attention (what StableHLO export and the PJRT backend run) writes a
// bf16 attention and its gradient out in f32, rounded once to bf16: the same
// values as the f32 program's results rounded to bf16 (a bf16 product of two
// dot_generals would be f32 scores meeting a bf16 mask and bf16 v). T = 0 is
// an empty attention, written out too.
TEST(Attention, ExpandsBf16InF32AndEmptySequences) {
  const Shape s = {1, 2, 5, 4};
  auto program = [](DType d, const Shape& sh) {
    Tracer tr;
    Tensor q = tr.input("q", {d, sh});
    Tensor k = tr.input("k", {d, sh});
    Tensor v = tr.input("v", {d, sh});
    Tensor o = tr.input("o", {d, sh});
    Tensor g = tr.input("g", {d, sh});
    std::vector<std::pair<std::string, Tensor>> outs = {{"out", attention(q, k, v)}};
    for (int64_t axis : {0, 1, 2}) {
      Attrs a;
      a.axis = axis;
      outs.push_back({"d" + std::to_string(axis), tr.emit(Op::attention_grad, {q, k, v, o, g}, a)});
    }
    return tr.finish(outs);
  };
  std::mt19937 rng(5);
  std::vector<Array> in16, in32;
  for (int i = 0; i < 5; ++i) {
    in16.push_back(gradcheck::random_array(rng, {DType::bf16, s}, -2, 2));
    in32.push_back(Array::from_doubles({DType::f32, s}, in16.back().to_doubles()));
  }
  const std::vector<Array> got = host::run(expand_attention(program(DType::bf16, s)), in16);
  const std::vector<Array> want = host::run(expand_attention(program(DType::f32, s)), in32);
  for (size_t j = 0; j < got.size(); ++j)
    EXPECT_TRUE(got[j].bit_equal(Array::from_doubles({DType::bf16, s}, want[j].to_doubles()))) << "output " << j;
  const Shape empty = {1, 2, 0, 3};
  const std::vector<Array> none = host::run(expand_attention(program(DType::f32, empty)),
                                            std::vector<Array>(5, Array(Type{DType::f32, empty})));
  for (const Array& a : none) EXPECT_EQ(a.type(), (Type{DType::f32, empty}));
}

TEST(Attention, OnlyTheCausalPatternIsFused) {
  // softmax(q k^T / sqrt(Dh)) v without the mask is not causal attention
  Tracer tr;
  const Type t{DType::f32, {1, 2, 4, 4}};
  Tensor q = tr.input("q", t);
  Tensor k = tr.input("k", t);
  Tensor v = tr.input("v", t);
  Tensor p = softmax(dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}}) * 0.5, -1);
  Tensor no_mask = dot_general(p, v, {{0, 1}, {0, 1}, {3}, {2}});
  // a scale other than 1/sqrt(Dh)
  Tensor s2 = dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}}) * 0.25 + causal_mask(tr, 4);
  Tensor other_scale = dot_general(softmax(s2, -1), v, {{0, 1}, {0, 1}, {3}, {2}});
  Tensor real = causal_attention(q, k, v);
  const Program f = fuse_attention(tr.finish({{"a", no_mask}, {"b", other_scale}, {"c", real}}));
  EXPECT_EQ(count_op(f, Op::attention), 1);
  EXPECT_EQ(f.outputs[2].value, f.eqns.back().out);
  EXPECT_EQ(f.eqns.back().op, Op::attention);
}

TEST(Attention, TheModelWithFusedAttention) {
  nn::LmConfig c;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 2;
  c.d_ff = 16;
  c.context = 16;
  c.batch = 2;
  c.seq = 9;
  const Program p = nn::lm_loss_program(c);
  const Program f = fuse_attention(p);
  EXPECT_EQ(count_op(f, Op::attention), 2);
  std::mt19937 rng(3);
  std::vector<Array> in;
  for (const NamedValue& x : p.inputs) {
    const Type& t = p.type(x.value);
    if (t.dtype == DType::i32) {
      std::vector<double> v(static_cast<size_t>(t.numel()));
      for (double& y : v) y = static_cast<double>(rng() % 64);
      in.push_back(Array::from_doubles(t, v));
    } else {
      in.push_back(gradcheck::random_array(rng, t, -0.5, 0.5));
    }
  }
  std::vector<std::string> wrt;
  for (const NamedValue& x : p.inputs)
    if (p.type(x.value).dtype != DType::i32) wrt.push_back(x.name);
  const std::vector<Array> a = host::Interpreter(value_and_grad(p, wrt)).run(in);
  const std::vector<Array> b = host::Interpreter(value_and_grad(f, wrt)).run(in);
  ASSERT_EQ(a.size(), b.size());
  // the loss and every gradient: the bound above, loosened 10x for the model's
  // deeper chain of f32 roundings around the attention
  double worst = 0;
  for (size_t o = 0; o < a.size(); ++o) {
    EXPECT_LT(norm_diff(b[o], a[o]), 10 * kF32Bound) << o;
    worst = std::max(worst, norm_diff(b[o], a[o]));
  }
  std::printf("[attention] model loss and gradients, fused vs unfused: worst normalised difference %.3g\n", worst);
}

TEST(Attention, TextRoundTripAndShapeErrors) {
  Tracer tr;
  const Type t{DType::f32, {1, 2, 3, 4}};
  Tensor q = tr.input("q", t);
  Tensor o = attention(q, q, q);
  Attrs a;
  a.axis = 1;
  Tensor dk = tr.emit(Op::attention_grad, {q, q, q, o, o}, a);
  const Program p = tr.finish({{"dk", dk}});
  const std::string text = to_text(p);
  EXPECT_NE(text.find("attention_grad(%0, %0, %0, %1, %1) {axis=1} : f32[1,2,3,4]"), std::string::npos) << text;
  EXPECT_EQ(to_text(parse_text(text)), text);

  Tracer t2;
  Tensor x = t2.input("x", t);
  Tensor y = t2.input("y", {DType::f32, {1, 2, 3, 5}});
  Tensor z = t2.input("z", {DType::f32, {2, 3, 4}});
  Tensor n = t2.input("n", {DType::i32, {1, 2, 3, 4}});
  Tensor e = t2.input("e", {DType::f32, {1, 2, 3, 0}});
  expect_error([&] { attention(x, y, x); }, {"attention", "every operand must have q's type"});
  expect_error([&] { attention(z, z, z); }, {"attention", "[B,H,T,Dh]"});
  expect_error([&] { attention(n, n, n); }, {"attention", "float"});
  expect_error([&] { attention(e, e, e); }, {"Dh", "at least 1"});
  Attrs bad;
  bad.axis = 3;
  expect_error([&] { t2.emit(Op::attention_grad, {x, x, x, x, x}, bad); }, {"axis 3", "0 (dq), 1 (dk) or 2 (dv)"});
}

}  // namespace
}  // namespace capstep
