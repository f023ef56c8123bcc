// Element types, shapes and the primitive table's names.
#include <cstring>
#include <iterator>
#include <sstream>

#include "capstep/ir.h"

namespace capstep {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i1: return "i1";
    case DType::bf16: return "bf16";
  }
  return "?";
}

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16; }

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "f64") return DType::f64;
  if (s == "i32") return DType::i32;
  if (s == "i1") return DType::i1;
  if (s == "bf16") return DType::bf16;
  throw Error("unknown dtype \"" + s + "\" (expected f32, f64, bf16, i32 or i1)");
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void validate_type(const Type& t, const std::string& what) {
  // The nonzero dimensions count even when a zero makes the tensor empty:
  // numel() multiplies in order, and a partial product must not overflow.
  int64_t n = static_cast<int64_t>(dtype_size(t.dtype));
  for (int64_t d : t.shape) {
    if (d < 0) throw Error(what + ": negative dimension in " + t.str());
    if (d != 0 && __builtin_mul_overflow(n, d, &n))
      throw Error(what + ": " + t.str() + " has more bytes than a 64-bit size can count");
  }
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}

std::string Type::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

namespace {
#define CAPSTEP_X(name, text, ...) text,
constexpr const char* kOpNames[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
#define CAPSTEP_X(name, text, arity, ...) arity,
constexpr int kOpArity[] = {CAPSTEP_PRIMITIVES(CAPSTEP_X)};
#undef CAPSTEP_X
}  // namespace

const char* op_name(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOpNames) ? kOpNames[i] : "?";
}

int op_arity(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOpArity) ? kOpArity[i] : -1;
}

Op parse_op(const std::string& s) {
#define CAPSTEP_X(name, text, ...) \
  if (s == text) return Op::name;
  CAPSTEP_PRIMITIVES(CAPSTEP_X)
#undef CAPSTEP_X
  throw Error("unknown primitive \"" + s + "\"");
}

static const char* const kCmpNames[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};

const char* cmp_name(Cmp c) { return kCmpNames[static_cast<int>(c)]; }

Cmp parse_cmp(const std::string& s) {
  for (int i = 0; i < 6; ++i)
    if (s == kCmpNames[i]) return static_cast<Cmp>(i);
  throw Error("unknown comparison direction \"" + s + "\" (expected EQ, NE, LT, LE, GT, GE)");
}

bool Attrs::operator==(const Attrs& o) const {
  // Literals compare bitwise so that -0.0 and NaN payloads count.
  if (literal.size() != o.literal.size()) return false;
  for (size_t i = 0; i < literal.size(); ++i)
    if (std::memcmp(&literal[i], &o.literal[i], sizeof(double)) != 0) return false;
  return axis == o.axis && cmp == o.cmp && dims == o.dims && lhs_batch == o.lhs_batch &&
         rhs_batch == o.rhs_batch && lhs_contract == o.lhs_contract && rhs_contract == o.rhs_contract && starts == o.starts &&
         limits == o.limits && strides == o.strides && lows == o.lows && highs == o.highs && no_grad == o.no_grad;
}

}  // namespace capstep
