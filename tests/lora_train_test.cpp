// LoRA in the training loop (train::Options::lora): the adapters train, the
// base stays frozen, checkpoints resume bit for bit, and a LoRA checkpoint
// samples, exports as PEFT's files and as the merged model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/wait.h>

#include "backend/cuda/cuda.h"
#include "capstep/hf.h"
#include "backend/host/interpreter.h"
#include "capstep/lora.h"
#include "capstep/nn.h"
#include "capstep/train.h"
#include "process_util.h"
#include "test_util.h"
#include "train/memory.h"

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;

namespace {

// A small GPT-2 or Llama: a few steps take milliseconds.
train::Options small(nn::Arch arch) {
  train::Options o;
  o.model.arch = arch;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_ff = 64;
  o.model.context = 32;
  o.model.batch = 2;
  o.model.seq = 8;
  o.seed = 7;
  o.val_fraction = 0;
  return o;
}
train::Options with_lora(train::Options o, int64_t r, std::vector<std::string> targets) {
  o.lora.rank = r;
  o.lora.alpha = 16;
  o.lora.targets = std::move(targets);
  return o;
}

bool same_bytes(const Array& a, const Array& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}
bool is_adapter(const std::string& n) { return n.rfind("lora.", 0) == 0; }

}  // namespace

// With B = 0 the adapted model is the base bit for bit (y + 0): step 1's loss
// equals a full fine-tune's step 1 loss exactly, for both architectures and
// the default targets.
TEST(LoraTrain, FirstLossIsTheBaseModelsBitForBit) {
  for (nn::Arch arch : {nn::Arch::gpt2, nn::Arch::llama}) {
    train::Options full = small(arch);
    full.steps = 1;
    train::Options lo = with_lora(full, 4, {});
    const train::Result a = train::train(full), b = train::train(lo);
    ASSERT_EQ(a.losses.size(), 1u);
    ASSERT_EQ(b.losses.size(), 1u);
    EXPECT_EQ(a.losses[0], b.losses[0]) << (arch == nn::Arch::gpt2 ? "gpt2" : "llama");
  }
}

// 10 steps on host and host-fused: every base parameter's bytes as
// initialised, A and B moved (B from zeros), moments only for A and B, and
// the "lora" metadata there. The two lanes give the same losses within
// rounding.
TEST(LoraTrain, TenStepsTrainOnlyTheAdapters) {
  TempDir d;
  std::vector<std::vector<double>> losses;
  for (const char* lane : {"host", "host-fused"}) {
    train::Options o = with_lora(small(nn::Arch::llama), 4, {"all-linear"});
    o.lane = train::parse_lane(lane);
    o.steps = 10;
    o.adamw.lr = 1e-2;
    o.save_path = d.file(std::string(lane) + ".st");
    std::vector<std::string> said;
    o.on_message = [&](const std::string& m) { said.push_back(m); };
    const train::Result r = train::train(o);
    ASSERT_EQ(r.losses.size(), 10u) << lane;
    losses.push_back(r.losses);
    EXPECT_LT(r.losses.back(), r.losses.front()) << lane;
    bool told = false;
    for (const std::string& m : said) told = told || m.find("the adapters train (") != std::string::npos;
    EXPECT_TRUE(told) << lane;

    train::TrainMeta meta;
    const Checkpoint c = train::load_model_checkpoint(o.save_path, &meta);
    ASSERT_TRUE(meta.lora);
    EXPECT_EQ(meta.lora->options.r, 4);
    EXPECT_EQ(meta.lora->targets.size(), 2u * 7u);   // 2 layers x q, k, v, o, gate, up, down
    const std::vector<Array> init = nn::init_parameters(o.model, o.seed);
    const std::vector<nn::ParamSpec> specs = nn::lm_parameters(o.model);
    ASSERT_EQ(c.params.size(), specs.size() + 2 * meta.lora->targets.size());
    for (size_t j = 0; j < specs.size(); ++j) {
      EXPECT_EQ(c.params[j].name, specs[j].name);
      EXPECT_TRUE(same_bytes(c.params[j].array, init[j])) << lane << ": base " << specs[j].name << " changed";
    }
    const lora::Adapter start =
        lora::init_adapter(nn::lm_loss_program(o.model), meta.lora->targets, meta.lora->options, o.seed);
    const lora::Adapter now = train::checkpoint_adapter(c, meta);
    for (size_t t = 0; t < now.targets.size(); ++t) {
      EXPECT_FALSE(same_bytes(now.a[t], start.a[t])) << lane << ": A of " << now.targets[t].name << " did not train";
      bool any = false;
      for (int64_t i = 0; i < now.b[t].numel(); ++i) any = any || now.b[t].get(i) != 0;
      EXPECT_TRUE(any) << lane << ": B of " << now.targets[t].name << " is still zero";
    }
    EXPECT_EQ(c.adam_m.size(), 2 * meta.lora->targets.size());
    for (const NamedArray& m : c.adam_m) EXPECT_TRUE(is_adapter(m.name)) << m.name;
    EXPECT_EQ(c.frozen.size(), specs.size());
    for (const std::string& f : c.frozen) EXPECT_FALSE(is_adapter(f)) << f;
  }
  for (size_t k = 0; k < 10; ++k)
    EXPECT_NEAR(losses[0][k], losses[1][k], 1e-5 * losses[0][k]) << "step " << k + 1;
}

// A run resumed from its step-5 checkpoint continues bit for bit on host and
// host-fused: losses of steps 6..10 and the final parameters and moments,
// with the base in f32 and in bf16 (whose checkpoint holds the adapted weights in bf16).
TEST(LoraTrain, ResumeIsBitIdentical) {
  for (int run = 0; run < 4; ++run) {
    const bool bf16 = run % 2 == 1;
    TempDir d;
    train::Options o = with_lora(small(nn::Arch::gpt2), 4, {"all-linear"});
    o.lane = train::parse_lane(run < 2 ? "host" : "host-fused");
    o.lora.base_bf16 = bf16;
    o.steps = 10;
    o.adamw.lr = 1e-2;
    o.save_path = d.file("whole.st");
    const train::Result whole = train::train(o);
    train::Options first = o;
    first.steps = 5;
    first.save_path = d.file("half.st");
    train::train(first);
    train::Options rest = o;
    rest.resume_path = first.save_path;
    rest.save_path = d.file("rest.st");
    const train::Result second = train::train(rest);
    ASSERT_EQ(second.losses.size(), 5u);
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(second.losses[k], whole.losses[5 + k]) << "run " << run << " step " << k + 6;
    const Checkpoint a = train::load_model_checkpoint(o.save_path, nullptr);
    const Checkpoint b = train::load_model_checkpoint(rest.save_path, nullptr);
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t j = 0; j < a.params.size(); ++j) EXPECT_TRUE(same_bytes(a.params[j].array, b.params[j].array)) << a.params[j].name;
    ASSERT_EQ(a.adam_v.size(), b.adam_v.size());
    for (size_t j = 0; j < a.adam_v.size(); ++j) EXPECT_TRUE(same_bytes(a.adam_v[j].array, b.adam_v[j].array)) << a.adam_v[j].name;
    if (bf16) {
      const SafetensorsFile f = read_safetensors(o.save_path);
      bool bf16_weight = false;
      for (const NamedArray& t : f.tensors) bf16_weight = bf16_weight || t.array.dtype() == DType::bf16;
      EXPECT_TRUE(bf16_weight) << "the adapted weights are stored in bf16";
    }
    // Other LoRA options than the checkpoint's are refused, naming both.
    train::Options other = rest;
    other.lora.rank = 8;
    other.steps = 12;
    try {
      train::train(other);
      ADD_FAILURE() << "resumed with another rank";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("resume with the checkpoint's LoRA options"), std::string::npos) << e.what();
    }
  }
}

// The checkpoint's adapter as PEFT's files reads back as it is; the merged
// model's logits equal the adapted model's within 1e-5; and sampling the
// LoRA checkpoint (programs wrapped in lora::lora) gives the merged model's
// greedy text and logits.
TEST(LoraTrain, ExportsAndSampling) {
  TempDir d;
  train::Options o = with_lora(small(nn::Arch::gpt2), 4, {"all-linear"});
  o.steps = 10;
  o.adamw.lr = 3e-2;
  o.save_path = d.file("lora.st");
  train::train(o);
  train::TrainMeta meta;
  const Checkpoint c = train::load_model_checkpoint(o.save_path, &meta);
  const lora::Adapter ad = train::checkpoint_adapter(c, meta);

  lora::write_peft_dir(d.file("peft"), meta.model, ad);
  const lora::Adapter back = lora::read_peft_dir(d.file("peft"), meta.model);
  EXPECT_EQ(back.options.r, ad.options.r);
  EXPECT_EQ(back.options.alpha, ad.options.alpha);
  ASSERT_EQ(back.targets.size(), ad.targets.size());
  for (size_t t = 0; t < ad.targets.size(); ++t) {
    EXPECT_EQ(back.targets[t].name, ad.targets[t].name);
    EXPECT_TRUE(same_bytes(back.a[t], ad.a[t])) << ad.targets[t].name;
    EXPECT_TRUE(same_bytes(back.b[t], ad.b[t])) << ad.targets[t].name;
  }

  // Logits: lora(logits program) on base + adapters against the merged weights.
  const std::vector<nn::ParamSpec> specs = nn::lm_parameters(meta.model);
  std::vector<std::string> names;
  std::vector<Array> merged;
  for (size_t j = 0; j < specs.size(); ++j) {
    names.push_back(specs[j].name);
    merged.push_back(c.params[j].array);
  }
  lora::merge(ad, names, merged);
  const int64_t T = 8;
  Array tokens({DType::i32, {1, T}});
  for (int64_t i = 0; i < T; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % meta.model.vocab);
  host::Interpreter adapted(lora::lora(nn::lm_logits_program(meta.model, T), ad.targets, ad.options));
  host::Interpreter plain(nn::lm_logits_program(meta.model, T));
  std::vector<const Array*> ins;
  for (size_t j = 0; j < specs.size(); ++j) ins.push_back(&c.params[j].array);
  ins.push_back(&tokens);
  for (size_t j = specs.size(); j < c.params.size(); ++j) ins.push_back(&c.params[j].array);
  std::vector<Array> out_a, out_m;
  adapted.run(ins, out_a);
  std::vector<const Array*> mins;
  for (const Array& p : merged) mins.push_back(&p);
  mins.push_back(&tokens);
  plain.run(mins, out_m);
  double worst = 0, moved = 0;
  std::vector<Array> out_b;
  std::vector<const Array*> bins(ins.begin(), ins.begin() + static_cast<long>(specs.size()) + 1);
  plain.run(bins, out_b);   // the base alone: the adapters must matter
  for (int64_t i = 0; i < out_a[0].numel(); ++i) {
    worst = std::max(worst, std::fabs(out_a[0].get(i) - out_m[0].get(i)));
    moved = std::max(moved, std::fabs(out_a[0].get(i) - out_b[0].get(i)));
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(moved, 1e-3) << "the trained adapters change the logits";

  // The merged model as a plain checkpoint (every parameter frozen, no moments).
  Checkpoint mc;
  for (size_t j = 0; j < specs.size(); ++j) mc.params.push_back({names[j], merged[j]});
  mc.frozen = names;
  mc.step = c.step;
  mc.model_config = c.model_config;
  mc.extra = c.extra;
  mc.extra.erase(train::kLoraMetadataKey);
  save_checkpoint(d.file("merged.st"), mc);
  for (bool kv : {true, false}) {
    std::vector<std::vector<float>> la, lm;
    train::SampleOptions s;
    s.prompt = "the ";
    s.tokens = 12;
    s.temperature = 0;
    s.kv_cache = kv;
    s.window = 16;
    s.checkpoint = o.save_path;
    s.on_logits = [&](int64_t, const float* l) { la.emplace_back(l, l + meta.model.vocab); };
    const std::string ta = train::sample(s);
    s.checkpoint = d.file("merged.st");
    s.on_logits = [&](int64_t, const float* l) { lm.emplace_back(l, l + meta.model.vocab); };
    const std::string tm = train::sample(s);
    EXPECT_EQ(ta, tm) << "kv " << kv;
    ASSERT_EQ(la.size(), lm.size());
    double w = 0;
    for (size_t k = 0; k < la.size(); ++k)
      for (size_t i = 0; i < la[k].size(); ++i) w = std::max(w, static_cast<double>(std::fabs(la[k][i] - lm[k][i])));
    EXPECT_LE(w, 1e-4) << "kv " << kv;
  }
}

// --lora-from: an adapter on disk (PEFT's files, B nonzero) is where the run
// starts: its step-1 loss is the merged model's (a full fine-tune from the
// merged weights) within rounding, and its rank, alpha and targets are the
// checkpoint's.
TEST(LoraTrain, StartsFromAPeftAdapter) {
  TempDir d;
  train::Options o = small(nn::Arch::llama);
  const std::vector<Array> base = nn::init_parameters(o.model, 3);
  const std::vector<lora::Target> targets = lora::targets_for(o.model, {"q_proj", "down_proj"});
  lora::Options lo;
  lo.r = 2;
  lo.alpha = 6;
  lora::Adapter ad = lora::init_adapter(nn::lm_loss_program(o.model), targets, lo, 11);
  for (Array& b : ad.b)
    for (int64_t i = 0; i < b.numel(); ++i) b.set(i, 0.05 * std::sin(0.7 * static_cast<double>(i) + 1));
  ad.target_modules = {"q_proj", "down_proj"};
  lora::write_peft_dir(d.file("adapter"), o.model, ad);
  nn::write_hf_dir(d.file("base"), o.model, base, "char");
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(o.model)) names.push_back(p.name);
  std::vector<Array> merged = base;
  lora::merge(ad, names, merged);
  nn::write_hf_dir(d.file("merged"), o.model, merged, "char");

  o.steps = 1;
  train::Options full = o, from = o;
  full.init_from = d.file("merged");
  from.init_from = d.file("base");
  from.lora.from = d.file("adapter");
  from.save_path = d.file("from.st");
  const train::Result rf = train::train(full), rl = train::train(from);
  EXPECT_NEAR(rl.losses[0], rf.losses[0], 1e-5 * rf.losses[0]);
  train::Options plain = o;
  plain.init_from = d.file("base");
  EXPECT_GT(std::fabs(train::train(plain).losses[0] - rl.losses[0]), 1e-4) << "the adapter must matter";
  train::TrainMeta meta;
  train::load_model_checkpoint(from.save_path, &meta);
  ASSERT_TRUE(meta.lora);
  EXPECT_EQ(meta.lora->options.r, 2);
  EXPECT_EQ(meta.lora->options.alpha, 6);
  EXPECT_EQ(meta.lora->targets.size(), targets.size());
}

// The memory plan counts the base once (no moments) and the adapters with
// both moments.
TEST(LoraTrain, MemoryPlanHasMomentsForTheAdaptersOnly) {
  train::Options o = with_lora(small(nn::Arch::gpt2), 4, {"all-linear"});
  const std::vector<lora::Target> targets = lora::targets_for(o.model, {"all-linear"});
  lora::Options lo;
  lo.r = 4;
  const Program p = lora::lora(nn::lm_loss_program(o.model), targets, lo);
  size_t base = 0, adapters = 0;
  for (const nn::ParamSpec& s : nn::lm_parameters(o.model)) base += s.type.bytes();
  for (const std::string& n : lora::adapter_inputs(targets)) adapters += p.input_type(p.input_index(n)).bytes();
  ASSERT_GT(adapters, 0u);
  const train::HostMemory m = train::plan_host_memory(o, false, p, nullptr);
  EXPECT_EQ(m.params, base + adapters);
  EXPECT_EQ(m.state, base + 3 * adapters);
}

// --train/--freeze with LoRA, and a seed model, are refused by name.
TEST(LoraTrain, RefusesWhatItCannotDo) {
  train::Options o = with_lora(small(nn::Arch::gpt2), 4, {});
  o.steps = 1;
  o.freeze_patterns = {"wte"};
  EXPECT_THROW(train::train(o), Error);
  train::Options s = with_lora(small(nn::Arch::seed), 4, {});
  s.steps = 1;
  try {
    train::train(s);
    ADD_FAILURE() << "LoRA on the seed model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
  }
}

// The Llama variants (a tied head, Qwen2's q/k/v biases, head_dim): LoRA on
// every linear layer starts at the base's loss bit for bit and trains only
// the adapters.
TEST(LoraTrain, LlamaVariants) {
  for (int v = 0; v < 3; ++v) {
    train::Options full = small(nn::Arch::llama);
    if (v == 0) full.model.tied_head = true;
    if (v == 1) full.model.qkv_bias = true;
    if (v == 2) full.model.head_dim = 8;
    full.steps = 1;
    const train::Result a = train::train(full);
    TempDir d;
    train::Options lo = with_lora(full, 2, {"all-linear"});
    lo.steps = 3;
    lo.save_path = d.file("v.st");
    const train::Result b = train::train(lo);
    EXPECT_EQ(a.losses[0], b.losses[0]) << "variant " << v;
    const Checkpoint c = train::load_model_checkpoint(lo.save_path, nullptr);
    const std::vector<Array> init = nn::init_parameters(lo.model, lo.seed);
    for (size_t j = 0; j < init.size(); ++j) EXPECT_TRUE(same_bytes(c.params[j].array, init[j])) << v << " " << c.params[j].name;
  }
}

// The fused PJRT lane: the base stays as it was, the adapters train.
TEST(LoraTrain, PjrtFused) {
  std::string why;
  const std::string plugin = pjrt_plugin(&why);
  if (plugin.empty()) GTEST_SKIP() << why;
  TempDir d;
  train::Options o = with_lora(small(nn::Arch::llama), 4, {"all-linear"});
  o.lane = train::parse_lane("pjrt-fused");
  o.require_backend = true;
  o.backend.pjrt.plugin = plugin;
  o.steps = 3;
  o.save_path = d.file("p.st");
  train::Options h = o;
  h.lane = train::parse_lane("host-fused");
  h.save_path = d.file("h.st");
  const train::Result rp = train::train(o), rh = train::train(h);
  ASSERT_EQ(rp.losses.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(rp.losses[k], rh.losses[k], 1e-4 * rh.losses[k]) << "step " << k + 1;
  const Checkpoint c = train::load_model_checkpoint(o.save_path, nullptr);
  const std::vector<Array> init = nn::init_parameters(o.model, o.seed);
  for (size_t j = 0; j < init.size(); ++j) EXPECT_TRUE(same_bytes(c.params[j].array, init[j])) << c.params[j].name;
}

// The GPU lanes (run where there is one): the base stays, the losses are the
// host-fused lane's within TF32-free rounding.
TEST(LoraTrain, OnTheGpu) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no GPU: " << why;
  for (const char* lane : {"cuda", "cuda-fused"}) {
    TempDir d;
    train::Options o = with_lora(small(nn::Arch::llama), 4, {"all-linear"});
    o.lane = train::parse_lane(lane);
    o.require_backend = true;
    o.backend.cuda.tf32 = false;
    o.steps = 3;
    o.save_path = d.file("g.st");
    train::Options h = o;
    h.lane = train::parse_lane("host-fused");
    h.save_path = d.file("h.st");
    const train::Result rg = train::train(o), rh = train::train(h);
    ASSERT_EQ(rg.losses.size(), 3u) << lane;
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(rg.losses[k], rh.losses[k], 1e-4 * rh.losses[k]) << lane << " step " << k + 1;
    const Checkpoint c = train::load_model_checkpoint(o.save_path, nullptr);
    const std::vector<Array> init = nn::init_parameters(o.model, o.seed);
    for (size_t j = 0; j < init.size(); ++j) EXPECT_TRUE(same_bytes(c.params[j].array, init[j])) << lane << " " << c.params[j].name;
  }
}

// The CLI: train --init-from a transformers GPT-2 (with its byte-level BPE) with LoRA on every linear
// layer, then export-peft, sample and export-hf.
TEST(LoraTrain, Cli) {
  const std::string bin = capstep_binary();
  if (bin.empty() || !fs::exists(bin)) GTEST_SKIP() << "the capstep binary (target capstep_cli) is not built";
  const char* src = std::getenv("CAPSTEP_SOURCE_DIR");
  const std::string dir =
      (src ? std::string(src) : fs::path(__FILE__).parent_path().parent_path().string()) + "/tests/golden/hf/gpt2-bpe";
  TempDir d;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The adapters train, the base stays; line " + std::to_string(i) + ".\n";
  std::ofstream(d.file("text.txt")) << text;
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin);
    int status = 0;
    waitpid(spawn_process(args, d.file("out"), d.file("err")), &status, 0);
    Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(d.file("out"));
    r.err = slurp(d.file("err"));
    return r;
  };
  const std::string ck = d.file("ck.st");
  Outcome r = run({"train", "--init-from", dir, "--text", d.file("text.txt"), "--lora-rank", "4", "--lora-targets", "all-linear",
                   "--steps", "3", "--seq", "16", "--batch", "2", "--save", ck, "--no-progress"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("the adapters train ("), std::string::npos) << r.out << r.err;
  // --resume takes the checkpoint's LoRA options; other ones are refused.
  r = run({"train", "--resume", ck, "--steps", "4", "--save", d.file("ck4.st"), "--no-progress"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("LoRA r 4"), std::string::npos) << r.out;
  r = run({"train", "--resume", ck, "--steps", "4", "--lora-rank", "8", "--lora-targets", "all-linear", "--no-progress"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("resume with the checkpoint's LoRA options"), std::string::npos) << r.err;
  r = run({"export-peft", "--checkpoint", ck, "--out", d.file("peft")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(d.file("peft") + "/adapter_config.json"));
  EXPECT_TRUE(fs::exists(d.file("peft") + "/adapter_model.safetensors"));
  r = run({"sample", "--checkpoint", ck, "--prompt", "The", "--tokens", "8", "--temperature", "0"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string sampled = r.out;
  r = run({"export-hf", "--checkpoint", ck, "--out", d.file("hf")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // The exported merged model equals capstep lora-merge of the exported adapter on the base.
  r = run({"lora-merge", "--base", dir, "--adapter", d.file("peft"), "--out", d.file("merged")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const SafetensorsFile a = read_safetensors(d.file("hf") + "/model.safetensors");
  const SafetensorsFile b = read_safetensors(d.file("merged") + "/model.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_TRUE(same_bytes(a.tensors[i].array, b.tensors[i].array)) << a.tensors[i].name;
  EXPECT_GT(sampled.size(), 2u) << sampled;
  r = run({"train", "--init-from", dir, "--text", d.file("text.txt"), "--lora-rank", "4", "--lora-dropout", "0.1", "--steps", "1"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--lora-dropout"), std::string::npos) << r.err;
}
