#include "backend/plan/walk.h"

#include <algorithm>

namespace capstep::plan {

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

Walk make_walk(const std::vector<int64_t>& size, const std::vector<int64_t>& stride, const std::string& what) {
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
    throw Error(what + ": a strided walk holds at most " + std::to_string(kMaxRank) +
                " axes that do not merge, this needs " + std::to_string(sz.size()));
  Walk w;
  w.rank = static_cast<int>(sz.size());
  for (int i = 0; i < w.rank; ++i) {
    w.size[i] = sz[static_cast<size_t>(i)];
    w.stride[i] = st[static_cast<size_t>(i)];
  }
  return w;
}

std::string offset_code(const Walk& w, const std::string& idx) {
  std::string e;
  int64_t inner = 1;  // the product of the sizes after axis d
  for (int d = w.rank - 1; d >= 0; --d) {
    if (w.stride[d] != 0) {
      std::string c = inner == 1 ? idx : "(" + idx + " / " + std::to_string(inner) + "LL)";
      if (d > 0) c = "(" + c + " % " + std::to_string(w.size[d]) + "LL)";
      if (w.stride[d] != 1) c += " * " + std::to_string(w.stride[d]) + "LL";
      e += (e.empty() ? "" : " + ") + c;
    }
    inner *= w.size[d];
  }
  return e.empty() ? "0" : e;
}

Walk broadcast_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& dims, const std::string& what) {
  const std::vector<int64_t> is = row_major_strides(in);
  std::vector<int64_t> stride(out.size(), 0);
  for (size_t k = 0; k < dims.size(); ++k)
    if (in[k] != 1) stride[static_cast<size_t>(dims[k])] = is[k];
  return make_walk(out, stride, what);
}

Walk transpose_walk(const Shape& in, const std::vector<int64_t>& perm, const std::string& what) {
  const std::vector<int64_t> is = row_major_strides(in);
  Shape dims;
  std::vector<int64_t> st;
  for (int64_t p : perm) {
    dims.push_back(in[static_cast<size_t>(p)]);
    st.push_back(is[static_cast<size_t>(p)]);
  }
  return make_walk(dims, st, what);
}

namespace {
bool is_reduced(const std::vector<int64_t>& axes, size_t a) {
  return std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) != axes.end();
}
}  // namespace

ReduceWalks reduce_walks(const Shape& in, const std::vector<int64_t>& axes, const std::string& what) {
  const std::vector<int64_t> is = row_major_strides(in);
  Shape kd, rd;
  std::vector<int64_t> ks, rs;
  for (size_t a = 0; a < in.size(); ++a) {
    const bool red = is_reduced(axes, a);
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

Walk reduce_output_walk(const Shape& in, const std::vector<int64_t>& axes, const std::string& what) {
  Shape kept;
  std::vector<int64_t> to;  // kept axis k is the input's axis to[k]
  for (size_t a = 0; a < in.size(); ++a)
    if (!is_reduced(axes, a)) {
      kept.push_back(in[a]);
      to.push_back(static_cast<int64_t>(a));
    }
  return broadcast_walk(kept, in, to, what);
}

OffsetWalk slice_walk(const Shape& in, const Shape& out, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& strides, const std::string& what) {
  const std::vector<int64_t> is = row_major_strides(in);
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
  const std::vector<int64_t> ws = row_major_strides(whole);
  OffsetWalk r;
  for (size_t d = 0; d < whole.size(); ++d) r.offset += at[d] * ws[d];
  r.walk = make_walk(part, ws, what);
  return r;
}

}  // namespace capstep::plan
