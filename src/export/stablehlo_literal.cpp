// dense<...> literals: parsed as tokens first, converted once the type is known
// (MLIR writes the type after the value). Conversions follow MLIR's: decimals
// are read as double and rounded to f32 (bf16) for f32 (bf16); 0x... is the raw
// bit pattern.
#include "export/stablehlo_literal.h"

#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "ir/bf16.h"

namespace capstep::stablehlo_detail {

namespace {

constexpr int kMaxDepth = 32;  // nesting of [ ]; a tensor rank is at most 32 too

int hex_val(char c) { return c <= '9' ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10); }

DenseLiteral::Elem read_elem(Cursor& c) {
  DenseLiteral::Elem e;
  e.pos = c.ws();
  if (c.accept("true")) e.text = "true";
  else if (c.accept("false")) e.text = "false";
  else e.text = c.number_token();
  return e;
}

void read_list(Cursor& c, DenseLiteral& d, size_t depth, int& leaf_depth) {
  size_t open = c.ws();
  c.expect("[");
  if (depth >= kMaxDepth) c.fail(open, "dense literal nested deeper than 32 levels");
  int64_t n = 0;
  if (!c.accept("]")) {
    do {
      if (c.peek() == '[') {
        read_list(c, d, depth + 1, leaf_depth);
      } else {
        size_t at = c.ws();
        if (leaf_depth < 0) leaf_depth = static_cast<int>(depth);
        if (leaf_depth != static_cast<int>(depth)) c.fail(at, "dense literal mixes numbers and lists at one level");
        d.elems.push_back(read_elem(c));
      }
      ++n;
    } while (c.accept(","));
    c.expect("]");
  }
  if (d.list_shape.size() <= depth) {
    d.list_shape.resize(depth + 1, -1);
  }
  if (d.list_shape[depth] < 0) d.list_shape[depth] = n;
  else if (d.list_shape[depth] != n)
    c.fail(open, "dense literal is ragged: a list of " + std::to_string(n) + " where others have " +
                     std::to_string(d.list_shape[depth]));
}

// One element token as the value stored in Attrs::literal for dtype dt.
double elem_value(Cursor& c, const DenseLiteral::Elem& e, DType dt) {
  const std::string& s = e.text;
  if (s == "true" || s == "false") {
    if (dt != DType::i1) c.fail(e.pos, std::string("'") + s + "' is not a " + dtype_name(dt) + " value");
    return s == "true" ? 1.0 : 0.0;
  }
  bool neg = s[0] == '-';
  size_t b = neg ? 1 : 0;
  if (s.size() > b + 1 && (s[b + 1] == 'x' || s[b + 1] == 'X')) {
    // Hex: the bit pattern of the element.
    if (neg) c.fail(e.pos, "a hex element cannot be negative");
    size_t width = dt == DType::f64 ? 64 : (dt == DType::i1 ? 1 : (dt == DType::bf16 ? 16 : 32));
    uint64_t bits = 0;
    for (size_t i = b + 2; i < s.size(); ++i) {
      if (bits >> 60) c.fail(e.pos, "hex element " + s + " is wider than 64 bits");
      bits = bits * 16 + static_cast<uint64_t>(hex_val(s[i]));
    }
    if (width < 64 && (bits >> width) != 0)
      c.fail(e.pos, "hex element " + s + " does not fit in " + dtype_name(dt));
    switch (dt) {
      case DType::f32: return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits)));
      case DType::f64: return std::bit_cast<double>(bits);
      case DType::i32: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(bits)));
      case DType::i1: return static_cast<double>(bits);
      case DType::bf16: return static_cast<double>(bf16::to_float(static_cast<uint16_t>(bits)));
    }
  }
  bool integral = s.find_first_of(".eE") == std::string::npos;
  switch (dt) {
    case DType::f32:
    case DType::f64: {
      double v = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size())
        c.fail(e.pos, "float literal " + s + " is out of range for " + dtype_name(dt));
      if (dt == DType::f64) return v;
      float f = static_cast<float>(v);
      if (std::isinf(f)) c.fail(e.pos, "float literal " + s + " is out of range for f32");
      return static_cast<double>(f);
    }
    case DType::bf16: {
      double v = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      const double x = r.ec == std::errc() ? bf16::round_double(v) : 0.0;
      if (r.ec != std::errc() || r.ptr != s.data() + s.size() || std::isinf(x))
        c.fail(e.pos, "float literal " + s + " is out of range for bf16");
      return x;
    }
    case DType::i32:
    case DType::i1: {
      if (!integral) c.fail(e.pos, "'" + s + "' is not an integer, the element type is " + dtype_name(dt));
      int64_t v = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      int64_t lo = dt == DType::i1 ? 0 : std::numeric_limits<int32_t>::min();
      int64_t hi = dt == DType::i1 ? 1 : std::numeric_limits<int32_t>::max();
      if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi)
        c.fail(e.pos, "integer " + s + " is out of range for " + dtype_name(dt));
      return static_cast<double>(v);
    }
  }
  return 0;
}

}  // namespace

DenseLiteral read_dense(Cursor& c) {
  DenseLiteral d;
  d.pos = c.ws();
  c.expect("dense");
  c.expect("<");
  char next = c.peek();
  if (next == '"') {
    size_t at = c.ws();
    std::string s = c.string_lit();
    if (s.size() < 2 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || s.size() % 2 != 0)
      c.fail(at, "a dense hex string must be \"0x\" followed by pairs of hex digits");
    for (size_t i = 2; i < s.size(); i += 2) {
      if (!std::isxdigit(static_cast<unsigned char>(s[i])) || !std::isxdigit(static_cast<unsigned char>(s[i + 1])))
        c.fail(at, "a dense hex string must be \"0x\" followed by pairs of hex digits");
      d.bytes.push_back(static_cast<char>(hex_val(s[i]) * 16 + hex_val(s[i + 1])));
    }
    d.form = DenseLiteral::Form::hex;
  } else if (next == '[') {
    int leaf_depth = -1;
    read_list(c, d, 0, leaf_depth);
    d.form = DenseLiteral::Form::list;
  } else if (next == '>') {
    d.form = DenseLiteral::Form::empty;
  } else {
    d.elems.push_back(read_elem(c));
    d.form = DenseLiteral::Form::splat;
  }
  c.expect(">");
  return d;
}

std::vector<double> literal_values(Cursor& c, const DenseLiteral& d, const Type& t) {
  std::vector<double> out;
  switch (d.form) {
    case DenseLiteral::Form::splat:
      out.push_back(elem_value(c, d.elems[0], t.dtype));
      return out;
    case DenseLiteral::Form::empty:
      if (t.numel() != 0) c.fail(d.pos, "dense<> has no elements but " + t.str() + " has " + std::to_string(t.numel()));
      return out;
    case DenseLiteral::Form::list: {
      // The list's shape must be the type's; a scalar type has no list form.
      if (d.list_shape != t.shape)
        c.fail(d.pos, "dense literal has shape " + shape_str(d.list_shape) + " but the type is " + t.str());
      if (static_cast<int64_t>(d.elems.size()) != t.numel())
        c.fail(d.pos, "dense literal has " + std::to_string(d.elems.size()) + " elements for type " + t.str());
      out.reserve(d.elems.size());
      for (const auto& e : d.elems) out.push_back(elem_value(c, e, t.dtype));
      return out;
    }
    case DenseLiteral::Form::hex: {
      size_t size = dtype_size(t.dtype);
      size_t n = d.bytes.size() / size;
      if (d.bytes.size() % size != 0 || (n != 1 && static_cast<int64_t>(n) != t.numel()))
        c.fail(d.pos, "dense hex string has " + std::to_string(d.bytes.size()) + " bytes; " + t.str() + " needs " +
                          std::to_string(t.numel() * static_cast<int64_t>(size)) + " (or " + std::to_string(size) +
                          " for a splat)");
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        uint64_t bits = 0;
        for (size_t k = 0; k < size; ++k)
          bits |= static_cast<uint64_t>(static_cast<unsigned char>(d.bytes[i * size + k])) << (8 * k);
        switch (t.dtype) {
          case DType::f32: out.push_back(static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits)))); break;
          case DType::f64: out.push_back(std::bit_cast<double>(bits)); break;
          case DType::i32: out.push_back(static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(bits)))); break;
          case DType::bf16: out.push_back(static_cast<double>(bf16::to_float(static_cast<uint16_t>(bits)))); break;
          case DType::i1:
            if (bits > 1) c.fail(d.pos, "an i1 element in a hex string must be 00 or 01");
            out.push_back(static_cast<double>(bits));
            break;
        }
      }
      return out;
    }
  }
  return out;
}

}  // namespace capstep::stablehlo_detail
