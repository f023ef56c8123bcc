// Op::all_reduce and optim::data_parallel (issue 14) without MPI: the shape
// rule, the text form, the interpreter alone (one replica: the identity) and
// with an in-process communicator (replicas as threads: the sum), the VJP
// against finite differences, the kernel plan, the StableHLO golden file and
// its round trip, and data_parallel on one replica against the original step.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/stablehlo.h"
#include "backend/plan/kernel_plan.h"
#include "gradcheck_util.h"
#include "stablehlo_test_util.h"
#include "thread_comm.h"

using namespace capstep;
using namespace capstep::hlo_test;
using capstep::test::Shared;
using capstep::test::ThreadComm;

namespace {

// y = all_reduce(x * 2), z = all_reduce(y) + x: one all_reduce on a computed
// value (in place) and one on a program input (copied).
Program two_reduces(DType d = DType::f32) {
  Tracer tr;
  Tensor x = tr.input("x", {d, {2, 3}});
  Tensor y = all_reduce(x * 2.0);
  Tensor z = all_reduce(x) + y;
  return tr.finish({{"y", y}, {"z", z}});
}

}  // namespace

TEST(AllReduce, ShapeRuleKeepsTheTypeAndRefusesIntegers) {
  EXPECT_EQ(infer_type(Op::all_reduce, {{DType::f32, {4, 8}}}, {}).str(), "f32[4,8]");
  EXPECT_EQ(infer_type(Op::all_reduce, {{DType::f64, {}}}, {}).str(), "f64[]");
  try {
    infer_type(Op::all_reduce, {{DType::i32, {3}}}, {});
    FAIL() << "all_reduce of i32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("floats"), std::string::npos) << e.what();
  }
}

TEST(AllReduce, TextRoundTrip) {
  const Program p = two_reduces();
  const std::string t = to_text(p);
  EXPECT_NE(t.find("= all_reduce(%"), std::string::npos) << t;
  EXPECT_EQ(to_text(parse_text(t)), t);
}

TEST(AllReduce, OneReplicaIsTheIdentity) {
  host::Interpreter in(two_reduces());
  const Array x = Array::f32({2, 3}, {1.5f, -2, 3, 0.25f, 5, -6});
  std::vector<Array> out = in.run({x});
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(out[0].get(i), 2 * x.get(i));
    EXPECT_EQ(out[1].get(i), 3 * x.get(i));
  }
  // A communicator of size 1 is also one replica.
  Shared s(1);
  ThreadComm c(s, 0);
  in.set_communicator(&c);
  out = in.run({x});
  EXPECT_EQ(out[1].get(5), -18);
  EXPECT_EQ(c.calls, 0);
}

TEST(AllReduce, SumsAcrossThreeReplicas) {
  const int R = 3;
  Shared s(R);
  std::vector<std::vector<Array>> outs(R);
  std::vector<int> calls(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      ThreadComm c(s, r);
      host::Interpreter in(two_reduces());
      in.set_communicator(&c);
      const float v = static_cast<float>(r + 1);
      outs[static_cast<size_t>(r)] = in.run({Array::f32({2, 3}, {v, v, v, v, v, -v})});
      calls[static_cast<size_t>(r)] = c.calls;
    });
  for (std::thread& t : th) t.join();
  // sum of x over replicas: 1 + 2 + 3 = 6; y = 2 * 6 = 12; z = 6 + 12 = 18 (element 5 negated)
  for (int r = 0; r < R; ++r) {
    // The two all_reduces are consecutive equations, independent of each
    // other: one pack, sent as one message (data_parallel_pack_test.cpp).
    EXPECT_EQ(calls[static_cast<size_t>(r)], 1);
    EXPECT_EQ(outs[static_cast<size_t>(r)][0].get(0), 12);
    EXPECT_EQ(outs[static_cast<size_t>(r)][1].get(0), 18);
    EXPECT_EQ(outs[static_cast<size_t>(r)][1].get(5), -18);
  }
}

// The finite-difference check (one replica) is GradCheck.AllReduce in
// grad_check_test.cpp; here the rule is an all_reduce and sums across replicas.
TEST(AllReduce, VjpIsAnAllReduce) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f64, {3}});
  const Program g = value_and_grad(tr.finish({{"loss", sum(all_reduce(x * x))}}), {"x"});
  int reduces = 0;
  for (const Eqn& e : g.eqns) reduces += e.op == Op::all_reduce;
  EXPECT_EQ(reduces, 2) << to_text(g);  // the forward one and its transpose
}

TEST(AllReduce, VjpSumsCotangentsAcrossReplicas) {
  // loss_r = sum(w_r * all_reduce(x_r)); d(sum_r loss_r)/dx_r = sum_r w_r.
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {3}});
  Tensor w = tr.input("w", {DType::f32, {3}});
  const Program g = value_and_grad(tr.finish({{"loss", sum(w * all_reduce(x))}}), {"x"});
  const int R = 2;
  Shared s(R);
  std::vector<Array> grads(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      ThreadComm c(s, r);
      host::Interpreter in(g);
      in.set_communicator(&c);
      const float k = r == 0 ? 1.0f : 10.0f;
      grads[static_cast<size_t>(r)] = in.run({Array::f32({3}, {1, 2, 3}), Array::f32({3}, {k, 2 * k, 3 * k})})[1];
    });
  for (std::thread& t : th) t.join();
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(grads[static_cast<size_t>(r)].get(i), 11.0 * static_cast<double>(i + 1));
}

TEST(AllReduce, IsACollectiveKernelBoundary) {
  const plan::KernelPlan kp = plan::plan_kernels(two_reduces());
  int collectives = 0;
  for (const plan::Item& it : kp.items) collectives += it.kind == plan::ItemKind::collective;
  EXPECT_EQ(collectives, 2) << kp.describe();
  EXPECT_NE(kp.describe().find("collective"), std::string::npos);
}

TEST(AllReduceStablehlo, GoldenWithTwoReplicas) {
  ASSERT_FALSE(source_dir().empty()) << "CAPSTEP_SOURCE_DIR is not set: run through ctest";
  const std::string path = source_dir() + "/tests/golden/stablehlo_all_reduce.mlir";
  const std::string text = to_stablehlo(two_reduces(), "capstep", 2);
  const char* update = std::getenv("CAPSTEP_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    write_file(path, text);
    GTEST_SKIP() << "rewrote " << path << "; review the diff";
  }
  EXPECT_EQ(text, read_file(path)) << "to_stablehlo output differs from " << path << " (CAPSTEP_UPDATE_GOLDEN=1 rewrites it)";
  EXPECT_NE(text.find("mhlo.num_replicas = 2 : i32"), std::string::npos);
  EXPECT_NE(text.find("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"), std::string::npos);
}

TEST(AllReduceStablehlo, RoundTripKeepsTheReplicaCount) {
  for (int n : {1, 2, 8}) {
    const Program p = two_reduces(DType::f64);
    int replicas = 0;
    const Program q = from_stablehlo(to_stablehlo(p, "capstep", n), &replicas);
    EXPECT_EQ(replicas, n);
    EXPECT_EQ(program_difference(p, q), "");
    EXPECT_EQ(to_stablehlo(q, "capstep", n), to_stablehlo(p, "capstep", n));
  }
}

TEST(AllReduceStablehlo, ReaderRefusesOtherGroupsAndBadCounts) {
  const std::string good = to_stablehlo(two_reduces(), "capstep", 2);
  auto refuses = [](std::string text, const std::string& from, const std::string& to, const std::string& says) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    try {
      from_stablehlo(text);
      ADD_FAILURE() << "accepted: " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("stablehlo:", 0), 0u) << e.what();
    }
  };
  refuses(good, "dense<[[0, 1]]> : tensor<1x2xi64>", "dense<[[0], [1]]> : tensor<2x1xi64>", "one group of every replica");
  refuses(good, "dense<[[0, 1]]> : tensor<1x2xi64>", "dense<[[1, 0]]> : tensor<1x2xi64>", "one group of every replica");
  refuses(good, "dense<[[0, 1]]> : tensor<1x2xi64>", "dense<[[0, 1]]> : tensor<2x2xi64>", "tensor<1x2xi64>");
  refuses(good, "mhlo.num_replicas = 2", "mhlo.num_replicas = 0", "replica count");
  refuses(good, "mhlo.num_partitions = 1", "mhlo.num_partitions = 2", "1 partition");
  refuses(good, "stablehlo.add %r2_a, %r2_b", "stablehlo.maximum %r2_a, %r2_b", "all_reduce body must add");
  // The two all_reduces are one pack: one variadic op with two results.
  refuses(good, "%2, %3 = \"stablehlo.all_reduce\"", "%2, %3 = \"stablehlo.gather\"",
          "only stablehlo.all_reduce may have several results");
  refuses(good, "-> (tensor<2x3xf32>, tensor<2x3xf32>)", "-> (tensor<2x3xf32>)", "expected");
  refuses(good, "\"stablehlo.all_reduce\"(%1, %arg0)", "\"stablehlo.all_reduce\"(%1)", "expected");
  EXPECT_THROW(to_stablehlo(two_reduces(), "capstep", 0), Error);
}

TEST(DataParallel, OneReplicaEqualsTheOriginalStep) {
  nn::LmConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 64;
  c.context = 16;
  c.batch = 2;
  c.seq = 8;
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names);
  const Program dp = optim::data_parallel(grad, names, 1);
  int reduces = 0;
  for (const Eqn& e : dp.eqns) reduces += e.op == Op::all_reduce;
  EXPECT_EQ(reduces, static_cast<int>(names.size()) + 1);  // every gradient and the loss
  ASSERT_EQ(dp.outputs.size(), grad.outputs.size());
  for (size_t k = 0; k < dp.outputs.size(); ++k) EXPECT_EQ(dp.outputs[k].name, grad.outputs[k].name);

  std::vector<Array> in = nn::init_parameters(c, 3);
  Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 64);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 64);
  }
  in.push_back(tokens);
  in.push_back(targets);
  const std::vector<Array> a = host::run(grad, in), b = host::run(dp, in);
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(std::memcmp(a[k].raw(), b[k].raw(), a[k].bytes()), 0) << grad.outputs[k].name;

  // With 2 replicas: divided by 2 after the all_reduce, and checked inputs.
  const Program dp2 = optim::data_parallel(grad, names, 2);
  EXPECT_NE(to_text(dp2).find("divide"), std::string::npos);
  EXPECT_THROW(optim::data_parallel(grad, names, 0), Error);
  EXPECT_THROW(optim::data_parallel(dp, names, 2), Error);
  EXPECT_THROW(optim::data_parallel(grad, {"nope"}, 2), Error);
}

TEST(DataParallel, TwoThreadReplicasMatchOneReplicaOnTheWholeBatch) {
  // The mean over replicas of each replica's gradient on its half of the rows
  // equals the gradient on all rows (f32 summation order aside).
  nn::LmConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 64;
  c.context = 16;
  c.batch = 4;
  c.seq = 8;
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  const Program whole = value_and_grad(nn::lm_loss_program(c), names);
  nn::LmConfig half = c;
  half.batch = 2;
  const Program dp = optim::data_parallel(value_and_grad(nn::lm_loss_program(half), names), names, 2);
  const std::vector<Array> params = nn::init_parameters(c, 5);
  Array tokens({DType::i32, {4, 8}}), targets = tokens;
  for (int64_t i = 0; i < 32; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 11) % 64);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 3 + 2) % 64);
  }
  std::vector<Array> in = params;
  in.push_back(tokens);
  in.push_back(targets);
  const std::vector<Array> want = host::run(whole, in);
  Shared s(2);
  std::vector<std::vector<Array>> got(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      ThreadComm comm(s, r);
      host::Interpreter interp(dp);
      interp.set_communicator(&comm);
      std::vector<Array> rin = params;
      Array tk({DType::i32, {2, 8}}), tg = tk;
      std::memcpy(tk.raw(), tokens.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      std::memcpy(tg.raw(), targets.data<int32_t>() + 16 * r, 16 * sizeof(int32_t));
      rin.push_back(tk);
      rin.push_back(tg);
      got[static_cast<size_t>(r)] = interp.run(rin);
    });
  for (std::thread& t : th) t.join();
  for (size_t k = 0; k < want.size(); ++k) {
    double scale = 0, err = 0;
    for (int64_t i = 0; i < want[k].numel(); ++i) {
      scale = std::max(scale, std::fabs(want[k].get(i)));
      err = std::max(err, std::fabs(want[k].get(i) - got[0][k].get(i)));
      EXPECT_EQ(got[0][k].get(i), got[1][k].get(i)) << "replicas disagree on " << whole.outputs[k].name;
    }
    EXPECT_LE(err, 1e-5 * scale + 1e-9) << whole.outputs[k].name;
  }
}
