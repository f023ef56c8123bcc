// The byte-level BPE model (bytelevel.h) as its two halves share it:
// bytelevel.cpp reads it from tokenizer.json or vocab.json + merges.txt,
// bytelevel_encode.cpp cuts text and merges the pieces. Private to src/data.
// Both halves compile with the same CAPSTEP_HAVE_PCRE2 / CAPSTEP_HAVE_UTF8PROC
// definitions (CMakeLists.txt), so that SplitRegex is one type.
#pragma once

#include "bytelevel.h"

#if defined(CAPSTEP_HAVE_PCRE2)
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace capstep::data {

// A compiled regex of a Split pre-tokenizer (PCRE2's code, JIT-compiled when
// the platform has a JIT).
struct SplitRegex {
#if defined(CAPSTEP_HAVE_PCRE2)
  pcre2_code* code = nullptr;
  ~SplitRegex() {
    if (code) pcre2_code_free(code);
  }
#endif
};

// How a Split pre-tokenizer treats the matches: `tokenizers`'
// SplitDelimiterBehavior, in its order of names.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// One pre-tokenizer of the sequence.
struct PreStep {
  enum Kind { split, digits, byte_level } kind = byte_level;
  std::shared_ptr<const SplitRegex> regex;   // split
  std::string pattern;                       // split: its text
  bool pattern_regex = true;                 // split: pattern {"Regex": ...}, else {"String": ...}
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;                       // split: the pieces between matches are the matches
  bool individual_digits = false;            // digits
  bool add_prefix_space = false;             // byte_level
  bool use_regex = true;                     // byte_level: GPT-2's regex
};

// One of tokenizer.json's added_tokens.
struct AddedTokenSpec {
  std::string content;
  int32_t id = 0;
  bool special = false, normalized = false;
};

struct ByteLevelModel {
  std::vector<std::string> bytes;                  // id -> the bytes it stands for
  std::unordered_map<std::string, int32_t> id_of;  // bytes -> id (tokens of the byte alphabet only)
  std::array<int32_t, 256> byte_id{};              // the token of each single byte
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool ignore_merges = false;   // a piece that is a token is taken whole (model.ignore_merges)
  bool nfc = false;             // normalizer NFC
  std::vector<PreStep> pre;     // the pre-tokenizers, in order
  bool gpt2 = true;             // pre is ByteLevel with GPT-2's regex alone, and no normalizer
  std::vector<AddedTokenSpec> added;   // added_tokens, as listed
  std::string json;             // bytelevel_json
};

namespace bytelevel_detail {

enum class CharClass { letter, number, space, other };

// One character of the text: its first byte, its length in bytes, its code
// point (0xFFFFFFFF for a byte that is not valid UTF-8) and class.
struct Char {
  size_t at, len;
  uint32_t cp;
  CharClass cls;
};

// The character at t[i]: its length in bytes and code point; a byte that does
// not start valid UTF-8 is a character of length 1 with code point 0xFFFFFFFF. (bytelevel_encode.cpp)
size_t char_at(std::string_view t, size_t i, uint32_t* code_point);

// The class of a valid code point: Unicode's White_Space, \p{L}, \p{N} or
// other (bytelevel_encode.cpp).
CharClass class_of(uint32_t cp);

// The characters of `t` in order (bytelevel_encode.cpp).
std::vector<Char> characters(std::string_view t);

// Calls piece(begin, end) with the character ranges GPT-2's regex matches, in order.
template <class Piece>
void pretokenize(const std::vector<Char>& ch, Piece&& piece) {
  const size_t n = ch.size();
  auto run = [&](size_t from, CharClass c) {
    while (from < n && ch[from].cls == c) ++from;
    return from;
  };
  for (size_t i = 0; i < n;) {
    const Char& c = ch[i];
    // 's|'t|'re|'ve|'m|'ll|'d (case as written)
    if (c.cp == '\'' && i + 1 < n) {
      const uint32_t a = ch[i + 1].cp, b = i + 2 < n ? ch[i + 2].cp : 0;
      size_t len = 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') len = 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) len = 3;
      if (len) {
        piece(i, i + len);
        i += len;
        continue;
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': the optional space is U+0020 alone.
    const size_t body = c.cp == ' ' && i + 1 < n && ch[i + 1].cls != CharClass::space ? i + 1 : i;
    if (ch[body].cls != CharClass::space) {
      const size_t end = run(body, ch[body].cls);
      piece(i, end);
      i = end;
      continue;
    }
    // '\s+(?!\S)': a run of spaces but its last one when a non-space follows
    // (that one starts the next piece, ' ?\p{L}+' say); '\s+' when the run is
    // a single space before a non-space.
    const size_t end = run(i, CharClass::space);
    const size_t stop = end == n || end - i == 1 ? end : end - 1;
    piece(i, stop);
    i = stop;
  }
}

}  // namespace bytelevel_detail

}  // namespace capstep::data
