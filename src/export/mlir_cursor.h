// A character cursor over MLIR text for the StableHLO reader: skips blanks and
// comments, reads the few token kinds the exporter's subset uses, and reports
// every failure as capstep::Error "stablehlo:LINE:COLUMN: message".
//
// MLIR lexes context-dependently (tensor<4x8xf32> is not "4", "x8xf32"), so the
// parser asks for the token kind it expects instead of reading a token stream.
// Every read either consumes input or throws, so no loop over it can spin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "capstep/ir.h"

namespace capstep::stablehlo_detail {

class Cursor {
 public:
  explicit Cursor(const std::string& text) : s_(text) {}

  [[noreturn]] void fail(size_t at, const std::string& msg) const;
  [[noreturn]] void fail(const std::string& msg) const { fail(pos_, msg); }
  // "expected X, found 'next'".
  [[noreturn]] void expected(const std::string& what) const;

  size_t pos() const { return pos_; }
  // Skips blanks and // comments; returns the position of what follows.
  size_t ws();
  bool at_end() { return ws() >= s_.size(); }
  char peek() { ws(); return pos_ < s_.size() ? s_[pos_] : '\0'; }

  // Punctuation or a keyword. A keyword (starting with a letter) matches only
  // where the identifier there is exactly it ("x" does not match "x8").
  bool accept(const char* lit);
  void expect(const char* lit);

  std::string ident();                  // [A-Za-z_][A-Za-z0-9_$.]*
  std::string ssa_name();               // %0, %arg3, %init_2 -> "0", "arg3", ...
  std::string symbol();                 // @main -> "main"; @"quoted" too
  std::string string_lit();             // "..." with MLIR escapes
  int64_t integer(int64_t lo, int64_t hi, const char* what);  // decimal, range-checked
  std::vector<int64_t> int_list(int64_t lo, int64_t hi, const char* what);  // [1, 2]
  Type tensor_type();                   // tensor<4x8xf32>
  // Skips "loc(...)" with balanced parentheses and strings, when present.
  void skip_loc();
  // The raw text of a number token: -?(0x[0-9a-fA-F]+ | digits[.digits][e[+-]digits]).
  std::string number_token();

 private:
  bool ident_char(char c) const;
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace capstep::stablehlo_detail
