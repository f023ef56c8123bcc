// Byte-level BPE encoding speed of capstep's data::Tokenizer (bytelevel-bpe),
// for bench/tokenizer_encode.py, which runs it beside the `tokenizers`
// library on the same text and checks that both give the same ids.
//
//   bench_tokenizer_encode TOKENIZER_JSON TEXT_FILE [REPEATS [IDS_OUT]]
//
// Encodes the file REPEATS times (default 3) on one thread and prints the
// best time as MB/s (10^6 bytes of text a second), by the wall clock and by
// the thread's CPU time (which other processes on a loaded machine disturb
// less), and the number of ids; IDS_OUT, when given, gets the ids as
// little-endian int32.
#include <chrono>
#include <ctime>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "capstep/data.h"

namespace {

std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read '%s'\n", path);
    std::exit(2);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON TEXT_FILE [REPEATS [IDS_OUT]]\n", argv[0]);
    return 2;
  }
  try {
    const capstep::data::Tokenizer t = capstep::data::Tokenizer::from_bytelevel(slurp(argv[1]));
    const std::string text = slurp(argv[2]);
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    auto cpu = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    double best = 1e30, best_cpu = 1e30;
    capstep::data::TokenIds ids;
    for (int r = 0; r < repeats; ++r) {
      std::string copy = text;   // encode takes the text by value
      const auto start = std::chrono::steady_clock::now();
      const double c0 = cpu();
      ids = t.encode(std::move(copy));
      best_cpu = std::min(best_cpu, cpu() - c0);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("capstep %s: %.2f MB/s (wall), %.2f MB/s (CPU time), %zu ids\n", t.name().c_str(), mb / best,
                mb / best_cpu, ids.size());
    if (argc > 4) {
      std::ofstream out(argv[4], std::ios::binary);
      for (int32_t id : ids.to_vector()) out.write(reinterpret_cast<const char*>(&id), 4);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
