// to_stablehlo: golden text for small programs (tests/golden/stablehlo_*.mlir,
// reviewed by hand against the StableHLO spec and against what JAX 0.10.2
// prints for the same ops), the module form JAX writes, and exact constants.
//
// To regenerate the golden files after an intended change:
//   CAPSTEP_UPDATE_GOLDEN=1 ctest -R StablehloGolden   (then review the diff)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "capstep/stablehlo.h"
#include "export/stablehlo_common.h"
#include "stablehlo_programs.h"
#include "stablehlo_test_util.h"

using namespace capstep;
using namespace capstep::hlo_test;

namespace {

void check_golden(const Case& c) {
  ASSERT_FALSE(source_dir().empty()) << "CAPSTEP_SOURCE_DIR is not set: run through ctest";
  std::string path = source_dir() + "/tests/golden/stablehlo_" + c.name + ".mlir";
  std::string text = to_stablehlo(c.program);
  const char* update = std::getenv("CAPSTEP_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    write_file(path, text);
    GTEST_SKIP() << "rewrote " << path << "; review the diff";
  }
  std::string want = read_file(path);
  EXPECT_EQ(text, want) << "to_stablehlo output differs from " << path
                        << " (CAPSTEP_UPDATE_GOLDEN=1 rewrites it)";
}

}  // namespace

TEST(StablehloGolden, Elementwise) { check_golden(elementwise_case()); }
TEST(StablehloGolden, ShapesReductionsConstants) { check_golden(shapes_case()); }
TEST(StablehloGolden, GatherScatterRows) { check_golden(rows_case()); }
TEST(StablehloGolden, SgdStepWithAlias) { check_golden(sgd_step_case()); }
TEST(StablehloGolden, F64AndI32) { check_golden(f64_i32_case()); }
TEST(StablehloGolden, Bf16) { check_golden(bf16_case()); }
TEST(StablehloGolden, SlicePadConcatenate) { check_golden(slices_case()); }

TEST(StablehloExport, ModuleFormIsJaxs) {
  std::string t = to_stablehlo(sgd_step_case().program, "step");
  EXPECT_EQ(t.rfind("module @step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
                    "  func.func public @main(",
                    0),
            0u)
      << t;
  // Donated argument: the alias names the result it becomes; names by loc().
  EXPECT_NE(t.find("%arg0: tensor<3x2xf32> {tf.aliasing_output = 1 : i32} loc(\"w\")"), std::string::npos) << t;
  EXPECT_NE(t.find("%arg1: tensor<4x3xf32> loc(\"x\")"), std::string::npos) << t;
  EXPECT_NE(t.find("-> (tensor<f32> {jax.result_info = \"loss\"}, tensor<3x2xf32> {jax.result_info = \"w.new\"})"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.substr(t.size() - 4), "}\n}\n");
}

TEST(StablehloExport, ReduceInitsAreTheIdentities) {
  Program p;
  int x = p.add_input("x", {DType::f32, {2, 3}});
  int k = p.add_input("k", {DType::i32, {4}});
  p.add_output("s", p.add_eqn(Op::reduce_sum, {x}, dims({1})));
  p.add_output("m", p.add_eqn(Op::reduce_max, {x}, dims({0, 1})));
  p.add_output("km", p.add_eqn(Op::reduce_max, {k}, dims({0})));
  std::string t = to_stablehlo(p);
  EXPECT_NE(t.find("%init0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
                   "    %0 = stablehlo.reduce(%arg0 init: %init0) applies stablehlo.add across dimensions = [1] : "
                   "(tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("%init1 = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
                   "    %1 = stablehlo.reduce(%arg0 init: %init1) applies stablehlo.maximum across dimensions = [0, 1]"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("%init2 = stablehlo.constant dense<-2147483648> : tensor<i32>"), std::string::npos) << t;
}

// What MLIR (and so JAX) prints, and what reads back to the same bits.
TEST(StablehloExport, ConstantElementText) {
  using stablehlo_detail::element_text;
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(element_text(DType::f32, 1.0), "1.000000e+00");
  EXPECT_EQ(element_text(DType::f32, 0.1), "1.000000e-01");
  EXPECT_EQ(element_text(DType::f32, -0.0), "-0.000000e+00");
  EXPECT_EQ(element_text(DType::f32, 1e-45), "1.401298e-45");  // the smallest denormal reads back
  EXPECT_EQ(element_text(DType::f32, 3.4028234663852886e38), "3.40282347e+38");
  EXPECT_EQ(element_text(DType::f32, 1e-5), "1.000000e-05");
  // The float just above 0.1f needs 9 digits.
  EXPECT_EQ(element_text(DType::f32, static_cast<double>(std::bit_cast<float>(0x3DCCCCCEu))), "1.00000009e-01");
  EXPECT_EQ(element_text(DType::f32, inf), "0x7F800000");
  EXPECT_EQ(element_text(DType::f32, -inf), "0xFF800000");
  EXPECT_EQ(element_text(DType::f32, std::nan("")), "0x7FC00000");
  EXPECT_EQ(element_text(DType::f32, static_cast<double>(std::bit_cast<float>(0x7FC00123u))), "0x7FC00123");
  EXPECT_EQ(element_text(DType::f64, 0.1), "1.000000e-01");
  EXPECT_EQ(element_text(DType::f64, 1.0 / 3.0), "3.3333333333333331e-01");
  EXPECT_EQ(element_text(DType::f64, -inf), "0xFFF0000000000000");
  EXPECT_EQ(element_text(DType::i32, -2147483648.0), "-2147483648");
  EXPECT_EQ(element_text(DType::i1, 1), "true");
  EXPECT_EQ(element_text(DType::i1, 0), "false");
}

TEST(StablehloExport, NamesAreEscapedMlirStrings) {
  Program p;
  int x = p.add_input("a \"quoted\" \\ name\n", {DType::f32, {}});
  p.add_output("out\t1", x);
  std::string t = to_stablehlo(p);
  EXPECT_NE(t.find("loc(\"a \\\"quoted\\\" \\\\ name\\0A\")"), std::string::npos) << t;
  EXPECT_NE(t.find("{jax.result_info = \"out\\091\"}"), std::string::npos) << t;
  EXPECT_NE(t.find("return %arg0 : tensor<f32>"), std::string::npos) << t;
}

TEST(StablehloExport, RejectsBadModuleNameAndInvalidPrograms) {
  Program p = sgd_step_case().program;
  try {
    to_stablehlo(p, "my module");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an MLIR bare identifier"), std::string::npos) << e.what();
  }
  p.aliases.push_back({0, 0});  // input 0 aliased twice, and to a scalar output
  EXPECT_THROW(to_stablehlo(p), Error);
}
