// The host's worker threads (src/backend/host/parallel.h): every part runs
// once, parts really run at the same time, an exception reaches the caller,
// and a step's results are the same bits whatever the number of threads (the
// GEMMs' parts are fixed by their shapes; fused loop and row groups and the
// host AdamW cut only elementwise work).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "capstep/host_adamw.h"
#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
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
  EXPECT_TRUE(std::isfinite(ns));  // a measured time: no upper bound, which a loaded machine can pass
  std::atomic<int> zeros{0};
  const auto t0 = std::chrono::steady_clock::now();
  host::parallel_parts(2, [&](int) { zeros += host::threads_round_trip_ns() == 0.0; });
  EXPECT_EQ(zeros.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// host::Background: every released chunk runs once, never before its
// release, on any thread; idle workers take some; finish() runs the rest and
// rethrows a chunk's exception after the others have run.
TEST(HostParallel, BackgroundChunksRunOnceAfterTheirRelease) {
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    constexpr int kChunks = 300;
    struct Ctx {
      std::atomic<int> released{0};  // raised before each release
      std::atomic<int> early{0};     // chunks that ran before their release
      std::atomic<int> elsewhere{0};  // chunks that ran on another thread than the test's
      std::thread::id caller = std::this_thread::get_id();
      std::vector<std::atomic<int>> ran = std::vector<std::atomic<int>>(kChunks);
    } c;
    auto f = [](void* ctx, int i) {
      Ctx& c = *static_cast<Ctx*>(ctx);
      if (i >= c.released.load()) c.early.fetch_add(1);
      if (std::this_thread::get_id() != c.caller) c.elsewhere.fetch_add(1);
      c.ran[static_cast<size_t>(i)].fetch_add(1);
      volatile double x = 0;  // about a microsecond
      for (int k = 0; k < 300; ++k) x = x + std::sqrt(static_cast<double>(k));
    };
    host::Background bg(f, &c);
    EXPECT_EQ(bg.on_idle_threads(), threads > 1);
    // Release in steps, between parallel sections (the caller takes chunks
    // while it waits for the workers' parts; the workers between parts).
    for (int n = 10; n <= kChunks - 100; n += 10) {
      c.released.store(n);
      bg.release(n);
      bg.release(n - 5);  // smaller: nothing
      host::parallel_parts(2, [](int) {
        volatile double x = 0;
        for (int k = 0; k < 2000; ++k) x = x + std::sqrt(static_cast<double>(k));
      });
    }
    if (threads > 1) {  // idle workers take chunks before finish(): wait for one (at most 20 s)
      const auto t0 = std::chrono::steady_clock::now();
      while ((c.elsewhere.load() == 0 || bg.done_so_far() == 0) &&
             std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
        host::parallel_parts(2, [](int) {});
      EXPECT_GT(c.elsewhere.load(), 0) << threads << " threads";
      EXPECT_GT(bg.done_so_far(), 0);
    } else {
      EXPECT_EQ(bg.done_so_far(), 0);  // one thread: all of it in finish()
    }
    c.released.store(kChunks);
    bg.release(kChunks);
    bg.finish();
    bg.finish();  // once only
    EXPECT_EQ(bg.done_so_far(), kChunks);
    EXPECT_EQ(c.early.load(), 0);
    for (int i = 0; i < kChunks; ++i) EXPECT_EQ(c.ran[static_cast<size_t>(i)].load(), 1) << threads << " threads, chunk " << i;
  }

  // An exception: the other chunks still run, finish() rethrows it.
  Threads t(2);
  std::atomic<int> ran{0};
  host::Background bg(
      [](void* ctx, int i) {
        static_cast<std::atomic<int>*>(ctx)->fetch_add(1);
        if (i == 7) throw std::runtime_error("chunk 7");
      },
      &ran);
  bg.release(50);
  EXPECT_THROW(bg.finish(), std::runtime_error);
  EXPECT_EQ(ran.load(), 50);

  // While one is under way, a second runs everything in its own finish().
  std::atomic<int> first{0}, second{0};
  auto count = [](void* ctx, int) { static_cast<std::atomic<int>*>(ctx)->fetch_add(1); };
  host::Background one(count, &first);
  host::Background two(count, &second);
  EXPECT_TRUE(one.on_idle_threads());
  EXPECT_FALSE(two.on_idle_threads());
  two.release(20);
  EXPECT_EQ(two.done_so_far(), 0);
  two.finish();
  EXPECT_EQ(second.load(), 20);
  one.release(20);
  one.finish();
  EXPECT_EQ(first.load(), 20);
}

// Interpreter::RunEvents on the seed's step: an output is final when its
// event comes (a copy taken then equals the result), an input is read no
// more once released (garbage written into it then changes no output),
// each event comes once, and they come during the run, not all at its end.
TEST(HostParallel, RunEventsComeWhenOutputsAreFinalAndInputsAreFree) {
  const test::SeedStep s;
  const std::vector<Array> ref = host::Interpreter(s.grad).run(s.in);
  for (int threads : {1, 2}) {
    for (bool fuse : {true, false}) {
      Threads t(threads);
      host::InterpreterOptions o = host::InterpreterOptions::defaults();
      o.fuse = fuse;
      host::Interpreter it(s.grad, o);
      std::vector<Array> in = s.in, out;
      std::vector<const Array*> ptrs;
      for (const Array& a : in) ptrs.push_back(&a);
      std::vector<Array> seen(s.grad.outputs.size());
      std::vector<int> ready(s.grad.outputs.size(), 0), released(in.size(), 0);
      std::vector<char> order;  // 'o' output, 'i' input, in event order
      host::Interpreter::RunEvents ev;
      ev.output_ready = [&](int j) {
        ++ready[static_cast<size_t>(j)];
        seen[static_cast<size_t>(j)] = out[static_cast<size_t>(j)];  // a copy
        order.push_back('o');
      };
      ev.input_released = [&](int i) {
        ++released[static_cast<size_t>(i)];
        Array& a = in[static_cast<size_t>(i)];
        for (int64_t k = 0; k < a.numel(); ++k) a.set(k, a.dtype() == DType::i32 ? 5.0 : 1e30);
        order.push_back('i');
      };
      for (int run = 0; run < 2; ++run) {  // the second into Arrays that exist
        in = s.in;
        std::fill(ready.begin(), ready.end(), 0);
        std::fill(released.begin(), released.end(), 0);
        order.clear();
        it.run(ptrs, out, ev);
        const std::string at = std::to_string(threads) + " threads, fuse " + std::to_string(fuse) + ", run " + std::to_string(run);
        ASSERT_EQ(out.size(), ref.size());
        for (size_t j = 0; j < out.size(); ++j) {
          EXPECT_EQ(ready[j], 1) << s.grad.outputs[j].name << ", " << at;
          EXPECT_TRUE(out[j].bit_equal(ref[j])) << s.grad.outputs[j].name << ", " << at;
          EXPECT_TRUE(seen[j].bit_equal(ref[j])) << s.grad.outputs[j].name << " was not final at its event, " << at;
        }
        for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(released[i], 1) << s.grad.inputs[i].name << ", " << at;
        // Interleaved: some parameter is released after some gradient is
        // final, and some gradient is final after some parameter is released.
        const std::string seq(order.begin(), order.end());
        EXPECT_NE(seq.find("oi"), std::string::npos) << seq << ", " << at;
        EXPECT_NE(seq.find("io"), std::string::npos) << seq << ", " << at;
      }
    }
  }
}

// host::HostAdamW (lane 1): the same bits as the run, then adamw_update,
// over several steps, whatever the threads; idle threads take chunks; and
// it says what is wrong before running anything.
TEST(HostParallel, HostAdamWIsTheRunThenAdamWUpdate) {
  const test::SeedStep s;
  const size_t n = s.names.size();
  optim::AdamW aw;
  std::vector<Array> ref_p, ref_m, ref_v;
  // The host backend of the gradient program, every input set from s.in.
  auto backend = [&] {
    std::unique_ptr<Backend> b = make_backend(BackendKind::host, s.grad);
    for (size_t i = 0; i < s.in.size(); ++i) b->set_input(static_cast<int>(i), s.in[i]);
    return b;
  };
  auto zeros = [&] {
    std::vector<Array> z;
    for (size_t j = 0; j < n; ++j) z.emplace_back(s.in[j].type());
    return z;
  };
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    const std::unique_ptr<Backend> b = backend();
    host::Interpreter it(s.grad);
    host::HostAdamW h(aw);
    std::vector<Array> m = zeros(), v = zeros();
    // The reference: run, then adamw_update, in the same process.
    std::vector<Array> p2(s.in.begin(), s.in.begin() + static_cast<std::ptrdiff_t>(n)), m2 = m, v2 = v;
    std::vector<const Array*> ins2;
    for (size_t j = 0; j < n; ++j) ins2.push_back(&p2[j]);
    for (size_t j = n; j < s.in.size(); ++j) ins2.push_back(&s.in[j]);
    std::vector<Array> out2;
    int early = 0;
    for (int k = 1; k <= 3; ++k) {
      const optim::AdamWScalars sc = optim::adamw_scalars(aw, k);
      h.step(*b, 1, sc, m, v);
      early += h.early_chunks();
      it.run(ins2, out2);
      optim::adamw_update(aw, sc, p2, out2.data() + 1, m2, v2);
      for (size_t j = 0; j < out2.size(); ++j)
        EXPECT_TRUE(b->host_output(static_cast<int>(j))->bit_equal(out2[j])) << s.grad.outputs[j].name << ", step " << k;
      for (size_t j = 0; j < n; ++j) {
        EXPECT_TRUE(b->host_input(static_cast<int>(j))->bit_equal(p2[j]))
            << s.names[j] << ", step " << k << ", " << threads << " threads";
        EXPECT_TRUE(m[j].bit_equal(m2[j])) << s.names[j] << ", step " << k;
        EXPECT_TRUE(v[j].bit_equal(v2[j])) << s.names[j] << ", step " << k;
      }
    }
    int64_t elems = 0;
    int chunks = 0;
    for (size_t j = 0; j < n; ++j) {
      elems += p2[j].numel();
      chunks += static_cast<int>((p2[j].numel() + host::HostAdamW::kChunk - 1) / host::HostAdamW::kChunk);
    }
    EXPECT_EQ(h.chunks(), chunks) << elems << " elements";
    if (threads == 1) EXPECT_EQ(early, 0);
    if (ref_p.empty()) {
      ref_p = p2, ref_m = m, ref_v = v;
      continue;
    }
    for (size_t j = 0; j < n; ++j) EXPECT_TRUE(p2[j].bit_equal(ref_p[j])) << s.names[j] << ", " << threads << " threads";
  }

  // Errors, before anything runs.
  const std::unique_ptr<Backend> b = backend();
  host::HostAdamW h(aw);
  std::vector<Array> m = zeros(), v = zeros();
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 1);
  auto unchanged = [&] {
    for (size_t j = 0; j < n; ++j)
      if (!b->host_input(static_cast<int>(j))->bit_equal(s.in[j])) return false;
    return b->runs() == 0;
  };
  std::vector<Array> short_v(v.begin(), v.end() - 1);
  test::expect_error([&] { h.step(*b, 1, sc, m, short_v); }, {"second moments"});
  test::expect_error([&] { h.step(*b, 3, sc, m, v); }, {"gradients from output 3"});
  std::vector<Array> bad_m = m;
  bad_m[2] = Array({DType::f32, {3}});
  test::expect_error([&] { h.step(*b, 1, sc, bad_m, v); }, {"must have one type"});
  test::expect_error([&] { h.step(*b, 1, sc, m, v, 2); }, {"finite_output 2 must be a scalar f32 output"});
  test::expect_error([&] { h.step(*b, 1, sc, m, v, 99); }, {"finite_output 99"});
  EXPECT_TRUE(unchanged());
  test::expect_error([] { host::HostAdamW bad(optim::AdamW{-1.0}); }, {"lr must be positive"});
  // A parameter donated to an output (the with_adamw program's): the run
  // writes it while the update would.
  {
    const std::unique_ptr<Backend> w = make_backend(BackendKind::host, optim::with_adamw(s.grad, s.names, aw));
    test::expect_error([&] { h.step(*w, 1, sc, m, v); }, {"is donated to output"});
  }

  // finite_output: a finite loss updates as without it; a NaN one (a NaN
  // weight) updates nothing, even on two threads where chunks run early.
  Threads two(2);
  EXPECT_TRUE(h.step(*b, 1, sc, m, v, 0));
  EXPECT_FALSE(b->host_input(3)->bit_equal(s.in[3]));
  Array q3 = s.in[3];
  q3.set(0, std::nan(""));
  const std::unique_ptr<Backend> q = backend();
  q->set_input(3, q3);
  std::vector<Array> qm = zeros(), qv = zeros();
  EXPECT_FALSE(h.step(*q, 1, sc, qm, qv, 0));
  EXPECT_TRUE(std::isnan(q->host_output(0)->get(0)));
  for (size_t j = 0; j < n; ++j) {
    EXPECT_TRUE(q->host_input(static_cast<int>(j))->bit_equal(j == 3 ? q3 : s.in[j])) << s.names[j];
    EXPECT_TRUE(qm[j].bit_equal(Array(s.in[j].type()))) << s.names[j];
    EXPECT_TRUE(qv[j].bit_equal(Array(s.in[j].type()))) << s.names[j];
  }
  EXPECT_TRUE(h.step(*q, 1, sc, qm, qv));  // without it: NaN everywhere
  EXPECT_TRUE(std::isnan(q->host_input(3)->get(1)));
  EXPECT_TRUE(std::isnan(q->host_input(static_cast<int>(n) - 1)->get(0)));
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
unsigned control_word() { return _mm_getcsr() & ~0x3fu; }  // the mode, not the sticky exception flags
#else
unsigned control_word() { return 0; }
#endif

// out = (x * 0.5) * 1 over n elements: a fused group whose tiles every
// thread takes parts of (one unfused elementwise equation runs on the caller).
Program halve(int64_t n) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {n}});
  Tensor one = tr.input("one", {DType::f32, {n}});
  return tr.finish({{"y", (x * 0.5) * one}});
}

}  // namespace

// InterpreterOptions::flush_subnormals: on (the default), a subnormal operand
// reads as zero and a result that would be subnormal is zero, in every part
// whichever thread runs it, fused or not (unfused, the multiplies run on the
// caller); off, IEEE's gradual underflow,
// even when the calling thread flushes. The caller's control word comes back.
TEST(HostParallel, SubnormalsFlushedOnEveryThreadOrKept) {
  if (!host::SubnormalMode::available()) GTEST_SKIP() << "no subnormal mode on this CPU";
  const int64_t n = 1 << 20;
  Array x({DType::f32, {n}});
  // a subnormal operand, a normal one whose half is subnormal, one whose half is normal
  const float kSub = 1e-39f, kHalfSub = 2e-38f, kNormal = 3e-38f;
  // IEEE's halves, worked out on this thread before any mode is set
  const float half[3] = {kSub * 0.5f, kHalfSub * 0.5f, kNormal * 0.5f};
  ASSERT_NE(half[0], 0.f);  // so the comparisons below can fail
  ASSERT_NE(half[1], 0.f);
  Array one({DType::f32, {n}});
  for (int64_t i = 0; i < n; ++i) {
    x.data<float>()[i] = i % 3 == 0 ? kSub : i % 3 == 1 ? kHalfSub : kNormal;
    one.data<float>()[i] = 1.f;
  }
  for (int threads : {1, 2, 3}) {
    Threads t(threads);
    for (bool fuse : {true, false}) {
      for (bool flush : {true, false}) {
        for (bool caller_flushes : {false, true}) {
          SCOPED_TRACE(std::to_string(threads) + " threads, fuse " + std::to_string(fuse) + ", flush " +
                       std::to_string(flush) + ", caller flushes " + std::to_string(caller_flushes));
          host::InterpreterOptions o;
          o.fuse = fuse;
          o.flush_subnormals = flush;
          host::Interpreter it(halve(n), o);
          std::vector<Array> y;
          {
            const host::SubnormalMode caller(caller_flushes);
            const unsigned before = control_word();
            y = it.run({x, one});
            EXPECT_EQ(control_word(), before);
          }
          // compared as bits, in IEEE mode (a flushing compare reads subnormals as 0)
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float want = i % 3 == 2 || !flush ? half[i % 3] : 0.f;
            wrong += std::memcmp(&y[0].data<float>()[i], &want, sizeof want) != 0;
          }
          EXPECT_EQ(wrong, 0);
        }
      }
    }
  }
}

// host::HostAdamW runs its chunks (on idle threads and after the run) in
// its backend's mode: for a normal g = 1e-37, (1 - beta1) * g is
// subnormal, so the first moment is 0 everywhere when flushing and
// (1 - beta1) * g when not.
TEST(HostParallel, HostAdamWChunksFlushAsTheirInterpreter) {
  if (!host::SubnormalMode::available()) GTEST_SKIP() << "no subnormal mode on this CPU";
  const int64_t n = 1 << 18;
  Tracer tr;
  Tensor p = tr.input("p", {DType::f32, {n}});
  Tensor x = tr.input("x", {DType::f32, {n}});
  const Program grad = value_and_grad(tr.finish({{"loss", sum(p * x)}}), {"p"});
  Array xs({DType::f32, {n}});
  for (int64_t i = 0; i < n; ++i) xs.data<float>()[i] = 1e-37f;
  Threads t(2);
  for (bool flush : {true, false}) {
    SCOPED_TRACE(flush ? "flush" : "keep");
    BackendOptions o;
    o.host.flush_subnormals = flush;
    const std::unique_ptr<Backend> b = make_backend(BackendKind::host, grad, o);
    Array q({DType::f32, {n}});
    for (int64_t i = 0; i < n; ++i) q.data<float>()[i] = 1.f;
    b->set("p", q);
    b->set("x", xs);
    std::vector<Array> qm{Array({DType::f32, {n}})}, qv{Array({DType::f32, {n}})};
    const optim::AdamW aw;
    host::HostAdamW h(aw);
    const optim::AdamWScalars sc = optim::adamw_scalars(aw, 1);
    const unsigned before = control_word();
    ASSERT_TRUE(h.step(*b, 1, sc, qm, qv));
    EXPECT_EQ(control_word(), before);
    const float kept = static_cast<float>(1 - aw.beta1) * 1e-37f;
    ASSERT_EQ(std::fpclassify(kept), FP_SUBNORMAL);
    const float want = flush ? 0.f : kept;
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += std::memcmp(&qm[0].data<float>()[i], &want, sizeof want) != 0;
    EXPECT_EQ(wrong, 0);
  }
}

// A Background's chunks run in the float mode of the thread that made it, also
// on a worker whose last parts ran in another mode: made in a flushing scope
// right after IEEE parts, every chunk's x * 0.5 of a subnormal x is 0.
TEST(HostParallel, BackgroundChunksRunInTheirMakersMode) {
  if (!host::SubnormalMode::available()) GTEST_SKIP() << "no subnormal mode on this CPU";
  Threads t(2);
  constexpr int kChunks = 200;
  struct Ctx {
    volatile float x = 1e-39f;
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
    std::vector<float> y = std::vector<float>(kChunks);
  } c;
  ASSERT_NE(c.x * 0.5f, 0.f);  // IEEE here
  auto f = [](void* ctx, int i) {
    Ctx& c = *static_cast<Ctx*>(ctx);
    if (std::this_thread::get_id() != c.caller) c.elsewhere.fetch_add(1);
    c.y[static_cast<size_t>(i)] = c.x * 0.5f;
  };
  int wrong = 0;
  for (int attempt = 0; attempt < 50 && c.elsewhere.load() == 0; ++attempt) {
    host::parallel_parts(2, [](int) {});  // the workers' last parts: IEEE
    const host::SubnormalMode flush(true);
    host::Background bg(f, &c);
    bg.release(kChunks);
    const auto t0 = std::chrono::steady_clock::now();
    while (bg.done_so_far() < kChunks && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
    }
    bg.finish();
    for (float v : c.y) wrong += std::memcmp(&v, "\0\0\0\0", 4) != 0;
  }
  if (c.elsewhere.load() == 0) GTEST_SKIP() << "no worker took a chunk in 50 tries";
  EXPECT_EQ(wrong, 0);
}
