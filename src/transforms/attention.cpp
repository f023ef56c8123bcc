// The attention primitives' passes (ir.h): fuse_attention (the traced
// causal_attention pattern -> one attention equation) and expand_attention
// (both primitives written out as the primitives they stand for, for
// StableHLO and for checking). trace.h's attention() records one directly.
#include <cmath>

#include "capstep/transforms.h"
#include "trace/internal.h"

namespace capstep {

namespace {

constexpr double kMaskAtMost = -1e9;  // exp(s + mask - max) underflows to exactly 0 in f32 and f64

const DotDims kScores{{0, 1}, {0, 1}, {3}, {3}};   // [t,d] x [s,d] -> [t,s]
const DotDims kTimesV{{0, 1}, {0, 1}, {3}, {2}};   // [t,s] x [s,d] -> [t,d]
const DotDims kTransposed{{0, 1}, {0, 1}, {2}, {2}};  // [t,s] x [t,d] -> [s,d]

double dtype_round(double v, DType d) { return d == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v; }

class Matcher {
 public:
  explicit Matcher(const Program& p) : p_(p), def_(static_cast<size_t>(p.num_values()), -1) {
    for (size_t i = 0; i < p.eqns.size(); ++i) def_[static_cast<size_t>(p.eqns[i].out)] = static_cast<int>(i);
  }
  // The equation defining v if it is `op`, else nullptr.
  const Eqn* is(int v, Op op) const {
    const int d = def_[static_cast<size_t>(v)];
    if (d < 0) return nullptr;
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    return e.op == op ? &e : nullptr;
  }
  // A splat value: a constant with one literal, or a broadcast of one.
  bool splat(int v, double* x) const {
    if (const Eqn* b = is(v, Op::broadcast_in_dim)) v = b->inputs[0];
    const Eqn* c = is(v, Op::constant);
    if (!c || c->attrs.literal.size() != 1) return false;
    *x = c->attrs.literal[0];
    return true;
  }
  bool iota(int v, int64_t axis) const {
    const Eqn* e = is(v, Op::iota);
    return e && e->attrs.axis == axis;
  }
  static bool dot_is(const Eqn& e, const DotDims& d) {
    return e.attrs.lhs_batch == d.lhs_batch && e.attrs.rhs_batch == d.rhs_batch &&
           e.attrs.lhs_contract == d.lhs_contract && e.attrs.rhs_contract == d.rhs_contract;
  }
  // A [T,T] causal mask: select(col > row, m <= -1e9, 0).
  bool causal_mask(int v) const {
    const Eqn* s = is(v, Op::select);
    if (!s) return false;
    const Eqn* c = is(s->inputs[0], Op::compare);
    if (!c) return false;
    const bool future = (c->attrs.cmp == Cmp::GT && iota(c->inputs[0], 1) && iota(c->inputs[1], 0)) ||
                        (c->attrs.cmp == Cmp::LT && iota(c->inputs[0], 0) && iota(c->inputs[1], 1));
    double m = 0, z = 1;
    return future && splat(s->inputs[1], &m) && m <= kMaskAtMost && splat(s->inputs[2], &z) && z == 0.0;
  }
  // The broadcast_in_dim of v's definition with these dims: its operand, or -1.
  int unbroadcast(int v, const std::vector<int64_t>& dims) const {
    const Eqn* b = is(v, Op::broadcast_in_dim);
    return b && b->attrs.dims == dims ? b->inputs[0] : -1;
  }

  // Equation i is the last dot_general of causal_attention(q, k, v): {q, k, v}, or {}.
  std::vector<int> match(const Eqn& e) const {
    if (e.op != Op::dot_general || !dot_is(e, kTimesV)) return {};
    const int P = e.inputs[0], V = e.inputs[1];
    const Type vt = p_.type(V);
    if (vt.rank() != 4 || !is_float(vt.dtype)) return {};
    // P = exp(Z) / broadcast(sum(exp(Z), 3))
    const Eqn* div = is(P, Op::divide);
    if (!div) return {};
    const int E = div->inputs[0];
    const int sum = unbroadcast(div->inputs[1], {0, 1, 2});
    const Eqn* rs = sum < 0 ? nullptr : is(sum, Op::reduce_sum);
    const Eqn* ex = is(E, Op::exponential);
    if (!rs || rs->inputs[0] != E || rs->attrs.dims != std::vector<int64_t>{3} || !ex) return {};
    // Z = S - broadcast(max(S, 3))
    const Eqn* z = is(ex->inputs[0], Op::subtract);
    if (!z) return {};
    const int S = z->inputs[0];
    const int mx = unbroadcast(z->inputs[1], {0, 1, 2});
    const Eqn* rm = mx < 0 ? nullptr : is(mx, Op::reduce_max);
    if (!rm || rm->inputs[0] != S || rm->attrs.dims != std::vector<int64_t>{3}) return {};
    // S = scores * scale + broadcast(mask), either order
    const Eqn* add = is(S, Op::add);
    if (!add) return {};
    int scaled = -1;
    for (int side = 0; side < 2 && scaled < 0; ++side) {
      const int m = unbroadcast(add->inputs[static_cast<size_t>(side)], {2, 3});
      if (m >= 0 && causal_mask(m)) scaled = add->inputs[static_cast<size_t>(1 - side)];
    }
    if (scaled < 0) return {};
    const Eqn* mul = is(scaled, Op::multiply);
    if (!mul) return {};
    const double want = dtype_round(1.0 / std::sqrt(static_cast<double>(vt.shape[3])), vt.dtype);
    for (int side = 0; side < 2; ++side) {
      double c = 0;
      const Eqn* sc = is(mul->inputs[static_cast<size_t>(1 - side)], Op::dot_general);
      if (!splat(mul->inputs[static_cast<size_t>(side)], &c) || c != want || !sc || !dot_is(*sc, kScores)) continue;
      const int Q = sc->inputs[0], K = sc->inputs[1];
      if (p_.type(Q) != vt || p_.type(K) != vt) return {};
      return {Q, K, V};
    }
    return {};
  }

 private:
  const Program& p_;
  std::vector<int> def_;
};

Tensor attention_grad_expanded(Tracer& tr, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& dout, int64_t which) {
  if (q.dtype() == DType::bf16) {  // in f32, rounded once, as causal_attention
    auto w = [](const Tensor& t) { return convert(t, DType::f32); };
    return convert(attention_grad_expanded(tr, w(q), w(k), w(v), w(out), w(dout), which), DType::bf16);
  }
  const Shape s = q.shape();
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.dim(3)));
  Tensor scores = dot_general(q, k, kScores) * scale + causal_mask(tr, q.dim(2), q.dtype());
  Tensor p = softmax(scores, -1);
  if (which == 2) return dot_general(p, dout, kTransposed);
  Tensor dp = dot_general(dout, v, kScores);
  Tensor delta = sum(dout * out, {3});
  Tensor ds = p * (dp - broadcast_in_dim(delta, dp.shape(), {0, 1, 2}));
  if (which == 0) return dot_general(ds, k, kTimesV) * scale;
  return dot_general(ds, q, kTransposed) * scale;
}

}  // namespace

Program fuse_attention(const Program& p) {
  verify(p);
  const Matcher m(p);
  Program q = p;
  bool any = false;
  for (Eqn& e : q.eqns) {
    const std::vector<int> qkv = m.match(e);
    if (qkv.empty()) continue;
    e.op = Op::attention;
    e.inputs = qkv;
    const int32_t region = e.attrs.region;
    e.attrs = Attrs{};
    e.attrs.region = region;
    any = true;
  }
  if (!any) return q;
  q = dead_code_eliminate(q);
  verify(q);
  return q;
}

bool has_attention(const Program& p) {
  for (const Eqn& e : p.eqns)
    if (e.op == Op::attention || e.op == Op::attention_grad) return true;
  return false;
}

Program expand_attention(const Program& p) {
  verify(p);
  if (!has_attention(p)) return p;
  return trace_detail::retrace(p, [](Tracer& tr, const Eqn& e, const std::vector<Tensor>& val) -> Tensor {
    auto x = [&](size_t i) { return val[static_cast<size_t>(e.inputs[i])]; };
    if (e.op == Op::attention) return causal_attention(x(0), x(1), x(2));
    if (e.op == Op::attention_grad) return attention_grad_expanded(tr, x(0), x(1), x(2), x(3), x(4), e.attrs.axis);
    return {};  // copied as it is
  });
}

}  // namespace capstep
