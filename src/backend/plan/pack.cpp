// The arena packer of every backend (the device plan's arena, the host
// interpreter's arena and its fused groups' scratch tiles): offline placement
// of buffers with known lifetimes. Largest first, each at the lowest
// `align`-aligned offset that is free during its whole lifetime: the classic
// greedy for a static schedule, near optimal on training steps (a few big
// activations, many small ones).
#include <algorithm>
#include <numeric>
#include <utility>

#include "backend/plan/device_plan.h"

namespace capstep::plan {
std::vector<size_t> pack(const std::vector<Interval>& buffers, size_t align, size_t* total) {
  auto align_up = [align](size_t n) { return (n + align - 1) / align * align; };
  const size_t n = buffers.size();
  std::vector<size_t> offset(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  size_t end = 0;
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [lo, hi) of placed buffers live at the same time
  for (size_t i : order) {
    const Interval& b = buffers[i];
    const size_t need = align_up(b.bytes);
    if (need == 0) continue;  // an empty buffer touches no byte
    busy.clear();
    for (size_t j : placed) {
      const Interval& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(offset[j], offset[j] + align_up(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + need <= lo) break;  // fits in the gap before this one
      at = std::max(at, hi);
    }
    offset[i] = at;
    end = std::max(end, at + need);
    placed.push_back(i);
  }
  if (total) *total = end;
  return offset;
}

}  // namespace capstep::plan
