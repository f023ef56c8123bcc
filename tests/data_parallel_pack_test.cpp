// optim::DataParallelOptions::pack (issue 14): every gradient and the loss in
// ONE all-reduce message per step. The packed program has its all_reduce
// equations as one consecutive run; the host interpreter sends that run as one
// Communicator::all_reduce_sum (counted here), with or without host fusion,
// and its results are bit-identical to the unpacked program's (one message per
// value): the sum over replicas is elementwise, so packing changes no sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "capstep/autodiff.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "thread_comm.h"

using namespace capstep;
using capstep::test::Shared;
using capstep::test::ThreadComm;

namespace {

struct Fixture {
  nn::LmConfig c;
  std::vector<std::string> names;
  Program grad;
  std::vector<Array> params;
  Array tokens, targets;
  Fixture() {
    c.d_model = 32;
    c.n_heads = 2;
    c.d_ff = 64;
    c.context = 16;
    c.batch = 2;
    c.seq = 8;
    for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
    grad = value_and_grad(nn::lm_loss_program(c), names);
    params = nn::init_parameters(c, 7);
    tokens.reset({DType::i32, {4, 8}});
    targets.reset({DType::i32, {4, 8}});
    for (int64_t i = 0; i < 32; ++i) {
      tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 13) % 64);
      targets.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 3) % 64);
    }
  }
};

// Runs `dp` on 2 thread replicas (rank r on rows 2r, 2r+1); returns each
// replica's outputs and, in calls[r], how many all_reduce_sum it made.
std::vector<std::vector<Array>> run_two(const Fixture& s, const Program& dp, bool fuse, int calls[2]) {
  Shared sh(2);
  std::vector<std::vector<Array>> got(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      ThreadComm comm(sh, r);
      host::InterpreterOptions o = host::InterpreterOptions::defaults();
      o.fuse = fuse;
      host::Interpreter interp(dp, o);
      interp.set_communicator(&comm);
      std::vector<Array> rin = s.params;
      Array tk({DType::i32, {2, 8}}), tg = tk;
      std::memcpy(tk.raw(), s.tokens.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      std::memcpy(tg.raw(), s.targets.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      rin.push_back(tk);
      rin.push_back(tg);
      got[static_cast<size_t>(r)] = interp.run(rin);
      calls[r] = comm.calls;
    });
  for (std::thread& t : th) t.join();
  return got;
}

}  // namespace

TEST(DataParallelPack, PackedProgramHasOneRunOfAllReduces) {
  const Fixture s;
  for (bool pack : {true, false}) {
    const Program dp = optim::data_parallel(s.grad, s.names, 2, {pack});
    int reduces = 0, runs = 0;
    bool in_run = false;
    for (const Eqn& e : dp.eqns) {
      const bool ar = e.op == Op::all_reduce;
      reduces += ar;
      runs += ar && !in_run;
      in_run = ar;
    }
    EXPECT_EQ(reduces, static_cast<int>(s.names.size()) + 1) << "pack " << pack;
    EXPECT_EQ(runs, pack ? 1 : reduces) << "pack " << pack;
  }
  // The default is packed.
  EXPECT_TRUE(optim::DataParallelOptions{}.pack);
}

TEST(DataParallelPack, OneMessagePerStepAndTheSameBitsAsUnpacked) {
  const Fixture s;
  const Program packed = optim::data_parallel(s.grad, s.names, 2, {true});
  const Program single = optim::data_parallel(s.grad, s.names, 2, {false});
  for (bool fuse : {true, false}) {
    int cp[2] = {0, 0}, cu[2] = {0, 0};
    const auto a = run_two(s, packed, fuse, cp);
    const auto b = run_two(s, single, fuse, cu);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(cp[r], 1) << "packed, fuse " << fuse << ", rank " << r;
      EXPECT_EQ(cu[r], static_cast<int>(s.names.size()) + 1) << "unpacked, fuse " << fuse << ", rank " << r;
    }
    ASSERT_EQ(a[0].size(), s.grad.outputs.size());
    for (size_t k = 0; k < a[0].size(); ++k) {
      EXPECT_EQ(std::memcmp(a[0][k].raw(), b[0][k].raw(), a[0][k].bytes()), 0) << s.grad.outputs[k].name << " fuse " << fuse;
      EXPECT_EQ(std::memcmp(a[0][k].raw(), a[1][k].raw(), a[0][k].bytes()), 0) << "replicas differ on " << s.grad.outputs[k].name;
    }
    // And it is a mean over the replicas: the loss is the mean of the two
    // halves' losses, computed alone.
    nn::LmConfig half = s.c;
    const Program g1 = value_and_grad(nn::lm_loss_program(half), s.names);
    double want = 0;
    for (int r = 0; r < 2; ++r) {
      std::vector<Array> rin = s.params;
      Array tk({DType::i32, {2, 8}}), tg = tk;
      std::memcpy(tk.raw(), s.tokens.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      std::memcpy(tg.raw(), s.targets.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      rin.push_back(tk);
      rin.push_back(tg);
      want += host::run(g1, rin)[0].get(0);
    }
    EXPECT_NEAR(a[0][0].get(0), want / 2, 1e-6 * std::fabs(want));
  }
}

TEST(DataParallelPack, OneReplicaPackedIsTheOriginalStep) {
  const Fixture s;
  std::vector<Array> in = s.params;
  Array tk({DType::i32, {2, 8}}), tg = tk;
  std::memcpy(tk.raw(), s.tokens.raw(), 16 * sizeof(int32_t));
  std::memcpy(tg.raw(), s.targets.raw(), 16 * sizeof(int32_t));
  in.push_back(tk);
  in.push_back(tg);
  const std::vector<Array> a = host::run(s.grad, in), b = host::run(optim::data_parallel(s.grad, s.names, 1, {true}), in);
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(std::memcmp(a[k].raw(), b[k].raw(), a[k].bytes()), 0) << s.grad.outputs[k].name;
}
