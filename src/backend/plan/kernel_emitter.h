// The pieces every fused kernel's text is made of (kernel_source.cpp: loop,
// wave, row, col, scatter kernels; kernel_source_gemm.cpp: gemm kernels):
// C++ types and literals of a dtype, bf16 loads and stores, a dot_general's
// operands as strided walks, and the Emitter that writes a group's members.
// Private to src/backend/plan.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/plan/kernel_source.h"
#include "backend/plan/view_layout.h"
#include "backend/plan/walk.h"
#include "ir/bf16.h"

namespace capstep::plan::emit {

// C++ type of a value in registers; i1 is a bool there and a byte in memory.
inline const char* reg_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int";
    case DType::i1: return "bool";
    case DType::bf16: return "float";  // widened on load (exact), rounded to nearest even on store
  }
  throw Error(std::string("CUDA kernel generator: no kernels for ") + dtype_name(t) + " values");
}
// In memory: i1 is a byte; bf16 the top 16 bits of an f32 (ir/bf16.h).
inline const char* mem_type(DType t) {
  if (t == DType::i1) return "unsigned char";
  if (t == DType::bf16) return "unsigned short";
  return reg_type(t);
}
// An element read from memory (`raw`, of type mem_type(t)) as its register value.
inline std::string widen(DType t, const std::string& raw) {
  if (t == DType::i1) return raw + " != 0";
  if (t == DType::bf16) return "capstep_bf16_load(" + raw + ")";
  return raw;
}
// An operand of a product read from its root's memory (`raw`): widened, and
// rounded to bf16 when read through a bf16 operand view.
inline std::string operand_load(DType root, bool round, const std::string& raw) {
  const std::string v = widen(root, raw);
  return round ? "capstep_bf16_round(" + v + ")" : v;
}
// A register value of type t as what memory stores.
inline std::string narrow(DType t, const std::string& reg) {
  if (t == DType::i1) return reg + " ? 1 : 0";
  if (t == DType::bf16) return "capstep_bf16_store(" + reg + ")";
  return reg;
}

inline std::string literal(DType t, double v) {
  char buf[64];
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      if (std::isfinite(f)) {
        std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
      } else {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        std::snprintf(buf, sizeof buf, "__int_as_float(0x%08" PRIx32 ")", bits);
      }
      return buf;
    }
    case DType::f64: {
      if (std::isfinite(v)) {
        std::snprintf(buf, sizeof buf, "%a", v);
      } else {
        uint64_t bits;
        std::memcpy(&bits, &v, 8);
        std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016" PRIx64 "LL)", bits);
      }
      return buf;
    }
    case DType::i32: {
      const int64_t i = static_cast<int64_t>(v);
      if (i == INT32_MIN) return "(-2147483647 - 1)";
      return std::to_string(i);
    }
    case DType::i1: return v != 0 ? "true" : "false";
    case DType::bf16: return literal(DType::f32, bf16::round_double(v));  // the value a bf16 store holds, as f32
  }
  throw Error(std::string("CUDA kernel generator: no literal of ") + dtype_name(t));
}

// The formula of a unary or binary primitive: capstep::scalar::NAME (the
// enum name, the table's rule); nullptr for the others.
#define CAPSTEP_X(name, ...) #name,
inline constexpr const char* kUnaryFn[] = {CAPSTEP_UNARY_OPS(CAPSTEP_X)};
inline constexpr const char* kBinaryFn[] = {CAPSTEP_BINARY_OPS(CAPSTEP_X)};
#undef CAPSTEP_X
inline const char* scalar_fn(Op op) {
  if (op_kind(op) == OpKind::unary) return kUnaryFn[static_cast<size_t>(unary_op(op))];
  if (op_kind(op) == OpKind::binary) return kBinaryFn[static_cast<size_t>(binary_op(op))];
  return nullptr;
}

// bf16 in the generated kernels, as ir/bf16.h stores it on the host: the top
// 16 bits of an f32 in an unsigned short, widened exactly on load, rounded to
// nearest even on store (NaN kept as a quiet NaN with its sign, infinities
// kept, overflow to infinity), f64 rounded once (through f32 "to odd").
inline const char* const kBf16DeviceText =
    "__device__ __forceinline__ float capstep_bf16_load(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
    "__device__ __forceinline__ unsigned short capstep_bf16_store(float f) {\n"
    "  const unsigned b = __float_as_uint(f);\n"
    "  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0u) return (unsigned short)((b >> 16) | 0x0040u);\n"
    "  return (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);\n"
    "}\n"
    "__device__ __forceinline__ float capstep_bf16_round(float f) { return capstep_bf16_load(capstep_bf16_store(f)); }\n"
    "__device__ __forceinline__ float capstep_bf16_of_double(double d) {\n"
    // NaN: sign and top payload bits kept, quieted, as the host's conversion
    // through f32 keeps them (the device's f64 -> f32 gives one canonical NaN)
    "  if (d != d) {\n"
    "    const unsigned hi = (unsigned)((unsigned long long)__double_as_longlong(d) >> 32);\n"
    "    return capstep_bf16_load((unsigned short)(((hi >> 16) & 0x8000u) | 0x7FC0u | ((hi >> 13) & 0x7Fu)));\n"
    "  }\n"
    "  float f = (float)d;\n"
    "  if ((__float_as_uint(f) & 0x7FFFFFFFu) == 0x7F800000u || (double)f == d) return capstep_bf16_round(f);\n"
    "  const double af = f < 0.0f ? -(double)f : (double)f, ad = d < 0.0 ? -d : d;\n"
    "  if (af > ad) f = __uint_as_float(__float_as_uint(f) - 1u);  // toward zero\n"
    "  return capstep_bf16_round(__uint_as_float(__float_as_uint(f) | 1u));  // to odd: the second rounding is exact\n"
    "}\n";

// A dot_general's operands as strided walks over their roots' buffers (through
// reshapes and view transposes): batch, free and contracted axes of each side,
// and the sizes B, M, N, K.
// Not plan::dot_gemm (gemm_layout.h), the GEMM libraries' layout: a generated
// loop reads any strides, so nothing here is in place or packed, and a view's
// axis may be several sub-axes (a reshape of a transpose), which one stride
// per axis cannot describe. The axes are the same (dot_free_axes).
struct DotLayout {
  Walk a_b, a_m, a_k, b_b, b_n, b_k;
  int a_root = -1, b_root = -1;
  bool a_round = false, b_round = false;  // read through a bf16 operand view: an f32 root, rounded to bf16 on load
  int64_t B = 1, M = 1, N = 1, K = 1;
};
inline DotLayout dot_layout(const Program& p, const std::vector<char>& view, const Eqn& e, const std::string& kernel) {
  const Attrs& at = e.attrs;
  const std::optional<ViewOf> va = view_of(p, view, e.inputs[0]), vb = view_of(p, view, e.inputs[1]);
  if (!va || !vb) throw Error("kernel source: an operand of a product in " + kernel + " has no strided layout");
  const int ra = static_cast<int>(p.type(e.inputs[0]).shape.size()), rb = static_cast<int>(p.type(e.inputs[1]).shape.size());
  DotLayout d;
  const std::string what = "dot_general in " + kernel;
  d.a_b = combined(va->layout, at.lhs_batch, what);
  d.a_m = combined(va->layout, dot_free_axes(ra, at.lhs_batch, at.lhs_contract), what);
  d.a_k = combined(va->layout, at.lhs_contract, what);
  d.b_b = combined(vb->layout, at.rhs_batch, what);
  d.b_n = combined(vb->layout, dot_free_axes(rb, at.rhs_batch, at.rhs_contract), what);
  d.b_k = combined(vb->layout, at.rhs_contract, what);
  d.a_root = va->root;
  d.b_root = vb->root;
  d.a_round = va->bf16_round;
  d.b_round = vb->bf16_round;
  d.B = d.a_b.numel();
  d.M = d.a_m.numel();
  d.N = d.b_n.numel();
  d.K = d.a_k.numel();
  return d;
}

// The text of one group's members, evaluated at a flat index: full members
// at `full_idx`, row / kept-element members at `small_idx`. Parameter names
// are shared by every part of one kernel (the sinks kernel has several).
class Emitter {
 public:
  Emitter(const Program& p, KernelSource& k, const std::vector<char>* view = nullptr)
      : p_(p), k_(k), view_(view), producer_(static_cast<size_t>(p.num_values()), -1) {
    for (int d = 0; d < static_cast<int>(p.eqns.size()); ++d)
      producer_[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = d;
  }

  // A splat constant (one literal, or one element) is inlined.
  bool splat(int x, double* v) const {
    const int q = producer_[static_cast<size_t>(x)];
    if (q < 0) return false;
    const Eqn& e = p_.eqns[static_cast<size_t>(q)];
    if (e.op != Op::constant || e.attrs.literal.empty()) return false;
    if (e.attrs.literal.size() != 1 && p_.type(x).numel() != 1) return false;
    *v = e.attrs.literal[0];
    return true;
  }
  void add_inputs(const Group& g) {
    std::set<int> dot_operand, gather_operand;
    for (int d = g.first; d <= g.last; ++d) {
      const Eqn& e = p_.eqns[static_cast<size_t>(d)];
      if (e.op == Op::dot_general) dot_operand.insert(e.inputs.begin(), e.inputs.end());
      if (e.op == Op::gather_rows) gather_operand.insert(e.inputs.begin(), e.inputs.end());
    }
    for (int x : g.inputs) {
      if (dot_operand.count(x)) {  // read through its view, from its root's buffer
        add_input(root_of(x), true);
        continue;
      }
      add_input(x, gather_operand.count(x) != 0);
    }
    for (int x : dot_operand) add_input(root_of(x), true);
  }
  int root_of(int x) const {
    const std::optional<ViewOf> v = view_of(p_, view_ ? *view_ : std::vector<char>{}, x);
    if (!v) throw Error("kernel source: an operand of a product in " + k_.name + " has no strided layout");
    return v->root;
  }
  // A splat constant is inlined, except where a product or a gather reads it:
  // they index their operands' buffers (`buffer`).
  void add_input(int x, bool buffer = false) {
    double v;
    if ((!buffer && splat(x, &v)) || in_name_.count(x)) return;
    in_name_[x] = "in" + std::to_string(in_name_.size());
    ins_.push_back(x);
  }
  void add_outputs(const Group& g) {
    for (int x : g.outputs) {
      out_name_[x] = "out" + std::to_string(out_name_.size());
      outs_.push_back(x);
    }
  }
  // The kernel's signature, after every part's inputs and outputs were added.
  // `lead` (values) and `lead_text` come first: a GEMM's operands.
  std::string signature(const std::vector<int>& lead = {}, const std::string& lead_text = "") {
    k_.params = lead;
    k_.params.insert(k_.params.end(), ins_.begin(), ins_.end());
    k_.n_inputs = static_cast<int>(k_.params.size());
    k_.params.insert(k_.params.end(), outs_.begin(), outs_.end());
    std::ostringstream s;
    s << "extern \"C\" __global__ void __launch_bounds__(" << kLoopThreads << ") " << k_.name << "(" << lead_text;
    for (int x : ins_) s << "const " << mem_type(p_.type(x).dtype) << "* " << in_name_.at(x) << ", ";
    for (int x : outs_) s << mem_type(p_.type(x).dtype) << "* " << out_name_.at(x) << ", ";
    s << "long long n) {\n";
    return s.str();
  }

  void set_group(const Group& g) {
    g_ = &g;
    member_.clear();
    for (int d = g.first; d <= g.last; ++d) member_.insert(p_.eqns[static_cast<size_t>(d)].out);
  }
  bool member(int x) const { return member_.count(x) != 0; }
  bool full(int x) const { return p_.type(x).numel() == g_->numel; }
  // a member's register: v<id> for full members, s<id> for the others
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"  // g++ 12 false positive in std::string's inlining (GCC bug 105329)
#endif
  std::string reg(int x) const { return (full(x) ? "v" : "s") + std::to_string(x); }
#pragma GCC diagnostic pop
  // Loads of one scope are emitted once each; a new scope forgets them.
  void new_scope() { loaded_.clear(); }

  // "const T v<id> = <expr>;" for member equation d, at indent `ind`
  std::string member_code(int d, const std::string& idx, const std::string& ind) {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType ot = p_.type(e.out).dtype;
    const std::string T = reg_type(ot);
    std::ostringstream pre;
    auto operand = [&](int x) -> std::string {
      if (member(x)) return reg(x);
      double v;
      if (splat(x, &v)) return literal(p_.type(x).dtype, v);
      const std::string key = std::to_string(x) + "@" + idx;
      auto it = loaded_.find(key);
      if (it != loaded_.end()) return it->second;
      const DType t = p_.type(x).dtype;
      const std::string name = "x" + std::to_string(x) + (idx == "i" ? "" : "_" + idx);
      pre << ind << "const " << reg_type(t) << " " << name << " = " << widen(t, in_name_.at(x) + "[" + idx + "]") << ";\n";
      loaded_[key] = name;
      return name;
    };
    std::string expr;
    if (const char* fn = scalar_fn(e.op)) {
      expr = std::string("capstep::scalar::") + fn + "<" + T + ">(" + operand(e.inputs[0]);
      for (size_t a = 1; a < e.inputs.size(); ++a) expr += ", " + operand(e.inputs[a]);
      expr += ")";
    } else {
      switch (e.op) {
        case Op::compare: {
          const std::string a = operand(e.inputs[0]), b = operand(e.inputs[1]);
          expr = std::string("capstep::scalar::compare<") + reg_type(p_.type(e.inputs[0]).dtype) + ">(" +
                 std::to_string(static_cast<int>(e.attrs.cmp)) + ", " + a + ", " + b + ")";
          break;
        }
        case Op::select: {
          const std::string c = operand(e.inputs[0]), a = operand(e.inputs[1]), b = operand(e.inputs[2]);
          expr = "(" + c + " ? " + a + " : " + b + ")";
          break;
        }
        case Op::convert: {
          const DType from = p_.type(e.inputs[0]).dtype;
          const std::string a = operand(e.inputs[0]);
          if (from == ot) expr = a;
          else if (from == DType::i1) expr = ot == DType::i1 ? a : "static_cast<" + T + ">(" + a + " ? 1 : 0)";
          // f64 and i32 -> bf16 rounded once (bf16::from_double), not through f32
          else if (ot == DType::bf16 && from == DType::f64) expr = "capstep_bf16_of_double(" + a + ")";
          else if (ot == DType::bf16 && from == DType::i32) expr = "capstep_bf16_of_double(static_cast<double>(" + a + "))";
          else expr = "capstep::scalar::convert<" + T + ", " + reg_type(from) + ">(" + a + ")";
          break;
        }
        case Op::broadcast_in_dim: {
          const int x = e.inputs[0];
          const Type& it = p_.type(x);
          double v;
          if (member(x) || splat(x, &v) || it.numel() == p_.type(e.out).numel()) {
            expr = operand(x);  // the same flat index (only axes of size 1 are added), or a row broadcast
          } else {
            const Walk w = broadcast_walk(it.shape, p_.type(e.out).shape, e.attrs.dims, "broadcast_in_dim in " + k_.name);
            expr = widen(it.dtype, in_name_.at(x) + "[" + offset_code(w, idx) + "]");
          }
          break;
        }
        case Op::reshape:  // a folded reshape (Target::fold_reshapes): the same flat index
          expr = operand(e.inputs[0]);
          break;
        case Op::transpose: {  // the operand is always made outside the group
          const int x = e.inputs[0];
          const Type& it = p_.type(x);
          double v;
          if (splat(x, &v)) {
            expr = literal(it.dtype, v);
          } else {
            const Walk w = transpose_walk(it.shape, e.attrs.dims, "transpose in " + k_.name);
            expr = widen(it.dtype, in_name_.at(x) + "[" + offset_code(w, idx) + "]");
          }
          break;
        }
        case Op::gather_rows: {  // table and indices are always made outside the group
          const int tbl = e.inputs[0], ix = e.inputs[1];
          const Type& tt = p_.type(tbl);
          const int64_t rows = tt.shape.at(0), C = rows > 0 ? tt.numel() / rows : 0;
          const std::string id = std::to_string(e.out);
          pre << ind << "const long long gs" << id << " = " << idx << " / " << C << "LL;\n"
              << ind << "const int gr" << id << " = " << in_name_.at(ix) << "[gs" << id << "];\n"
              << ind << T << " g" << id << " = " << T << "(0);\n"
              << ind << "if (gr" << id << " >= 0 && gr" << id << " < " << rows << "LL) g" << id << " = "
              << widen(tt.dtype, in_name_.at(tbl) + "[(long long)gr" + id + " * " + std::to_string(C) + "LL + " + idx + " % " +
                                     std::to_string(C) + "LL]")
              << ";\n"
              << ind << "else if (" << idx << " % " << C << "LL == 0) capstep_report(" << d << ", gs" << id << ", gr" << id
              << ");\n";
          expr = "g" + id;
          break;
        }
        case Op::dot_general: {  // one element of the product, its k in order
          const std::vector<char> none;
          const DotLayout dl = dot_layout(p_, view_ ? *view_ : none, e, k_.name);
          const Walk &a_b = dl.a_b, &a_m = dl.a_m, &a_k = dl.a_k, &b_b = dl.b_b, &b_n = dl.b_n, &b_k = dl.b_k;
          const int64_t M = dl.M, N = dl.N, K = dl.K;
          // the roots' dtypes (bf16: widened; an f32 root of a bf16 view: rounded), f32 products and sums
          const DType at = p_.type(dl.a_root).dtype, bt = p_.type(dl.b_root).dtype;
          auto lda = [&](const std::string& raw) { return operand_load(at, dl.a_round, raw); };
          auto ldb = [&](const std::string& raw) { return operand_load(bt, dl.b_round, raw); };
          const std::string v = "d" + std::to_string(e.out), id = std::to_string(e.out);
          pre << ind << T << " " << v << " = " << T << "(0);\n"
              << ind << "{\n"
              << ind << "  const long long n" << id << " = " << idx << " % " << N << "LL, m" << id << " = (" << idx << " / " << N
              << "LL) % " << M << "LL, b" << id << " = " << idx << " / " << M * N << "LL;\n"
              << ind << "  const long long oa = " << offset_code(a_b, "b" + id) << " + " << offset_code(a_m, "m" + id)
              << ", ob = " << offset_code(b_b, "b" + id) << " + " << offset_code(b_n, "n" + id) << ";\n"
              // four partial sums (k = 4j, 4j+1, ...) for instruction-level parallelism, then added pairwise
              << ind << "  " << T << " s0 = " << T << "(0), s1 = " << T << "(0), s2 = " << T << "(0), s3 = " << T << "(0);\n"
              << ind << "  for (long long kk = 0; kk + 3 < " << K << "LL; kk += 4) {\n";
          for (int q = 0; q < 4; ++q) {
            const std::string kq = q == 0 ? "kk" : "(kk + " + std::to_string(q) + ")";
            pre << ind << "    s" << q << " = s" << q << " + " << lda(in_name_.at(dl.a_root) + "[oa + " + offset_code(a_k, kq) + "]")
                << " * " << ldb(in_name_.at(dl.b_root) + "[ob + " + offset_code(b_k, kq) + "]") << ";\n";
          }
          pre << ind << "  }\n";
          for (int64_t q = K / 4 * 4; q < K; ++q) {
            const std::string kq = std::to_string(q) + "LL";
            pre << ind << "  s" << q % 4 << " = s" << q % 4 << " + " << lda(in_name_.at(dl.a_root) + "[oa + " + offset_code(a_k, kq) + "]")
                << " * " << ldb(in_name_.at(dl.b_root) + "[ob + " + offset_code(b_k, kq) + "]") << ";\n";
          }
          pre << ind << "  " << v << " = (s0 + s1) + (s2 + s3);\n"
              << ind << "}\n";
          expr = v;
          break;
        }
        CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)  // scalar_fn above
        CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
        case Op::constant: case Op::iota: case Op::reduce_sum: case Op::reduce_max:
        case Op::scatter_add_rows: case Op::attention: case Op::attention_grad: case Op::adamw: case Op::all_reduce:
        case Op::slice: case Op::pad: case Op::concatenate:
          throw Error("kernel source: " + std::string(op_name(e.op)) + " cannot be computed elementwise in " + k_.name);
      }
    }
    // a bf16 result holds what its store would: rounded to nearest even once
    // here, so that every later use (in registers or from memory) sees the
    // interpreter's value
    if (ot == DType::bf16) expr = "capstep_bf16_round(" + expr + ")";
    pre << ind << "const " << T << " " << reg(e.out) << " = " << expr << ";\n";
    return pre.str();
  }
  // an outside value at idx: a literal for a splat constant, else a load
  std::string load(int x, const std::string& idx) const {
    double v;
    if (splat(x, &v)) return literal(p_.type(x).dtype, v);
    return widen(p_.type(x).dtype, in_name_.at(x) + "[" + idx + "]");
  }
  std::string store(int x, const std::string& idx, const std::string& ind) const {
    return ind + out_name_.at(x) + "[" + idx + "] = " + narrow(p_.type(x).dtype, reg(x)) + ";\n";
  }
  bool is_output(int x) const { return out_name_.count(x) != 0; }

  // A reduction member's accumulator: declaration, update, combination across
  // the warp and the final value. f32 sums accumulate in double, as the
  // one-kernel-per-equation reduce does (rounded once at the end: closer to
  // the exact sum than any order of f32 additions); max in the element type.
  // bf16: f32 accumulators (the interpreter's), rounded once to bf16 at the end.
  static DType acc_type(Op op, DType t) {
    if (t == DType::bf16) return DType::f32;
    return op == Op::reduce_sum && t == DType::f32 ? DType::f64 : t;
  }
  std::string acc_decl(int d, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType t = p_.type(e.out).dtype, a = acc_type(e.op, t);
    const std::string init = e.op == Op::reduce_sum ? literal(a, 0)
                             : t == DType::i32      ? literal(t, -2147483648.0)
                                                    : literal(t, -INFINITY);
    return ind + reg_type(a) + " a" + std::to_string(e.out) + " = " + init + ";\n";
  }
  std::string acc_update(int d, const std::string& value, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType t = p_.type(e.out).dtype, at = acc_type(e.op, t);
    const std::string a = "a" + std::to_string(e.out);
    const std::string v = at == t ? value : std::string("static_cast<") + reg_type(at) + ">(" + value + ")";
    return ind + a + " = " + combine(e.op, at, a, v) + ";\n";
  }
  std::string acc_warp_reduce(int d, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType at = acc_type(e.op, p_.type(e.out).dtype);
    const std::string a = "a" + std::to_string(e.out);
    return ind + "for (int o = 16; o > 0; o >>= 1) " + a + " = " +
           combine(e.op, at, a, "__shfl_xor_sync(0xffffffffu, " + a + ", o)") + ";\n";
  }
  // one shared slot per (warp, column) for the accumulator of reduction d
  std::string acc_shared_decl(int d, int slots, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    return ind + "CAPSTEP_SHARED(" + reg_type(acc_type(e.op, p_.type(e.out).dtype)) + ", sh" + std::to_string(e.out) + ", " +
           std::to_string(slots) + ");\n";
  }
  // combine the accumulator with the lanes at xor distances `offsets`, in order
  std::string acc_shfl_combine(int d, const std::vector<int>& offsets, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType at = acc_type(e.op, p_.type(e.out).dtype);
    const std::string a = "a" + std::to_string(e.out);
    std::string s;
    for (int o : offsets)
      s += ind + a + " = " + combine(e.op, at, a, "__shfl_xor_sync(0xffffffffu, " + a + ", " + std::to_string(o) + ")") + ";\n";
    return s;
  }
  // where `who`, the accumulator into its shared slot `slot`
  std::string acc_share(int d, const std::string& slot, const std::string& who, const std::string& ind) const {
    const std::string id = std::to_string(p_.eqns[static_cast<size_t>(d)].out);
    return ind + "if (" + who + ") sh" + id + "[" + slot + "] = a" + id + ";\n";
  }
  // the accumulator as the combination of the `rows` shared slots of column `col`, in row order
  std::string acc_gather_shared(int d, int rows, int stride, const std::string& col, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType at = acc_type(e.op, p_.type(e.out).dtype);
    const std::string id = std::to_string(e.out), a = "a" + id;
    std::string s = ind + a + " = sh" + id + "[" + col + "];\n";
    s += ind + "for (int w = 1; w < " + std::to_string(rows) + "; ++w) " + a + " = " +
         combine(e.op, at, a, "sh" + id + "[w * " + std::to_string(stride) + " + " + col + "]") + ";\n";
    return s;
  }
  std::string acc_value(int d, const std::string& ind) const {
    const Eqn& e = p_.eqns[static_cast<size_t>(d)];
    const DType t = p_.type(e.out).dtype;
    const std::string v = "static_cast<" + std::string(reg_type(t)) + ">(a" + std::to_string(e.out) + ")";
    return ind + "const " + reg_type(t) + " s" + std::to_string(e.out) + " = " +
           (t == DType::bf16 ? "capstep_bf16_round(" + v + ")" : v) + ";\n";
  }
  // the reduction's operand at the full index: a member's register or a load
  std::string reduce_operand(int d, const std::string& ind, std::string* pre) {
    const int x = p_.eqns[static_cast<size_t>(d)].inputs[0];
    if (member(x)) return reg(x);
    double v;
    if (splat(x, &v)) return literal(p_.type(x).dtype, v);
    const std::string key = std::to_string(x) + "@i";
    auto it = loaded_.find(key);
    if (it != loaded_.end()) return it->second;
    const std::string name = "x" + std::to_string(x);
    *pre += ind + "const " + reg_type(p_.type(x).dtype) + " " + name + " = " + widen(p_.type(x).dtype, in_name_.at(x) + "[i]") + ";\n";
    loaded_[key] = name;
    return name;
  }

 private:
  static std::string combine(Op op, DType t, const std::string& a, const std::string& b) {
    if (op == Op::reduce_max) return std::string("capstep::scalar::maximum<") + reg_type(t) + ">(" + a + ", " + b + ")";
    if (t == DType::i32) return "(int)((unsigned)" + a + " + (unsigned)" + b + ")";  // wraps, as XLA does
    return std::string("capstep::scalar::add<") + reg_type(t) + ">(" + a + ", " + b + ")";
  }

  const Program& p_;
  KernelSource& k_;
  const std::vector<char>* view_;
  std::vector<int> producer_;
  const Group* g_ = nullptr;
  std::set<int> member_;
  std::map<int, std::string> in_name_, out_name_;
  std::vector<int> ins_, outs_;
  std::map<std::string, std::string> loaded_;
};

inline unsigned blocks_for(int64_t work_items, int64_t per_block, int64_t cap) {
  const int64_t b = (work_items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, cap));
}

// The body of a loop group's grid-stride loop over i.
inline std::string loop_body(Emitter& em, const Program& p, const Group& g) {
  em.set_group(g);
  em.new_scope();
  std::string body;
  for (int d = g.first; d <= g.last; ++d) body += em.member_code(d, "i", "    ");
  for (int x : g.outputs) body += em.store(x, "i", "    ");
  (void)p;
  return body;
}

inline const Group& group_of_kind(const Fused& f, int index, GroupKind want, const char* who) {
  const Group& g = f.groups.at(static_cast<size_t>(index));
  if (g.kind != want)
    throw Error(std::string(who) + ": group " + std::to_string(index) + " is a " + group_kind_name(g.kind) +
                " group, not a " + group_kind_name(want));
  return g;
}
}  // namespace capstep::plan::emit
