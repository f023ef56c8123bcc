// Gradient accumulation (Options::grad_accum, optim::accumulate_gradients,
// update_on_last) and frozen parameters (Options::train_patterns,
// freeze_patterns) in the training loop, on the host lanes and, with a
// plugin, the fused PJRT lane.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <sys/wait.h>

#include "capstep/autodiff.h"
#include "backend/cuda/cuda.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/stablehlo.h"
#include "capstep/train.h"
#include "process_util.h"
#include "test_util.h"
#include "train/memory.h"

using namespace capstep;
using namespace capstep::test;

namespace {

// The seed's architecture, small: a few steps take milliseconds.
train::Options small(int64_t batch) {
  train::Options o;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_ff = 64;
  o.model.context = 32;
  o.model.batch = batch;
  o.model.seq = 8;
  o.seed = 7;
  return o;
}

bool same_bytes(const Array& a, const Array& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// `base` on each of `lanes` (pjrt-fused on the plugin pjrt_plugin finds).
std::vector<train::Options> on_lanes(const train::Options& base, const std::vector<std::string>& lanes) {
  std::vector<train::Options> out;
  for (const std::string& lane : lanes) {
    train::Options o = base;
    o.lane = train::parse_lane(lane);
    o.require_backend = true;
    o.backend.cuda.tf32 = false;
    std::string why;
    if (o.lane.backend == BackendKind::pjrt) o.backend.pjrt.plugin = pjrt_plugin(&why);
    out.push_back(o);
  }
  return out;
}
const std::vector<std::string> kHostLanes = {"host", "host-fused"};
#define NEED_GPU()                                                   \
  do {                                                               \
    std::string why;                                                 \
    if (!cuda::available(&why)) GTEST_SKIP() << "no GPU: " << why;   \
  } while (0)
#define NEED_PJRT()                                           \
  do {                                                        \
    std::string why;                                          \
    if (pjrt_plugin(&why).empty()) GTEST_SKIP() << why;       \
  } while (0)

// Bound for the accumulated loss against the one-batch loss. The loss is the
// mean of B*S*N = 64 positive per-position cross-entropies; one batch sums
// them in one order, accumulation as N = 4 means of 16 each and the mean of
// those: the same exact value rounded along two different f32 summation
// orders. Each order's relative error on a sum of n positive terms is at most
// (n - 1) u with u = 2^-24 (each of the n - 1 additions rounds once, and
// every partial sum is at most the total), so the two differ by at most
// 2 * 63 * 2^-24 = 7.5e-6 relative at step 1. Later steps also read
// parameters that differ by one AdamW update's rounding (the gradients are
// the same means, reassociated the same way), which moves the loss by an
// amount of the same order; 2e-5 leaves room for that (measured: below 2e-6).
constexpr double kLossBound = 2e-5;

}  // namespace

// N = 4 micro-batches of B = 2 rows against one batch of 8 rows, 5 steps,
// with clipping on (it clips the accumulated mean): the losses within
// kLossBound, and the parameters after 5 steps as AdamW's rounding allows
// (expect_updated_param_close: every element within 2 lr per step, a sign
// of m / sqrt(v) flipped by rounding, and at most 1% beyond 1e-4 of the
// tensor's scale).
void micro_batches_match_one_big_batch(const std::vector<std::string>& lanes) {
  TempDir d;
  train::Options acc = small(2);
  acc.grad_accum = 4;
  acc.steps = 5;
  acc.clip_grad_norm = 0.5;
  train::Options big = small(8);
  big.steps = 5;
  big.clip_grad_norm = 0.5;
  const std::vector<train::Options> accs = on_lanes(acc, lanes), bigs = on_lanes(big, lanes);
  for (size_t l = 0; l < accs.size(); ++l) {
    train::Options a = accs[l], b = bigs[l];
    a.save_path = d.file("acc.safetensors");
    b.save_path = d.file("big.safetensors");
    std::vector<double> norms_a, norms_b;
    a.on_step = [&](const train::StepInfo& s) { norms_a.push_back(s.grad_norm); };
    b.on_step = [&](const train::StepInfo& s) { norms_b.push_back(s.grad_norm); };
    const train::Result ra = train::train(a), rb = train::train(b);
    ASSERT_EQ(ra.losses.size(), 5u) << lanes[l];
    ASSERT_EQ(rb.losses.size(), 5u) << lanes[l];
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_LE(std::fabs(ra.losses[k] - rb.losses[k]) / rb.losses[k], kLossBound) << lanes[l] << " step " << k + 1;
      EXPECT_LE(std::fabs(norms_a[k] - norms_b[k]) / norms_b[k], 1e-4) << lanes[l] << " norm, step " << k + 1;
    }
    EXPECT_GT(norms_a[0], 0.5) << "the test must clip";
    const Checkpoint ca = train::load_model_checkpoint(a.save_path, nullptr);
    const Checkpoint cb = train::load_model_checkpoint(b.save_path, nullptr);
    EXPECT_EQ(ca.step, 5u);
    EXPECT_EQ(ca.data_position, 5u);   // batches of the stream count optimizer steps
    ASSERT_EQ(ca.params.size(), cb.params.size());
    for (size_t j = 0; j < ca.params.size(); ++j)
      for (int64_t k = 0; k < ca.params[j].array.numel(); ++k)
        ASSERT_LE(std::fabs(ca.params[j].array.get(k) - cb.params[j].array.get(k)), 5 * 2 * a.adamw.lr * (1 + 1e-3))
            << lanes[l] << " " << ca.params[j].name << " element " << k;
    int64_t off = 0, total = 0;
    for (size_t j = 0; j < ca.params.size(); ++j) {
      double scale = 0;
      for (int64_t k = 0; k < cb.params[j].array.numel(); ++k) scale = std::max(scale, std::fabs(cb.params[j].array.get(k)));
      for (int64_t k = 0; k < ca.params[j].array.numel(); ++k, ++total)
        off += std::fabs(ca.params[j].array.get(k) - cb.params[j].array.get(k)) > 1e-4 * scale;
    }
    EXPECT_LE(off * 100, total) << lanes[l] << ": " << off << " of " << total << " elements beyond rounding";
    // and the accumulation changed something: one micro-batch's run differs
    if (a.lane.backend == BackendKind::pjrt) continue;   // (a compile more, nothing more to learn)
    train::Options one = a;
    one.grad_accum = 1;
    one.save_path = "";
    one.on_step = nullptr;
    EXPECT_NE(train::train(one).losses[1], ra.losses[1]) << lanes[l];
  }
}

TEST(GradAccum, MicroBatchesGiveTheLossesAndParametersOfOneBigBatch) { micro_batches_match_one_big_batch(kHostLanes); }

TEST(GradAccum, MicroBatchesGiveTheLossesAndParametersOfOneBigBatchOnPjrt) {
  NEED_PJRT();
  // pjrt: AdamW on the host over a device's gradients, as the cuda lane
  micro_batches_match_one_big_batch({"pjrt", "pjrt-fused"});
}

// A run accumulating 3 micro-batches, saved at step 3 and resumed to step 6,
// equals the uninterrupted run bit for bit on the host: losses and parameters.
// The GPU lanes (full f32 dots: the bound is the same reassociation one).
TEST(GradAccum, MicroBatchesGiveTheLossesAndParametersOfOneBigBatchOnTheGpu) {
  NEED_GPU();
  micro_batches_match_one_big_batch({"cuda", "cuda-fused"});
}

TEST(GradAccum, ResumedRunIsBitIdenticalOnTheHost) {
  TempDir d;
  for (const char* lane : {"host", "host-fused"}) {
    train::Options whole = small(2);
    whole.lane = train::parse_lane(lane);
    whole.grad_accum = 3;
    whole.steps = 6;
    whole.save_path = d.file("whole.safetensors");
    const train::Result w = train::train(whole);
    train::Options first = whole;
    first.steps = 3;
    first.save_path = d.file("part.safetensors");
    const train::Result r1 = train::train(first);
    train::Options rest = whole;
    rest.resume_path = first.save_path;
    rest.save_path = d.file("rest.safetensors");
    const train::Result r2 = train::train(rest);
    ASSERT_EQ(r1.losses.size() + r2.losses.size(), 6u);
    std::vector<double> all = r1.losses;
    all.insert(all.end(), r2.losses.begin(), r2.losses.end());
    for (size_t k = 0; k < 6; ++k) EXPECT_EQ(all[k], w.losses[k]) << lane << " step " << k + 1;
    const Checkpoint a = train::load_model_checkpoint(whole.save_path, nullptr);
    const Checkpoint b = train::load_model_checkpoint(rest.save_path, nullptr);
    for (size_t j = 0; j < a.params.size(); ++j) {
      EXPECT_TRUE(same_bytes(a.params[j].array, b.params[j].array)) << lane << " " << a.params[j].name;
      EXPECT_TRUE(same_bytes(a.adam_m[j].array, b.adam_m[j].array)) << lane << " " << a.params[j].name;
    }
  }
}

TEST(GradAccum, TransformsCheckTheirInputs) {
  const nn::LmConfig c = small(2).model;
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : ps) names.push_back(p.name);
  const Program g = value_and_grad(nn::lm_loss_program(c), names);
  EXPECT_THROW(optim::accumulate_gradients(g, names, 1), Error);
  EXPECT_THROW(optim::accumulate_gradients(g, {"nope"}, 2), Error);
  const Program a = optim::accumulate_gradients(g, names, 2);
  EXPECT_THROW(optim::accumulate_gradients(a, names, 2), Error);
  EXPECT_THROW(optim::update_on_last(optim::with_adamw(g, names, {}), names), Error);   // no accum.last
  // The accumulators stay aliased through with_adamw: donated on every backend.
  const Program s = optim::update_on_last(optim::with_adamw(a, names, {}), names);
  size_t acc_aliases = 0;
  for (const Alias& al : s.aliases)
    if (s.inputs[static_cast<size_t>(al.input)].name.rfind("accum.", 0) == 0) {
      ++acc_aliases;
      EXPECT_EQ(s.outputs[static_cast<size_t>(al.output)].name, s.inputs[static_cast<size_t>(al.input)].name + ".new");
    }
  EXPECT_EQ(acc_aliases, names.size());
  train::Options o = small(2);
  o.grad_accum = 0;
  EXPECT_THROW(o.validate(), Error);
}

// The accumulating fused step written as StableHLO and read back runs as the
// program itself: two micro-batches (the first keeps the state, the second
// updates it), with the accumulators carried through the aliases by hand.
TEST(GradAccum, FusedStepRoundTripsThroughStableHlo) {
  const nn::LmConfig c = small(2).model;
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  const Program step = optim::update_on_last(
      optim::with_adamw(optim::accumulate_gradients(value_and_grad(nn::lm_loss_program(c), names), names, 2), names, {}),
      names);
  const Program back = from_stablehlo(to_stablehlo(step));
  ASSERT_EQ(back.inputs.size(), step.inputs.size());
  ASSERT_EQ(back.aliases.size(), step.aliases.size());
  const std::vector<Array> params = nn::init_parameters(c, 7);
  std::vector<Array> ins;
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    ins.emplace_back(step.input_type(static_cast<int>(i)));
    if (i < params.size()) ins.back() = params[i];
    const std::string& n = step.inputs[i].name;
    if (n == "tokens" || n == "targets")
      for (int64_t k = 0; k < ins.back().numel(); ++k)
        ins.back().data<int32_t>()[k] = static_cast<int32_t>((k * (n == "tokens" ? 7 : 5) + 1) % c.vocab);
  }
  const optim::AdamWScalars sc = optim::adamw_scalars(optim::AdamW{}, 1);
  const float scal[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
  for (int i = 0; i < 4; ++i) ins[static_cast<size_t>(step.input_index(optim::kScalarNames[i]))] = Array::scalar(scal[i]);
  std::vector<Array> state[2] = {ins, ins};
  host::Interpreter a(step), b(back);
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<Array> outs[2];
    for (int w = 0; w < 2; ++w) {
      std::vector<Array>& in = state[w];
      in[static_cast<size_t>(step.input_index(optim::kAccumLastName))] = Array::scalar(micro == 1 ? 1.0f : 0.0f);
      std::vector<const Array*> ptr;
      for (const Array& x : in) ptr.push_back(&x);
      (w == 0 ? a : b).run(ptr, outs[w]);
      for (const Alias& al : (w == 0 ? step : back).aliases)
        in[static_cast<size_t>(al.input)] = outs[w][static_cast<size_t>(al.output)];
    }
    for (size_t k = 0; k < outs[0].size(); ++k)
      EXPECT_TRUE(same_bytes(outs[0][k], outs[1][k])) << step.outputs[k].name << " micro-batch " << micro;
    // the first micro-batch keeps the parameters; the second moves them
    const int p0 = step.output_index(optim::updated_name(names[0]));
    EXPECT_EQ(same_bytes(outs[0][static_cast<size_t>(p0)], params[0]), micro == 0);
  }
}

// ---- frozen parameters ---------------------------------------------------------

TEST(Freeze, PatternsPickParametersByEitherName) {
  EXPECT_TRUE(train::glob_match("blocks.*.attn.w?", "blocks.10.attn.wq"));
  EXPECT_FALSE(train::glob_match("blocks.*.attn.w?", "blocks.1.attn.wq2"));
  EXPECT_TRUE(train::glob_match("*", ""));
  EXPECT_FALSE(train::glob_match("a*b", "acb.c"));
  nn::LmConfig llama = small(2).model;
  llama.arch = nn::Arch::llama;
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(llama);
  std::vector<bool> on = train::trainable_mask(llama, {"model.layers.*.self_attn.q_proj.weight"}, {});
  for (size_t j = 0; j < ps.size(); ++j)
    EXPECT_EQ(on[j], ps[j].name.find("attn.wq") != std::string::npos) << ps[j].name;
  on = train::trainable_mask(llama, {}, {"model.embed_tokens.weight,blocks.0.*", "lm_head.weight"});
  for (size_t j = 0; j < ps.size(); ++j)
    EXPECT_EQ(on[j], !(ps[j].name == "tok_emb" || ps[j].name == "head" || ps[j].name.rfind("blocks.0.", 0) == 0))
        << ps[j].name;
  // GPT-2's packed c_attn: the pattern takes all three of q, k, v.
  nn::LmConfig gpt2 = small(2).model;
  gpt2.arch = nn::Arch::gpt2;
  const std::vector<nn::ParamSpec> gs = nn::lm_parameters(gpt2);
  on = train::trainable_mask(gpt2, {"transformer.h.0.attn.c_attn.weight"}, {});
  int n = 0;
  for (size_t j = 0; j < gs.size(); ++j) {
    const bool want = gs[j].name == "blocks.0.attn.wq" || gs[j].name == "blocks.0.attn.wk" || gs[j].name == "blocks.0.attn.wv";
    EXPECT_EQ(on[j], want) << gs[j].name;
    n += on[j];
  }
  EXPECT_EQ(n, 3);
  try {
    train::trainable_mask(llama, {"blocks.*"}, {"model.layers.*.mlp.nope_proj.weight"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--freeze: pattern 'model.layers.*.mlp.nope_proj.weight' matches no parameter"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train::trainable_mask(llama, {}, {"*"}), Error);   // nothing left to train
}

// Ten steps with the token embedding and block 0 frozen: their bytes are the
// initial ones, every other parameter moved; the checkpoint holds every
// parameter but no moments for the frozen ones.
void frozen_parameters_keep_their_bytes(const std::vector<std::string>& lanes) {
  TempDir d;
  train::Options base = small(2);
  base.steps = 10;
  base.freeze_patterns = {"tok_emb,blocks.0.*"};
  const std::vector<Array> init = nn::init_parameters(base.model, base.seed);
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(base.model);
  const std::vector<train::Options> runs = on_lanes(base, lanes);
  for (size_t l = 0; l < runs.size(); ++l) {
    train::Options o = runs[l];
    o.save_path = d.file(lanes[l] + ".safetensors");
    std::vector<std::string> said;
    o.on_message = [&](const std::string& m) { said.push_back(m); };
    const train::Result r = train::train(o);
    ASSERT_EQ(r.losses.size(), 10u);
    EXPECT_LT(r.losses.back(), r.losses.front()) << lanes[l];
    bool told = false;
    for (const std::string& m : said) told = told || m.find("are frozen") != std::string::npos;
    EXPECT_TRUE(told) << lanes[l];
    const Checkpoint raw = load_checkpoint(o.save_path);
    size_t frozen = 0;
    for (const nn::ParamSpec& p : ps) frozen += p.name == "tok_emb" || p.name.rfind("blocks.0.", 0) == 0;
    EXPECT_EQ(raw.frozen.size(), frozen);
    EXPECT_EQ(raw.params.size(), ps.size());
    EXPECT_EQ(raw.adam_m.size(), ps.size() - frozen);
    for (const NamedArray& m : raw.adam_m)
      EXPECT_FALSE(m.name == "tok_emb" || m.name.rfind("blocks.0.", 0) == 0) << m.name;
    train::TrainMeta meta;
    const Checkpoint c = train::load_model_checkpoint(o.save_path, &meta);
    EXPECT_EQ(meta.frozen.size(), frozen);
    for (size_t j = 0; j < ps.size(); ++j) {
      const bool is_frozen = ps[j].name == "tok_emb" || ps[j].name.rfind("blocks.0.", 0) == 0;
      EXPECT_EQ(same_bytes(c.params[j].array, init[j]), is_frozen) << lanes[l] << " " << ps[j].name;
    }
    // Sampling reads it as any checkpoint.
    train::SampleOptions so;
    so.checkpoint = o.save_path;
    so.tokens = 5;
    EXPECT_EQ(train::sample(so).size(), 5u);
  }
  if (lanes[0] != "host") return;
  // Resuming with other frozen parameters says what changed.
  train::Options again = small(2);
  again.steps = 12;
  again.resume_path = d.file("host.safetensors");
  again.freeze_patterns = {"tok_emb"};
  try {
    train::train(again);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frozen there, trained now: blocks.0."), std::string::npos) << e.what();
  }
  again.freeze_patterns = base.freeze_patterns;
  EXPECT_EQ(train::train(again).losses.size(), 2u);
}

TEST(Freeze, FrozenParametersKeepTheirBytes) { frozen_parameters_keep_their_bytes(kHostLanes); }

TEST(Freeze, FrozenParametersKeepTheirBytesOnTheGpu) {
  NEED_GPU();
  frozen_parameters_keep_their_bytes({"cuda", "cuda-fused"});
}

TEST(Freeze, FrozenParametersKeepTheirBytesOnPjrt) {
  NEED_PJRT();
  frozen_parameters_keep_their_bytes({"pjrt", "pjrt-fused"});
}

// The step over the trained parameters only gives, for them, the gradients
// the step over every parameter gives: the same bits.
TEST(Freeze, TrainedOnlyGradientsAreTheFullStepsGradients) {
  const nn::LmConfig c = small(2).model;
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  const std::vector<bool> on = train::trainable_mask(c, {}, {"tok_emb,blocks.0.*"});
  std::vector<std::string> all, some;
  for (size_t j = 0; j < ps.size(); ++j) {
    all.push_back(ps[j].name);
    if (on[j]) some.push_back(ps[j].name);
  }
  const Program loss = nn::lm_loss_program(c);
  host::Interpreter full(value_and_grad(loss, all)), part(value_and_grad(loss, some));
  EXPECT_EQ(part.program().outputs.size(), 1 + some.size());
  const std::vector<Array> params = nn::init_parameters(c, 7);
  Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
  for (int64_t k = 0; k < tokens.numel(); ++k) {
    tokens.data<int32_t>()[k] = static_cast<int32_t>((k * 7) % c.vocab);
    targets.data<int32_t>()[k] = static_cast<int32_t>((k * 5 + 3) % c.vocab);
  }
  std::vector<const Array*> in;
  for (const Array& p : params) in.push_back(&p);
  in.push_back(&tokens);
  in.push_back(&targets);
  std::vector<Array> fo, po;
  full.run(in, fo);
  part.run(in, po);
  EXPECT_TRUE(same_bytes(fo[0], po[0]));
  for (size_t k = 0; k < some.size(); ++k) {
    const int f = full.program().output_index("grad." + some[k]);
    EXPECT_EQ(norm_diff(po[1 + k], fo[static_cast<size_t>(f)]), 0.0) << some[k];
  }
}

// The memory plan counts no moments or gradients for frozen parameters.
TEST(Freeze, MemoryEstimateCountsNoMomentsForFrozenParameters) {
  train::Options o = small(2);
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(o.model);
  std::vector<std::string> all;
  for (const nn::ParamSpec& p : ps) all.push_back(p.name);
  const Program loss = nn::lm_loss_program(o.model);
  const train::HostMemory whole = train::plan_host_memory(o, true, value_and_grad(loss, all), nullptr);
  o.freeze_patterns = {"tok_emb,blocks.0.*"};
  const std::vector<bool> on = train::trainable_mask(o.model, {}, o.freeze_patterns);
  std::vector<std::string> some;
  size_t frozen_bytes = 0;
  for (size_t j = 0; j < ps.size(); ++j) {
    if (on[j]) some.push_back(ps[j].name);
    else frozen_bytes += ps[j].type.bytes();
  }
  const train::HostMemory part = train::plan_host_memory(o, true, value_and_grad(loss, some), nullptr);
  EXPECT_EQ(part.params, whole.params);
  EXPECT_EQ(part.state, whole.state - 2 * frozen_bytes);
  EXPECT_LT(part.step.outputs, whole.step.outputs);   // no gradients for them
}

// The flags end to end: `capstep train --freeze ... --grad-accum 2` says what
// trains and how many micro-batches a step takes, its checkpoint resumes with
// the same frozen parameters by default, a pattern that matches nothing is
// an error naming it, and export-hf writes the frozen run's model.
TEST(Freeze, CliFlags) {
  const std::string bin = capstep_binary();
  if (bin.empty() || !std::filesystem::exists(bin)) GTEST_SKIP() << "the capstep binary is not built: '" << bin << "'";
  TempDir d;
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin);
    const pid_t pid = spawn_process(args, d.file("out"), d.file("err"));
    int status = 0;
    waitpid(pid, &status, 0);
    Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(d.file("out"));
    r.err = slurp(d.file("err"));
    return r;
  };
  const std::string ck = d.file("run.safetensors");
  Outcome r = run({"train", "--arch", "llama", "--steps", "2", "--layers", "1", "--d-model", "32", "--heads", "2",
                   "--d-ff", "64", "--batch", "2", "--seq", "8", "--val-fraction", "0", "--no-progress",
                   "--freeze", "model.embed_tokens.weight,lm_head.weight", "--freeze", "blocks.0.attn.w?",
                   "--grad-accum", "2", "--save", ck});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 micro-batches a step (batch 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters train"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", 6 are frozen"), std::string::npos) << r.out;   // tok_emb, head, wq wk wv wo
  EXPECT_EQ(load_checkpoint(ck).frozen.size(), 6u);
  r = run({"train", "--resume", ck, "--steps", "3", "--no-progress"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(", 6 are frozen"), std::string::npos) << r.out;
  r = run({"train", "--resume", ck, "--steps", "4", "--no-progress", "--train", "nope*"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--train: pattern 'nope*' matches no parameter"), std::string::npos) << r.err;
  r = run({"export-hf", "--checkpoint", ck, "--out", d.file("hf")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::exists(d.file("hf") + "/model.safetensors"));
}
