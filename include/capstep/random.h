// The one pseudo-random generator of capstep (splitmix64): the corpus, the
// batch windows, SFT packing, parameter and LoRA initialisation and sampling
// all draw from it, so a seed gives the same numbers on every platform.
#pragma once

#include <cstdint>

namespace capstep {

// The next number of the sequence `state` stands at; advances `state`.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A double uniform in (0, 1), from the top 53 bits of the next number.
inline double uniform01(uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace capstep
