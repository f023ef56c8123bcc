// Every differentiable primitive's VJP, the composites, and a small
// transformer, checked against finite differences in float64.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "gradcheck_util.h"
#include "test_util.h"
#include "trace/internal.h"

namespace {

using namespace capstep;
using gradcheck::check;
using gradcheck::Options;
using gradcheck::random_array;
using gradcheck::weighted_sum;
using test::error_of;

constexpr double kTol = 1e-6;
const DType f64 = DType::f64;

void expect_close_grads(const Program& p, const std::vector<Array>& in, const std::vector<std::string>& wrt,
                        Options opt = {}) {
  gradcheck::Report r = check(p, in, wrt, opt);
  if (std::getenv("GRADCHECK_VERBOSE")) std::printf("  checked %d, max rel err %.3g at %s\n", r.checked, r.max_rel_err, r.worst.c_str());
  EXPECT_GT(r.checked, 0);
  EXPECT_LT(r.max_rel_err, kTol) << r.worst << "\nprogram:\n" << to_text(value_and_grad(p, wrt));
}

std::string shape_name(const Shape& s) { return shape_str(s); }

const std::vector<Shape> kShapes = {{}, {5}, {3, 4}, {2, 3, 4}};

// ---- elementwise --------------------------------------------------------------

void check_unary(const std::function<Tensor(const Tensor&)>& f, double lo, double hi) {
  std::mt19937 rng(1);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor x = tr.input("x", {f64, s});
    Program p = tr.finish({{"loss", weighted_sum(tr, f(x), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, s}, lo, hi)}, {"x"});
  }
}

TEST(GradCheck, Negate) { check_unary([](const Tensor& x) { return -x; }, -2, 2); }
TEST(GradCheck, Exponential) { check_unary([](const Tensor& x) { return exp(x); }, -2, 2); }
TEST(GradCheck, Log) { check_unary([](const Tensor& x) { return log(x); }, 0.5, 3); }
TEST(GradCheck, Tanh) { check_unary([](const Tensor& x) { return tanh(x); }, -2, 2); }
TEST(GradCheck, Rsqrt) { check_unary([](const Tensor& x) { return rsqrt(x); }, 0.5, 3); }
TEST(GradCheck, Sqrt) { check_unary([](const Tensor& x) { return sqrt(x); }, 0.5, 3); }

void check_binary(const std::function<Tensor(const Tensor&, const Tensor&)>& f, double blo, double bhi) {
  std::mt19937 rng(2);
  // Same shapes, then NumPy broadcasting (recorded as broadcast_in_dim).
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {}}, {{5}, {5}}, {{3, 4}, {3, 4}}, {{2, 3, 4}, {2, 3, 4}},
      {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{}, {3, 4}}, {{2, 3, 4}, {3, 1}}, {{2, 1, 4}, {2, 3, 1}}};
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(shape_name(sa) + " with " + shape_name(sb));
    Tracer tr;
    Tensor a = tr.input("a", {f64, sa});
    Tensor b = tr.input("b", {f64, sb});
    Program p = tr.finish({{"loss", weighted_sum(tr, f(a, b), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, sa}), random_array(rng, {f64, sb}, blo, bhi)}, {"a", "b"});
  }
}

TEST(GradCheck, Add) { check_binary([](const Tensor& a, const Tensor& b) { return a + b; }, -1, 1); }
TEST(GradCheck, Subtract) { check_binary([](const Tensor& a, const Tensor& b) { return a - b; }, -1, 1); }
TEST(GradCheck, Multiply) { check_binary([](const Tensor& a, const Tensor& b) { return a * b; }, -1, 1); }
TEST(GradCheck, Divide) { check_binary([](const Tensor& a, const Tensor& b) { return a / b; }, 0.5, 2); }
TEST(GradCheck, ScalarOperands) {
  check_binary([](const Tensor& a, const Tensor& b) { return (2.5 - a) * (b / 3.0) + 1.5 / (b + 4.0); }, 0.5, 2);
}

TEST(GradCheck, Maximum) {
  // b = a + an offset of at least 0.05 either way: no tie within reach of a step.
  std::mt19937 rng(3);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor a = tr.input("a", {f64, s});
    Tensor b = tr.input("b", {f64, s});
    Program p = tr.finish({{"loss", weighted_sum(tr, maximum(a, b), rng)}});
    Array av = random_array(rng, {f64, s});
    Array bv = av;
    std::uniform_real_distribution<double> off(0.05, 0.5);
    for (int64_t i = 0; i < bv.numel(); ++i) bv.set(i, av.get(i) + (i % 2 ? off(rng) : -off(rng)));
    expect_close_grads(p, {av, bv}, {"a", "b"});
  }
}

TEST(GradCheck, Select) {
  std::mt19937 rng(4);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor c = tr.input("c", {f64, s});
    Tensor a = tr.input("a", {f64, s});
    Tensor b = tr.input("b", {f64, s});
    Tensor y = select(compare(c, tr.constant({f64, s}, {0.0}), Cmp::GT), a * a, exp(b));
    Program p = tr.finish({{"loss", weighted_sum(tr, y, rng)}});
    expect_close_grads(p, {random_array(rng, {f64, s}), random_array(rng, {f64, s}), random_array(rng, {f64, s})},
                       {"a", "b", "c"});
  }
}

TEST(GradCheck, ConvertF32ToF64) {
  // The step is measured after rounding to f32; sum(convert(x)^2 * R) is then
  // checked in f64 arithmetic.
  std::mt19937 rng(5);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor x = tr.input("x", {DType::f32, s});
    Tensor y = convert(x, f64);
    Program p = tr.finish({{"loss", weighted_sum(tr, y, rng)}});
    Options opt;
    opt.h = 1.0 / 1024;  // exactly representable steps: the 4-point stencil applies
    expect_close_grads(p, {random_array(rng, {DType::f32, s})}, {"x"}, opt);
  }
}

TEST(GradCheck, ConvertF64ToF32IsIdentityOnCotangents) {
  // d/dx sum(f32(x) * R) = R, carried back to f64.
  std::mt19937 rng(6);
  Tracer tr;
  Tensor x = tr.input("x", {f64, {3, 4}});
  std::vector<double> r = gradcheck::uniform(rng, 12, -1, 1);
  for (double& v : r) v = static_cast<float>(v);
  Tensor loss = sum(convert(x, DType::f32) * tr.constant({DType::f32, {3, 4}}, r));
  Program g = value_and_grad(tr.finish({{"loss", loss}}), {"x"});
  std::vector<Array> out = host::run(g, {random_array(rng, {f64, {3, 4}})});
  ASSERT_EQ(out[1].dtype(), f64);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[1].get(i), r[static_cast<size_t>(i)]) << i;
}

// ---- shape ----------------------------------------------------------------------

TEST(GradCheck, BroadcastInDim) {
  std::mt19937 rng(7);
  struct C { Shape in, out; std::vector<int64_t> dims; };
  const std::vector<C> cases = {{{}, {2, 3}, {}},         {{3}, {2, 3, 4}, {1}},     {{3, 1}, {2, 3, 4}, {1, 2}},
                                {{1, 4}, {4, 4}, {0, 1}}, {{2, 4}, {2, 3, 4}, {0, 2}}, {{1}, {1}, {0}}};
  for (const C& c : cases) {
    SCOPED_TRACE(shape_name(c.in) + " -> " + shape_name(c.out));
    Tracer tr;
    Tensor x = tr.input("x", {f64, c.in});
    Program p = tr.finish({{"loss", weighted_sum(tr, broadcast_in_dim(x, c.out, c.dims), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, c.in})}, {"x"});
  }
}

TEST(GradCheck, Reshape) {
  std::mt19937 rng(8);
  const std::vector<std::pair<Shape, Shape>> cases = {{{2, 3, 4}, {6, 4}}, {{4, 6}, {2, 2, 6}}, {{1}, {}}, {{6}, {3, 2}}};
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(shape_name(a) + " -> " + shape_name(b));
    Tracer tr;
    Tensor x = tr.input("x", {f64, a});
    Program p = tr.finish({{"loss", weighted_sum(tr, reshape(x * x, b), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, a})}, {"x"});
  }
}

TEST(GradCheck, Transpose) {
  std::mt19937 rng(9);
  const std::vector<std::vector<int64_t>> perms = {{1, 0, 2}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
  for (const auto& perm : perms) {
    SCOPED_TRACE(shape_name(perm));
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 4}});
    Program p = tr.finish({{"loss", weighted_sum(tr, transpose(x * x, perm), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, {2, 3, 4}})}, {"x"});
  }
}

// slice, pad and concatenate are linear: x * x before them makes the loss
// depend on x nonlinearly, so that a cotangent put in the wrong place shows.
bool has_op(const Program& p, Op op) {
  for (const Eqn& e : p.eqns)
    if (e.op == op) return true;
  return false;
}

TEST(GradCheck, Slice) {
  std::mt19937 rng(31);
  struct Case {
    std::vector<int64_t> starts, limits, strides;
  };
  // stride 1; strides 2 and 3 (the VJP spreads the cotangent); an empty slice
  const std::vector<Case> cases = {{{0, 1, 1}, {2, 3, 4}, {}},
                                   {{1, 0, 0}, {2, 3, 2}, {}},
                                   {{0, 0, 1}, {2, 3, 4}, {1, 2, 2}},
                                   {{0, 1, 0}, {2, 3, 4}, {2, 1, 3}},
                                   {{0, 2, 0}, {2, 2, 4}, {}},
                                   {{1, 0, 0}, {2, 3, 4}, {1000000, 2, 1}}};  // one element along axis 0
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_name(c.starts) + shape_name(c.limits) + shape_name(c.strides));
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 4}});
    Tensor y = slice(x * x, c.starts, c.limits, c.strides);
    Program p = tr.finish({{"loss", sum(y * y) + weighted_sum(tr, x, rng)}});
    ASSERT_TRUE(has_op(p, Op::slice));
    EXPECT_TRUE(has_op(value_and_grad(p, {"x"}), Op::pad)) << "the VJP of slice is a pad";
    expect_close_grads(p, {random_array(rng, {f64, {2, 3, 4}})}, {"x"});
  }
}

TEST(GradCheck, Pad) {
  std::mt19937 rng(32);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{1, 0, 2}, {0, 3, 1}}, {{0, 0, 0}, {1, 0, 0}}, {{2, 1, 1}, {2, 1, 1}}};
  for (const auto& [lo, hi] : cases) {
    SCOPED_TRACE(shape_name(lo) + shape_name(hi));
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 4}});
    Tensor y = pad(x * x, lo, hi);
    Program p = tr.finish({{"loss", weighted_sum(tr, y, rng)}});
    ASSERT_TRUE(has_op(p, Op::pad));
    EXPECT_TRUE(has_op(value_and_grad(p, {"x"}), Op::slice)) << "the VJP of pad is a slice";
    expect_close_grads(p, {random_array(rng, {f64, {2, 3, 4}})}, {"x"});
  }
}

TEST(GradCheck, Concatenate) {
  std::mt19937 rng(33);
  for (int64_t axis : {0, 1, 2, -1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    Tracer tr;
    const int64_t a = axis < 0 ? 2 : axis;
    Shape sa = {2, 3, 4}, sb = {2, 3, 4}, sc = {2, 3, 4};
    sb[static_cast<size_t>(a)] = 1;
    sc[static_cast<size_t>(a)] = 0;  // an empty operand takes no room
    Tensor x = tr.input("x", {f64, sa});
    Tensor y = tr.input("y", {f64, sb});
    Tensor z = tr.input("z", {f64, sc});
    Tensor c = concatenate({x * x, tanh(y), z, x}, axis);
    Program p = tr.finish({{"loss", weighted_sum(tr, c, rng)}});
    expect_close_grads(p, {random_array(rng, {f64, sa}), random_array(rng, {f64, sb}), random_array(rng, {f64, sc})},
                       {"x", "y"});
  }
}

// ---- contractions -------------------------------------------------------------------

// The fused attention primitive: its VJP (three attention_grad equations)
// against finite differences of its host reference, in f64, for shapes with
// T = 1 (one key), T not a multiple of anything, and Dh = 1.
TEST(GradCheck, Attention) {
  std::mt19937 rng(31);
  for (const Shape& s : std::vector<Shape>{{1, 1, 1, 3}, {2, 3, 7, 5}, {1, 2, 4, 1}}) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor q = tr.input("q", {f64, s});
    Tensor k = tr.input("k", {f64, s});
    Tensor v = tr.input("v", {f64, s});
    Program p = tr.finish({{"loss", weighted_sum(tr, attention(q, k, v), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, s}, -2, 2), random_array(rng, {f64, s}, -2, 2),
                           random_array(rng, {f64, s}, -2, 2)},
                       {"q", "k", "v"});
  }
}

TEST(GradCheck, AttentionGradHasNoVjp) {
  Tracer tr;
  const Type t{f64, {1, 1, 2, 2}};
  Tensor q = tr.input("q", t);
  Tensor o = attention(q, q, q);
  Attrs a;
  a.axis = 0;
  Tensor dq = tr.emit(Op::attention_grad, {q, q, q, o, o}, a);
  Program p = tr.finish({{"loss", sum(dq)}});
  const std::string why = error_of([&] { value_and_grad(p, {"q"}); });
  EXPECT_NE(why.find("attention_grad has no VJP"), std::string::npos) << why;
}

// The AdamW update (ir.h adamw, what with_adamw appends) is not differentiated.
TEST(GradCheck, AdamwHasNoVjp) {
  Tracer tr;
  const Type t{DType::f32, {3}};
  Tensor w = tr.input("w", t);
  Tensor s = tr.input("s", {DType::f32, {}});
  Attrs a;
  a.literal = {0.9, 0.999, 1e-8};
  Tensor np = tr.emit(Op::adamw, {w, w * w, w, w, s, s, s, s}, a);
  Program p = tr.finish({{"loss", sum(np)}});
  const std::string why = error_of([&] { value_and_grad(p, {"w"}); });
  EXPECT_NE(why.find("adamw has no VJP"), std::string::npos) << why;
}

TEST(GradCheck, DotGeneral) {
  std::mt19937 rng(10);
  struct C { const char* what; Shape a, b; DotDims d; };
  const std::vector<C> cases = {
      {"matmul", {3, 4}, {4, 5}, {{}, {}, {1}, {0}}},
      {"lhs transposed", {4, 3}, {4, 5}, {{}, {}, {0}, {0}}},
      {"rhs transposed", {3, 4}, {5, 4}, {{}, {}, {1}, {1}}},
      {"batched", {2, 3, 4}, {2, 4, 5}, {{0}, {0}, {2}, {1}}},
      {"batch not leading", {4, 2, 3}, {3, 5, 2}, {{1}, {2}, {2}, {0}}},
      {"rhs batch last", {2, 3, 4}, {5, 4, 2}, {{0}, {2}, {2}, {1}}},
      {"two contracting", {2, 3, 4}, {4, 3, 5}, {{}, {}, {1, 2}, {1, 0}}},
      {"q k^T", {2, 2, 3, 4}, {2, 2, 5, 4}, {{0, 1}, {0, 1}, {3}, {3}}},
      {"swapped batches", {2, 3, 4, 5}, {3, 2, 5, 6}, {{1, 0}, {0, 1}, {3}, {2}}},
      {"vector dot", {4}, {4}, {{}, {}, {0}, {0}}},
      {"outer", {3}, {2}, {{}, {}, {}, {}}},
      {"matrix vector", {3, 4}, {4}, {{}, {}, {1}, {0}}},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.what);
    Tracer tr;
    Tensor a = tr.input("a", {f64, c.a});
    Tensor b = tr.input("b", {f64, c.b});
    Program p = tr.finish({{"loss", weighted_sum(tr, dot_general(a, b, c.d), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, c.a}), random_array(rng, {f64, c.b})}, {"a", "b"});
  }
}

TEST(GradCheck, ReduceSum) {
  std::mt19937 rng(11);
  for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    SCOPED_TRACE(shape_name(axes));
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 4}});
    Program p = tr.finish({{"loss", weighted_sum(tr, sum(x * x, axes), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, {2, 3, 4}})}, {"x"});
  }
}

TEST(GradCheck, ReduceMax) {
  std::mt19937 rng(12);
  for (const auto& axes : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    SCOPED_TRACE(shape_name(axes));
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 4}});
    Program p = tr.finish({{"loss", weighted_sum(tr, max(x, axes), rng)}});
    expect_close_grads(p, {gradcheck::distinct_array(rng, {f64, {2, 3, 4}})}, {"x"});
  }
}

// At a tie the max is not differentiable, but along x + t*(1,...,1) it is:
// max(x + t) = max(x) + t, so any gradient must sum to 1 over each reduced
// group (each tied position used to get the whole cotangent: the sum was the
// number of ties). Ties share it equally, as in JAX.
TEST(GradCheck, ReduceMaxTiesShareTheCotangent) {
  Tracer tr;
  Tensor x = tr.input("x", {f64, {2, 4}});
  Program g = value_and_grad(tr.finish({{"loss", sum(max(x, {1}) * Tensor(tr.constant({f64, {2}}, {1.0, 3.0})))}}), {"x"});
  std::vector<Array> out = host::run(g, {Array::f64({2, 4}, {5, 1, 5, 5, -2, 7, 7, 0})});
  const std::vector<double> want = {1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 0, 1.5, 1.5, 0};
  for (int64_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(out[1].get(i), want[static_cast<size_t>(i)]) << "element " << i;
  // All axes, one tie of two.
  Tracer t2;
  Tensor y = t2.input("y", {f64, {3}});
  std::vector<Array> o2 = host::run(value_and_grad(t2.finish({{"m", max(y, {0})}}), {"y"}), {Array::f64({3}, {2, -1, 2})});
  EXPECT_EQ(o2[1].to_doubles(), (std::vector<double>{0.5, 0, 0.5}));
}

// ---- rows ------------------------------------------------------------------------------

TEST(GradCheck, GatherRows) {
  std::mt19937 rng(13);
  struct C { Shape table, idx; std::vector<int32_t> rows; };
  const std::vector<C> cases = {{{6, 3}, {2, 4}, {0, 5, 2, 2, 1, 5, 5, 3}},  // repeated rows accumulate
                                {{5}, {3}, {4, 0, 4}},
                                {{4, 2, 3}, {3}, {3, 1, 3}}};
  for (const C& c : cases) {
    SCOPED_TRACE(shape_name(c.table));
    Tracer tr;
    Tensor t = tr.input("table", {f64, c.table});
    Tensor i = tr.input("idx", {DType::i32, c.idx});
    Program p = tr.finish({{"loss", weighted_sum(tr, gather_rows(t, i), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, c.table}), Array::i32(c.idx, c.rows)}, {"table"});
  }
}

TEST(GradCheck, ScatterAddRows) {
  std::mt19937 rng(14);
  Tracer tr;
  Tensor op = tr.input("operand", {f64, {5, 3}});
  Tensor i = tr.input("idx", {DType::i32, {4}});
  Tensor u = tr.input("upd", {f64, {4, 3}});
  Program p = tr.finish({{"loss", weighted_sum(tr, scatter_add_rows(op * op, i, u * u), rng)}});
  expect_close_grads(p, {random_array(rng, {f64, {5, 3}}), Array::i32({4}, {1, 4, 1, 0}), random_array(rng, {f64, {4, 3}})},
                     {"operand", "upd"});
}

// ---- non-differentiable paths -------------------------------------------------------------

TEST(GradCheck, ComparisonsIotaAndConstantsCarryNothing) {
  // The loss depends on x only through compare: the gradient is exactly zero,
  // and y (unused) gets zeros of its type.
  Tracer tr;
  Tensor x = tr.input("x", {f64, {3, 4}});
  tr.input("y", {DType::f32, {2}});
  Tensor idx = tr.iota({DType::i32, {3, 4}}, 1);
  Tensor pred = compare(x, convert(idx, f64), Cmp::LT);
  Tensor loss = sum(select(pred, tr.full({3, 4}, 2.0, f64), tr.full({3, 4}, -1.0, f64)));
  Program g = value_and_grad(tr.finish({{"loss", loss}}), {"x", "y"});
  std::mt19937 rng(15);
  std::vector<Array> out = host::run(g, {random_array(rng, {f64, {3, 4}}, 0, 4), Array::f32({2}, {1, 2})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].type(), (Type{f64, {3, 4}}));
  EXPECT_EQ(out[2].type(), (Type{DType::f32, {2}}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[1].get(i), 0.0);
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(out[2].get(i), 0.0);
}

// ---- composites ---------------------------------------------------------------------------

TEST(GradCheck, Softmax) {
  std::mt19937 rng(16);
  for (int64_t axis : {-1, 0, 1}) {
    SCOPED_TRACE(axis);
    Tracer tr;
    Tensor x = tr.input("x", {f64, {3, 5}});
    Program p = tr.finish({{"loss", weighted_sum(tr, softmax(x, axis), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, {3, 5}}, -3, 3)}, {"x"});
  }
}

TEST(GradCheck, LogSoftmax) {
  std::mt19937 rng(17);
  for (int64_t axis : {-1, 0}) {
    SCOPED_TRACE(axis);
    Tracer tr;
    Tensor x = tr.input("x", {f64, {2, 3, 5}});
    Program p = tr.finish({{"loss", weighted_sum(tr, log_softmax(x, axis), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, {2, 3, 5}}, -3, 3)}, {"x"});
  }
}

// The max shift of softmax and log-softmax is marked no_grad: their gradient
// programs differentiate no reduce_max (no arg-max compare, tie count or
// select), and still agree with finite differences (the tests above). The
// mark is what does it: the same shift without it brings the tie logic back.
TEST(GradCheck, SoftmaxShiftIsNotDifferentiated) {
  auto count = [](const Program& p, Op op) {
    int n = 0;
    for (const Eqn& e : p.eqns) n += e.op == op;
    return n;
  };
  for (bool log_form : {false, true}) {
    Tracer tr;
    Tensor x = tr.input("x", {f64, {3, 5}});
    Tensor y = log_form ? log_softmax(x, -1) : softmax(x, -1);
    const Program p = tr.finish({{"loss", sum(y * y)}});
    ASSERT_EQ(count(p, Op::reduce_max), 1);
    const Program g = value_and_grad(p, {"x"});
    EXPECT_EQ(count(g, Op::compare), 0) << to_text(g);
    EXPECT_EQ(count(g, Op::select), 0) << to_text(g);
    EXPECT_EQ(count(g, Op::reduce_max), 1);  // the forward's
    Program unmarked = p;
    for (Eqn& e : unmarked.eqns) e.attrs.no_grad = false;
    const Program gu = value_and_grad(unmarked, {"x"});
    EXPECT_EQ(count(gu, Op::compare), 1);  // the arg-max positions
    EXPECT_EQ(count(gu, Op::select), 1);
  }
}

// A no_grad equation is a constant to value_and_grad, for any op; the mark
// survives the text form and keeps CSE from merging it with an unmarked twin.
TEST(GradCheck, NoGradStopsTheGradient) {
  Tracer tr;
  Tensor x = tr.input("x", {f64, {4}});
  Tensor a = exp(x);
  Tensor b = exp(x);
  trace_detail::mark_no_grad(b);
  Program p = tr.finish({{"loss", sum(a * b)}});  // d/dx = exp(x) * exp(x) with b held constant
  const Program g = value_and_grad(p, {"x"});
  EXPECT_NE(to_text(p).find("exponential(%0) {no_grad=1}"), std::string::npos) << to_text(p);
  EXPECT_EQ(to_text(parse_text(to_text(p))), to_text(p));
  int exps = 0;
  for (const Eqn& e : eliminate_common_subexpressions(p).eqns) exps += e.op == Op::exponential;
  EXPECT_EQ(exps, 2);
  std::vector<Array> in = {Array({f64, {4}})};
  for (int i = 0; i < 4; ++i) in[0].set(i, 0.25 * i - 0.3);
  const std::vector<Array> out = host::run(g, in);
  for (int i = 0; i < 4; ++i) {
    const double e = std::exp(in[0].get(i));
    EXPECT_NEAR(out[1].get(i), e * e, 1e-12) << i;  // not 2 e^2: b's path carries nothing
  }
}

TEST(GradCheck, Gelu) { check_unary([](const Tensor& x) { return gelu_tanh(x); }, -3, 3); }
TEST(GradCheck, Sigmoid) { check_unary([](const Tensor& x) { return sigmoid(x); }, -4, 4); }
TEST(GradCheck, Silu) { check_unary([](const Tensor& x) { return silu(x); }, -4, 4); }

// Far below the clamp (x < -80) SiLU and its gradient stay finite: exp(-x)
// alone would be infinite there, and the VJP of exp a NaN.
TEST(GradCheck, SiluIsFiniteFarBelowZero) {
  for (DType d : {DType::f32, DType::f64}) {
    Tracer tr;
    Tensor x = tr.input("x", {d, {4}});
    Program p = value_and_grad(tr.finish({{"loss", sum(silu(x))}}), {"x"});
    const std::vector<Array> out = host::run(p, {Array::from_doubles({d, {4}}, {-1000.0, -100.0, 0.0, 30.0})});
    const std::vector<double> g = out[1].to_doubles();
    for (double v : g) EXPECT_TRUE(std::isfinite(v)) << dtype_name(d);
    EXPECT_LT(std::fabs(g[0]), 1e-34);  // 1 / (1 + exp(80)), the clamp's
    EXPECT_EQ(g[2], 0.5);  // d/dx x sigmoid(x) at 0 = sigmoid(0) = 1/2
    EXPECT_NEAR(g[3], 1.0, 1e-11);
    EXPECT_NEAR(out[0].get(0), 30.0 / (1.0 + std::exp(-30.0)), 1e-5);
  }
}

TEST(GradCheck, RmsNorm) {
  std::mt19937 rng(18);
  for (const Shape& s : std::vector<Shape>{{6}, {3, 6}, {2, 3, 6}}) {
    SCOPED_TRACE(shape_name(s));
    Tracer tr;
    Tensor x = tr.input("x", {f64, s});
    Tensor gain = tr.input("gain", {f64, {6}});
    Program p = tr.finish({{"loss", weighted_sum(tr, rms_norm(x, gain), rng)}});
    expect_close_grads(p, {random_array(rng, {f64, s}), random_array(rng, {f64, {6}}, 0.5, 1.5)}, {"x", "gain"});
  }
}

TEST(GradCheck, CrossEntropy) {
  std::mt19937 rng(19);
  Tracer tr;
  Tensor logits = tr.input("logits", {f64, {2, 3, 5}});
  Tensor targets = tr.input("targets", {DType::i32, {2, 3}});
  Program p = tr.finish({{"loss", cross_entropy(logits, targets)}});
  expect_close_grads(p, {random_array(rng, {f64, {2, 3, 5}}, -3, 3), Array::i32({2, 3}, {0, 4, 2, 2, 1, 3})},
                     {"logits"});
}

TEST(GradCheck, CausalAttention) {
  std::mt19937 rng(20);
  const Type t{f64, {2, 2, 3, 4}};
  Tracer tr;
  Tensor q = tr.input("q", t);
  Tensor k = tr.input("k", t);
  Tensor v = tr.input("v", t);
  Program p = tr.finish({{"loss", weighted_sum(tr, causal_attention(q, k, v), rng)}});
  expect_close_grads(p, {random_array(rng, t), random_array(rng, t), random_array(rng, t)}, {"q", "k", "v"});
}

// ---- a small transformer, end to end ---------------------------------------------------------

TEST(GradCheck, TinyTransformer) {
  const int64_t V = 7, D = 8, H = 2, Dh = D / H, F = 12, B = 2, T = 4;
  std::mt19937 rng(21);
  Tracer tr;
  std::vector<std::pair<std::string, Shape>> params = {
      {"tok_emb", {V, D}}, {"pos_emb", {T, D}}, {"norm1", {D}}, {"wq", {D, D}}, {"wk", {D, D}}, {"wv", {D, D}},
      {"wo", {D, D}},      {"norm2", {D}},      {"w1", {D, F}}, {"w2", {F, D}}, {"norm_f", {D}}, {"head", {D, V}}};
  std::map<std::string, Tensor> w;
  std::vector<Array> values;
  std::vector<std::string> names;
  for (const auto& [name, shape] : params) {
    w[name] = tr.input(name, {f64, shape});
    names.push_back(name);
    const bool gain = name.rfind("norm", 0) == 0;
    values.push_back(random_array(rng, {f64, shape}, gain ? 0.5 : -0.5, gain ? 1.5 : 0.5));
  }
  Tensor tokens = tr.input("tokens", {DType::i32, {B, T}});
  Tensor targets = tr.input("targets", {DType::i32, {B, T}});
  values.push_back(Array::i32({B, T}, {1, 3, 0, 6, 2, 2, 5, 4}));
  values.push_back(Array::i32({B, T}, {3, 0, 6, 1, 2, 5, 4, 4}));

  Tensor x = gather_rows(w["tok_emb"], tokens) + gather_rows(w["pos_emb"], tr.iota({DType::i32, {T}}, 0));
  auto heads = [&](const Tensor& y) { return transpose(reshape(y, {B, T, H, Dh}), {0, 2, 1, 3}); };
  Tensor h = rms_norm(x, w["norm1"]);
  Tensor a = causal_attention(heads(matmul(h, w["wq"])), heads(matmul(h, w["wk"])), heads(matmul(h, w["wv"])));
  x = x + matmul(reshape(transpose(a, {0, 2, 1, 3}), {B, T, D}), w["wo"]);
  x = x + matmul(gelu_tanh(matmul(rms_norm(x, w["norm2"]), w["w1"])), w["w2"]);
  Tensor logits = matmul(rms_norm(x, w["norm_f"]), w["head"]);
  Program p = tr.finish({{"loss", cross_entropy(logits, targets)}});

  Options opt;
  opt.samples = 10;
  expect_close_grads(p, values, names, opt);
}

TEST(GradCheck, F32GradientsMatchF64) {
  // The same loss captured in f32 and f64: the f32 gradient program (the one
  // training runs) agrees with the f64 one to f32 accuracy.
  std::mt19937 rng(22);
  auto build = [](DType d) {
    Tracer tr;
    Tensor x = tr.input("x", {d, {6, 8}});
    Tensor g = tr.input("g", {d, {8}});
    Tensor w = tr.input("w", {d, {8, 5}});
    Tensor t = tr.input("t", {DType::i32, {6}});
    Tensor h = gelu_tanh(rms_norm(x, g));
    return tr.finish({{"loss", cross_entropy(matmul(softmax(h) * h, w), t)}});
  };
  std::vector<Array> in64 = {random_array(rng, {f64, {6, 8}}, -2, 2), random_array(rng, {f64, {8}}, 0.5, 1.5),
                             random_array(rng, {f64, {8, 5}}, -1, 1), Array::i32({6}, {0, 4, 1, 1, 3, 2})};
  std::vector<Array> in32;
  for (const Array& a : in64) in32.push_back(a.dtype() == f64 ? a.converted(DType::f32) : a);
  std::vector<Array> o64 = host::run(value_and_grad(build(f64), {"x", "g", "w"}), in64);
  std::vector<Array> o32 = host::run(value_and_grad(build(DType::f32), {"x", "g", "w"}), in32);
  ASSERT_EQ(o32[1].dtype(), DType::f32);
  EXPECT_NEAR(o32[0].get(0), o64[0].get(0), 1e-5 * std::fabs(o64[0].get(0)));
  for (size_t k = 1; k < 4; ++k) {
    double scale = 0, err = 0;
    for (int64_t i = 0; i < o64[k].numel(); ++i) {
      scale = std::max(scale, std::fabs(o64[k].get(i)));
      err = std::max(err, std::fabs(o64[k].get(i) - o32[k].get(i)));
    }
    EXPECT_LT(err, 1e-5 * scale) << "output " << k;
  }
}

// One process is one replica: all_reduce is the identity there, and so is its
// VJP (an all_reduce of the cotangent). tests/all_reduce_test.cpp checks the
// sum of the cotangents across replicas.
TEST(GradCheck, AllReduce) { check_unary([](const Tensor& x) { return all_reduce(x * x); }, -2, 2); }

// Which test above checks each primitive's VJP. A switch with no default: a
// primitive added to the table without a gradient check does not compile.
const char* grad_test_of(Op op) {
  switch (op) {
    case Op::constant: return "ComparisonsIotaAndConstantsCarryNothing";
    case Op::iota: return "ComparisonsIotaAndConstantsCarryNothing";
    case Op::compare: return "ComparisonsIotaAndConstantsCarryNothing";
    case Op::add: return "Add";
    case Op::subtract: return "Subtract";
    case Op::multiply: return "Multiply";
    case Op::divide: return "Divide";
    case Op::maximum: return "Maximum";
    case Op::negate: return "Negate";
    case Op::exponential: return "Exponential";
    case Op::log: return "Log";
    case Op::tanh: return "Tanh";
    case Op::rsqrt: return "Rsqrt";
    case Op::sqrt: return "Sqrt";
    case Op::select: return "Select";
    case Op::convert: return "ConvertF32ToF64";
    case Op::broadcast_in_dim: return "BroadcastInDim";
    case Op::reshape: return "Reshape";
    case Op::transpose: return "Transpose";
    case Op::dot_general: return "DotGeneral";
    case Op::reduce_sum: return "ReduceSum";
    case Op::reduce_max: return "ReduceMax";
    case Op::gather_rows: return "GatherRows";
    case Op::scatter_add_rows: return "ScatterAddRows";
    case Op::attention: return "Attention";
    case Op::attention_grad: return "AttentionGradHasNoVjp";
    case Op::adamw: return "AdamwHasNoVjp";
    case Op::all_reduce: return "AllReduce";
    case Op::slice: return "Slice";
    case Op::pad: return "Pad";
    case Op::concatenate: return "Concatenate";
  }
  return nullptr;
}

TEST(GradCheck, EveryPrimitiveHasACheck) {
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < kNumOps; ++i) {
    const std::string name = grad_test_of(static_cast<Op>(i));
    bool found = false;
    for (int s = 0; s < ut.total_test_suite_count(); ++s) {
      const ::testing::TestSuite& suite = *ut.GetTestSuite(s);
      for (int t = 0; t < suite.total_test_count(); ++t)
        found = found || (std::string(suite.name()) == "GradCheck" && suite.GetTestInfo(t)->name() == name);
    }
    EXPECT_TRUE(found) << op_name(static_cast<Op>(i)) << ": no test GradCheck." << name;
  }
}

// ---- the transform's contract -------------------------------------------------------------------

TEST(ValueAndGrad, OutputsFollowTheForwardOutputs) {
  Tracer tr;
  Tensor a = tr.input("a", {DType::f32, {3}});
  Tensor b = tr.input("b", {DType::f32, {3}});
  tr.input("n", {DType::i32, {}});
  Tensor y = a * b;
  Program p = tr.finish({{"loss", sum(y)}, {"y", y}});
  Program g = value_and_grad(p, {"b", "a"});
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.inputs[2].name, "n");
  ASSERT_EQ(g.outputs.size(), 4u);
  EXPECT_EQ(g.outputs[0].name, "loss");
  EXPECT_EQ(g.outputs[1].name, "y");
  EXPECT_EQ(g.outputs[2].name, "grad.b");
  EXPECT_EQ(g.outputs[3].name, "grad.a");
  verify(g);
  std::vector<Array> out = host::run(g, {Array::f32({3}, {1, 2, 3}), Array::f32({3}, {4, 5, 6}), Array::i32({}, {0})});
  EXPECT_EQ(out[0].get(0), 32.0);
  EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{1, 2, 3}));  // d/db = a
  EXPECT_EQ(out[3].to_doubles(), (std::vector<double>{4, 5, 6}));  // d/da = b
}


TEST(ValueAndGrad, RejectsBadRequests) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {3}});
  Tensor n = tr.input("n", {DType::i32, {3}});
  Program vec = tr.finish({{"y", x * x}});
  Program ints = tr.finish({{"count", sum(n)}});
  Program ok = tr.finish({{"loss", sum(x)}});
  EXPECT_NE(error_of([&] { value_and_grad(vec, {"x"}); }).find("must be a scalar float loss, got f32[3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { value_and_grad(ints, {"x"}); }).find("got i32[]"), std::string::npos);
  EXPECT_NE(error_of([&] { value_and_grad(ok, {"w"}); }).find("'w' is not an input"), std::string::npos);
  EXPECT_NE(error_of([&] { value_and_grad(ok, {"n"}); }).find("only float inputs"), std::string::npos);
  EXPECT_NE(error_of([&] { value_and_grad(ok, {"x", "x"}); }).find("listed twice"), std::string::npos);
  EXPECT_NE(error_of([&] { value_and_grad(Program{}, {}); }).find("no outputs"), std::string::npos);
}

TEST(ValueAndGrad, KeepsInputsAndAliases) {
  Tracer tr;
  Tensor w = tr.input("w", {DType::f32, {3}});
  Tensor loss = sum(w * w);
  Program p = tr.finish({{"loss", loss}, {"w_next", w * 0.5}});
  p.aliases.push_back({1, 0});
  Program g = value_and_grad(p, {"w"});
  ASSERT_EQ(g.aliases.size(), 1u);
  EXPECT_EQ(g.aliases[0], (Alias{1, 0}));
  EXPECT_EQ(g.outputs[2].name, "grad.w");
  std::vector<Array> out = host::run(g, {Array::f32({3}, {1, -2, 3})});
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{0.5, -1, 1.5}));
  EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{2, -4, 6}));
}

size_t count_ops(const Program& p, Op op) {
  size_t n = 0;
  for (const Eqn& e : p.eqns) n += e.op == op;
  return n;
}

TEST(ValueAndGrad, MatmulGradientsNeedNoTranspose) {
  // For x[4,8] w[8,3] and q k^T the operand order of the VJP dot is chosen so
  // that the cotangents come out in the operand's layout.
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {4, 8}});
  Tensor w = tr.input("w", {DType::f32, {8, 3}});
  Tensor q = tr.input("q", {DType::f32, {2, 2, 3, 4}});
  Tensor k = tr.input("k", {DType::f32, {2, 2, 3, 4}});
  Tensor s = dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}});
  Program p = tr.finish({{"loss", sum(matmul(x, w)) + sum(s)}});
  Program g = value_and_grad(p, {"x", "w", "q", "k"});
  EXPECT_EQ(count_ops(g, Op::transpose), 0u) << to_text(g);
  EXPECT_EQ(count_ops(g, Op::dot_general), 6u) << to_text(g);
}

TEST(ValueAndGrad, SharedSubexpressionsAreMerged) {
  // softmax's reduce_max VJP re-broadcasts the max that the forward pass
  // already broadcast; the gradient program computes it once.
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {4, 8}});
  Program p = tr.finish({{"loss", sum(softmax(x) * x)}});
  Program g = value_and_grad(p, {"x"});
  EXPECT_EQ(count_ops(g, Op::reduce_max), 1u);
  size_t max_broadcasts = 0;
  for (const Eqn& e : g.eqns)
    if (e.op == Op::broadcast_in_dim && g.eqns.size() && g.type(e.inputs[0]) == Type{DType::f32, {4}}) {
      for (const Eqn& f : g.eqns)
        if (f.out == e.inputs[0] && f.op == Op::reduce_max) ++max_broadcasts;
    }
  EXPECT_EQ(max_broadcasts, 1u) << to_text(g);
}

}  // namespace
