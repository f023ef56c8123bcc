// The shared scalar formulas, where C++ alone would leave the result undefined.
#include <cmath>
#include <gtest/gtest.h>
#include <limits>

#include "backend/host/interpreter.h"
#include "ir/scalar_math.h"

using namespace capstep;

TEST(ScalarMath, FloatToI32SaturatesAndSendsNanToZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ((scalar::convert<int, float>(nan)), 0);
  EXPECT_EQ((scalar::convert<int, float>(3e9f)), 2147483647);
  EXPECT_EQ((scalar::convert<int, float>(-3e9f)), -2147483647 - 1);
  EXPECT_EQ((scalar::convert<int, double>(-2.9)), -2);
  EXPECT_EQ((scalar::convert<int, double>(2147483647.5)), 2147483647);
  EXPECT_EQ((scalar::convert<int, float>(INFINITY)), 2147483647);
}

TEST(ScalarMath, InterpreterConvertUsesTheSaturatingFormula) {
  Program p;
  int x = p.add_input("x", {DType::f32, {5}});
  p.add_output("y", p.add_eqn_typed(Op::convert, {x}, {}, {DType::i32, {5}}));
  Array in = Array::f32({5}, {NAN, 3e9f, -3e9f, -2.5f, 7.9f});
  Array out = host::run(p, {in})[0];
  EXPECT_EQ(out.data<int32_t>()[0], 0);
  EXPECT_EQ(out.data<int32_t>()[1], 2147483647);
  EXPECT_EQ(out.data<int32_t>()[2], -2147483647 - 1);
  EXPECT_EQ(out.data<int32_t>()[3], -2);
  EXPECT_EQ(out.data<int32_t>()[4], 7);
}
