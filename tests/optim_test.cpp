// AdamW: the host update against hand-worked values, and the fused program
// (with_adamw) on the host against the host update.
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capstep/autodiff.h"
#include "capstep/data.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"

using namespace capstep;

// Two steps on one coordinate, worked out in the test in double:
// p0 = 0.5, g1 = 0.2, g2 = -0.1, lr 1e-2, b1 0.9, b2 0.999, eps 1e-8, wd 0.01.
TEST(AdamW, TwoStepsMatchTheFormula) {
  optim::AdamW o;
  double p = 0.5, m = 0, v = 0;
  const double gs[2] = {0.2, -0.1};
  float pf = 0.5f, mf = 0, vf = 0;
  for (int t = 1; t <= 2; ++t) {
    double g = gs[t - 1];
    p *= 1 - 0.01 * 0.01;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
    p -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    float gf = static_cast<float>(g);
    optim::adamw_update(o, optim::adamw_scalars(o, t), &pf, &gf, &mf, &vf, 1);
    EXPECT_NEAR(pf, p, 2e-7) << "step " << t;
    EXPECT_NEAR(mf, m, 1e-8);
    EXPECT_NEAR(vf, v, 1e-10);
  }
  // By hand: step 1 moves by -lr*sign(g) (m_hat/sqrt(v_hat) = 1): 0.5*0.9999 - 0.01 = 0.48995.
  // Step 2: m = 0.09*... ; the double reference above carries it. Check step 1 alone too:
  float q = 0.5f, qm = 0, qv = 0, g1 = 0.2f;
  optim::adamw_update(o, optim::adamw_scalars(o, 1), &q, &g1, &qm, &qv, 1);
  EXPECT_NEAR(q, 0.48995, 1e-6);
}

TEST(AdamW, ScalarsAndValidation) {
  optim::AdamW o;
  auto s = optim::adamw_scalars(o, 1);
  EXPECT_FLOAT_EQ(s.bc1, 10.0f);
  EXPECT_FLOAT_EQ(s.bc2, 1000.0f);
  EXPECT_FLOAT_EQ(s.decay, 0.9999f);
  EXPECT_THROW(optim::adamw_scalars(o, 0), Error);
  o.beta1 = 1.0;
  EXPECT_THROW(o.validate(), Error);
}

// The fused program on the host gives lane 1's losses and parameters over 10
// steps (within 1e-6 relative; in practice bit-identical).
TEST(WithAdamW, FusedProgramOnHostMatchesHostAdamW) {
  nn::LmConfig c;
  optim::AdamW o;
  std::vector<std::string> names;
  for (const auto& p : nn::lm_parameters(c)) names.push_back(p.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const Program fused = optim::with_adamw(grad, names, o);
  const size_t n = names.size();
  ASSERT_EQ(fused.aliases.size(), 3 * n);
  EXPECT_EQ(fused.inputs[0].name, names[0]);
  EXPECT_EQ(fused.inputs[n].name, "adamw.m." + names[0]);
  EXPECT_EQ(fused.outputs[0].name, "loss");
  EXPECT_EQ(fused.outputs[1].name, names[0] + ".new");

  host::Interpreter gi(grad), fi(fused);
  data::BatchStream bs(data::encode(data::builtin_corpus()), 5, c.batch, c.seq);
  std::vector<Array> p = nn::init_parameters(c, 5), m, v;
  for (const Array& a : p) m.emplace_back(a.type());
  v = m;
  std::vector<Array> fin = p;               // fused state: params, m, v, tokens, targets, 4 scalars
  for (size_t j = 0; j < n; ++j) fin.push_back(m[j]);
  for (size_t j = 0; j < n; ++j) fin.push_back(v[j]);
  fin.resize(3 * n + 2 + 4);
  for (int t = 1; t <= 10; ++t) {
    data::Batch b = bs.next();
    std::vector<Array> gin = p;
    gin.push_back(b.inputs);
    gin.push_back(b.targets);
    std::vector<Array> go = gi.run(gin);
    auto sc = optim::adamw_scalars(o, t);
    for (size_t j = 0; j < n; ++j) optim::adamw_update(o, sc, p[j], go[1 + j], m[j], v[j]);

    fin[3 * n] = b.inputs;
    fin[3 * n + 1] = b.targets;
    const float s4[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
    for (int i = 0; i < 4; ++i) fin[3 * n + 2 + static_cast<size_t>(i)] = Array::scalar(s4[i]);
    std::vector<Array> fo = fi.run(fin);
    EXPECT_LE(std::fabs(fo[0].get(0) - go[0].get(0)), 1e-6 * std::fabs(go[0].get(0))) << "loss, step " << t;
    for (const Alias& a : fused.aliases) fin[static_cast<size_t>(a.input)] = fo[static_cast<size_t>(a.output)];
    for (size_t j = 0; j < n; ++j) {
      EXPECT_LE(max_rel_diff(fin[j], p[j], 1e-6), 1e-6) << names[j] << " step " << t;
      EXPECT_LE(max_rel_diff(fin[n + j], m[j], 1e-9), 1e-6) << "m " << names[j] << " step " << t;
    }
  }
}

// Bad gradient programs are refused with a message naming what is wrong. A
// scalar "grad.w" for a [4] parameter broadcast silently through the update
// before with_adamw compared the types.
TEST(WithAdamW, RefusesMissingOrMistypedGradients) {
  auto message = [](const auto& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Tracer tr;
  Tensor w = tr.input("w", {DType::f32, {4}});
  Tensor loss = sum(w * w);
  Program no_grads = tr.finish({{"loss", loss}});
  EXPECT_THAT(message([&] { optim::with_adamw(no_grads, {"w"}, {}); }),
              ::testing::HasSubstr("has no output \"grad.w\""));
  Program scalar_grad = tr.finish({{"loss", loss}, {"grad.w", loss}});
  EXPECT_THAT(message([&] { optim::with_adamw(scalar_grad, {"w"}, {}); }),
              ::testing::HasSubstr("output \"grad.w\" is f32[] but parameter \"w\" is f32[4]"));
  EXPECT_THAT(message([&] { optim::with_adamw(value_and_grad(no_grads, {"w"}), {"v"}, {}); }),
              ::testing::HasSubstr("\"v\" is not an input"));
  EXPECT_THAT(message([&] { optim::with_adamw(value_and_grad(no_grads, {"w"}), {"w", "w"}, {}); }),
              ::testing::HasSubstr("with_adamw: parameter \"w\" is listed twice"));
  EXPECT_NO_THROW(optim::with_adamw(value_and_grad(no_grads, {"w"}), {"w"}, {}));
}
