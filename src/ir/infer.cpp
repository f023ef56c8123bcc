// Shape rules: one per primitive, the output type for given operand types.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "capstep/ir.h"
#include "ir/bf16.h"

namespace capstep {
namespace {

std::string types_str(const std::vector<Type>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s;
}

[[noreturn]] void fail(Op op, const std::vector<Type>& ts, const std::string& why) {
  throw Error(std::string(op_name(op)) + "(" + types_str(ts) + "): " + why);
}

void require_float(Op op, const std::vector<Type>& ts, const Type& t) {
  if (!is_float(t.dtype)) fail(op, ts, "needs a float operand (f32, f64 or bf16), got " + t.str());
}

// Distinct axes in [0, rank), optionally strictly increasing.
void check_axes(Op op, const std::vector<Type>& ts, const std::vector<int64_t>& axes, int64_t rank,
                const char* what, bool sorted) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i];
    if (a < 0 || a >= rank)
      fail(op, ts, std::string(what) + " " + shape_str(axes) + ": axis " + std::to_string(a) +
                       " out of range for rank " + std::to_string(rank));
    if (seen[static_cast<size_t>(a)])
      fail(op, ts, std::string(what) + " " + shape_str(axes) + ": axis " + std::to_string(a) + " repeated");
    if (sorted && i > 0 && axes[i - 1] > a)
      fail(op, ts, std::string(what) + " " + shape_str(axes) + " must be increasing");
    seen[static_cast<size_t>(a)] = true;
  }
}

}  // namespace

bool literal_fits(double v, DType d) {
  switch (d) {
    case DType::f32: return !std::isfinite(v) || std::fabs(v) <= std::numeric_limits<float>::max();
    case DType::f64: return true;
    case DType::i32: return v > -2147483649.0 && v < 2147483648.0;  // false for NaN
    case DType::i1: return true;                                     // stored as v != 0
    case DType::bf16: return !std::isfinite(v) || std::isfinite(bf16::round_double(v));  // not rounded to inf
  }
  return false;
}

std::vector<int64_t> dot_free_axes(int rank, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  std::vector<int64_t> f;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end())
      f.push_back(d);
  return f;
}

Type infer_type(Op op, const std::vector<Type>& ts, const Attrs& at) {
  if (op_arity(op) >= 0 && op_arity(op) != static_cast<int>(ts.size()) && op != Op::constant && op != Op::iota)
    fail(op, ts, "takes " + std::to_string(op_arity(op)) + " operands, got " + std::to_string(ts.size()));
  if (op_arity(op) < 0 && ts.empty()) fail(op, ts, "takes at least one operand, got none");
  for (const Type& t : ts)
    for (int64_t d : t.shape)
      if (d < 0) fail(op, ts, "negative dimension in " + t.str());

  switch (op) {
    case Op::constant:
    case Op::iota:
      // Their type is given, not inferred; check_type checks it.
      fail(op, ts, "has no operands to infer a type from; give its type");

    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP) {
      if (ts[0] != ts[1]) fail(op, ts, "operand types differ");
      if (ts[0].dtype == DType::i1) fail(op, ts, "is not defined on i1");
      return ts[0];
    }
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
      if (op != Op::negate) require_float(op, ts, ts[0]);  // negate: also i32
      else if (ts[0].dtype == DType::i1) fail(op, ts, "is not defined on i1");
      return ts[0];
    case Op::compare:
      if (ts[0] != ts[1]) fail(op, ts, "operand types differ");
      return {DType::i1, ts[0].shape};
    case Op::select:
      if (ts[0].dtype != DType::i1) fail(op, ts, "predicate must be i1, got " + ts[0].str());
      if (ts[1] != ts[2]) fail(op, ts, "branch types differ");
      if (ts[0].shape != ts[1].shape) fail(op, ts, "predicate shape differs from the branches");
      return ts[1];
    case Op::convert:
      fail(op, ts, "has its result dtype as an attribute; give its type");

    case Op::broadcast_in_dim:
      fail(op, ts, "has its result shape as an attribute; give its type");
    case Op::reshape:
      fail(op, ts, "has its result shape as an attribute; give its type");

    case Op::transpose: {
      const Type& a = ts[0];
      if (static_cast<int64_t>(at.dims.size()) != a.rank())
        fail(op, ts, "permutation " + shape_str(at.dims) + " has the wrong length for rank " +
                         std::to_string(a.rank()));
      check_axes(op, ts, at.dims, a.rank(), "permutation", false);
      Type out{a.dtype, {}};
      for (int64_t p : at.dims) out.shape.push_back(a.shape[static_cast<size_t>(p)]);
      return out;
    }

    case Op::dot_general: {
      const Type& l = ts[0];
      const Type& r = ts[1];
      if (l.dtype != r.dtype) fail(op, ts, "operand dtypes differ");
      if (!is_float(l.dtype)) fail(op, ts, "needs float operands");
      if (at.lhs_batch.size() != at.rhs_batch.size())
        fail(op, ts, "lhs_batch " + shape_str(at.lhs_batch) + " and rhs_batch " + shape_str(at.rhs_batch) +
                         " differ in length");
      if (at.lhs_contract.size() != at.rhs_contract.size())
        fail(op, ts, "lhs_contract " + shape_str(at.lhs_contract) + " and rhs_contract " +
                         shape_str(at.rhs_contract) + " differ in length");
      std::vector<int64_t> lall = at.lhs_batch, rall = at.rhs_batch;
      lall.insert(lall.end(), at.lhs_contract.begin(), at.lhs_contract.end());
      rall.insert(rall.end(), at.rhs_contract.begin(), at.rhs_contract.end());
      check_axes(op, ts, lall, l.rank(), "lhs batch+contracting dims", false);
      check_axes(op, ts, rall, r.rank(), "rhs batch+contracting dims", false);
      // bf16 operands accumulate into an f32 result (the mixed-precision GEMM).
      Type out{l.dtype == DType::bf16 ? DType::f32 : l.dtype, {}};
      for (size_t i = 0; i < at.lhs_batch.size(); ++i) {
        int64_t a = l.shape[static_cast<size_t>(at.lhs_batch[i])], b = r.shape[static_cast<size_t>(at.rhs_batch[i])];
        if (a != b)
          fail(op, ts, "batch dimension " + std::to_string(i) + " sizes differ: " + std::to_string(a) +
                           " vs " + std::to_string(b));
        out.shape.push_back(a);
      }
      for (size_t i = 0; i < at.lhs_contract.size(); ++i) {
        int64_t a = l.shape[static_cast<size_t>(at.lhs_contract[i])],
                b = r.shape[static_cast<size_t>(at.rhs_contract[i])];
        if (a != b)
          fail(op, ts, "contracting dimension " + std::to_string(i) + " sizes differ: " + std::to_string(a) +
                           " vs " + std::to_string(b));
      }
      for (int64_t d : dot_free_axes(l.rank(), at.lhs_batch, at.lhs_contract)) out.shape.push_back(l.shape[static_cast<size_t>(d)]);
      for (int64_t d : dot_free_axes(r.rank(), at.rhs_batch, at.rhs_contract)) out.shape.push_back(r.shape[static_cast<size_t>(d)]);
      return out;
    }

    case Op::reduce_sum: case Op::reduce_max: {
      const Type& a = ts[0];
      if (a.dtype == DType::i1) fail(op, ts, "is not defined on i1");
      check_axes(op, ts, at.dims, a.rank(), "axes", true);
      Type out{a.dtype, {}};
      for (int64_t d = 0; d < a.rank(); ++d)
        if (std::find(at.dims.begin(), at.dims.end(), d) == at.dims.end())
          out.shape.push_back(a.shape[static_cast<size_t>(d)]);
      return out;
    }

    case Op::gather_rows: {
      const Type& table = ts[0];
      const Type& idx = ts[1];
      if (table.rank() < 1) fail(op, ts, "table must have rank >= 1");
      if (idx.dtype != DType::i32) fail(op, ts, "indices must be i32, got " + idx.str());
      Type out{table.dtype, idx.shape};
      out.shape.insert(out.shape.end(), table.shape.begin() + 1, table.shape.end());
      return out;
    }
    case Op::scatter_add_rows: {
      const Type& operand = ts[0];
      const Type& idx = ts[1];
      const Type& upd = ts[2];
      if (operand.rank() < 1) fail(op, ts, "operand must have rank >= 1");
      if (idx.dtype != DType::i32) fail(op, ts, "indices must be i32, got " + idx.str());
      if (operand.dtype == DType::i1) fail(op, ts, "is not defined on i1");
      Type want{operand.dtype, idx.shape};
      want.shape.insert(want.shape.end(), operand.shape.begin() + 1, operand.shape.end());
      if (upd != want) fail(op, ts, "updates must be " + want.str());
      return operand;
    }
    case Op::adamw: {
      const Type& pt = ts[0];
      if (pt.dtype != DType::f32) fail(op, ts, "updates f32 parameters only, got " + pt.str());
      for (size_t i = 1; i < 4; ++i)
        if (ts[i] != pt)
          fail(op, ts, "p, g, m and v must have one type; operand " + std::to_string(i) + " is " + ts[i].str() +
                           ", p is " + pt.str());
      for (size_t i = 4; i < 8; ++i)
        if (ts[i] != Type{DType::f32, {}})
          fail(op, ts, "lr, bc1, bc2 and decay must be f32[]; operand " + std::to_string(i) + " is " + ts[i].str());
      if (at.axis < 0 || at.axis > 2)
        fail(op, ts, "axis " + std::to_string(at.axis) + " must be 0 (p'), 1 (m') or 2 (v')");
      if (at.literal.size() != 3)
        fail(op, ts, "literal must be {beta1, beta2, eps}, got " + std::to_string(at.literal.size()) + " values");
      return pt;
    }
    case Op::attention: case Op::attention_grad: {
      const Type& q = ts[0];
      if (q.rank() != 4) fail(op, ts, "q must be [B,H,T,Dh], got " + q.str());
      require_float(op, ts, q);
      if (q.shape[3] < 1) fail(op, ts, "Dh (the last dimension of q) must be at least 1, got " + q.str());
      for (size_t i = 1; i < ts.size(); ++i)
        if (ts[i] != q) fail(op, ts, "every operand must have q's type " + q.str() + ", operand " + std::to_string(i) + " is " + ts[i].str());
      if (op == Op::attention_grad && (at.axis < 0 || at.axis > 2))
        fail(op, ts, "axis " + std::to_string(at.axis) + " must be 0 (dq), 1 (dk) or 2 (dv)");
      return q;
    }
    case Op::all_reduce:
      if (!is_float(ts[0].dtype)) fail(op, ts, "sums floats only, got " + ts[0].str());
      return ts[0];

    case Op::slice: {
      const Type& a = ts[0];
      const size_t r = static_cast<size_t>(a.rank());
      if (at.starts.size() != r || at.limits.size() != r || at.strides.size() != r)
        fail(op, ts, "starts " + shape_str(at.starts) + ", limits " + shape_str(at.limits) + " and strides " +
                         shape_str(at.strides) + " need one entry per axis of the operand (rank " + std::to_string(r) + ")");
      Type out{a.dtype, {}};
      for (size_t d = 0; d < r; ++d) {
        const int64_t b = at.starts[d], e = at.limits[d], st = at.strides[d];
        if (b < 0 || b > e || e > a.shape[d])
          fail(op, ts, "axis " + std::to_string(d) + ": start " + std::to_string(b) + " and limit " + std::to_string(e) +
                           " must satisfy 0 <= start <= limit <= " + std::to_string(a.shape[d]));
        if (st < 1) fail(op, ts, "axis " + std::to_string(d) + ": stride " + std::to_string(st) + " must be at least 1");
        out.shape.push_back(e == b ? 0 : 1 + (e - b - 1) / st);  // ceil, without overflow for any stride
      }
      return out;
    }
    case Op::pad: {
      const Type& a = ts[0];
      const size_t r = static_cast<size_t>(a.rank());
      if (at.lows.size() != r || at.highs.size() != r)
        fail(op, ts, "lows " + shape_str(at.lows) + " and highs " + shape_str(at.highs) +
                         " need one entry per axis of the operand (rank " + std::to_string(r) + ")");
      Type out{a.dtype, {}};
      for (size_t d = 0; d < r; ++d) {
        int64_t n = 0;
        if (at.lows[d] < 0 || at.highs[d] < 0)
          fail(op, ts, "axis " + std::to_string(d) + ": low " + std::to_string(at.lows[d]) + " and high " +
                           std::to_string(at.highs[d]) + " must be >= 0 (capstep pads, it does not crop: use slice)");
        if (__builtin_add_overflow(a.shape[d], at.lows[d], &n) || __builtin_add_overflow(n, at.highs[d], &n))
          fail(op, ts, "axis " + std::to_string(d) + ": the padded size overflows");
        out.shape.push_back(n);
      }
      return out;
    }
    case Op::concatenate: {
      const Type& a = ts[0];
      if (at.axis < 0 || at.axis >= a.rank())
        fail(op, ts, "axis " + std::to_string(at.axis) + " out of range for rank " + std::to_string(a.rank()));
      const size_t ax = static_cast<size_t>(at.axis);
      Type out = a;
      for (size_t i = 1; i < ts.size(); ++i) {
        const Type& b = ts[i];
        if (b.dtype != a.dtype || b.rank() != a.rank())
          fail(op, ts, "operand " + std::to_string(i) + " is " + b.str() + ", operand 0 is " + a.str() +
                           " (one dtype and rank needed)");
        for (size_t d = 0; d < b.shape.size(); ++d)
          if (d != ax && b.shape[d] != a.shape[d])
            fail(op, ts, "operand " + std::to_string(i) + " is " + b.str() + ": axis " + std::to_string(d) +
                             " differs from operand 0's " + a.str() + " (only axis " + std::to_string(ax) + " may)");
        if (__builtin_add_overflow(out.shape[ax], b.shape[ax], &out.shape[ax]))
          fail(op, ts, "the size along axis " + std::to_string(ax) + " overflows");
      }
      return out;
    }
  }
  fail(op, ts, "unknown primitive");
}

// Ops whose result type is part of the equation (constant, iota, convert,
// broadcast_in_dim, reshape): checks the given type against operands/attrs.
void check_type(Op op, const std::vector<Type>& ts, const Attrs& at, const Type& out) {
  try {
    validate_type(out, "result");
  } catch (const Error& e) {
    fail(op, ts, e.what());
  }
  switch (op) {
    case Op::constant: {
      if (!ts.empty()) fail(op, ts, "takes no operands");
      size_t n = at.literal.size();
      if (n != 1 && static_cast<int64_t>(n) != out.numel())
        fail(op, ts, "literal has " + std::to_string(n) + " values for result " + out.str() +
                         " (need 1 or " + std::to_string(out.numel()) + ")");
      // Backends store each value with a plain cast, undefined in C++ out of range.
      for (size_t i = 0; i < n; ++i)
        if (!literal_fits(at.literal[i], out.dtype))
          fail(op, ts, "literal value " + std::to_string(at.literal[i]) + " at position " + std::to_string(i) +
                           " does not fit in " + dtype_name(out.dtype));
      return;
    }
    case Op::iota:
      if (!ts.empty()) fail(op, ts, "takes no operands");
      if (at.axis < 0 || at.axis >= out.rank())
        fail(op, ts, "axis " + std::to_string(at.axis) + " out of range for result " + out.str());
      if (out.dtype == DType::i1) fail(op, ts, "is not defined on i1");
      return;
    case Op::convert:
      if (ts.size() != 1) fail(op, ts, "takes 1 operand");
      if (ts[0].shape != out.shape) fail(op, ts, "result " + out.str() + " must keep the operand's shape");
      return;
    case Op::broadcast_in_dim: {
      if (ts.size() != 1) fail(op, ts, "takes 1 operand");
      const Type& a = ts[0];
      if (a.dtype != out.dtype) fail(op, ts, "result " + out.str() + " must keep the operand's dtype");
      if (static_cast<int64_t>(at.dims.size()) != a.rank())
        fail(op, ts, "dims " + shape_str(at.dims) + " must have one entry per operand axis");
      check_axes(op, ts, at.dims, out.rank(), "dims", true);
      for (size_t i = 0; i < at.dims.size(); ++i) {
        int64_t od = out.shape[static_cast<size_t>(at.dims[i])];
        if (a.shape[i] != 1 && a.shape[i] != od)
          fail(op, ts, "operand axis " + std::to_string(i) + " (size " + std::to_string(a.shape[i]) +
                           ") cannot broadcast to result axis " + std::to_string(at.dims[i]) + " (size " +
                           std::to_string(od) + ") of " + out.str());
      }
      return;
    }
    case Op::reshape:
      if (ts.size() != 1) fail(op, ts, "takes 1 operand");
      if (ts[0].dtype != out.dtype) fail(op, ts, "result " + out.str() + " must keep the operand's dtype");
      if (ts[0].numel() != out.numel())
        fail(op, ts, "result " + out.str() + " has " + std::to_string(out.numel()) + " elements, operand has " +
                         std::to_string(ts[0].numel()));
      return;
    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
    case Op::compare: case Op::select: case Op::transpose: case Op::dot_general: case Op::reduce_sum:
    case Op::reduce_max: case Op::gather_rows: case Op::scatter_add_rows: case Op::attention:
    case Op::attention_grad: case Op::adamw: case Op::all_reduce: case Op::slice: case Op::pad: case Op::concatenate: {
      Type t = infer_type(op, ts, at);
      if (t != out) fail(op, ts, "result type " + out.str() + " differs from the inferred " + t.str());
      return;
    }
  }
}

}  // namespace capstep
