// The host reference of the attention primitives (ir.h): causal scaled
// dot-product attention and its three cotangents, per (batch, head) and per
// query row, with every sum in double whatever the dtype (one rounding per
// stored element), so that the fused CUDA kernels and the unfused composite
// can both be checked against it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/host/step.h"

namespace capstep::host {
namespace {

struct Dims {
  int64_t bh = 0, t = 0, dh = 0;
};

Dims dims_of(const Step& s) {
  const Type& q = s.program->type(s.program->eqns[static_cast<size_t>(s.eqn)].inputs[0]);
  return {q.shape[0] * q.shape[1], q.shape[2], q.shape[3]};
}

// Row t of the probabilities p[t, 0..t] (the rest are zero) of one head:
// p = exp(s - lse) with s = q_t . k_s / sqrt(Dh).
template <class T>
void probabilities(const T* q, const T* k, const Dims& d, int64_t t, double scale, std::vector<double>& p) {
  double m = -INFINITY;
  for (int64_t j = 0; j <= t; ++j) {
    double acc = 0;
    for (int64_t c = 0; c < d.dh; ++c) acc += static_cast<double>(q[t * d.dh + c]) * static_cast<double>(k[j * d.dh + c]);
    p[static_cast<size_t>(j)] = acc * scale;
    m = std::max(m, p[static_cast<size_t>(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j <= t; ++j) l += std::exp(p[static_cast<size_t>(j)] - m);
  const double lse = m + std::log(l);
  for (int64_t j = 0; j <= t; ++j) p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - lse);
}

template <class T>
void attention_forward(const Step& s, void* const* slots) {
  const Dims d = dims_of(s);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.dh));
  const size_t head = static_cast<size_t>(d.t * d.dh);
  std::vector<double> p(static_cast<size_t>(d.t)), acc(static_cast<size_t>(d.dh));
  for (int64_t b = 0; b < d.bh; ++b) {
    const T* q = static_cast<const T*>(slots[s.in[0]]) + b * static_cast<int64_t>(head);
    const T* k = static_cast<const T*>(slots[s.in[1]]) + b * static_cast<int64_t>(head);
    const T* v = static_cast<const T*>(slots[s.in[2]]) + b * static_cast<int64_t>(head);
    T* out = static_cast<T*>(slots[s.out]) + b * static_cast<int64_t>(head);
    for (int64_t t = 0; t < d.t; ++t) {
      probabilities(q, k, d, t, scale, p);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t c = 0; c < d.dh; ++c) acc[static_cast<size_t>(c)] += p[static_cast<size_t>(j)] * static_cast<double>(v[j * d.dh + c]);
      for (int64_t c = 0; c < d.dh; ++c) out[t * d.dh + c] = static_cast<T>(acc[static_cast<size_t>(c)]);
    }
  }
}

// attrs.axis 0: dq, 1: dk, 2: dv (ir.h). The other two are computed and
// dropped: the host keeps one formula per row, not speed.
template <class T>
void attention_backward(const Step& s, void* const* slots) {
  const Dims d = dims_of(s);
  const int which = static_cast<int>(s.program->eqns[static_cast<size_t>(s.eqn)].attrs.axis);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.dh));
  const size_t head = static_cast<size_t>(d.t * d.dh);
  std::vector<double> p(static_cast<size_t>(d.t)), ds(static_cast<size_t>(d.t)), g(head);
  for (int64_t b = 0; b < d.bh; ++b) {
    const int64_t off = b * static_cast<int64_t>(head);
    const T* q = static_cast<const T*>(slots[s.in[0]]) + off;
    const T* k = static_cast<const T*>(slots[s.in[1]]) + off;
    const T* v = static_cast<const T*>(slots[s.in[2]]) + off;
    const T* o = static_cast<const T*>(slots[s.in[3]]) + off;
    const T* dout = static_cast<const T*>(slots[s.in[4]]) + off;
    T* res = static_cast<T*>(slots[s.out]) + off;
    std::fill(g.begin(), g.end(), 0.0);
    for (int64_t t = 0; t < d.t; ++t) {
      probabilities(q, k, d, t, scale, p);
      const T* dot = dout + t * d.dh;
      if (which == 2) {  // dv[j] += p[t,j] dout[t]
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t c = 0; c < d.dh; ++c) g[static_cast<size_t>(j * d.dh + c)] += p[static_cast<size_t>(j)] * static_cast<double>(dot[c]);
        continue;
      }
      double delta = 0;
      for (int64_t c = 0; c < d.dh; ++c) delta += static_cast<double>(dot[c]) * static_cast<double>(o[t * d.dh + c]);
      for (int64_t j = 0; j <= t; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < d.dh; ++c) dp += static_cast<double>(dot[c]) * static_cast<double>(v[j * d.dh + c]);
        ds[static_cast<size_t>(j)] = p[static_cast<size_t>(j)] * (dp - delta) * scale;
      }
      for (int64_t j = 0; j <= t; ++j) {
        const double w = ds[static_cast<size_t>(j)];
        if (which == 0) {  // dq[t] += ds[t,j] k[j]
          for (int64_t c = 0; c < d.dh; ++c) g[static_cast<size_t>(t * d.dh + c)] += w * static_cast<double>(k[j * d.dh + c]);
        } else {  // dk[j] += ds[t,j] q[t]
          for (int64_t c = 0; c < d.dh; ++c) g[static_cast<size_t>(j * d.dh + c)] += w * static_cast<double>(q[t * d.dh + c]);
        }
      }
    }
    for (size_t i = 0; i < head; ++i) res[i] = static_cast<T>(g[i]);
  }
}

}  // namespace

Kernel attention_kernel(Op op, DType t) {
  const bool fwd = op == Op::attention;
  if (op != Op::attention && op != Op::attention_grad)
    throw Error(std::string("attention_kernel: ") + op_name(op) + " is not an attention primitive");
  switch (t) {
    case DType::f32: return fwd ? attention_forward<float> : attention_backward<float>;
    case DType::f64: return fwd ? attention_forward<double> : attention_backward<double>;
    case DType::i32: case DType::i1: case DType::bf16: break;
  }
  throw Error(std::string(op_name(op)) + ": no host kernel for " + dtype_name(t));
}

}  // namespace capstep::host
