// What a full fine-tuning run holds at its peak, by count (never RSS):
// validation reads the host lane's parameters where the step holds them (no
// copy of the parameters and both moments); the host interpreter's statics
// hold one copy of equal constants and iotas.
#include <gtest/gtest.h>

#include <unistd.h>

#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/train.h"
#include "capstep/train_step.h"

using namespace capstep;

namespace {

nn::LmConfig small() {
  nn::LmConfig c;
  c.n_layers = 2, c.d_model = 32, c.n_heads = 2, c.d_ff = 64, c.context = 16, c.batch = 2, c.seq = 8;
  return c;
}

// The model's parameters by name, as TrainStep::init takes them.
std::vector<NamedArray> fresh(const nn::LmConfig& c) {
  std::vector<NamedArray> s;
  const std::vector<Array> p = nn::init_parameters(c, 1);
  const std::vector<nn::ParamSpec> specs = nn::lm_parameters(c);
  for (size_t j = 0; j < specs.size(); ++j) s.push_back({specs[j].name, p[j]});
  return s;
}

}  // namespace

// The host lanes with AdamW on the host hand out the arrays they step: every
// parameter, none copied (each address is the one the next step updates: its
// bytes change with the step, and equal save()'s copy after it).
TEST(MemoryPeak, HostLaneParametersAreReadInPlace) {
  const nn::LmConfig c = small();
  const std::vector<NamedArray> start = fresh(c);
  std::vector<std::string> names;
  for (const NamedArray& p : start) names.push_back(p.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  TrainStep st(grad, names, optim::AdamW{}, {.lane = parse_lane("host")});
  st.init(start);
  const auto held = st.parameters_in_place();
  ASSERT_EQ(held.size(), names.size());
  std::vector<Array> before;
  for (size_t j = 0; j < held.size(); ++j) {
    EXPECT_EQ(held[j].first, names[j]);
    before.push_back(*held[j].second);
  }
  Array tokens(Type{DType::i32, {c.batch, c.seq}}), targets(Type{DType::i32, {c.batch, c.seq}});
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>(i % 7), targets.data<int32_t>()[i] = static_cast<int32_t>((i + 1) % 7);
  st.set("tokens", tokens);
  st.set("targets", targets);
  st.step(optim::adamw_scalars(optim::AdamW{}, 1, 1e-2));
  const auto after = st.parameters_in_place();
  Checkpoint ck;
  st.save(ck);
  int changed = 0;
  for (size_t j = 0; j < held.size(); ++j) {
    EXPECT_EQ(after[j].second, held[j].second) << names[j];  // the same arrays, not copies
    EXPECT_TRUE(held[j].second->bit_equal(ck.params[j].array)) << names[j];
    changed += held[j].second->bit_equal(before[j]) ? 0 : 1;
  }
  EXPECT_EQ(changed, static_cast<int>(names.size()));
  // The lane with AdamW in the program holds them in the backend's donated
  // slots: none in place; read() copies each out.
  TrainStep sf(grad, names, optim::AdamW{}, {.lane = parse_lane("host-fused")});
  sf.init(start);
  const auto none = sf.parameters_in_place();
  ASSERT_EQ(none.size(), names.size());
  for (size_t j = 0; j < none.size(); ++j) {
    EXPECT_EQ(none[j].second, nullptr) << names[j];
    EXPECT_TRUE(sf.read(names[j]).bit_equal(start[j].array)) << names[j];
  }
}

// Equal constants and iotas share one location in the statics; any
// difference (literal, dtype, shape, iota axis) keeps its own. Fused, a splat
// constant that only the group's members read holds one tile's worth of
// elements (1024 of its 2048; the tiles read its first ones). Unfused and
// fused, the program still computes the sum of each copy it reads.
TEST(MemoryPeak, EqualConstantsAndIotasShareTheirStatics) {
  const Type t{DType::f32, {64, 32}};  // 8 KiB: a multiple of the alignment
  Program p;
  const int x = p.add_input("x", t);
  int acc = x;
  auto use = [&](int v) { acc = p.add_eqn(Op::add, {acc, v}, {}); };
  use(p.add_eqn_typed(Op::constant, {}, Attrs{.literal = {0.5}}, t));
  use(p.add_eqn_typed(Op::constant, {}, Attrs{.literal = {0.5}}, t));   // shares
  use(p.add_eqn_typed(Op::constant, {}, Attrs{.literal = {-0.5}}, t));  // its own
  use(p.add_eqn_typed(Op::iota, {}, Attrs{.axis = 0}, t));
  use(p.add_eqn_typed(Op::iota, {}, Attrs{.axis = 0}, t));              // shares
  use(p.add_eqn_typed(Op::iota, {}, Attrs{.axis = 1}, t));              // its own
  p.add_output("y", acc);
  for (bool fuse : {false, true}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    const size_t statics = fuse ? 2 * t.bytes() + 2 * 1024 * sizeof(float) : 4 * t.bytes();
    EXPECT_EQ(host::memory_needed(p, o).statics, statics) << "fuse " << fuse;
    host::Interpreter in(p, o);
    EXPECT_EQ(in.memory().statics, statics);
    const Array xs(t);
    const std::vector<Array> y = in.run({xs});
    for (int64_t i = 0; i < t.numel(); ++i)  // 0.5 + 0.5 - 0.5 + 2 * row + column
      ASSERT_EQ(y[0].data<float>()[i], 0.5f + 2.0f * static_cast<float>(i / 32) + static_cast<float>(i % 32)) << i;
  }
  // A splat that a GEMM reads too (every element, outside the groups) is held whole.
  Program q;
  const int xq = q.add_input("x", t);
  const int c = q.add_eqn_typed(Op::constant, {}, Attrs{.literal = {0.5}}, t);
  q.add_output("y", q.add_eqn(Op::tanh, {q.add_eqn(Op::add, {xq, c}, {})}, {}));
  Attrs dims;
  dims.lhs_contract = {0};
  dims.rhs_contract = {0};
  q.add_output("z", q.add_eqn_typed(Op::dot_general, {c, xq}, dims, Type{DType::f32, {32, 32}}));
  EXPECT_EQ(host::memory_needed(q).statics, t.bytes());
  Array ones(t);
  for (int64_t i = 0; i < t.numel(); ++i) ones.data<float>()[i] = 1.0f;
  const std::vector<Array> yz = host::run(q, {ones});
  for (int64_t i = 0; i < 32 * 32; ++i) ASSERT_EQ(yz[1].data<float>()[i], 32.0f) << i;  // 64 rows of 0.5
  EXPECT_EQ(yz[0].data<float>()[0], std::tanh(1.5f));
}

// The arena holds nothing between runs: given back to the system (every whole
// page inside it), the next run gives the same bits, fused and unfused, on
// GPT-2's step (gradients included).
TEST(MemoryPeak, ArenaGivenBackBetweenRunsGivesTheSameBits) {
  nn::LmConfig c = small();
  c.arch = nn::Arch::gpt2;
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  std::vector<Array> in = nn::init_parameters(c, 3);
  Array tokens(Type{DType::i32, {c.batch, c.seq}}), targets(Type{DType::i32, {c.batch, c.seq}});
  for (int64_t i = 0; i < tokens.numel(); ++i)
    tokens.data<int32_t>()[i] = static_cast<int32_t>(i * 5 % 64), targets.data<int32_t>()[i] = static_cast<int32_t>(i * 3 % 64);
  in.push_back(tokens);
  in.push_back(targets);
  for (bool fuse : {false, true}) {
    host::InterpreterOptions o;
    o.fuse = fuse;
    host::Interpreter a(grad, o);
    const std::vector<Array> want = a.run(in);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t given = a.release_arena();
    EXPECT_GE(given + 2 * page, a.memory().arena) << "fuse " << fuse;
    EXPECT_EQ(given % page, 0u);
    const std::vector<Array> got = a.run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_TRUE(got[j].bit_equal(want[j])) << grad.outputs[j].name << " fuse " << fuse;
  }
}
