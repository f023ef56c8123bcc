// LoRA in the program (lora.h) against PEFT: tests/golden/hf/lora/<case>/
// hold adapters PEFT 0.21 saved for the tiny models of tests/golden/hf/
// {llama,gpt2} (adapter_config.json, adapter_model.safetensors), with the
// adapted model's logits, loss and the gradient of every lora_A / lora_B on
// the base golden's batch, and the logits of PEFT's merged model
// (scripts/make-lora-goldens wrote them; no Python runs here).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capstep/autodiff.h"
#include "capstep/hf.h"
#include "backend/host/interpreter.h"
#include "backend/plan/device_plan.h"
#include "capstep/lora.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/safetensors.h"
#include "capstep/trace.h"
#include "gradcheck_util.h"
#include "process_util.h"
#include "test_util.h"

using namespace capstep;
using capstep::test::TempDir;

namespace {

std::string source_root() {
  const char* s = std::getenv("CAPSTEP_SOURCE_DIR");
  return s ? s : std::filesystem::path(__FILE__).parent_path().parent_path().string();
}
std::string model_dir(const std::string& arch) { return source_root() + "/tests/golden/hf/" + arch; }
std::string lora_dir(const std::string& which) { return source_root() + "/tests/golden/hf/lora/" + which; }
std::string base_of(const std::string& which) { return which.rfind("gpt2", 0) == 0 ? "gpt2" : "llama"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

double max_abs_diff(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) m = std::max(m, std::fabs(a.get(i) - b.get(i)));
  return m;
}

std::vector<std::string> param_names(const nn::LmConfig& c) {
  std::vector<std::string> n;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) n.push_back(p.name);
  return n;
}

// The golden batch's config and the model's logits for each sequence
// (lm_logits_program reads one), through `wrap` (the identity or lora).
Array logits_of(const nn::LmConfig& c, const std::vector<Array>& params, const Array& tokens,
                const std::function<Program(const Program&)>& wrap, const std::vector<Array>& extra) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  const Program p = wrap(nn::lm_logits_program(c, T));
  Array out({DType::f32, {B, T, c.vocab}});
  for (int64_t b = 0; b < B; ++b) {
    Array row({DType::i32, {1, T}});
    for (int64_t t = 0; t < T; ++t) row.set(t, tokens.get(b * T + t));
    std::vector<Array> in = params;
    in.push_back(row);
    for (const Array& e : extra) in.push_back(e);
    const Array l = host::run(p, in)[0];
    for (int64_t i = 0; i < T * c.vocab; ++i) out.set(b * T * c.vocab + i, l.get(i));
  }
  return out;
}

struct Case {
  nn::HfModel model;
  nn::LmConfig c;
  SafetensorsFile golden;
  lora::Adapter adapter;
};

Case load(const std::string& which) {
  Case k;
  k.model = nn::read_hf_dir(model_dir(base_of(which)));
  k.golden = read_safetensors(lora_dir(which) + "/golden.safetensors");
  k.c = k.model.config;
  k.c.batch = k.golden.find("tokens")->shape()[0];
  k.c.seq = k.golden.find("tokens")->shape()[1];
  k.adapter = lora::read_peft_dir(lora_dir(which), k.c);
  return k;
}

void check_against_peft(const std::string& which) {
  const Case k = load(which);
  const Array& tokens = *k.golden.find("tokens");
  const lora::Adapter& ad = k.adapter;
  const std::vector<std::string> wrt = lora::adapter_inputs(ad.targets);
  // Loss and the gradient of every A and B.
  std::vector<Array> in = k.model.params;
  in.push_back(tokens);
  in.push_back(*k.golden.find("targets"));
  for (const Array& a : ad.inputs()) in.push_back(a);
  const Program g = value_and_grad(lora::lora(nn::lm_loss_program(k.c), ad.targets, ad.options), wrt);
  const std::vector<Array> out = host::run(g, in);
  const double loss = out[0].get(0), want = k.golden.find("loss")->get(0);
  EXPECT_LT(std::fabs(loss - want) / std::fabs(want), 1e-6) << which << ": loss " << loss << ", PEFT's " << want;
  const std::vector<NamedArray> keys = lora::peft_tensors(k.c, ad);
  ASSERT_EQ(keys.size() + 1, out.size());
  double worst = 0;
  size_t golden_grads = 0;
  for (const NamedArray& t : k.golden.tensors) golden_grads += t.name.rfind("grad.", 0) == 0;
  EXPECT_EQ(golden_grads, keys.size()) << which << ": a gradient for every lora_A and lora_B";
  for (size_t i = 0; i < keys.size(); ++i) {
    const Array* w = k.golden.find("grad." + keys[i].name);
    ASSERT_NE(w, nullptr) << keys[i].name;
    const double d = max_abs_diff(out[i + 1], *w);
    EXPECT_LE(d, 1e-5) << which << ": gradient of " << keys[i].name;
    worst = std::max(worst, d);
  }
  std::printf("%s: loss %.9g, PEFT's %.9g; %zu gradients, largest difference %.3g\n", which.c_str(), loss, want,
              keys.size(), worst);

  // Logits with the adapter, and of the merged model.
  auto with_lora = [&](const Program& p) { return lora::lora(p, ad.targets, ad.options); };
  auto plain = [](const Program& p) { return p; };
  const Array logits = logits_of(k.c, k.model.params, tokens, with_lora, ad.inputs());
  const double dl = max_abs_diff(logits, *k.golden.find("logits"));
  EXPECT_LE(dl, 1e-5) << which << ": logits against PEFT's";
  std::vector<Array> merged = k.model.params;
  lora::merge(ad, param_names(k.c), merged);
  const Array mlogits = logits_of(k.c, merged, tokens, plain, {});
  const double dm = max_abs_diff(mlogits, logits), dp = max_abs_diff(mlogits, *k.golden.find("merged_logits"));
  EXPECT_LE(dm, 1e-5) << which << ": merged against unmerged logits";
  EXPECT_LE(dp, 1e-5) << which << ": merged logits against PEFT's merged model's";
  std::printf("%s: logits %.3g from PEFT's; merged: %.3g from unmerged, %.3g from PEFT's merged\n", which.c_str(), dl,
              dm, dp);
}

}  // namespace

TEST(Lora, LlamaAllLinearMatchesPeft) { check_against_peft("llama"); }
TEST(Lora, LlamaRsloraMatchesPeft) { check_against_peft("llama-rslora"); }
TEST(Lora, Gpt2AllLinearMatchesPeft) { check_against_peft("gpt2"); }

// With B = 0 (PEFT's initialisation) the adapted loss is the base model's, bit for bit.
TEST(Lora, ZeroBGivesTheBaseLossExactly) {
  for (const std::string arch : {"llama", "gpt2"}) {
    const nn::HfModel m = nn::read_hf_dir(model_dir(arch));
    const SafetensorsFile golden = read_safetensors(model_dir(arch) + "/golden.safetensors");
    nn::LmConfig c = m.config;
    c.batch = 2, c.seq = 16;
    const Program base = nn::lm_loss_program(c);
    const lora::Options o{.r = 4, .alpha = 8};
    const std::vector<lora::Target> ts = lora::targets_for(c, {"all-linear"});
    const lora::Adapter ad = lora::init_adapter(base, ts, o, 1);
    std::vector<Array> in = m.params;
    in.push_back(*golden.find("tokens"));
    in.push_back(*golden.find("targets"));
    const Array want = host::run(base, in)[0];
    for (const Array& a : ad.inputs()) in.push_back(a);
    const Array got = host::run(lora::lora(base, ts, o), in)[0];
    EXPECT_TRUE(got.bit_equal(want)) << arch << ": " << got.get(0) << " vs " << want.get(0);
    // And a nonzero B changes it (the test can fail).
    lora::Adapter moved = ad;
    moved.b[0].set(0, 0.5);
    std::vector<Array> in2(in.begin(), in.begin() + static_cast<long>(m.params.size() + 2));
    for (const Array& a : moved.inputs()) in2.push_back(a);
    EXPECT_NE(host::run(lora::lora(base, ts, o), in2)[0].get(0), want.get(0)) << arch;
  }
}

TEST(Lora, TargetsInPeftTerms) {
  const nn::LmConfig llama = nn::read_hf_dir(model_dir("llama")).config;
  const nn::LmConfig gpt2 = nn::read_hf_dir(model_dir("gpt2")).config;
  std::vector<lora::Target> t = lora::targets_for(llama, {"q_proj", "v_proj"});
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "blocks.0.attn.wq");
  EXPECT_EQ(t[1].name, "blocks.0.attn.wv");
  EXPECT_EQ(t[3].weights, std::vector<std::string>{"blocks.1.attn.wv"});
  EXPECT_EQ(lora::hf_module(llama, t[1]), "model.layers.0.self_attn.v_proj");
  EXPECT_EQ(lora::targets_for(llama, {"all-linear"}).size(), 14u);   // 7 per layer, not lm_head
  EXPECT_EQ(lora::targets_for(llama, {"self_attn.o_proj"}).size(), 2u);
  EXPECT_EQ(lora::targets_for(llama, {"lm_head"}).at(0).name, "head");
  t = lora::targets_for(gpt2, {"all-linear"});
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0].name, "blocks.0.attn.wqkv");
  EXPECT_EQ(t[0].weights, (std::vector<std::string>{"blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv"}));
  EXPECT_EQ(lora::hf_module(gpt2, t[0]), "transformer.h.0.attn.c_attn");
  EXPECT_EQ(lora::hf_module(gpt2, t[1]), "transformer.h.0.attn.c_proj");
  EXPECT_EQ(lora::targets_for(gpt2, {"c_proj"}).size(), 4u);   // attn.c_proj and mlp.c_proj
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([&] { lora::targets_for(llama, {"qkv_proj"}); }).find("'qkv_proj'"), std::string::npos);
  EXPECT_NE(error_of([&] { lora::targets_for(llama, {"embed_tokens"}); }).find("embedding"), std::string::npos);
  EXPECT_NE(error_of([&] { lora::targets_for(gpt2, {"wte"}); }).find("embedding"), std::string::npos);
  EXPECT_THROW(lora::targets_for(nn::LmConfig{}, {"q_proj"}), Error);   // seed: no transformers names
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Lora, TransformRefusesWhatItCannotAdapt) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {3, 4}});
  Tensor w = tr.input("w", {DType::f32, {4, 5}});
  Tensor t = tr.input("t", {DType::f32, {5, 4}});
  Tensor bias = tr.input("bias", {DType::f32, {5}});
  Tensor h = tr.input("h", {DType::bf16, {4, 4}});
  Tensor y = matmul(x, w) + bias;
  Tensor z = matmul(y, t) + matmul(x, convert(h, DType::f32));
  Tensor back = matmul(y, transpose(w, {1, 0}));   // w read as w^T: not x W
  const Program p = tr.finish({{"z", sum(z)}, {"back", sum(back)}});
  const lora::Options o{.r = 2, .alpha = 4};
  auto refuse = [&](const std::vector<lora::Target>& ts, const std::string& says) {
    const std::string e = error_of([&] { lora::lora(p, ts, o); });
    EXPECT_NE(e.find(says), std::string::npos) << e;
  };
  refuse({{"w", {"w"}}}, "target weight 'w' is used by equation");
  refuse({{"bias", {"bias"}}}, "'bias' is f32[5]");
  refuse({{"h", {"h"}}}, "'h' is bf16[4,4]");
  refuse({{"nope", {"nope"}}}, "'nope' is not an input");
  refuse({{"t", {"t"}}, {"t", {"x"}}}, "target 't' is given twice");
  refuse({{"x", {"x"}}, {"t2", {"t"}}}, "target weight 'x' is used by equation");   // x is the left operand
  refuse({{"tt", {"t", "t"}}}, "weight 't' is in two targets");
  refuse({{"tw", {"t", "w"}}}, "different input sizes");
  EXPECT_NE(error_of([&] { lora::lora(p, {{"t", {"t"}}}, {.r = 0}); }).find("rank r"), std::string::npos);
  // t alone is fine: y t gets its pair.
  const Program q = lora::lora(p, {{"t", {"t"}}}, o);
  EXPECT_EQ(q.inputs.size(), p.inputs.size() + 2);
  EXPECT_EQ(q.inputs[p.inputs.size()].name, "lora.A.t");
  EXPECT_EQ(q.input_type(static_cast<int>(p.inputs.size())).str(), "f32[2,5]");
  EXPECT_EQ(q.input_type(static_cast<int>(p.inputs.size()) + 1).str(), "f32[4,2]");
  EXPECT_EQ(q.outputs.size(), p.outputs.size());
  EXPECT_EQ(q.outputs[1].name, "back");
}

// The new equations' gradients (A, B, the base weight and x) against f64
// finite differences, for a 3-D x and a pair over two weights (B cut in rows).
TEST(Lora, GradientsMatchFiniteDifferences) {
  std::mt19937 rng(38);
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {2, 3, 4}});
  Tensor w1 = tr.input("w1", {DType::f64, {4, 5}});
  Tensor w2 = tr.input("w2", {DType::f64, {4, 3}});
  Tensor w3 = tr.input("w3", {DType::f64, {5, 4}});
  Tensor y1 = matmul(x, w1);
  Tensor loss = gradcheck::weighted_sum(tr, matmul(tanh(y1), w3), rng) + gradcheck::weighted_sum(tr, y1 * y1, rng) +
                gradcheck::weighted_sum(tr, matmul(x, w2), rng);
  const Program p = tr.finish({{"loss", loss}});
  const std::vector<lora::Target> ts = {{"w12", {"w1", "w2"}}, {"w3", {"w3"}}};
  const Program q = lora::lora(p, ts, {.r = 2, .alpha = 3});
  std::vector<Array> in;
  std::vector<std::string> wrt;
  for (const NamedValue& v : q.inputs) {
    in.push_back(gradcheck::random_array(rng, q.type(v.value), -0.8, 0.8));
    wrt.push_back(v.name);
  }
  const gradcheck::Report r = gradcheck::check(q, in, wrt);
  EXPECT_LT(r.max_rel_err, 1e-7) << r.worst;
  EXPECT_EQ(r.checked, 24 + 20 + 12 + 20 + 8 + 16 + 10 + 8);
}

// The values: y_j = x W_j + scale * x A^T B_j^T, B_j weight j's rows of B, by hand in double.
TEST(Lora, ValueIsBasePlusScaledLowRank) {
  std::mt19937 rng(5);
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {2, 3, 4}});
  Tensor w1 = tr.input("w1", {DType::f64, {4, 5}});
  Tensor w2 = tr.input("w2", {DType::f64, {4, 3}});
  const Program p = tr.finish({{"y1", matmul(x, w1)}, {"y2", matmul(x, w2)}});
  const lora::Options o{.r = 2, .alpha = 3, .rslora = true};
  const Program q = lora::lora(p, {{"w12", {"w1", "w2"}}}, o);
  std::vector<Array> in;
  for (const NamedValue& v : q.inputs) in.push_back(gradcheck::random_array(rng, q.type(v.value)));
  const std::vector<Array> out = host::run(q, in);
  const Array &X = in[0], &A = in[3], &B = in[4];
  const double s = 3 / std::sqrt(2.0);
  EXPECT_DOUBLE_EQ(lora::scale(o), s);
  int64_t row0 = 0;
  double worst = 0;
  for (int j = 0; j < 2; ++j) {
    const Array& W = in[static_cast<size_t>(1 + j)];
    const int64_t n = W.shape()[1];
    for (int64_t m = 0; m < 6; ++m)
      for (int64_t k = 0; k < n; ++k) {
        double base = 0, low = 0;
        for (int64_t i = 0; i < 4; ++i) base += X.get(m * 4 + i) * W.get(i * n + k);
        for (int64_t r = 0; r < 2; ++r) {
          double xa = 0;
          for (int64_t i = 0; i < 4; ++i) xa += X.get(m * 4 + i) * A.get(r * 4 + i);
          low += xa * B.get((row0 + k) * 2 + r);
        }
        worst = std::max(worst, std::fabs(out[static_cast<size_t>(j)].get(m * n + k) - (base + s * low)));
      }
    row0 += n;
  }
  EXPECT_LT(worst, 1e-14);
}

TEST(Lora, InitIsPeftsKaimingUniformAndZeros) {
  const nn::LmConfig c = nn::read_hf_dir(model_dir("llama")).config;
  const Program p = nn::lm_loss_program(c);
  const std::vector<lora::Target> ts = lora::targets_for(c, {"q_proj", "down_proj"});
  const lora::Options o{.r = 4, .alpha = 8};
  const lora::Adapter a = lora::init_adapter(p, ts, o, 7), again = lora::init_adapter(p, ts, o, 7);
  const lora::Adapter other = lora::init_adapter(p, ts, o, 8);
  ASSERT_EQ(a.a.size(), ts.size());
  for (size_t t = 0; t < ts.size(); ++t) {
    const int64_t in = a.a[t].shape()[1];
    EXPECT_EQ(a.a[t].shape(), (Shape{4, ts[t].name == "blocks.0.mlp.w_down" || ts[t].name == "blocks.1.mlp.w_down" ? c.d_ff : c.d_model}));
    const double bound = 1 / std::sqrt(static_cast<double>(in));
    double lo = 1, hi = -1, sq = 0;
    for (int64_t i = 0; i < a.a[t].numel(); ++i) {
      lo = std::min(lo, a.a[t].get(i)), hi = std::max(hi, a.a[t].get(i));
      sq += a.a[t].get(i) * a.a[t].get(i);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -0.8 * bound);   // spread over the whole interval
    EXPECT_GT(hi, 0.8 * bound);
    EXPECT_NEAR(sq / static_cast<double>(a.a[t].numel()), bound * bound / 3, 0.25 * bound * bound / 3);
    for (int64_t i = 0; i < a.b[t].numel(); ++i) EXPECT_EQ(a.b[t].get(i), 0.0);
    EXPECT_TRUE(a.a[t].bit_equal(again.a[t]));
    EXPECT_FALSE(a.a[t].bit_equal(other.a[t]));
  }
}

// capstep writes PEFT's keys and bytes for PEFT's values, and the config
// fields PEFT wrote with the same values; what it writes reads back.
TEST(Lora, WritesWhatPeftWrites) {
  for (const std::string which : {"llama", "llama-rslora", "gpt2"}) {
    const Case k = load(which);
    const SafetensorsFile theirs = read_safetensors(lora_dir(which) + "/adapter_model.safetensors");
    const std::vector<NamedArray> ours = lora::peft_tensors(k.c, k.adapter);
    ASSERT_EQ(ours.size(), theirs.tensors.size()) << which;
    for (const NamedArray& t : ours) {
      const Array* o = theirs.find(t.name);
      ASSERT_NE(o, nullptr) << which << ": capstep writes " << t.name << ", which PEFT's file does not have";
      EXPECT_TRUE(t.array.bit_equal(*o)) << which << ": " << t.name;
    }
    const nlohmann::json want = nlohmann::json::parse(slurp(lora_dir(which) + "/adapter_config.json"));
    lora::Adapter mine = k.adapter;
    mine.base_model = want["base_model_name_or_path"].get<std::string>();
    const nlohmann::json got = nlohmann::json::parse(lora::peft_config_json(k.c, mine));
    for (const auto& [key, v] : want.items()) {
      if (key == "peft_version") continue;   // PEFT's own version: capstep writes none
      ASSERT_TRUE(got.contains(key)) << which << ": capstep's adapter_config.json lacks " << key;
      if (key == "target_modules") {
        EXPECT_EQ(got[key].get<std::set<std::string>>(), v.get<std::set<std::string>>()) << which;
      } else {
        EXPECT_EQ(got[key].dump(), v.dump()) << which << ": " << key;
      }
    }
    EXPECT_EQ(got.size() + 1, want.size()) << which << ": no field PEFT does not write";
    TempDir tmp;
    lora::write_peft_dir(tmp.file("a"), k.c, mine);
    const lora::Adapter back = lora::read_peft_dir(tmp.file("a"), k.c);
    EXPECT_EQ(back.options.r, mine.options.r);
    EXPECT_EQ(back.options.alpha, mine.options.alpha);
    EXPECT_EQ(back.options.rslora, mine.options.rslora);
    EXPECT_EQ(back.base_model, mine.base_model);
    ASSERT_EQ(back.targets.size(), mine.targets.size());
    for (size_t i = 0; i < back.targets.size(); ++i) {
      EXPECT_EQ(back.targets[i].weights, mine.targets[i].weights);
      EXPECT_TRUE(back.a[i].bit_equal(mine.a[i]));
      EXPECT_TRUE(back.b[i].bit_equal(mine.b[i]));
    }
  }
}

// Adapters PEFT wrote with the adapter's name in the keys read the same; the
// variants capstep does not compute are refused by field.
TEST(Lora, ReadsPeftVariantsAndRefusesOthers) {
  const Case k = load("llama-rslora");
  TempDir tmp;
  const std::string dir = tmp.file("named");
  std::filesystem::create_directories(dir);
  const SafetensorsFile theirs = read_safetensors(lora_dir("llama-rslora") + "/adapter_model.safetensors");
  std::vector<NamedArray> named;
  for (const NamedArray& t : theirs.tensors) {
    std::string n = t.name;
    n.replace(n.rfind(".weight"), 7, ".default.weight");
    named.push_back({n, t.array});
  }
  write_safetensors(dir + "/adapter_model.safetensors", named);
  const std::string config = slurp(lora_dir("llama-rslora") + "/adapter_config.json");
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(config);
    j[key] = v;
    std::ofstream(dir + "/adapter_config.json") << j.dump();
  };
  with("r", 2);
  const lora::Adapter a = lora::read_peft_dir(dir, k.c);
  ASSERT_EQ(a.targets.size(), k.adapter.targets.size());
  for (size_t i = 0; i < a.targets.size(); ++i) EXPECT_TRUE(a.b[i].bit_equal(k.adapter.b[i]));
  EXPECT_TRUE(a.options.rslora);
  with("target_modules", ".*\\.(q|v)_proj");   // PEFT's regular expression: the whole path
  EXPECT_NE(error_of([&] { lora::read_peft_dir(dir, k.c); }).find("belongs to no module"), std::string::npos);
  with("target_modules", {"q_proj", "v_proj", "down_proj"});
  auto refused = [&](const std::string& key, const nlohmann::json& v, const std::string& says) {
    with(key, v);
    const std::string e = error_of([&] { lora::read_peft_dir(dir, k.c); });
    EXPECT_NE(e.find(says), std::string::npos) << key << ": " << e;
  };
  refused("use_dora", true, "field \"use_dora\"");
  with("use_dora", false);
  refused("rank_pattern", {{"q_proj", 8}}, "field \"rank_pattern\"");
  with("rank_pattern", nlohmann::json::object());
  refused("bias", "all", "field \"bias\"");
  with("bias", "none");
  refused("peft_type", "IA3", "field \"peft_type\"");
  with("peft_type", "LORA");
  refused("modules_to_save", {"lm_head"}, "field \"modules_to_save\"");
  with("modules_to_save", nullptr);
  refused("r", 3, "is f32[2,32], not f32[3,32]");
  with("r", 2);
  refused("target_modules", {"q_proj", "embed_tokens"}, "embedding");
  EXPECT_NE(error_of([&] { lora::read_peft_dir(tmp.file("none"), k.c); }).find("no such directory"), std::string::npos);
  // A config of only the fields capstep needs (an older PEFT's) reads the same.
  std::ofstream(dir + "/adapter_config.json")
      << R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "use_rslora": true, "target_modules": ["q_proj", "v_proj", "down_proj"]})";
  const lora::Adapter minimal = lora::read_peft_dir(dir, k.c);
  EXPECT_EQ(minimal.targets.size(), k.adapter.targets.size());
  EXPECT_DOUBLE_EQ(lora::scale(minimal.options), 4 / std::sqrt(2.0));
}

// base_bf16: the target weights are bf16 inputs; loss and gradients are
// those of the f32 program with the weights rounded to bf16, bit for bit.
TEST(Lora, Bf16BaseComputesAsRoundedWeights) {
  const Case k = load("llama");
  const lora::Adapter& ad = k.adapter;
  lora::Options half = ad.options;
  half.base_bf16 = true;
  const Program base = nn::lm_loss_program(k.c);
  const std::vector<std::string> wrt = lora::adapter_inputs(ad.targets);
  const Program p16 = value_and_grad(lora::lora(base, ad.targets, half), wrt);
  const Program p32 = value_and_grad(lora::lora(base, ad.targets, ad.options), wrt);
  std::set<std::string> target_weights;
  for (const lora::Target& t : ad.targets) target_weights.insert(t.weights.begin(), t.weights.end());
  std::vector<Array> in16, in32;
  int bf16_inputs = 0;
  for (size_t i = 0; i < k.model.params.size(); ++i) {
    const Array& w = k.model.params[i];
    const bool t = target_weights.count(p16.inputs[i].name) > 0;
    EXPECT_EQ(p16.input_type(static_cast<int>(i)).dtype, t ? DType::bf16 : DType::f32) << p16.inputs[i].name;
    bf16_inputs += t;
    in16.push_back(t ? w.converted(DType::bf16) : w);
    in32.push_back(t ? w.converted(DType::bf16).converted(DType::f32) : w);
  }
  EXPECT_EQ(bf16_inputs, 14);
  for (const Array& a : {*k.golden.find("tokens"), *k.golden.find("targets")}) in16.push_back(a), in32.push_back(a);
  for (const Array& a : ad.inputs()) in16.push_back(a), in32.push_back(a);
  const std::vector<Array> o16 = host::run(p16, in16), o32 = host::run(p32, in32);
  ASSERT_EQ(o16.size(), o32.size());
  for (size_t i = 0; i < o16.size(); ++i) EXPECT_TRUE(o16[i].bit_equal(o32[i])) << p16.outputs[i].name;
  // Rounding the base to bf16 moves the loss (the comparison above is not vacuous).
  EXPECT_NE(o16[0].get(0), k.golden.find("loss")->get(0));
  // convert_at_each_use: the same outputs bit for bit, each f32 copy of a
  // bf16 weight read by one equation only (the forward's and the backward's
  // dots each convert their own), made just before it (so it does not live
  // from the forward through the backward).
  const Program each = lora::convert_at_each_use(p16);
  const std::vector<Array> oe = host::run(each, in16);
  ASSERT_EQ(oe.size(), o16.size());
  for (size_t i = 0; i < oe.size(); ++i) EXPECT_TRUE(oe[i].bit_equal(o16[i])) << each.outputs[i].name;
  std::map<int, size_t> made_at;
  auto converts = [&](const Program& p) {
    std::map<int, int> readers;
    made_at.clear();
    for (size_t i = 0; i < p.eqns.size(); ++i)
      if (p.eqns[i].op == Op::convert && p.type(p.eqns[i].inputs[0]).dtype == DType::bf16) {
        readers[p.eqns[i].out] = 0;
        made_at[p.eqns[i].out] = i;
      }
    for (size_t i = 0; i < p.eqns.size(); ++i)
      for (int v : p.eqns[i].inputs)
        if (readers.count(v)) {
          ++readers[v];
          if (&p == &each) EXPECT_LE(i - made_at[v], 2u) << "value " << v << " read far from its convert";
        }
    return readers;
  };
  EXPECT_EQ(converts(p16).size(), 14u);
  const std::map<int, int> r = converts(each);
  EXPECT_GT(r.size(), 14u);   // forward and backward readers
  for (const auto& [v, n] : r) EXPECT_EQ(n, 1) << "value " << v;
  // And in the plans that run it: the f32 copies made at their readers take
  // no more intermediate memory than the f32 base's step, on the host (the
  // fusion planner runs a group that reads only the inputs just before its
  // readers, not in the first wave; held from the first wave they made the
  // arena 20% larger) within 1% (the f32 step writes a few more of its
  // groups' results over buffers they read last) and in the device plan; the
  // base's inputs take half the bytes.
  const host::MemoryPlan h16 = host::memory_needed(each), h32 = host::memory_needed(p32);
  EXPECT_LE(static_cast<double>(h16.arena), 1.01 * static_cast<double>(h32.arena));
  EXPECT_LT(h16.inputs, h32.inputs);
  EXPECT_LE(plan::plan_memory(each).arena_bytes, plan::plan_memory(p32).arena_bytes);
  lora::Options bad = half;
  EXPECT_NE(error_of([&] { lora::lora(nn::lm_loss_program(k.c, DType::f64), lora::targets_for(k.c, {"q_proj"}), bad); })
                .find("base_bf16"),
            std::string::npos);
}

// The path a training loop takes (what `capstep train` would wire): AdamW
// over A and B only, inside the program, on the LoRA loss; the base weights
// are inputs the step never writes. The trained adapter goes out as PEFT's
// files and comes back with the same logits.
TEST(Lora, TrainsTheAdapterOnlyAndExportsIt) {
  const Case k = load("llama");
  const std::vector<lora::Target> ts = lora::targets_for(k.c, {"q_proj", "v_proj"});
  const lora::Options o{.r = 4, .alpha = 8};
  const Program loss = nn::lm_loss_program(k.c);
  lora::Adapter ad = lora::init_adapter(loss, ts, o, 1);
  ad.target_modules = {"q_proj", "v_proj"};
  const std::vector<std::string> wrt = lora::adapter_inputs(ts);
  const optim::AdamW adamw{.lr = 2e-2, .weight_decay = 0};
  const Program step = optim::with_adamw(value_and_grad(lora::lora(loss, ts, o), wrt), wrt, adamw);
  std::map<std::string, Array> state;
  const std::vector<std::string> names = param_names(k.c);
  for (size_t i = 0; i < names.size(); ++i) state[names[i]] = k.model.params[i];
  state["tokens"] = *k.golden.find("tokens");
  state["targets"] = *k.golden.find("targets");
  const std::vector<Array> init = ad.inputs();
  for (size_t i = 0; i < wrt.size(); ++i) {
    state[wrt[i]] = init[i];
    state[optim::moment1_name(wrt[i])] = Array(init[i].type());
    state[optim::moment2_name(wrt[i])] = Array(init[i].type());
  }
  host::Interpreter interp(step);
  double first = 0, last = 0;
  for (int64_t t = 1; t <= 15; ++t) {
    const optim::AdamWScalars sc = optim::adamw_scalars(adamw, t);
    const float scalars[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
    for (int i = 0; i < 4; ++i) state[optim::kScalarNames[i]] = Array::scalar(scalars[i]);
    std::vector<Array> in;
    for (const NamedValue& v : step.inputs) in.push_back(state.at(v.name));
    const std::vector<Array> out = interp.run(in);
    for (size_t i = 0; i < out.size(); ++i) {
      const std::string& n = step.outputs[i].name;
      if (n == "loss") (t == 1 ? first : last) = out[i].get(0);
      else state[n.substr(0, n.size() - 4)] = out[i];   // "<input>.new"
    }
  }
  std::printf("LoRA training on the golden batch: loss %.6f -> %.6f in 15 steps\n", first, last);
  EXPECT_LT(last, first - 0.05);
  for (const Alias& a : step.aliases)
    EXPECT_EQ(std::count(names.begin(), names.end(), step.inputs[static_cast<size_t>(a.input)].name), 0)
        << "the step updates base weight " << step.inputs[static_cast<size_t>(a.input)].name;
  for (size_t i = 0; i < ts.size(); ++i) {
    ad.a[i] = state.at(lora::a_name(ts[i].name));
    ad.b[i] = state.at(lora::b_name(ts[i].name));
  }
  TempDir tmp;
  lora::write_peft_dir(tmp.file("adapter"), k.c, ad);
  const lora::Adapter back = lora::read_peft_dir(tmp.file("adapter"), k.c);
  auto with = [&](const lora::Adapter& x) {
    return logits_of(k.c, k.model.params, *k.golden.find("tokens"),
                     [&](const Program& p) { return lora::lora(p, x.targets, x.options); }, x.inputs());
  };
  const Array trained = with(ad);
  EXPECT_TRUE(with(back).bit_equal(trained));
  std::vector<Array> merged = k.model.params;
  lora::merge(back, names, merged);
  EXPECT_LE(max_abs_diff(logits_of(k.c, merged, *k.golden.find("tokens"), [](const Program& p) { return p; }, {}), trained),
            1e-5);
}

// `capstep lora-merge`: the merged directory holds lora::merge's weights; an
// adapter of another model is refused, naming the module.
TEST(Lora, LoraMergeCommand) {
  const std::string bin = capstep::test::capstep_binary();
  if (bin.empty() || !std::filesystem::exists(bin)) GTEST_SKIP() << "no capstep binary at '" << bin << "'";
  TempDir d;
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> all = {bin};
    all.insert(all.end(), args.begin(), args.end());
    const pid_t pid = capstep::test::spawn_process(all, d.file("out.txt"), d.file("err.txt"));
    int status = 0;
    waitpid(pid, &status, 0);
    capstep::test::Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(d.file("out.txt"));
    r.err = slurp(d.file("err.txt"));
    return r;
  };
  capstep::test::Outcome r =
      run({"lora-merge", "--base", model_dir("llama"), "--adapter", lora_dir("llama"), "--out", d.file("merged")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("14 LoRA pairs, r 4, alpha 8, scale 2"), std::string::npos) << r.out;
  const Case k = load("llama");
  std::vector<Array> want = k.model.params;
  lora::merge(k.adapter, param_names(k.c), want);
  const nn::HfModel got = nn::read_hf_dir(d.file("merged"));
  ASSERT_EQ(got.params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got.params[i].bit_equal(want[i])) << i;
  EXPECT_FALSE(got.params[2].bit_equal(k.model.params[2]));   // blocks.0.attn.wq moved
  r = run({"lora-merge", "--base", model_dir("llama"), "--adapter", lora_dir("gpt2"), "--out", d.file("bad")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("adapter_config.json: LoRA target_modules entry 'transformer.h."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("names no linear layer of this llama model"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(d.file("bad")));
}
