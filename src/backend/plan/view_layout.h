// Strided views: where each element of a value that is a reshape or transpose
// of another value's buffer lives, so that a kernel reads the buffer in place
// instead of a copy being made (a transpose feeding a GEMM, the heads of
// attention split and merged). Pure C++: the generated GEMM kernels are built
// from it and the tests check it against the interpreter on any machine.
//
// A layout gives, per axis of the value, its sub-axes (size, stride), outer to
// inner: coordinate c of the axis is at sum_j ((c / inner_j) % size_j) *
// stride_j elements from the buffer's start, inner_j being the product of the
// sizes after j. A row-major buffer has one sub-axis per axis; a transpose
// permutes axes; a reshape regroups the flattened sub-axes (neighbours that
// form one contiguous run merged first), splitting one where a new axis ends
// inside it (when its size divides).
//
// A layout is the grouping of strided sub-axes by value axis, not a second
// strided type: it has to hold any value's sub-axes before collapsing (one per
// axis, size-1 ones too, however many: a rank above kMaxRank included), and
// transposes and reshapes act on its axis boundaries. Where the kernels read
// it, the axes they index as one (a product's batch, free or contracted axes)
// become one collapsed plan::Walk (combined), the type every strided loop of
// both backends runs over.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/plan/walk.h"
#include "capstep/ir.h"

namespace capstep::plan {

struct SubAxis {
  int64_t size = 1, stride = 0;
  bool operator==(const SubAxis& o) const { return size == o.size && stride == o.stride; }
};
using AxisLayout = std::vector<SubAxis>;  // outer to inner
using Layout = std::vector<AxisLayout>;   // per axis of the value

Layout row_major_layout(const Shape& s);
Layout transpose_layout(const Layout& l, const std::vector<int64_t>& perm);
// nullopt when the new shape cuts a sub-axis at a size that does not divide it
std::optional<Layout> reshape_layout(const Layout& l, const Shape& to);
// The sub-axes of several axes taken as one index (outer axis first) as a
// walk: make_walk's collapse merges neighbours that form one contiguous run
// and drops size-1 ones. Throws Error past kMaxRank (`what` names the
// equation).
Walk combined(const Layout& l, const std::vector<int64_t>& axes, const std::string& what);

}  // namespace capstep::plan
