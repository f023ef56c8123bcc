// AdamW: the host update against hand-worked values, and the fused program
// (with_adamw) on the host against the host update.
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capstep/autodiff.h"
#include "capstep/data.h"
#include "backend/host/interpreter.h"
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

// The AdamW update appended to a gradient program as plain equations, written
// independently of expand_adamw: the reference it must equal, equation for
// equation.
Program with_adamw_as_plain_equations(const Program& g, const std::vector<std::string>& params, const optim::AdamW& o) {
  Tracer tr;
  std::vector<int> remap(static_cast<size_t>(g.num_values()), -1);
  std::vector<Tensor> P, M, V, S;
  for (const std::string& name : params) {
    const NamedValue& in = g.inputs[static_cast<size_t>(g.input_index(name))];
    P.push_back(tr.input(in.name, g.type(in.value)));
    remap[static_cast<size_t>(in.value)] = P.back().id();
  }
  for (size_t j = 0; j < params.size(); ++j) M.push_back(tr.input(optim::moment1_name(params[j]), P[j].type()));
  for (size_t j = 0; j < params.size(); ++j) V.push_back(tr.input(optim::moment2_name(params[j]), P[j].type()));
  for (const NamedValue& in : g.inputs)
    if (remap[static_cast<size_t>(in.value)] < 0) remap[static_cast<size_t>(in.value)] = tr.input(in.name, g.type(in.value)).id();
  for (const char* name : optim::kScalarNames) S.push_back(tr.input(name, {DType::f32, {}}));
  for (const Eqn& e : g.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    remap[static_cast<size_t>(e.out)] = tr.program().add_eqn_typed(e.op, std::move(ins), e.attrs, g.type(e.out));
  }
  const Tensor &lr = S[0], &bc1 = S[1], &bc2 = S[2], &decay = S[3];
  std::vector<Tensor> newP, newM, newV;
  for (size_t j = 0; j < params.size(); ++j) {
    Tensor gr(&tr, remap[static_cast<size_t>(g.outputs[static_cast<size_t>(g.output_index("grad." + params[j]))].value)]);
    Tensor m = M[j] * o.beta1 + gr * (1.0 - o.beta1);
    Tensor v = V[j] * o.beta2 + (gr * gr) * (1.0 - o.beta2);
    Tensor upd = (m * bc1) / (sqrt(v * bc2) + o.eps);
    newP.push_back(P[j] * decay - lr * upd);
    newM.push_back(m);
    newV.push_back(v);
  }
  std::vector<std::pair<std::string, Tensor>> outs;
  for (const NamedValue& out : g.outputs)
    if (out.name.rfind("grad.", 0) != 0) outs.push_back({out.name, Tensor(&tr, remap[static_cast<size_t>(out.value)])});
  const size_t first_new = outs.size();
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({optim::updated_name(params[j]), newP[j]});
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({optim::updated_name(optim::moment1_name(params[j])), newM[j]});
  for (size_t j = 0; j < params.size(); ++j) outs.push_back({optim::updated_name(optim::moment2_name(params[j])), newV[j]});
  Program r = tr.finish(outs);
  r.name = g.name + "_adamw";
  for (size_t j = 0; j < 3 * params.size(); ++j) r.aliases.push_back({static_cast<int>(first_new + j), static_cast<int>(j)});
  return dead_code_eliminate(r);
}

// AdamW known by name: with_adamw writes three adamw equations per parameter
// (p', m', v'), which read back from their text, and expand_adamw writes them
// out as exactly the equations with_adamw appended before (so StableHLO, the
// GPU's kernels and the host's reference path are what they were), with one
// record per parameter for the fused host.
TEST(WithAdamW, AdamwEquationsExpandToThePlainUpdate) {
  nn::LmConfig c;
  c.n_layers = 1;
  optim::AdamW o;
  o.beta1 = 0.85;
  o.eps = 1e-7;
  std::vector<std::string> names;
  for (const auto& p : nn::lm_parameters(c)) names.push_back(p.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const Program fused = optim::with_adamw(grad, names, o);
  int adamw = 0;
  for (const Eqn& e : fused.eqns) adamw += e.op == Op::adamw;
  EXPECT_EQ(adamw, 3 * static_cast<int>(names.size()));
  EXPECT_TRUE(has_adamw(fused));
  EXPECT_EQ(to_text(parse_text(to_text(fused))), to_text(fused));
  std::vector<ExpandedAdamW> ups;
  const Program ex = expand_adamw(fused, &ups);
  EXPECT_FALSE(has_adamw(ex));
  EXPECT_EQ(to_text(ex), to_text(with_adamw_as_plain_equations(grad, names, o)));
  ASSERT_EQ(ups.size(), names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    EXPECT_EQ(ups[j].p, ex.inputs[j].value);
    EXPECT_EQ(ups[j].p_out, ex.outputs[static_cast<size_t>(ex.output_index(names[j] + ".new"))].value);
    for (int k : {ups[j].b1, ups[j].c1, ups[j].b2, ups[j].c2, ups[j].eps}) EXPECT_GE(k, 0) << names[j];
  }
  EXPECT_EQ(to_text(expand_adamw(grad)), to_text(grad));  // nothing to expand
  // The shape rule names what is wrong.
  Tracer tr;
  Tensor w = tr.input("w", {DType::f32, {4}}), s = tr.input("s", {DType::f32, {}});
  Tensor d = tr.input("d", {DType::f64, {4}});
  Attrs a;
  a.literal = {0.9, 0.999, 1e-8};
  a.axis = 3;
  auto message = [&](const std::vector<Tensor>& operands) -> std::string {
    try {
      tr.emit(Op::adamw, operands, a);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(message({w, w, w, w, s, s, s, s}), ::testing::HasSubstr("axis 3 must be 0 (p'), 1 (m') or 2 (v')"));
  a.axis = 0;
  EXPECT_THAT(message({d, d, d, d, s, s, s, s}), ::testing::HasSubstr("updates f32 parameters only"));
  EXPECT_THAT(message({w, w, w, w, s, s, s, w}), ::testing::HasSubstr("lr, bc1, bc2 and decay must be f32[]"));
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
