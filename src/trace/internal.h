// Helpers shared by the capture files (not part of the public API).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "capstep/trace.h"

namespace capstep::trace_detail {

// The tracer of all operands; Error if none is valid or they come from
// different tracers (values of one Program cannot name another's).
Tracer& tracer_of(const char* what, const std::vector<Tensor>& operands);

// Records an equation whose result type the attributes alone do not determine
// (constant, iota, convert, broadcast_in_dim, reshape).
Tensor emit_typed(Tracer& tr, Op op, const std::vector<Tensor>& inputs, Attrs attrs, const Type& out);

// Axis in [0, rank) from a possibly negative axis; Error naming `what` otherwise.
int64_t normalize_axis(const char* what, int64_t axis, int rank);
// Sorted, unique, non-negative axes.
std::vector<int64_t> normalize_axes(const char* what, std::vector<int64_t> axes, int rank);

// The axes of a rank-`rank` array that are not in `removed` (sorted input).
std::vector<int64_t> kept_axes(int rank, const std::vector<int64_t>& removed);

// Broadcasts a reduction result (axes `reduced` removed) back to `shape`
// directly with broadcast_in_dim, without a keepdims reshape.
Tensor unreduce(const Tensor& reduced, const Shape& shape, const std::vector<int64_t>& reduced_axes);

// Program -> Program by tracing p again: its inputs (same names and types),
// then each equation through `expand`, which records on tr the equations it
// stands for and returns its value, or returns an empty Tensor to have the
// equation copied as it is; then p's outputs, name and aliases, verified.
// `val` holds the new program's Tensor of each of p's values made so far.
// The composites' expansions (expand_attention, expand_adamw) are this.
using Expand = std::function<Tensor(Tracer& tr, const Eqn& e, const std::vector<Tensor>& val)>;
Program retrace(const Program& p, const Expand& expand);

// Marks the equation that made t (an equation of t's tracer) no_grad: value_and_grad
// treats t as a constant (Attrs::no_grad).
void mark_no_grad(const Tensor& t);

}  // namespace capstep::trace_detail
