// from_stablehlo on malformed or unsupported text: a capstep::Error that says
// where (stablehlo:LINE:COLUMN) and what, never a crash. Broader coverage of
// arbitrary bytes: tests/fuzz/stablehlo_reader_fuzz.cpp (scripts/fuzz-stablehlo).
#include <gtest/gtest.h>

#include "capstep/stablehlo.h"
#include "stablehlo_programs.h"

using namespace capstep;

namespace {

// A module whose body (line 3 on) is `body`: one f32[2,3] argument "x".
std::string module(const std::string& body, const std::string& ret = "    return %0 : tensor<2x3xf32>\n") {
  return "module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
         "  func.func public @main(%arg0: tensor<2x3xf32> loc(\"x\")) -> (tensor<2x3xf32> {jax.result_info = \"y\"}) {\n" +
         body + ret + "  }\n}\n";
}

std::string error_of(const std::string& text) {
  try {
    from_stablehlo(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Bad {
  const char* what;
  std::string text;
  std::string message;  // the whole message
};

}  // namespace

TEST(StablehloReaderErrors, ValidBaseModuleReads) {
  Program p = from_stablehlo(module("    %0 = stablehlo.negate %arg0 : tensor<2x3xf32>\n"));
  EXPECT_EQ(p.eqns.size(), 1u);
  EXPECT_EQ(p.inputs[0].name, "x");
  EXPECT_EQ(p.outputs[0].name, "y");
}

TEST(StablehloReaderErrors, MessagesNameLineColumnAndCause) {
  const std::string neg = "    %0 = stablehlo.negate %arg0 : tensor<2x3xf32>\n";
  std::string nested = "    %0 = stablehlo.constant dense<";
  for (int i = 0; i < 40; ++i) nested += "[";
  nested += "1";
  for (int i = 0; i < 40; ++i) nested += "]";
  nested += "> : tensor<2x3xf32>\n";
  const std::vector<Bad> cases = {
      {"empty input", "", "stablehlo:1:1: expected 'module', found end of input"},
      {"truncated module", "module @m {", "stablehlo:1:12: expected 'func.func', found end of input"},
      {"truncated body", module(neg).substr(0, 200), "stablehlo:3:10: unsupported operation 'st' (the reader knows the ops to_stablehlo writes; see docs/stablehlo.md)"},
      {"undefined value", module("    %0 = stablehlo.negate %arg7 : tensor<2x3xf32>\n"),
       "stablehlo:3:27: use of undefined value %arg7"},
      {"defined twice", module(neg + neg), "stablehlo:4:5: %0 is defined twice"},
      {"unsupported op", module("    %0 = stablehlo.cosine %arg0 : tensor<2x3xf32>\n"),
       "stablehlo:3:10: unsupported operation 'stablehlo.cosine' (the reader knows the ops to_stablehlo writes; "
       "see docs/stablehlo.md)"},
      {"unsupported element type", module("    %0 = stablehlo.convert %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf16>\n"),
       "stablehlo:3:68: unsupported element type 'f16' (capstep has f32, f64, bf16, i32 and i1)"},
      {"operand type differs", module("    %0 = stablehlo.negate %arg0 : tensor<3x2xf32>\n"),
       "stablehlo:3:35: operand type tensor<3x2xf32> differs from the value's type tensor<2x3xf32>"},
      {"shape rule", module("    %0 = stablehlo.transpose %arg0, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"),
       "stablehlo:3:10: transpose(f32[2,3]): permutation [0,0]: axis 0 repeated"},
      {"result type differs", module("    %0 = stablehlo.reshape %arg0 : (tensor<2x3xf32>) -> tensor<7xf32>\n",
                                     "    return %0 : tensor<7xf32>\n"),
       "stablehlo:3:10: reshape(f32[2,3]): result f32[7] has 7 elements, operand has 6"},
      {"reduce init", module("    %i = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
                             "    %0 = stablehlo.reduce(%arg0 init: %i) applies stablehlo.add across dimensions = [1] : "
                             "(tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n",
                             "    return %0 : tensor<2xf32>\n"),
       "stablehlo:4:39: reduce init must be a constant 0.000000e+00 (the identity of stablehlo.add)"},
      {"reduce body", module("    %i = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
                             "    %0 = stablehlo.reduce(%arg0 init: %i) applies stablehlo.multiply across dimensions = [1] : "
                             "(tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n"),
       "stablehlo:4:51: a reduce must apply stablehlo.add or stablehlo.maximum, found 'stablehlo.multiply'"},
      {"literal shape", module("    %0 = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x3xf32>\n"),
       "stablehlo:3:29: dense literal has shape [2,2] but the type is f32[2,3]"},
      {"ragged literal", module("    %0 = stablehlo.constant dense<[[1, 2, 3], [3, 4]]> : tensor<2x3xf32>\n"),
       "stablehlo:3:47: dense literal is ragged: a list of 2 where others have 3"},
      {"nested too deep", module(nested), "stablehlo:3:67: dense literal nested deeper than 32 levels"},
      {"f32 out of range", module("    %0 = stablehlo.constant dense<1.0e39> : tensor<2x3xf32>\n"),
       "stablehlo:3:35: float literal 1.0e39 is out of range for f32"},
      {"i32 out of range", module("    %0 = stablehlo.constant dense<2147483648> : tensor<2x3xi32>\n"),
       "stablehlo:3:35: integer 2147483648 is out of range for i32"},
      {"hex too wide", module("    %0 = stablehlo.constant dense<0x1FF800000> : tensor<2x3xf32>\n"),
       "stablehlo:3:35: hex element 0x1FF800000 does not fit in f32"},
      {"hex string length", module("    %0 = stablehlo.constant dense<\"0x0000803F\"> : tensor<2x3xf64>\n"),
       "stablehlo:3:29: dense hex string has 4 bytes; f64[2,3] needs 48 (or 8 for a splat)"},
      {"unterminated string", "module @m {\n  func.func public @main(%arg0: tensor<f32> loc(\"x)\n",
       "stablehlo:2:49: unterminated string"},
      {"dynamic shape", module("    %0 = stablehlo.negate %arg0 : tensor<?x3xf32>\n"),
       "stablehlo:3:42: dynamic dimensions ('?') are not supported"},
      {"too many elements", module("    %0 = stablehlo.negate %arg0 : tensor<1048576x1048576x2xf32>\n"),
       "stablehlo:3:58: tensor has too many elements"},
      {"return count", module(neg, "    return %0, %0 : tensor<2x3xf32>, tensor<2x3xf32>\n"),
       "stablehlo:4:11: return has 2 values, the function declares 1 results"},
      {"compare type", module("    %c = stablehlo.compare LT, %arg0, %arg0, SIGNED : (tensor<2x3xf32>, tensor<2x3xf32>) -> "
                              "tensor<2x3xi1>\n" + neg),
       "stablehlo:3:46: comparison type SIGNED does not fit the operands (expected FLOAT)"},
      {"compare direction", module("    %c = stablehlo.compare LTE, %arg0, %arg0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> "
                                   "tensor<2x3xi1>\n" + neg),
       "stablehlo:3:28: unknown comparison direction \"LTE\" (expected EQ, NE, LT, LE, GT, GE)"},
      {"trailing text", module(neg) + "module", "stablehlo:7:1: expected end of input after the module, found 'module'"},
      {"not main", "module @m {\n  func.func public @step() {\n", "stablehlo:2:20: the function must be @main, found @step"},
      {"partitioned", "module @m attributes {mhlo.num_partitions = 2 : i32} {",
       "stablehlo:1:23: mhlo.num_partitions = 2: only replicated modules (1 partition) are supported"},
      {"pad value not zero", module("    %z = stablehlo.constant dense<1.000000e+00> : tensor<f32>\n"
                                    "    %0 = stablehlo.pad %arg0, %z, low = [0, 0], high = [0, 0], interior = [0, 0] : "
                                    "(tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>\n"),
       "stablehlo:4:31: the padding value must be a scalar f32 constant 0 (capstep pads with zeros)"},
      {"interior padding", module("    %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
                                  "    %0 = stablehlo.pad %arg0, %z, low = [0, 0], high = [0, 0], interior = [1, 0] : "
                                  "(tensor<2x3xf32>, tensor<f32>) -> tensor<3x3xf32>\n",
                                  "    return %0 : tensor<3x3xf32>\n"),
       "stablehlo:4:75: interior padding must be 0 (capstep's pad has none)"},
      {"slice out of range", module("    %0 = stablehlo.slice %arg0 [0:2, 1:4] : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"),
       "stablehlo:3:10: slice(f32[2,3]): axis 1: start 1 and limit 4 must satisfy 0 <= start <= limit <= 3"},
      {"concatenate shapes", module("    %0 = stablehlo.concatenate %arg0, %arg0, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) "
                                    "-> tensor<2x6xf32>\n",
                                    "    return %0 : tensor<2x6xf32>\n"),
       "stablehlo:3:10: concatenate(f32[2,3], f32[2,3]): result type f32[2,6] differs from the inferred f32[4,3]"},
      {"gather not of rows",
       "module @m {\n  func.func public @main(%arg0: tensor<6x4xf32>, %arg1: tensor<3xi32>) -> tensor<3x4xf32> {\n"
       "    %0 = \"stablehlo.gather\"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], "
       "collapsed_slice_dims = [0], start_index_map = [1], index_vector_dim = 1>, indices_are_sorted = false, "
       "slice_sizes = array<i64: 1, 4>}> : (tensor<6x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>\n"
       "    return %0 : tensor<3x4xf32>\n  }\n}\n",
       "stablehlo:3:148: only gathers/scatters of rows are supported: expected start_index_map = [0]"},
  };
  for (const Bad& b : cases) EXPECT_EQ(error_of(b.text), b.message) << b.what;
}

TEST(StablehloReaderErrors, AliasesAreChecked) {
  std::string good = to_stablehlo(hlo_test::sgd_step_case().program);
  std::string out_of_range = good;
  out_of_range.replace(out_of_range.find("tf.aliasing_output = 1"), 22, "tf.aliasing_output = 5");
  EXPECT_EQ(error_of(out_of_range), "stablehlo:2:71: tf.aliasing_output = 5 but the function has 2 results");
  std::string wrong_type = good;
  wrong_type.replace(wrong_type.find("tf.aliasing_output = 1"), 22, "tf.aliasing_output = 0");
  EXPECT_EQ(error_of(wrong_type),
            "stablehlo:2:71: alias output \"loss\" f32[] -> input \"w\" f32[3,2]: types differ");
}

// Every prefix of a valid module is an error with a position, never a crash.
TEST(StablehloReaderErrors, EveryTruncationIsAnError) {
  std::string good = to_stablehlo(hlo_test::rows_case().program);
  for (size_t n = 0; n + 1 < good.size(); ++n) {
    std::string m = error_of(good.substr(0, n));
    ASSERT_EQ(m.rfind("stablehlo:", 0), 0u) << "prefix of " << n << " bytes: " << m;
  }
}
