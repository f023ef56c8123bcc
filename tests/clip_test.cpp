// Issue 15, item 3: global gradient-norm clipping as a Program -> Program
// transform (optim::clip_grad_norm). On the interpreter against a host
// reference: the norm, the scaled gradients, and bit-identity with the
// unclipped step when the limit is above the norm; and the clipped fused step
// (value_and_grad + clip + AdamW) exported to StableHLO reads back and runs
// bit-identically.
#include <gtest/gtest.h>

#include <cmath>

#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/stablehlo.h"
#include "capstep/trace.h"

using namespace capstep;

namespace {

nn::LmConfig small_lm() {
  nn::LmConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.d_ff = 32;
  c.context = 8;
  c.batch = 2;
  c.seq = 8;
  return c;
}

struct ClipCase {
  nn::LmConfig c = small_lm();
  std::vector<std::string> names;
  Program grad;
  std::vector<Array> inputs;   // params, tokens, targets
  ClipCase() {
    for (const auto& p : nn::lm_parameters(c)) names.push_back(p.name);
    grad = value_and_grad(nn::lm_loss_program(c), names);
    inputs = nn::init_parameters(c, 3);
    std::vector<int32_t> tok(static_cast<size_t>(c.batch * c.seq)), tgt(tok.size());
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int32_t>((i * 7 + 3) % 64);
      tgt[i] = static_cast<int32_t>((i * 5 + 1) % 64);
    }
    inputs.push_back(Array::i32({c.batch, c.seq}, tok));
    inputs.push_back(Array::i32({c.batch, c.seq}, tgt));
  }
};

// The host reference: the global norm, in double.
double host_norm(const std::vector<Array>& grads) {
  double s = 0;
  for (const Array& g : grads)
    for (int64_t i = 0; i < g.numel(); ++i) s += g.get(i) * g.get(i);
  return std::sqrt(s);
}

std::vector<Array> with_limit(std::vector<Array> in, float c) {
  in.push_back(Array::scalar(c));
  return in;
}

}  // namespace

TEST(ClipGradNorm, ProgramShapeAndRefusals) {
  ClipCase s;
  const Program clip = optim::clip_grad_norm(s.grad, s.names);
  ASSERT_EQ(clip.inputs.size(), s.grad.inputs.size() + 1);
  EXPECT_EQ(clip.inputs.back().name, "clip.max_norm");
  ASSERT_EQ(clip.outputs.size(), s.grad.outputs.size() + 1);
  for (size_t k = 0; k < s.grad.outputs.size(); ++k) EXPECT_EQ(clip.outputs[k].name, s.grad.outputs[k].name);
  EXPECT_EQ(clip.outputs.back().name, "grad_norm");
  EXPECT_THROW(optim::clip_grad_norm(clip, s.names), Error);          // twice
  EXPECT_THROW(optim::clip_grad_norm(s.grad, {"nope"}), Error);
  EXPECT_THROW(optim::clip_grad_norm(s.grad, {s.names[0], s.names[0]}), Error);
  EXPECT_THROW(optim::clip_grad_norm(s.grad, {}), Error);
}

// Above the norm: every output bit-identical to the unclipped program. Below:
// the gradients are the host's g * C / ||g|| within 1e-6, and their norm is C.
TEST(ClipGradNorm, MatchesTheHostReference) {
  ClipCase s;
  const Program clip = optim::clip_grad_norm(s.grad, s.names);
  const std::vector<Array> plain = host::run(s.grad, s.inputs);
  std::vector<Array> g(plain.begin() + 1, plain.end());
  const double norm = host_norm(g);
  ASSERT_GT(norm, 0.1);

  const std::vector<Array> loose = host::run(clip, with_limit(s.inputs, static_cast<float>(norm * 1.001)));
  ASSERT_EQ(loose.size(), plain.size() + 1);
  for (size_t k = 0; k < plain.size(); ++k) EXPECT_TRUE(loose[k].bit_equal(plain[k])) << s.grad.outputs[k].name;
  EXPECT_NEAR(loose.back().get(0), norm, 1e-6 * norm);

  const double c = norm / 4;
  const std::vector<Array> tight = host::run(clip, with_limit(s.inputs, static_cast<float>(c)));
  EXPECT_TRUE(tight[0].bit_equal(plain[0])) << "the loss is not clipped";
  EXPECT_NEAR(tight.back().get(0), norm, 1e-6 * norm) << "grad_norm is the norm before clipping";
  const double scale = static_cast<double>(static_cast<float>(c)) / norm;
  double worst = 0;
  std::vector<Array> clipped;
  for (size_t j = 0; j < g.size(); ++j) {
    const Array& got = tight[1 + j];
    clipped.push_back(got);
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double want = g[j].get(i) * scale;
      worst = std::max(worst, std::fabs(got.get(i) - want) / std::max(std::fabs(want), 1e-30 + 1e-3 * norm * scale));
    }
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_NEAR(host_norm(clipped), c, 1e-6 * c);
}

// value_and_grad + clip + AdamW: with the limit above the norm the step equals
// the unclipped fused step bit for bit (parameters and moments); below, it
// moves the parameters differently.
TEST(ClipGradNorm, FusedStepAboveTheNormIsTheUnclippedStep) {
  ClipCase s;
  optim::AdamW o;
  const Program fused = optim::with_adamw(s.grad, s.names, o);
  const Program clipped = optim::with_adamw(optim::clip_grad_norm(s.grad, s.names), s.names, o);
  const size_t n = s.names.size();
  ASSERT_EQ(clipped.inputs.size(), fused.inputs.size() + 1);
  EXPECT_EQ(clipped.inputs[3 * n + 2].name, "clip.max_norm");
  EXPECT_GE(clipped.output_index("grad_norm"), 0);
  std::vector<Array> in;
  for (size_t j = 0; j < n; ++j) in.push_back(s.inputs[j]);
  for (int g = 0; g < 2; ++g)
    for (size_t j = 0; j < n; ++j) in.emplace_back(s.inputs[j].type());
  in.push_back(s.inputs[n]);
  in.push_back(s.inputs[n + 1]);
  std::vector<Array> in_clip = in;
  in_clip.push_back(Array::scalar(1e30f));
  const optim::AdamWScalars sc = optim::adamw_scalars(o, 1);
  for (float f : {sc.lr, sc.bc1, sc.bc2, sc.decay}) {
    in.push_back(Array::scalar(f));
    in_clip.push_back(Array::scalar(f));
  }
  const std::vector<Array> a = host::run(fused, in), b = host::run(clipped, in_clip);
  for (size_t k = 0; k < fused.outputs.size(); ++k) {
    const int kb = clipped.output_index(fused.outputs[k].name);
    ASSERT_GE(kb, 0) << fused.outputs[k].name;
    EXPECT_TRUE(a[k].bit_equal(b[static_cast<size_t>(kb)])) << fused.outputs[k].name;
  }
  in_clip[3 * n + 2] = Array::scalar(1e-3f);
  const std::vector<Array> t = host::run(clipped, in_clip);
  EXPECT_FALSE(a[1].bit_equal(t[static_cast<size_t>(clipped.output_index(fused.outputs[1].name))]));
}

// Exported to StableHLO and read back: the same program, and the host gives the
// same bits for both, clipping active.
TEST(ClipGradNorm, ClippedFusedStepRoundTripsThroughStablehlo) {
  ClipCase s;
  optim::AdamW o;
  const Program p = optim::with_adamw(optim::clip_grad_norm(s.grad, s.names), s.names, o);
  const std::string text = to_stablehlo(p);
  EXPECT_NE(text.find("clip.max_norm"), std::string::npos);
  EXPECT_NE(text.find("grad_norm"), std::string::npos);
  const Program back = from_stablehlo(text);
  EXPECT_EQ(to_stablehlo(back), text);
  const size_t n = s.names.size();
  std::vector<Array> in;
  for (size_t j = 0; j < n; ++j) in.push_back(s.inputs[j]);
  for (int g = 0; g < 2; ++g)
    for (size_t j = 0; j < n; ++j) in.emplace_back(s.inputs[j].type());
  in.push_back(s.inputs[n]);
  in.push_back(s.inputs[n + 1]);
  in.push_back(Array::scalar(0.05f));
  const optim::AdamWScalars sc = optim::adamw_scalars(o, 1);
  for (float f : {sc.lr, sc.bc1, sc.bc2, sc.decay}) in.push_back(Array::scalar(f));
  const std::vector<Array> want = host::run(p, in), got = host::run(back, in);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_GT(want[static_cast<size_t>(p.output_index("grad_norm"))].get(0), 0.05) << "the limit must clip here";
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(want[k].bit_equal(got[k])) << p.outputs[k].name;
}
