#include "backend/plan/walk.h"

#include <algorithm>

namespace capstep::plan {
namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

Walk make_walk(const Shape& dims, const std::vector<int64_t>& stride, const std::string& what) {
  if (dims.size() > static_cast<size_t>(kMaxRank))
    throw Error(what + ": rank " + std::to_string(dims.size()) + " exceeds the CUDA backend's limit of " +
                std::to_string(kMaxRank));
  Walk w;
  w.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    w.dims[d] = dims[d];
    w.stride[d] = stride[d];
  }
  return w;
}

}  // namespace

Walk broadcast_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& dims, const std::string& what) {
  const std::vector<int64_t> is = strides_of(in);
  std::vector<int64_t> stride(out.size(), 0);
  for (size_t k = 0; k < dims.size(); ++k)
    if (in[k] != 1) stride[static_cast<size_t>(dims[k])] = is[k];
  return make_walk(out, stride, what);
}

Walk transpose_walk(const Shape& in, const std::vector<int64_t>& perm, const std::string& what) {
  const std::vector<int64_t> is = strides_of(in);
  Shape dims;
  std::vector<int64_t> st;
  for (int64_t p : perm) {
    dims.push_back(in[static_cast<size_t>(p)]);
    st.push_back(is[static_cast<size_t>(p)]);
  }
  return make_walk(dims, st, what);
}

ReduceWalks reduce_walks(const Shape& in, const std::vector<int64_t>& axes, const std::string& what) {
  const std::vector<int64_t> is = strides_of(in);
  Shape kd, rd;
  std::vector<int64_t> ks, rs;
  for (size_t a = 0; a < in.size(); ++a) {
    const bool red = std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) != axes.end();
    (red ? rd : kd).push_back(in[a]);
    (red ? rs : ks).push_back(is[a]);
  }
  ReduceWalks r;
  r.kept = make_walk(kd, ks, what);
  r.reduced = make_walk(rd, rs, what);
  for (int64_t x : kd) r.n_out *= x;
  for (int64_t x : rd) r.n_red *= x;
  return r;
}

OffsetWalk slice_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& strides, const std::string& what) {
  const std::vector<int64_t> is = strides_of(in);
  std::vector<int64_t> st(in.size());
  OffsetWalk r;
  for (size_t d = 0; d < in.size(); ++d) {
    st[d] = out[d] > 1 ? is[d] * strides[d] : 0;  // (a huge stride on an axis of one element is never taken)
    r.offset += starts[d] * is[d];
  }
  r.walk = make_walk(out, st, what);
  return r;
}

OffsetWalk embed_walk(const Shape& part, const Shape& whole, const std::vector<int64_t>& at, const std::string& what) {
  const std::vector<int64_t> ws = strides_of(whole);
  OffsetWalk r;
  for (size_t d = 0; d < whole.size(); ++d) r.offset += at[d] * ws[d];
  r.walk = make_walk(part, ws, what);
  return r;
}

}  // namespace capstep::plan
