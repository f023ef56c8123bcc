// Capture: what the Tensor front end records (broadcasts, constants, shapes of
// composites), the errors it raises, and the composites' values on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "backend/host/interpreter.h"
#include "capstep/trace.h"
#include "capstep/transforms.h"

namespace {

using namespace capstep;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(stmt, text) EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) \
    << "message: " << error_of([&] { stmt; })

const Eqn& defining(const Program& p, const Tensor& t) {
  for (const Eqn& e : p.eqns)
    if (e.out == t.id()) return e;
  throw Error("value is not an equation result");
}

// ---- broadcasting ------------------------------------------------------------------

TEST(Trace, BroadcastingIsExplicit) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {4, 3}});
  Tensor b = tr.input("b", {DType::f32, {3}});
  Tensor y = x + b;
  const Program& p = tr.program();
  ASSERT_EQ(p.eqns.size(), 2u);
  const Eqn& bc = p.eqns[0];
  EXPECT_EQ(bc.op, Op::broadcast_in_dim);
  EXPECT_EQ(bc.inputs, std::vector<int>{b.id()});
  EXPECT_EQ(bc.attrs.dims, std::vector<int64_t>{1});
  EXPECT_EQ(p.type(bc.out), (Type{DType::f32, {4, 3}}));
  const Eqn& add = p.eqns[1];
  EXPECT_EQ(add.op, Op::add);
  EXPECT_EQ(add.inputs, (std::vector<int>{x.id(), bc.out}));
  EXPECT_EQ(y.type(), (Type{DType::f32, {4, 3}}));
}

TEST(Trace, BothOperandsStretchSizeOneAxes) {
  Tracer tr;
  Tensor a = tr.input("a", {DType::f64, {4, 1}});
  Tensor b = tr.input("b", {DType::f64, {1, 3}});
  Tensor y = a * b;
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  const Program& p = tr.program();
  ASSERT_EQ(p.eqns.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(p.eqns[static_cast<size_t>(i)].op, Op::broadcast_in_dim);
    EXPECT_EQ(p.eqns[static_cast<size_t>(i)].attrs.dims, (std::vector<int64_t>{0, 1}));
  }
  EXPECT_EQ(p.eqns[2].op, Op::multiply);
}

TEST(Trace, RankPromotionAlignsTrailingAxes) {
  Tracer tr;
  Tensor a = tr.input("a", {DType::f32, {2, 3, 4}});
  Tensor b = tr.input("b", {DType::f32, {3, 1}});
  Tensor y = a - b;
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  const Eqn& bc = tr.program().eqns[0];
  EXPECT_EQ(bc.op, Op::broadcast_in_dim);
  EXPECT_EQ(bc.attrs.dims, (std::vector<int64_t>{1, 2}));
}

TEST(Trace, SameShapesRecordNoBroadcast) {
  Tracer tr;
  Tensor a = tr.input("a", {DType::f32, {2, 3}});
  Tensor y = a / a;
  ASSERT_EQ(tr.program().eqns.size(), 1u);
  EXPECT_EQ(defining(tr.program(), y).op, Op::divide);
}

TEST(Trace, ScalarsBecomeConstantsOfTheOtherDtype) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {2, 3}});
  Tensor n = tr.input("n", {DType::i32, {5}});
  Tensor y = 2.0 * x;
  Tensor m = n + 1.0;
  const Program& p = tr.program();
  const Eqn& mul = defining(p, y);
  const Type c = p.type(mul.inputs[0]);
  EXPECT_EQ(c.dtype, DType::f64);
  const Eqn& k = defining(p, Tensor(&tr, mul.inputs[0]));
  EXPECT_EQ(k.op, Op::constant);
  EXPECT_EQ(k.attrs.literal, std::vector<double>{2.0});
  EXPECT_EQ(mul.inputs[1], x.id());  // order kept: 2 * x
  EXPECT_EQ(m.dtype(), DType::i32);
  EXPECT_EQ(p.type(defining(p, m).inputs[1]).dtype, DType::i32);
}

TEST(Trace, CompareAndSelectBroadcast) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2, 3}});
  Tensor z = tr.input("z", {DType::f32, {}});
  Tensor pred = compare(x, z, Cmp::GT);
  EXPECT_EQ(pred.type(), (Type{DType::i1, {2, 3}}));
  Tensor y = select(pred, x, z);
  EXPECT_EQ(y.type(), (Type{DType::f32, {2, 3}}));
  EXPECT_EQ(convert(pred, DType::f32).type(), (Type{DType::f32, {2, 3}}));
}

// ---- shapes of the front end ---------------------------------------------------------

TEST(Trace, ShapeOperators) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2, 3, 4}});
  EXPECT_EQ(reshape(x, {6, -1}).shape(), (Shape{6, 4}));
  EXPECT_EQ(transpose(x, {2, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(swap_last2(x).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_to(x, {5, 2, 3, 4}).shape(), (Shape{5, 2, 3, 4}));
  EXPECT_EQ(sum(x, {-1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(sum(x, {0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(max(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(mean(x).shape(), (Shape{}));
  EXPECT_EQ(x.dim(-1), 4);
  Tensor w = tr.input("w", {DType::f32, {4, 5}});
  EXPECT_EQ(matmul(x, w).shape(), (Shape{2, 3, 5}));
  Tensor bw = tr.input("bw", {DType::f32, {2, 4, 7}});
  EXPECT_EQ(matmul(x, bw).shape(), (Shape{2, 3, 7}));
  Tensor table = tr.input("table", {DType::f32, {10, 8}});
  Tensor idx = tr.input("idx", {DType::i32, {2, 3}});
  EXPECT_EQ(gather_rows(table, idx).shape(), (Shape{2, 3, 8}));
}

TEST(Trace, CompositeShapes) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2, 3, 8}});
  Tensor g = tr.input("g", {DType::f32, {8}});
  Tensor t = tr.input("t", {DType::i32, {2, 3}});
  Tensor q = tr.input("q", {DType::f32, {2, 4, 3, 8}});
  // Tensor::type() refers into the growing program: compare copies.
  const Type xt = x.type(), qt = q.type();
  EXPECT_EQ(softmax(x).type(), xt);
  EXPECT_EQ(softmax(x, 1).type(), xt);
  EXPECT_EQ(log_softmax(x).type(), xt);
  EXPECT_EQ(gelu_tanh(x).type(), xt);
  EXPECT_EQ(rms_norm(x, g).type(), xt);
  EXPECT_EQ(cross_entropy(x, t).type(), (Type{DType::f32, {}}));
  EXPECT_EQ(causal_mask(tr, 5).type(), (Type{DType::f32, {5, 5}}));
  EXPECT_EQ(causal_attention(q, q, q).type(), qt);
  // Composites record primitives only, and the program verifies.
  Program p = tr.finish({{"loss", cross_entropy(x, t)}});
  EXPECT_NO_THROW(verify(p));
}

// ---- errors ---------------------------------------------------------------------------

TEST(Trace, MismatchedShapesAreErrors) {
  Tracer tr;
  Tensor a = tr.input("a", {DType::f32, {4, 3}});
  Tensor b = tr.input("b", {DType::f32, {4}});
  Tensor c = tr.input("c", {DType::f64, {4, 3}});
  EXPECT_ERROR_HAS(a + b, "add: shapes f32[4,3] f32[4] do not broadcast");
  EXPECT_ERROR_HAS(a * c, "multiply: operand dtypes differ (f32[4,3] and f64[4,3])");
  EXPECT_ERROR_HAS(reshape(a, {5, -1}), "reshape f32[4,3] to [5,-1]: cannot infer");
  EXPECT_ERROR_HAS(reshape(a, {5, 2}), "element counts differ (12 vs 10)");
  EXPECT_ERROR_HAS(broadcast_to(a, {3}), "lower-rank shape [3]");
  EXPECT_ERROR_HAS(sum(a, {2}), "axis 2 is out of range for rank 2");
  EXPECT_ERROR_HAS(matmul(a, a), "dot_general");  // contracting 3 against 4: the IR's shape rule
  EXPECT_ERROR_HAS(select(a, a, a), "select: the predicate must be i1");
  EXPECT_ERROR_HAS(rms_norm(a, b), "rms_norm: gain must be [3]");
  Tensor t = tr.input("t", {DType::i32, {3}});
  EXPECT_ERROR_HAS(cross_entropy(a, t), "targets must be i32[4]");
  EXPECT_ERROR_HAS(causal_attention(a, a, a), "[B,H,T,Dh]");
  EXPECT_ERROR_HAS(Tensor().shape(), "empty");
  Tracer other;
  Tensor o = other.input("o", {DType::f32, {4, 3}});
  EXPECT_ERROR_HAS(a + o, "different Tracers");
  EXPECT_ERROR_HAS(tr.constant({DType::f32, {2, 2}}, {1, 2, 3}), "expected 1 value (splat) or 4 values");
}

// ---- values of the composites on the host -----------------------------------------------

TEST(TraceValues, SoftmaxAndLogSoftmax) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {2, 3}});
  Program p = tr.finish({{"s", softmax(x)}, {"l", log_softmax(x)}});
  const std::vector<double> xv = {1, 2, 3, 1000, 1000, 990};  // large values: the max shift matters
  std::vector<Array> out = host::run(p, {Array::f64({2, 3}, xv)});
  for (int r = 0; r < 2; ++r) {
    double m = -1e300, z = 0;
    for (int c = 0; c < 3; ++c) m = std::max(m, xv[static_cast<size_t>(r * 3 + c)]);
    for (int c = 0; c < 3; ++c) z += std::exp(xv[static_cast<size_t>(r * 3 + c)] - m);
    for (int c = 0; c < 3; ++c) {
      const int64_t i = r * 3 + c;
      const double ls = xv[static_cast<size_t>(i)] - m - std::log(z);
      EXPECT_NEAR(out[0].get(i), std::exp(ls), 1e-15);
      EXPECT_NEAR(out[1].get(i), ls, 1e-12);
    }
  }
}

TEST(TraceValues, GeluRmsNormCrossEntropy) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {2, 3}});
  Tensor g = tr.input("g", {DType::f64, {3}});
  Tensor t = tr.input("t", {DType::i32, {2}});
  Program p = tr.finish({{"gelu", gelu_tanh(x)}, {"rms", rms_norm(x, g, 1e-5)}, {"ce", cross_entropy(x, t)}});
  const std::vector<double> xv = {-1.5, 0.25, 2.0, 0.5, -0.75, 3.0}, gv = {1.0, 0.5, 2.0};
  std::vector<Array> out = host::run(p, {Array::f64({2, 3}, xv), Array::f64({3}, gv), Array::i32({2}, {2, 0})});
  double ce = 0;
  for (int r = 0; r < 2; ++r) {
    double ms = 0, z = 0;
    for (int c = 0; c < 3; ++c) ms += xv[static_cast<size_t>(r * 3 + c)] * xv[static_cast<size_t>(r * 3 + c)] / 3;
    for (int c = 0; c < 3; ++c) z += std::exp(xv[static_cast<size_t>(r * 3 + c)]);
    ce -= (xv[static_cast<size_t>(r * 3 + (r == 0 ? 2 : 0))] - std::log(z)) / 2;
    for (int c = 0; c < 3; ++c) {
      const size_t i = static_cast<size_t>(r * 3 + c);
      const double v = xv[i];
      const double gelu = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(out[0].get(static_cast<int64_t>(i)), gelu, 1e-14);
      EXPECT_NEAR(out[1].get(static_cast<int64_t>(i)), v / std::sqrt(ms + 1e-5) * gv[static_cast<size_t>(c)], 1e-14);
    }
  }
  EXPECT_NEAR(out[2].get(0), ce, 1e-14);
}

// A label outside [0, classes) is the run-time error of the gather that the
// targets pass through, naming the first bad position (PyTorch raises too);
// the one-hot alone would match no class, and labels {0, 1, 7, 0, -1} would
// give a loss of 1.47 without a word. Valid labels give the loss of the
// one-hot alone, to the bit.
TEST(TraceValues, CrossEntropyRefusesALabelOutsideTheClasses) {
  Tracer tr;
  Tensor x = tr.input("logits", {DType::f32, {5, 3}});
  Tensor t = tr.input("targets", {DType::i32, {5}});
  Program p = tr.finish({{"loss", cross_entropy(x, t)}});
  const std::vector<double> xv = {1.5, -0.25, 0.75, 2, 1, -1, 0.5, 0.5, 0, -3, 2.25, 1, 0, -0.5, 4};
  Array logits({DType::f32, {5, 3}});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.set(i, xv[static_cast<size_t>(i)]);
  // One gather's index is the targets input itself (the check); the other
  // gathers each position's logit at its label from the flat logits, at an
  // index computed from the first gather's result.
  int gathers = 0, of_targets = 0;
  for (const Eqn& e : p.eqns)
    if (e.op == Op::gather_rows) {
      ++gathers;
      of_targets += e.inputs.at(1) == p.inputs.at(1).value;
    }
  EXPECT_EQ(gathers, 2);
  EXPECT_EQ(of_targets, 1);
  for (bool fuse : {true, false}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    host::Interpreter it(p, o);
    const std::vector<Array> good = it.run({logits, Array::i32({5}, {0, 1, 2, 0, 1})});
    // -mean of log_softmax at the labels, in double: 2.6680932...
    const int label[5] = {0, 1, 2, 0, 1};
    double ce = 0;
    for (int r = 0; r < 5; ++r) {
      double z = 0;
      for (int c = 0; c < 3; ++c) z += std::exp(xv[static_cast<size_t>(r * 3 + c)]);
      ce -= (xv[static_cast<size_t>(r * 3 + label[r])] - std::log(z)) / 5;
    }
    EXPECT_NEAR(good[0].get(0), ce, 1e-6);
    // The f32 bits of the composite without the gather (0x402ac20a).
    EXPECT_EQ(good[0].get(0), static_cast<double>(2.66809320449829101562f));
    EXPECT_EQ(error_of([&] { it.run({logits, Array::i32({5}, {0, 1, 7, 0, -1})}); }),
              "gather_rows: index 7 at position 2 [2] of the indices i32[5] (input \"targets\") is out of range "
              "[0, 3) (equation 1: %3 = gather_rows(%2, %1) : i32[5])");
    EXPECT_ERROR_HAS(it.run({logits, Array::i32({5}, {0, 1, 2, 0, -1})}), "index -1 at position 4 [4]");
    EXPECT_ERROR_HAS(it.run({logits, Array::i32({5}, {3, 1, 2, 0, 1})}), "index 3 at position 0 [0]");
  }
}

// Targets computed in the program (not an input): the gather checks them as
// it runs, and says where in the [2, 3] targets the bad label is.
TEST(TraceValues, CrossEntropyRefusesAComputedLabelOutsideTheClasses) {
  Tracer tr;
  Tensor x = tr.input("logits", {DType::f64, {2, 3, 4}});
  Tensor t = tr.input("t", {DType::i32, {2, 3}});
  Program p = tr.finish({{"loss", cross_entropy(x, t + tr.full({2, 3}, 1, DType::i32))}});
  Array logits({DType::f64, {2, 3, 4}});
  EXPECT_NO_THROW(host::run(p, {logits, Array::i32({2, 3}, {0, 1, 2, 2, 1, 0})}));
  EXPECT_ERROR_HAS(host::run(p, {logits, Array::i32({2, 3}, {0, 1, 2, 2, 3, 0})}),
                   "gather_rows: index 4 at position 4 [1,1] of the indices i32[2,3] is out of range [0, 4)");
}

TEST(TraceValues, CausalAttention) {
  // B=1, H=1, T=3, Dh=2, against a direct loop.
  Tracer tr;
  const Type t{DType::f64, {1, 1, 3, 2}};
  Tensor q = tr.input("q", t), k = tr.input("k", t), v = tr.input("v", t);
  Program p = tr.finish({{"o", causal_attention(q, k, v)}, {"mask", causal_mask(tr, 3, DType::f64)}});
  const std::vector<double> qv = {0.1, -0.3, 0.7, 0.2, -0.5, 0.9}, kv = {0.4, 0.8, -0.6, 0.1, 0.3, -0.2},
                            vv = {1, 2, 3, 4, 5, 6};
  std::vector<Array> out = host::run(p, {Array::f64(t.shape, qv), Array::f64(t.shape, kv), Array::f64(t.shape, vv)});
  for (int i = 0; i < 3; ++i) {
    double w[3] = {0, 0, 0}, z = 0;
    for (int j = 0; j <= i; ++j) {
      w[j] = std::exp((qv[static_cast<size_t>(2 * i)] * kv[static_cast<size_t>(2 * j)] +
                       qv[static_cast<size_t>(2 * i + 1)] * kv[static_cast<size_t>(2 * j + 1)]) / std::sqrt(2.0));
      z += w[j];
    }
    for (int d = 0; d < 2; ++d) {
      double o = 0;
      for (int j = 0; j <= i; ++j) o += w[j] / z * vv[static_cast<size_t>(2 * j + d)];
      EXPECT_NEAR(out[0].get(2 * i + d), o, 1e-14);
    }
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[1].get(3 * i + j), j > i ? -1e9 : 0.0);
  }
}

}  // namespace

// A Tensor outlives its Tracer only as a handle: any use is an Error naming
// the cause, not a read of freed memory (AddressSanitizer runs this too).
TEST(Trace, ATensorUsedAfterItsTracerIsGoneIsAnError) {
  Tensor x, y;
  {
    Tracer tr;
    x = tr.input("x", {DType::f32, {2, 3}});
    y = x * 2.0;
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
  }
  EXPECT_TRUE(x.valid());
  const std::string after = "is used after the Tracer that recorded it was destroyed";
  EXPECT_NE(error_of([&] { (void)x.shape(); }).find("Tensor %0 " + after), std::string::npos);
  EXPECT_NE(error_of([&] { (void)(x + y); }).find(after), std::string::npos);
  EXPECT_NE(error_of([&] { (void)sum(y, {0}); }).find(after), std::string::npos);
  // A new Tracer at the same address does not revive them.
  Tracer other;
  EXPECT_NE(error_of([&] { other.finish({{"y", y}}); }).find(after), std::string::npos);
}

// finish() copies the record: a second call, after more ops, gives another
// program of the same inputs, and the first is unchanged.
TEST(Trace, ASecondFinishGivesAnotherProgramOfTheSameRecord) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2}});
  const Program first = tr.finish({{"y", x * x}});
  const Program second = tr.finish({{"y", x}, {"z", exp(x)}});
  EXPECT_EQ(first.outputs.size(), 1u);
  EXPECT_EQ(first.eqns.size(), 1u);  // the multiply
  ASSERT_EQ(second.outputs.size(), 2u);
  EXPECT_EQ(second.eqns.size(), 2u);  // the multiply, then the exp
  EXPECT_EQ(second.outputs[1].name, "z");
  EXPECT_EQ(second.inputs.size(), first.inputs.size());
}

namespace {

// slice, concatenate and pad record one equation each, and nothing for the
// identity; their errors name the equation (op and operand types).
TEST(Trace, SliceConcatenatePad) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {4, 6}});
  Tensor y = tr.input("y", {DType::f32, {4, 2}});
  EXPECT_EQ(slice(x, {0, 0}, {4, 6}).id(), x.id());
  EXPECT_EQ(concatenate({x}, 1).id(), x.id());
  EXPECT_EQ(pad(x, {0, 0}, {0, 0}).id(), x.id());
  const size_t before = tr.program().eqns.size();
  Tensor s = slice(x, {1, 0}, {3, 6}, {1, 2});
  Tensor c = concatenate({x, y, x}, -1);
  Tensor p = pad(y, {1, 0}, {0, 3});
  EXPECT_EQ(tr.program().eqns.size(), before + 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.shape(), (Shape{4, 14}));
  EXPECT_EQ(p.shape(), (Shape{5, 5}));
  EXPECT_EQ(defining(tr.program(), c).attrs.axis, 1);
  EXPECT_EQ(defining(tr.program(), s).attrs.strides, (std::vector<int64_t>{1, 2}));
  EXPECT_ERROR_HAS(slice(x, {0, 5}, {4, 7}), "slice(f32[4,6]): axis 1: start 5 and limit 7 must satisfy");
  EXPECT_ERROR_HAS(concatenate({x, y}, 0), "concatenate(f32[4,6], f32[4,2]): operand 1 is f32[4,2]: axis 1 differs");
  EXPECT_ERROR_HAS(pad(x, {0, -1}, {0, 0}), "pad(f32[4,6]): axis 1: low -1 and high 0 must be >= 0");
  EXPECT_ERROR_HAS(concatenate({}, 0), "concatenate: needs at least one operand");
  EXPECT_ERROR_HAS(concatenate({x}, 2), "concatenate");  // the axis is checked with one operand too
}

TEST(TraceValues, SiluAndSigmoid) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {5}});
  Program p = tr.finish({{"silu", silu(x)}, {"sigmoid", sigmoid(x)}});
  const std::vector<double> xs = {-3, -0.5, 0, 0.5, 3};
  const std::vector<Array> out = host::run(p, {Array::from_doubles({DType::f64, {5}}, xs)});
  for (size_t i = 0; i < xs.size(); ++i) {
    const double sg = 1.0 / (1.0 + std::exp(-xs[i]));
    EXPECT_NEAR(out[1].get(static_cast<int64_t>(i)), sg, 1e-15);
    EXPECT_NEAR(out[0].get(static_cast<int64_t>(i)), xs[i] * sg, 1e-15);
  }
}

// ordered_after(x, after): x's bits (whatever `after` holds, an infinity
// too), a dependency on `after`, and no gradient through it: d/ds of
// sum(ordered_after(2x, 3s)^2) + s is the direct term's 1 alone; for a
// scalar x as well.
TEST(TraceValues, OrderedAfterIsXWithADependencyAndNoGradient) {
  for (const Shape& shape : {Shape{2, 3}, Shape{}}) {
    Tracer tr;
    Tensor x = tr.input("x", {DType::f32, shape});
    Tensor s = tr.input("s", {DType::f32, {}});
    Tensor after = s * 3.0;
    Tensor y = ordered_after(x * 2.0, after);
    Program p = tr.finish({{"loss", sum(y * y) + s}, {"y", y}});
    bool reads_after = false;
    for (const Eqn& e : p.eqns) reads_after |= e.op == Op::broadcast_in_dim && e.inputs[0] == after.id();
    EXPECT_TRUE(reads_after) << to_text(p);
    const Program g = value_and_grad(p, {"x", "s"});
    // The forward's select and its VJP towards x; none towards `after`.
    int selects = 0;
    for (const Eqn& e : g.eqns) selects += e.op == Op::select;
    EXPECT_EQ(selects, 2) << to_text(g);
    const int64_t n = Type{DType::f32, shape}.numel();
    std::vector<float> xs;
    for (int64_t i = 0; i < n; ++i) xs.push_back(0.5f + static_cast<float>(i));
    for (float sv : {1.5f, INFINITY}) {
      const std::vector<Array> out = host::run(g, {Array::f32(shape, xs), Array::scalar(sv)});
      const Array& gy = out[static_cast<size_t>(g.output_index("y"))];
      const Array& gx = out[static_cast<size_t>(g.output_index("grad.x"))];
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(gy.get(i), 2.0 * xs[static_cast<size_t>(i)]);
        EXPECT_EQ(gx.get(i), 8.0 * xs[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(out[static_cast<size_t>(g.output_index("grad.s"))].get(0), 1.0);
    }
  }
}

// rope_tables: transformers' f32 steps. head_dim 4, theta 10000: inv_freq =
// [1, 1/100 rounded to f32]; column j + 2 repeats column j.
TEST(TraceValues, RopeTablesAndRotateHalf) {
  Tracer tr;
  const RopeTables t = rope_tables(tr, 5, 4, 10000.0);
  Program p = tr.finish({{"cos", t.cos}, {"sin", t.sin}});
  const std::vector<Array> out = host::run(p, {});
  ASSERT_EQ(out[0].type(), (Type{DType::f32, {5, 4}}));
  const float inv1 = 1.0f / std::pow(10000.0f, 0.5f);
  for (int64_t pos = 0; pos < 5; ++pos) {
    const float a0 = static_cast<float>(pos), a1 = static_cast<float>(pos) * inv1;
    EXPECT_EQ(out[0].get(pos * 4 + 0), static_cast<float>(std::cos(static_cast<double>(a0))));
    EXPECT_EQ(out[1].get(pos * 4 + 1), static_cast<float>(std::sin(static_cast<double>(a1))));
    EXPECT_EQ(out[0].get(pos * 4 + 2), out[0].get(pos * 4 + 0));
    EXPECT_EQ(out[1].get(pos * 4 + 3), out[1].get(pos * 4 + 1));
  }
  EXPECT_EQ(out[0].get(0), 1.0);
  EXPECT_EQ(out[1].get(0), 0.0);
  EXPECT_NEAR(out[1].get(4 * 3 + 1), std::sin(3 * 0.01), 1e-8);
  // bf16 tables: the f32 values rounded once to bf16, as .to(bfloat16) does
  Tracer tb;
  const RopeTables b = rope_tables(tb, 5, 4, 10000.0, DType::bf16);
  const std::vector<Array> ob = host::run(tb.finish({{"cos", b.cos}}), {});
  for (int64_t i = 0; i < 20; ++i)
    EXPECT_EQ(ob[0].get(i), Array::from_doubles({DType::bf16, {}}, {out[0].get(i)}).get(0)) << i;
  EXPECT_ERROR_HAS(rope_tables(tb, 5, 3, 10000.0), "an even head_dim");

  Tracer tr2;
  Tensor x = tr2.input("x", {DType::f32, {2, 6}});
  Program r = tr2.finish({{"r", rotate_half(x)}});
  const std::vector<Array> rv = host::run(r, {Array::f32({2, 6}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})});
  EXPECT_EQ(rv[0].to_doubles(), (std::vector<double>{-4, -5, -6, 1, 2, 3, -10, -11, -12, 7, 8, 9}));
}

}  // namespace
