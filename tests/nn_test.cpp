// The models of nn.h: the seed's exact parameters, its start, and its gradient
// against float64 finite differences; GPT-2 and Llama as configurations of the
// same builder: their parameters, their refusals, their gradients. (Their
// numbers against transformers: hf_test.cpp.)
#include <cmath>
#include <map>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capstep/autodiff.h"
#include "capstep/data.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/stablehlo.h"
#include "capstep/trace.h"

using namespace capstep;

TEST(CausalLm, HasExactlyTheSeedsParameters) {
  nn::LmConfig c;
  EXPECT_EQ(nn::count_parameters(c), 311936);
  std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  std::vector<std::pair<std::string, Shape>> want = {{"tok_emb", {64, 128}}, {"pos_emb", {256, 128}}};
  for (int l = 0; l < 2; ++l) {
    std::string b = "blocks." + std::to_string(l) + ".";
    want.push_back({b + "attn_norm", {128}});
    for (const char* w : {"wq", "wk", "wv", "wo"}) want.push_back({b + "attn." + w, {128, 128}});
    want.push_back({b + "mlp_norm", {128}});
    want.push_back({b + "mlp.w1", {128, 256}});
    want.push_back({b + "mlp.w2", {256, 128}});
  }
  want.push_back({"final_norm", {128}});
  want.push_back({"head", {128, 64}});
  ASSERT_EQ(ps.size(), want.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps[i].name, want[i].first);
    EXPECT_EQ(ps[i].type, (Type{DType::f32, want[i].second})) << ps[i].name;
  }
  EXPECT_EQ(c.describe(), "A 2-layer causal LM, dModel 128, 311936 parameters; batch 4 \u00d7 16 tokens.");
}

TEST(CausalLm, RefusesInvalidConfigurations) {
  nn::LmConfig c;
  c.n_heads = 3;
  EXPECT_THROW(c.validate(), Error);
  try {
    c.validate();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("d_model 128 is not a multiple of heads 3"));
  }
  nn::LmConfig d;
  d.seq = 300;
  EXPECT_THROW(d.validate(), Error);
  EXPECT_EQ(nn::LmConfig::from_json(nn::LmConfig{}.to_json()).to_json(), nn::LmConfig{}.to_json());
  // An integer dtype: init_parameters gave all-zero matrices without a word.
  for (DType bad : {DType::i32, DType::i1}) {
    try {
      nn::init_parameters(nn::LmConfig{}, 1, bad);
      ADD_FAILURE() << "no error for " << dtype_name(bad) << " parameters";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string("f32 or f64, not ") + dtype_name(bad)));
    }
    EXPECT_THROW(nn::lm_loss_program(nn::LmConfig{}, bad), Error);
  }
}

TEST(CausalLm, InitialisationIsDeterministicAndScaled) {
  nn::LmConfig c;
  auto a = nn::init_parameters(c, 7), b = nn::init_parameters(c, 7), other = nn::init_parameters(c, 8);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bit_equal(b[i]));
  EXPECT_FALSE(a[0].bit_equal(other[0]));
  // Matrices ~ N(0, 0.02): check the sample standard deviation of the 32768 positional entries.
  const Array& pos = a[1];
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < pos.numel(); ++i) {
    s += pos.get(i);
    s2 += pos.get(i) * pos.get(i);
  }
  double mean = s / pos.numel(), sd = std::sqrt(s2 / pos.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.0005);
  for (int64_t i = 0; i < a[2].numel(); ++i) EXPECT_EQ(a[2].get(i), 1.0);  // blocks.0.attn_norm
}

TEST(CausalLm, InitialLossIsNearLn64) {
  nn::LmConfig c;
  data::BatchStream bs(data::encode(data::builtin_corpus()), 1, c.batch, c.seq);
  data::Batch b = bs.next();
  std::vector<Array> in = nn::init_parameters(c, 1);
  in.push_back(b.inputs);
  in.push_back(b.targets);
  std::vector<Array> out = host::run(nn::lm_loss_program(c), in);
  EXPECT_NEAR(out[0].get(0), std::log(64.0), 0.15);
}

namespace {

// The full model in float64: the interpreter's gradient against central finite
// differences on `samples` sampled parameter coordinates.
void check_gradient_against_finite_differences(const nn::LmConfig& c, int samples) {
  const Program loss = nn::lm_loss_program(c, DType::f64);
  std::vector<std::string> names;
  for (const auto& p : nn::lm_parameters(c, DType::f64)) names.push_back(p.name);
  host::Interpreter grad(value_and_grad(loss, names));
  host::Interpreter fwd(loss);

  data::BatchStream bs(data::encode(data::builtin_corpus()), 3, c.batch, c.seq);
  data::Batch b = bs.next();
  std::vector<Array> in = nn::init_parameters(c, 3, DType::f64);
  // Larger than the default init so that every coordinate matters; biases
  // (zeros) get values of their own.
  uint64_t st = 12345;
  for (auto& a : in)
    for (int64_t i = 0; i < a.numel(); ++i)
      a.set(i, a.get(i) == 0.0 ? 0.1 * (static_cast<double>(data::splitmix64(st) % 1000) / 500.0 - 1.0) : a.get(i) * 5.0);
  in.push_back(b.inputs);
  in.push_back(b.targets);
  std::vector<Array> g = grad.run(in);

  for (int k = 0; k < samples; ++k) {
    size_t pi = data::splitmix64(st) % names.size();
    int64_t ci = static_cast<int64_t>(data::splitmix64(st) % static_cast<uint64_t>(in[pi].numel()));
    if (names[pi] == "pos_emb") ci %= c.seq * c.d_model;  // rows of pos_emb the batch uses
    // Four-point central stencil: truncation error O(h^4), so the 1e-6 bound
    // measures the gradient, not the stencil (two points at h = 1e-5 leave
    // errors near 4e-6 on curved coordinates).
    const double h = 1e-4, x0 = in[pi].get(ci);
    auto f = [&](double x) {
      in[pi].set(ci, x);
      return fwd.run(in)[0].get(0);
    };
    double fd = (8 * (f(x0 + h) - f(x0 - h)) - (f(x0 + 2 * h) - f(x0 - 2 * h))) / (12 * h);
    in[pi].set(ci, x0);
    double an = g[1 + pi].get(ci);
    // A key bias adds one number to every score of a softmax row: its
    // gradient is zero, and the stencil measures rounding alone.
    // (Not so under Llama's rotary embedding, which turns the bias by the position.)
    if (c.arch == nn::Arch::gpt2 && names[pi].size() > 3 && names[pi].compare(names[pi].size() - 3, 3, ".bk") == 0) {
      EXPECT_LT(std::fabs(an), 1e-12) << names[pi] << "[" << ci << "]";
      continue;
    }
    // Under the rotary embedding a key bias reaches the scores only through
    // the rotation's change from position to position: its gradient is small
    // (1e-6 here), and the stencil's rounding (1e-11) is the floor.
    const bool llama_bk =
        c.arch == nn::Arch::llama && names[pi].size() > 3 && names[pi].compare(names[pi].size() - 3, 3, ".bk") == 0;
    double rel = std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), llama_bk ? 1e-5 : 1e-8});
    EXPECT_LT(rel, 1e-6) << nn::arch_name(c.arch) << " " << names[pi] << "[" << ci << "]: analytic " << an
                         << " finite-diff " << fd;
  }
}

// A small model of each architecture, for the checks that run every program.
nn::LmConfig small(nn::Arch a) {
  nn::LmConfig c;
  c.arch = a;
  c.d_model = 32, c.n_heads = 4, c.d_ff = 48, c.context = 16, c.batch = 2, c.seq = 8;
  if (a == nn::Arch::llama) c.n_kv_heads = 2;
  return c;
}

// The small open models' variants of llama (issue 38), small: a tied head
// with a head width of 12 (not d_model / heads = 8) and Llama 3's rotary
// scaling, whose three bands (kept, blended, divided) the widths and
// original context here all reach; biases on q/k/v/o and the MLP; Qwen2's
// q/k/v biases with a tied head.
std::vector<nn::LmConfig> llama_variants() {
  nn::LmConfig t = small(nn::Arch::llama);
  t.tied_head = true, t.head_dim = 12, t.rope_theta = 500000;
  t.rope_factor = 8, t.rope_low_freq_factor = 1, t.rope_high_freq_factor = 4, t.rope_original_context = 32;
  nn::LmConfig b = small(nn::Arch::llama);
  b.qkv_bias = b.o_bias = b.mlp_bias = true;
  nn::LmConfig q = small(nn::Arch::llama);
  q.qkv_bias = true, q.tied_head = true, q.rope_theta = 1e6;
  return {t, b, q};
}

}  // namespace

TEST(CausalLm, GradientMatchesFiniteDifferencesInFloat64) {
  check_gradient_against_finite_differences(nn::LmConfig{}, 20);
}

TEST(CausalLm, Gpt2AndLlamaGradientsMatchFiniteDifferencesInFloat64) {
  check_gradient_against_finite_differences(small(nn::Arch::gpt2), 30);
  check_gradient_against_finite_differences(small(nn::Arch::llama), 30);
}

TEST(CausalLm, LlamaVariantsGradientsMatchFiniteDifferencesInFloat64) {
  for (const nn::LmConfig& c : llama_variants()) {
    SCOPED_TRACE(c.to_json());
    check_gradient_against_finite_differences(c, 30);
  }
}

// Each variant's parameters, and the checkpoint JSON: written only where not
// the default (a plain Llama's JSON is as before), read back the same, and
// an older checkpoint's JSON without them reads as the plain model.
TEST(CausalLm, LlamaVariantsParametersAndJson) {
  const std::vector<nn::LmConfig> v = llama_variants();
  auto names = [](const nn::LmConfig& c) {
    std::map<std::string, Shape> m;
    for (const nn::ParamSpec& p : nn::lm_parameters(c)) m[p.name] = p.type.shape;
    return m;
  };
  const auto t = names(v[0]), b = names(v[1]), q = names(v[2]);
  EXPECT_EQ(t.count("head"), 0u);
  EXPECT_EQ(t.at("blocks.0.attn.wq"), (Shape{32, 48}));   // 4 heads of 12
  EXPECT_EQ(t.at("blocks.0.attn.wk"), (Shape{32, 24}));   // 2 of 12
  EXPECT_EQ(t.at("blocks.0.attn.wo"), (Shape{48, 32}));
  for (const char* n : {"attn.bq", "attn.bk", "attn.bv", "attn.bo", "mlp.b_gate", "mlp.b_up", "mlp.b_down"})
    EXPECT_EQ(b.count(std::string("blocks.1.") + n), 1u) << n;
  EXPECT_EQ(b.at("blocks.1.attn.bk"), (Shape{16}));
  EXPECT_EQ(b.at("blocks.1.mlp.b_gate"), (Shape{48}));
  EXPECT_EQ(q.count("blocks.0.attn.bq"), 1u);
  EXPECT_EQ(q.count("blocks.0.attn.bo"), 0u);
  EXPECT_EQ(q.count("blocks.0.mlp.b_up"), 0u);
  EXPECT_EQ(q.count("head"), 0u);
  EXPECT_NE(v[2].describe().find("Qwen2"), std::string::npos);
  for (const nn::LmConfig& c : v) EXPECT_EQ(nn::LmConfig::from_json(c.to_json()).to_json(), c.to_json());
  const std::string plain = small(nn::Arch::llama).to_json();
  for (const char* k : {"head_dim", "tied_head", "qkv_bias", "o_bias", "mlp_bias", "rope_scaling"})
    EXPECT_EQ(plain.find(k), std::string::npos) << k;
  EXPECT_NE(v[0].to_json().find("\"rope_scaling\""), std::string::npos);
  // A Llama checkpoint's JSON as capstep wrote it before the variants existed.
  const nn::LmConfig old = nn::LmConfig::from_json(
      R"({"arch":"llama","batch":2,"context":16,"d_ff":48,"d_model":32,"n_heads":4,"n_kv_heads":2,"n_layers":2,)"
      R"("norm_eps":1e-05,"rope_theta":10000.0,"seq":8,"vocab":64})");
  EXPECT_EQ(old.to_json(), plain);
}

TEST(CausalLm, LlamaVariantsRefuseWhatTheyCannotTake) {
  auto refuses = [](const nn::LmConfig& c, const std::string& why) {
    try {
      c.validate();
      ADD_FAILURE() << "no error; expected: " << why;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(why));
    }
  };
  nn::LmConfig c = small(nn::Arch::gpt2);
  c.tied_head = true;
  refuses(c, "apply to the llama architecture, not gpt2");
  c = nn::LmConfig{};
  c.head_dim = 16;
  refuses(c, "apply to the llama architecture, not seed");
  c = small(nn::Arch::llama);
  c.head_dim = 7;
  refuses(c, "even head width, got head_dim 7");
  c = small(nn::Arch::llama);
  c.o_bias = true;
  refuses(c, "an o bias needs the q/k/v biases");
  c = small(nn::Arch::llama);
  c.qkv_bias = c.mlp_bias = true;
  refuses(c, "do not go with MLP biases");
  c = small(nn::Arch::llama);
  c.rope_factor = 8, c.rope_low_freq_factor = 4, c.rope_high_freq_factor = 1, c.rope_original_context = 8;
  refuses(c, "0 < low_freq_factor < high_freq_factor");
  c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_context = 0;
  refuses(c, "the original context");
  c = small(nn::Arch::llama);
  c.rope_original_context = 8;
  refuses(c, "need a rope factor");
  c = small(nn::Arch::llama);
  c.d_model = 36, c.n_heads = 5, c.n_kv_heads = 0, c.head_dim = 8;   // 36 is no multiple of 5: head_dim decides
  EXPECT_NO_THROW(c.validate());
}

// GPT-2 and Llama of the seed's widths: every parameter's name and shape, and
// the counts they add up to.
TEST(CausalLm, Gpt2AndLlamaParameters) {
  const int64_t V = 64, D = 128, F = 256, P = 256;
  nn::LmConfig g;
  g.arch = nn::Arch::gpt2;
  std::vector<std::pair<std::string, Shape>> want = {{"tok_emb", {V, D}}, {"pos_emb", {P, D}}};
  for (int l = 0; l < 2; ++l) {
    std::string b = "blocks." + std::to_string(l) + ".";
    want.push_back({b + "attn_norm", {D}});
    want.push_back({b + "attn_norm_bias", {D}});
    for (const char* w : {"q", "k", "v", "o"}) {
      want.push_back({b + "attn.w" + w, {D, D}});
      want.push_back({b + "attn.b" + w, {D}});
    }
    want.push_back({b + "mlp_norm", {D}});
    want.push_back({b + "mlp_norm_bias", {D}});
    want.push_back({b + "mlp.w1", {D, F}});
    want.push_back({b + "mlp.b1", {F}});
    want.push_back({b + "mlp.w2", {F, D}});
    want.push_back({b + "mlp.b2", {D}});
  }
  want.push_back({"final_norm", {D}});
  want.push_back({"final_norm_bias", {D}});
  auto check = [](const nn::LmConfig& c, const std::vector<std::pair<std::string, Shape>>& w) {
    std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
    ASSERT_EQ(ps.size(), w.size()) << nn::arch_name(c.arch);
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(ps[i].name, w[i].first);
      EXPECT_EQ(ps[i].type, (Type{DType::f32, w[i].second})) << ps[i].name;
      EXPECT_EQ(ps[i].is_bias, ps[i].name.find("bias") != std::string::npos ||
                                   ps[i].name.find(".b") != std::string::npos)
          << ps[i].name;
    }
  };
  check(g, want);
  // 311,936 - head (8,192) + 2 layers x (2 norm biases 256 + 4 x 128 + 256 + 128) + final bias 128
  EXPECT_EQ(nn::count_parameters(g), 311936 - 8192 + 2 * (256 + 512 + 384) + 128);

  nn::LmConfig m;
  m.arch = nn::Arch::llama;
  m.n_kv_heads = 2;   // head width 32: k and v are [128, 64]
  want = {{"tok_emb", {V, D}}};
  for (int l = 0; l < 2; ++l) {
    std::string b = "blocks." + std::to_string(l) + ".";
    want.push_back({b + "attn_norm", {D}});
    want.push_back({b + "attn.wq", {D, D}});
    want.push_back({b + "attn.wk", {D, 64}});
    want.push_back({b + "attn.wv", {D, 64}});
    want.push_back({b + "attn.wo", {D, D}});
    want.push_back({b + "mlp_norm", {D}});
    want.push_back({b + "mlp.w_gate", {D, F}});
    want.push_back({b + "mlp.w_up", {D, F}});
    want.push_back({b + "mlp.w_down", {F, D}});
  }
  want.push_back({"final_norm", {D}});
  want.push_back({"head", {D, V}});
  check(m, want);
  // 311,936 - positions (32,768) - 2 layers x (k and v halved: 16,384) + 2 x gate (32,768): by
  // coincidence the seed's count again.
  EXPECT_EQ(nn::count_parameters(m), 311936 - 32768 - 2 * 16384 + 2 * 32768);
  EXPECT_EQ(m.describe(), "A 2-layer Llama causal LM, dModel 128, 311936 parameters; batch 4 \u00d7 16 tokens.");
}

// The configuration's JSON keeps the architecture; the seed's has no "arch"
// key (checkpoints written before architectures existed read as seed).
TEST(CausalLm, ArchitectureInTheConfigJson) {
  EXPECT_EQ(nn::LmConfig{}.to_json().find("arch"), std::string::npos);
  nn::LmConfig m = small(nn::Arch::llama);
  m.rope_theta = 500000;
  const nn::LmConfig back = nn::LmConfig::from_json(m.to_json());
  EXPECT_EQ(back.arch, nn::Arch::llama);
  EXPECT_EQ(back.n_kv_heads, 2);
  EXPECT_EQ(back.rope_theta, 500000);
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(nn::LmConfig::from_json(small(nn::Arch::gpt2).to_json()).arch, nn::Arch::gpt2);
  EXPECT_THROW(nn::parse_arch("gpt3"), Error);
}

TEST(CausalLm, ArchitecturesRefuseWhatTheyCannotTake) {
  auto refuses = [](const nn::LmConfig& c, const std::string& why) {
    try {
      c.validate();
      ADD_FAILURE() << "no error; expected: " << why;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(why));
    }
  };
  nn::LmConfig c = small(nn::Arch::gpt2);
  c.n_kv_heads = 2;
  refuses(c, "kv_heads applies to the llama architecture, not gpt2");
  c = nn::LmConfig{};
  c.rope_theta = 500;
  refuses(c, "rope_theta applies to the llama architecture, not seed");
  c = small(nn::Arch::llama);
  c.n_kv_heads = 3;
  refuses(c, "kv_heads 3 must divide heads 4");
  c = small(nn::Arch::llama);
  c.d_model = 36, c.n_heads = 4, c.n_kv_heads = 0;   // head width 9
  refuses(c, "even head width, got d_model / heads = 9");
}

// Llama sees positions only through the rotary embedding, whose rotation at
// position 0 is the identity: a one-token sequence's logits do not depend on
// rope_theta, a two-token sequence's second logits do.
TEST(CausalLm, LlamaRotaryIsTheIdentityAtPositionZero) {
  nn::LmConfig c = small(nn::Arch::llama);
  std::vector<Array> in = nn::init_parameters(c, 5);
  Array tok({DType::i32, {1, 1}});
  tok.set(0, 7.0);
  in.push_back(tok);
  Array a = host::run(nn::lm_logits_program(c, 1), in)[0];
  c.rope_theta = 77;
  Array b = host::run(nn::lm_logits_program(c, 1), in)[0];
  EXPECT_TRUE(a.bit_equal(b));
  // And at position 1 it matters.
  Array tok2({DType::i32, {1, 2}});
  tok2.set(0, 7.0), tok2.set(1, 9.0);
  in.back() = tok2;
  Array x = host::run(nn::lm_logits_program(c, 2), in)[0];
  c.rope_theta = 10000;
  Array y = host::run(nn::lm_logits_program(c, 2), in)[0];
  EXPECT_NE(x.get(c.vocab + 3), y.get(c.vocab + 3));
}

// The benchmark's size ladder: the same parameter counts as the peers in
// bench/torch_jax_step.py (SIZES, N_PARAMS), and each size is a valid model.
TEST(CausalLm, PresetSizesOfTheLadder) {
  const std::pair<const char*, int64_t> want[] = {{"seed", 311936}, {"middle", 25371136}, {"gpt2-small", 85838592}};
  ASSERT_EQ(nn::LmConfig::preset_names().size(), 3u);
  for (const auto& [name, count] : want) {
    const nn::LmConfig c = nn::LmConfig::preset(name);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(nn::count_parameters(c), count) << name;
  }
  EXPECT_EQ(nn::LmConfig::preset("gpt2-small").batch * nn::LmConfig::preset("gpt2-small").seq, 4096);
  EXPECT_EQ(nn::LmConfig::preset("seed").to_json(), nn::LmConfig{}.to_json());
  try {
    nn::LmConfig::preset("gpt3");
    ADD_FAILURE() << "no error for an unknown size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model size 'gpt3': the sizes are seed, middle and gpt2-small"),
              std::string::npos)
        << e.what();
  }
}

// GPT-2 and Llama through the transforms the seed's model goes through: the
// fused attention primitives (grouped-query attention included) give the
// same loss and gradients, and the StableHLO export reads back to a program
// with the same results (the rotary tables and the rotation as constants).
TEST(CausalLm, Gpt2AndLlamaFuseAttentionAndRoundTripStableHlo) {
  for (nn::Arch a : {nn::Arch::gpt2, nn::Arch::llama}) {
    const nn::LmConfig c = small(a);
    std::vector<std::string> names;
    for (const auto& p : nn::lm_parameters(c)) names.push_back(p.name);
    data::BatchStream bs(data::encode(data::builtin_corpus()), 4, c.batch, c.seq);
    data::Batch b = bs.next();
    std::vector<Array> in = nn::init_parameters(c, 4);
    in.push_back(b.inputs);
    in.push_back(b.targets);
    const Program loss = nn::lm_loss_program(c);
    const Program fused = fuse_attention(loss);
    EXPECT_TRUE(has_attention(fused)) << nn::arch_name(a);
    const std::vector<Array> plain = host::run(value_and_grad(loss, names), in);
    const std::vector<Array> with = host::run(value_and_grad(fused, names), in);
    ASSERT_EQ(plain.size(), with.size());
    for (size_t i = 0; i < plain.size(); ++i)
      for (int64_t k = 0; k < plain[i].numel(); ++k)
        ASSERT_NEAR(plain[i].get(k), with[i].get(k), 1e-6 + 1e-5 * std::fabs(plain[i].get(k)))
            << nn::arch_name(a) << " output " << i << "[" << k << "]";
    const Program back = from_stablehlo(to_stablehlo(loss));
    EXPECT_TRUE(host::run(back, in)[0].bit_equal(plain[0])) << nn::arch_name(a);
  }
}

// The KV cache's programs against the logits program over the whole text, in
// f64 for every architecture: prefill reads 6 tokens, then the decode program
// gives positions 6..9 one at a time, the host writing each new row of k and
// v into the caches at its position. Rows after the position hold 1e3
// (never written): the mask must hide them. The arithmetic differs from the
// whole program's (one row per product, attention over the 16 rows of the
// cache with exact zeros for the masked ones) only in the order of f64
// summation: n terms (n <= 48) off by at most n * 2^-53 of their magnitudes'
// sum, about 1e-14 relative through two blocks, for logits of magnitude < 1
// here; 1e-12 leaves room.
TEST(CausalLm, PrefillAndDecodeGiveTheWholeProgramsLogits) {
  std::vector<nn::LmConfig> configs = {small(nn::Arch::seed), small(nn::Arch::gpt2), small(nn::Arch::llama)};
  for (const nn::LmConfig& v : llama_variants()) configs.push_back(v);
  for (const nn::LmConfig& c : configs) {
    SCOPED_TRACE(c.to_json());
    const int64_t T = 10, P = 6, C = c.context, KV = c.kv_heads(), Dh = c.head_width(), V = c.vocab;
    const std::vector<Array> params = nn::init_parameters(c, 3, DType::f64);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < T; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 5) % V));

    std::vector<Array> in = params;
    in.push_back(Array::i32({1, T}, ids));
    const Array whole = host::run(nn::lm_logits_program(c, T, DType::f64), in)[0];

    in = params;
    in.push_back(Array::i32({1, P}, std::vector<int32_t>(ids.begin(), ids.begin() + P)));
    const std::vector<Array> pre = host::run(nn::lm_prefill_program(c, P, DType::f64), in);
    ASSERT_EQ(pre.size(), static_cast<size_t>(1 + 2 * c.n_layers));
    ASSERT_EQ(pre[0].shape(), (Shape{1, 1, V}));
    ASSERT_EQ(pre[1].shape(), (Shape{1, KV, P, Dh}));
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(pre[0].get(v), whole.get((P - 1) * V + v), 1e-12);

    // The caches [1, KV, C, Dh], rows 0..P-1 from the prefill.
    std::vector<Array> caches;
    for (int64_t i = 0; i < 2 * c.n_layers; ++i) {
      Array k({DType::f64, {1, KV, C, Dh}});
      for (int64_t j = 0; j < k.numel(); ++j) k.set(j, 1e3);
      for (int64_t h = 0; h < KV; ++h)
        for (int64_t r = 0; r < P; ++r)
          for (int64_t e = 0; e < Dh; ++e) k.set((h * C + r) * Dh + e, pre[static_cast<size_t>(1 + i)].get((h * P + r) * Dh + e));
      caches.push_back(std::move(k));
    }
    host::Interpreter decode(nn::lm_decode_program(c, C, DType::f64));
    for (int64_t p = P; p < T; ++p) {
      in = params;
      in.push_back(Array::i32({1, 1}, {ids[static_cast<size_t>(p)]}));
      in.push_back(Array::i32({1}, {static_cast<int32_t>(p)}));
      for (const Array& k : caches) in.push_back(k);
      const std::vector<Array> out = decode.run(in);
      double worst = 0;
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(out[0].get(v) - whole.get(p * V + v)));
      EXPECT_LE(worst, 1e-12) << "position " << p;
      for (size_t i = 0; i < caches.size(); ++i)
        for (int64_t h = 0; h < KV; ++h)
          for (int64_t e = 0; e < Dh; ++e) caches[i].set((h * C + p) * Dh + e, out[1 + i].get(h * Dh + e));
    }
  }
}

// The position is an input of the decode program: one program, the same
// equations, for every position. Nor does it grow with the capacity: a cache
// of 16 rows and one of 512 take the same equations (of other shapes).
TEST(CausalLm, DecodeProgramsEquationsDoNotGrowWithThePosition) {
  for (nn::Arch a : {nn::Arch::seed, nn::Arch::gpt2, nn::Arch::llama}) {
    nn::LmConfig c = small(a);
    const Program p16 = nn::lm_decode_program(c, 16);
    c.context = 512;
    const Program p512 = nn::lm_decode_program(c, 512);
    EXPECT_EQ(p16.eqns.size(), p512.eqns.size()) << nn::arch_name(a);
    int pos_inputs = 0;
    for (const auto& i : p16.inputs) pos_inputs += i.name == "pos";
    EXPECT_EQ(pos_inputs, 1);
    EXPECT_THROW(nn::lm_decode_program(c, 513), Error);
  }
}
