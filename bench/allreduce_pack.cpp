// Whether packing the data-parallel gradients into one all-reduce message pays
// on the host (issue 14; optim::DataParallelOptions::pack). Under
//   mpirun -np 2 bench_allreduce_pack [--layers L --d-model D --heads H --d-ff F --context C] [--iters N]
// each iteration times, on every rank, the step's communication both ways
// (alternating, so both see the same load):
//   unpacked: one MpiCommunicator::all_reduce_sum per parameter and one for
//             the loss (what the program with pack = false sends);
//   packed:   the values in order, in buckets of at most --bucket-mib MiB (0:
//             one bucket; a larger value alone), each bucket copied into one
//             buffer, one all_reduce_sum, copied back (what the host
//             interpreter does for each pack of the program).
// Rank 0 prints the medians in microseconds. The sizes are the model's
// parameters (nn::lm_parameters), f32.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capstep/nn.h"
#include "dist/mpi_communicator.h"

using namespace capstep;

int main(int argc, char** argv) {
  nn::LmConfig c;
  int iters = 200;
  double bucket_mb = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (k == "--layers") c.n_layers = v;
    else if (k == "--d-model") c.d_model = v;
    else if (k == "--heads") c.n_heads = v;
    else if (k == "--d-ff") c.d_ff = v;
    else if (k == "--context") c.context = v;
    else if (k == "--iters") iters = static_cast<int>(v);
    else if (k == "--bucket-mib") bucket_mb = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  dist::MpiCommunicator comm(60);
  std::vector<int64_t> sizes;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) sizes.push_back(p.type.numel());
  sizes.push_back(1);  // the loss
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::vector<std::vector<float>> vals;
  for (int64_t n : sizes) vals.emplace_back(static_cast<size_t>(n), 1.0f);
  std::vector<float> pack(static_cast<size_t>(total));
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  std::vector<double> t_unpacked, t_packed;
  for (int it = 0; it < iters + 5; ++it) {
    for (int way = 0; way < 2; ++way) {
      const bool packed = (way + it) % 2 == 0;
      const Clock::time_point a = Clock::now();
      if (packed) {
        for (size_t first = 0; first < vals.size();) {
          size_t last = first + 1;
          int64_t n = static_cast<int64_t>(vals[first].size());
          while (last < vals.size() && bucket_mb > 0 &&
                 4.0 * static_cast<double>(n + static_cast<int64_t>(vals[last].size())) <= bucket_mb * 1048576.0)
            n += static_cast<int64_t>(vals[last++].size());
          if (bucket_mb <= 0) {
            last = vals.size();
            n = total;
          }
          size_t at = 0;
          for (size_t j = first; j < last; ++j) {
            std::memcpy(pack.data() + at, vals[j].data(), vals[j].size() * sizeof(float));
            at += vals[j].size();
          }
          comm.all_reduce_sum(pack.data(), DType::f32, n);
          at = 0;
          for (size_t j = first; j < last; ++j) {
            std::memcpy(vals[j].data(), pack.data() + at, vals[j].size() * sizeof(float));
            at += vals[j].size();
          }
          first = last;
        }
      } else {
        for (auto& v : vals) comm.all_reduce_sum(v.data(), DType::f32, static_cast<int64_t>(v.size()));
      }
      const Clock::time_point b = Clock::now();
      // keep the values small (they double every reduction on 2 ranks)
      for (auto& v : vals) std::fill(v.begin(), v.end(), 1.0f);
      if (it >= 5) (packed ? t_packed : t_unpacked).push_back(us(a, b));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (comm.rank() == 0)
    std::printf("ranks %d, %zu values (%lld floats, %.2f MB) per step, %d iterations: unpacked (%zu messages) median %.1f us, "
                "packed (buckets of %g MiB; 0: one) median %.1f us\n",
                comm.size(), sizes.size(), static_cast<long long>(total), 4.0 * static_cast<double>(total) / 1e6, iters,
                sizes.size(), median(t_unpacked), bucket_mb, median(t_packed));
  return 0;
}
