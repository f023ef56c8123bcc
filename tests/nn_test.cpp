// The seed's model: its exact parameters, its start, and its gradient against
// float64 finite differences.
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capstep/autodiff.h"
#include "capstep/data.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"

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

// The full model in float64: the interpreter's gradient against central finite
// differences on 20 sampled parameter coordinates.
TEST(CausalLm, GradientMatchesFiniteDifferencesInFloat64) {
  nn::LmConfig c;
  const Program loss = nn::lm_loss_program(c, DType::f64);
  std::vector<std::string> names;
  for (const auto& p : nn::lm_parameters(c, DType::f64)) names.push_back(p.name);
  host::Interpreter grad(value_and_grad(loss, names));
  host::Interpreter fwd(loss);

  data::BatchStream bs(data::encode(data::builtin_corpus()), 3, c.batch, c.seq);
  data::Batch b = bs.next();
  std::vector<Array> in = nn::init_parameters(c, 3, DType::f64);
  // Larger than the default init so that every coordinate matters.
  for (auto& a : in)
    for (int64_t i = 0; i < a.numel(); ++i) a.set(i, a.get(i) * 5.0);
  in.push_back(b.inputs);
  in.push_back(b.targets);
  std::vector<Array> g = grad.run(in);

  uint64_t st = 12345;
  for (int k = 0; k < 20; ++k) {
    size_t pi = data::splitmix64(st) % names.size();
    int64_t ci = static_cast<int64_t>(data::splitmix64(st) % static_cast<uint64_t>(in[pi].numel()));
    if (pi == 1) ci %= c.seq * c.d_model;  // rows of pos_emb the batch uses
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
    double rel = std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), 1e-8});
    EXPECT_LT(rel, 1e-6) << names[pi] << "[" << ci << "]: analytic " << an << " finite-diff " << fd;
  }
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
