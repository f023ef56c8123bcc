// capstep IR: a small typed SSA program, the one type that flows through every
// stage (capture, value_and_grad, with_adamw, interpreter, CUDA, StableHLO).
//
// Every primitive has exactly one output. Primitives follow the StableHLO op of
// the same name, so that export is one op to one op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace capstep {

// ---- element types --------------------------------------------------------
// bf16 (bfloat16: f32's 8-bit exponent, 7 mantissa bits) is stored in 2 bytes;
// the host rounds every bf16 store to nearest even and computes in f32.
enum class DType : uint8_t { f32, f64, i32, i1, bf16 };

const char* dtype_name(DType d);             // "f32", "f64", "i32", "i1", "bf16"
// Bytes per element (i1 stored as 1 byte). Inline, so that a unit built on
// its own (the safetensors fuzz target) needs no other source file for it.
constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i1: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}
bool is_float(DType d);                      // f32, f64, bf16
DType parse_dtype(const std::string& s);     // throws on unknown

using Shape = std::vector<int64_t>;

struct Type {
  DType dtype = DType::f32;
  Shape shape;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string str() const;                   // "f32[4,16]" ; scalar "f32[]"
  bool operator==(const Type& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const Type& o) const { return !(*this == o); }
};
std::string shape_str(const Shape& s);        // "[4,16]"
// Throws Error "<what>: ..." unless every dimension is >= 0 and the byte size
// (the product of the nonzero dimensions, times the element size) fits in
// int64_t, so that numel() and bytes() cannot overflow. Every value of
// a verified Program, and every Array, passes it.
void validate_type(const Type& t, const std::string& what);

// ---- the single table of primitives -----------------------------------------
// Adding a primitive here without its shape rule, VJP, host kernel, CUDA kernel
// and StableHLO lowering is a compile error (-Werror=switch on every switch over
// Op, none of which has a default). Every other property of an op is a column
// of this table, read through the lookups below (op_kind, op_fuse, ...), so
// that code which only asks "is it one of these?" needs no switch.
//
//   X(enum name, text name, number of operands, kind (OpKind), fusion role
//     (OpFuse), result type given in the equation (has_given_type), the
//     StableHLO op it lowers to (nullptr: a composite, expanded before export))
//
// A unary or binary elementwise primitive's formula is capstep::scalar::NAME
// (src/ir/scalar_math.h, shared by the host kernels and the generated CUDA
// source); its row goes in CAPSTEP_UNARY_OPS / CAPSTEP_BINARY_OPS, which the
// switches that dispatch on the formula expand into one case per row. So a new
// one is written in: this table (its row and its semantics below),
// src/ir/scalar_math.h (the formula), src/transforms/vjp_rules.cpp (its VJP),
// src/backend/host/loop_jit.cpp (its AVX2 instructions, or none: a switch over
// UnaryOp / BinaryOp), include/capstep/trace.h and src/trace/elementwise.cpp
// (the capture function); a binary one also in
// src/backend/host/kernels_elementwise.cpp (int_NAME: its i32 rule). The shape
// rule (src/ir/infer.cpp: same types, no i1; unary: float only), the host and
// CUDA kernels, the generated CUDA source, the StableHLO writer and reader
// take it from the sub-table.
#define CAPSTEP_BINARY_OPS(X)                                                    \
  X(add, "add", 2, binary, elementwise, false, "stablehlo.add")                  \
  X(subtract, "subtract", 2, binary, elementwise, false, "stablehlo.subtract")   \
  X(multiply, "multiply", 2, binary, elementwise, false, "stablehlo.multiply")   \
  X(divide, "divide", 2, binary, elementwise, false, "stablehlo.divide")         \
  X(maximum, "maximum", 2, binary, elementwise, false, "stablehlo.maximum")
#define CAPSTEP_UNARY_OPS(X)                                                            \
  X(negate, "negate", 1, unary, elementwise, false, "stablehlo.negate")                 \
  X(exponential, "exponential", 1, unary, elementwise, false, "stablehlo.exponential")  \
  X(log, "log", 1, unary, elementwise, false, "stablehlo.log")                          \
  X(tanh, "tanh", 1, unary, elementwise, false, "stablehlo.tanh")                       \
  X(rsqrt, "rsqrt", 1, unary, elementwise, false, "stablehlo.rsqrt")                    \
  X(sqrt, "sqrt", 1, unary, elementwise, false, "stablehlo.sqrt")
#define CAPSTEP_PRIMITIVES(X)                                                                         \
  X(constant, "constant", 0, source, free, true, "stablehlo.constant")                                \
  X(iota, "iota", 0, source, free, true, "stablehlo.iota")                                            \
  CAPSTEP_BINARY_OPS(X)                                                                               \
  CAPSTEP_UNARY_OPS(X)                                                                                \
  X(compare, "compare", 2, compare, elementwise, false, "stablehlo.compare")                          \
  X(select, "select", 3, select, elementwise, false, "stablehlo.select")                              \
  X(convert, "convert", 1, convert, elementwise, true, "stablehlo.convert")                           \
  X(broadcast_in_dim, "broadcast_in_dim", 1, layout, strided, true, "stablehlo.broadcast_in_dim")     \
  X(reshape, "reshape", 1, layout, free, true, "stablehlo.reshape")                                   \
  X(transpose, "transpose", 1, layout, strided, false, "stablehlo.transpose")                         \
  X(dot_general, "dot_general", 2, contraction, gemm, false, "stablehlo.dot_general")                 \
  X(reduce_sum, "reduce_sum", 1, reduction, reduce, false, "stablehlo.reduce")                          \
  X(reduce_max, "reduce_max", 1, reduction, reduce, false, "stablehlo.reduce")                          \
  X(gather_rows, "gather_rows", 2, gather_scatter, gather, false, "stablehlo.gather")                 \
  X(scatter_add_rows, "scatter_add_rows", 3, gather_scatter, none, false, "stablehlo.scatter")        \
  X(attention, "attention", 3, composite, none, false, nullptr)                                       \
  X(attention_grad, "attention_grad", 5, composite, none, false, nullptr)                             \
  X(adamw, "adamw", 8, composite, none, false, nullptr)                                               \
  X(all_reduce, "all_reduce", 1, collective, none, false, "stablehlo.all_reduce")                     \
  X(slice, "slice", 1, layout, none, false, "stablehlo.slice")                                        \
  X(pad, "pad", 1, layout, none, false, "stablehlo.pad")                                              \
  X(concatenate, "concatenate", -1, layout, none, false, "stablehlo.concatenate")

// One `case Op::NAME:` per row it is given: CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
// is the case list of every unary primitive, checked by -Werror=switch as if
// each were written out.
#define CAPSTEP_CASE_OP(name, ...) case Op::name:

enum class Op : uint8_t {
#define CAPSTEP_X(name, ...) name,
  CAPSTEP_PRIMITIVES(CAPSTEP_X)
#undef CAPSTEP_X
};
constexpr int kNumOps = 0
#define CAPSTEP_X(name, ...) +1
    CAPSTEP_PRIMITIVES(CAPSTEP_X)
#undef CAPSTEP_X
    ;

// What the code branches on: the kind of computation an op is.
enum class OpKind : uint8_t {
  source,          // constant, iota: no operands
  unary,           // CAPSTEP_UNARY_OPS: out[i] = scalar::NAME(a[i])
  binary,          // CAPSTEP_BINARY_OPS: out[i] = scalar::NAME(a[i], b[i])
  compare,         // elementwise, i1 result
  select,          // elementwise, i1 predicate
  convert,         // elementwise, another dtype
  layout,          // moves or copies elements: broadcast_in_dim, reshape, transpose, slice, pad, concatenate
  contraction,     // dot_general
  reduction,       // reduce_sum, reduce_max
  gather_scatter,  // gather_rows, scatter_add_rows
  composite,       // attention, attention_grad, adamw: expanded before StableHLO export
  collective,      // all_reduce
};
// How an op takes part in a fused group (backend/plan/fusion.cpp).
enum class OpFuse : uint8_t {
  none,         // never a group member: a kernel of its own
  free,         // no kernel at all (filled once, or a view): constant, iota, reshape
  elementwise,  // a loop/row/col group member, computed at the element it writes
  strided,      // a loop group member reading its operand at other indices (broadcast_in_dim, transpose)
  gather,       // a loop group member of the output's geometry (gather_rows)
  reduce,       // a row/col group's reduction (reduce_sum, reduce_max)
  gemm,         // a gemm group with an elementwise epilogue (dot_general)
};

namespace op_table {
#define CAPSTEP_X(name, text, arity, kind, fuse, given, hlo) OpKind::kind,
inline constexpr OpKind kKind[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
#define CAPSTEP_X(name, text, arity, kind, fuse, given, hlo) OpFuse::fuse,
inline constexpr OpFuse kFuse[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
#define CAPSTEP_X(name, text, arity, kind, fuse, given, hlo) given,
inline constexpr bool kGivenType[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
#define CAPSTEP_X(name, text, arity, kind, fuse, given, hlo) hlo,
inline constexpr const char* kStablehlo[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
}  // namespace op_table

const char* op_name(Op op);
// The number of operands; -1: any number from 1 up (concatenate).
int op_arity(Op op);
Op parse_op(const std::string& s);            // throws on unknown
constexpr OpKind op_kind(Op op) { return op_table::kKind[static_cast<size_t>(op)]; }
constexpr OpFuse op_fuse(Op op) { return op_table::kFuse[static_cast<size_t>(op)]; }
// The StableHLO op a primitive lowers to (reduce_*: stablehlo.reduce with an
// add or max body); nullptr for the composites (attention, attention_grad,
// adamw), which export expands first.
constexpr const char* op_stablehlo_name(Op op) { return op_table::kStablehlo[static_cast<size_t>(op)]; }
// add..convert: unary, binary, compare, select, convert (same-shape operands)
constexpr bool is_elementwise(Op op) {
  const OpKind k = op_kind(op);
  return k == OpKind::unary || k == OpKind::binary || k == OpKind::compare || k == OpKind::select ||
         k == OpKind::convert;
}

// The unary and binary primitives as enums of their own, in table order, so
// that a switch over just them is exhaustive (the CUDA launchers take them).
enum class UnaryOp : uint8_t {
#define CAPSTEP_X(name, ...) name,
  CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
};
enum class BinaryOp : uint8_t {
#define CAPSTEP_X(name, ...) name,
  CAPSTEP_BINARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
};
// Each sub-table is one run of the main table (the conversions below subtract).
#define CAPSTEP_X(name, ...) \
  static_assert(static_cast<int>(Op::name) - static_cast<int>(Op::negate) == static_cast<int>(UnaryOp::name));
CAPSTEP_UNARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
#define CAPSTEP_X(name, ...) \
  static_assert(static_cast<int>(Op::name) - static_cast<int>(Op::add) == static_cast<int>(BinaryOp::name));
CAPSTEP_BINARY_OPS(CAPSTEP_X)
#undef CAPSTEP_X
// Requires op_kind(op) == OpKind::unary (resp. binary).
constexpr UnaryOp unary_op(Op op) { return static_cast<UnaryOp>(static_cast<int>(op) - static_cast<int>(Op::negate)); }
constexpr BinaryOp binary_op(Op op) { return static_cast<BinaryOp>(static_cast<int>(op) - static_cast<int>(Op::add)); }
constexpr Op op_of(UnaryOp u) { return static_cast<Op>(static_cast<int>(Op::negate) + static_cast<int>(u)); }
constexpr Op op_of(BinaryOp b) { return static_cast<Op>(static_cast<int>(Op::add) + static_cast<int>(b)); }

enum class Cmp : uint8_t { EQ, NE, LT, LE, GT, GE };
const char* cmp_name(Cmp c);                   // "EQ", ...
Cmp parse_cmp(const std::string& s);

// Operation semantics (operands in order):
//  constant()                      attrs.literal: 1 value (splat) or numel values,
//                                  stored as double (exact for f32, bf16, i32, i1)
//  iota()                          attrs.axis: values count along that axis
//  add/subtract/multiply/divide/maximum(a, b)   same type
//  negate/exponential/log/tanh/rsqrt/sqrt(a)    float types
//  compare(a, b) -> i1             attrs.cmp
//  select(pred i1, a, b)           pred has the shape of a and b
//  convert(a) -> out.dtype         float<->float, float<->int, i1->any
//  broadcast_in_dim(a)             attrs.dims[i] = output axis of operand axis i
//                                  (strictly increasing); operand dim is 1 or equal
//  reshape(a)                      same numel, row-major
//  transpose(a)                    attrs.dims = permutation; out[i] = in[perm[i]]
//  dot_general(a, b)               attrs.lhs_batch/rhs_batch/lhs_contract/rhs_contract;
//                                  result dims: batch, lhs free (in order), rhs free;
//                                  operands of one dtype; the result has it too,
//                                  except bf16 operands, whose result is f32 (an
//                                  f32 accumulation, as StableHLO's dot_general
//                                  with bf16 inputs and an f32 result)
//  reduce_sum/reduce_max(a)        attrs.dims = axes reduced (sorted, unique), removed
//                                  (bf16: accumulated in f32, rounded once at the end)
//  gather_rows(table[N,...], idx i32[S...]) -> [S..., ...]   out[s] = table[idx[s]]
//                                  index out of [0,N) is an error at run time
//  scatter_add_rows(operand[N,...], idx i32[S...], upd[S...,...]) -> operand type
//                                  out = operand; out[idx[s]] += upd[s]
//  attention(q, k, v) -> q type    causal scaled dot-product attention, one composite
//                                  primitive (capture never emits it; fuse_attention
//                                  in trace.h puts it in place of the traced pattern):
//                                  q, k, v float [B,H,T,Dh] of one type;
//                                  out[b,h,t] = sum_{s<=t} p[t,s] v[b,h,s] with
//                                  p[t,.] = softmax_{s<=t}(q[b,h,t].k[b,h,s] / sqrt(Dh))
//  attention_grad(q, k, v, out, dout) -> q type   attrs.axis: 0 dq, 1 dk, 2 dv of
//                                  attention at (q, k, v) for cotangent dout, where out
//                                  is attention(q, k, v): with dS = p * (dout.v^T - D),
//                                  D[t] = sum_d dout[t,d] out[t,d]:
//                                  dq = dS k / sqrt(Dh), dk = dS^T q / sqrt(Dh), dv = p^T dout.
//                                  It has no VJP (no second derivatives of attention).
//                                  StableHLO export expands both (expand_attention).
//  adamw(p, g, m, v, lr, bc1, bc2, decay) -> p type   one parameter's AdamW update,
//                                  one composite primitive (optim::with_adamw
//                                  writes three per parameter, capture never):
//                                  p, g, m, v f32 of one shape; lr, bc1, bc2,
//                                  decay f32[]; attrs.literal = {beta1, beta2, eps};
//                                  attrs.axis: 0 p', 1 m', 2 v' of
//                                  m' = m*beta1 + g*(1-beta1), v' = v*beta2 + g*g*(1-beta2),
//                                  p' = p*decay - lr*((m'*bc1) / (sqrt(v'*bc2) + eps)),
//                                  each operation rounded to f32 in that order.
//                                  It has no VJP. expand_adamw (trace.h) writes it
//                                  out as those plain equations: StableHLO export,
//                                  the GPU planner and the host's reference path
//                                  run that; the fused host runs each parameter's
//                                  three as one AdamW loop.
//  all_reduce(a) -> a's type       the sum of `a` over every replica of the run
//                                  (data parallelism). The replica count belongs
//                                  to the run, not to the program: one process
//                                  alone is one replica (the identity); the host
//                                  interpreter with a Communicator sums across
//                                  its ranks; StableHLO export names the count
//                                  (mhlo.num_replicas). Float types only.
//  slice(a)                        attrs.starts/limits/strides, one per axis:
//                                  out[i] = a[starts + i * strides]; result axis
//                                  d has ceil((limits[d] - starts[d]) / strides[d])
//                                  elements; 0 <= start <= limit <= size, stride >= 1
//  pad(a)                          attrs.lows/highs, one per axis, >= 0: a with
//                                  lows[d] zeros before and highs[d] after it along
//                                  each axis (StableHLO's pad with value 0, no
//                                  interior padding); the VJP of slice
//  concatenate(a, b, ...)          attrs.axis: the operands (one or more, one dtype,
//                                  equal sizes on every other axis) one after the
//                                  other along that axis
struct Attrs {
  std::vector<double> literal;      // constant; adamw: {beta1, beta2, eps}
  int64_t axis = 0;                  // iota, concatenate, attention_grad, adamw
  Cmp cmp = Cmp::EQ;                 // compare
  std::vector<int64_t> dims;         // broadcast_in_dim, transpose, reduce_*
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;  // dot_general
  std::vector<int64_t> starts, limits, strides;                          // slice
  std::vector<int64_t> lows, highs;                                      // pad
  // Any op: value_and_grad treats the result as a constant (no cotangent flows
  // through it; JAX's stop_gradient). The softmax's max shift carries it: the
  // shift cancels, so the gradient through it is zero in exact arithmetic and
  // only rounding noise in floating point; ordered_after's dependency too
  // (trace.h). Text form: no_grad=1.
  bool no_grad = false;
  // Any op: the checkpoint region (a transformer block's index, from 0, or
  // after the blocks a chunk of the loss's logits: nn::lm_loss_program) whose
  // forward recorded it (Tracer::set_region), or -1. Only
  // checkpoint_activations (transforms.h) reads it; no primitive's meaning
  // depends on it, so operator== and common-subexpression elimination ignore
  // it. Text form: region=N.
  int32_t region = -1;
  bool operator==(const Attrs& o) const;
};

// One equation: out = op(inputs...). Values are numbered densely in the Program.
struct Eqn {
  Op op;
  std::vector<int> inputs;          // value ids
  int out = -1;                      // value id
  Attrs attrs;
};

struct NamedValue {
  std::string name;
  int value = -1;
};

// Output `output` is the updated version of input `input`: a backend may write
// the output into the input's buffer (donation). StableHLO: tf.aliasing_output.
struct Alias {
  int output = -1;                   // index into Program::outputs
  int input = -1;                    // index into Program::inputs
  bool operator==(const Alias& o) const { return output == o.output && input == o.input; }
};

class Program {
 public:
  std::string name = "main";
  std::vector<Type> types;           // type of each value id
  std::vector<NamedValue> inputs;    // each input defines a value
  std::vector<Eqn> eqns;             // in an order where operands come first
  std::vector<NamedValue> outputs;   // any value (input, or equation output)
  std::vector<Alias> aliases;

  // Building helpers; they check types as they go (throw on error).
  int add_input(const std::string& name, const Type& t);
  int add_eqn(Op op, std::vector<int> inputs, Attrs attrs);  // infers type; returns value id
  int add_eqn_typed(Op op, std::vector<int> inputs, Attrs attrs, const Type& out);
  void add_output(const std::string& name, int value);

  int input_index(const std::string& name) const;    // -1 if none
  int output_index(const std::string& name) const;   // -1 if none
  const Type& type(int value) const { return types.at(static_cast<size_t>(value)); }
  const Type& input_type(int i) const { return type(inputs.at(static_cast<size_t>(i)).value); }
  const Type& output_type(int i) const { return type(outputs.at(static_cast<size_t>(i)).value); }
  int num_values() const { return static_cast<int>(types.size()); }
};

// The error every capstep check throws: a message a person can act on.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shape rule of one primitive: the output type for these operand types, or an
// Error naming the op and the shapes. Ops whose result type is part of the
// equation (has_given_type: constant, iota, convert, broadcast_in_dim, reshape)
// cannot be inferred: build them with Program::add_eqn_typed.
Type infer_type(Op op, const std::vector<Type>& operands, const Attrs& attrs);
constexpr bool has_given_type(Op op) { return op_table::kGivenType[static_cast<size_t>(op)]; }
// The axes of an operand of rank `rank` that are neither batch nor contracting
// dims of a dot_general, in order: its "free" axes, which appear in the result
// after the batch dims (lhs free, then rhs free).
std::vector<int64_t> dot_free_axes(int rank, const std::vector<int64_t>& batch,
                                   const std::vector<int64_t>& contract);
// Whether a constant's literal value v can be stored in dtype d (within range;
// f32 and f64 take NaN and infinities). check_type refuses a constant whose
// values do not fit, since storing them would be undefined behaviour.
bool literal_fits(double v, DType d);
// Checks a result type against the operands and attrs, for every op; throws
// Error naming the op and the shapes.
void check_type(Op op, const std::vector<Type>& operands, const Attrs& attrs, const Type& out);

// Checks the whole program: value ids in range and defined before use, every
// type valid (validate_type), each equation's type equal to its shape rule,
// names unique, aliases well typed.
// Throws Error naming the equation (index and text), the op and the shapes.
void verify(const Program& p);

// Human-readable, diffable text. One equation per line:
//   %5 = dot_general(%3, %4) {lhs_contract=[1], rhs_contract=[0]} : f32[4,64]
std::string to_text(const Program& p);
std::string eqn_text(const Program& p, const Eqn& e);
// The run-time error of gather_rows or scatter_add_rows equation `eqn` of p
// whose index array holds `value`, outside [0, rows of the table), at flat
// `position`: the op, the value, the position and its coordinates, the index
// array (and its input's name when it is a program input: cross_entropy's
// targets), the range and the equation. Every backend reports this text.
std::string index_error_text(const Program& p, int eqn, int64_t position, int64_t value);
// Reads what to_text writes (round trip is exact, constants included).
Program parse_text(const std::string& text);


}  // namespace capstep
