// to_stablehlo: one primitive -> one StableHLO op, in the pretty form that
// JAX 0.10.2 prints (jax.jit(f).lower(...).as_text()), so the text reads like
// what any JAX user has seen and XLA compiles it as is.
#include <sstream>

#include "capstep/stablehlo.h"
#include "capstep/transforms.h"
#include "ir/all_reduce_packs.h"
#include "export/stablehlo_common.h"

namespace capstep {

using namespace stablehlo_detail;

namespace {

// MLIR string literal: quote and backslash escaped, other bytes outside
// printable ASCII as \XX (the escapes MLIR's lexer understands).
std::string quoted(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7F) {
      o += '\\';
      o += hex[c >> 4];
      o += hex[c & 15];
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

std::string int_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string range_list(int64_t from, int64_t count) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < count; ++i) v.push_back(from + i);
  return int_list(v);
}

bool is_bare_identifier(const std::string& s) {
  if (s.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '$' && c != '.') return false;
  return true;
}

// dense<...> of a constant: splat, nested list, or one hex string for large ones.
std::string dense_text(const Type& t, const std::vector<double>& lit) {
  if (lit.size() == 1) return "dense<" + element_text(t.dtype, lit[0]) + ">";
  // No elements: MLIR writes dense<> (a nested "[[]]" would read as shape [1,0]).
  if (lit.empty()) return "dense<>";
  if (lit.size() > 16 && t.dtype != DType::i1) {
    // i1 stays a list: the packing of i1 hex strings has changed across MLIR versions.
    std::string bytes;
    for (double v : lit) append_element_bytes(t.dtype, v, bytes);
    static const char* hex = "0123456789ABCDEF";
    std::string s = "dense<\"0x";
    for (unsigned char c : bytes) {
      s += hex[c >> 4];
      s += hex[c & 15];
    }
    return s + "\">";
  }
  // Nested list, row-major: open a bracket at every axis boundary.
  std::string s = "dense<";
  const Shape& sh = t.shape;
  int r = t.rank();
  if (r == 0) return s + element_text(t.dtype, lit.empty() ? 0.0 : lit[0]) + ">";
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t n = static_cast<int64_t>(lit.size());
  for (int a = 0; a < r; ++a) s += '[';
  for (int64_t i = 0; i < n; ++i) {
    s += element_text(t.dtype, lit[static_cast<size_t>(i)]);
    // Advance the multi-index; close and reopen brackets of finished axes.
    int a = r - 1;
    while (a >= 0 && ++idx[static_cast<size_t>(a)] == sh[static_cast<size_t>(a)]) {
      idx[static_cast<size_t>(a)] = 0;
      --a;
    }
    int closed = r - 1 - a;
    for (int k = 0; k < closed; ++k) s += ']';
    if (a >= 0) {
      s += ", ";
      for (int k = 0; k < closed; ++k) s += '[';
    }
  }
  return s + ">";
}

class Writer {
 public:
  Writer(const Program& p, std::ostringstream& o, int replicas)
      : p_(p), o_(o), names_(static_cast<size_t>(p.num_values())), replicas_(replicas) {}

  void function() {
    for (size_t i = 0; i < p_.inputs.size(); ++i) names_[static_cast<size_t>(p_.inputs[i].value)] = std::string("%arg").append(std::to_string(i));
    for (size_t i = 0; i < p_.eqns.size(); ++i) names_[static_cast<size_t>(p_.eqns[i].out)] = std::string("%").append(std::to_string(i));

    o_ << "  func.func public @main(";
    for (size_t i = 0; i < p_.inputs.size(); ++i) {
      o_ << (i ? ", " : "") << "%arg" << i << ": " << tensor_type(p_.input_type(static_cast<int>(i)));
      for (const Alias& a : p_.aliases)
        if (a.input == static_cast<int>(i)) o_ << " {tf.aliasing_output = " << a.output << " : i32}";
      o_ << " loc(" << quoted(p_.inputs[i].name) << ")";
    }
    o_ << ") -> (";
    for (size_t i = 0; i < p_.outputs.size(); ++i)
      o_ << (i ? ", " : "") << tensor_type(p_.output_type(static_cast<int>(i))) << " {jax.result_info = "
         << quoted(p_.outputs[i].name) << "}";
    o_ << ") {\n";
    // A pack of all_reduce equations (ir/all_reduce_packs.h) is one variadic
    // stablehlo.all_reduce: one collective, as the backends send it.
    const std::vector<int> pack = all_reduce_packs(p_);
    for (size_t i = 0; i < p_.eqns.size();) {
      size_t j = i + 1;
      while (pack[i] >= 0 && j < p_.eqns.size() && pack[j] == pack[i]) ++j;
      if (j - i > 1) all_reduce_pack(static_cast<int>(i), static_cast<int>(j));
      else eqn(static_cast<int>(i), p_.eqns[i]);
      i = j;
    }
    o_ << "    return";
    for (size_t i = 0; i < p_.outputs.size(); ++i) o_ << (i ? ", " : " ") << name(p_.outputs[i].value);
    if (!p_.outputs.empty()) o_ << " :";
    for (size_t i = 0; i < p_.outputs.size(); ++i)
      o_ << (i ? ", " : " ") << tensor_type(p_.output_type(static_cast<int>(i)));
    o_ << "\n  }\n";
  }

 private:
  const std::string& name(int v) const { return names_[static_cast<size_t>(v)]; }
  std::string ty(int v) const { return tensor_type(p_.type(v)); }
  // "(tensor<A>, tensor<B>) -> tensor<R>"
  std::string fn_type(const Eqn& e) const {
    std::string s = "(";
    for (size_t i = 0; i < e.inputs.size(); ++i) s += (i ? ", " : "") + ty(e.inputs[i]);
    return s + ") -> " + ty(e.out);
  }
  std::string operands(const Eqn& e) const {
    std::string s;
    for (size_t i = 0; i < e.inputs.size(); ++i) s += (i ? ", " : "") + name(e.inputs[i]);
    return s;
  }

  // Equations [first, last) of one pack: "%a, %b = "stablehlo.all_reduce"(%x,
  // %y) <{...}> ({reducer}) : (A, B) -> (A, B)".
  void all_reduce_pack(int first, int last) {
    std::string results, ops, in_types, out_types;
    for (int k = first; k < last; ++k) {
      const Eqn& e = p_.eqns[static_cast<size_t>(k)];
      if (k > first) {
        results += ", ";
        ops += ", ";
        in_types += ", ";
        out_types += ", ";
      }
      results += name(e.out);
      ops += name(e.inputs[0]);
      in_types += ty(e.inputs[0]);
      out_types += ty(e.out);
    }
    const DType dt = p_.type(p_.eqns[static_cast<size_t>(first)].out).dtype;
    std::string b = "%r" + std::to_string(first) + "_";
    std::string scalar = tensor_type({dt, {}});
    o_ << "    " << results << " = \"stablehlo.all_reduce\"(" << ops << ") <{replica_groups = dense<["
       << range_list(0, replicas_) << "]> : tensor<1x" << replicas_ << "xi64>}> ({\n"
       << "    ^bb0(" << b << "a: " << scalar << ", " << b << "b: " << scalar << "):\n"
       << "      " << b << "r = stablehlo.add " << b << "a, " << b << "b : " << scalar << "\n"
       << "      stablehlo.return " << b << "r : " << scalar << "\n"
       << "    }) : (" << in_types << ") -> (" << out_types << ")\n";
  }

  void eqn(int idx, const Eqn& e) {
    const Type& out = p_.type(e.out);
    const std::string lhs = "    " + name(e.out) + " = ";
    switch (e.op) {
      case Op::constant:
        o_ << lhs << "stablehlo.constant " << dense_text(out, e.attrs.literal) << " : " << ty(e.out) << "\n";
        return;
      case Op::iota:
        o_ << lhs << "stablehlo.iota dim = " << e.attrs.axis << " : " << ty(e.out) << "\n";
        return;
      CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
      CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
        o_ << lhs << simple_op_name(e.op) << " " << operands(e) << " : " << ty(e.out) << "\n";
        return;
      case Op::compare:
        o_ << lhs << "stablehlo.compare " << cmp_name(e.attrs.cmp) << ", " << operands(e) << ", "
           << compare_type(p_.type(e.inputs[0]).dtype) << " : " << fn_type(e) << "\n";
        return;
      case Op::select:
        o_ << lhs << "stablehlo.select " << operands(e) << " : " << ty(e.inputs[0]) << ", " << ty(e.out) << "\n";
        return;
      case Op::convert:
        o_ << lhs << "stablehlo.convert " << operands(e) << " : " << fn_type(e) << "\n";
        return;
      case Op::broadcast_in_dim:
        o_ << lhs << "stablehlo.broadcast_in_dim " << operands(e) << ", dims = " << int_list(e.attrs.dims) << " : "
           << fn_type(e) << "\n";
        return;
      case Op::reshape:
        o_ << lhs << "stablehlo.reshape " << operands(e) << " : " << fn_type(e) << "\n";
        return;
      case Op::transpose:
        o_ << lhs << "stablehlo.transpose " << operands(e) << ", dims = " << int_list(e.attrs.dims) << " : "
           << fn_type(e) << "\n";
        return;
      case Op::dot_general:
        o_ << lhs << "stablehlo.dot_general " << operands(e);
        if (!e.attrs.lhs_batch.empty() || !e.attrs.rhs_batch.empty())
          o_ << ", batching_dims = " << int_list(e.attrs.lhs_batch) << " x " << int_list(e.attrs.rhs_batch);
        o_ << ", contracting_dims = " << int_list(e.attrs.lhs_contract) << " x " << int_list(e.attrs.rhs_contract)
           << ", precision = [DEFAULT, DEFAULT] : " << fn_type(e) << "\n";
        return;
      case Op::reduce_sum:
      case Op::reduce_max: {
        // The init is a scalar constant of its own, written just before the
        // reduce (as JAX does); the reader folds it back into the reduce.
        Type scalar{out.dtype, {}};
        std::string init = "%init" + std::to_string(idx);
        o_ << "    " << init << " = stablehlo.constant " << dense_text(scalar, {reduce_init(e.op, out.dtype)})
           << " : " << tensor_type(scalar) << "\n";
        o_ << lhs << "stablehlo.reduce(" << name(e.inputs[0]) << " init: " << init << ") applies "
           << (e.op == Op::reduce_sum ? "stablehlo.add" : "stablehlo.maximum")
           << " across dimensions = " << int_list(e.attrs.dims) << " : (" << ty(e.inputs[0]) << ", "
           << tensor_type(scalar) << ") -> " << ty(e.out) << "\n";
        return;
      }
      case Op::gather_rows: {
        // table [N, D...], indices [S...] -> [S..., D...]: slice one row per index.
        const Type& table = p_.type(e.inputs[0]);
        int64_t s = p_.type(e.inputs[1]).rank(), d = table.rank() - 1;
        std::string dn;
        if (d > 0) dn += "offset_dims = " + range_list(s, d) + ", ";
        dn += "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = " + std::to_string(s);
        std::string sizes = "1";
        for (int64_t k = 1; k < table.rank(); ++k) sizes += ", " + std::to_string(table.shape[static_cast<size_t>(k)]);
        o_ << lhs << "\"stablehlo.gather\"(" << operands(e) << ") <{dimension_numbers = #stablehlo.gather<" << dn
           << ">, indices_are_sorted = false, slice_sizes = array<i64: " << sizes << ">}> : " << fn_type(e) << "\n";
        return;
      }
      case Op::scatter_add_rows: {
        const Type& operand = p_.type(e.inputs[0]);
        int64_t s = p_.type(e.inputs[1]).rank(), d = operand.rank() - 1;
        std::string dn;
        if (d > 0) dn += "update_window_dims = " + range_list(s, d) + ", ";
        dn += "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = " + std::to_string(s);
        std::string b = "%s" + std::to_string(idx) + "_";
        std::string scalar = tensor_type({operand.dtype, {}});
        o_ << lhs << "\"stablehlo.scatter\"(" << operands(e) << ") <{indices_are_sorted = false, "
           << "scatter_dimension_numbers = #stablehlo.scatter<" << dn << ">, unique_indices = false}> ({\n"
           << "    ^bb0(" << b << "a: " << scalar << ", " << b << "b: " << scalar << "):\n"
           << "      " << b << "r = stablehlo.add " << b << "a, " << b << "b : " << scalar << "\n"
           << "      stablehlo.return " << b << "r : " << scalar << "\n"
           << "    }) : " << fn_type(e) << "\n";
        return;
      }
      case Op::attention: case Op::attention_grad: case Op::adamw:
        break;  // to_stablehlo expands them first (expand_adamw, expand_attention)
      case Op::slice: {
        // [start:limit] per axis, ":stride" where it is not 1 (as JAX prints it)
        o_ << lhs << "stablehlo.slice " << operands(e) << " [";
        for (size_t d = 0; d < e.attrs.starts.size(); ++d) {
          o_ << (d ? ", " : "") << e.attrs.starts[d] << ":" << e.attrs.limits[d];
          if (e.attrs.strides[d] != 1) o_ << ":" << e.attrs.strides[d];
        }
        o_ << "] : " << fn_type(e) << "\n";
        return;
      }
      case Op::pad: {
        // The padding value is a scalar zero of its own, written just before
        // (as a reduce's init); the reader folds it back into the pad.
        Type scalar{out.dtype, {}};
        std::string zero = "%pad" + std::to_string(idx);
        o_ << "    " << zero << " = stablehlo.constant " << dense_text(scalar, {0.0}) << " : " << tensor_type(scalar) << "\n";
        o_ << lhs << "stablehlo.pad " << operands(e) << ", " << zero << ", low = " << int_list(e.attrs.lows)
           << ", high = " << int_list(e.attrs.highs)
           << ", interior = " << int_list(std::vector<int64_t>(e.attrs.lows.size(), 0)) << " : (" << ty(e.inputs[0])
           << ", " << tensor_type(scalar) << ") -> " << ty(e.out) << "\n";
        return;
      }
      case Op::concatenate:
        o_ << lhs << "stablehlo.concatenate " << operands(e) << ", dim = " << e.attrs.axis << " : " << fn_type(e) << "\n";
        return;
      case Op::all_reduce: {
        // Cross-replica (no channel_handle): one group of every replica, the
        // module's mhlo.num_replicas. The reducer adds (the form JAX's psum
        // lowers to).
        std::string b = "%r" + std::to_string(idx) + "_";
        std::string scalar = tensor_type({out.dtype, {}});
        o_ << lhs << "\"stablehlo.all_reduce\"(" << operands(e) << ") <{replica_groups = dense<["
           << range_list(0, replicas_) << "]> : tensor<1x" << replicas_ << "xi64>}> ({\n"
           << "    ^bb0(" << b << "a: " << scalar << ", " << b << "b: " << scalar << "):\n"
           << "      " << b << "r = stablehlo.add " << b << "a, " << b << "b : " << scalar << "\n"
           << "      stablehlo.return " << b << "r : " << scalar << "\n"
           << "    }) : " << fn_type(e) << "\n";
        return;
      }
    }
    throw Error("to_stablehlo: unknown primitive in equation " + std::to_string(idx));
  }

  const Program& p_;
  std::ostringstream& o_;
  std::vector<std::string> names_;
  int replicas_ = 1;
};

}  // namespace

std::string to_stablehlo(const Program& p, const std::string& module_name, int num_replicas) {
  if (!is_bare_identifier(module_name))
    throw Error("to_stablehlo: module name \"" + module_name +
                "\" is not an MLIR bare identifier ([A-Za-z_][A-Za-z0-9_$.]*)");
  if (num_replicas < 1 || num_replicas > kMaxReplicas)
    throw Error("to_stablehlo: num_replicas must be in [1, " + std::to_string(kMaxReplicas) + "], got " +
                std::to_string(num_replicas));
  verify(p);
  // The composite primitives (adamw, attention, attention_grad) have no one
  // StableHLO op: written out as the primitives they stand for.
  const Program expanded = expand_attention(expand_adamw(p));
  std::ostringstream o;
  o << "module @" << module_name << " attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = " << num_replicas
    << " : i32} {\n";
  Writer(expanded, o, num_replicas).function();
  o << "}\n";
  return o.str();
}

}  // namespace capstep
