// capstep/backend.h on the host and capstep/train_step.h: slots, donation,
// the interface's errors, and a with_adamw step driven by name.
#include <gtest/gtest.h>

#include <cmath>

#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "backend/host/interpreter.h"
#include "capstep/trace.h"
#include "capstep/train_step.h"
#include "test_util.h"

using namespace capstep;
using namespace capstep::test;

namespace {

// w [3,2] and b [2]: loss = mean((x w + b - y)^2); x [4,3], y [4,2].
struct Tiny {
  std::vector<std::string> names{"w", "b"};
  Program grad;
  std::vector<NamedArray> start;
  Array x = Array::f32({4, 3}, {1, 2, 3, -1, 0, 1, 2, 2, -2, 0.5f, -0.5f, 1});
  Array y = Array::f32({4, 2}, {1, 0, 0, 1, 1, 1, -1, 0.5f});
  Tiny() {
    Tracer tr;
    Tensor w = tr.input("w", {DType::f32, {3, 2}}), b = tr.input("b", {DType::f32, {2}});
    Tensor xs = tr.input("x", x.type()), ys = tr.input("y", y.type());
    Tensor d = matmul(xs, w) + b - ys;
    grad = value_and_grad(tr.finish({{"loss", mean(d * d)}}), names);
    start = {{"w", Array::f32({3, 2}, {0.1f, -0.2f, 0.3f, 0.05f, -0.1f, 0.2f})}, {"b", Array::f32({2}, {0.01f, -0.02f})}};
  }
};

const optim::AdamW kAdamW{.lr = 0.05, .weight_decay = 0.01};

}  // namespace

TEST(HostBackend, DonatedOutputsStayInTheirInputsSlots) {
  // out = a * 2 donated to a; c = a + 1 not donated.
  Tracer tr;
  Tensor in = tr.input("a", {DType::f32, {3}});
  Program q = tr.finish({{"a.new", in * 2.0}, {"c", in + 1.0}});
  q.aliases.push_back({0, 0});
  std::unique_ptr<Backend> b = make_backend(BackendKind::host, q);
  EXPECT_EQ(b->kind(), BackendKind::host);
  Array out;
  EXPECT_NE(error_of([&] { b->run(); }).find("input \"a\" was never set"), std::string::npos);
  EXPECT_NE(error_of([&] { b->read("c", out); }).find("read before the first run()"), std::string::npos);
  EXPECT_NE(error_of([&] { b->set_input(0, Array::f32({2}, {1, 2})); }).find("is f32[3], given f32[2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->set("nope", Array::scalar(1)); }).find("has no input \"nope\""), std::string::npos);
  EXPECT_NE(error_of([&] { b->read_output(5, out); }).find("has no output 5"), std::string::npos);
  b->set("a", Array::f32({3}, {1, 2, 3}));
  for (int k = 0; k < 3; ++k) b->run();
  b->read_input(0, out);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{8, 16, 24}));  // doubled three times, in its slot
  b->read("c", out);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{5, 9, 13}));   // from the slot's value before the last run
  EXPECT_EQ(b->runs(), 3);
  EXPECT_GT(b->describe().bytes, 0u);
}

// TrainStep on the host takes the same steps as the with_adamw program run by
// hand in the interpreter; a checkpoint resumes it bit for bit.
TEST(TrainStep, StepsByNameAreTheProgramsStepsAndResumeExactly) {
  TempDir d;
  const Tiny t;
  const Program fused = optim::with_adamw(t.grad, t.names, kAdamW);
  // By hand: parameters, m, v, x, y, four scalars.
  std::vector<Array> state = {t.start[0].array, t.start[1].array, Array(t.start[0].array.type()),
                              Array(t.start[1].array.type()), Array(t.start[0].array.type()),
                              Array(t.start[1].array.type())};
  host::Interpreter interp(fused);
  std::vector<double> by_hand;
  for (int k = 1; k <= 6; ++k) {
    const optim::AdamWScalars s = optim::adamw_scalars(kAdamW, k);
    std::vector<Array> in = state;
    in.push_back(t.x);
    in.push_back(t.y);
    for (float v : {s.lr, s.bc1, s.bc2, s.decay}) in.push_back(Array::scalar(v));
    std::vector<Array> out = interp.run(in);
    by_hand.push_back(out[0].get(0));
    for (size_t j = 0; j < 6; ++j) state[j] = out[1 + j];
  }
  TrainStep step(t.grad, t.names, kAdamW);
  step.init(t.start);
  step.set("x", t.x);
  step.set("y", t.y);
  std::vector<double> losses;
  for (int k = 0; k < 3; ++k) losses.push_back(step.step());
  step.save(d.file("half.safetensors"));
  TrainStep again(t.grad, t.names, kAdamW);
  again.load(d.file("half.safetensors"));
  EXPECT_EQ(again.steps(), 3);
  again.set("x", t.x);
  again.set("y", t.y);
  for (int k = 0; k < 3; ++k) losses.push_back(again.step());
  EXPECT_EQ(losses, by_hand);
  EXPECT_TRUE(again.read("w").bit_equal(state[0]));
  EXPECT_TRUE(again.read(optim::moment2_name("b")).bit_equal(state[5]));
  EXPECT_EQ(again.read("loss").get(0), by_hand.back());
}

TEST(TrainStep, MisuseIsAnErrorNamingWhat) {
  const Tiny t;
  TrainStep step(t.grad, t.names, kAdamW);
  EXPECT_NE(error_of([&] { step.init({t.start[0]}); }).find("no parameter \"b\" given"), std::string::npos);
  EXPECT_NE(error_of([&] { step.init({t.start[0], t.start[1], {"c", t.start[1].array}}); })
                .find("\"c\" is not a parameter of the step (its parameters: w, b)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { step.init({t.start[1], {"w", t.start[1].array}}); }).find("input \"w\""), std::string::npos);
  EXPECT_NE(error_of([&] { step.set("w", t.start[0].array); }).find("is the step's state"), std::string::npos);
  EXPECT_NE(error_of([&] { step.set("adamw.lr", Array::scalar(1)); }).find("is an AdamW scalar"), std::string::npos);
  step.init(t.start);
  // The batch never set: the run says which input.
  EXPECT_NE(error_of([&] { step.step(); }).find("input \"x\" was never set"), std::string::npos);
  EXPECT_NE(error_of([&] { TrainStep(t.grad, {"w", "nope"}, kAdamW); }).find("nope"), std::string::npos);
  EXPECT_NE(error_of([&] { TrainStep(t.grad, {"w", "b", "w"}, kAdamW); }).find("\"w\" is listed twice among the parameters"),
            std::string::npos);
  EXPECT_NE(error_of([&] { TrainStep(t.grad, {"w"}, kAdamW, {.frozen = {"b", "b"}}); })
                .find("\"b\" is listed twice among the frozen parameters"),
            std::string::npos);
}

namespace {

// Tiny with a frozen scale s [2] (y ≈ (x w) * s + b), its gradient program
// accumulating over two micro-batches; the micro-batches' inputs.
struct TinyFrozenAccum {
  std::vector<std::string> names{"w", "b"};
  Program one, accum;  // the gradient of one micro-batch; accumulate_gradients of 2
  std::vector<NamedArray> start;
  Array x[2] = {Array::f32({4, 3}, {1, 2, 3, -1, 0, 1, 2, 2, -2, 0.5f, -0.5f, 1}),
                Array::f32({4, 3}, {0, 1, -1, 2, 0.5f, 0.25f, -1, 1, 1, 3, -2, 0})};
  Array y[2] = {Array::f32({4, 2}, {1, 0, 0, 1, 1, 1, -1, 0.5f}), Array::f32({4, 2}, {0, 0, 1, -1, 0.5f, 2, 0, 1})};
  TinyFrozenAccum() {
    Tracer tr;
    Tensor w = tr.input("w", {DType::f32, {3, 2}}), b = tr.input("b", {DType::f32, {2}});
    Tensor s = tr.input("s", {DType::f32, {2}});
    Tensor xs = tr.input("x", x[0].type()), ys = tr.input("y", y[0].type());
    Tensor d = matmul(xs, w) * s + b - ys;
    one = value_and_grad(tr.finish({{"loss", mean(d * d)}}), names);
    accum = optim::accumulate_gradients(one, names, 2);
    start = {{"w", Array::f32({3, 2}, {0.1f, -0.2f, 0.3f, 0.05f, -0.1f, 0.2f})},
             {"b", Array::f32({2}, {0.01f, -0.02f})},
             {"s", Array::f32({2}, {1.5f, -0.5f})}};
  }
};

}  // namespace

// One TrainStep for every lane: with a frozen input and gradient
// accumulation, AdamW on the host and AdamW in the program take the steps
// computed by hand (the gradient program run on each micro-batch, the mean
// gradient, optim::adamw_update), bit for bit on the host; the frozen scale
// is saved with the parameters and never changes.
TEST(TrainStep, EveryLaneTakesTheSameStepsWithFrozenInputsAndAccumulation) {
  const TinyFrozenAccum t;
  // By hand.
  std::vector<Array> p = {t.start[0].array, t.start[1].array}, m, v;
  for (const Array& a : p) m.emplace_back(a.type()), v.emplace_back(a.type());
  std::unique_ptr<Backend> g = make_backend(BackendKind::host, t.one);
  g->set("s", t.start[2].array);
  std::vector<double> by_hand;
  for (int k = 1; k <= 3; ++k) {
    std::vector<Array> sum = {Array(p[0].type()), Array(p[1].type())};
    double loss = 0;
    for (int i = 0; i < 2; ++i) {
      g->set("w", p[0]), g->set("b", p[1]), g->set("x", t.x[i]), g->set("y", t.y[i]);
      g->run();
      loss += g->read("loss").get(0);
      for (size_t j = 0; j < 2; ++j) {
        const Array gr = g->read("grad." + t.names[j]);
        for (int64_t e = 0; e < gr.numel(); ++e) sum[j].data<float>()[e] += gr.data<float>()[e];
      }
    }
    for (size_t j = 0; j < 2; ++j) {
      for (int64_t e = 0; e < sum[j].numel(); ++e) sum[j].data<float>()[e] /= 2.0f;
      optim::adamw_update(kAdamW, optim::adamw_scalars(kAdamW, k), p[j], sum[j], m[j], v[j]);
    }
    by_hand.push_back(loss / 2);
  }
  std::vector<Lane> lanes = {parse_lane("host"), parse_lane("host-fused")};
  std::string why;
  const std::string plugin = pjrt_plugin(&why);
  if (!plugin.empty()) lanes.push_back(parse_lane("pjrt")), lanes.push_back(parse_lane("pjrt-fused"));
  for (const Lane& lane : lanes) {
    SCOPED_TRACE(lane_name(lane));
    StepOptions so{.lane = lane, .frozen = {"s"}};
    so.backend.pjrt.plugin = plugin;
    TrainStep step(t.accum, t.names, kAdamW, so);
    EXPECT_EQ(optim::accumulated_micro_batches(t.accum), 2);
    EXPECT_EQ(optim::accumulated_micro_batches(step.backend().program()), 2);
    EXPECT_NE(error_of([&] { step.init({t.start[0], t.start[1]}); }).find("no frozen parameter \"s\" given"),
              std::string::npos);
    EXPECT_NE(error_of([&] { step.set("s", t.start[2].array); }).find("is the step's state"), std::string::npos);
    step.init(t.start);
    EXPECT_NE(error_of([&] { step.step(); }).find("1 micro-batches for a step program that accumulates 2"),
              std::string::npos);
    EXPECT_NE(error_of([&] { step.step(3, [](int) {}, optim::adamw_scalars(kAdamW, 1)); })
                  .find("3 micro-batches for a step program that accumulates 2"),
              std::string::npos);
    // A step cut short leaves no partial sum behind: the steps below are the by-hand ones.
    EXPECT_EQ(error_of([&] {
                step.step(
                    2,
                    [&](int i) {
                      if (i == 1) throw Error("cut short");
                      step.set("x", t.x[i]), step.set("y", t.y[i]);
                    },
                    optim::adamw_scalars(kAdamW, 1));
              }),
              "cut short");
    std::vector<double> losses;
    for (int k = 1; k <= 3; ++k)
      losses.push_back(step.step(
          2, [&](int i) { step.set("x", t.x[i]), step.set("y", t.y[i]); }, optim::adamw_scalars(kAdamW, k)));
    EXPECT_EQ(step.steps(), 3);
    Checkpoint c;
    step.save(c);
    ASSERT_EQ(c.params.size(), 3u);
    EXPECT_EQ(c.frozen, std::vector<std::string>{"s"});
    EXPECT_EQ(c.params[2].name, "s");
    EXPECT_TRUE(c.params[2].array.bit_equal(t.start[2].array));
    for (size_t j = 0; j < 2; ++j) {
      if (lane.backend == BackendKind::host) {
        EXPECT_EQ(losses, by_hand);
        EXPECT_TRUE(c.params[j].array.bit_equal(p[j])) << t.names[j];
        EXPECT_TRUE(c.adam_m[j].array.bit_equal(m[j])) << t.names[j];
        EXPECT_TRUE(step.read(optim::moment2_name(t.names[j])).bit_equal(v[j])) << t.names[j];
      } else {
        for (int k = 0; k < 3; ++k) EXPECT_NEAR(losses[k], by_hand[k], 1e-5 * std::fabs(by_hand[k]));
        EXPECT_LT(norm_diff(c.params[j].array, p[j]), 1e-4) << t.names[j];
      }
    }
    // A checkpoint resumes on the same lane: one more step as a fresh one's.
    TrainStep again(t.accum, t.names, kAdamW, so);
    again.load(c);
    EXPECT_EQ(again.steps(), 3);
    const auto micro = [&](TrainStep& s) {
      return s.step(2, [&](int i) { s.set("x", t.x[i]), s.set("y", t.y[i]); }, optim::adamw_scalars(kAdamW, 4));
    };
    EXPECT_EQ(micro(again), micro(step));
  }
}

// With AdamW on the host the parameters become the step's first inputs and
// the loss and gradients its first outputs; an output donated to an input
// stays donated to the same input, both moved.
TEST(TrainStep, HostLaneProgramPutsParametersFirstAndKeepsAliases) {
  Tracer tr;
  Tensor acc = tr.input("acc", {DType::f32, {2}}), w = tr.input("w", {DType::f32, {2}});
  const Program loss = tr.finish({{"loss", sum(w * w)}, {"acc.new", acc + 1.0}});
  Program g = value_and_grad(loss, {"w"});
  g.aliases.push_back({g.output_index("acc.new"), g.input_index("acc")});
  const Program q = TrainStep::program(g, {"w"}, kAdamW, parse_lane("host"));
  EXPECT_EQ(q.input_index("w"), 0);
  ASSERT_EQ(q.aliases.size(), 1u);
  EXPECT_EQ(q.aliases[0].input, q.input_index("acc"));
  EXPECT_EQ(q.aliases[0].output, q.output_index("acc.new"));
  EXPECT_EQ(q.output_index("grad.w"), 1);
}
