#include "backend/host/strided.h"

namespace capstep::host {

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

StridedView make_view(const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                      const std::string& what) {
  std::vector<int64_t> sz, st;
  for (size_t a = 0; a < size.size(); ++a) {
    if (size[a] == 1) continue;
    if (size[a] == 0) {  // empty: one axis of size 0 says it all
      sz.assign(1, 0);
      st.assign(1, 1);
      break;
    }
    if (!sz.empty() && st.back() == stride[a] * size[a]) {
      sz.back() *= size[a];
      st.back() = stride[a];
    } else {
      sz.push_back(size[a]);
      st.push_back(stride[a]);
    }
  }
  if (sz.size() > static_cast<size_t>(kMaxRank))
    throw Error(what + ": the host interpreter supports at most " + std::to_string(kMaxRank) +
                " non-mergeable axes, this needs " + std::to_string(sz.size()));
  StridedView v;
  v.rank = static_cast<int>(sz.size());
  for (int i = 0; i < v.rank; ++i) {
    v.size[i] = sz[static_cast<size_t>(i)];
    v.stride[i] = st[static_cast<size_t>(i)];
  }
  return v;
}

void strided_range_bytes(const StridedView& v, size_t elem_bytes, const void* src, int64_t begin, int64_t count,
                         void* dst) {
  switch (elem_bytes) {
    case 1: strided_range(v, static_cast<const uint8_t*>(src), begin, count, static_cast<uint8_t*>(dst)); return;
    case 2: strided_range(v, static_cast<const uint16_t*>(src), begin, count, static_cast<uint16_t*>(dst)); return;
    case 4: strided_range(v, static_cast<const uint32_t*>(src), begin, count, static_cast<uint32_t*>(dst)); return;
    case 8: strided_range(v, static_cast<const uint64_t*>(src), begin, count, static_cast<uint64_t*>(dst)); return;
    default: throw Error("strided copy: unsupported element width " + std::to_string(elem_bytes));
  }
}

void strided_copy_bytes(const StridedView& v, size_t elem_bytes, const void* src, void* dst) {
  strided_range_bytes(v, elem_bytes, src, 0, v.numel(), dst);
}

}  // namespace capstep::host
