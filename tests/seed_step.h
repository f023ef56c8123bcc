// The seed model's gradient program with fixed inputs, and the inputs of its
// with_adamw program, for tests that run the step several ways and compare the
// bits (host_fusion_test: fused vs unfused; host_parallel_test: thread counts).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/nn.h"
#include "capstep/optim.h"

namespace capstep::test {

// Values in [-2, 2) from a seeded LCG: the same on every machine.
inline Array lcg_array(const Type& t, uint64_t seed) {
  Array a(t);
  uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
  for (int64_t i = 0; i < a.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a.set(i, -2.0 + 4.0 * static_cast<double>(s >> 11) / 9007199254740992.0);
  }
  return a;
}

struct SeedStep {
  nn::LmConfig c;
  std::vector<std::string> names;
  Program grad;
  std::vector<Array> in;  // params, tokens, targets
  SeedStep() {
    for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
    grad = value_and_grad(nn::lm_loss_program(c), names);
    in = nn::init_parameters(c, 7);
    Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
    for (int64_t i = 0; i < tokens.numel(); ++i) {
      tokens.set(i, static_cast<double>((i * 7) % c.vocab));
      targets.set(i, static_cast<double>((i * 11 + 3) % c.vocab));
    }
    in.push_back(tokens);
    in.push_back(targets);
  }
  // The inputs of with_adamw(grad, names, aw): the parameters, moments as
  // after some steps (m in [-2, 2), v in [0, 2e-3)), the batch, and AdamW's
  // scalars of step 3.
  std::vector<Array> with_adamw_inputs(const optim::AdamW& aw) const {
    const size_t n = names.size();
    std::vector<Array> out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
    for (int rep = 0; rep < 2; ++rep)
      for (size_t j = 0; j < n; ++j) {
        Array m = lcg_array(in[j].type(), 100 + j + 1000 * static_cast<uint64_t>(rep));
        if (rep == 1)
          for (int64_t i = 0; i < m.numel(); ++i) m.set(i, std::fabs(m.get(i)) * 1e-3);
        out.push_back(m);
      }
    out.push_back(in[n]);
    out.push_back(in[n + 1]);
    const optim::AdamWScalars sc = optim::adamw_scalars(aw, 3);
    for (float v : {sc.lr, sc.bc1, sc.bc2, sc.decay}) {
      Array a({DType::f32, {}});
      a.set(0, v);
      out.push_back(a);
    }
    return out;
  }
};

}  // namespace capstep::test
