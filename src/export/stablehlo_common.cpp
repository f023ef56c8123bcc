// Type spelling and exact constant text shared by the StableHLO writer and reader.
#include "export/stablehlo_common.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ir/bf16.h"

namespace capstep::stablehlo_detail {

std::string tensor_type(const Type& t) {
  std::string s = "tensor<";
  for (int64_t d : t.shape) s += std::to_string(d) + "x";
  s += dtype_name(t.dtype);
  s += ">";
  return s;
}

namespace {

// Scientific text of x with `digits` after the point ("1.000000e-01").
std::string sci(double x, int digits) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific, digits);
  return std::string(buf, r.ptr);
}

// What an MLIR parser reads back from `s` for an element of dtype d: the
// decimal is parsed as double, then rounded to f32 for f32 (MLIR does the same)
// and to bf16 for bf16.
bool reads_back_exactly(const std::string& s, DType d, double want) {
  double got = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), got);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return false;
  if (d == DType::bf16) return bf16::from_double(got) == bf16::from_double(want);
  if (d == DType::f32)
    return std::bit_cast<uint32_t>(static_cast<float>(got)) ==
           std::bit_cast<uint32_t>(static_cast<float>(want));
  return std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want);
}

std::string hex_bits(uint64_t bits, int nibbles) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llX", nibbles, static_cast<unsigned long long>(bits));
  return buf;
}

std::string float_text(DType d, double v) {
  if (d == DType::bf16) {
    const double x = bf16::round_double(v);
    if (!std::isfinite(x)) return hex_bits(bf16::from_double(v), 4);
    std::string s = sci(x, 6);
    if (reads_back_exactly(s, d, x)) return s;
    return sci(x, 16);  // never needed: 4 significant digits identify a bf16
  }
  bool f32 = d == DType::f32;
  if (!std::isfinite(f32 ? static_cast<double>(static_cast<float>(v)) : v)) {
    if (f32) return hex_bits(std::bit_cast<uint32_t>(static_cast<float>(v)), 8);
    return hex_bits(std::bit_cast<uint64_t>(v), 16);
  }
  double x = f32 ? static_cast<double>(static_cast<float>(v)) : v;
  std::string s = sci(x, 6);
  if (reads_back_exactly(s, d, x)) return s;
  // 9 significant digits identify every float, 17 every double.
  return sci(x, f32 ? 8 : 16);
}

}  // namespace

int32_t to_i32(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<int32_t>::min())) return std::numeric_limits<int32_t>::min();
  if (v >= static_cast<double>(std::numeric_limits<int32_t>::max())) return std::numeric_limits<int32_t>::max();
  return static_cast<int32_t>(v);
}

std::string element_text(DType d, double v) {
  switch (d) {
    case DType::f32:
    case DType::f64:
    case DType::bf16: return float_text(d, v);
    case DType::i32: return std::to_string(to_i32(v));
    case DType::i1: return v != 0 ? "true" : "false";
  }
  return "?";
}

void append_element_bytes(DType d, double v, std::string& out) {
  uint64_t bits = 0;
  size_t n = dtype_size(d);
  switch (d) {
    case DType::f32: bits = std::bit_cast<uint32_t>(static_cast<float>(v)); break;
    case DType::f64: bits = std::bit_cast<uint64_t>(v); break;
    case DType::i32: bits = static_cast<uint32_t>(to_i32(v)); break;
    case DType::i1: bits = v != 0 ? 1 : 0; break;
    case DType::bf16: bits = bf16::from_double(v); break;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

const char* simple_op_name(Op op) {
  const OpKind k = op_kind(op);
  return k == OpKind::unary || k == OpKind::binary ? op_stablehlo_name(op) : nullptr;
}

const char* compare_type(DType d) {
  switch (d) {
    case DType::f32: case DType::f64: case DType::bf16: return "FLOAT";
    case DType::i32: return "SIGNED";
    case DType::i1: return "UNSIGNED";
  }
  return "?";
}

double reduce_init(Op op, DType d) {
  if (op != Op::reduce_max) return 0.0;
  switch (d) {
    case DType::f32: case DType::f64: case DType::bf16: return -std::numeric_limits<double>::infinity();
    case DType::i32: return static_cast<double>(std::numeric_limits<int32_t>::min());
    case DType::i1: return 0.0;
  }
  return 0.0;
}

}  // namespace capstep::stablehlo_detail
