// Gradient checking: value_and_grad's gradients against central finite
// differences of the forward program, both run by the host interpreter.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/trace.h"

namespace gradcheck {

using capstep::Array;
using capstep::DType;
using capstep::Program;
using capstep::Shape;
using capstep::Tensor;
using capstep::Tracer;
using capstep::Type;

inline std::vector<double> uniform(std::mt19937& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

inline Array random_array(std::mt19937& rng, const Type& t, double lo = -1.0, double hi = 1.0) {
  return Array::from_doubles(t, uniform(rng, t.numel(), lo, hi));
}

// Values at least `gap` apart (a shuffled ramp plus small noise), so that
// max and maximum have no ties within reach of a finite-difference step.
inline Array distinct_array(std::mt19937& rng, const Type& t, double gap = 0.05) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - static_cast<double>(v.size()) / 2) * gap;
  std::shuffle(v.begin(), v.end(), rng);
  std::uniform_real_distribution<double> noise(-gap / 4, gap / 4);
  for (double& x : v) x += noise(rng);
  return Array::from_doubles(t, v);
}

// loss = sum(y * R) for a fixed random R: every element of y matters, with a
// different weight, so a VJP that mixes up positions cannot pass.
inline Tensor weighted_sum(Tracer& tr, const Tensor& y, std::mt19937& rng) {
  Type t = y.type();
  Tensor r = tr.constant(t, uniform(rng, t.numel(), -1.0, 1.0));
  return capstep::sum(y * r);
}

struct Report {
  double max_rel_err = 0;   // over all checked coordinates
  int checked = 0;          // coordinates compared
  std::string worst;        // where max_rel_err occurred, with both numbers
};

struct Options {
  int samples = 0;          // coordinates per wrt input (0: every coordinate)
  double h = 1e-4;          // step of the 4-point central difference
  uint32_t seed = 7;        // picks the sampled coordinates
};

// Checks value_and_grad(p, wrt) at `inputs` against
//   f'(x) ~ (-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / (12 h)
// (error O(h^4)). The step actually taken is measured after rounding to the
// input's dtype, so f32 inputs of functions linear in them check exactly.
// Relative error: |ad - fd| / max(|ad|, |fd|, 1e-3 * max|ad| of that input,
// 1e-4 * |f|); the last floor is where the stencil's rounding noise
// (~1e-16 |f| / h) lives, so an exact zero gradient is not judged by noise.
inline Report check(const Program& p, const std::vector<Array>& inputs, const std::vector<std::string>& wrt,
                    Options opt = {}) {
  Program g = capstep::value_and_grad(p, wrt);
  capstep::host::Interpreter fwd(p);
  capstep::host::Interpreter both(g);
  std::vector<Array> outs = both.run(inputs);
  Report rep;
  // The value output must be the forward program's own.
  const double f0 = fwd.run(inputs)[0].get(0);
  if (std::fabs(outs[0].get(0) - f0) > 1e-12 * std::max(1.0, std::fabs(f0))) {
    rep.max_rel_err = 1.0;
    rep.worst = "loss of the gradient program differs from the forward program's";
    return rep;
  }
  std::mt19937 rng(opt.seed);
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int in = p.input_index(wrt[k]);
    const Array& grad = outs[p.outputs.size() + k];
    double scale = 0;
    for (int64_t i = 0; i < grad.numel(); ++i) scale = std::max(scale, std::fabs(grad.get(i)));
    std::vector<int64_t> coords;
    const int64_t n = grad.numel();
    if (opt.samples <= 0 || opt.samples >= n) {
      for (int64_t i = 0; i < n; ++i) coords.push_back(i);
    } else {
      std::uniform_int_distribution<int64_t> pick(0, n - 1);
      for (int s = 0; s < opt.samples; ++s) coords.push_back(pick(rng));
    }
    std::vector<Array> x = inputs;
    Array& xi = x[static_cast<size_t>(in)];
    for (int64_t i : coords) {
      const double orig = xi.get(i);
      auto f_at = [&](double step) {
        xi.set(i, orig + step);
        const double taken = xi.get(i) - orig;
        const double f = fwd.run(x)[0].get(0);
        xi.set(i, orig);
        return std::pair<double, double>(f, taken);
      };
      auto [fp2, sp2] = f_at(2 * opt.h);
      auto [fp1, sp1] = f_at(opt.h);
      auto [fm1, sm1] = f_at(-opt.h);
      auto [fm2, sm2] = f_at(-2 * opt.h);
      double fd;
      if (sp2 == 2 * sp1 && sm2 == 2 * sm1 && sp1 == -sm1) {
        fd = (-fp2 + 8 * fp1 - 8 * fm1 + fm2) / (12 * sp1);
      } else {  // rounded steps (f32): a plain central difference over the steps taken
        fd = (fp1 - fm1) / (sp1 - sm1);
      }
      const double ad = grad.get(i);
      const double denom = std::max({std::fabs(ad), std::fabs(fd), 1e-3 * scale, 1e-4 * std::fabs(f0), 1e-300});
      const double err = (ad == fd) ? 0.0 : std::fabs(ad - fd) / denom;
      ++rep.checked;
      if (err > rep.max_rel_err || rep.worst.empty()) {
        rep.max_rel_err = err;
        std::ostringstream s;
        s.precision(12);
        s << wrt[k] << "[" << i << "]: autodiff " << ad << ", finite differences " << fd << " (rel err " << err
          << ")";
        rep.worst = s.str();
      }
    }
  }
  return rep;
}

}  // namespace gradcheck
