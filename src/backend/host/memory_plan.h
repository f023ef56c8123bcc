// The host's arena: buffers with known lifetimes packed by the one packer of
// every backend (plan::pack, src/backend/plan/pack.cpp), at 64-byte alignment.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/plan/device_plan.h"

namespace capstep::host {

constexpr size_t kArenaAlign = 64;

using BufferLife = plan::Interval;  // bytes; first: the step that writes it; last: the last that reads it

struct ArenaPlan {
  std::vector<size_t> offset;  // one per buffer, multiples of kArenaAlign
  size_t total = 0;            // arena size in bytes (a multiple of kArenaAlign)
};

inline ArenaPlan pack_arena(const std::vector<BufferLife>& buffers) {
  ArenaPlan p;
  p.offset = plan::pack(buffers, kArenaAlign, &p.total);
  return p;
}

}  // namespace capstep::host
