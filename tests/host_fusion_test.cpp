// Fused host execution (src/backend/host/fused.h): loop, row and column groups
// run tile by tile must give bitwise the results of the unfused interpreter,
// at every tile size (tiles that divide nothing, one element, everything at
// once), on hand-built groups checked against plain loops, on the seed model's
// gradient step and on the with_adamw program (AdamW inside the program).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/host/fused.h"
#include "backend/plan/fusion.h"
#include "ir/bf16.h"
#include "ir/scalar_math.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/ir.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "seed_step.h"
#include "test_util.h"

using namespace capstep;

namespace {

Array random_array(const Type& t, uint64_t seed) { return test::lcg_array(t, seed); }

host::InterpreterOptions opts(bool fuse, int64_t tile = 1024) {
  host::InterpreterOptions o;
  o.fuse = fuse;
  o.tile_elems = tile;
  return o;
}

std::vector<Array> run_with(const Program& p, const host::InterpreterOptions& o, const std::vector<Array>& in,
                            int* groups = nullptr) {
  host::Interpreter it(p, o);
  if (groups) *groups = it.fused_groups();
  std::vector<Array> out = it.run(in);
  std::vector<Array> again = it.run(in);  // a second run on the same state gives the same bits
  for (size_t j = 0; j < out.size(); ++j) EXPECT_TRUE(out[j].bit_equal(again[j])) << "output " << j << " changed on rerun";
  return out;
}

// Fused at several tile sizes == unfused, bit for bit; returns the fused group count.
int expect_fused_equals_unfused(const Program& p, const std::vector<Array>& in) {
  const std::vector<Array> ref = run_with(p, opts(false), in);
  int groups = 0;
  for (int64_t tile : {int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1024}, int64_t{1} << 30}) {
    int g = 0;
    const std::vector<Array> got = run_with(p, opts(true, tile), in, &g);
    groups = g;
    EXPECT_EQ(got.size(), ref.size());
    for (size_t j = 0; j < got.size() && j < ref.size(); ++j)
      EXPECT_TRUE(got[j].bit_equal(ref[j])) << "program \"" << p.name << "\" output " << p.outputs[j].name
                                             << ", tile " << tile;
  }
  return groups;
}

// softmax over the last axis of x: f32[R, C], then y = softmax * w with w: f32[C]
// broadcast from outside the group.
Program softmax_program(int64_t R, int64_t C) {
  Program p;
  p.name = "softmax";
  const int x = p.add_input("x", {DType::f32, {R, C}});
  const int w = p.add_input("w", {DType::f32, {C}});
  Attrs ax;
  ax.dims = {1};
  const int mx = p.add_eqn(Op::reduce_max, {x}, ax);
  Attrs b;
  b.dims = {0};
  const int mxb = p.add_eqn_typed(Op::broadcast_in_dim, {mx}, b, Type{DType::f32, {R, C}});
  const int e = p.add_eqn(Op::exponential, {p.add_eqn(Op::subtract, {x, mxb}, {})}, {});
  const int s = p.add_eqn(Op::reduce_sum, {e}, ax);
  const int sm = p.add_eqn(Op::divide, {e, p.add_eqn_typed(Op::broadcast_in_dim, {s}, b, Type{DType::f32, {R, C}})}, {});
  Attrs bw;
  bw.dims = {1};
  p.add_output("y", p.add_eqn(Op::multiply, {sm, p.add_eqn_typed(Op::broadcast_in_dim, {w}, bw, Type{DType::f32, {R, C}})}, {}));
  p.add_output("rowsum", s);
  return p;
}

// column sums of g = a * b over the rows of f32[R, K], then u = colsum * 2 + c
// (c: f32[K]), and the transpose of a added to h (a loop group with a strided read).
Program colsum_program(int64_t R, int64_t K) {
  Program p;
  p.name = "colsum";
  const int a = p.add_input("a", {DType::f32, {R, K}});
  const int bb = p.add_input("b", {DType::f32, {R, K}});
  const int c = p.add_input("c", {DType::f32, {K}});
  const int h = p.add_input("h", {DType::f32, {K, R}});
  Attrs ax;
  ax.dims = {0};
  const int cs = p.add_eqn(Op::reduce_sum, {p.add_eqn(Op::multiply, {a, bb}, {})}, ax);
  Attrs two;
  two.literal = {2.0};
  const int k2 = p.add_eqn_typed(Op::constant, {}, two, Type{DType::f32, {K}});
  p.add_output("u", p.add_eqn(Op::add, {p.add_eqn(Op::multiply, {cs, k2}, {}), c}, {}));
  Attrs tr;
  tr.dims = {1, 0};
  const int at = p.add_eqn(Op::transpose, {a}, tr);
  p.add_output("t", p.add_eqn(Op::tanh, {p.add_eqn(Op::add, {at, h}, {})}, {}));
  return p;
}

}  // namespace

TEST(HostFusion, SoftmaxRowsMatchLoopsAndUnfused) {
  const int64_t R = 13, C = 37;  // tiles of whole rows that divide neither
  const Program p = softmax_program(R, C);
  const std::vector<Array> in = {random_array(p.input_type(0), 1), random_array(p.input_type(1), 2)};
  const int groups = expect_fused_equals_unfused(p, in);
  EXPECT_GE(groups, 1);
  const std::vector<Array> y = host::Interpreter(p, opts(true, 50)).run(in);
  for (int64_t r = 0; r < R; ++r) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < C; ++j) mx = std::max(mx, in[0].data<float>()[r * C + j]);
    float sum = 0;
    for (int64_t j = 0; j < C; ++j) sum += std::exp(in[0].data<float>()[r * C + j] - mx);
    EXPECT_NEAR(y[1].data<float>()[r], sum, 1e-4f * sum) << "row " << r;
    for (int64_t j = 0; j < C; ++j) {
      const float want = std::exp(in[0].data<float>()[r * C + j] - mx) / sum * in[1].data<float>()[j];
      EXPECT_NEAR(y[0].data<float>()[r * C + j], want, 1e-5f) << r << "," << j;
    }
  }
}

TEST(HostFusion, ColumnSumsAndStridedReadsMatchLoopsAndUnfused) {
  const int64_t R = 23, K = 11;
  const Program p = colsum_program(R, K);
  std::vector<Array> in;
  for (int i = 0; i < 4; ++i) in.push_back(random_array(p.input_type(i), 10 + static_cast<uint64_t>(i)));
  const int groups = expect_fused_equals_unfused(p, in);
  EXPECT_GE(groups, 2);  // the column reduction with its consumers, and the transpose's loop
  const std::vector<Array> y = host::Interpreter(p, opts(true, 30)).run(in);
  const float* a = in[0].data<float>();
  const float* b = in[1].data<float>();
  for (int64_t j = 0; j < K; ++j) {
    float s = 0;
    for (int64_t i = 0; i < R; ++i) s += a[i * K + j] * b[i * K + j];
    EXPECT_EQ(y[0].data<float>()[j], s * 2.0f + in[2].data<float>()[j]) << "column " << j;
  }
  for (int64_t j = 0; j < K; ++j)
    for (int64_t i = 0; i < R; ++i)
      EXPECT_NEAR(y[1].data<float>()[j * R + i], std::tanh(a[i * K + j] + in[3].data<float>()[j * R + i]), 2e-6f);
}

using test::SeedStep;

TEST(HostFusion, SeedGradientStepIsBitwiseUnfused) {
  SeedStep s;
  const int groups = expect_fused_equals_unfused(s.grad, s.in);
  // The seed step's loop, row (softmax, RMSNorm, cross-entropy) and column
  // (gain and bias gradients) groups: far more than a handful run fused.
  EXPECT_GE(groups, 20);
  host::Interpreter it(s.grad, opts(true));
  EXPECT_GE(it.fused_equations(), 100);
  // The 16 transposes (to and from the attention heads, forward and back, in
  // each layer) run no step (DotGeneralFolding in interpreter_test): the 8
  // that only dot_generals read are read in place (q, k, v, and the attention
  // output's cotangent), and the dot_generals whose one reader is the other 8
  // write their results in its layout (the attention output, dq, dk, dv).
  int transposes = 0;
  for (const Eqn& e : s.grad.eqns) transposes += e.op == Op::transpose;
  EXPECT_EQ(transposes, 16);
  EXPECT_EQ(it.own_steps(Op::transpose), 0);
  EXPECT_EQ(host::Interpreter(s.grad, opts(false)).own_steps(Op::transpose), 0);
  // The first block's RMSNorm (and the embeddings' sum before it) runs in its
  // row group although the GPU's group starts with the token embedding's
  // gather, which runs as a step of its own: no elementwise step is left
  // outside a group, but for cross_entropy's index arithmetic: one i32
  // multiply and one add over the 64 positions (position * classes + label,
  // the flat index of each label's logit). The third gather is
  // cross_entropy's check of the targets (64 labels), the fourth its gather
  // of the labels' logits.
  EXPECT_EQ(it.own_steps(Op::gather_rows), 4);
  for (Op op : {Op::add, Op::multiply}) EXPECT_EQ(it.own_steps(op), 1) << op_name(op);
  for (Op op : {Op::broadcast_in_dim, Op::rsqrt}) EXPECT_EQ(it.own_steps(op), 0) << op_name(op);
}

TEST(HostFusion, WithAdamwProgramIsBitwiseUnfused) {
  SeedStep s;
  optim::AdamW aw;
  const Program p = optim::with_adamw(s.grad, s.names, aw);
  const std::vector<Array> in = s.with_adamw_inputs(aw);
  ASSERT_EQ(in.size(), p.inputs.size());
  EXPECT_GE(expect_fused_equals_unfused(p, in), 20);
  // Every matrix's update is one loop group that runs as the AdamW loop (the
  // bits above include them); the five RMSNorm weights' updates (vectors of
  // d_model) join the column sums that make their gradients, in col groups,
  // and run tile by tile. Unfused, none.
  int matrices = 0;
  for (const nn::ParamSpec& ps : nn::lm_parameters(s.c)) matrices += ps.type.rank() > 1 ? 1 : 0;
  EXPECT_EQ(matrices, static_cast<int>(s.names.size()) - 5);
  EXPECT_EQ(host::Interpreter(p).adamw_groups(), matrices);
  EXPECT_EQ(host::Interpreter(p, opts(false)).adamw_groups(), 0);
}

// AdamW known by name: a parameter's three adamw equations (ir.h, what
// with_adamw writes) run as the AdamW loop, == optim::adamw_update bit for
// bit; the same arithmetic written out by hand (the equations expand_adamw
// makes of them, which the host once matched by their shape) runs as its
// members, and so does an update of which only m' and v' are wanted. An
// update of a gradient rounded to bf16 and back (mixed precision's weight
// cotangent) runs as the AdamW loop reading the gradient rounded. Fused ==
// unfused bit for bit every way.
TEST(HostFusion, OnlyAdamwEquationsRunAsTheAdamwLoop) {
  enum Variant { primitive, by_hand, moments_only, rounded_gradient };
  const struct {
    Variant v;
    const char* name;
    bool matches;
  } cases[] = {{primitive, "three adamw equations", true},
               {by_hand, "the same equations written by hand", false},
               {moments_only, "only m' and v' wanted", false},
               {rounded_gradient, "the gradient rounded to bf16 and back", true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tracer tr;
    const Type t{DType::f32, {3, 70}};
    Tensor P = tr.input("p", t), G = tr.input("g", t), M = tr.input("m", t), V = tr.input("v", t);
    Tensor lr = tr.input("lr", {DType::f32, {}}), bc1 = tr.input("bc1", {DType::f32, {}}),
           bc2 = tr.input("bc2", {DType::f32, {}}), decay = tr.input("decay", {DType::f32, {}});
    std::vector<std::pair<std::string, Tensor>> outs;
    if (c.v == by_hand) {
      Tensor m = M * 0.9 + G * (1.0 - 0.9);
      Tensor v = V * 0.999 + (G * G) * (1.0 - 0.999);
      Tensor upd = (m * bc1) / (sqrt(v * bc2) + 1e-8);
      outs = {{"p.new", P * decay - lr * upd}, {"m.new", m}, {"v.new", v}};
    } else {
      Attrs a;
      a.literal = {0.9, 0.999, 1e-8};
      const Tensor g = c.v == rounded_gradient ? convert(convert(G, DType::bf16), DType::f32) : G;
      auto result = [&](int64_t axis) {
        a.axis = axis;
        return tr.emit(Op::adamw, {P, g, M, V, lr, bc1, bc2, decay}, a);
      };
      if (c.v != moments_only) outs.push_back({"p.new", result(0)});
      outs.push_back({"m.new", result(1)});
      outs.push_back({"v.new", result(2)});
    }
    Program p = tr.finish(outs);
    std::vector<Array> in;
    for (int i = 0; i < 4; ++i) {
      Array a(t);
      for (int64_t j = 0; j < a.numel(); ++j)
        a.set(j, i == 3 ? 0.001 * static_cast<double>(j % 13) : std::sin(0.1 * static_cast<double>(j + 17 * i)));
      in.push_back(a);
    }
    for (double x : {3e-3, 1.5, 1.2, 0.99997}) in.push_back(Array::f32({}, {static_cast<float>(x)}));
    EXPECT_EQ(host::Interpreter(p).adamw_groups(), c.matches ? 1 : 0);
    EXPECT_GE(expect_fused_equals_unfused(p, in), 1);
    if (c.v == moments_only) continue;
    Array pp = in[0], mm = in[2], vv = in[3], gg = in[1];
    if (c.v == rounded_gradient) {
      int changed = 0;  // the rounding changes the gradient: a kernel that skipped it would differ
      for (int64_t j = 0; j < gg.numel(); ++j) {
        float& x = gg.data<float>()[j];
        const float r = bf16::to_float(bf16::from_float(x));
        changed += r != x ? 1 : 0;
        x = r;
      }
      EXPECT_GT(changed, gg.numel() / 2);
    }
    optim::AdamW aw;
    aw.beta1 = 0.9;
    aw.beta2 = 0.999;
    aw.eps = 1e-8;
    optim::adamw_update(aw, {3e-3f, 1.5f, 1.2f, 0.99997f}, pp, gg, mm, vv);
    const std::vector<Array> out = host::Interpreter(p).run(in);
    EXPECT_TRUE(out[0].bit_equal(pp));
    EXPECT_TRUE(out[1].bit_equal(mm));
    EXPECT_TRUE(out[2].bit_equal(vv));
  }
}

// The AdamW loop's buffers (host::run_adamw through run_fused_group): results
// apart from the inputs (the interpreter's layout), results that are their
// inputs (in place), and a result overlapping another input, which it
// refuses (the group's members run instead: none here, so nothing is written).
TEST(HostFusion, AdamwLoopOnItsBuffers) {
  const int64_t n = 40000;  // two parts on two threads
  std::vector<float> buf(static_cast<size_t>(8 * n + 16));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = 0.25f + 0.001f * static_cast<float>(i % 97);
  float consts[9] = {0.9f, 0.1f, 0.999f, 0.001f, 1e-8f, 3e-3f, 1.5f, 1.2f, 0.99997f};
  host::FusedGroup grp;
  grp.kind = plan::GroupKind::loop;
  grp.numel = n;
  grp.tile = 1024;
  host::AdamWShortcut& a = grp.adamw;
  a.on = true;
  a.p = 0, a.g = 1, a.m = 2, a.v = 3, a.p_out = 4, a.m_out = 5, a.v_out = 6;
  a.b1 = 7, a.c1 = 8, a.b2 = 9, a.c2 = 10, a.eps = 11, a.lr = 12, a.bc1 = 13, a.bc2 = 14, a.decay = 15;
  host::Step step;
  step.group = &grp;
  optim::AdamW aw;  // beta1 0.9, beta2 0.999, eps 1e-8: the constants above
  const optim::AdamWScalars sc{3e-3f, 1.5f, 1.2f, 0.99997f};
  for (int layout = 0; layout < 3; ++layout) {
    SCOPED_TRACE(layout == 0 ? "apart" : layout == 1 ? "in place" : "overlapping");
    std::vector<float> mem = buf;
    float* base = mem.data();
    void* slots[16];
    for (int k = 0; k < 7; ++k) slots[k] = base + k * n;
    for (int k = 0; k < 9; ++k) slots[7 + k] = &consts[k];
    if (layout == 1)
      for (int k = 0; k < 3; ++k) slots[4 + k] = slots[k == 0 ? 0 : k + 1];  // p, m, v updated where they are
    if (layout == 2) slots[5] = base + n + 8;  // m' overlapping the gradient
    std::vector<float> p(base, base + n), g(base + n, base + 2 * n), m(base + 2 * n, base + 3 * n),
        v(base + 3 * n, base + 4 * n);
    const std::vector<float> before = mem;
    optim::adamw_update(aw, sc, p.data(), g.data(), m.data(), v.data(), n);
    host::run_fused_group(step, slots);
    const float* po = static_cast<const float*>(slots[4]);
    const float* mo = static_cast<const float*>(slots[5]);
    const float* vo = static_cast<const float*>(slots[6]);
    if (layout == 2) {
      EXPECT_EQ(mem, before) << "refused: nothing written";
      continue;
    }
    int bad = 0;
    for (int64_t i = 0; i < n; ++i)
      if ((po[i] != p[static_cast<size_t>(i)] || mo[i] != m[static_cast<size_t>(i)] || vo[i] != v[static_cast<size_t>(i)]) &&
          bad++ < 3)
        ADD_FAILURE() << "element " << i;
    EXPECT_EQ(bad, 0);
  }
}

TEST(HostFusion, FuseOptionTurnsFusionOff) {
  const Program p = softmax_program(4, 8);
  EXPECT_TRUE(host::InterpreterOptions::defaults().fuse);
  EXPECT_GE(host::Interpreter(p).fused_groups(), 1);
  EXPECT_GE(host::Interpreter(p, opts(true)).fused_groups(), 1);
  EXPECT_EQ(host::Interpreter(p, opts(false)).fused_groups(), 0);
}

TEST(HostFusion, GroupReadingAMemberAtOtherIndicesRunsUnfused) {
  // y = transpose(x * 2) + z: the transpose reads a member of its own loop
  // group at other indices, so that group must not run tile by tile.
  Program p;
  p.name = "transpose_of_member";
  const int x = p.add_input("x", {DType::f32, {6, 6}});
  const int z = p.add_input("z", {DType::f32, {6, 6}});
  Attrs two;
  two.literal = {2.0};
  const int k = p.add_eqn_typed(Op::constant, {}, two, Type{DType::f32, {6, 6}});
  Attrs tr;
  tr.dims = {1, 0};
  const int t = p.add_eqn(Op::transpose, {p.add_eqn(Op::multiply, {x, k}, {})}, tr);
  p.add_output("y", p.add_eqn(Op::add, {t, z}, {}));
  // fuse_program never forms such a group (plan/fusion.cpp refuses it);
  // host_fusable refuses it as well, should a plan ever hold one.
  plan::Group g;
  g.kind = plan::GroupKind::loop;
  g.first = 1;  // multiply, transpose, add (equation 0 is the constant)
  g.last = 3;
  g.numel = 36;
  std::vector<host::Step> steps(3);
  for (host::Step& st : steps) st.fn = &host::run_fused_group;  // any kernel: not an alias
  std::string why;
  EXPECT_FALSE(host::host_fusable(p, g, steps, &why));
  EXPECT_EQ(why, "reads a member's value at other indices");
  g.first = 2;  // transpose (of a value made outside) and add: fusable
  steps.resize(2);
  EXPECT_TRUE(host::host_fusable(p, g, steps, &why)) << why;
  const std::vector<Array> in = {random_array(p.input_type(0), 5), random_array(p.input_type(1), 6)};
  const std::vector<Array> y = host::Interpreter(p, opts(true, 5)).run(in);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(y[0].data<float>()[i * 6 + j], in[0].data<float>()[j * 6 + i] * 2.0f + in[1].data<float>()[i * 6 + j]);
}

// ---- compiled elementwise loops (src/backend/host/loop_jit.h) -----------------

namespace {

host::InterpreterOptions jit_opts(bool jit, int64_t tile = 1024) {
  host::InterpreterOptions o = opts(true, tile);
  o.jit = jit;
  return o;
}

// The same bits, except that where both are a NaN its payload and sign may
// differ: for an add or multiply of two NaNs the x86 instruction returns its
// first operand's, and the compiler may put either operand first.
// (f32 or bf16 arrays.)
bool same_bits_but_nans(const Array& a, const Array& b) {
  if (a.type() != b.type()) return false;
  auto bits = [](const Array& x, int64_t i) -> uint32_t {  // as f32 bits, a bf16 one in the high half
    return x.type().dtype == DType::bf16 ? uint32_t{static_cast<const uint16_t*>(x.raw())[i]} << 16
                                         : static_cast<const uint32_t*>(x.raw())[i];
  };
  auto nan = [](uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0; };
  for (int64_t i = 0; i < a.numel(); ++i) {
    const uint32_t x = bits(a, i), y = bits(b, i);
    if (x != y && !(nan(x) && nan(y))) return false;
  }
  return true;
}

// p compiled (at tiles that leave tails of every length) gives the bits of
// its members run one by one and of the unfused interpreter, NaNs aside;
// returns the loops compiled.
int expect_compiled_bits(const Program& p, const std::vector<Array>& in) {
  int compiled = 0;
  const std::vector<Array> ref = run_with(p, opts(false), in);
  for (int64_t tile : {int64_t{7}, int64_t{100}, int64_t{1024}}) {
    host::Interpreter it(p, jit_opts(true, tile));
    compiled += it.jit_loops();
    const std::vector<Array> got = it.run(in);
    const std::vector<Array> members = run_with(p, jit_opts(false, tile), in);
    EXPECT_EQ(got.size(), ref.size());
    for (size_t j = 0; j < got.size() && j < ref.size(); ++j) {
      EXPECT_TRUE(same_bits_but_nans(got[j], members[j])) << "output " << j << ", tile " << tile;
      EXPECT_TRUE(same_bits_but_nans(got[j], ref[j])) << "output " << j << ", tile " << tile;
    }
  }
  return compiled;
}

// The random choices of the chain tests: next(n) in [0, n), and pick(vals),
// mostly one of the last few values (long chains), sometimes any (long lives).
struct ChainDice {
  uint64_t state;
  int next(uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % n);
  }
  int pick(const std::vector<int>& vals) {
    const int k = static_cast<int>(vals.size());
    return vals[static_cast<size_t>(next(3) ? std::max(0, k - 1 - next(3)) : next(static_cast<uint64_t>(k)))];
  }
};

}  // namespace

// Random programs of add, subtract, multiply, divide, negate, exp and tanh over three
// arrays and two splat constants, every tenth value also an output, on
// inputs holding zeros of both signs, infinities, NaN and subnormals: the
// compiled loops give the bits of the members run one by one (NaNs aside:
// same_bits_but_nans), at tile sizes that leave tails of every length, and
// of the unfused interpreter.
TEST(HostJit, RandomElementwiseChainsAreBitwiseTheMembers) {
  ChainDice dice{12345};
  auto next = [&](uint64_t n) { return dice.next(n); };
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 1e38f, 1.0f, -2.5f};
  int compiled = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = std::vector<int64_t>{5, 8, 37, 256, 1000, 4096}[static_cast<size_t>(trial % 6)];
    const Type t(DType::f32, {n});
    Program p;
    p.name = "chain" + std::to_string(trial);
    std::vector<int> vals = {p.add_input("x", t), p.add_input("y", t), p.add_input("z", t)};
    Attrs c1, c2;
    c1.literal = {0.75};
    c2.literal = {-3.0};
    vals.push_back(p.add_eqn_typed(Op::constant, {}, c1, t));
    vals.push_back(p.add_eqn_typed(Op::constant, {}, c2, t));
    const Op ops[] = {Op::add, Op::subtract, Op::multiply, Op::divide, Op::negate, Op::exponential, Op::tanh};
    const int len = 2 + next(30);
    for (int i = 0; i < len; ++i) {
      const Op op = ops[next(7)];
      auto pick = [&] { return dice.pick(vals); };
      const int a = pick();
      const bool unary = op == Op::negate || op == Op::exponential || op == Op::tanh;
      const int v = unary ? p.add_eqn(op, {a}, {}) : p.add_eqn(op, {a, pick()}, {});
      vals.push_back(v);
      if (i % 10 == 9) p.add_output("v" + std::to_string(i), v);
    }
    p.add_output("last", vals.back());
    std::vector<Array> in;
    for (int k = 0; k < 3; ++k) {
      Array a = random_array(t, 7 + static_cast<uint64_t>(trial) * 3 + static_cast<uint64_t>(k));
      for (int64_t j = 0; j < n; j += 1 + next(9)) a.data<float>()[j] = specials[next(10)];
      in.push_back(std::move(a));
    }
    SCOPED_TRACE(p.name + " of " + std::to_string(len) + " ops on " + std::to_string(n) + " elements");
    compiled += expect_compiled_bits(p, in);
  }
  if (host::jit_available()) {
    EXPECT_GE(compiled, 100);
  } else {
    EXPECT_EQ(compiled, 0);
  }
}

// The same with bf16 values among them: a bf16 input, converts both ways and
// arithmetic on bf16 values (computed in f32, rounded to bf16), bf16 outputs.
// The loops load bf16 values widened and round and store them as the
// members do: the members' bits, and the unfused interpreter's. A chain of
// bf16 members alone compiles to a loop.
TEST(HostJit, Bf16ValuesInChainsAreBitwiseTheMembers) {
  ChainDice dice{777};
  auto next = [&](uint64_t n) { return dice.next(n); };
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -3e-39, 3.3e38, 1.00390625, -2.5,
                             1.0 + 1.0 / 256 + 1.0 / 65536};  // the last: a tie broken by its low bits
  int compiled = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = std::vector<int64_t>{5, 8, 37, 256, 1000, 4096}[static_cast<size_t>(trial % 6)];
    const Type t32(DType::f32, {n}), t16(DType::bf16, {n});
    Program p;
    p.name = "bf16chain" + std::to_string(trial);
    std::vector<int> vals = {p.add_input("x", t32), p.add_input("y", t32), p.add_input("h", t16)};
    auto dtype = [&](int v) { return p.type(v).dtype; };
    auto as = [&](int v, DType d) { return dtype(v) == d ? v : p.add_eqn_typed(Op::convert, {v}, {}, Type(d, {n})); };
    const Op ops[] = {Op::add, Op::subtract, Op::multiply, Op::divide, Op::negate, Op::exponential, Op::tanh, Op::convert};
    const int len = 2 + next(30);
    for (int i = 0; i < len; ++i) {
      const Op op = ops[next(8)];
      auto pick = [&] { return dice.pick(vals); };
      const int a = pick();
      int v;
      if (op == Op::convert) v = as(a, dtype(a) == DType::f32 ? DType::bf16 : DType::f32);
      else if (op == Op::negate || op == Op::exponential || op == Op::tanh) v = p.add_eqn(op, {a}, {});
      else v = p.add_eqn(op, {a, as(pick(), dtype(a))}, {});
      vals.push_back(v);
      if (i % 7 == 6) p.add_output("v" + std::to_string(i), v);
    }
    p.add_output("last", vals.back());
    std::vector<Array> in;
    for (int k = 0; k < 3; ++k) {
      Array a = random_array(k == 2 ? t16 : t32, 11 + static_cast<uint64_t>(trial) * 3 + static_cast<uint64_t>(k));
      for (int64_t j = 0; j < n; j += 1 + next(9)) a.set(j, specials[next(11)]);
      in.push_back(std::move(a));
    }
    SCOPED_TRACE(p.name + " of " + std::to_string(len) + " ops on " + std::to_string(n) + " elements");
    compiled += expect_compiled_bits(p, in);
  }
  // h * h, its tanh and its exp, all bf16, then widened and added to x:
  // compiled (the f32 loops alone would take nothing: one f32 member).
  Tracer tr;
  const Type t32(DType::f32, {1000}), t16(DType::bf16, {1000});
  Tensor x = tr.input("x", t32), h = tr.input("h", t16);
  const Program chain = tr.finish({{"y", convert(exp(tanh(h * h)), DType::f32) + x}});
  host::Interpreter it(chain, jit_opts(true));
  const std::vector<Array> in = {random_array(t32, 1), random_array(t16, 2)};
  EXPECT_TRUE(same_bits_but_nans(it.run(in)[0], run_with(chain, opts(false), in)[0]));
  if (host::jit_available()) {
    EXPECT_GE(compiled, 100);
    EXPECT_GE(it.jit_loops(), 1);
  } else {
    EXPECT_EQ(compiled, 0);
  }
}

// More live values than registers: 20 inputs all read again at the end. The
// run is cut into loops that fit (or runs as members); the bits stay.
TEST(HostJit, MoreLiveValuesThanRegistersStillGivesTheBits) {
  const Type t(DType::f32, {640});
  Program p;
  std::vector<int> xs, sq;
  for (int i = 0; i < 20; ++i) xs.push_back(p.add_input(std::string(1, 'x').append(std::to_string(i)), t));
  for (int i = 0; i < 20; ++i) sq.push_back(p.add_eqn(Op::multiply, {xs[static_cast<size_t>(i)], xs[static_cast<size_t>(i)]}, {}));
  int acc = sq[0];
  for (int i = 1; i < 20; ++i)
    acc = p.add_eqn(Op::add, {acc, p.add_eqn(Op::divide, {sq[static_cast<size_t>(i)], xs[static_cast<size_t>(i)]}, {})}, {});
  p.add_output("y", acc);
  std::vector<Array> in;
  for (int i = 0; i < 20; ++i) in.push_back(random_array(t, 50 + static_cast<uint64_t>(i)));
  host::Interpreter it(p, jit_opts(true));
  const std::vector<Array> got = it.run(in);
  EXPECT_TRUE(got[0].bit_equal(run_with(p, opts(false), in)[0]));
  if (host::jit_available()) {
    EXPECT_GE(it.jit_loops(), 1);
  }
}

// The loop as data, straight to jit_compile: what it runs, and what it refuses.
TEST(HostJit, CompilerRefusesWhatItCannotRun) {
  if (!host::jit_available()) GTEST_SKIP() << "no compiled loops in this build or on this CPU (Xbyak, AVX2)";
  host::JitLoop ok;
  ok.num_ptrs = 2;
  ok.inputs = {{0, host::JitLoop::Kind::full}};
  ok.insts = {{Op::multiply, 0, 0}};
  ok.stores = {{1, 1}};
  auto code = host::jit_compile(ok);
  ASSERT_NE(code, nullptr);
  float x[16], y[16];
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i) - 7.5f;
  void* ptrs[2] = {x, y};
  code->fn(ptrs, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], x[i] * x[i]) << i;
  host::JitLoop bad = ok;
  bad.insts = {{Op::log, 0, -1}};  // an op it does not compile
  EXPECT_EQ(host::jit_compile(bad), nullptr);
  bad = ok;
  bad.insts = {{Op::add, 0, 1}};  // reads a value not yet made
  EXPECT_EQ(host::jit_compile(bad), nullptr);
  bad = ok;
  bad.stores = {{1, 2}};  // a pointer it is not given
  EXPECT_EQ(host::jit_compile(bad), nullptr);
  host::JitLoop wide;  // 13 arrays read: one more than the general registers
  wide.num_ptrs = 14;
  for (int i = 0; i < 13; ++i) wide.inputs.push_back({i, host::JitLoop::Kind::full});
  int v = 0;
  for (int i = 1; i < 13; ++i) {
    wide.insts.push_back({Op::add, v, i});
    v = 13 + i - 1;
  }
  wide.stores = {{v, 13}};
  EXPECT_EQ(host::jit_compile(wide), nullptr);
}

// The seed's gradient step: the compiled loops take the runs of its loop, row
// and column groups, with the bits of the members (and of the unfused
// interpreter, SeedGradientStepIsBitwiseUnfused); CAPSTEP_HOST_JIT=0 turns
// them off.
TEST(HostJit, SeedStepRunsCompiledLoopsWithTheSameBits) {
  SeedStep s;
  host::Interpreter with(s.grad, jit_opts(true)), without(s.grad, jit_opts(false));
  EXPECT_EQ(without.jit_loops(), 0);
  if (host::jit_available()) {
    EXPECT_GE(with.jit_loops(), 20);
  } else {
    EXPECT_EQ(with.jit_loops(), 0);
  }
  const std::vector<Array> a = with.run(s.in), b = without.run(s.in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t j = 0; j < a.size(); ++j) EXPECT_TRUE(a[j].bit_equal(b[j])) << s.grad.outputs[j].name;
  EXPECT_TRUE(host::InterpreterOptions::defaults().jit);
}

// Row groups with rows a multiple of 8 long: row broadcasts (a value per row)
// and a row's worth broadcast down the rows are read in place by the loops,
// stored from them where something else reads them (here an output), and
// refused where the row values' tile may share scratch with what the loop
// stores (softmax's max): the bits of the unfused interpreter either way.
TEST(HostJit, RowGroupsReadBroadcastsInPlace) {
  for (int64_t C : {int64_t{16}, int64_t{24}, int64_t{128}, int64_t{37}})
    for (int64_t R : {int64_t{1}, int64_t{13}, int64_t{64}}) {
      SCOPED_TRACE("rows of " + std::to_string(C) + ", " + std::to_string(R) + " rows");
      // RMSNorm's shape: y = x * bcast(rsqrt(mean(x * x) + eps)) * bcast(g),
      // the broadcast rsqrt also an output.
      Program p;
      const int x = p.add_input("x", {DType::f32, {R, C}});
      const int g = p.add_input("g", {DType::f32, {C}});
      Attrs ax;
      ax.dims = {1};
      Attrs inv, eps;
      inv.literal = {1.0 / static_cast<double>(C)};
      eps.literal = {1e-5};
      const int ms = p.add_eqn(Op::multiply, {p.add_eqn(Op::reduce_sum, {p.add_eqn(Op::multiply, {x, x}, {})}, ax),
                                              p.add_eqn_typed(Op::constant, {}, inv, Type{DType::f32, {R}})},
                               {});
      const int r = p.add_eqn(Op::rsqrt, {p.add_eqn(Op::add, {ms, p.add_eqn_typed(Op::constant, {}, eps, Type{DType::f32, {R}})}, {})}, {});
      Attrs b0, b1;
      b0.dims = {0};
      b1.dims = {1};
      const int rb = p.add_eqn_typed(Op::broadcast_in_dim, {r}, b0, Type{DType::f32, {R, C}});
      const int gb = p.add_eqn_typed(Op::broadcast_in_dim, {g}, b1, Type{DType::f32, {R, C}});
      p.add_output("y", p.add_eqn(Op::multiply, {p.add_eqn(Op::multiply, {x, rb}, {}), gb}, {}));
      p.add_output("rb", rb);
      const std::vector<Array> in = {random_array(p.input_type(0), 71), random_array(p.input_type(1), 72)};
      const std::vector<Array> ref = run_with(p, opts(false), in);
      for (int64_t tile : {int64_t{1}, int64_t{100}, int64_t{1024}}) {
        host::Interpreter it(p, jit_opts(true, tile));
        const std::vector<Array> got = it.run(in);
        for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(got[j].bit_equal(ref[j])) << "output " << j << ", tile " << tile;
        if (host::jit_available() && C % 8 == 0) {
          EXPECT_GE(it.jit_loops(), 1) << "tile " << tile;
        }
      }
      // softmax * w (softmax_program): its max's broadcast refused, its sum's taken
      const Program s = softmax_program(R, C);
      const std::vector<Array> sin = {random_array(s.input_type(0), 73), random_array(s.input_type(1), 74)};
      const std::vector<Array> sref = run_with(s, opts(false), sin);
      for (int64_t tile : {int64_t{1}, int64_t{100}, int64_t{1024}}) {
        const std::vector<Array> got = run_with(s, jit_opts(true, tile), sin);
        for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(got[j].bit_equal(sref[j])) << "softmax output " << j << ", tile " << tile;
      }
    }
}

// exp and tanh in a compiled loop: the bits of ir/scalar_math.h's functions
// (which the members and the GPU run) on every 7919th float, all of them
// from -inf to NaN through the subnormals, alone and after a multiply.
TEST(HostJit, ExpAndTanhAreTheScalarFormulasBitForBit) {
  if (!host::jit_available()) GTEST_SKIP() << "no compiled loops in this build or on this CPU (Xbyak, AVX2)";
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 7919) {
    const uint32_t u = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &u, sizeof f);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 89.0f, 88.7f, -104.0f, -103.9f, -87.4f, 0.625f, -0.625f,
                  10.0f, -10.0f, 1e-30f, -1e-45f})
    x.push_back(f);
  while (x.size() % 8) x.push_back(1.0f);
  for (Op op : {Op::exponential, Op::tanh})
    for (bool scaled : {false, true}) {
      host::JitLoop lp;
      lp.num_ptrs = 3;
      lp.inputs = {{0, host::JitLoop::Kind::full}, {1, host::JitLoop::Kind::splat}};
      if (scaled) lp.insts = {{Op::multiply, 0, 1}, {op, 2, -1}};
      else lp.insts = {{op, 0, -1}};
      lp.stores = {{static_cast<int>(lp.insts.size()) + 1, 2}};
      auto code = host::jit_compile(lp);
      ASSERT_NE(code, nullptr);
      const float k = 0.75f;
      std::vector<float> y(x.size());
      void* ptrs[3] = {x.data(), const_cast<float*>(&k), y.data()};
      code->fn(ptrs, static_cast<int64_t>(x.size()));
      int wrong = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float in = scaled ? x[i] * k : x[i];
        const float want = op == Op::tanh ? scalar::tanh<float>(in) : scalar::exponential<float>(in);
        uint32_t a, b;
        std::memcpy(&a, &y[i], sizeof a);
        std::memcpy(&b, &want, sizeof b);
        if (a != b && !(std::isnan(y[i]) && std::isnan(want)) && ++wrong <= 5)
          ADD_FAILURE() << op_name(op) << (scaled ? " of 0.75 x" : "") << " at " << in << ": " << y[i] << ", want " << want;
      }
      EXPECT_EQ(wrong, 0) << op_name(op);
    }
}

// Found by a review: (1) an f64 value in a loop group packs the scratch so
// that two f32 tiles share bytes at different offsets, and the compiled loop,
// which runs the members' work in another order, stored over a tile before its
// last read (elements 96-99 wrong at tile 100); (2) one row value broadcast
// twice in a row loop advanced its pointer twice a row. Both are the bits of
// the unfused interpreter now.
TEST(HostJit, OverlappingTilesAndARowValueBroadcastTwice) {
  const Type t(DType::f32, {100}), t64(DType::f64, {100});
  for (int variant = 0; variant < 2; ++variant) {
    Program p;
    const int a = p.add_input("a", t), b = p.add_input("b", t), c = p.add_input("c", t);
    const int w = p.add_eqn(Op::maximum, {a, b}, {});
    const int bb = p.add_eqn_typed(Op::convert, {p.add_eqn_typed(Op::convert, {b}, {}, t64)}, {}, t);
    if (variant == 0) {
      const int y = p.add_eqn(Op::multiply, {p.add_eqn(Op::add, {p.add_eqn(Op::maximum, {w, c}, {}), a}, {}), c}, {});
      p.add_output("out", p.add_eqn(Op::add, {y, bb}, {}));
    } else {
      const int y = p.add_eqn(Op::add, {p.add_eqn(Op::multiply, {p.add_eqn(Op::add, {w, a}, {}), c}, {}), a}, {});
      p.add_output("out", p.add_eqn(Op::maximum, {y, bb}, {}));
    }
    std::vector<Array> in;
    for (int i = 0; i < 3; ++i) in.push_back(random_array(t, 80 + static_cast<uint64_t>(i)));
    const std::vector<Array> ref = run_with(p, opts(false), in);
    for (int64_t tile : {int64_t{7}, int64_t{100}, int64_t{1024}})
      EXPECT_TRUE(run_with(p, jit_opts(true, tile), in)[0].bit_equal(ref[0])) << "variant " << variant << ", tile " << tile;
  }
  for (int64_t R : {int64_t{6}, int64_t{64}}) {
    Program p;
    const int x = p.add_input("x", {DType::f32, {R, 16}});
    const int r = p.add_input("r", {DType::f32, {R}});
    Attrs b0, ax;
    b0.dims = {0};
    ax.dims = {1};
    const int r1 = p.add_eqn_typed(Op::broadcast_in_dim, {r}, b0, Type{DType::f32, {R, 16}});
    const int r2 = p.add_eqn_typed(Op::broadcast_in_dim, {r}, b0, Type{DType::f32, {R, 16}});
    const int y = p.add_eqn(Op::multiply, {p.add_eqn(Op::subtract, {x, r1}, {}), r2}, {});
    p.add_output("y", y);
    p.add_output("sum", p.add_eqn(Op::reduce_sum, {y}, ax));
    const std::vector<Array> in = {random_array(p.input_type(0), 90), random_array(p.input_type(1), 91)};
    const std::vector<Array> ref = run_with(p, opts(false), in);
    for (int64_t tile : {int64_t{1}, int64_t{100}, int64_t{1024}}) {
      const std::vector<Array> got = run_with(p, jit_opts(true, tile), in);
      for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(got[j].bit_equal(ref[j])) << R << " rows, output " << j << ", tile " << tile;
    }
  }
}

// A column sum of one column (found by the same review): the unfused reduce
// of f32[R, 1] over rows is one run of R elements, summed in eight partials,
// which a column group's row-by-row sum did not match; such a group runs
// unfused.
TEST(HostFusion, AColumnGroupOfOneColumnRunsUnfused) {
  for (int64_t R : {int64_t{5}, int64_t{40}, int64_t{1000}}) {
    Program p;
    const int x = p.add_input("x", {DType::f32, {R, 1}});
    Attrs ax;
    ax.dims = {0};
    p.add_output("s", p.add_eqn(Op::reduce_sum, {p.add_eqn(Op::multiply, {x, x}, {})}, ax));
    const std::vector<Array> in = {random_array(p.input_type(0), 95)};
    const std::vector<Array> ref = run_with(p, opts(false), in);
    for (int64_t tile : {int64_t{1}, int64_t{100}, int64_t{1024}})
      EXPECT_TRUE(run_with(p, opts(true, tile), in)[0].bit_equal(ref[0])) << R << " rows, tile " << tile;
  }
}

// bf16 values run in fused groups too (2-byte tiles), and an equation left
// alone over many elements, a convert or a sum over the last axis, runs as a
// group of its own (in parts, on every thread): bits as unfused at every tile
// size, and each counted as a group.
TEST(HostFusion, Bf16MembersLoneConvertsAndRowSumsRunAsGroups) {
  const Type t{DType::f32, {300, 257}};  // 77100 elements: lone ones of this size run as groups
  Tracer tr;
  Tensor x = tr.input("x", t), y = tr.input("y", t);
  Tensor narrowed = convert(x * y, DType::bf16);
  Tensor rounded = convert(narrowed, DType::f32) + y;  // a loop group holding both converts
  Tensor alone = convert(y, DType::bf16);             // a lone convert of an input
  Tensor sums = sum(x, {1});                          // lone sums over the last axis
  Tensor maxes = max(y, {1});
  const Program p = tr.finish({{"rounded", rounded}, {"alone", alone}, {"sums", sums}, {"maxes", maxes}});
  const std::vector<Array> in = {random_array(t, 3), random_array(t, 4)};
  EXPECT_EQ(expect_fused_equals_unfused(p, in), 4);
}

// Results written over buffers the plan may share (PlanOptions::in_place),
// where sharing would be wrong: scatter_add_rows whose updates are its
// operand's buffer; a col group whose member of K elements, run after the
// tiles, reads a K-element value that a member of the tiles could otherwise
// write over (a bf16 result of as many bytes); an AdamW group reading a splat
// zero gradient, which the AdamW kernel reads whole. Fused and unfused, the
// same bits, and the by-hand values.
TEST(HostFusion, SharedBuffersAreNotWrittenWhileRead) {
  {  // scatter_add_rows(x, idx, x): rows of x added into x's copy
    const Type t{DType::f32, {4, 3}};
    Tracer tr;
    Tensor in = tr.input("in", t), idx = tr.input("idx", {DType::i32, {4}});
    Tensor x = exp(in);
    const Program p = tr.finish({{"s", tanh(scatter_add_rows(x, idx, x))}});
    Array ids(Type{DType::i32, {4}});
    for (int64_t i = 0; i < 4; ++i) ids.set(i, static_cast<double>((i + 1) % 4));
    const std::vector<Array> args = {random_array(t, 3), ids};
    const std::vector<Array> fused = host::run(p, args), unfused = host::run(p, args, opts(false));
    EXPECT_TRUE(fused[0].bit_equal(unfused[0]));
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 3; ++c) {
        const float* a = args[0].data<float>();
        const float xr = scalar::exponential<float>(a[r * 3 + c]), xs = scalar::exponential<float>(a[((r + 3) % 4) * 3 + c]);
        EXPECT_EQ(unfused[0].data<float>()[r * 3 + c], scalar::tanh<float>(xr + xs)) << r << "," << c;
      }
  }
  {  // the same with the caller's updates Array as the output: computed aside, then copied
    const Type t{DType::f32, {4, 3}};
    Program p;
    const int op = p.add_input("op", t), idx = p.add_input("idx", {DType::i32, {4}}), upd = p.add_input("upd", t);
    p.add_output("s", p.add_eqn(Op::scatter_add_rows, {op, idx, upd}, {}));
    Array ids(Type{DType::i32, {4}});
    for (int64_t i = 0; i < 4; ++i) ids.set(i, static_cast<double>(3 - i));
    const Array a = random_array(t, 4), u = random_array(t, 5);
    host::Interpreter it(p);
    std::vector<Array> outs = {u};
    it.run({&a, &ids, &outs[0]}, outs);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(outs[0].data<float>()[r * 3 + c], a.data<float>()[r * 3 + c] + u.data<float>()[(3 - r) * 3 + c]);
  }
  {  // a col group: z = sum(a * 2, rows) + exp(b) after the tiles, m = bf16(a * 2) during them
    const int64_t K = 256;
    Tracer tr;
    Tensor a = tr.input("a", {DType::f32, {2, K}}), b = tr.input("b", {DType::f32, {K}});
    Tensor r = exp(b), t = a * 2.0;
    Tensor z = sum(t, {0}) + r;
    Tensor m = convert(t, DType::bf16);
    const Program p = tr.finish({{"z", tanh(z)}, {"m", tanh(convert(m, DType::f32))}});
    const std::vector<Array> args = {random_array(p.input_type(0), 6), random_array(p.input_type(1), 7)};
    const std::vector<Array> fused = host::run(p, args), unfused = host::run(p, args, opts(false));
    for (size_t j = 0; j < fused.size(); ++j) EXPECT_TRUE(fused[j].bit_equal(unfused[j])) << "output " << j;
  }
  {  // AdamW on a gradient that is a splat zero (a parameter the loss does not read)
    const Type t{DType::f32, {4096}};
    Tracer tr;
    Tensor P = tr.input("p", t), M = tr.input("m", t), V = tr.input("v", t);
    Tensor lr = tr.input("lr", {DType::f32, {}}), bc1 = tr.input("bc1", {DType::f32, {}}),
           bc2 = tr.input("bc2", {DType::f32, {}}), decay = tr.input("decay", {DType::f32, {}});
    Tensor G = tr.constant(t, {0.0});
    Attrs at;
    at.literal = {0.9, 0.999, 1e-8};
    std::vector<std::pair<std::string, Tensor>> outs;
    for (int64_t axis : {0, 1, 2}) {
      at.axis = axis;
      outs.push_back({"out" + std::to_string(axis), tr.emit(Op::adamw, {P, G, M, V, lr, bc1, bc2, decay}, at)});
    }
    const Program p = tr.finish(outs);
    std::vector<Array> in = {random_array(t, 8), random_array(t, 9), random_array(t, 10)};
    for (int64_t j = 0; j < t.numel(); ++j) in[2].data<float>()[j] = std::fabs(in[2].data<float>()[j]);
    for (double x : {3e-3, 1.5, 1.2, 0.99997}) in.push_back(Array::f32({}, {static_cast<float>(x)}));
    Array pp = in[0], mm = in[1], vv = in[2], zero(t);
    optim::AdamW aw;
    aw.beta1 = 0.9;
    aw.beta2 = 0.999;
    aw.eps = 1e-8;
    optim::adamw_update(aw, {3e-3f, 1.5f, 1.2f, 0.99997f}, pp, zero, mm, vv);
    const std::vector<Array> got = host::run(p, in);
    EXPECT_TRUE(got[0].bit_equal(pp));
    EXPECT_TRUE(got[1].bit_equal(mm));
    EXPECT_TRUE(got[2].bit_equal(vv));
  }
}
