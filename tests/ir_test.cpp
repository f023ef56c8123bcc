// The IR: shape rules, the verifier's messages, the text form's round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "capstep/ir.h"
#include "capstep/transforms.h"

#include "test_util.h"

using namespace capstep;
using capstep::test::expect_error;
using ::testing::HasSubstr;

namespace {

Type f32(Shape s) { return {DType::f32, std::move(s)}; }

Program matmul_program() {
  Program p;
  int a = p.add_input("a", f32({4, 3}));
  int b = p.add_input("b", f32({3, 5}));
  Attrs d;
  d.lhs_contract = {1};
  d.rhs_contract = {0};
  int c = p.add_eqn(Op::dot_general, {a, b}, d);
  Attrs r;
  r.dims = {0, 1};
  int s = p.add_eqn(Op::reduce_sum, {c}, r);
  p.add_output("c", c);
  p.add_output("s", s);
  return p;
}

}  // namespace

TEST(Ir, PrimitiveTableIsComplete) {
  EXPECT_EQ(kNumOps, 31);  // the table in ir.h; adamw the last added
  for (int i = 0; i < kNumOps; ++i) {
    Op op = static_cast<Op>(i);
    EXPECT_EQ(parse_op(op_name(op)), op);
    // -1: any number of operands, concatenate's alone
    if (op == Op::concatenate) EXPECT_EQ(op_arity(op), -1);
    else EXPECT_GE(op_arity(op), 0) << op_name(op);
  }
}

// The table's columns and the lookups derived from them, against the sets
// the switches they replaced wrote out.
TEST(Ir, PrimitiveTableTraits) {
  const std::vector<Op> elementwise = {Op::add,   Op::subtract, Op::multiply, Op::divide,  Op::maximum,
                                       Op::negate, Op::exponential, Op::log,  Op::tanh,    Op::rsqrt,
                                       Op::sqrt,  Op::compare,  Op::select,   Op::convert};
  const std::vector<Op> given = {Op::constant, Op::iota, Op::convert, Op::broadcast_in_dim, Op::reshape};
  const std::vector<Op> free = {Op::constant, Op::iota, Op::reshape};
  auto in = [](const std::vector<Op>& v, Op op) { return std::find(v.begin(), v.end(), op) != v.end(); };
  int unary = 0, binary = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    EXPECT_EQ(is_elementwise(op), in(elementwise, op)) << op_name(op);
    EXPECT_EQ(has_given_type(op), in(given, op)) << op_name(op);
    EXPECT_EQ(op_fuse(op) == OpFuse::free, in(free, op)) << op_name(op);
    // fusion: the loop members are the elementwise ops, broadcast_in_dim and transpose
    EXPECT_EQ(op_fuse(op) == OpFuse::elementwise, is_elementwise(op)) << op_name(op);
    EXPECT_EQ(op_fuse(op) == OpFuse::strided, op == Op::broadcast_in_dim || op == Op::transpose) << op_name(op);
    EXPECT_EQ(op_fuse(op) == OpFuse::reduce, op == Op::reduce_sum || op == Op::reduce_max) << op_name(op);
    EXPECT_EQ(op_fuse(op) == OpFuse::gather, op == Op::gather_rows) << op_name(op);
    EXPECT_EQ(op_fuse(op) == OpFuse::gemm, op == Op::dot_general) << op_name(op);
    EXPECT_EQ(op_kind(op) == OpKind::source, op_arity(op) == 0) << op_name(op);
    if (op_kind(op) == OpKind::unary) {
      ++unary;
      EXPECT_EQ(op_arity(op), 1);
      EXPECT_EQ(op_of(unary_op(op)), op);
    }
    if (op_kind(op) == OpKind::binary) {
      ++binary;
      EXPECT_EQ(op_arity(op), 2);
      EXPECT_EQ(op_of(binary_op(op)), op);
    }
    // the StableHLO op: stablehlo.NAME for the ops lowered one to one
    const char* hlo = op_stablehlo_name(op);
    if (op_kind(op) == OpKind::composite) EXPECT_EQ(hlo, nullptr) << op_name(op);
    else if (op == Op::reduce_sum || op == Op::reduce_max) EXPECT_STREQ(hlo, "stablehlo.reduce");
    else if (op == Op::gather_rows) EXPECT_STREQ(hlo, "stablehlo.gather");
    else if (op == Op::scatter_add_rows) EXPECT_STREQ(hlo, "stablehlo.scatter");
    else EXPECT_EQ(std::string(hlo ? hlo : ""), std::string("stablehlo.") + op_name(op));
    // every op whose type is given has a branch of its own in check_type:
    // infer_type refuses it by name
    if (has_given_type(op)) {
      try {
        infer_type(op, std::vector<Type>(static_cast<size_t>(op_arity(op)), f32({2})), Attrs{});
        ADD_FAILURE() << op_name(op) << ": inferred a type it should be given";
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("give its type")) << op_name(op);
      }
    }
  }
  EXPECT_EQ(unary, 6);
  EXPECT_EQ(binary, 5);
  static_assert(op_kind(Op::tanh) == OpKind::unary && is_elementwise(Op::select) && !is_elementwise(Op::reshape),
                "the lookups are constexpr");
}

TEST(Ir, DotGeneralShapeRule) {
  Attrs d;
  d.lhs_batch = {0};
  d.rhs_batch = {0};
  d.lhs_contract = {2};
  d.rhs_contract = {1};
  Type t = infer_type(Op::dot_general, {f32({2, 4, 3}), f32({2, 3, 7})}, d);
  EXPECT_EQ(t, f32({2, 4, 7}));
  // Contracting over the first axis of the lhs: free dims keep their order.
  Attrs e;
  e.lhs_contract = {0};
  e.rhs_contract = {0};
  EXPECT_EQ(infer_type(Op::dot_general, {f32({3, 4}), f32({3, 5})}, e), f32({4, 5}));
}

TEST(Ir, ReduceGatherScatterShapeRules) {
  Attrs r;
  r.dims = {0, 2};
  EXPECT_EQ(infer_type(Op::reduce_max, {f32({2, 3, 4})}, r), f32({3}));
  Type idx{DType::i32, {4, 16}};
  EXPECT_EQ(infer_type(Op::gather_rows, {f32({64, 128}), idx}, {}), f32({4, 16, 128}));
  EXPECT_EQ(infer_type(Op::scatter_add_rows, {f32({64, 128}), idx, f32({4, 16, 128})}, {}), f32({64, 128}));
  EXPECT_EQ(infer_type(Op::compare, {f32({3}), f32({3})}, {}), (Type{DType::i1, {3}}));
}

TEST(Ir, SlicePadConcatenateShapeRules) {
  Attrs s;
  s.starts = {1, 0};
  s.limits = {3, 7};
  s.strides = {1, 3};
  EXPECT_EQ(infer_type(Op::slice, {f32({4, 7})}, s), f32({2, 3}));  // 0, 3, 6
  s.limits = {1, 0};
  s.starts = {1, 0};
  EXPECT_EQ(infer_type(Op::slice, {f32({4, 7})}, s), f32({0, 0}));
  s.limits = {4, 7};
  s.strides = {2, std::numeric_limits<int64_t>::max()};  // one element per stride beyond the axis
  EXPECT_EQ(infer_type(Op::slice, {f32({4, 7})}, s), f32({2, 1}));
  Attrs p;
  p.lows = {0, 2};
  p.highs = {1, 3};
  EXPECT_EQ(infer_type(Op::pad, {{DType::i1, {4, 7}}}, p), Type({DType::i1, {5, 12}}));
  Attrs c;
  c.axis = 1;
  EXPECT_EQ(infer_type(Op::concatenate, {f32({2, 3}), f32({2, 0}), f32({2, 5})}, c), f32({2, 8}));
  EXPECT_EQ(infer_type(Op::concatenate, {f32({2, 3})}, c), f32({2, 3}));
}

TEST(Ir, SlicePadConcatenateErrorsNameTheEquation) {
  Attrs s;
  s.starts = {0, 2};
  s.limits = {4, 8};
  s.strides = {1, 1};
  expect_error([&] { infer_type(Op::slice, {f32({4, 7})}, s); },
               {"slice(f32[4,7])", "axis 1: start 2 and limit 8 must satisfy 0 <= start <= limit <= 7"});
  s.limits = {4, 7};
  s.strides = {1, 0};
  expect_error([&] { infer_type(Op::slice, {f32({4, 7})}, s); }, {"slice(f32[4,7])", "axis 1: stride 0 must be at least 1"});
  s.strides = {1};
  expect_error([&] { infer_type(Op::slice, {f32({4, 7})}, s); }, {"slice(f32[4,7])", "one entry per axis"});
  Attrs p;
  p.lows = {0, -1};
  p.highs = {0, 0};
  expect_error([&] { infer_type(Op::pad, {f32({4, 7})}, p); }, {"pad(f32[4,7])", "axis 1: low -1 and high 0 must be >= 0"});
  p.lows = {0};
  expect_error([&] { infer_type(Op::pad, {f32({4, 7})}, p); }, {"pad(f32[4,7])", "one entry per axis"});
  Attrs c;
  c.axis = 0;
  expect_error([&] { infer_type(Op::concatenate, {f32({2, 3}), f32({2, 4})}, c); },
               {"concatenate(f32[2,3], f32[2,4])", "operand 1 is f32[2,4]: axis 1 differs"});
  expect_error([&] { infer_type(Op::concatenate, {f32({2, 3}), {DType::f64, {2, 3}}}, c); },
               {"concatenate(f32[2,3], f64[2,3])", "one dtype and rank"});
  c.axis = 2;
  expect_error([&] { infer_type(Op::concatenate, {f32({2, 3})}, c); }, {"concatenate", "axis 2 out of range for rank 2"});
  expect_error([&] { infer_type(Op::concatenate, {}, c); }, {"concatenate()", "at least one operand"});
  // In a program the verifier names the equation.
  Program q;
  int x = q.add_input("x", f32({4, 7}));
  Attrs ok;
  ok.starts = {0, 0};
  ok.limits = {2, 7};
  ok.strides = {1, 1};
  int y = q.add_eqn(Op::slice, {x}, ok);
  q.add_output("y", y);
  q.eqns[0].attrs.limits = {5, 7};
  expect_error([&] { verify(q); }, {"equation 0 (%1 = slice(%0))", "start 0 and limit 5 must satisfy"});
}

TEST(Ir, ShapeRuleErrorsNameOpAndShapes) {
  expect_error([] { infer_type(Op::add, {f32({2, 3}), f32({3, 2})}, {}); },
               {"add(f32[2,3], f32[3,2])", "operand types differ"});
  Attrs d;
  d.lhs_contract = {1};
  d.rhs_contract = {0};
  expect_error([&] { infer_type(Op::dot_general, {f32({4, 3}), f32({5, 2})}, d); },
               {"dot_general(f32[4,3], f32[5,2])", "contracting dimension 0 sizes differ: 3 vs 5"});
  expect_error([] { infer_type(Op::exponential, {{DType::i32, {2}}}, {}); }, {"exponential(i32[2])", "float"});
  Attrs r;
  r.dims = {3};
  expect_error([&] { infer_type(Op::reduce_sum, {f32({2, 3})}, r); }, {"reduce_sum", "axis 3 out of range for rank 2"});
  expect_error([] { infer_type(Op::gather_rows, {f32({8, 2}), f32({3})}, {}); }, {"gather_rows", "indices must be i32"});
  Attrs b;
  b.dims = {0};
  expect_error([&] { check_type(Op::broadcast_in_dim, {f32({3})}, b, f32({4, 2})); },
               {"broadcast_in_dim(f32[3])", "cannot broadcast to result axis 0"});
  expect_error([] { check_type(Op::reshape, {f32({3, 4})}, {}, f32({5})); },
               {"reshape(f32[3,4])", "has 5 elements, operand has 12"});
  Attrs lit;
  lit.literal = {1, 2};
  expect_error([&] { check_type(Op::constant, {}, lit, f32({3})); }, {"constant", "literal has 2 values"});
}

TEST(Verifier, AcceptsWellTypedProgram) { EXPECT_NO_THROW(verify(matmul_program())); }

TEST(Verifier, RejectsMalformedPrograms) {
  {  // equation result type altered
    Program p = matmul_program();
    p.types[static_cast<size_t>(p.eqns[0].out)] = f32({4, 6});
    expect_error([&] { verify(p); }, {"equation 0", "dot_general", "f32[4,6]", "differs from the inferred f32[4,5]"});
  }
  {  // operand used before it is defined
    Program p = matmul_program();
    std::swap(p.eqns[0], p.eqns[1]);
    expect_error([&] { verify(p); }, {"equation 0", "reduce_sum", "used before it is defined"});
  }
  {  // operand id out of range
    Program p = matmul_program();
    p.eqns[1].inputs[0] = 99;
    expect_error([&] { verify(p); }, {"equation 1", "operand %99"});
  }
  {  // wrong arity
    Program p = matmul_program();
    p.eqns[1].inputs.push_back(0);
    expect_error([&] { verify(p); }, {"equation 1", "takes 1 operands, got 2"});
  }
  {  // duplicate output names
    Program p = matmul_program();
    p.outputs[1].name = "c";
    expect_error([&] { verify(p); }, {"output \"c\" defined twice"});
  }
  {  // alias between different types
    Program p = matmul_program();
    p.aliases.push_back({0, 0});
    expect_error([&] { verify(p); }, {"alias output \"c\" f32[4,5] -> input \"a\" f32[4,3]", "types differ"});
  }
  {  // alias out of range
    Program p = matmul_program();
    p.aliases.push_back({5, 0});
    expect_error([&] { verify(p); }, {"alias output 5", "out of range"});
  }
  {  // input defined twice
    Program p = matmul_program();
    p.inputs[1].name = "a";
    expect_error([&] { verify(p); }, {"input \"a\" defined twice"});
  }
}

// Types the verifier used to take on trust: an input's type set directly (a
// negative dimension made reshape's element count match by accident), and
// shapes whose element count overflows int64 (numel() wraps, so the interpreter
// would plan a buffer of the wrong size).
TEST(Verifier, RejectsNegativeAndOverflowingShapes) {
  {
    Program p;
    p.types.push_back(f32({-2, -3}));
    p.inputs.push_back({"x", 0});
    Attrs none;
    p.types.push_back(f32({6}));
    p.eqns.push_back({Op::reshape, {0}, 1, none});
    p.outputs.push_back({"y", 1});
    expect_error([&] { verify(p); }, {"input \"x\"", "negative dimension in f32[-2,-3]"});
  }
  const int64_t huge = int64_t{1} << 62;
  {
    Program p;
    p.types.push_back(f32({3, huge}));
    p.inputs.push_back({"x", 0});
    p.outputs.push_back({"x", 0});
    expect_error([&] { verify(p); }, {"input \"x\"", "more bytes than a 64-bit size can count"});
  }
  {  // a result type, too (4 * 2^61 bytes overflow)
    Program p;
    Attrs lit;
    lit.literal = {0};
    expect_error([&] { p.add_eqn_typed(Op::constant, {}, lit, f32({2, huge / 2})); },
                 {"constant", "more bytes than a 64-bit size can count"});
  }
  expect_error([&] { Program p; p.add_input("x", f32({huge, 4})); }, {"input \"x\"", "more bytes"});
  expect_error([] { parse_text("program @m {\n  input \"x\" %0 : f32[4611686018427387904,4]\n  output \"x\" %0\n}\n"); },
               {"2:", "more bytes than a 64-bit size can count"});
  EXPECT_NO_THROW(validate_type(f32({0, huge / 8}), "zero elements"));
  // numel() multiplies in order: 2^62 * 2^62 would overflow before the 0.
  expect_error([&] { validate_type(f32({huge, huge, 0}), "t"); }, {"t: f32[", "more bytes"});
}

TEST(Text, RoundTripIsExact) {
  Program p;
  int x = p.add_input("x", f32({2, 3}));
  int w = p.add_input("w \"quoted\"", {DType::f64, {3}});
  Attrs lit;
  lit.literal = {0.1, -0.0, 1e-300, 3.4028234663852886e38, -INFINITY};
  int c = p.add_eqn_typed(Op::constant, {}, lit, {DType::f64, {5}});
  Attrs cv;
  int xd = p.add_eqn_typed(Op::convert, {x}, cv, {DType::f64, {2, 3}});
  Attrs bd;
  bd.dims = {1};
  int wb = p.add_eqn_typed(Op::broadcast_in_dim, {w}, bd, {DType::f64, {2, 3}});
  int m = p.add_eqn(Op::multiply, {xd, wb}, {});
  Attrs cmp;
  cmp.cmp = Cmp::GE;
  int ge = p.add_eqn(Op::compare, {m, wb}, cmp);
  int sel = p.add_eqn(Op::select, {ge, m, wb}, {});
  Attrs io;
  io.axis = 1;
  int i = p.add_eqn_typed(Op::iota, {}, io, {DType::i32, {2, 3}});
  Attrs sl;
  sl.starts = {0, 1};
  sl.limits = {2, 3};
  sl.strides = {1, 2};
  int s = p.add_eqn(Op::slice, {sel}, sl);
  Attrs pd;
  pd.lows = {0, 1};
  pd.highs = {0, 1};
  int pad = p.add_eqn(Op::pad, {s}, pd);
  Attrs cc;
  cc.axis = 1;
  int cat = p.add_eqn(Op::concatenate, {pad, pad, s, s}, cc);
  p.add_output("sel", sel);
  p.add_output("c", c);
  p.add_output("i", i);
  p.add_output("cat", cat);
  std::string text = to_text(p);
  EXPECT_THAT(text, HasSubstr("%9 = slice(%7) {starts=[0,1], limits=[2,3], strides=[1,2]} : f64[2,1]"));
  EXPECT_THAT(text, HasSubstr("%10 = pad(%9) {lows=[0,1], highs=[0,1]} : f64[2,3]"));
  EXPECT_THAT(text, HasSubstr("%11 = concatenate(%10, %10, %9, %9) {axis=1} : f64[2,8]"));
  EXPECT_THAT(text, HasSubstr("%6 = compare(%5, %4) {cmp=GE} : i1[2,3]"));
  Program q = parse_text(text);
  EXPECT_EQ(to_text(q), text);
  ASSERT_EQ(q.eqns.size(), p.eqns.size());
  for (size_t k = 0; k < p.eqns.size(); ++k) EXPECT_TRUE(q.eqns[k].attrs == p.eqns[k].attrs) << k;
  EXPECT_EQ(q.inputs[1].name, "w \"quoted\"");
}

TEST(Text, ReaderErrorsHaveLineAndColumn) {
  expect_error([] { parse_text("program @m {\n  input \"x\" %0 : f32[2]\n  %1 = frobnicate(%0) : f32[2]\n}\n"); },
               {"3:", "unknown primitive \"frobnicate\""});
  expect_error([] { parse_text("program @m {\n  input \"x\" %0 : q8[2]\n}"); }, {"2:", "unknown dtype"});
  expect_error([] { parse_text("program @m {\n  input \"x\" %0 : f32[2]\n  %1 = negate(%0) : f32[3]\n  output \"y\" %1\n}"); },
               {"equation 0", "negate", "differs from the inferred f32[2]"});
  expect_error([] { parse_text("program @m {\n  input \"x"); }, {"unterminated name"});
  expect_error([] { parse_text(""); }, {"1:1", "expected a word"});
}

TEST(DeadCode, RemovesUnusedEquationsAndRenumbers) {
  Program p = matmul_program();
  p.outputs.pop_back();  // drop "s": its reduce_sum is dead
  Program q = dead_code_eliminate(p);
  EXPECT_EQ(q.eqns.size(), 1u);
  EXPECT_NO_THROW(verify(q));
  EXPECT_EQ(q.output_type(0), f32({4, 5}));
}

TEST(Constants, LiteralsAreKeptAsTheDtypeHoldsThem) {
  Program p;
  Attrs a;
  a.literal = {1e-5, 0.1};
  int c = p.add_eqn_typed(Op::constant, {}, a, f32({2}));
  EXPECT_EQ(p.eqns[0].attrs.literal[0], static_cast<double>(1e-5f));
  EXPECT_EQ(p.eqns[0].attrs.literal[1], static_cast<double>(0.1f));
  Attrs i;
  i.literal = {-2.7};
  p.add_eqn_typed(Op::constant, {}, i, {DType::i32, {}});
  EXPECT_EQ(p.eqns[1].attrs.literal[0], -2.0);
  Attrs big;
  big.literal = {3e9};
  expect_error([&] { p.add_eqn_typed(Op::constant, {}, big, {DType::i32, {}}); }, {"does not fit in i32"});
  p.add_output("c", c);
  EXPECT_THAT(to_text(p), HasSubstr("literal=[9.9999997473787516e-06,0.10000000149011612]"));
}

// The text reader builds equations without add_eqn_typed: the verifier must
// refuse literals that no backend can store (a double -> int32 or -> float
// cast out of range is undefined; x86 gave INT32_MIN for 1e20).
TEST(Constants, LiteralsOutOfTheDtypesRangeAreRefused) {
  auto text = [](const std::string& lit, const std::string& type) {
    return "program @m {\n  %0 = constant() {literal=[" + lit + "]} : " + type + "\n  output \"y\" %0\n}\n";
  };
  expect_error([&] { parse_text(text("1e20", "i32[]")); },
               {"equation 0", "constant", "at position 0 does not fit in i32"});
  expect_error([&] { parse_text(text("1,nan", "i32[2]")); }, {"at position 1 does not fit in i32"});
  expect_error([&] { parse_text(text("-1e300", "f32[]")); }, {"does not fit in f32"});
  EXPECT_NO_THROW(parse_text(text("-2147483648,2147483647", "i32[2]")));
  EXPECT_NO_THROW(parse_text(text("nan,-inf,3.4028234663852886e+38", "f32[3]")));
  EXPECT_NO_THROW(parse_text(text("1e300", "f64[]")));
  Program p;
  Attrs big;
  big.literal = {1e39};
  expect_error([&] { p.add_eqn_typed(Op::constant, {}, big, f32({})); }, {"does not fit in f32"});
}
