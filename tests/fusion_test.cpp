// Fusion grouping (src/backend/plan/fusion.h), checked without a device:
//  - invariants on the seed's gradient and fused AdamW programs and on random
//    programs: every equation in exactly one contiguous group, the reordered
//    program verifies (so the groups are in a topological order and no group
//    is part of a cycle), inputs/outputs recomputed independently, and no two
//    loop groups that could merge without a cycle were left apart;
//  - semantics: a reference evaluator runs each loop group per output element
//    (members in order, broadcast operands through their index maps, f32 in
//    f32 with the formulas of src/ir/scalar_math.h, except f32 tanh, for which
//    the interpreter has its own formula) and writes only the group's
//    outputs; single groups run on the host interpreter one equation at a time.
//    The program's outputs must equal host::Interpreter's bit for bit;
//  - the memory plan with fused spans: a byte-tag simulation of one step in
//    which each loop group reads everything, then writes everything.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "backend/plan/fusion.h"
#include "backend/plan/kernel_plan.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "backend/plan/device_plan.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "ir/scalar_math.h"

namespace capstep {
namespace {

using plan::Fused;
using plan::Group;
using plan::GroupKind;

// ---- reference evaluator ------------------------------------------------------
struct Scalar {
  float f = 0;
  double d = 0;
  int32_t i = 0;
  bool b = false;
};

Scalar load(const Array& a, int64_t k) {
  Scalar s;
  switch (a.dtype()) {
    case DType::f32: s.f = a.data<float>()[k]; break;
    case DType::f64: s.d = a.data<double>()[k]; break;
    case DType::i32: s.i = a.data<int32_t>()[k]; break;
    case DType::i1: s.b = a.data<uint8_t>()[k] != 0; break;
    case DType::bf16: ADD_FAILURE() << "bf16 has no CUDA kernels to emulate"; break;
  }
  return s;
}

void store(Array& a, int64_t k, const Scalar& s) {
  switch (a.dtype()) {
    case DType::f32: a.data<float>()[k] = s.f; break;
    case DType::f64: a.data<double>()[k] = s.d; break;
    case DType::i32: a.data<int32_t>()[k] = s.i; break;
    case DType::i1: a.data<uint8_t>()[k] = s.b ? 1 : 0; break;
    case DType::bf16: ADD_FAILURE() << "bf16 has no CUDA kernels to emulate"; break;
  }
}

template <class T> T& slot(Scalar& s) {
  if constexpr (std::is_same_v<T, float>) return s.f;
  else if constexpr (std::is_same_v<T, double>) return s.d;
  else if constexpr (std::is_same_v<T, int32_t>) return s.i;
  else return s.b;
}

template <class T>
Scalar apply_typed(const Eqn& e, std::vector<Scalar> a) {
  Scalar r;
  T& o = slot<T>(r);
  auto x = [&](size_t k) { return slot<T>(a[k]); };
  switch (e.op) {
    case Op::add: o = scalar::add<T>(x(0), x(1)); break;
    case Op::subtract: o = scalar::subtract<T>(x(0), x(1)); break;
    case Op::multiply: o = scalar::multiply<T>(x(0), x(1)); break;
    case Op::divide: o = scalar::divide<T>(x(0), x(1)); break;
    case Op::maximum: o = scalar::maximum<T>(x(0), x(1)); break;
    case Op::negate: o = scalar::negate<T>(x(0)); break;
    default:
      if constexpr (std::is_floating_point_v<T>) {
        switch (e.op) {
          case Op::exponential: o = scalar::exponential<T>(x(0)); break;
          case Op::log: o = scalar::log<T>(x(0)); break;
          case Op::tanh: o = scalar::tanh<T>(x(0)); break;
          case Op::rsqrt: o = scalar::rsqrt<T>(x(0)); break;
          case Op::sqrt: o = scalar::sqrt<T>(x(0)); break;
          default: ADD_FAILURE() << "op " << op_name(e.op) << " is not a float unary op";
        }
      } else {
        ADD_FAILURE() << "op " << op_name(e.op) << " on a non-float type";
      }
  }
  return r;
}

template <class T>
bool compare_typed(int dir, Scalar a, Scalar b) {
  return scalar::compare<T>(dir, slot<T>(a), slot<T>(b));
}

template <class To>
Scalar convert_to(DType from, const Scalar& a) {
  Scalar r;
  To& o = slot<To>(r);
  if (from == DType::i1) { o = static_cast<To>(a.b ? 1 : 0); return r; }
  auto go = [&](auto v) {
    using From = decltype(v);
    if constexpr (std::is_same_v<To, bool>) o = scalar::convert<bool, From>(v);
    else o = scalar::convert<To, From>(v);
  };
  switch (from) {
    case DType::f32: go(a.f); break;
    case DType::f64: go(a.d); break;
    case DType::i32: go(static_cast<int>(a.i)); break;
    case DType::i1: case DType::bf16: break;
  }
  return r;
}

Scalar apply(const Program& p, const Eqn& e, const std::vector<Scalar>& a) {
  const DType t = p.type(e.out).dtype;
  switch (e.op) {
    case Op::compare: {
      Scalar r;
      const int dir = static_cast<int>(e.attrs.cmp);
      switch (p.type(e.inputs[0]).dtype) {
        case DType::f32: r.b = compare_typed<float>(dir, a[0], a[1]); break;
        case DType::f64: r.b = compare_typed<double>(dir, a[0], a[1]); break;
        case DType::i32: r.b = compare_typed<int32_t>(dir, a[0], a[1]); break;
        case DType::i1: r.b = compare_typed<bool>(dir, a[0], a[1]); break;
        case DType::bf16: ADD_FAILURE() << "bf16 compare"; break;
      }
      return r;
    }
    case Op::select: return a[0].b ? a[1] : a[2];
    case Op::convert: {
      const DType from = p.type(e.inputs[0]).dtype;
      switch (t) {
        case DType::f32: return convert_to<float>(from, a[0]);
        case DType::f64: return convert_to<double>(from, a[0]);
        case DType::i32: return convert_to<int32_t>(from, a[0]);
        case DType::i1: return convert_to<bool>(from, a[0]);
        case DType::bf16: ADD_FAILURE() << "bf16 convert"; return {};
      }
      return {};
    }
    case Op::broadcast_in_dim: case Op::transpose: return a[0];
    default:
      switch (t) {
        case DType::f32: return apply_typed<float>(e, a);
        case DType::f64: return apply_typed<double>(e, a);
        case DType::i32: return apply_typed<int32_t>(e, a);
        case DType::i1: ADD_FAILURE() << "i1 arithmetic"; return {};
        case DType::bf16: ADD_FAILURE() << "bf16 arithmetic"; return {};
      }
  }
  return {};
}

// Flat index into broadcast_in_dim's operand for output element k, computed
// here from the coordinates (independently of plan::broadcast_walk).
int64_t broadcast_source(const Shape& in, const Shape& out, const std::vector<int64_t>& dims, int64_t k) {
  std::vector<int64_t> c(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    c[d] = k % out[d];
    k /= out[d];
  }
  int64_t off = 0;
  for (size_t a = 0; a < in.size(); ++a) off = off * in[a] + (in[a] == 1 ? 0 : c[static_cast<size_t>(dims[a])]);
  return off;
}

// Flat index into transpose's operand for output element k (output axis a is
// operand axis perm[a]), from the coordinates.
int64_t transpose_source(const Shape& in, const std::vector<int64_t>& perm, int64_t k) {
  std::vector<int64_t> c(in.size());  // operand coordinates
  for (size_t a = perm.size(); a-- > 0;) {
    const int64_t dim = in[static_cast<size_t>(perm[a])];
    c[static_cast<size_t>(perm[a])] = k % dim;
    k /= dim;
  }
  int64_t off = 0;
  for (size_t a = 0; a < in.size(); ++a) off = off * in[a] + c[a];
  return off;
}

void run_loop_group(const Program& p, const Group& g, std::map<int, Array>& env) {
  std::map<int, size_t> pos;  // value -> member slot
  for (int d = g.first; d <= g.last; ++d) pos[p.eqns[static_cast<size_t>(d)].out] = static_cast<size_t>(d - g.first);
  std::map<int, Array> out;
  for (int x : g.outputs) out.emplace(x, Array(p.type(x)));
  std::vector<Scalar> vals(static_cast<size_t>(g.size()));
  for (int64_t k = 0; k < g.numel; ++k) {
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = p.eqns[static_cast<size_t>(d)];
      if (e.op == Op::gather_rows) {  // table row idx[k / C], column k % C; both made outside the group
        ASSERT_FALSE(pos.count(e.inputs[0]) || pos.count(e.inputs[1])) << "a gather's table or indices made in its group";
        const Array& table = env.at(e.inputs[0]);
        const int64_t C = table.numel() / table.shape()[0];
        const int64_t r = static_cast<int64_t>(env.at(e.inputs[1]).get(k / C));
        ASSERT_TRUE(r >= 0 && r < table.shape()[0]) << "gather index " << r;
        vals[static_cast<size_t>(d - g.first)] = load(table, r * C + k % C);
        continue;
      }
      std::vector<Scalar> a;
      for (int x : e.inputs) {
        auto it = pos.find(x);
        if (it != pos.end()) {
          ASSERT_LT(it->second, static_cast<size_t>(d - g.first)) << "member read before it is computed";
          a.push_back(vals[it->second]);
          continue;
        }
        ASSERT_TRUE(env.count(x)) << "group reads %" << x << " that no earlier group wrote";
        const Array& src = env.at(x);
        int64_t at = k;
        if (e.op == Op::broadcast_in_dim && src.numel() != g.numel)
          at = broadcast_source(src.shape(), p.type(e.out).shape, e.attrs.dims, k);
        if (e.op == Op::transpose) at = transpose_source(src.shape(), e.attrs.dims, k);
        a.push_back(load(src, at));
      }
      vals[static_cast<size_t>(d - g.first)] = apply(p, e, a);
    }
    for (int x : g.outputs) store(out.at(x), k, vals[pos.at(x)]);
  }
  for (auto& [x, a] : out) env[x] = std::move(a);
}

void run_single(const Program& p, const Eqn& e, std::map<int, Array>& env) {
  Program one;
  std::map<int, int> in_of;
  std::vector<Array> args;
  std::vector<int> ins;
  for (int x : e.inputs) {
    if (!in_of.count(x)) {
      in_of[x] = one.add_input("x" + std::to_string(x), p.type(x));
      args.push_back(env.at(x));
    }
    ins.push_back(in_of[x]);
  }
  const int y = one.add_eqn_typed(e.op, ins, e.attrs, p.type(e.out));
  one.add_output("y", y);
  env[e.out] = host::run(one, args)[0];
}

std::vector<Array> run_grouped(const Fused& f, const std::vector<Array>& inputs) {
  const Program& p = f.program;
  std::map<int, Array> env;
  for (size_t i = 0; i < p.inputs.size(); ++i) env[p.inputs[i].value] = inputs[i];
  for (const Group& g : f.groups) {
    if (g.kind == GroupKind::loop) run_loop_group(p, g, env);
    else  // row and col groups: equation by equation (their order is what is checked here)
      for (int d = g.first; d <= g.last; ++d) run_single(p, p.eqns[static_cast<size_t>(d)], env);
  }
  std::vector<Array> out;
  for (const NamedValue& o : p.outputs) out.push_back(env.at(o.value));
  return out;
}

// ---- invariants -------------------------------------------------------------------
bool fusible(Op op) {
  return is_elementwise(op) || op == Op::broadcast_in_dim || op == Op::transpose || op == Op::gather_rows;
}

// Returns the number of loop groups.
int check_invariants(const Program& p, const Fused& f) {
  const int E = static_cast<int>(p.eqns.size());
  EXPECT_EQ(static_cast<int>(f.program.eqns.size()), E);
  EXPECT_NO_THROW(verify(f.program)) << "the reordered program is not in a valid order";
  // a permutation of the original equations, each unchanged
  std::vector<int> hit(static_cast<size_t>(E), 0);
  for (int d = 0; d < E; ++d) {
    const int o = f.old_index[static_cast<size_t>(d)];
    ++hit[static_cast<size_t>(o)];
    const Eqn& a = p.eqns[static_cast<size_t>(o)];
    const Eqn& b = f.program.eqns[static_cast<size_t>(d)];
    EXPECT_TRUE(a.op == b.op && a.inputs == b.inputs && a.out == b.out && a.attrs == b.attrs);
  }
  for (int h : hit) EXPECT_EQ(h, 1) << "an equation is not in exactly one group";
  // contiguous groups covering [0, E) in order
  int next = 0, loops = 0;
  std::vector<int> producer(static_cast<size_t>(p.num_values()), -1);
  for (int d = 0; d < E; ++d) producer[static_cast<size_t>(f.program.eqns[static_cast<size_t>(d)].out)] = d;
  std::vector<char> is_out(static_cast<size_t>(p.num_values()), 0);
  for (const auto& o : p.outputs) is_out[static_cast<size_t>(o.value)] = 1;
  for (size_t gi = 0; gi < f.groups.size(); ++gi) {
    const Group& g = f.groups[gi];
    EXPECT_EQ(g.first, next);
    EXPECT_LE(g.first, g.last);
    next = g.last + 1;
    for (int d = g.first; d <= g.last; ++d) EXPECT_EQ(f.group_of[static_cast<size_t>(d)], static_cast<int>(gi));
    if (g.kind == GroupKind::row || g.kind == GroupKind::col) {
      // reductions of N = rows * cols elements with their elementwise
      // neighbours, each of N or of the reduced count
      EXPECT_EQ(g.rows * g.cols, g.numel);
      const int64_t small = g.kind == GroupKind::row ? g.rows : g.cols;
      int reductions = 0;
      for (int d = g.first; d <= g.last; ++d) {
        const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
        const int64_t n = f.program.type(e.out).numel();
        if (e.op == Op::reduce_sum || e.op == Op::reduce_max) {
          ++reductions;
          EXPECT_EQ(f.program.type(e.inputs[0]).numel(), g.numel);
          EXPECT_EQ(n, small);
        } else {
          EXPECT_TRUE(fusible(e.op)) << op_name(e.op) << " in a " << group_kind_name(g.kind) << " group";
          EXPECT_TRUE(n == g.numel || n == small) << op_name(e.op) << " of " << n << " elements";
        }
        if (e.op == Op::transpose) {
          const int q = producer[static_cast<size_t>(e.inputs[0])];
          EXPECT_TRUE(q < g.first || q > g.last) << "a transpose's operand made inside its group";
        }
        if (e.op == Op::gather_rows)
          for (int x : e.inputs) {
            const int q = producer[static_cast<size_t>(x)];
            EXPECT_TRUE(q < g.first || q > g.last) << "a gather's table or indices made inside its group";
          }
      }
      EXPECT_GE(reductions, 1);
    } else if (g.kind != GroupKind::loop) {
      EXPECT_EQ(g.size(), 1);
    } else {
      ++loops;
      for (int d = g.first; d <= g.last; ++d) {
        const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
        EXPECT_TRUE(fusible(e.op)) << op_name(e.op) << " in a loop group";
        EXPECT_EQ(f.program.type(e.out).numel(), g.numel);
        if ((e.op == Op::broadcast_in_dim && f.program.type(e.inputs[0]).numel() != g.numel) ||
            e.op == Op::transpose) {
          const int q = producer[static_cast<size_t>(e.inputs[0])];
          EXPECT_TRUE(q < g.first || q > g.last) << "a broadcast's smaller operand or a transpose's operand made inside its group";
        }
      }
    }
    // inputs and outputs, recomputed
    std::vector<int> ins, outs;
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
      for (int x : e.inputs) {
        const int q = producer[static_cast<size_t>(x)];
        if ((q < g.first || q > g.last) && std::find(ins.begin(), ins.end(), x) == ins.end()) ins.push_back(x);
      }
      bool used_outside = is_out[static_cast<size_t>(e.out)] != 0;
      for (int c = 0; c < E; ++c)
        if (c < g.first || c > g.last)
          for (int x : f.program.eqns[static_cast<size_t>(c)].inputs) used_outside |= x == e.out;
      if (used_outside) outs.push_back(e.out);
    }
    EXPECT_EQ(g.inputs, ins);
    EXPECT_EQ(g.outputs, outs);
  }
  EXPECT_EQ(next, E);
  // Maximality: two loop groups joined by a direct edge between members of
  // equal element count (a broadcast's operand only when counts are equal)
  // stay apart only when merging them would make a cycle, i.e. when the
  // consumer group is also reached through a third group.
  const int G = static_cast<int>(f.groups.size());
  std::vector<std::vector<int>> succ(static_cast<size_t>(G));
  for (int d = 0; d < E; ++d)
    for (int x : f.program.eqns[static_cast<size_t>(d)].inputs) {
      const int q = producer[static_cast<size_t>(x)];
      if (q >= 0 && f.group_of[static_cast<size_t>(q)] != f.group_of[static_cast<size_t>(d)])
        succ[static_cast<size_t>(f.group_of[static_cast<size_t>(q)])].push_back(f.group_of[static_cast<size_t>(d)]);
    }
  auto reaches_indirectly = [&](int a, int b) {  // a path a -> c -> ... -> b with c != b
    std::vector<char> seen(static_cast<size_t>(G), 0);
    std::vector<int> st;
    for (int c : succ[static_cast<size_t>(a)])
      if (c != b && !seen[static_cast<size_t>(c)]) { seen[static_cast<size_t>(c)] = 1; st.push_back(c); }
    while (!st.empty()) {
      const int c = st.back();
      st.pop_back();
      for (int s : succ[static_cast<size_t>(c)]) {
        if (s == b) return true;
        if (!seen[static_cast<size_t>(s)]) { seen[static_cast<size_t>(s)] = 1; st.push_back(s); }
      }
    }
    return false;
  };
  for (int d = 0; d < E; ++d) {
    const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
    const int gd = f.group_of[static_cast<size_t>(d)];
    if (f.groups[static_cast<size_t>(gd)].kind != GroupKind::loop) continue;
    // reads its operand at another index: never fused with its producer
    if (e.op == Op::transpose || e.op == Op::gather_rows) continue;
    for (int x : e.inputs) {
      const int q = producer[static_cast<size_t>(x)];
      if (q < 0) continue;
      const int gq = f.group_of[static_cast<size_t>(q)];
      if (gq == gd || f.groups[static_cast<size_t>(gq)].kind != GroupKind::loop) continue;
      if (f.program.type(x).numel() != f.groups[static_cast<size_t>(gd)].numel) continue;
      EXPECT_TRUE(reaches_indirectly(gq, gd))
          << "loop groups " << gq << " and " << gd << " could merge without a cycle";
    }
  }
  return loops;
}

// ---- programs ---------------------------------------------------------------------
std::vector<std::string> param_names(const nn::LmConfig& c) {
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  return names;
}

nn::LmConfig small_config() {
  nn::LmConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 48;
  c.context = 16;
  c.batch = 2;
  c.seq = 7;
  return c;
}

std::vector<Array> random_inputs(const Program& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Array> in;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Type& t = p.input_type(static_cast<int>(i));
    Array a(t);
    for (int64_t k = 0; k < a.numel(); ++k) {
      switch (t.dtype) {
        case DType::i32: a.set(k, static_cast<double>(rng() % 8)); break;  // valid token / row ids for small tables
        case DType::i1: a.set(k, static_cast<double>(rng() % 2)); break;
        default: a.set(k, std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
      }
    }
    in.push_back(std::move(a));
  }
  return in;
}

void expect_bit_equal(const std::vector<Array>& a, const std::vector<Array>& b, const Program& p) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) {
    if (a[o].bit_equal(b[o])) continue;
    double worst = 0;
    int64_t at = 0;
    for (int64_t k = 0; k < a[o].numel(); ++k) {
      const double d = std::abs(a[o].get(k) - b[o].get(k)) / std::max(1e-30, std::abs(b[o].get(k)));
      if (!(d <= worst)) { worst = d; at = k; }
    }
    ADD_FAILURE() << "output \"" << p.outputs[o].name << "\" differs: worst relative difference " << worst
                  << " at element " << at << " (" << a[o].get(at) << " vs " << b[o].get(at) << ")";
  }
}

// The scalars of the fused AdamW program are inputs; give them sane values.
std::vector<Array> adamw_inputs(const Program& p, uint64_t seed) {
  std::vector<Array> in = random_inputs(p, seed);
  const optim::AdamWScalars s = optim::adamw_scalars(optim::AdamW{}, 1);
  const float vals[4] = {s.lr, s.bc1, s.bc2, s.decay};
  for (int k = 0; k < 4; ++k) in[static_cast<size_t>(p.input_index(optim::kScalarNames[k]))].set(0, vals[k]);
  for (size_t i = 0; i < p.inputs.size(); ++i)  // second moments are non-negative
    if (p.inputs[i].name.rfind("adamw.v.", 0) == 0)
      for (int64_t k = 0; k < in[i].numel(); ++k) in[i].set(k, std::abs(in[i].get(k)));
  return in;
}

TEST(Fusion, SeedProgramsInvariantsAndKernelCounts) {
  const nn::LmConfig c;  // the seed's model
  const auto names = param_names(c);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  // the planner plans the adamw equations written out (fuse_program expands them)
  const Program fused = expand_adamw(optim::with_adamw(grad, names, optim::AdamW{}));
  for (const Program* p : {&grad, &fused}) {
    const Fused f = plan::fuse_program(*p);
    const int loops = check_invariants(*p, f);
    std::printf("[fusion] %s program: %s\n", p == &grad ? "gradient" : "fused AdamW", f.summary().c_str());
    EXPECT_GT(loops, 0);
    EXPECT_LT(f.launches_after * 2, f.launches_before) << f.summary();  // at least halves the launches
    const Fused u = plan::fuse_program(*p, false);
    check_invariants(*p, u);
    EXPECT_EQ(u.launches_after, u.launches_before);
  }
}

TEST(Fusion, AdamWUpdateOfEachParameterIsOneKernel) {
  const nn::LmConfig c = small_config();
  const auto names = param_names(c);
  const Program fused = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{});
  const Fused f = plan::fuse_program(fused);
  // each "<p>.new", "adamw.m.<p>.new" and "adamw.v.<p>.new" comes out of the same loop group
  for (const std::string& n : names) {
    int groups[3];
    const std::string outs[3] = {optim::updated_name(n), optim::updated_name(optim::moment1_name(n)),
                                 optim::updated_name(optim::moment2_name(n))};
    for (int k = 0; k < 3; ++k) {
      const int o = f.program.output_index(outs[k]);
      ASSERT_GE(o, 0) << outs[k];
      groups[k] = -1;
      for (size_t g = 0; g < f.groups.size(); ++g)
        for (int x : f.groups[g].outputs)
          if (x == f.program.outputs[static_cast<size_t>(o)].value) groups[k] = static_cast<int>(g);
      ASSERT_GE(groups[k], 0);
    }
    EXPECT_EQ(groups[0], groups[1]) << n;
    EXPECT_EQ(groups[0], groups[2]) << n;
  }
}

// AdamW known by name to the planner: each loop group that is one whole
// update names it (Group::adamw), from expand_adamw's record; the same
// equations without the record (written out beforehand) name nothing.
TEST(Fusion, ThePlannerNamesEachAdamwUpdateGroup) {
  const nn::LmConfig c = small_config();
  const auto names = param_names(c);
  const Program fused = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{});
  const Fused f = plan::fuse_program(fused);
  ASSERT_EQ(f.adamw.size(), names.size());
  std::vector<int> named(f.adamw.size(), 0);
  int loop_updates = 0;
  for (const plan::Group& g : f.groups) {
    if (g.adamw < 0) continue;
    EXPECT_EQ(g.kind, plan::GroupKind::loop);
    ASSERT_LT(static_cast<size_t>(g.adamw), f.adamw.size());
    ++named[static_cast<size_t>(g.adamw)];
    const ExpandedAdamW& u = f.adamw[static_cast<size_t>(g.adamw)];
    std::vector<char> mine(static_cast<size_t>(f.program.num_values()), 0);
    for (int v : u.values) mine[static_cast<size_t>(v)] = 1;
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
      EXPECT_TRUE(e.op == Op::constant || mine[static_cast<size_t>(e.out)]) << "equation " << d;
    }
    EXPECT_EQ(f.group_of[static_cast<size_t>(g.last)], f.group_of[static_cast<size_t>(g.first)]);
  }
  // Every update whose three results come out of a loop group of its own
  // (the AdamWUpdateOfEachParameterIsOneKernel test: all three share one
  // group) is named once; the others (a gain's, merged into its gradient's
  // column group) not at all.
  for (size_t k = 0; k < f.adamw.size(); ++k) {
    int group = -1;
    for (size_t g = 0; g < f.groups.size(); ++g)
      for (int x : f.groups[g].outputs)
        if (x == f.adamw[k].p_out) group = static_cast<int>(g);
    ASSERT_GE(group, 0);
    const plan::Group& g = f.groups[static_cast<size_t>(group)];
    bool only_this = g.kind == plan::GroupKind::loop;
    std::vector<char> mine(static_cast<size_t>(f.program.num_values()), 0);
    for (int v : f.adamw[k].values) mine[static_cast<size_t>(v)] = 1;
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = f.program.eqns[static_cast<size_t>(d)];
      only_this = only_this && (e.op == Op::constant || mine[static_cast<size_t>(e.out)]);
    }
    EXPECT_EQ(named[k], only_this ? 1 : 0) << names[k];
    loop_updates += only_this ? 1 : 0;
  }
  EXPECT_GT(loop_updates, 0);
  const Fused written_out = plan::fuse_program(expand_adamw(fused));
  EXPECT_TRUE(written_out.adamw.empty());
  for (const plan::Group& g : written_out.groups) EXPECT_EQ(g.adamw, -1);
  EXPECT_EQ(written_out.groups.size(), f.groups.size());
}

TEST(Fusion, SeedProgramsGroupByGroupEqualTheInterpreterBitForBit) {
  const nn::LmConfig c = small_config();
  const auto names = param_names(c);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const Program fused = optim::with_adamw(grad, names, optim::AdamW{});
  for (const Program* p : {&grad, &fused}) {
    const std::vector<Array> in = p == &fused ? adamw_inputs(*p, 7) : random_inputs(*p, 7);
    const Fused f = plan::fuse_program(*p);
    expect_bit_equal(run_grouped(f, in), host::run(*p, in), *p);
  }
}

// ---- random programs ----------------------------------------------------------
// Shapes A=[3,5], B=[5], C=[3], D=[5,3], S=[], R=[15]; ops of every kind that
// the grouping treats differently, in random order.
Program random_program(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Program p;
  p.name = "random" + std::to_string(seed);
  const std::vector<Shape> shapes = {{3, 5}, {5}, {3}, {5, 3}, {}, {15}};
  std::vector<std::vector<int>> pool(shapes.size());
  auto ty = [](Shape s) { return Type{DType::f32, std::move(s)}; };
  for (size_t s = 0; s < shapes.size(); ++s)
    pool[s].push_back(p.add_input("in" + std::to_string(s), ty(shapes[s])));
  auto any = [&](size_t s) { return pool[s][pick(pool[s].size())]; };
  const int n = 12 + static_cast<int>(pick(30));
  for (int k = 0; k < n; ++k) {
    const size_t s = pick(shapes.size());
    Attrs at;
    int v = -1;
    switch (pick(12)) {
      case 0: case 1: {
        const Op ops[] = {Op::add, Op::subtract, Op::multiply, Op::divide, Op::maximum};
        v = p.add_eqn(ops[pick(5)], {any(s), any(s)}, {});
        break;
      }
      case 2: {
        const Op ops[] = {Op::negate, Op::tanh, Op::exponential};
        v = p.add_eqn(ops[pick(3)], {any(s)}, {});
        break;
      }
      case 3: {  // compare + select
        at.cmp = static_cast<Cmp>(pick(6));
        const int c = p.add_eqn(Op::compare, {any(s), any(s)}, at);
        v = p.add_eqn(Op::select, {c, any(s), any(s)}, {});
        break;
      }
      case 4: {  // through i32 and back
        const int i = p.add_eqn_typed(Op::convert, {any(s)}, {}, {DType::i32, shapes[s]});
        v = p.add_eqn_typed(Op::convert, {i}, {}, ty(shapes[s]));
        break;
      }
      case 5: {  // broadcasts into A
        const size_t from = pick(3);
        if (from == 0) { at.dims = {1}; v = p.add_eqn_typed(Op::broadcast_in_dim, {any(1)}, at, ty({3, 5})); }
        else if (from == 1) { at.dims = {0}; v = p.add_eqn_typed(Op::broadcast_in_dim, {any(2)}, at, ty({3, 5})); }
        else { at.dims = {}; v = p.add_eqn_typed(Op::broadcast_in_dim, {any(4)}, at, ty({3, 5})); }
        pool[0].push_back(v);
        continue;
      }
      case 6: {  // reductions of A
        at.dims = {pick(2) == 0 ? int64_t{0} : int64_t{1}};
        v = p.add_eqn(pick(2) ? Op::reduce_sum : Op::reduce_max, {any(0)}, at);
        pool[at.dims[0] == 0 ? 1 : 2].push_back(v);
        continue;
      }
      case 7: {  // A <-> R reshape
        if (pick(2)) { v = p.add_eqn_typed(Op::reshape, {any(0)}, {}, ty({15})); pool[5].push_back(v); }
        else { v = p.add_eqn_typed(Op::reshape, {any(5)}, {}, ty({3, 5})); pool[0].push_back(v); }
        continue;
      }
      case 8: {  // transpose A <-> D
        at.dims = {1, 0};
        const bool a_to_d = pick(2);
        v = p.add_eqn(Op::transpose, {a_to_d ? any(0) : any(3)}, at);
        pool[a_to_d ? 3 : 0].push_back(v);
        continue;
      }
      case 9: {  // dot A x D -> [3,3]; reduce to C
        at.lhs_contract = {1};
        at.rhs_contract = {0};
        const int m = p.add_eqn(Op::dot_general, {any(0), any(3)}, at);
        Attrs r;
        r.dims = {1};
        v = p.add_eqn(Op::reduce_sum, {m}, r);
        pool[2].push_back(v);
        continue;
      }
      case 10: {  // a constant, splat or not
        at.literal = pick(2) ? std::vector<double>{0.5} : std::vector<double>(static_cast<size_t>(ty(shapes[s]).numel()), 0.25);
        for (size_t j = 1; j < at.literal.size(); ++j) at.literal[j] = 0.125 * static_cast<double>(j);
        v = p.add_eqn_typed(Op::constant, {}, at, ty(shapes[s]));
        break;
      }
      default: {  // same-count broadcast: [5] -> [1,5] -> reshape back
        at.dims = {1};
        const int b = p.add_eqn_typed(Op::broadcast_in_dim, {any(1)}, at, ty({1, 5}));
        v = p.add_eqn_typed(Op::reshape, {b}, {}, ty({5}));
        pool[1].push_back(v);
        continue;
      }
    }
    pool[s].push_back(v);
  }
  // a few outputs, one of them aliased to an input of its type
  for (size_t s = 0; s < shapes.size(); ++s) p.add_output("out" + std::to_string(s), pool[s].back());
  if (pool[0].back() != p.inputs[0].value) p.aliases.push_back({0, 0});
  return p;
}

TEST(Fusion, RandomProgramsInvariantsAndSemantics) {
  int fused_some = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Program p = random_program(seed);
    ASSERT_NO_THROW(verify(p));
    const Fused f = plan::fuse_program(p);
    fused_some += check_invariants(p, f) > 0 && f.launches_after < f.launches_before;
    const std::vector<Array> in = random_inputs(p, seed);
    expect_bit_equal(run_grouped(f, in), host::run(p, in), p);
    if (HasFailure()) break;
  }
  EXPECT_GT(fused_some, 200);
}

// ---- the memory plan with fused spans ------------------------------------------
// One tag per byte; a loop group checks every read first, then writes all its
// outputs, as its kernel does; internal values get no bytes and no checks.
int simulate_fused(const Fused& f, const plan::Plan& pl) {
  const Program& p = f.program;
  std::map<plan::Space, std::vector<int>> mem;
  mem[plan::Space::inputs].assign(pl.inputs_bytes, -1);
  mem[plan::Space::statics].assign(pl.statics_bytes, -1);
  mem[plan::Space::arena].assign(pl.arena_bytes, -1);
  // Equal constants and iotas share one location in the statics: the first one's tag there.
  std::map<size_t, int> static_tag;
  for (const Eqn& e : p.eqns)
    if (e.op == Op::constant || e.op == Op::iota)
      static_tag.try_emplace(pl.values[static_cast<size_t>(e.out)].loc.offset, e.out);
  auto root = [&](int x) {
    const int r = pl.values[static_cast<size_t>(x)].root;
    const auto& rv = pl.values[static_cast<size_t>(r)];
    return rv.loc.space == plan::Space::statics ? static_tag.at(rv.loc.offset) : r;
  };
  auto write = [&](int x) {
    const auto& v = pl.values[static_cast<size_t>(x)];
    auto& m = mem[v.loc.space];
    for (size_t b = 0; b < v.bytes; ++b) m.at(v.loc.offset + b) = root(x);
  };
  auto holds = [&](int x) {
    const auto& v = pl.values[static_cast<size_t>(x)];
    auto& m = mem[v.loc.space];
    for (size_t b = 0; b < v.bytes; ++b)
      if (v.loc.offset + b >= m.size() || m[v.loc.offset + b] != root(x)) return false;
    return true;
  };
  int fail = 0;
  for (const auto& in : p.inputs) write(in.value);
  for (const Eqn& e : p.eqns)
    if (e.op == Op::constant || e.op == Op::iota) write(e.out);
  for (const Group& g : f.groups) {
    for (int x : g.inputs) fail += !holds(x);
    if (g.kind == GroupKind::free) continue;
    for (int x : g.outputs) write(x);
  }
  for (const auto& c : pl.end_copies) {
    auto& from = mem[c.from.space];
    auto& to = mem[c.to.space];
    std::vector<int> tmp(from.begin() + static_cast<long>(c.from.offset),
                         from.begin() + static_cast<long>(c.from.offset + c.bytes));
    std::copy(tmp.begin(), tmp.end(), to.begin() + static_cast<long>(c.to.offset));
  }
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const int x = p.outputs[o].value;
    const auto& l = pl.output_loc[o];
    auto& m = mem[l.space];
    for (size_t b = 0; b < pl.values[static_cast<size_t>(x)].bytes; ++b)
      if (m.at(l.offset + b) != root(x)) { ++fail; break; }
  }
  return fail;
}

plan::Plan fused_plan(const Fused& f) { return plan::plan_memory(f.program, plan::memory_options(f)); }

TEST(Fusion, MemoryPlanWithSpansKeepsEveryOperandIntact) {
  const nn::LmConfig c = small_config();
  const auto names = param_names(c);
  const Program fused = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{});
  const Fused f = plan::fuse_program(fused);
  const plan::Plan pl = fused_plan(f);
  int donated = 0;
  for (int d : pl.donated_input) donated += d >= 0;
  EXPECT_EQ(donated, static_cast<int>(fused.aliases.size())) << plan::describe(f.program, pl);
  EXPECT_EQ(simulate_fused(f, pl), 0);
  const plan::Plan unfused = plan::plan_memory(f.program);
  std::printf("[fusion] arena: %zu bytes fused, %zu unfused\n", pl.arena_bytes, unfused.arena_bytes);
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Program p = random_program(seed);
    const Fused rf = plan::fuse_program(p);
    EXPECT_EQ(simulate_fused(rf, fused_plan(rf)), 0) << "seed " << seed << "\n" << to_text(rf.program);
    if (HasFailure()) break;
  }
}

TEST(Fusion, UnfusedGroupingEqualsTheInterpreter) {
  // the evaluator's harness on its own: every equation a group of its own
  const nn::LmConfig c = small_config();
  const auto names = param_names(c);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const std::vector<Array> in = random_inputs(grad, 3);
  const Fused f = plan::fuse_program(grad, false);
  for (const Group& g : f.groups) EXPECT_NE(g.kind, GroupKind::loop);
  expect_bit_equal(run_grouped(f, in), host::run(grad, in), grad);
}

TEST(Fusion, LibraryGemmTransposeViewsLeaveTheGroupsAsTheyAre) {
  // Target::library_gemm_reads_transpose: a transpose whose every reader is a
  // dot_general (no gemm group) that the rule accepts on each side it reads
  // it is a view, with loops and without, and the groups, their kinds and
  // their order stay those of the plan without the rule.
  const nn::LmConfig c = small_config();
  const Program grad = value_and_grad(nn::lm_loss_program(c), param_names(c));
  std::vector<std::pair<int, int>> asked;  // (dot equation's output, side)
  for (const bool loops : {true, false}) {
    plan::Target plain = plan::host_target();
    plain.loops = loops;
    plan::Target rule = plain;
    rule.library_gemm_reads_transpose = [&](const Program&, const Eqn& dot, int side, const Eqn& tr) {
      EXPECT_EQ(dot.op, Op::dot_general);
      EXPECT_EQ(tr.op, Op::transpose);
      EXPECT_EQ(dot.inputs[static_cast<size_t>(side)], tr.out);
      asked.emplace_back(dot.out, side);
      return side == 1;  // only right-hand operands read in place
    };
    const Fused a = plan::fuse_program(grad, plain), b = plan::fuse_program(grad, rule);
    ASSERT_EQ(a.old_index, b.old_index);
    ASSERT_EQ(a.groups.size(), b.groups.size());
    for (size_t g = 0; g < a.groups.size(); ++g) {
      EXPECT_EQ(a.groups[g].kind, b.groups[g].kind);
      EXPECT_EQ(a.groups[g].first, b.groups[g].first);
      EXPECT_EQ(a.groups[g].last, b.groups[g].last);
      EXPECT_EQ(a.groups[g].wave, b.groups[g].wave);
    }
    // the expected views, from the readers alone
    const Program& p = b.program;
    std::vector<char> output(static_cast<size_t>(p.num_values()), 0);
    for (const NamedValue& o : p.outputs) output[static_cast<size_t>(o.value)] = 1;
    int views = 0;
    for (size_t d = 0; d < p.eqns.size(); ++d) {
      const Eqn& e = p.eqns[d];
      bool expect = e.op == Op::transpose && !output[static_cast<size_t>(e.out)];
      int readers = 0;
      for (const Eqn& r : p.eqns)
        for (size_t k = 0; k < r.inputs.size(); ++k)
          if (r.inputs[k] == e.out) {
            ++readers;
            expect &= r.op == Op::dot_general && k == 1;
          }
      expect &= readers > 0;
      EXPECT_EQ(b.view[d] != 0, expect || a.view[d] != 0) << "equation " << b.old_index[d];
      if (expect) EXPECT_EQ(b.groups[static_cast<size_t>(b.group_of[d])].size(), 1) << "equation " << b.old_index[d];
      views += expect;
    }
    EXPECT_GT(views, 0);  // the attention's transposed keys are read so
  }
  EXPECT_FALSE(asked.empty());
}

TEST(Fusion, SpanReadersBlockUnsafeDonation) {
  // out = broadcast(x[0..]) + x: the group reads input x through a broadcast,
  // so x's region cannot take the output while the kernel still reads it.
  Program p;
  const int x = p.add_input("x", {DType::f32, {1, 4}});
  const int y = p.add_input("y", {DType::f32, {4, 4}});
  Attrs b;
  b.dims = {0, 1};
  const int bx = p.add_eqn_typed(Op::broadcast_in_dim, {x}, b, {DType::f32, {4, 4}});
  const int s = p.add_eqn(Op::add, {bx, y}, {});
  p.add_output("y.new", s);
  p.aliases.push_back({0, 1});  // y.new -> y: y read elementwise only: in place
  const Fused f = plan::fuse_program(p);
  ASSERT_EQ(f.groups.size(), 1u);
  plan::Plan pl = fused_plan(f);
  EXPECT_EQ(pl.donated_input[0], 1);
  EXPECT_TRUE(pl.notes.empty());
  // now y.new -> an input read through the broadcast of the same group
  Program q;
  const int x2 = q.add_input("x", {DType::f32, {4, 4}});
  Attrs r;
  r.dims = {1};
  const int row = q.add_eqn(Op::reduce_sum, {x2}, r);  // single group: [4]
  Attrs b2;
  b2.dims = {0};
  const int brow = q.add_eqn_typed(Op::broadcast_in_dim, {row}, b2, {DType::f32, {4, 4}});
  const int t = q.add_eqn_typed(Op::reshape, {x2}, {}, {DType::f32, {16}});
  const int t2 = q.add_eqn_typed(Op::reshape, {t}, {}, {DType::f32, {4, 4}});
  Attrs b3;
  b3.dims = {0, 1};
  const int bt = q.add_eqn_typed(Op::broadcast_in_dim, {t2}, b3, {DType::f32, {4, 4}});  // same count: fused
  const int sum = q.add_eqn(Op::add, {brow, bt}, {});
  q.add_output("x.new", sum);
  q.aliases.push_back({0, 0});
  const Fused g = plan::fuse_program(q);
  pl = fused_plan(g);
  EXPECT_EQ(pl.donated_input[0], -1) << "broadcast_in_dim reads x in the kernel that would overwrite it";
  EXPECT_EQ(pl.notes.size(), 1u);
  EXPECT_EQ(simulate_fused(g, pl), 0);
}

}  // namespace
}  // namespace capstep
