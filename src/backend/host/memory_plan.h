// Packs buffers with known lifetimes into one arena: two buffers may share bytes
// when their lifetimes do not overlap. Greedy by size (largest first, each at the
// lowest 64-byte aligned offset free for its whole lifetime), the classic offline
// heuristic for a static schedule.
#pragma once

#include <cstddef>
#include <vector>

namespace capstep::host {

constexpr size_t kArenaAlign = 64;

struct BufferLife {
  size_t bytes = 0;
  int first = 0;  // index of the step that writes it
  int last = 0;   // index of the last step that reads it (inclusive)
};

struct ArenaPlan {
  std::vector<size_t> offset;  // one per buffer, multiples of kArenaAlign
  size_t total = 0;            // arena size in bytes (a multiple of kArenaAlign)
};

ArenaPlan pack_arena(const std::vector<BufferLife>& buffers);

}  // namespace capstep::host
