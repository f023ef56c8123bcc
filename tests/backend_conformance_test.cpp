// One conformance suite over capstep/backend.h for each backend: the host
// always, CUDA where a GPU is, PJRT where a plugin is (ggml's
// test-backend-ops is the model). Each program runs through make_backend()
// (set_input, run, read_output) and every output is compared with the
// reference interpreter (host::run, unfused): 1e-5 of the output's largest
// magnitude in f32, 1e-12 in f64, exact for integers and booleans; the bf16
// program within one bf16 rounding (2^-7: see stablehlo_xla_test.cpp, where
// XLA's bf16 arithmetic is explained).
//
// The PJRT plugin's path comes from CAPSTEP_PJRT_PLUGIN (scripts/test sets it
// from scripts/pjrt-plugin), else the plugin that scripts/pjrt-plugin leaves
// in the checkout's .pjrt-plugin/. Without one, the PJRT tests skip by name;
// with one that fails to load or run, they fail. CUDA skips by name without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "backend/backends.h"
#include "backend/pjrt/pjrt.h"
#include "capstep/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/host/interpreter.h"
#include "capstep/safetensors.h"
#include "stablehlo_programs.h"
#include "stablehlo_test_util.h"
#include "test_util.h"

using namespace capstep;
using namespace capstep::hlo_test;
namespace fs = std::filesystem;

namespace {

BackendOptions options_for(BackendKind k) {
  BackendOptions o;
  o.cuda.tf32 = false;  // f32 dots in f32, to compare at 1e-5
  if (k == BackendKind::pjrt) {
    std::string why;
    o.pjrt.plugin = test::pjrt_plugin(&why);
  }
  return o;
}

// Why `k` is skipped here, or "" when it runs.
std::string skip_reason(BackendKind k) {
  std::string why;
  if (k == BackendKind::pjrt) {
    if (test::pjrt_plugin(&why).empty()) return why;
    return "";  // a plugin is there: failing to load it is a failure
  }
  if (!backend_available(k, options_for(k), &why)) return why;
  return "";
}

// Tensor-relative difference: max |a - b| / max |a| (NaN equal to NaN).
double difference(const Array& a, const Array& b) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    const double e = std::fabs(x - y);
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  return worst == 0 ? 0 : worst / std::max(scale, 1e-30);
}

double tolerance(DType d, double f32_tol) {
  switch (d) {
    case DType::f32: return f32_tol;
    case DType::f64: return 1e-12;
    case DType::bf16: return 0x1p-7;
    case DType::i32:
    case DType::i1: return 0;
  }
  return 0;
}

class Conformance : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    const std::string why = skip_reason(GetParam());
    if (!why.empty()) GTEST_SKIP() << backend_name(GetParam()) << " skipped: " << why;
  }
  std::unique_ptr<Backend> make(const Program& p) { return make_backend(GetParam(), p, options_for(GetParam())); }

  // Runs c once on the backend and compares every output with the reference.
  void check(const Case& c, double f32_tol = 1e-5) {
    std::unique_ptr<Backend> b = make(c.program);
    for (size_t i = 0; i < c.inputs.size(); ++i) b->set_input(static_cast<int>(i), c.inputs[i]);
    b->run();
    const std::vector<Array> want = host::run(c.program, c.inputs);
    double worst = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      Array got;
      b->read_output(static_cast<int>(j), got);
      ASSERT_EQ(got.type(), want[j].type()) << c.name << ": output " << c.program.outputs[j].name;
      const double d = difference(want[j], got);
      worst = std::max(worst, d);
      EXPECT_LE(d, tolerance(want[j].dtype(), f32_tol))
          << c.name << " on " << backend_name(GetParam()) << ": output " << c.program.outputs[j].name << " "
          << want[j].type().str() << " differs from the reference by " << d << " of its largest magnitude";
    }
    // A donated input's slot holds its output after the run.
    for (const Alias& a : c.program.aliases) {
      Array in, out;
      b->read_input(a.input, in);
      b->read_output(a.output, out);
      EXPECT_EQ(difference(out, in), 0) << c.name << ": input " << c.program.inputs[static_cast<size_t>(a.input)].name
                                        << " does not hold output " << c.program.outputs[static_cast<size_t>(a.output)].name;
    }
    std::printf("%s on %s: %zu outputs, worst difference %.3g; %s\n", c.name.c_str(), backend_name(GetParam()),
                want.size(), worst, b->describe().device.c_str());
  }
};

std::string kind_name(const ::testing::TestParamInfo<BackendKind>& i) { return backend_name(i.param); }

}  // namespace

// "GetParam() = pjrt" in gtest's and ctest's listings.
namespace capstep {
void PrintTo(BackendKind k, std::ostream* os) { *os << backend_name(k); }
}  // namespace capstep

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::Values(BackendKind::host, BackendKind::cuda, BackendKind::pjrt), kind_name);

TEST_P(Conformance, Elementwise) { check(elementwise_case()); }
TEST_P(Conformance, DotGeneralReductionsLayoutConstants) { check(shapes_case()); }
TEST_P(Conformance, GatherScatterRows) { check(rows_case()); }
TEST_P(Conformance, SlicePadConcatenateAndTheirGradients) { check(slices_case()); }
TEST_P(Conformance, F64AndI32) { check(f64_i32_case()); }
// Its outputs are f32 converted from bf16 results: one bf16 rounding apart.
TEST_P(Conformance, Bf16) { check(bf16_case(), 0x1p-7); }
TEST_P(Conformance, SgdStepWithDonation) { check(sgd_step_case()); }

// value_and_grad of the tiny causal LM's loss: loss and every gradient.
TEST_P(Conformance, ValueAndGradOfTheLmLoss) {
  const nn::LmConfig cfg = tiny_lm();
  std::vector<std::string> names;
  for (const auto& ps : nn::lm_parameters(cfg)) names.push_back(ps.name);
  const Case full = fused_step_case(cfg, "tiny_step");
  Program grad = value_and_grad(nn::lm_loss_program(cfg), names);
  std::vector<Array> in(full.inputs.begin(), full.inputs.begin() + static_cast<long>(names.size()));
  in.push_back(full.inputs[3 * names.size()]);      // tokens
  in.push_back(full.inputs[3 * names.size() + 1]);  // targets
  ASSERT_EQ(in.size(), grad.inputs.size());
  check({"tiny_value_and_grad", grad, in});
}

// Run events: each output_ready and input_released once per index per run;
// an output read inside its output_ready has its final value (the one read
// after the run); on the host, some output is ready before the last input is
// released (the events come as the steps go), elsewhere at the end. And
// supports() says yes to a program the backend runs.
TEST_P(Conformance, RunEventsComeOncePerIndexWithFinalOutputs) {
  const nn::LmConfig cfg = tiny_lm();
  std::vector<std::string> names;
  for (const auto& ps : nn::lm_parameters(cfg)) names.push_back(ps.name);
  const Case full = fused_step_case(cfg, "tiny_step");
  const Program grad = value_and_grad(nn::lm_loss_program(cfg), names);
  std::vector<Array> in(full.inputs.begin(), full.inputs.begin() + static_cast<long>(names.size()));
  in.push_back(full.inputs[3 * names.size()]);
  in.push_back(full.inputs[3 * names.size() + 1]);
  EXPECT_TRUE(supports(GetParam(), grad, options_for(GetParam()))) << supports(GetParam(), grad, options_for(GetParam())).why;
  std::unique_ptr<Backend> b = make(grad);
  EXPECT_TRUE(b->supports(grad));
  for (size_t i = 0; i < in.size(); ++i) b->set_input(static_cast<int>(i), in[i]);
  for (int run = 0; run < 2; ++run) {
    std::vector<int> ready(grad.outputs.size()), released(grad.inputs.size());
    std::vector<Array> early(grad.outputs.size());
    int order = 0, first_ready = -1, last_released = -1;
    RunEvents ev;
    ev.output_ready = [&](int j) {
      ++ready[static_cast<size_t>(j)];
      b->read_output(j, early[static_cast<size_t>(j)]);
      if (first_ready < 0) first_ready = order;
      ++order;
    };
    ev.input_released = [&](int i) {
      ++released[static_cast<size_t>(i)];
      last_released = order++;
    };
    b->run(ev);
    for (size_t j = 0; j < ready.size(); ++j) {
      EXPECT_EQ(ready[j], 1) << grad.outputs[j].name;
      Array after;
      b->read_output(static_cast<int>(j), after);
      EXPECT_TRUE(after.bit_equal(early[j])) << grad.outputs[j].name;
    }
    for (size_t i = 0; i < released.size(); ++i) EXPECT_EQ(released[i], 1) << grad.inputs[i].name;
    if (GetParam() == BackendKind::host) EXPECT_LT(first_ready, last_released);
    else EXPECT_GT(first_ready, -1);
    EXPECT_EQ(b->host_output(0) != nullptr, GetParam() == BackendKind::host);
  }
}

// The training step with AdamW in the program (optim::with_adamw): loss,
// params', m', v', and the three donated per parameter.
TEST_P(Conformance, TinyTrainingStepWithAdamW) { check(fused_step_case(tiny_lm(), "tiny_step")); }

// The step with the attention primitives (fuse_attention) and clipping inside
// the program: attention and attention_grad, the norm's sqrt.
TEST_P(Conformance, TinyStepWithFusedAttentionAndClipping) {
  check(fused_step_case(tiny_lm(), "tiny_step_attention_clip", 0.5, /*fused_attention=*/true));
}

// A bf16 reduce_sum accumulates in f32 and rounds once (ir.h), on every
// backend: 1000 copies of bf16 0.1 (0.10009765625) sum to 100.09765625,
// which rounds to bf16 100; summed in bf16 the partial sums stop growing
// long before (an add of 0.1 is lost at 32 and above).
TEST_P(Conformance, Bf16SumAccumulatesInF32) {
  Program p;
  const int x = p.add_input("x", {DType::bf16, {1000}});
  Attrs all;
  all.dims = {0};
  p.add_output("sum", p.add_eqn(Op::reduce_sum, {x}, all));
  std::unique_ptr<Backend> b = make(p);
  b->set_input(0, Array::from_doubles({DType::bf16, {1000}}, std::vector<double>(1000, 0.1)));
  b->run();
  Array got;
  b->read_output(0, got);
  EXPECT_EQ(got.get(0), 100.0) << "on " << backend_name(GetParam());
}

// One replica: all_reduce is its operand (every backend runs the program as
// one replica of it).
Case all_reduce_case() {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {3, 5}});
  Program p = tr.finish({{"sum", all_reduce(x * 2.0) + x}});
  uint32_t seed = 7;
  return {"all_reduce_one_replica", p, {random_array(p.input_type(0), -1, 1, seed)}};
}
TEST_P(Conformance, AllReduceOfOneReplica) { check(all_reduce_case()); }

// Like the GradCheck meta-test: every primitive of the table appears in a
// program that the suite above runs on every backend against the host.
TEST(ConformanceCoverage, EveryPrimitiveRunsOnEveryBackend) {
  const nn::LmConfig cfg = tiny_lm();
  std::vector<std::string> names;
  for (const auto& ps : nn::lm_parameters(cfg)) names.push_back(ps.name);
  const std::vector<Program> programs = {
      elementwise_case().program, shapes_case().program, rows_case().program, slices_case().program,
      f64_i32_case().program, bf16_case().program, sgd_step_case().program,
      value_and_grad(nn::lm_loss_program(cfg), names), fused_step_case(cfg, "tiny_step").program,
      fused_step_case(cfg, "tiny_step_attention_clip", 0.5, true).program, all_reduce_case().program};
  std::vector<bool> seen(kNumOps, false);
  for (const Program& p : programs)
    for (const Eqn& e : p.eqns) seen[static_cast<size_t>(e.op)] = true;
  for (int k = 0; k < kNumOps; ++k)
    EXPECT_TRUE(seen[static_cast<size_t>(k)]) << op_name(static_cast<Op>(k)) << " is in no conformance case";
}

// 1000 steps, each run's donated outputs feeding the next through the slots:
// the state matches the reference run step by step's, and on PJRT every
// donated buffer was deleted by each run and the state stays at one device
// address (the outputs are written where the inputs were).
TEST_P(Conformance, ThousandStepsStayInPlace) {
  const Case c = sgd_step_case();
  std::unique_ptr<Backend> b = make(c.program);
  for (size_t i = 0; i < c.inputs.size(); ++i) b->set_input(static_cast<int>(i), c.inputs[i]);
  const int w = b->input("w");
  const bool pjrt = GetParam() == BackendKind::pjrt;
  const void* at = pjrt ? pjrt::slot_address(*b, w) : nullptr;
  std::vector<Array> ref = c.inputs;
  int moved = 0;
  for (int s = 0; s < 1000; ++s) {
    b->run();
    ref[0] = host::run(c.program, ref)[1];
    if (pjrt) {
      const pjrt::RunFacts f = pjrt::last_run(*b);
      ASSERT_EQ(f.donated, 1);
      ASSERT_EQ(f.deleted, 1) << "step " << s << ": the donated buffer was not consumed";
      moved += pjrt::slot_address(*b, w) != at;
    }
  }
  EXPECT_EQ(moved, 0) << "steps whose updated w was not where w was";
  Array got;
  b->read_input(w, got);
  EXPECT_LE(difference(ref[0], got), 1e-5);
  std::printf("1000 steps on %s: w within %.3g of the reference; %s\n", backend_name(GetParam()),
              difference(ref[0], got), pjrt ? "one device address throughout" : "");
}

// ---- the PJRT backend's own errors and pieces --------------------------------------

// num_replicas = 1, num_partitions = 1 as protobuf bytes: field 3 (a message
// of 4 bytes) holding field 4 = 1 and field 5 = 1.
TEST(Pjrt, CompileOptionsBytes) {
  EXPECT_EQ(pjrt::compile_options(1, 1), std::string("\x1a\x04\x20\x01\x28\x01", 6));
  EXPECT_EQ(pjrt::compile_options(300, 2), std::string("\x1a\x05\x20\xac\x02\x28\x02", 7));
}

TEST(Pjrt, NoPluginIsAnErrorThatSaysSo) {
  PjrtOptions o;
  std::string why;
  EXPECT_FALSE(pjrt::available(o, &why));
  EXPECT_NE(why.find("PjrtOptions::plugin is empty"), std::string::npos) << why;
  o.plugin = "/nonexistent/pjrt_plugin.so";
  EXPECT_FALSE(pjrt::available(o, &why));
  EXPECT_NE(why.find("no PJRT plugin at /nonexistent/pjrt_plugin.so"), std::string::npos) << why;
  BackendOptions bo;
  bo.pjrt = o;
  try {
    make_backend(BackendKind::pjrt, sgd_step_case().program, bo);
    FAIL() << "make_backend with a missing plugin did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no PJRT plugin at"), std::string::npos) << e.what();
  }
}

TEST(Pjrt, ALibraryWithoutGetPjrtApiIsNotAPlugin) {
  std::string lib;
  for (const char* p : {"/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"})
    if (fs::exists(p)) lib = p;
  if (lib.empty()) GTEST_SKIP() << "no libm.so.6 at the usual places to load as a non-plugin";
  PjrtOptions o;
  o.plugin = lib;
  std::string why;
  EXPECT_FALSE(pjrt::available(o, &why));
  EXPECT_NE(why.find("exports no GetPjrtApi"), std::string::npos) << why;
}

// Malformed StableHLO reaches the plugin's compiler, whose message comes back
// in the Error (the process lives on).
TEST(Pjrt, ACompileFailureCarriesTheCompilersMessage) {
  std::string why;
  PjrtOptions o;
  o.plugin = test::pjrt_plugin(&why);
  if (const std::string w = skip_reason(BackendKind::pjrt); !w.empty()) GTEST_SKIP() << w;
  const pjrt::Client& c = pjrt::client(o);
  try {
    pjrt::Executable e(c, "module @broken { func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> { return %nope : tensor<2xf32> } }");
    FAIL() << "malformed StableHLO compiled";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("PJRT_Client_Compile: ", 0), 0u) << m;
    EXPECT_GT(m.size(), std::string("PJRT_Client_Compile: ").size() + 10) << m;
    std::printf("the plugin's message: %s\n", m.c_str());
  }
}

// The compile cache (PjrtOptions::cache_dir): the first backend compiles and
// saves, a second loads, and both give the same bits; a second program is a
// second entry; an entry whose executable is damaged or cut short, that the
// plugin cannot load, or that holds another program's text, is compiled
// again and replaced; a cache directory that cannot be made is an Error
// naming it.
TEST(Pjrt, CompileCacheLoadsWhatItSavedAndReplacesWhatItCannotUse) {
  std::string why;
  BackendOptions o;
  o.pjrt.plugin = test::pjrt_plugin(&why);
  if (const std::string w = skip_reason(BackendKind::pjrt); !w.empty()) GTEST_SKIP() << w;
  test::TempDir d;
  o.pjrt.cache_dir = d.file("cache");
  const Case c = fused_step_case(tiny_lm(), "tiny_step");
  auto run = [&](const Program& p, const std::vector<Array>& in, std::string* plan) {
    std::unique_ptr<Backend> b = make_backend(BackendKind::pjrt, p, o);
    *plan = b->describe().plan;
    for (size_t i = 0; i < in.size(); ++i) b->set_input(static_cast<int>(i), in[i]);
    b->run();
    std::vector<Array> out(p.outputs.size());
    for (size_t j = 0; j < out.size(); ++j) b->read_output(static_cast<int>(j), out[j]);
    return out;
  };
  auto entries = [&] {
    std::vector<fs::path> e;
    for (const auto& f : fs::directory_iterator(o.pjrt.cache_dir)) e.push_back(f.path());
    return e;
  };
  auto expect_same = [&](const std::vector<Array>& a, const std::vector<Array>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) EXPECT_TRUE(a[j].bit_equal(b[j])) << what << ": output " << c.program.outputs[j].name;
  };
  std::string plan;
  const std::vector<Array> first = run(c.program, c.inputs, &plan);
  EXPECT_NE(plan.find("compiled, saved in the compile cache (" + o.pjrt.cache_dir), std::string::npos) << plan;
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  EXPECT_EQ(entry.extension(), ".pjrt");
  expect_same(first, run(c.program, c.inputs, &plan), "loaded");
  EXPECT_NE(plan.find("loaded from the compile cache (" + entry.string() + ")"), std::string::npos) << plan;

  const Case s = sgd_step_case();
  run(s.program, s.inputs, &plan);
  EXPECT_NE(plan.find("compiled, saved"), std::string::npos) << plan;
  EXPECT_EQ(entries().size(), 2u);

  // The entry: everything before "executable <n> <hash>\n" names what it is
  // for; then the executable.
  const std::string good = test::slurp(entry.string());
  const size_t line = good.find("\nexecutable ");
  ASSERT_NE(line, std::string::npos);
  const size_t payload = good.find('\n', line + 1) + 1;
  ASSERT_LT(payload, good.size());
  auto expect_replaced = [&](const std::string& bytes, const std::string& why) {
    write_file_atomically(entry.string(), bytes);
    std::string p;
    expect_same(first, run(c.program, c.inputs, &p), why);
    EXPECT_NE(p.find("compiled, saved in the compile cache"), std::string::npos) << p;
    EXPECT_NE(p.find(why), std::string::npos) << p;
    EXPECT_TRUE(test::slurp(entry.string()) != bytes) << "the entry is written again";
    expect_same(first, run(c.program, c.inputs, &p), why + ", then loaded");
    EXPECT_NE(p.find("loaded from the compile cache"), std::string::npos) << "the entry written again: " << p;
  };
  // A byte of the executable flipped: its hash no longer matches.
  std::string flipped = good;
  flipped[payload + (good.size() - payload) / 2] ^= 0x5a;
  expect_replaced(flipped, "the entry there was damaged");
  // Cut short.
  expect_replaced(good.substr(0, payload + 10), "the entry there was damaged");
  // Bytes the plugin cannot load, with a length and hash that match them.
  std::string junk(1000, 'x');
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : junk) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  expect_replaced(good.substr(0, line + 1) + "executable 1000 " + hex + "\n" + junk,
                  "the plugin could not load the entry there");
  // Another program's text under this name (a name collision): not used.
  std::string other = good;
  const size_t text = other.find("\ntext ");
  ASSERT_NE(text, std::string::npos);
  other[other.find('\n', text + 1) + 5] ^= 1;
  expect_replaced(other, "for another program");

  o.pjrt.cache_dir = entry.string() + "/sub";   // under a file: cannot be made
  try {
    run(c.program, c.inputs, &plan);
    ADD_FAILURE() << "a cache directory under a file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PJRT compile cache: cannot make the directory '" + o.pjrt.cache_dir + "'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Pjrt, DescribeNamesThePlatformAndThePlugin) {
  std::string why;
  BackendOptions o;
  o.pjrt.plugin = test::pjrt_plugin(&why);
  if (const std::string w = skip_reason(BackendKind::pjrt); !w.empty()) GTEST_SKIP() << w;
  const Case c = sgd_step_case();
  std::unique_ptr<Backend> b = make_backend(BackendKind::pjrt, c.program, o);
  for (size_t i = 0; i < c.inputs.size(); ++i) b->set_input(static_cast<int>(i), c.inputs[i]);
  const BackendInfo info = b->describe();
  EXPECT_EQ(info.device.rfind("PJRT cpu", 0), 0u) << info.device;
  EXPECT_NE(info.device.find(fs::path(o.pjrt.plugin).filename().string()), std::string::npos) << info.device;
  EXPECT_GE(info.bytes, (3 * 2 + 4 * 3 + 1) * sizeof(float)) << info.bytes;
  std::printf("%s\n%s\n%zu bytes\n", info.device.c_str(), info.plan.c_str(), info.bytes);
}

// Device memory: a program whose result cannot be allocated (2^45 f32, as
// many bytes as x86-64 gives a process's whole address space, so no overcommit
// setting lets it through) is an Error carrying the plugin's message, and the
// process lives on. Under AddressSanitizer a request that size aborts inside
// malloc before the plugin sees it (allocation-size-too-big), so that build
// skips it.
TEST(Pjrt, AnAllocationTheDeviceCannotMakeIsAnError) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer: its malloc aborts on a request this size instead of returning null";
#endif
  std::string why;
  PjrtOptions o;
  o.plugin = test::pjrt_plugin(&why);
  if (const std::string w = skip_reason(BackendKind::pjrt); !w.empty()) GTEST_SKIP() << w;
  const pjrt::Client& c = pjrt::client(o);
  const std::string n = std::to_string(int64_t{1} << 45);
  const std::string t = "tensor<" + n + "xf32>";
  try {
    pjrt::Executable e(c, "module @too_big { func.func public @main(%arg0: tensor<f32>) -> " + t +
                              " { %0 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> " + t +
                              "\n return %0 : " + t + " } }");
    Array x(Type{DType::f32, {}});
    x.set(0, 1.0);
    pjrt::Buffer in = pjrt::upload(c, x);
    std::vector<pjrt::Buffer> out = e.execute({in.get()}, {});
    FAIL() << "a 128 TiB result was allocated";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("the plugin's message: %s\n", m.c_str());
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;  // RESOURCE_EXHAUSTED, named
    EXPECT_NE(m.find(std::to_string(int64_t{1} << 47)), std::string::npos) << m;  // the plugin's own words: the bytes
  }
}

// One communicator for every backend (BackendOptions::communicator). A fake
// of `n` replicas in this process: rank 0, and its all_reduce_sum stands for
// n replicas that all hold the same values (each element times n), so the
// host's result shows that it was called.
namespace {
class FakeReplicas final : public Communicator {
 public:
  explicit FakeReplicas(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  void all_reduce_sum(void* data, DType dtype, int64_t n) override {
    ++calls;
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == DType::f32) static_cast<float*>(data)[i] *= static_cast<float>(n_);
      if (dtype == DType::f64) static_cast<double*>(data)[i] *= n_;
    }
  }
  int calls = 0;

 private:
  int n_;
};

// Output 0 of one run of the case's program on b.
Array first_output(Backend& b, const Case& c) {
  b.set_input(0, c.inputs[0]);
  b.run();
  Array got;
  b.read_output(0, got);
  return got;
}
}  // namespace

// The host backend sums over the communicator it is given, and says so.
TEST(OneCommunicator, TheHostBackendSumsOverIt) {
  FakeReplicas two(2);
  BackendOptions o;
  o.communicator = &two;
  const Case c = all_reduce_case();  // all_reduce(x * 2) + x
  std::unique_ptr<Backend> b = make_backend(BackendKind::host, c.program, o);
  const Array got = first_output(*b, c);
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_FLOAT_EQ(got.get(i), 5 * c.inputs[0].get(i)) << i;
  EXPECT_EQ(two.calls, 1);
  EXPECT_EQ(b->describe().collective, "Communicator");
  EXPECT_EQ(make_backend(BackendKind::host, c.program)->describe().collective, "");
}

// PJRT runs one replica: a communicator of two is refused when the backend
// is made (before the plugin loads, so this runs with or without one), with
// one replica it runs.
TEST(OneCommunicator, ThePjrtBackendRefusesTwoReplicas) {
  FakeReplicas two(2), one(1);
  BackendOptions o = options_for(BackendKind::pjrt);  // the plugin where there is one
  o.communicator = &two;
  try {
    make_backend(BackendKind::pjrt, all_reduce_case().program, o);
    FAIL() << "the PJRT backend took a communicator of 2 replicas";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the PJRT backend runs one replica: BackendOptions::communicator has 2"), std::string::npos)
        << m;
  }
  if (const std::string w = skip_reason(BackendKind::pjrt); !w.empty()) GTEST_SKIP() << "one replica: " << w;
  o.communicator = &one;
  const Case c = all_reduce_case();
  std::unique_ptr<Backend> b = make_backend(BackendKind::pjrt, c.program, o);
  const Array got = first_output(*b, c);
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_FLOAT_EQ(got.get(i), 3 * c.inputs[0].get(i)) << i;
  EXPECT_EQ(one.calls, 0);  // XLA's all-reduce of one replica, not the host's
}

// The CUDA backend makes its NCCL communicator itself; without a GPU it fails
// as it does without a communicator (no device), before any NCCL call. On a
// GPU this would wait for a second rank that the fake does not have:
// tests/data_parallel_nccl_test.cpp runs the NCCL path with one rank there.
TEST(OneCommunicator, TheCudaBackendWithoutAGpuFailsForWantOfOne) {
  std::string why;
  if (cuda::available(&why)) GTEST_SKIP() << "a GPU is here: NCCL over a fake 2-rank communicator would wait for ever";
  FakeReplicas two(2);
  BackendOptions o;
  o.communicator = &two;
  try {
    make_backend(BackendKind::cuda, all_reduce_case().program, o);
    FAIL() << "the cuda backend was made without a GPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m, "the cuda backend cannot run here: " + why);
  }
  EXPECT_EQ(two.calls, 0);
}

// borrow_input: the host backend reads a plain input where it lies, so a
// change the caller makes to it between runs shows in the next run (no copy);
// a donated input is refused (false, the slot as it was), and a backend whose
// slots live elsewhere refuses every one. set_input(i, Array&&) gives the same
// results as a copy; the host takes the array (left without memory).
TEST_P(Conformance, BorrowedAndMovedInputs) {
  const Case c = sgd_step_case();
  const Program& p = c.program;
  const int w = p.input_index("w"), x = p.input_index("x"), lr = p.input_index("lr");
  ASSERT_TRUE(w >= 0 && x >= 0 && lr >= 0);
  ASSERT_EQ(p.aliases.size(), 1u);
  ASSERT_EQ(p.aliases[0].input, w);
  const bool host = GetParam() == BackendKind::host;
  std::unique_ptr<Backend> b = make(p);
  Array mine = c.inputs[static_cast<size_t>(x)];
  EXPECT_EQ(b->borrow_input(x, mine), host);
  if (!host) b->set_input(x, mine);
  EXPECT_FALSE(b->borrow_input(w, c.inputs[static_cast<size_t>(w)]));  // donated: never borrowed
  Array moved = c.inputs[static_cast<size_t>(w)];
  b->set_input(w, std::move(moved));
  EXPECT_EQ(moved.raw() == nullptr, host);
  b->set_input(lr, c.inputs[static_cast<size_t>(lr)]);
  auto expect_outputs = [&](const std::vector<Array>& inputs, const char* when) {
    const std::vector<Array> want = host::run(p, inputs);
    for (size_t j = 0; j < want.size(); ++j) {
      Array got;
      b->read_output(static_cast<int>(j), got);
      EXPECT_LE(difference(want[j], got), 1e-5) << when << ": output " << p.outputs[j].name;
    }
  };
  b->run();
  expect_outputs(c.inputs, "first run");
  // The caller doubles x (and sets w back): the next run reads the new x
  // where it was borrowed, else the copy set again.
  for (int64_t i = 0; i < mine.numel(); ++i) mine.data<float>()[i] *= 2;
  if (!host) b->set_input(x, mine);
  b->set_input(w, c.inputs[static_cast<size_t>(w)]);
  b->run();
  std::vector<Array> doubled = c.inputs;
  doubled[static_cast<size_t>(x)] = mine;
  expect_outputs(doubled, "after the caller changed x");
  // Setting a borrowed input copies it again: later changes no longer show.
  b->set_input(x, c.inputs[static_cast<size_t>(x)]);
  for (int64_t i = 0; i < mine.numel(); ++i) mine.data<float>()[i] = 0;
  b->set_input(w, c.inputs[static_cast<size_t>(w)]);
  b->run();
  expect_outputs(c.inputs, "after x was set again");
}
