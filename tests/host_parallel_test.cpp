// The host's worker threads (src/backend/host/parallel.h): every part runs
// once, parts really run at the same time, an exception reaches the caller,
// and a step's results are the same bits whatever the number of threads (the
// GEMMs' parts are fixed by their shapes; fused loop and row groups and the
// host AdamW cut only elementwise work).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "seed_step.h"
#include "test_util.h"

using namespace capstep;

namespace {

// Restores the process's thread count when a test ends.
struct Threads {
  int saved = host::host_threads();
  explicit Threads(int n) { host::set_host_threads(n); }
  ~Threads() { host::set_host_threads(saved); }
};

Array random_array(const Type& t, uint64_t seed, double scale = 1.0) {
  Array a = test::lcg_array(t, seed);
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, scale * a.get(i));
  return a;
}

}  // namespace

TEST(HostParallel, EveryPartRunsOnceForAnyCountOfPartsAndThreads) {
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    EXPECT_EQ(host::host_threads(), threads);
    for (int parts : {0, 1, 2, 3, 5, 9, 64}) {
      std::vector<std::atomic<int>> ran(static_cast<size_t>(std::max(parts, 1)));
      for (auto& r : ran) r = 0;
      host::parallel_parts(parts, [&](int i) { ran[static_cast<size_t>(i)].fetch_add(1); });
      for (int i = 0; i < parts; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)].load(), 1) << parts << " parts, part " << i;
    }
  }
}

TEST(HostParallel, TwoThreadsRunTwoPartsAtOnce) {
  Threads t(2);
  // Each part waits (at most 20 s) for the other to have started: only two
  // threads running at the same time can both get past the wait.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  host::parallel_parts(2, [&](int) {
    started.fetch_add(1);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2 && std::chrono::steady_clock::now() < end) std::this_thread::yield();
    if (started.load() == 2) met.fetch_add(1);
  });
  EXPECT_EQ(met.load(), 2);
}

TEST(HostParallel, NestedRunsAndExceptionsStayOnTheCaller) {
  Threads t(2);
  std::atomic<int> inner{0};
  host::parallel_parts(2, [&](int) { host::parallel_parts(3, [&](int) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 6);
  std::atomic<int> ran{0};
  try {
    host::parallel_parts(4, [&](int i) {
      ran.fetch_add(1);
      if (i == 2) throw std::runtime_error("part 2 failed");
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "part 2 failed");
  }
  EXPECT_EQ(ran.load(), 4);  // the other parts still ran
  std::atomic<int> after{0};
  host::parallel_parts(5, [&](int) { after.fetch_add(1); });  // the pool still works
  EXPECT_EQ(after.load(), 5);
}

TEST(HostParallel, PartRangesCoverEverythingInAlignedRuns) {
  for (int64_t n : {0, 1, 7, 64, 100, 4096, 4097}) {
    for (int parts : {1, 2, 3, 4}) {
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        int64_t b = 0, e = 0;
        host::part_range(n, parts, i, 8, b, e);
        EXPECT_EQ(b, next);
        EXPECT_LE(b, e);
        if (e < n) {
          EXPECT_EQ(e % 8, 0);
        }
        next = e;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(HostParallel, GemmPartsComeFromTheShapeAlone) {
  EXPECT_EQ(host::dot_parts(1, 64, 128, 128), 2);   // the seed's projections: 32 rows each
  EXPECT_EQ(host::dot_parts(1, 256, 128, 64), 4);   // weight gradients, at most 4
  EXPECT_EQ(host::dot_parts(1, 32, 4096, 4096), 1); // too few rows to cut
  EXPECT_EQ(host::dot_parts(1, 64, 16, 16), 1);     // too little work
  EXPECT_EQ(host::dot_parts(16, 16, 16, 32), 2);    // the seed's attention batches: 2^16 multiply-adds each
  EXPECT_EQ(host::dot_parts(16, 8, 8, 8), 1);       // too little work
  EXPECT_EQ(host::dot_parts(8, 64, 64, 64), 4);     // batches are cut by matrices
}

TEST(HostParallel, SeedStepGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const test::SeedStep s;
  optim::AdamW aw;
  const Program p = optim::with_adamw(s.grad, s.names, aw);
  const std::vector<Array> in = s.with_adamw_inputs(aw);
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 3);
  ASSERT_EQ(in.size(), p.inputs.size());

  std::vector<Array> ref;
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    host::Interpreter it(p);
    std::vector<Array> out;
    for (int run = 0; run < 3; ++run) out = it.run(in);  // the worker wakes, spins, and is used
    if (ref.empty()) {
      ref = out;
      continue;
    }
    ASSERT_EQ(out.size(), ref.size());
    for (size_t j = 0; j < out.size(); ++j)
      EXPECT_TRUE(out[j].bit_equal(ref[j])) << p.outputs[j].name << " differs on " << threads << " threads";
  }

  // The host AdamW (lanes 1 and 2) too, on a parameter large enough to be cut.
  std::vector<Array> upd;
  for (int threads : {1, 2}) {
    Threads t(threads);
    Array pp = random_array({DType::f32, {300000}}, 1), g = random_array({DType::f32, {300000}}, 2);
    Array m = random_array({DType::f32, {300000}}, 3, 0.1), v = random_array({DType::f32, {300000}}, 4, 1e-3);
    for (int64_t i = 0; i < v.numel(); ++i) v.set(i, std::fabs(v.get(i)));
    optim::adamw_update(aw, sc, pp, g, m, v);
    if (upd.empty()) {
      upd = {pp, m, v};
      continue;
    }
    EXPECT_TRUE(pp.bit_equal(upd[0]));
    EXPECT_TRUE(m.bit_equal(upd[1]));
    EXPECT_TRUE(v.bit_equal(upd[2]));
  }
}

// Every parameter in one call (lanes 1 and 2): the same bits as one call per
// parameter, whatever the threads, with parameters of every size (the small
// ones share parts with their neighbours).
TEST(HostParallel, AdamWOverEveryParameterAtOnceIsOneCallPerParameter) {
  optim::AdamW aw;
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 2);
  const std::vector<int64_t> sizes = {128, 16384, 7, 40000, 32768, 1, 20000};
  auto state = [&](uint64_t seed) {
    std::vector<Array> p, g, m, v;
    for (size_t j = 0; j < sizes.size(); ++j) {
      const Type t{DType::f32, {sizes[j]}};
      p.push_back(random_array(t, seed + 4 * j));
      g.push_back(random_array(t, seed + 4 * j + 1));
      m.push_back(random_array(t, seed + 4 * j + 2, 0.1));
      v.push_back(random_array(t, seed + 4 * j + 3, 1e-3));
      for (int64_t i = 0; i < v.back().numel(); ++i) v.back().set(i, std::fabs(v.back().get(i)));
    }
    return std::vector<std::vector<Array>>{p, g, m, v};
  };
  std::vector<std::vector<Array>> ref = state(7);
  for (size_t j = 0; j < sizes.size(); ++j) optim::adamw_update(aw, sc, ref[0][j], ref[1][j], ref[2][j], ref[3][j]);
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    std::vector<std::vector<Array>> s = state(7);
    optim::adamw_update(aw, sc, s[0], s[1].data(), s[2], s[3]);
    for (size_t j = 0; j < sizes.size(); ++j) {
      EXPECT_TRUE(s[0][j].bit_equal(ref[0][j])) << "parameter " << j << ", " << threads << " threads";
      EXPECT_TRUE(s[2][j].bit_equal(ref[2][j])) << "first moment " << j << ", " << threads << " threads";
      EXPECT_TRUE(s[3][j].bit_equal(ref[3][j])) << "second moment " << j << ", " << threads << " threads";
      EXPECT_FALSE(s[0][j].bit_equal(state(7)[0][j])) << "parameter " << j << " was not updated";
    }
  }
  std::vector<Array> none, none_m, none_v;  // no parameters: nothing to do, no error
  EXPECT_NO_THROW(optim::adamw_update(aw, sc, none, nullptr, none_m, none_v));
  std::vector<std::vector<Array>> s = state(7);
  s[2].pop_back();
  EXPECT_THROW(optim::adamw_update(aw, sc, s[0], s[1].data(), s[2], s[3]), Error);
  s = state(7);
  s[1][3] = Array(Type{DType::f32, {3}});
  EXPECT_THROW(optim::adamw_update(aw, sc, s[0], s[1].data(), s[2], s[3]), Error);
}

// ---- dot_generals side by side (InterpreterOptions::pair_dots) -------------

namespace {

// out = x . w: f32[M, K] x f32[K, N] -> f32[M, N]
int matmul(Program& p, int x, int w) {
  Attrs at;
  at.lhs_contract = {1};
  at.rhs_contract = {0};
  return p.add_eqn(Op::dot_general, {x, w}, at);
}

host::InterpreterOptions pairs(bool on) {
  host::InterpreterOptions o = host::InterpreterOptions::defaults();
  o.pair_dots = on;
  return o;
}

// Runs p `runs` times on a fresh interpreter; every run must give the bits
// of the first.
std::vector<Array> run_repeatedly(const Program& p, const host::InterpreterOptions& o, const std::vector<Array>& in,
                                  int runs, int* pairs_out) {
  host::Interpreter it(p, o);
  *pairs_out = it.dot_pairs();
  const std::vector<Array> first = it.run(in);
  for (int r = 1; r < runs; ++r) {
    const std::vector<Array> again = it.run(in);
    for (size_t j = 0; j < first.size(); ++j)
      EXPECT_TRUE(again[j].bit_equal(first[j])) << p.outputs[j].name << " changed on run " << r;
  }
  return first;
}

}  // namespace

// The seed step on two threads pairs its independent GEMMs (each linear
// layer's input and weight gradients, the forward's projections of one
// input): the same bits as on one thread and as unpaired, every run.
TEST(HostParallel, IndependentDotGeneralsRunSideBySideWithTheSameBits) {
  const test::SeedStep s;
  std::vector<Array> ref;
  {
    Threads t(1);
    int n = -1;
    ref = run_repeatedly(s.grad, pairs(true), s.in, 1, &n);
    EXPECT_EQ(n, 0);  // one thread: nothing to pair for
  }
  {
    Threads t(3);  // more than two: the GEMMs' own parts share the threads
    int n = -1;
    const std::vector<Array> three = run_repeatedly(s.grad, pairs(true), s.in, 1, &n);
    EXPECT_EQ(n, 0);
    for (size_t j = 0; j < three.size(); ++j) EXPECT_TRUE(three[j].bit_equal(ref[j])) << s.grad.outputs[j].name;
  }
  Threads t(2);
  int paired = 0, unpaired = -1;
  const std::vector<Array> a = run_repeatedly(s.grad, pairs(true), s.in, 20, &paired);
  const std::vector<Array> b = run_repeatedly(s.grad, pairs(false), s.in, 2, &unpaired);
  EXPECT_EQ(paired, 19);
  EXPECT_EQ(unpaired, 0);
  ASSERT_EQ(a.size(), ref.size());
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_TRUE(a[j].bit_equal(ref[j])) << s.grad.outputs[j].name;
    EXPECT_TRUE(b[j].bit_equal(ref[j])) << s.grad.outputs[j].name;
  }
  // Still one GEMM step each, counted as such.
  EXPECT_EQ(host::Interpreter(s.grad, pairs(true)).own_steps(Op::dot_general),
            host::Interpreter(s.grad, pairs(false)).own_steps(Op::dot_general));
  EXPECT_FALSE(test::defaults_with_env("CAPSTEP_HOST_PAIRS", "0").pair_dots);
  EXPECT_FALSE(test::defaults_with_env("CAPSTEP_HOST_PAIRS", "off").pair_dots);
  EXPECT_TRUE(host::InterpreterOptions::defaults().pair_dots);
}

// Run one after the other, the second GEMM's result could take the buffer of
// the first one's operand x (read for the last time by the first GEMM); side
// by side it must not, or it would write over x while the first still reads
// it. Also: a GEMM that reads the other's result, or does more than twice its
// work, is not paired.
TEST(HostParallel, PairedDotGeneralsNeverShareBuffers) {
  Threads t(2);
  const int64_t M = 64, K = 128, N = 128;
  Program p;
  p.name = "two_gemms";
  const int xi = p.add_input("x", {DType::f32, {M, K}});
  const int yi = p.add_input("y", {DType::f32, {M, K}});
  const int w1 = p.add_input("w1", {DType::f32, {K, N}});
  const int w2 = p.add_input("w2", {DType::f32, {K, N}});
  const int y = p.add_eqn(Op::tanh, {yi}, {});
  const int x = p.add_eqn(Op::tanh, {xi}, {});        // in the arena, last read by the first GEMM
  const int a = matmul(p, x, w1);
  const int b = matmul(p, y, w2);                     // may take x's buffer when run after a
  p.add_output("z", p.add_eqn(Op::add, {a, b}, {}));
  const std::vector<Array> in = {random_array(p.input_type(0), 1), random_array(p.input_type(1), 2),
                                 random_array(p.input_type(2), 3, 0.1), random_array(p.input_type(3), 4, 0.1)};
  int n_on = 0, n_off = -1;
  const std::vector<Array> on = run_repeatedly(p, pairs(true), in, 200, &n_on);
  const std::vector<Array> off = run_repeatedly(p, pairs(false), in, 1, &n_off);
  EXPECT_EQ(n_on, 1);
  EXPECT_EQ(n_off, 0);
  EXPECT_TRUE(on[0].bit_equal(off[0]));

  Program dep;  // the second GEMM reads the first's result
  dep.name = "chain";
  const int d_x = dep.add_input("x", {DType::f32, {M, K}});
  const int d_w = dep.add_input("w", {DType::f32, {K, N}});
  dep.add_output("z", matmul(dep, matmul(dep, d_x, d_w), d_w));
  EXPECT_EQ(host::Interpreter(dep, pairs(true)).dot_pairs(), 0);

  Program uneven;  // 3x the multiply-adds
  uneven.name = "uneven";
  const int u_x = uneven.add_input("x", {DType::f32, {M, K}});
  const int u_y = uneven.add_input("y", {DType::f32, {3 * M, K}});
  const int u_w = uneven.add_input("w", {DType::f32, {K, N}});
  uneven.add_output("a", matmul(uneven, u_x, u_w));
  uneven.add_output("b", matmul(uneven, u_y, u_w));
  EXPECT_EQ(host::Interpreter(uneven, pairs(true)).dot_pairs(), 0);
}

// The threads' cache-line round trip (what the example's host: line
// reports): a time on two threads, none on one, and none, without waiting
// for ever, where the two parts cannot run at once (nested in a part, they
// run inline one after the other).
TEST(HostParallel, RoundTripBetweenThreads) {
  {
    Threads t(1);
    EXPECT_EQ(host::threads_round_trip_ns(), 0.0);
  }
  Threads t(2);
  double ns = 0;
  for (int attempt = 0; attempt < 5 && ns == 0; ++attempt) ns = host::threads_round_trip_ns();  // 0: not met in 50 ms
  EXPECT_GT(ns, 1.0);
  EXPECT_LT(ns, 1e6);
  std::atomic<int> zeros{0};
  const auto t0 = std::chrono::steady_clock::now();
  host::parallel_parts(2, [&](int) { zeros += host::threads_round_trip_ns() == 0.0; });
  EXPECT_EQ(zeros.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}
