// Data parallelism on the GPU lanes through NCCL (issue 14, src/backend/cuda/
// nccl.h). Only a one-GPU machine has been available, so what runs here is the
// one-rank NCCL path: the all_reduce equations as ncclAllReduce on the step's
// stream, inside its CUDA graph, against the plain GPU lane (no all_reduce at
// all). Several GPUs are untested. The Cuda* suites skip without a device (and
// without NCCL in the build); scripts/device-check runs them on the H200.
//
// Without a GPU this file still checks Communicator::broadcast (which carries
// the NCCL id from rank 0) on replicas as threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "capstep/checkpoint.h"
#include "backend/cuda/cuda.h"
#include "capstep/trace.h"
#include "capstep/train.h"
#include "backend/cuda/nccl.h"
#include "test_util.h"
#include "thread_comm.h"

using namespace capstep;

namespace {

// One replica: the communicator of a one-rank run (what `mpirun -np 1 capstep
// train --data-parallel` has), without MPI.
class SelfComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(void*, DType, int64_t) override { ++calls; }
  int calls = 0;
};

constexpr bool nccl_built() {
#ifdef CAPSTEP_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

// Skips unless NCCL is built in and a device is there.
#define CAPSTEP_NEED_GPU_AND_NCCL()                                        \
  do {                                                                     \
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";               \
    std::string why;                                                       \
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

train::Options small(train::Lane lane) {
  train::Options o;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_ff = 64;
  o.model.context = 32;
  o.model.batch = 4;
  o.model.seq = 8;
  o.seed = 3;
  o.steps = 5;
  o.lane = lane;
  o.require_backend = true;
  return o;
}

}  // namespace

TEST(Broadcast, RootsBytesReachEveryReplica) {
  const int R = 3;
  test::Shared s(R);
  std::vector<std::array<unsigned char, 130>> got(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      test::ThreadComm c(s, r);
      std::array<unsigned char, 130>& b = got[static_cast<size_t>(r)];
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(r == 1 ? (i * 37 + 255) % 256 : 7);
      c.broadcast(b.data(), static_cast<int64_t>(b.size()), 1);
      EXPECT_EQ(c.calls, 1);
    });
  for (std::thread& t : th) t.join();
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < 130; ++i)
      ASSERT_EQ(got[static_cast<size_t>(r)][i], static_cast<unsigned char>((i * 37 + 255) % 256)) << "rank " << r << " byte " << i;
  SelfComm one;
  unsigned char b[4] = {1, 2, 3, 4};
  EXPECT_THROW(one.broadcast(b, 4, 1), Error);  // root 1 of one replica
}

// all_reduce through NCCL in a captured, replayed step: one rank, so the sum
// is the operand; f32 and f64, in place and not.
TEST(CudaNccl, AllReduceInTheStepGraphIsTheOperandOnOneRank) {
  CAPSTEP_NEED_GPU_AND_NCCL();
#ifdef CAPSTEP_HAVE_NCCL
  SelfComm self;
  cuda::NcclCommunicator nc(self);
  EXPECT_EQ(nc.size(), 1);
  for (DType d : {DType::f32, DType::f64}) {
    Tracer tr;
    Tensor x = tr.input("x", {d, {3, 5}});
    Tensor y = all_reduce(x * 2.0);   // on a computed value
    Tensor z = all_reduce(x) + y;     // on an input
    const Program p = tr.finish({{"y", y}, {"z", z}});
    cuda::Options o;
    o.nccl = &nc;
    o.cuda_graph = true;
    cuda::Executable exe(p, o);
    for (int rep = 0; rep < 3; ++rep) {  // the first run captures, the others replay
      std::vector<double> v(15);
      for (int i = 0; i < 15; ++i) v[static_cast<size_t>(i)] = (i - 7) * 0.25 + rep;
      const std::vector<Array> out = exe.run({Array::from_doubles({d, {3, 5}}, v)});
      for (int i = 0; i < 15; ++i) {
        EXPECT_EQ(out[0].get(i), 2 * v[static_cast<size_t>(i)]) << dtype_name(d) << " rep " << rep;
        EXPECT_EQ(out[1].get(i), 3 * v[static_cast<size_t>(i)]) << dtype_name(d) << " rep " << rep;
      }
    }
  }
#endif
}

// The data-parallel step of one rank through NCCL gives the plain GPU lane's
// losses and parameters after 5 steps, on both GPU lanes. train passes its
// Communicator to the CUDA backend (BackendOptions::communicator), which makes
// the NCCL communicator itself; the first test above makes one directly, as a
// unit test of NcclCommunicator and the Executable.
TEST(CudaNccl, OneRankDataParallelEqualsThePlainGpuLane) {
  CAPSTEP_NEED_GPU_AND_NCCL();
  test::TempDir dir;
  for (train::Lane lane : {train::Lane{BackendKind::cuda, false}, train::Lane{BackendKind::cuda, true}}) {
    const std::string name = train::lane_name(lane);
    train::Options plain = small(lane);
    plain.save_path = dir.file(name + "-plain.safetensors");
    const train::Result a = train::train(plain);
    SelfComm self;
    train::Options dp = small(lane);
    dp.comm = &self;
    dp.save_path = dir.file(name + "-dp.safetensors");
    std::vector<std::string> said;
    dp.on_message = [&](const std::string& m) { said.push_back(m); };
    const train::Result b = train::train(dp);
    ASSERT_EQ(b.lane_used, lane);
    bool nccl_said = false;
    for (const std::string& m : said) nccl_said |= m.find("NCCL") != std::string::npos;
    EXPECT_TRUE(nccl_said) << name << ": the run did not report its NCCL communicator";
    ASSERT_EQ(a.losses.size(), 5u);
    ASSERT_EQ(b.losses.size(), 5u);
    for (size_t k = 0; k < 5; ++k)
      EXPECT_LE(std::fabs(a.losses[k] - b.losses[k]), 1e-6 * std::fabs(a.losses[k]))
          << name << " step " << k + 1 << ": plain " << a.losses[k] << ", NCCL " << b.losses[k];
    const Checkpoint ca = load_checkpoint(plain.save_path), cb = load_checkpoint(dp.save_path);
    ASSERT_EQ(ca.params.size(), cb.params.size());
    double diff2 = 0, norm2 = 0, max_abs = 0;
    bool bits = true;
    for (size_t j = 0; j < ca.params.size(); ++j) {
      const Array &x = ca.params[j].array, &y = cb.params[j].array;
      ASSERT_EQ(x.type(), y.type()) << ca.params[j].name;
      bits &= std::memcmp(x.raw(), y.raw(), x.bytes()) == 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double e = x.get(i) - y.get(i);
        diff2 += e * e;
        norm2 += x.get(i) * x.get(i);
        max_abs = std::max(max_abs, std::fabs(e));
      }
    }
    const double rel = std::sqrt(diff2 / norm2);
    std::printf("%s: one-rank NCCL vs plain after 5 steps: parameters %s, norm-wise relative difference %.3g, "
                "largest element difference %.3g\n",
                name.c_str(), bits ? "bit-identical" : "not bit-identical", rel, max_abs);
    EXPECT_LE(rel, 1e-6) << name;
  }
}
