#include "backend/host/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace capstep::host {
namespace {
size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }
}  // namespace

ArenaPlan pack_arena(const std::vector<BufferLife>& buffers) {
  const size_t n = buffers.size();
  ArenaPlan plan;
  plan.offset.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });

  std::vector<size_t> placed;                        // buffers placed so far
  std::vector<std::pair<size_t, size_t>> conflicts;  // [offset, end) of overlapping lifetimes
  for (size_t i : order) {
    const BufferLife& b = buffers[i];
    const size_t need = align_up(b.bytes);
    if (need == 0) continue;  // empty buffers sit at offset 0 and touch nothing
    conflicts.clear();
    for (size_t j : placed) {
      const BufferLife& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) conflicts.emplace_back(plan.offset[j], plan.offset[j] + align_up(o.bytes));
    }
    std::sort(conflicts.begin(), conflicts.end());
    size_t at = 0;
    for (const auto& [lo, hi] : conflicts) {
      if (at + need <= lo) break;  // fits in the gap before this one
      at = std::max(at, hi);
    }
    plan.offset[i] = at;
    plan.total = std::max(plan.total, at + need);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace capstep::host
