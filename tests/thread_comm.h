// Replicas as threads of one process, for tests of Op::all_reduce without MPI.
#pragma once

#include <barrier>
#include <vector>

#include "capstep/collective.h"

namespace capstep::test {

// Replicas as threads of one process: each all_reduce_sum publishes its
// buffer, waits for all, sums the replicas' values in rank order into its own
// scratch, waits again (so nobody overwrites a buffer still being read), then
// copies the sum in. Every replica computes the same sum in the same order.
struct Shared {
  explicit Shared(int n) : size(n), bufs(static_cast<size_t>(n)), sync(n) {}
  int size;
  std::vector<void*> bufs;
  std::barrier<> sync;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  void all_reduce_sum(void* data, DType d, int64_t n) override {
    ++calls;
    s_.bufs[static_cast<size_t>(rank_)] = data;
    s_.sync.arrive_and_wait();
    std::vector<double> sum(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < s_.size; ++r)
      for (int64_t i = 0; i < n; ++i)
        sum[static_cast<size_t>(i)] += d == DType::f32 ? static_cast<double>(static_cast<const float*>(s_.bufs[static_cast<size_t>(r)])[i])
                                                       : static_cast<const double*>(s_.bufs[static_cast<size_t>(r)])[i];
    s_.sync.arrive_and_wait();
    for (int64_t i = 0; i < n; ++i) {
      if (d == DType::f32) static_cast<float*>(data)[i] = static_cast<float>(sum[static_cast<size_t>(i)]);
      else static_cast<double*>(data)[i] = sum[static_cast<size_t>(i)];
    }
  }
  int calls = 0;

 private:
  Shared& s_;
  int rank_;
};

}  // namespace capstep::test
