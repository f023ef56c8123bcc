// Every primitive of the op table (include/capstep/ir.h), in every dtype its
// shape rule accepts, over several shapes (scalars, empty values, odd sizes,
// and, where the op has them, broadcast and transposed operands feeding it),
// on every backend through capstep/backend.h only: host, host unfused, PJRT,
// CUDA and CUDA unfused (ggml's tests/test-backend-ops.cpp is the model).
// PJRT runs where a plugin is (CAPSTEP_PJRT_PLUGIN, else the checkout's
// .pjrt-plugin/, as tests/test_util.h finds it); CUDA where a GPU is; each
// skips by name otherwise. The PJRT backend keeps its compiled programs in
// pjrt-cache/ beside this binary (the build directory), so a second run
// loads them instead of compiling them again.
//
// The reference is each primitive's definition (ir.h) computed here, in
// double (long double for exp, log, tanh, sqrt and rsqrt, whose f64 results
// would otherwise carry the reference's own rounding), on the inputs as the
// backend holds them (already rounded to their dtype); never a backend.
// Each output element must satisfy
//   |got - want| <= ulps * ulp(want) + err
// (or both NaN), where ulp() is the spacing of the output dtype at |want|
// (its smallest subnormal spacing near 0), `ulps` is the op's bound below, and
// `err` is an absolute bound the reference carries per element, for results
// whose rounding depends on the order of a backend's operations. Integers and
// i1 are exact (ulps 0, err 0). The bounds:
//   - Correctly rounded ops, 0.5 ulp: add, subtract, multiply, divide, sqrt in
//     f32, f64 and bf16 (bf16 computed in f32 and rounded once more is still
//     correctly rounded: f32's 24 bits are more than 2 * 8 + 2, so the double
//     rounding is innocuous, and the same holds for the reference's own
//     double rounding of an f32 result computed in double).
//   - Exact ops, 0: maximum, negate, compare, select, the layout ops,
//     gather_rows, constant, iota, all_reduce of one replica, reduce_max, and
//     convert (whose reference is its one rounding into the result dtype).
//   - exp, log, tanh: 2 ulp in f32 and f64 (the host's own f32 formulas and
//     CUDA's expf/logf/tanhf are within 2 ulp; glibc's double ones within 1);
//     rsqrt: 2 ulp (a square root rounded, then a division rounded: a
//     relative error of 2u is at most 2 ulp). bf16 computes these in f32
//     and rounds once: 0.5 bf16 ulp plus 2 f32 ulps, 0.5 + 2^-14 bf16 ulp.
//   - Sums (reduce_sum, dot_general) of n terms in any order, accumulated in
//     f32 (f32 and bf16 operands) or f64: the classic bound
//     gamma(n) * sum |term|, gamma(n) = n u / (1 - n u), u = 2^-24 or 2^-53,
//     as err; then 0.5 ulp for the final rounding into the dtype (bf16
//     reduce_sum is accumulated in f32 and rounded once). scatter_add_rows
//     adds each update into its row in the row's dtype: the same bound with
//     u the dtype's own unit roundoff (2^-8 in bf16).
//   - attention and attention_grad: a first-order error analysis of the
//     softmax and the sums (attention_probs and attention_ref below), with u
//     the unit roundoff of the operands' dtype, as err; then 0.5 ulp.
//   - adamw: its definition rounds each operation to f32 in a fixed order,
//     and the reference does the same: 0 ulp.
// Known deviations of a backend from these bounds are in kDeviations, each
// with the bound it needs and why; nothing else is widened. Op x dtype pairs
// a shape rule accepts but a backend refuses are in kUnsupported, with the
// Error the backend must give.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "capstep/backend.h"
#include "capstep/ir.h"
#include "ir/bf16.h"
#include "test_util.h"

using namespace capstep;

namespace {

// ---- the backends ------------------------------------------------------------------

struct Variant {
  const char* name;
  BackendKind kind;
  bool fuse;
};
const Variant kVariants[] = {{"host", BackendKind::host, true},
                             {"host_unfused", BackendKind::host, false},
                             {"pjrt", BackendKind::pjrt, true},
                             {"cuda", BackendKind::cuda, true},
                             {"cuda_unfused", BackendKind::cuda, false}};
constexpr int kNumVariants = static_cast<int>(sizeof kVariants / sizeof kVariants[0]);

// pjrt-cache/ beside the test binary: the build directory, never the sources.
std::string pjrt_cache_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : (exe.parent_path() / "pjrt-cache").string();
}

BackendOptions options_for(const Variant& v) {
  BackendOptions o;
  o.host.fuse = v.fuse;
  o.cuda.fuse = v.fuse;
  o.cuda.tf32 = false;  // f32 dots in f32: TF32 would need bounds of its own
  if (v.kind == BackendKind::pjrt) {
    std::string why;
    o.pjrt.plugin = test::pjrt_plugin(&why);
    o.pjrt.cache_dir = pjrt_cache_dir();
  }
  return o;
}

// Why `v` is skipped here, or "" when it runs.
std::string skip_reason(const Variant& v) {
  std::string why;
  if (v.kind == BackendKind::pjrt) return test::pjrt_plugin(&why).empty() ? why : "";
  return backend_available(v.kind, options_for(v), &why) ? "" : why;
}

// ---- numbers -------------------------------------------------------------------------

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i1};

// The value a store of x into dtype d holds (the one rounding of convert).
double round_to(double x, DType d) {
  switch (d) {
    case DType::f32: return static_cast<double>(static_cast<float>(x));
    case DType::f64: return x;
    case DType::bf16: return bf16::round_double(x);
    case DType::i32: return std::trunc(x);
    case DType::i1: return x != 0 ? 1.0 : 0.0;
  }
  return x;
}

// The spacing of dtype d's values at |x| (the subnormal spacing below the
// smallest normal); 0 for integers.
double ulp(double x, DType d) {
  int p = 0, emin = 0;
  switch (d) {
    case DType::f32: p = 24, emin = -126; break;
    case DType::f64: p = 53, emin = -1022; break;
    case DType::bf16: p = 8, emin = -126; break;
    case DType::i32:
    case DType::i1: return 0;
  }
  x = std::fabs(x);
  if (!std::isfinite(x)) return 0;
  const int e = x == 0 ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(1.0, e - (p - 1));
}

// Unit roundoff of the accumulation a sum of dtype d's values has (f32 for
// bf16 operands), and of d's own arithmetic.
double sum_roundoff(DType d) { return d == DType::f64 ? 0x1p-53 : 0x1p-24; }
double roundoff(DType d) { return d == DType::f64 ? 0x1p-53 : d == DType::bf16 ? 0x1p-8 : 0x1p-24; }
double gamma(double n, double u) { return n * u / (1 - n * u); }

int32_t wrap32(int64_t x) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(x))); }

Shape unravel(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t a = s.size(); a-- > 0;) {
    idx[a] = s[a] ? i % s[a] : 0;
    i = s[a] ? i / s[a] : 0;
  }
  return idx;
}
int64_t ravel(const Shape& idx, const Shape& s) {
  int64_t i = 0;
  for (size_t a = 0; a < s.size(); ++a) i = i * s[a] + idx[a];
  return i;
}
int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// ---- the reference ---------------------------------------------------------------------

// A value of the reference: its elements in double and, per element, an
// absolute error bound for order-dependent results (err); adamw also carries
// the bound its equations allow when a backend contracts or reorders them
// (fused_err, read only under a deviation that names it).
struct Ref {
  Type type;
  std::vector<double> v, err, fused_err;
  explicit Ref(Type t = {}) : type(std::move(t)) {
    const size_t n = static_cast<size_t>(type.numel());
    v.assign(n, 0.0);
    err.assign(n, 0.0);
  }
};

double binary_ref(BinaryOp op, DType d, double a, double b) {
  if (d == DType::i32) {
    const int64_t x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
    switch (op) {
      case BinaryOp::add: return wrap32(x + y);
      case BinaryOp::subtract: return wrap32(x - y);
      case BinaryOp::multiply: return wrap32(x * y);
      case BinaryOp::divide:  // XLA's definition, which the host follows: x / 0 = -1, INT_MIN / -1 = INT_MIN
        if (y == 0) return -1;
        return wrap32(x / y);
      case BinaryOp::maximum: return static_cast<double>(std::max(x, y));
    }
  }
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::subtract: return a - b;
    case BinaryOp::multiply: return a * b;
    case BinaryOp::divide: return a / b;
    case BinaryOp::maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  }
  return NAN;
}

double unary_ref(UnaryOp op, DType d, double a) {
  const long double x = a;
  switch (op) {
    case UnaryOp::negate: return d == DType::i32 ? wrap32(-static_cast<int64_t>(a)) : -a;
    case UnaryOp::exponential: return static_cast<double>(expl(x));
    case UnaryOp::log: return static_cast<double>(logl(x));
    case UnaryOp::tanh: return static_cast<double>(tanhl(x));
    case UnaryOp::rsqrt: return static_cast<double>(1.0L / sqrtl(x));
    case UnaryOp::sqrt: return static_cast<double>(sqrtl(x));
  }
  return NAN;
}

bool compare_ref(Cmp c, double a, double b) {
  switch (c) {
    case Cmp::EQ: return a == b;
    case Cmp::NE: return a != b;
    case Cmp::LT: return a < b;
    case Cmp::LE: return a <= b;
    case Cmp::GT: return a > b;
    case Cmp::GE: return a >= b;
  }
  return false;
}

// Causal attention over [B,H,T,Dh] in double, with the first-order bounds of
// the header: for row t, the scaled scores carry at most
//   ds = gamma(Dh + 2) * max_s sum_d |q k| / sqrt(Dh)
// (a sum of Dh products and the scale), the max shift as much again, so each
// probability p[t,s] is within a relative
//   ep = 2 ds + 4u + gamma(T + 2)
// (the exponential within 2 ulp, the row sum, the division); a sum over s of
// p times a value adds gamma(T + 1) of sum p |value|.
struct Attention {
  int64_t B, H, T, D;
  std::vector<double> p, ep;  // [B,H,T,T] probabilities; [B,H,T] their relative bound
};
Attention attention_probs(const Ref& q, const Ref& k, double u) {
  const Shape& s = q.type.shape;
  Attention a{s[0], s[1], s[2], s[3], {}, {}};
  a.p.assign(static_cast<size_t>(a.B * a.H * a.T * a.T), 0.0);
  a.ep.assign(static_cast<size_t>(a.B * a.H * a.T), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(a.D));
  for (int64_t bh = 0; bh < a.B * a.H; ++bh)
    for (int64_t t = 0; t < a.T; ++t) {
      std::vector<double> sc(static_cast<size_t>(t + 1));
      double m = -INFINITY, ds = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0, mag = 0;
        for (int64_t d = 0; d < a.D; ++d) {
          const double x = q.v[static_cast<size_t>((bh * a.T + t) * a.D + d)], y = k.v[static_cast<size_t>((bh * a.T + j) * a.D + d)];
          dot += x * y;
          mag += std::fabs(x * y);
        }
        sc[static_cast<size_t>(j)] = dot * scale;
        ds = std::max(ds, gamma(static_cast<double>(a.D + 2), u) * mag * scale);
        m = std::max(m, dot * scale);
      }
      double z = 0;
      for (double& x : sc) z += (x = std::exp(x - m));
      for (int64_t j = 0; j <= t; ++j) a.p[static_cast<size_t>((bh * a.T + t) * a.T + j)] = sc[static_cast<size_t>(j)] / z;
      a.ep[static_cast<size_t>(bh * a.T + t)] = 2 * ds + 4 * u + gamma(static_cast<double>(a.T + 2), u);
    }
  return a;
}

Ref attention_ref(const Eqn& e, const std::vector<const Ref*>& x, const Type& out) {
  const double u = roundoff(out.dtype);
  const Attention a = attention_probs(*x[0], *x[1], u);
  Ref r(out);
  const double gT = gamma(static_cast<double>(a.T + 1), u), scale = 1 / std::sqrt(static_cast<double>(a.D));
  auto P = [&](int64_t bh, int64_t t, int64_t s) { return a.p[static_cast<size_t>((bh * a.T + t) * a.T + s)]; };
  auto EP = [&](int64_t bh, int64_t t) { return a.ep[static_cast<size_t>(bh * a.T + t)]; };
  auto at = [&](const Ref& v, int64_t bh, int64_t t, int64_t d) { return v.v[static_cast<size_t>((bh * a.T + t) * a.D + d)]; };
  auto put = [&](int64_t bh, int64_t t, int64_t d, double val, double err) {
    r.v[static_cast<size_t>((bh * a.T + t) * a.D + d)] = val;
    r.err[static_cast<size_t>((bh * a.T + t) * a.D + d)] = err;
  };
  const Ref &q = *x[0], &k = *x[1], &v = *x[2];
  for (int64_t bh = 0; bh < a.B * a.H; ++bh) {
    if (e.op == Op::attention) {
      for (int64_t t = 0; t < a.T; ++t)
        for (int64_t d = 0; d < a.D; ++d) {
          double o = 0, mag = 0;
          for (int64_t s = 0; s <= t; ++s) {
            o += P(bh, t, s) * at(v, bh, s, d);
            mag += P(bh, t, s) * std::fabs(at(v, bh, s, d));
          }
          put(bh, t, d, o, (EP(bh, t) + gT) * mag);
        }
      continue;
    }
    // attention_grad: dS = p * (dout.v^T - D), D[t] = dout[t].out[t].
    const Ref &o = *x[3], &g = *x[4];
    std::vector<double> dS(static_cast<size_t>(a.T * a.T), 0.0), dSerr(dS.size(), 0.0);
    const double gD = gamma(static_cast<double>(a.D + 1), u);
    for (int64_t t = 0; t < a.T; ++t) {
      double Dt = 0, Dmag = 0;
      for (int64_t d = 0; d < a.D; ++d) {
        Dt += at(g, bh, t, d) * at(o, bh, t, d);
        Dmag += std::fabs(at(g, bh, t, d) * at(o, bh, t, d));
      }
      for (int64_t s = 0; s <= t; ++s) {
        double dv = 0, mag = 0;
        for (int64_t d = 0; d < a.D; ++d) {
          dv += at(g, bh, t, d) * at(v, bh, s, d);
          mag += std::fabs(at(g, bh, t, d) * at(v, bh, s, d));
        }
        const size_t i = static_cast<size_t>(t * a.T + s);
        dS[i] = P(bh, t, s) * (dv - Dt);
        dSerr[i] = P(bh, t, s) * ((EP(bh, t) + u) * std::fabs(dv - Dt) + gD * (mag + Dmag) + 2 * u * std::fabs(dv - Dt));
      }
    }
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t d = 0; d < a.D; ++d) {
        double val = 0, err = 0, mag = 0;
        for (int64_t s = 0; s < a.T; ++s) {
          const size_t ts = static_cast<size_t>(t * a.T + s), st = static_cast<size_t>(s * a.T + t);
          if (e.attrs.axis == 0 && s <= t) {  // dq[t] = sum_s dS[t,s] k[s] / sqrt(Dh)
            val += dS[ts] * at(k, bh, s, d) * scale;
            err += dSerr[ts] * std::fabs(at(k, bh, s, d)) * scale;
            mag += std::fabs(dS[ts] * at(k, bh, s, d)) * scale;
          } else if (e.attrs.axis == 1 && s >= t) {  // dk[t] = sum_s dS[s,t] q[s] / sqrt(Dh)
            val += dS[st] * at(q, bh, s, d) * scale;
            err += dSerr[st] * std::fabs(at(q, bh, s, d)) * scale;
            mag += std::fabs(dS[st] * at(q, bh, s, d)) * scale;
          } else if (e.attrs.axis == 2 && s >= t) {  // dv[t] = sum_s p[s,t] dout[s]
            val += P(bh, s, t) * at(g, bh, s, d);
            err += EP(bh, s) * P(bh, s, t) * std::fabs(at(g, bh, s, d));
            mag += P(bh, s, t) * std::fabs(at(g, bh, s, d));
          }
        }
        put(bh, t, d, val, err + gamma(static_cast<double>(a.T + 2), u) * mag);
      }
  }
  return r;
}

// adamw's definition: each operation rounded to f32 in its order, with the
// constants beta1, 1 - beta1, beta2, 1 - beta2 and eps stored as f32. Beside
// it, fused_err: a first-order bound of how far the same equations may land
// when a backend contracts a multiply and an add into one FMA or otherwise
// skips or moves a rounding: each operation's own rounding, u |result|, and
// the bounds of its operands carried through it.
Ref adamw_ref(const Eqn& e, const std::vector<const Ref*>& x, const Type& out) {
  Ref r(out);
  r.fused_err.assign(r.v.size(), 0.0);
  const double u = 0x1p-24;
  auto f = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  const double b1 = f(e.attrs.literal[0]), c1 = f(1.0 - e.attrs.literal[0]), b2 = f(e.attrs.literal[1]),
               c2 = f(1.0 - e.attrs.literal[1]), eps = f(e.attrs.literal[2]);
  const double lr = x[4]->v[0], bc1 = x[5]->v[0], bc2 = x[6]->v[0], decay = x[7]->v[0];
  for (size_t i = 0; i < r.v.size(); ++i) {
    const double p = x[0]->v[i], g = x[1]->v[i], m = x[2]->v[i], v = x[3]->v[i];
    const double mb = f(m * b1), gc = f(g * c1), m1 = f(mb + gc);
    const double gg = f(g * g), vb = f(v * b2), gc2 = f(gg * c2), v1 = f(vb + gc2);
    const double mh = f(m1 * bc1), vh = f(v1 * bc2), sq = f(std::sqrt(vh)), den = f(sq + eps);
    const double upd = f(mh / den), pd = f(p * decay), step = f(lr * upd), p1 = f(pd - step);
    // the bounds, first order
    const double em = u * (std::fabs(mb) + std::fabs(gc) + std::fabs(m1));
    const double ev = u * (std::fabs(vb) + std::fabs(gg * c2) + std::fabs(gc2) + std::fabs(v1));
    const double emh = em * bc1 + u * std::fabs(mh), evh = ev * bc2 + u * std::fabs(vh);
    const double esq = (vh > 0 ? evh / (2 * sq) : std::sqrt(evh)) + u * sq, eden = esq + u * den;
    const double eupd = emh / den + std::fabs(upd) * eden / den + u * std::fabs(upd);
    const double ep = u * std::fabs(pd) + lr * eupd + u * std::fabs(step) + u * std::fabs(p1);
    r.v[i] = e.attrs.axis == 0 ? p1 : e.attrs.axis == 1 ? m1 : v1;
    r.fused_err[i] = e.attrs.axis == 0 ? ep : e.attrs.axis == 1 ? em : ev;
  }
  return r;
}

// One equation of the reference, from its definition in ir.h.
Ref eval(const Program& prog, const Eqn& e, const std::vector<const Ref*>& x) {
  const Type& out = prog.type(e.out);
  const Attrs& at = e.attrs;
  Ref r(out);
  const size_t n = r.v.size();
  switch (e.op) {
    case Op::constant:
      for (size_t i = 0; i < n; ++i) r.v[i] = round_to(at.literal[at.literal.size() == 1 ? 0 : i], out.dtype);
      return r;
    case Op::iota:
      for (size_t i = 0; i < n; ++i)
        r.v[i] = static_cast<double>(unravel(static_cast<int64_t>(i), out.shape)[static_cast<size_t>(at.axis)]);
      return r;
    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
      for (size_t i = 0; i < n; ++i) r.v[i] = binary_ref(binary_op(e.op), out.dtype, x[0]->v[i], x[1]->v[i]);
      return r;
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
      for (size_t i = 0; i < n; ++i) r.v[i] = unary_ref(unary_op(e.op), out.dtype, x[0]->v[i]);
      return r;
    case Op::compare:
      for (size_t i = 0; i < n; ++i) r.v[i] = compare_ref(at.cmp, x[0]->v[i], x[1]->v[i]) ? 1 : 0;
      return r;
    case Op::select:
      for (size_t i = 0; i < n; ++i) r.v[i] = x[0]->v[i] != 0 ? x[1]->v[i] : x[2]->v[i];
      return r;
    case Op::convert:
      for (size_t i = 0; i < n; ++i) r.v[i] = round_to(x[0]->v[i], out.dtype);
      return r;
    case Op::broadcast_in_dim: {
      const Shape& is = x[0]->type.shape;
      for (size_t j = 0; j < n; ++j) {
        const Shape oj = unravel(static_cast<int64_t>(j), out.shape);
        Shape ii(is.size());
        for (size_t k = 0; k < ii.size(); ++k) ii[k] = is[k] == 1 ? 0 : oj[static_cast<size_t>(at.dims[k])];
        r.v[j] = x[0]->v[static_cast<size_t>(ravel(ii, is))];
      }
      return r;
    }
    case Op::reshape:
    case Op::all_reduce:  // one replica: the identity
      r.v = x[0]->v;
      r.err = x[0]->err;
      return r;
    case Op::transpose: {
      const Shape& is = x[0]->type.shape;
      for (size_t j = 0; j < n; ++j) {
        const Shape oj = unravel(static_cast<int64_t>(j), out.shape);
        Shape ii(is.size());
        for (size_t k = 0; k < ii.size(); ++k) ii[static_cast<size_t>(at.dims[k])] = oj[k];
        r.v[j] = x[0]->v[static_cast<size_t>(ravel(ii, is))];
      }
      return r;
    }
    case Op::dot_general: {
      const Shape &ls = x[0]->type.shape, &rs = x[1]->type.shape;
      const std::vector<int64_t> lf = dot_free_axes(static_cast<int>(ls.size()), at.lhs_batch, at.lhs_contract);
      const std::vector<int64_t> rf = dot_free_axes(static_cast<int>(rs.size()), at.rhs_batch, at.rhs_contract);
      Shape cs;
      for (int64_t d : at.lhs_contract) cs.push_back(ls[static_cast<size_t>(d)]);
      const int64_t nc = numel(cs);
      const double g = gamma(static_cast<double>(nc), sum_roundoff(x[0]->type.dtype));
      for (size_t o = 0; o < n; ++o) {
        const Shape oi = unravel(static_cast<int64_t>(o), out.shape);
        Shape li(ls.size()), ri(rs.size());
        size_t k = 0;
        for (size_t b = 0; b < at.lhs_batch.size(); ++b, ++k) {
          li[static_cast<size_t>(at.lhs_batch[b])] = oi[k];
          ri[static_cast<size_t>(at.rhs_batch[b])] = oi[k];
        }
        for (int64_t d : lf) li[static_cast<size_t>(d)] = oi[k++];
        for (int64_t d : rf) ri[static_cast<size_t>(d)] = oi[k++];
        long double sum = 0, mag = 0;
        for (int64_t c = 0; c < nc; ++c) {
          const Shape ci = unravel(c, cs);
          for (size_t j = 0; j < cs.size(); ++j) {
            li[static_cast<size_t>(at.lhs_contract[j])] = ci[j];
            ri[static_cast<size_t>(at.rhs_contract[j])] = ci[j];
          }
          const long double t = static_cast<long double>(x[0]->v[static_cast<size_t>(ravel(li, ls))]) *
                                x[1]->v[static_cast<size_t>(ravel(ri, rs))];
          sum += t;
          mag += fabsl(t);
        }
        r.v[o] = static_cast<double>(sum);
        r.err[o] = g * static_cast<double>(mag);
      }
      return r;
    }
    case Op::reduce_sum:
    case Op::reduce_max: {
      const Shape& is = x[0]->type.shape;
      const bool mx = e.op == Op::reduce_max;
      const bool i32 = out.dtype == DType::i32;
      std::vector<long double> acc(n, mx ? (i32 ? static_cast<long double>(INT32_MIN) : -INFINITY) : 0.0L), mag(n, 0.0L);
      std::vector<int64_t> iacc(n, mx ? INT32_MIN : 0);
      const int64_t terms = out.numel() ? x[0]->type.numel() / std::max<int64_t>(out.numel(), 1) : 0;
      for (int64_t i = 0; i < x[0]->type.numel(); ++i) {
        const Shape ii = unravel(i, is);
        Shape oi;
        for (size_t a = 0; a < ii.size(); ++a)
          if (std::find(at.dims.begin(), at.dims.end(), static_cast<int64_t>(a)) == at.dims.end()) oi.push_back(ii[a]);
        const size_t o = static_cast<size_t>(ravel(oi, out.shape));
        const double v = x[0]->v[static_cast<size_t>(i)];
        if (i32) iacc[o] = mx ? std::max<int64_t>(iacc[o], static_cast<int64_t>(v)) : iacc[o] + static_cast<int64_t>(v);
        else if (mx) acc[o] = std::isnan(static_cast<double>(acc[o])) || std::isnan(v) ? NAN : std::max<long double>(acc[o], v);
        else {
          acc[o] += v;
          mag[o] += std::fabs(v);
        }
      }
      for (size_t o = 0; o < n; ++o) {
        r.v[o] = i32 ? wrap32(iacc[o]) : static_cast<double>(acc[o]);
        if (!mx && !i32) r.err[o] = gamma(static_cast<double>(terms), sum_roundoff(out.dtype)) * static_cast<double>(mag[o]);
      }
      return r;
    }
    case Op::gather_rows: {
      const int64_t row = numel(Shape(x[0]->type.shape.begin() + 1, x[0]->type.shape.end()));
      for (size_t s = 0; s < x[1]->v.size(); ++s)
        for (int64_t j = 0; j < row; ++j)
          r.v[s * static_cast<size_t>(row) + static_cast<size_t>(j)] =
              x[0]->v[static_cast<size_t>(static_cast<int64_t>(x[1]->v[s]) * row + j)];
      return r;
    }
    case Op::scatter_add_rows: {
      const int64_t row = numel(Shape(out.shape.begin() + 1, out.shape.end()));
      r.v = x[0]->v;
      std::vector<double> mag(n), terms(n, 1.0);
      for (size_t i = 0; i < n; ++i) mag[i] = std::fabs(r.v[i]);
      std::vector<int64_t> iv(r.v.begin(), r.v.end());
      for (size_t s = 0; s < x[1]->v.size(); ++s)
        for (int64_t j = 0; j < row; ++j) {
          const size_t o = static_cast<size_t>(static_cast<int64_t>(x[1]->v[s]) * row + j);
          const double up = x[2]->v[s * static_cast<size_t>(row) + static_cast<size_t>(j)];
          r.v[o] += up;
          iv[o] += static_cast<int64_t>(up);
          mag[o] += std::fabs(up);
          terms[o] += 1;
        }
      for (size_t i = 0; i < n; ++i) {
        if (out.dtype == DType::i32) r.v[i] = wrap32(iv[i]);
        else r.err[i] = gamma(terms[i], roundoff(out.dtype)) * mag[i];
      }
      return r;
    }
    case Op::attention:
    case Op::attention_grad: return attention_ref(e, x, out);
    case Op::adamw: return adamw_ref(e, x, out);
    case Op::slice: {
      const Shape& is = x[0]->type.shape;
      for (size_t j = 0; j < n; ++j) {
        Shape ii = unravel(static_cast<int64_t>(j), out.shape);
        for (size_t k = 0; k < ii.size(); ++k) ii[k] = at.starts[k] + ii[k] * at.strides[k];
        r.v[j] = x[0]->v[static_cast<size_t>(ravel(ii, is))];
      }
      return r;
    }
    case Op::pad: {
      const Shape& is = x[0]->type.shape;
      for (int64_t i = 0; i < x[0]->type.numel(); ++i) {
        Shape ii = unravel(i, is);
        for (size_t k = 0; k < ii.size(); ++k) ii[k] += at.lows[k];
        r.v[static_cast<size_t>(ravel(ii, out.shape))] = x[0]->v[static_cast<size_t>(i)];
      }
      return r;
    }
    case Op::concatenate: {
      const size_t ax = static_cast<size_t>(at.axis);
      for (size_t j = 0; j < n; ++j) {
        Shape oj = unravel(static_cast<int64_t>(j), out.shape);
        size_t i = 0;
        while (oj[ax] >= x[i]->type.shape[ax]) oj[ax] -= x[i++]->type.shape[ax];
        r.v[j] = x[i]->v[static_cast<size_t>(ravel(oj, x[i]->type.shape))];
      }
      return r;
    }
  }
  return r;
}

std::vector<Ref> reference(const Program& p, const std::vector<Array>& in) {
  std::vector<Ref> val(static_cast<size_t>(p.num_values()));
  for (size_t i = 0; i < in.size(); ++i) {
    Ref& r = val[static_cast<size_t>(p.inputs[i].value)];
    r = Ref(in[i].type());
    r.v = in[i].to_doubles();
  }
  for (const Eqn& e : p.eqns) {
    std::vector<const Ref*> x;
    for (int v : e.inputs) x.push_back(&val[static_cast<size_t>(v)]);
    val[static_cast<size_t>(e.out)] = eval(p, e, x);
  }
  std::vector<Ref> out;
  for (const NamedValue& o : p.outputs) out.push_back(val[static_cast<size_t>(o.value)]);
  return out;
}

// ---- known deviations -------------------------------------------------------------------

// Where a backend's results are known to leave the header's bounds, and the
// bound each needs (in ulps of the output dtype, or the reference's
// fused_err); a match widens that backend, op and dtype only.
struct Deviation {
  BackendKind kind;
  Op op;
  DType dtype;          // the op's operand dtype (convert: its source)
  double ulps;          // the bound it needs instead of the op's own
  bool nan_dropped;     // a NaN operand may be dropped: the other operand (or the max of the others) is accepted
  bool fused;           // the reference's fused_err instead of exact
  const char* why;
  double err_scale = 1; // the reference's err (a sum's bound) times this
};
const Deviation kDeviations[] = {
    // XLA contracts a multiply and an add into one FMA (one rounding instead
    // of two), so the update lands within the first-order bound of its
    // equations' roundings instead of on the definition's bits.
    {BackendKind::pjrt, Op::adamw, DType::f32, 0, false, true, "FMA contraction"},
    // XLA's CPU maximum returns the other operand where one is NaN (it does
    // not propagate NaN), in maximum and in a max reduction alike.
    {BackendKind::pjrt, Op::maximum, DType::f32, 0, true, false, "NaN dropped by max"},
    {BackendKind::pjrt, Op::maximum, DType::f64, 0, true, false, "NaN dropped by max"},
    {BackendKind::pjrt, Op::maximum, DType::bf16, 0, true, false, "NaN dropped by max"},
    {BackendKind::pjrt, Op::reduce_max, DType::f32, 0, true, false, "NaN dropped by max"},
    {BackendKind::pjrt, Op::reduce_max, DType::f64, 0, true, false, "NaN dropped by max"},
    {BackendKind::pjrt, Op::reduce_max, DType::bf16, 0, true, false, "NaN dropped by max"},
    // XLA divides by a broadcast divisor as a multiply by its reciprocal: two
    // roundings, a relative error of 2u, at most 2 ulp.
    {BackendKind::pjrt, Op::divide, DType::f32, 2, false, false, "x * (1 / y)"},
    {BackendKind::pjrt, Op::divide, DType::f64, 2, false, false, "x * (1 / y)"},
    // XLA's tanh is its own rational approximation, 3 ulp from the correctly
    // rounded value at worst on these inputs (f32 and f64): 4 ulp allowed.
    {BackendKind::pjrt, Op::tanh, DType::f32, 4, false, false, "XLA's tanh approximation"},
    {BackendKind::pjrt, Op::tanh, DType::f64, 4, false, false, "XLA's tanh approximation"},
    // XLA converts f64 to bf16 through f32: rounded twice, so a value just
    // above a bf16 halfway point (1 + 2^-8 + 2^-30) lands one bf16 ulp from
    // the once-rounded result.
    {BackendKind::pjrt, Op::convert, DType::f64, 1, false, false, "f64 -> f32 -> bf16 double rounding"},
    // cuBLASLt's bf16 tensor-core GEMMs may truncate their f32 additions: each
    // within 2^-22 of a partial sum instead of 2^-24, four times the sum's bound.
    {BackendKind::cuda, Op::dot_general, DType::bf16, 0, false, false, "tensor-core additions", 4},
};

// Op x dtype pairs that a shape rule accepts but a backend refuses when it
// is made, with the Error it must give (a clear one: the op and the dtype).
struct Unsupported {
  BackendKind kind;
  Op op;
  DType dtype;
  const char* error;  // a substring of the Error
};
const Unsupported kUnsupported[] = {
    {BackendKind::host, Op::attention, DType::bf16, "attention: no host kernel for bf16"},
    {BackendKind::host, Op::attention_grad, DType::bf16, "attention_grad: no host kernel for bf16"},
    // cuda::check_supported: the GPU's attention kernels are f32 and f64 only.
    {BackendKind::cuda, Op::attention, DType::bf16, "has a bf16 attention"},
    {BackendKind::cuda, Op::attention_grad, DType::bf16, "has a bf16 attention"},
};

const Unsupported* unsupported(BackendKind k, Op op, DType d) {
  for (const Unsupported& x : kUnsupported)
    if (x.kind == k && x.op == op && x.dtype == d) return &x;
  return nullptr;
}

const Deviation* deviation(BackendKind k, Op op, DType d) {
  for (const Deviation& x : kDeviations)
    if (x.kind == k && x.op == op && x.dtype == d) return &x;
  return nullptr;
}

// ---- the cases -----------------------------------------------------------------------

struct OpCase {
  std::string name;
  Op op;
  DType dtype;  // the op's operand dtype (convert: its source)
  double ulps;  // the op's bound (the header)
  Program program;
  std::vector<Array> inputs;
};

// Deterministic values in [lo, hi), rounded to t's dtype by the Array;
// integers floored, i1 0 or 1.
Array random_input(const Type& t, uint32_t seed, double lo = -2, double hi = 2) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  uint64_t s = 0x9E3779B97F4A7C15ull ^ (seed * 0x2545F4914F6CDD1Dull);
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / 9007199254740992.0;
    if (t.dtype == DType::i32) x = std::floor(x);
    if (t.dtype == DType::i1) x = x < (lo + hi) / 2 ? 0 : 1;
  }
  return Array::from_doubles(t, v);
}

// Shapes every elementwise op runs on: a scalar, empty ones, odd sizes.
const Shape kShapes[] = {{}, {0}, {2, 0, 3}, {7}, {5, 13}, {3, 17, 19}};

std::string dn(DType d) { return dtype_name(d); }

// The bound of an elementwise op in the header, for operand dtype d.
double elementwise_ulps(Op op, DType d) {
  if (d == DType::i32 || d == DType::i1) return 0;
  const bool b = d == DType::bf16;
  if (op == Op::exponential || op == Op::log || op == Op::tanh || op == Op::rsqrt) return b ? 0.5 + 0x1p-14 : 2;
  if (op == Op::maximum || op == Op::negate) return 0;
  return 0.5;  // add, subtract, multiply, divide, sqrt
}

// Builds p's one equation of `op` on inputs of types `in` (given: its result
// type where the op needs one); throws the shape rule's Error when it
// rejects them.
Program one_op(Op op, const std::vector<Type>& in, const Attrs& a = {}, const Type* given = nullptr) {
  Program p;
  p.name = op_name(op);
  std::vector<int> ids;
  for (size_t i = 0; i < in.size(); ++i) ids.push_back(p.add_input("x" + std::to_string(i), in[i]));
  const int out = given ? p.add_eqn_typed(op, ids, a, *given) : p.add_eqn(op, ids, a);
  p.add_output("y", out);
  return p;
}

// What a generator throws for a dtype a case does not apply to (NaN in integers).
const char* const kNotForThisDtype = "not for this dtype";

struct Cases {
  std::vector<OpCase> list;
  uint32_t seed = 1;
  // Adds a case; a shape rule's Error means the op does not take dtype d there: skipped.
  template <class Make>
  void add(Op op, DType d, const std::string& name, double ulps, Make make) {
    Program p;
    std::vector<Array> in;
    try {
      make(p, in);
    } catch (const Error& e) {
      // Only a shape rule's refusal ("op(types): why") or the generator's own
      // "not for this dtype" skips the case; any other Error is the test's.
      const std::string m = e.what();
      bool shape_rule = m == kNotForThisDtype;
      for (int k = 0; k < kNumOps; ++k) shape_rule = shape_rule || m.rfind(std::string(op_name(static_cast<Op>(k))) + "(", 0) == 0;
      if (!shape_rule) throw;
      return;
    }
    list.push_back({std::string(op_name(op)) + " " + name, op, d, ulps, std::move(p), std::move(in)});
  }
  Array input(const Type& t, double lo = -2, double hi = 2) { return random_input(t, seed++, lo, hi); }
};

// Values of dtype d in [lo, hi), with NaN and infinities at the first
// elements for floats (where there are that many).
Array with_specials(Array a) {
  if (!is_float(a.dtype())) return a;
  const double sp[] = {NAN, INFINITY, -INFINITY};
  for (int64_t i = 0; i < std::min<int64_t>(3, a.numel()); ++i) a.set(i * 2, sp[i]);
  return a;
}

void elementwise_cases(Op op, Cases& c) {
  const bool unary = op_kind(op) == OpKind::unary;
  const bool positive = op == Op::log || op == Op::rsqrt || op == Op::sqrt;
  const double lo = positive ? 0.01 : -4, hi = 4;
  for (DType d : kDtypes) {
    const double ulps = elementwise_ulps(op, d);
    for (const Shape& s : kShapes)
      c.add(op, d, dn(d) + shape_str(s), ulps, [&](Program& p, std::vector<Array>& in) {
        const Type t{d, s};
        p = unary ? one_op(op, {t}) : one_op(op, {t, t});
        const bool i32 = d == DType::i32;
        in.push_back(c.input(t, i32 ? -1000 : lo, i32 ? 1000 : hi));
        if (!unary) {
          in.push_back(c.input(t, i32 ? -1000 : lo, i32 ? 1000 : hi));
          if (op == Op::divide && i32)  // x / 0 = -1 and INT_MIN / -1 = INT_MIN (XLA's definition)
            for (int64_t i = 0; i + 1 < in[1].numel(); i += 5) {
              in[1].set(i, 0);
              in[0].set(i + 1, INT32_MIN);
              in[1].set(i + 1, -1);
            }
        }
      });
    // NaN and infinities in either operand (not where they make no test: log of -inf is NaN anyway)
    c.add(op, d, dn(d) + "[7] NaN and infinities", ulps, [&](Program& p, std::vector<Array>& in) {
      const Type t{d, {7}};
      if (!is_float(d)) throw Error(kNotForThisDtype);
      p = unary ? one_op(op, {t}) : one_op(op, {t, t});
      in.push_back(with_specials(c.input(t, lo, hi)));
      if (!unary) {
        Array b = with_specials(c.input(t, lo, hi));
        b.set(1, NAN);  // a NaN against a number, both ways
        in.push_back(b);
      }
    });
    // Operands read through views: a transposed one, and (binary) a broadcast row.
    c.add(op, d, dn(d) + "[5,13] of transpose(x[13,5])" + (unary ? "" : " and broadcast(y[13])"), ulps,
          [&](Program& p, std::vector<Array>& in) {
            const bool i32 = d == DType::i32;
            const Type tt{d, {13, 5}}, row{d, {13}}, full{d, {5, 13}};
            p = Program();
            p.name = op_name(op);
            const int x = p.add_input("x", tt);
            Attrs perm;
            perm.dims = {1, 0};
            const int xt = p.add_eqn(Op::transpose, {x}, perm);
            in.push_back(c.input(tt, i32 ? -1000 : lo, i32 ? 1000 : hi));
            int y = xt;
            if (!unary) {
              const int r = p.add_input("y", row);
              Attrs bd;
              bd.dims = {1};
              y = p.add_eqn(op, {xt, p.add_eqn_typed(Op::broadcast_in_dim, {r}, bd, full)}, {});
              in.push_back(c.input(row, i32 ? -1000 : lo, i32 ? 1000 : hi));
            } else {
              y = p.add_eqn(op, {xt}, {});
            }
            p.add_output("y", y);
          });
  }
}

struct DotCase {
  Shape lhs, rhs;
  std::vector<int64_t> lb, rb, lc, rc;
  const char* what;
};
const DotCase kDots[] = {
    {{7, 13}, {13, 11}, {}, {}, {1}, {0}, "plain"},
    {{13, 7}, {13, 11}, {}, {}, {0}, {0}, "lhs transposed"},
    {{7, 13}, {11, 13}, {}, {}, {1}, {1}, "rhs transposed"},
    {{13, 7}, {11, 13}, {}, {}, {0}, {1}, "both transposed"},
    {{3, 7, 13}, {3, 13, 11}, {0}, {0}, {2}, {1}, "batched"},
    {{7, 3, 13}, {13, 3, 11}, {1}, {1}, {2}, {0}, "batch in the middle"},
    {{5, 3, 7}, {3, 5, 11}, {}, {}, {0, 1}, {1, 0}, "two contracting dims, swapped"},
    {{2, 3, 5, 9}, {2, 3, 9, 7}, {0, 1}, {0, 1}, {3}, {2}, "two batch dims"},
    {{3, 4, 5}, {4, 6}, {}, {}, {1}, {0}, "free dims split"},
    {{7, 13}, {13}, {}, {}, {1}, {0}, "matrix-vector"},
    {{7}, {11}, {}, {}, {}, {}, "outer product"},
    {{9}, {9}, {}, {}, {0}, {0}, "vector dot (a scalar)"},
    {{3, 4}, {3, 4}, {0, 1}, {0, 1}, {}, {}, "batch only"},
    {{7, 0}, {0, 11}, {}, {}, {1}, {0}, "empty contraction (zeros)"},
    {{0, 13}, {13, 11}, {}, {}, {1}, {0}, "empty result"},
};

void dot_cases(Cases& c) {
  for (DType d : kDtypes)
    for (const DotCase& k : kDots)
      c.add(Op::dot_general, d, dn(d) + " " + k.what, 0.5, [&](Program& p, std::vector<Array>& in) {
        Attrs a;
        a.lhs_batch = k.lb, a.rhs_batch = k.rb, a.lhs_contract = k.lc, a.rhs_contract = k.rc;
        p = one_op(Op::dot_general, {{d, k.lhs}, {d, k.rhs}}, a);
        in = {c.input({d, k.lhs}), c.input({d, k.rhs})};
      });
}

void reduce_cases(Op op, Cases& c) {
  struct R {
    Shape s;
    std::vector<int64_t> dims;
  };
  const R rs[] = {{{3, 4, 5}, {0}}, {{3, 4, 5}, {1}}, {{3, 4, 5}, {2}}, {{3, 4, 5}, {0, 2}},   {{3, 4, 5}, {0, 1}},  {{3, 4, 5}, {0, 1, 2}},
                  {{3, 4, 5}, {}},  {{7, 37}, {1}},   {{37, 7}, {0}},   {{0, 3}, {0}},         {{3, 0}, {1}},
                  {{}, {}},         {{1000}, {0}}};
  for (DType d : kDtypes)
    for (const R& r : rs) {
      c.add(op, d, dn(d) + shape_str(r.s) + " over " + shape_str(r.dims), 0.5, [&](Program& p, std::vector<Array>& in) {
        Attrs a;
        a.dims = r.dims;
        p = one_op(op, {{d, r.s}}, a);
        in = {c.input({d, r.s}, d == DType::i32 ? -100 : -2, d == DType::i32 ? 100 : 2)};
      });
    }
  if (op == Op::reduce_max)
    for (DType d : kDtypes)
      c.add(op, d, dn(d) + "[3,9] over [1] with NaN and infinities", 0, [&](Program& p, std::vector<Array>& in) {
        if (!is_float(d)) throw Error(kNotForThisDtype);
        Attrs a;
        a.dims = {1};
        p = one_op(op, {{d, {3, 9}}}, a);
        Array x = c.input({d, {3, 9}});
        x.set(4, NAN);            // row 0: NaN wins
        x.set(9 + 8, INFINITY);   // row 1: inf
        for (int j = 0; j < 9; ++j) x.set(18 + j, -INFINITY);  // row 2: all -inf
        in = {x};
      });
}

void layout_cases(Op op, Cases& c) {
  for (DType d : kDtypes) {
    auto add = [&](const std::string& name, const std::vector<Type>& ts, Attrs a, const Type* given) {
      c.add(op, d, dn(d) + " " + name, 0, [&](Program& p, std::vector<Array>& in) {
        p = one_op(op, ts, a, given);
        for (const Type& t : ts) in.push_back(c.input(t, -9, 9));
      });
    };
    auto T = [&](Shape s) { return Type{d, std::move(s)}; };
    if (op == Op::broadcast_in_dim) {
        struct B {
          Shape in, out;
          std::vector<int64_t> dims;
        };
        const B bs[] = {{{}, {5, 13}, {}}, {{13}, {5, 13}, {1}},       {{5}, {5, 13}, {0}},
                        {{5, 1}, {5, 13}, {0, 1}}, {{1, 13}, {3, 5, 13}, {1, 2}}, {{2, 3}, {1, 2, 3}, {1, 2}},
                        {{}, {0}, {}},      {{}, {3, 0}, {}},           {{0}, {4, 0}, {1}}};
        for (const B& b : bs) {
          Attrs a;
          a.dims = b.dims;
          const Type out = T(b.out);
          add(T(b.in).str() + " -> " + out.str(), {T(b.in)}, a, &out);
        }
    } else if (op == Op::reshape) {
        const std::pair<Shape, Shape> rs[] = {{{3, 17, 19}, {51, 19}}, {{7}, {7, 1}}, {{}, {1, 1}}, {{2, 0}, {0, 5}}};
        for (const auto& [a, b] : rs) {
          const Type out = T(b);
          add(T(a).str() + " -> " + out.str(), {T(a)}, {}, &out);
        }
    } else if (op == Op::transpose) {
        for (std::vector<int64_t> perm : {std::vector<int64_t>{2, 0, 1}, {1, 0, 2}, {0, 2, 1}, {2, 1, 0}, {0, 1, 2}}) {
          Attrs a;
          a.dims = perm;
          add("[3,17,19] perm " + shape_str(perm), {T({3, 17, 19})}, a, nullptr);
        }
        {
          Attrs a;
          a.dims = {1, 0};
          add("[0,5] perm [1,0]", {T({0, 5})}, a, nullptr);
          Attrs s;
          add("scalar", {T({})}, s, nullptr);
        }
    } else if (op == Op::slice) {
        struct S {
          Shape s;
          std::vector<int64_t> b, e, st;
        };
        const S ss[] = {{{3, 17, 19}, {1, 2, 3}, {3, 17, 16}, {1, 3, 2}}, {{3, 17, 19}, {0, 0, 0}, {3, 17, 19}, {1, 1, 1}},
                        {{2, 3, 4}, {0, 1, 0}, {2, 3, 4}, {2, 1, 3}},      {{2, 3, 4}, {0, 2, 0}, {2, 2, 4}, {1, 1, 1}},
                        {{7}, {6}, {7}, {5}},                             {{7}, {3}, {3}, {1}},
                        {{}, {}, {}, {}}};
        for (const S& s : ss) {
          Attrs a;
          a.starts = s.b, a.limits = s.e, a.strides = s.st;
          add(T(s.s).str() + " " + shape_str(s.b) + shape_str(s.e) + shape_str(s.st), {T(s.s)}, a, nullptr);
        }
    } else if (op == Op::pad) {
        const std::tuple<Shape, std::vector<int64_t>, std::vector<int64_t>> ps[] = {
            {{3, 17, 19}, {0, 3, 1}, {2, 0, 5}}, {{7}, {0}, {0}}, {{0, 2}, {1, 0}, {2, 3}}, {{}, {}, {}}};
        for (const auto& [s, lo, hi] : ps) {
          Attrs a;
          a.lows = lo, a.highs = hi;
          add(T(s).str() + " " + shape_str(lo) + shape_str(hi), {T(s)}, a, nullptr);
        }
    } else if (op == Op::concatenate) {
        for (int64_t axis : {0, 1, 2}) {
          std::vector<Type> ts;
          for (int64_t k : {2, 1, 0, 3}) {
            Shape s = {3, 5, 7};
            s[static_cast<size_t>(axis)] = k;
            ts.push_back(T(s));
          }
          Attrs a;
          a.axis = axis;
          add("four operands along " + std::to_string(axis), ts, a, nullptr);
        }
        {
          Attrs a;
          add("one operand", {T({7})}, a, nullptr);
          add("[0] and [0]", {T({0}), T({0})}, a, nullptr);
        }
    }
  }
}

// Attention's operands: q, k, v (and out = attention(q, k, v) from the
// reference, rounded to the dtype, and dout for its gradient).
void attention_cases(Op op, Cases& c) {
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 3, 5, 4}, {1, 2, 9, 7}, {1, 2, 0, 3}, {0, 1, 2, 3}};
  for (DType d : kDtypes)
    for (const Shape& s : shapes)
      for (int64_t axis : {0, 1, 2}) {
        if (op == Op::attention && axis > 0) break;
        const std::string what = op == Op::attention ? "" : std::string(" d") + "qkv"[axis];
        c.add(op, d, dn(d) + shape_str(s) + what, 0.5, [&](Program& p, std::vector<Array>& in) {
          const Type t{d, s};
          Attrs a;
          a.axis = axis;
          in = {c.input(t), c.input(t), c.input(t)};
          if (op == Op::attention) {
            p = one_op(op, {t, t, t}, a);
            return;
          }
          const Program fwd = one_op(Op::attention, {t, t, t});
          in.push_back(Array::from_doubles(t, reference(fwd, in)[0].v));
          in.push_back(c.input(t));
          p = one_op(op, {t, t, t, t, t}, a);
        });
      }
}

void adamw_cases(Cases& c) {
  for (DType d : kDtypes)
    for (const Shape& s : {Shape{}, Shape{0}, Shape{7}, Shape{5, 13}})
      for (int64_t axis : {0, 1, 2})
        c.add(Op::adamw, d, dn(d) + shape_str(s) + " " + "pmv"[axis] + "'", 0, [&](Program& p, std::vector<Array>& in) {
          const Type t{d, s}, sc{DType::f32, {}};
          Attrs a;
          a.axis = axis;
          a.literal = {0.9, 0.95, 1e-8};
          p = one_op(Op::adamw, {t, t, t, t, sc, sc, sc, sc}, a);
          in = {c.input(t), c.input(t, -0.1, 0.1), c.input(t, -0.1, 0.1), c.input(t, 0, 0.01),
                Array::scalar(1e-3), Array::scalar(1 / (1 - 0.9 * 0.9)), Array::scalar(1 / (1 - 0.95 * 0.95)),
                Array::scalar(1 - 1e-3 * 0.1)};
        });
}

// Every primitive's cases (one switch over Op, no default: a new primitive
// is a compile error here until it has cases).
std::vector<OpCase> cases_for(Op op) {
  Cases c;
  c.seed = 1 + 1000 * static_cast<uint32_t>(op);
  switch (op) {
    case Op::constant:
      for (DType d : kDtypes)
        for (const Shape& s : {Shape{}, Shape{0}, Shape{5, 13}, Shape{2, 3}}) {
          c.add(op, d, dn(d) + shape_str(s) + " splat", 0, [&](Program& p, std::vector<Array>&) {
            Attrs a;
            a.literal = {d == DType::i1 ? 1.0 : -2.5};
            const Type t{d, s};
            p = one_op(op, {}, a, &t);
          });
          if (numel(s) > 0 && numel(s) < 10)
            c.add(op, d, dn(d) + shape_str(s) + " dense", 0, [&](Program& p, std::vector<Array>&) {
              Attrs a;
              a.literal = {1, 0, -2, 5, is_float(d) ? 0.5 : 4.0, 7};
              const Type t{d, s};
              p = one_op(op, {}, a, &t);
            });
        }
      break;
    case Op::iota:
      for (DType d : kDtypes)
        for (int64_t axis : {0, 1, 2}) {
          c.add(op, d, dn(d) + "[3,5,7] axis " + std::to_string(axis), 0, [&](Program& p, std::vector<Array>&) {
            Attrs a;
            a.axis = axis;
            const Type t{d, {3, 5, 7}};
            p = one_op(op, {}, a, &t);
          });
          c.add(op, d, dn(d) + "[0,5,7] axis " + std::to_string(axis), 0, [&](Program& p, std::vector<Array>&) {
            Attrs a;
            a.axis = axis;
            const Type t{d, {0, 5, 7}};
            p = one_op(op, {}, a, &t);
          });
        }
      break;
    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
      elementwise_cases(op, c);
      break;
    case Op::compare:
      for (DType d : kDtypes)
        for (int k = 0; k < 6; ++k)
          for (const Shape& s : {Shape{}, Shape{0}, Shape{7}, Shape{5, 13}}) {
            Attrs a;
            a.cmp = static_cast<Cmp>(k);
            c.add(op, d, dn(d) + shape_str(s) + " " + cmp_name(a.cmp), 0, [&](Program& p, std::vector<Array>& in) {
              const Type t{d, s};
              p = one_op(op, {t, t}, a);
              in = {c.input(t, -3, 3), c.input(t, -3, 3)};
              for (int64_t i = 0; i < t.numel(); i += 3) in[1].set(i, in[0].get(i));  // equal pairs
              if (is_float(d) && t.numel() >= 7) in[0] = with_specials(in[0]);
            });
          }
      break;
    case Op::select:
      for (DType d : kDtypes)
        for (const Shape& s : {Shape{}, Shape{0}, Shape{7}, Shape{3, 17, 19}})
          c.add(op, d, dn(d) + shape_str(s), 0, [&](Program& p, std::vector<Array>& in) {
            const Type t{d, s}, pt{DType::i1, s};
            p = one_op(op, {pt, t, t});
            in = {c.input(pt), c.input(t, -9, 9), c.input(t, -9, 9)};
          });
      break;
    case Op::convert:
      for (DType from : kDtypes)
        for (DType to : kDtypes)
          for (const Shape& s : {Shape{}, Shape{0}, Shape{5, 13}})
            c.add(op, from, dn(from) + "->" + dn(to) + shape_str(s), 0, [&](Program& p, std::vector<Array>& in) {
              const Type t{from, s}, o{to, s};
              p = one_op(op, {t}, {}, &o);
              Array x = c.input(t, -300, 300);
              for (int64_t i = 0; i < x.numel(); i += 7) x.set(i, 0);  // zeros: i1's edge
              if (numel(s) > 10 && is_float(from)) {
                // halfway between bf16 values (ties to even, both ways), and f64's
                // 1 + 2^-8 + 2^-30, which rounds down when rounded through f32 first
                x.set(1, 1 + 0x1p-8), x.set(2, 1 + 3 * 0x1p-8), x.set(3, -(1 + 0x1p-8) * 0x1p20);
                if (from == DType::f64) x.set(4, 1 + 0x1p-8 + 0x1p-30);
              }
              in = {x};
            });
      break;
    case Op::broadcast_in_dim:
    case Op::reshape:
    case Op::transpose:
    case Op::slice:
    case Op::pad:
    case Op::concatenate: layout_cases(op, c); break;
    case Op::dot_general: dot_cases(c); break;
    case Op::reduce_sum:
    case Op::reduce_max: reduce_cases(op, c); break;
    case Op::gather_rows:
      for (DType d : kDtypes)
        for (const auto& [table, idx] : std::vector<std::pair<Shape, Shape>>{
                 {{11, 7}, {4, 5}}, {{11}, {6}}, {{5, 2, 3}, {}}, {{11, 7}, {0}}, {{4, 0}, {3}}})
          c.add(op, d, dn(d) + " table" + shape_str(table) + " idx" + shape_str(idx), 0,
                [&](Program& p, std::vector<Array>& in) {
                  const Type t{d, table}, it{DType::i32, idx};
                  p = one_op(op, {t, it});
                  in = {c.input(t, -9, 9), c.input(it, 0, static_cast<double>(table[0]))};
                  if (in[1].numel() > 0) in[1].set(0, static_cast<double>(table[0] - 1));  // the last row
                });
      break;
    case Op::scatter_add_rows:
      for (DType d : kDtypes)
        for (const auto& [operand, idx] : std::vector<std::pair<Shape, Shape>>{
                 {{11, 7}, {4, 5}}, {{11}, {6}}, {{5, 2, 3}, {}}, {{11, 7}, {0}}, {{4, 0}, {3}}})
          c.add(op, d, dn(d) + " operand" + shape_str(operand) + " idx" + shape_str(idx), 0.5,
                [&](Program& p, std::vector<Array>& in) {
                  const Type t{d, operand}, it{DType::i32, idx};
                  Shape us = idx;
                  us.insert(us.end(), operand.begin() + 1, operand.end());
                  const Type ut{d, us};
                  p = one_op(op, {t, it, ut});
                  // indices in [0, 3): many duplicates, whose adds collide
                  in = {c.input(t, -9, 9), c.input(it, 0, 3), c.input(ut, -9, 9)};
                });
      break;
    case Op::attention:
    case Op::attention_grad: attention_cases(op, c); break;
    case Op::adamw: adamw_cases(c); break;
    case Op::all_reduce:
      for (DType d : kDtypes)
        for (const Shape& s : {Shape{}, Shape{0}, Shape{5, 13}})
          c.add(op, d, dn(d) + shape_str(s), 0, [&](Program& p, std::vector<Array>& in) {
            p = one_op(op, {{d, s}});
            in = {c.input({d, s})};
          });
      break;
  }
  return c.list;
}

// ---- running one case ---------------------------------------------------------------------

struct Outcome {
  int cases = 0;
  int refused = 0;  // kUnsupported: refused with the expected Error
  std::map<const Deviation*, int> deviated;  // elements within a deviation's bound only
  double worst_ulps = 0;  // the largest |got - want| / ulp(want) past err seen
};

// Runs c on the variant twice (CUDA's second run replays its graph) and
// checks every output against the reference.
void run_case(const Variant& v, const OpCase& c, Outcome& out) {
  SCOPED_TRACE(c.name + " on " + v.name);
  const std::vector<Ref> want = reference(c.program, c.inputs);
  const Deviation* dev = deviation(v.kind, c.op, c.dtype);
  std::unique_ptr<Backend> b;
  const Unsupported* no = unsupported(v.kind, c.op, c.dtype);
  try {
    b = make_backend(v.kind, c.program, options_for(v));
  } catch (const Error& e) {
    if (no) {
      EXPECT_NE(std::string(e.what()).find(no->error), std::string::npos) << e.what();
      ++out.refused;
      return;
    }
    ADD_FAILURE() << c.name << ": " << v.name << " cannot run it: " << e.what();
    return;
  }
  if (no) {
    ADD_FAILURE() << c.name << ": " << v.name << " runs it now: take it out of kUnsupported";
    return;
  }
  for (size_t i = 0; i < c.inputs.size(); ++i) b->set_input(static_cast<int>(i), c.inputs[i]);
  for (int rep = 0; rep < 2; ++rep) {
    b->run();
    for (size_t j = 0; j < want.size(); ++j) {
      Array got;
      b->read_output(static_cast<int>(j), got);
      ASSERT_EQ(got.type(), want[j].type) << c.name;
      const DType od = got.dtype();
      int bad = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const size_t k = static_cast<size_t>(i);
        const double g = got.get(i), w = want[j].v[k];
        if (g == w || (std::isnan(g) && std::isnan(w))) continue;
        const double diff = std::fabs(g - w), u = ulp(w, od);
        double ulps = c.ulps, err = want[j].err[k];
        if (dev && !(diff <= ulps * u + err)) {
          ++out.deviated[dev];
          err *= dev->err_scale;
          if (dev->fused) err += want[j].fused_err[k];
          ulps = std::max(ulps, dev->ulps);
          if (dev->nan_dropped && std::isnan(w) && !std::isnan(g)) continue;
        }
        const double tol = ulps * u + err;
        if (u > 0 && std::isfinite(diff)) out.worst_ulps = std::max(out.worst_ulps, std::max(0.0, diff - err) / u);
        if (diff <= tol) continue;
        if (bad++ < 3)
          ADD_FAILURE() << c.name << " on " << v.name << (rep ? " (second run)" : "") << ": element " << i << " of "
                        << got.type().str() << " is " << g << ", the definition gives " << w << " (off by "
                        << diff << ", " << (u > 0 ? diff / u : 0) << " ulp; bound " << tol << ")";
      }
      if (bad > 3) ADD_FAILURE() << c.name << " on " << v.name << ": " << bad << " elements out of bounds";
    }
  }
  ++out.cases;
}

class BackendOps : public ::testing::TestWithParam<std::tuple<int, Op>> {};

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int k = 0; k < kNumOps; ++k) ops.push_back(static_cast<Op>(k));
  return ops;
}

}  // namespace

TEST_P(BackendOps, Primitive) {
  const Variant& v = kVariants[std::get<0>(GetParam())];
  const Op op = std::get<1>(GetParam());
  if (const std::string why = skip_reason(v); !why.empty()) GTEST_SKIP() << v.name << " skipped: " << why;
  Outcome out;
  for (const OpCase& c : cases_for(op)) run_case(v, c, out);
  std::printf("%s on %s: %d cases ran, %d refused (kUnsupported), worst %.3g ulp past the sums' bounds\n",
              op_name(op), v.name, out.cases, out.refused, out.worst_ulps);
  // Whether each deviation of this backend and op is still needed, for whoever
  // trims the list (a newer plugin may need fewer).
  for (const Deviation& d : kDeviations)
    if (d.kind == v.kind && d.op == op)
      std::printf("  deviation %s %s (%s): %d elements needed it\n", op_name(op), dtype_name(d.dtype), d.why,
                  out.deviated.count(&d) ? out.deviated.at(&d) : 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Combine(::testing::Range(0, kNumVariants), ::testing::ValuesIn(all_ops())),
                         [](const ::testing::TestParamInfo<std::tuple<int, Op>>& i) {
                           return std::string(kVariants[std::get<0>(i.param)].name) + "_" + op_name(std::get<1>(i.param));
                         });

// The generator's switch is exhaustive by construction; this checks that no
// primitive's generator came out empty (every shape rejected), and prints the
// dtypes each primitive runs in.
TEST(BackendOpsTable, EveryPrimitiveHasCases) {
  int total = 0;
  for (Op op : all_ops()) {
    const std::vector<OpCase> cs = cases_for(op);
    EXPECT_FALSE(cs.empty()) << op_name(op) << " has no case";
    std::map<std::string, int> per;
    for (const OpCase& c : cs) ++per[dtype_name(c.dtype)];
    std::string line;
    for (const auto& [d, n] : per) line += " " + d + ":" + std::to_string(n);
    std::printf("%-17s %3zu cases:%s\n", op_name(op), cs.size(), line.c_str());
    total += static_cast<int>(cs.size());
  }
  std::printf("%d cases per backend\n", total);
}
