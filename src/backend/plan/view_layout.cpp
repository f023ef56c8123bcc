#include "backend/plan/view_layout.h"

namespace capstep::plan {

Layout row_major_layout(const Shape& s) {
  const std::vector<int64_t> st = row_major_strides(s);
  Layout l(s.size());
  for (size_t a = 0; a < s.size(); ++a) l[a] = {{s[a], st[a]}};
  return l;
}

Layout transpose_layout(const Layout& l, const std::vector<int64_t>& perm) {
  Layout t;
  for (int64_t a : perm) t.push_back(l[static_cast<size_t>(a)]);
  return t;
}

std::optional<Layout> reshape_layout(const Layout& l, const Shape& to) {
  // Outer to inner, size-1 sub-axes dropped, and neighbours that form one
  // contiguous run merged: the new axes may cut it anywhere that divides it
  // (a row-major [6, 4] read as [4, 6]), not only at the old axes' bounds.
  std::vector<SubAxis> flat;
  for (const AxisLayout& a : l)
    for (const SubAxis& s : a) {
      if (s.size == 1) continue;
      if (!flat.empty() && flat.back().stride == s.stride * s.size) {
        flat.back() = {flat.back().size * s.size, s.stride};
      } else {
        flat.push_back(s);
      }
    }
  Layout r(to.size());
  size_t next = 0;
  for (size_t a = 0; a < to.size(); ++a) {
    int64_t left = to[a];
    while (left > 1) {
      if (next == flat.size()) return std::nullopt;
      SubAxis& s = flat[next];
      if (s.size <= left) {
        if (left % s.size != 0) return std::nullopt;
        r[a].push_back(s);
        left /= s.size;
        ++next;
      } else {  // the axis ends inside s: its outer part here, the inner part stays
        if (s.size % left != 0) return std::nullopt;
        r[a].push_back({left, s.stride * (s.size / left)});
        s.size /= left;
        left = 1;
      }
    }
  }
  for (; next < flat.size(); ++next)
    if (flat[next].size != 1) return std::nullopt;
  return r;
}

Walk combined(const Layout& l, const std::vector<int64_t>& axes, const std::string& what) {
  std::vector<int64_t> size, stride;
  for (int64_t a : axes)
    for (const SubAxis& s : l[static_cast<size_t>(a)]) {
      size.push_back(s.size);
      stride.push_back(s.stride);
    }
  return make_walk(size, stride, what);
}

}  // namespace capstep::plan
