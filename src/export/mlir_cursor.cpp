// The StableHLO reader's cursor: tokens on demand, errors with line and column.
#include "export/mlir_cursor.h"

#include <cstring>

namespace capstep::stablehlo_detail {

namespace {
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_val(char c) { return is_digit(c) ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10); }

// Limits that keep a hostile file from overflowing shape arithmetic.
constexpr int kMaxRank = 32;
constexpr int64_t kMaxNumel = int64_t{1} << 40;
}  // namespace

void Cursor::fail(size_t at, const std::string& msg) const {
  if (at > s_.size()) at = s_.size();
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (s_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  throw Error("stablehlo:" + std::to_string(line) + ":" + std::to_string(col) + ": " + msg);
}

void Cursor::expected(const std::string& what) const {
  size_t p = pos_;
  if (p >= s_.size()) fail(p, "expected " + what + ", found end of input");
  std::string found;
  for (size_t i = p; i < s_.size() && found.size() < 20; ++i) {
    char c = s_[i];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') break;
    found += (c >= 0x20 && c < 0x7F) ? c : '?';
  }
  fail(p, "expected " + what + ", found '" + found + "'");
}

size_t Cursor::ws() {
  while (pos_ < s_.size()) {
    char c = s_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/') {
      while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
  return pos_;
}

bool Cursor::ident_char(char c) const { return is_alpha(c) || is_digit(c) || c == '$' || c == '.'; }

bool Cursor::accept(const char* lit) {
  ws();
  size_t n = std::strlen(lit);
  if (s_.compare(pos_, n, lit) != 0) return false;
  if (is_alpha(lit[0]) && pos_ + n < s_.size() && ident_char(s_[pos_ + n])) return false;
  pos_ += n;
  return true;
}

void Cursor::expect(const char* lit) {
  if (!accept(lit)) expected(std::string("'") + lit + "'");
}

std::string Cursor::ident() {
  ws();
  if (pos_ >= s_.size() || !is_alpha(s_[pos_])) expected("an identifier");
  size_t b = pos_;
  while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
  return s_.substr(b, pos_ - b);
}

std::string Cursor::ssa_name() {
  ws();
  if (pos_ >= s_.size() || s_[pos_] != '%') expected("a value name like %0");
  size_t b = ++pos_;
  if (pos_ < s_.size() && is_digit(s_[pos_])) {
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
  } else {
    auto suffix = [&](char c) { return is_alpha(c) || is_digit(c) || c == '$' || c == '.' || c == '-'; };
    if (pos_ >= s_.size() || !(is_alpha(s_[pos_]) || s_[pos_] == '$' || s_[pos_] == '.' || s_[pos_] == '-')) {
      --pos_;
      expected("a value name like %0");
    }
    while (pos_ < s_.size() && suffix(s_[pos_])) ++pos_;
  }
  return s_.substr(b, pos_ - b);
}

std::string Cursor::symbol() {
  expect("@");
  if (pos_ < s_.size() && s_[pos_] == '"') return string_lit();
  if (pos_ >= s_.size() || !is_alpha(s_[pos_])) expected("a symbol name after '@'");
  return ident();
}

std::string Cursor::string_lit() {
  ws();
  if (pos_ >= s_.size() || s_[pos_] != '"') expected("a string");
  size_t start = pos_++;
  std::string out;
  for (;;) {
    if (pos_ >= s_.size() || s_[pos_] == '\n') fail(start, "unterminated string");
    char c = s_[pos_++];
    if (c == '"') return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (pos_ >= s_.size()) fail(start, "unterminated string");
    char e = s_[pos_];
    if (e == '"' || e == '\\') {
      out += e;
      ++pos_;
    } else if (e == 'n') {
      out += '\n';
      ++pos_;
    } else if (e == 't') {
      out += '\t';
      ++pos_;
    } else if (pos_ + 1 < s_.size() && is_hex(e) && is_hex(s_[pos_ + 1])) {
      out += static_cast<char>(hex_val(e) * 16 + hex_val(s_[pos_ + 1]));
      pos_ += 2;
    } else {
      fail(pos_ - 1, "unknown escape in string (MLIR knows \\\" \\\\ \\n \\t and \\XX)");
    }
  }
}

int64_t Cursor::integer(int64_t lo, int64_t hi, const char* what) {
  ws();
  size_t b = pos_;
  bool neg = accept("-");
  if (pos_ >= s_.size() || !is_digit(s_[pos_])) {
    pos_ = b;
    expected(std::string("an integer (") + what + ")");
  }
  int64_t v = 0;
  while (pos_ < s_.size() && is_digit(s_[pos_])) {
    int d = s_[pos_++] - '0';
    if (v > (INT64_MAX - d) / 10) fail(b, std::string(what) + " is out of range");
    v = v * 10 + d;
  }
  if (neg) v = -v;
  if (v < lo || v > hi)
    fail(b, std::string(what) + " " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return v;
}

std::vector<int64_t> Cursor::int_list(int64_t lo, int64_t hi, const char* what) {
  expect("[");
  std::vector<int64_t> v;
  if (accept("]")) return v;
  do {
    if (v.size() >= 1024) fail(std::string("too many entries in ") + what);
    v.push_back(integer(lo, hi, what));
  } while (accept(","));
  expect("]");
  return v;
}

Type Cursor::tensor_type() {
  ws();
  size_t b = pos_;
  if (!accept("tensor")) expected("a tensor type like tensor<4x8xf32>");
  expect("<");
  Type t;
  int64_t numel = 1;
  // Dimensions: digits followed by 'x', as many as there are.
  while (pos_ < s_.size() && (is_digit(s_[pos_]) || s_[pos_] == '?')) {
    if (s_[pos_] == '?') fail("dynamic dimensions ('?') are not supported");
    size_t db = pos_;
    int64_t d = 0;
    while (pos_ < s_.size() && is_digit(s_[pos_])) {
      d = d * 10 + (s_[pos_++] - '0');
      if (d > kMaxNumel) fail(db, "dimension is too large");
    }
    if (pos_ >= s_.size() || s_[pos_] != 'x') expected("'x' after a dimension");
    ++pos_;
    if (static_cast<int>(t.shape.size()) >= kMaxRank) fail(db, "rank above 32 is not supported");
    if (d != 0 && numel > kMaxNumel / d) fail(db, "tensor has too many elements");
    numel *= d;
    t.shape.push_back(d);
  }
  size_t eb = pos_;
  std::string el;
  while (pos_ < s_.size() && (is_alpha(s_[pos_]) || is_digit(s_[pos_]))) el += s_[pos_++];
  if (el == "f32") t.dtype = DType::f32;
  else if (el == "f64") t.dtype = DType::f64;
  else if (el == "i32") t.dtype = DType::i32;
  else if (el == "i1") t.dtype = DType::i1;
  else if (el == "bf16") t.dtype = DType::bf16;
  else fail(eb, "unsupported element type '" + el + "' (capstep has f32, f64, bf16, i32 and i1)");
  if (pos_ >= s_.size() || s_[pos_] != '>') {
    if (pos_ < s_.size() && s_[pos_] == ',') fail("tensor encodings are not supported");
    expected("'>' closing the tensor type");
  }
  ++pos_;
  (void)b;
  return t;
}

void Cursor::skip_loc() {
  if (!accept("loc")) return;
  size_t start = pos_;
  expect("(");
  int depth = 1;
  while (depth > 0) {
    if (pos_ >= s_.size()) fail(start, "unterminated loc(...)");
    char c = s_[pos_];
    if (c == '"') {
      string_lit();
      continue;
    }
    if (c == '(') ++depth;
    if (c == ')') --depth;
    ++pos_;
  }
}

std::string Cursor::number_token() {
  ws();
  size_t b = pos_;
  if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
  if (pos_ >= s_.size() || !is_digit(s_[pos_])) {
    pos_ = b;
    expected("a number");
  }
  if (s_[pos_] == '0' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == 'x' || s_[pos_ + 1] == 'X')) {
    pos_ += 2;
    size_t hb = pos_;
    while (pos_ < s_.size() && is_hex(s_[pos_])) ++pos_;
    if (pos_ == hb) expected("hex digits after 0x");
    return s_.substr(b, pos_ - b);
  }
  while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
  if (pos_ < s_.size() && s_[pos_] == '.') {
    ++pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
  }
  if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) expected("digits in the exponent");
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
  }
  return s_.substr(b, pos_ - b);
}

}  // namespace capstep::stablehlo_detail
