// XLA runs what we export: each program is written with to_stablehlo, compiled
// and run by XLA on the CPU through JAX's own compiler entry point
// (tests/xla/run_stablehlo.py in the project venv .venv-jax, made by
// scripts/jax-venv), and every output is compared with the host interpreter:
// 1e-5 relative in f32 (1e-12 in f64; relative to the output's largest
// magnitude, see difference()), exact for integers and booleans.
//
// Skipped by name (GTEST_SKIP with the reason) only when .venv-jax does not
// exist or its Python cannot import JAX; any other failure is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "backend/host/interpreter.h"
#include "capstep/stablehlo.h"
#include "stablehlo_npy.h"
#include "stablehlo_programs.h"
#include "stablehlo_test_util.h"
#include "thread_comm.h"

using namespace capstep;
using namespace capstep::hlo_test;
namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a command, returning its exit status and combined output.
int run_command(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Jax {
  std::string python, runner, skip_reason, version;
};

// Found once: the venv's python and the runner, or why the tests skip.
const Jax& jax() {
  static Jax j = [] {
    Jax r;
    std::string src = source_dir();
    if (src.empty()) {
      r.skip_reason = "CAPSTEP_SOURCE_DIR is not set (ctest sets it), so .venv-jax cannot be found";
      return r;
    }
    r.python = src + "/.venv-jax/bin/python";
    r.runner = src + "/tests/xla/run_stablehlo.py";
    if (!fs::exists(r.python)) {
      r.skip_reason = src + "/.venv-jax does not exist: run scripts/jax-venv (needs PyPI) to make it";
      return r;
    }
    std::string out;
    if (run_command(shell_quote(r.python) + " -c 'import jax'", out) != 0) {
      r.skip_reason = r.python + " cannot import jax: rerun scripts/jax-venv. Python said: " + out;
      return r;
    }
    // From here on JAX is there: a failing probe is a test failure, not a skip.
    // The probe's line starts "jax "; JAX may log warnings around it.
    size_t at;
    if (run_command(shell_quote(r.python) + " " + shell_quote(r.runner) + " --probe", out) != 0 ||
        (at = out.find("jax ")) == std::string::npos)
      r.version = "PROBE FAILED: " + out;
    else
      r.version = out.substr(at, out.find('\n', at) - at);
    return r;
  }();
  return j;
}

#define REQUIRE_JAX()                                            \
  do {                                                           \
    if (!jax().skip_reason.empty()) GTEST_SKIP() << jax().skip_reason; \
    ASSERT_EQ(jax().version.rfind("jax ", 0), 0u) << jax().version;    \
  } while (0)

// Tensor-relative difference: max |a - b| / max |a| over the output, with NaN
// equal to NaN and infinities equal to themselves. Elementwise relative error
// is no measure for entries that cancel to near zero (AdamW's m' = b1 m +
// (1 - b1) g): the full step has such entries differing by 1e-1 relative while
// the whole tensor agrees within 1e-6; both are printed, this one is checked.
struct Diff {
  double tensor = 0, element = 0;
};
Diff difference(const Array& a, const Array& b) {
  Diff d;
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get(i), y = b.get(i);
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    double e = std::fabs(x - y);
    if (std::isnan(e)) e = INFINITY;
    worst = std::max(worst, e);
    d.element = std::max(d.element, e / std::max({std::fabs(x), std::fabs(y), 1e-30}));
  }
  d.tensor = worst == 0 ? 0 : worst / std::max(scale, 1e-30);
  return d;
}

struct XlaRun {
  std::vector<Array> outputs;
  std::string report;
};

// Files go to <build>/stablehlo_xla/<tag>: one folder per test, since ctest
// runs the tests of this binary in parallel.
XlaRun run_with_xla(const Case& c, const std::string& text, const std::string& tag,
                    const std::string& platform = "cpu") {
  fs::path dir = fs::path(binary_dir()) / "stablehlo_xla" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir / "out");
  write_file((dir / "module.mlir").string(), text);
  std::string cmd = shell_quote(jax().python) + " " + shell_quote(jax().runner) + " --platform " + platform + " " +
                    shell_quote((dir / "module.mlir").string()) + " " + shell_quote((dir / "out").string());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::string p = (dir / std::string("in").append(std::to_string(i)).append(".npy")).string();
    write_npy(p, c.inputs[i]);
    cmd.append(" ").append(shell_quote(p));
  }
  std::string out;
  int rc = run_command(cmd, out);
  if (rc != 0) throw Error("XLA run of " + c.name + " failed (exit " + std::to_string(rc) + "):\n" + out);
  XlaRun r;
  r.report = read_file((dir / "out" / "report.json").string());
  for (size_t i = 0; i < c.program.outputs.size(); ++i)
    r.outputs.push_back(read_npy((dir / "out" / ("out" + std::to_string(i) + ".npy")).string()));
  return r;
}

void check_with_xla(const Case& c, double f32_tol = 1e-5, const std::string& platform = "cpu") {
  std::string text = to_stablehlo(c.program, "capstep_" + c.name);
  XlaRun x = run_with_xla(c, text, platform + "_" + c.name, platform);
  std::vector<Array> want = host::run(c.program, c.inputs);
  ASSERT_EQ(x.outputs.size(), want.size());
  Diff worst;
  std::string worst_t, worst_e;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = c.program.outputs[i].name;
    ASSERT_EQ(x.outputs[i].type().str(), want[i].type().str()) << c.name << ": output " << name;
    double tol = want[i].dtype() == DType::f32 ? f32_tol : want[i].dtype() == DType::f64 ? 1e-12 : 0.0;
    Diff d = difference(want[i], x.outputs[i]);
    EXPECT_LE(d.tensor, tol) << c.name << ": output " << name << " " << want[i].type().str()
                             << " differs from XLA by " << d.tensor << " of its largest magnitude";
    if (d.tensor >= worst.tensor) worst.tensor = d.tensor, worst_t = name;
    if (d.element >= worst.element) worst.element = d.element, worst_e = name;
  }
  std::printf("%s (%s): %zu outputs; worst |xla-host|/max|host| %.3g (%s); worst elementwise relative %.3g (%s)\n",
              c.name.c_str(), platform.c_str(), want.size(), worst.tensor, worst_t.c_str(), worst.element, worst_e.c_str());
  // XLA honoured every donation: each aliased input's buffer was consumed.
  std::vector<int> ins;
  for (const Alias& a : c.program.aliases) ins.push_back(a.input);
  std::sort(ins.begin(), ins.end());
  std::string donated = "\"donated_inputs\": [";
  for (size_t j = 0; j < ins.size(); ++j) donated += (j ? ", " : "") + std::to_string(ins[j]);
  donated += "]";
  EXPECT_NE(x.report.find(donated), std::string::npos) << c.name << ": " << x.report;
}

}  // namespace

TEST(StablehloXla, JaxIsThePinnedVersion) {
  REQUIRE_JAX();
  std::string req = read_file(source_dir() + "/tests/xla/requirements.txt");
  std::string v = jax().version.substr(4, jax().version.find(' ', 4) - 4);
  EXPECT_NE(req.find("jax==" + v + "\n"), std::string::npos)
      << ".venv-jax has jax " << v << " but tests/xla/requirements.txt pins another: rerun scripts/jax-venv";
}

TEST(StablehloXla, Elementwise) { REQUIRE_JAX(); check_with_xla(elementwise_case()); }
TEST(StablehloXla, ShapesReductionsConstants) { REQUIRE_JAX(); check_with_xla(shapes_case()); }
TEST(StablehloXla, GatherScatterRows) { REQUIRE_JAX(); check_with_xla(rows_case()); }
TEST(StablehloXla, SgdStepWithDonation) { REQUIRE_JAX(); check_with_xla(sgd_step_case()); }
TEST(StablehloXla, F64AndI32) { REQUIRE_JAX(); check_with_xla(f64_i32_case()); }
// bf16: the host rounds every bf16 store to nearest even. XLA's CPU compiler
// computes bf16 arithmetic in f32 and may skip a rounding between two such
// ops (it drops f32 -> bf16 -> f32 pairs), its tanh is an f32 approximation of
// its own, and its dot sums in another order: each can land on the other
// side of a bf16 rounding boundary, one bf16 ulp (2^-8 relative), passed on
// through at most one more rounding. Bound: 2^-7 of each output's largest
// magnitude; measured with jax 0.10.2: 2.7e-3 (the bf16 multiply of "max").
// A wrong lowering (a lost convert, an operand read as f32 bits, a dot
// accumulated in bf16) is off by far more.
TEST(StablehloXla, SlicePadConcatenateAndTheirGradients) { REQUIRE_JAX(); check_with_xla(slices_case()); }
TEST(StablehloXla, Bf16AgreesWithinABf16Ulp) { REQUIRE_JAX(); check_with_xla(bf16_case(), 0x1p-7); }
TEST(StablehloXla, TinyFusedTrainingStep) { REQUIRE_JAX(); check_with_xla(fused_step_case(tiny_lm(), "tiny_step")); }
// With the attention primitives (fuse_attention): the export expands them into
// plain StableHLO, and XLA's numbers equal the host's attention kernels.
TEST(StablehloXla, TinyFusedTrainingStepWithFusedAttention) {
  REQUIRE_JAX();
  const Case c = fused_step_case(tiny_lm(), "tiny_step_fused_attention", 0, true);
  int n = 0;
  for (const Eqn& e : c.program.eqns) n += e.op == Op::attention || e.op == Op::attention_grad;
  ASSERT_EQ(n, 4);  // the forward and the three cotangents of the one layer
  check_with_xla(c);
}

// GPT-2 (biases, LayerNorm, the tied head) and Llama (the rotary tables and
// rotation as constants, grouped-query attention with one key/value head,
// SwiGLU): their fused training steps, exported, agree with the host too.
TEST(StablehloXla, TinyGpt2AndLlamaFusedTrainingSteps) {
  REQUIRE_JAX();
  nn::LmConfig g = tiny_lm();
  g.arch = nn::Arch::gpt2;
  check_with_xla(fused_step_case(g, "tiny_gpt2_step"));
  nn::LmConfig l = tiny_lm();
  l.arch = nn::Arch::llama;
  l.n_kv_heads = 1;
  check_with_xla(fused_step_case(l, "tiny_llama_step", 0, true));
}

// Activation checkpointing (checkpoint_activations): the fused steps with
// every block's forward recomputed in the backward, exported (the copies are
// plain ops), agree with the host as the plain steps do.
TEST(StablehloXla, CheckpointedFusedTrainingSteps) {
  REQUIRE_JAX();
  nn::LmConfig g = tiny_lm();
  g.arch = nn::Arch::gpt2;
  g.n_layers = 2;
  nn::LmConfig l = g;
  l.arch = nn::Arch::llama;
  l.n_kv_heads = 1;
  for (const auto& [config, name] : {std::pair{g, "tiny_gpt2_checkpointed"}, {l, "tiny_llama_checkpointed"}}) {
    Case c = fused_step_case(config, name);
    const size_t plain = c.program.eqns.size();
    c.program = checkpoint_activations(c.program, checkpoint_regions(c.program));
    ASSERT_GT(c.program.eqns.size(), plain) << name;
    check_with_xla(c);
  }
  // The loss in chunks of three rows (nn::lm_loss_program), each recomputed
  // in the backward, each read after the previous one's part (ordered_after).
  Case c = fused_step_case(g, "tiny_gpt2_checkpointed_loss_chunks", 0, false, 3 * g.vocab);
  ASSERT_GT(nn::lm_loss_chunks(g, 3 * g.vocab), 2);
  c.program = checkpoint_activations(c.program, nn::lm_checkpoint_regions(g, c.program, 1));
  check_with_xla(c);
}

// The KV cache's prefill and decode programs (`capstep export --program
// prefill|decode`) of the three architectures: XLA gives the interpreter's
// logits and new key/value rows. The decode token sits inside the cache
// (rows after it hold values it must not see) and at its last row.
TEST(StablehloXla, PrefillAndDecodePrograms) {
  REQUIRE_JAX();
  for (const nn::Arch a : {nn::Arch::seed, nn::Arch::gpt2, nn::Arch::llama}) {
    nn::LmConfig c = tiny_lm();
    c.arch = a;
    if (a == nn::Arch::llama) c.n_kv_heads = 1;
    const std::string arch = nn::arch_name(a);
    check_with_xla(kv_cache_case(c, false, "prefill_" + arch));
    if (a != nn::Arch::gpt2) check_with_xla(kv_cache_case(c, true, "decode_" + arch + "_pos3", 3));
    if (a != nn::Arch::seed)
      check_with_xla(kv_cache_case(c, true, "decode_" + arch + "_last", static_cast<int32_t>(c.context - 1)));
  }
}

// The check: the seed's full fused training step, exported, compiled
// by XLA, run on the same inputs; loss, params', m', v' within 1e-5 relative of
// the host interpreter, and params/m/v donated.
TEST(StablehloXla, FullFusedTrainingStepAgrees) {
  REQUIRE_JAX();
  check_with_xla(fused_step_case(nn::LmConfig{}, "full_step"));
}

// Issue 15: value_and_grad + clip_grad_norm + AdamW, exported, runs on XLA
// with the interpreter's results (loss, grad_norm, params', m', v'). The limit
// is below the step's norm (asserted on the host), so the clipping branch is
// the one both sides take.
TEST(StablehloXla, ClippedFusedTrainingStepAgrees) {
  REQUIRE_JAX();
  for (const auto& [config, name] : {std::pair{tiny_lm(), "tiny_clipped_step"}, {nn::LmConfig{}, "full_clipped_step"}}) {
    const Case c = fused_step_case(config, name, 0.05);
    const std::vector<Array> host_out = host::run(c.program, c.inputs);
    const int at = c.program.output_index(optim::kGradNormName);
    ASSERT_GE(at, 0);
    EXPECT_GT(host_out[static_cast<size_t>(at)].get(0), 0.05) << name << ": the limit must be below the norm";
    check_with_xla(c);
  }
}

// The data-parallel step (issue 14), as `capstep export --data-parallel 2`
// writes it: with_adamw(data_parallel(grad, 2)), mhlo.num_replicas = 2. XLA
// runs it on 2 host devices, each replica with the same parameters and
// moments and its own half of the global batch; capstep runs it as 2 replicas
// (threads of one process summing through a test communicator). Every output
// of every replica within 1e-5 of capstep's (tensor-relative), and the two
// replicas' parameters identical (the point of the all_reduce).
void check_data_parallel_with_xla(const nn::LmConfig& c, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& ps : nn::lm_parameters(c)) names.push_back(ps.name);
  const Program dp = optim::with_adamw(optim::data_parallel(value_and_grad(nn::lm_loss_program(c), names), names, 2),
                                       names, optim::AdamW{});
  Case base = fused_step_case(c, name);  // inputs: params, m, v, tokens, targets, scalars
  const int tok = dp.input_index("tokens"), tgt = dp.input_index("targets");
  ASSERT_GE(tok, 0);
  ASSERT_GE(tgt, 0);
  std::vector<std::vector<Array>> in(2, base.inputs);
  for (int64_t i = 0; i < in[1][static_cast<size_t>(tok)].numel(); ++i) {  // replica 1: other rows
    in[1][static_cast<size_t>(tok)].data<int32_t>()[i] = static_cast<int32_t>((i * 3 + 5) % c.vocab);
    in[1][static_cast<size_t>(tgt)].data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 2) % c.vocab);
  }
  test::Shared shared(2);
  std::vector<std::vector<Array>> want(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      test::ThreadComm comm(shared, r);
      host::Interpreter interp(dp);
      interp.set_communicator(&comm);
      want[static_cast<size_t>(r)] = interp.run(in[static_cast<size_t>(r)]);
    });
  for (std::thread& t : th) t.join();

  fs::path dir = fs::path(binary_dir()) / "stablehlo_xla" / ("replicas_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir / "out");
  const std::string text = to_stablehlo(dp, "capstep", 2);
  ASSERT_NE(text.find("mhlo.num_replicas = 2"), std::string::npos);
  write_file((dir / "module.mlir").string(), text);
  std::string cmd = shell_quote(jax().python) + " " + shell_quote(jax().runner) + " --replicas 2 " +
                    shell_quote((dir / "module.mlir").string()) + " " + shell_quote((dir / "out").string());
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < in[static_cast<size_t>(r)].size(); ++i) {
      const std::string p = (dir / ("r" + std::to_string(r) + "_in" + std::to_string(i) + ".npy")).string();
      write_npy(p, in[static_cast<size_t>(r)][i]);
      cmd += " " + shell_quote(p);
    }
  std::string out;
  ASSERT_EQ(run_command(cmd, out), 0) << out;
  Diff worst;
  std::string worst_name;
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < dp.outputs.size(); ++i) {
      const Array got = read_npy((dir / "out" / ("out" + std::to_string(i) + ".r" + std::to_string(r) + ".npy")).string());
      const Array& w = want[static_cast<size_t>(r)][i];
      ASSERT_EQ(got.type().str(), w.type().str()) << dp.outputs[i].name;
      const Diff d = difference(w, got);
      EXPECT_LE(d.tensor, 1e-5) << "replica " << r << ": output " << dp.outputs[i].name << " differs from XLA by "
                                << d.tensor << " of its largest magnitude";
      if (d.tensor >= worst.tensor) worst = d, worst_name = dp.outputs[i].name + " (replica " + std::to_string(r) + ")";
    }
  for (size_t i = 0; i < dp.outputs.size(); ++i)
    EXPECT_EQ(std::memcmp(want[0][i].raw(), want[1][i].raw(), want[0][i].bytes()), 0) << dp.outputs[i].name;
  // The replicas saw different rows: without the all_reduce their losses would differ.
  // The replicas saw different rows: their own losses differ, the reported
  // one is their mean.
  double local[2];
  for (int r = 0; r < 2; ++r) {
    std::vector<Array> li(in[static_cast<size_t>(r)].begin(), in[static_cast<size_t>(r)].begin() + static_cast<std::ptrdiff_t>(names.size()));
    li.push_back(in[static_cast<size_t>(r)][static_cast<size_t>(tok)]);
    li.push_back(in[static_cast<size_t>(r)][static_cast<size_t>(tgt)]);
    local[r] = host::run(nn::lm_loss_program(c), li)[0].get(0);
  }
  EXPECT_NE(local[0], local[1]);
  const int loss = dp.output_index("loss");
  EXPECT_NEAR(want[0][static_cast<size_t>(loss)].get(0), (local[0] + local[1]) / 2, 1e-6 * std::fabs(local[0]));
  std::printf("%s on 2 replicas: %zu outputs each; worst |xla-capstep|/max|capstep| %.3g (%s)\n", name.c_str(),
              dp.outputs.size(), worst.tensor, worst_name.c_str());
}

TEST(StablehloXla, DataParallelStepOnTwoReplicas) {
  REQUIRE_JAX();
  check_data_parallel_with_xla(tiny_lm(), "tiny_dp_step");
  check_data_parallel_with_xla(nn::LmConfig{}, "seed_dp_step");
}

// The golden files themselves are modules XLA accepts (they are what a reader
// of the docs sees).
TEST(StablehloXla, GoldenFilesCompile) {
  REQUIRE_JAX();
  for (const Case& c : {elementwise_case(), shapes_case(), rows_case(), sgd_step_case(), f64_i32_case(), bf16_case(),
                        slices_case()}) {
    std::string text = read_file(source_dir() + "/tests/golden/stablehlo_" + c.name + ".mlir");
    XlaRun x = run_with_xla(c, text, "golden_" + c.name);
    EXPECT_EQ(x.outputs.size(), c.program.outputs.size()) << c.name;
  }
}

// The same step on a GPU. The pinned venv is CPU-only: this runs where
// .venv-jax's JAX has a CUDA backend (scripts/device-check makes .venv-jax a
// wrapper of a machine's python3 that has JAX with CUDA), and skips by name,
// saying so, everywhere else.
//
// What is compared, and why. As exported, every dot says precision DEFAULT,
// and XLA runs DEFAULT f32 dots on the GPU in TF32 (10-bit mantissa, unit
// roundoff 2^-11 against f32's 2^-24). TF32 leaves the loss close (it is a
// mean over 64 positions: the lanes hold it to 1e-3 relative), but not the
// updated parameters and moments: the first H200 run (2026-11-30) saw 2.53e-3
// of the largest magnitude on blocks.1.mlp.w2.new and 1.96 elementwise on a
// moment. That is AdamW, not a wrong export: an update is lr m'/(sqrt(v') +
// eps), and where v (random in [0, 1e-5] here) is near 0 the update divides
// by a small number that the gradient's TF32 error moves; m' = 0.9 m + 0.1 g
// cancels to near zero elementwise. So the test runs the module twice:
//   1. as exported (TF32): the loss within 1e-3 relative, donations honoured;
//   2. with every dot at precision HIGHEST (what jax.default_matmul_precision
//      ("highest") writes; XLA then computes f32 dots in f32), every output
//      within 1e-4 of its largest magnitude. The CPU check above holds the
//      same step to 1e-5 with XLA's CPU dots, another summation order than
//      the host's OpenBLAS (worst 5.3e-6, on blocks.0.mlp.w1.new, with jax
//      0.10.2); 1e-4 leaves room for the GPU's own summation orders and
//      libdevice's expf/logf (within 2 ulp), still fails if XLA kept TF32
//      (2.5e-3), and a wrong lowering (a transposed operand, a lost term) is
//      off by O(1).
TEST(StablehloXlaGpu, FullFusedTrainingStepAgrees) {
  REQUIRE_JAX();
  std::string out;
  if (run_command(shell_quote(jax().python) + " " + shell_quote(jax().runner) + " --platform cuda --probe", out) != 0) {
    while (!out.empty() && out.back() == '\n') out.pop_back();
    GTEST_SKIP() << "the JAX in .venv-jax has no CUDA backend, so the GPU check has not run (JAX says: "
                 << out.substr(out.rfind('\n') + 1) << ")";
  }
  std::printf("GPU: %s", out.c_str());
  const Case c = fused_step_case(nn::LmConfig{}, "full_step");
  const std::vector<Array> want = host::run(c.program, c.inputs);
  const std::string text = to_stablehlo(c.program, "capstep_" + c.name);
  const std::string dflt = "precision = [DEFAULT, DEFAULT]", highest = "precision = [HIGHEST, HIGHEST]";
  std::string text_highest = text;
  size_t dots = 0;
  for (size_t at = 0; (at = text_highest.find(dflt, at)) != std::string::npos; at += highest.size(), ++dots)
    text_highest.replace(at, dflt.size(), highest);
  ASSERT_GT(dots, 10u) << "the exported step has no dot_general with precision DEFAULT to raise";
  std::vector<int> ins;  // the donated inputs, as run_stablehlo.py reports them
  for (const Alias& a : c.program.aliases) ins.push_back(a.input);
  std::sort(ins.begin(), ins.end());
  std::string donated = "\"donated_inputs\": [";
  for (size_t j = 0; j < ins.size(); ++j) donated += (j ? ", " : "") + std::to_string(ins[j]);
  donated += "]";
  ASSERT_EQ(c.program.outputs[0].name, "loss");

  // 1. As exported: TF32 dots; the loss.
  XlaRun tf32 = run_with_xla(c, text, "cuda_full_step_tf32", "cuda");
  ASSERT_EQ(tf32.outputs.size(), want.size());
  ASSERT_EQ(tf32.outputs[0].type().str(), want[0].type().str());
  const double loss_host = want[0].get(0), loss_xla = tf32.outputs[0].get(0);
  const double loss_rel = std::fabs(loss_xla - loss_host) / std::fabs(loss_host);
  EXPECT_LE(loss_rel, 1e-3) << "loss: XLA (TF32 dots) " << loss_xla << ", host " << loss_host;
  EXPECT_NE(tf32.report.find(donated), std::string::npos) << tf32.report;
  std::printf("full_step (cuda, dots as exported: TF32): loss %.6f vs host %.6f, relative %.3g\n", loss_xla,
              loss_host, loss_rel);

  // 2. Every dot at HIGHEST: every output.
  XlaRun full = run_with_xla(c, text_highest, "cuda_full_step_highest", "cuda");
  ASSERT_EQ(full.outputs.size(), want.size());
  Diff worst;
  std::string worst_t, worst_e;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = c.program.outputs[i].name;
    ASSERT_EQ(full.outputs[i].type().str(), want[i].type().str()) << "output " << name;
    const double tol = want[i].dtype() == DType::f32 ? 1e-4 : 0.0;
    const Diff d = difference(want[i], full.outputs[i]);
    EXPECT_LE(d.tensor, tol) << "output " << name << " " << want[i].type().str() << " differs from XLA (f32 dots) by "
                             << d.tensor << " of its largest magnitude";
    if (d.tensor >= worst.tensor) worst.tensor = d.tensor, worst_t = name;
    if (d.element >= worst.element) worst.element = d.element, worst_e = name;
  }
  EXPECT_NE(full.report.find(donated), std::string::npos) << full.report;
  std::printf("full_step (cuda, %zu dots at HIGHEST): %zu outputs; worst |xla-host|/max|host| %.3g (%s); "
              "worst elementwise relative %.3g (%s)\n",
              dots, want.size(), worst.tensor, worst_t.c_str(), worst.element, worst_e.c_str());
}
