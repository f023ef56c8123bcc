// The byte-level BPE tokenizer of GPT-2 (and of the many models that reuse
// its scheme), as Hugging Face's `tokenizers` runs it: the text is cut by
// GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (implemented by hand below: \p{L} and \p{N} from the generated table
// unicode_classes.inc, \s as Unicode's White_Space), each piece's bytes start
// as one token each, and the adjacent pair of the lowest merge rank is merged
// until no pair has a merge. The tokens are written in GPT-2's byte alphabet
// (bytes_to_unicode: a printable byte stands for itself, the others for
// U+0100 + their rank), so here every token is held as the bytes it stands
// for, and decoding is their concatenation: exact for any bytes.
//
// Other models' tokenizer.json put more before the BPE (Llama 3's, Qwen2's,
// SmolLM2's): an NFC normalizer (utf8proc), a Sequence of pre-tokenizers
// (Split by a regex of their own, run by PCRE2 in UTF mode with Unicode
// properties; Digits; ByteLevel with or without GPT-2's regex and with a
// prefix space), and added tokens that the text is cut at before any of it
// (never split by the BPE). The model keeps those steps and runs them in the
// order of the `tokenizers` library; GPT-2's own file (ByteLevel alone, no
// normalizer, no added token to find) keeps its faster path of parts.
#include "bytelevel.h"
#include "json.h"

#if defined(CAPSTEP_HAVE_PCRE2)
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif
#if defined(CAPSTEP_HAVE_UTF8PROC)
#include <utf8proc.h>
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

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

namespace {

struct Range {
  uint32_t lo, hi;
  int cls;
};
constexpr Range kClasses[] = {
#include "unicode_classes.inc"
};

enum class CharClass { letter, number, space, other };

bool white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

CharClass class_of(uint32_t cp) {
  if (white_space(cp)) return CharClass::space;
  const Range* end = kClasses + sizeof kClasses / sizeof kClasses[0];
  const Range* r = std::upper_bound(kClasses, end, cp, [](uint32_t c, const Range& x) { return c < x.lo; });
  if (r == kClasses || cp > (r - 1)->hi) return CharClass::other;
  return (r - 1)->cls == 1 ? CharClass::letter : CharClass::number;
}

// One character of the text: its first byte, its length in bytes, its code
// point (0xFFFFFFFF for a byte that is not valid UTF-8) and class.
struct Char {
  size_t at, len;
  uint32_t cp;
  CharClass cls;
};

// The character at t[i]: its length in bytes and code point; a byte that does
// not start valid UTF-8 is a character of length 1 with code point 0xFFFFFFFF.
size_t char_at(std::string_view t, size_t i, uint32_t* code_point) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    *code_point = c;
    return 1;
  }
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  bool ok = n != 0 && i + n <= t.size();
  for (size_t k = 1; ok && k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(t[i + k]);
    ok = (d & 0xC0) == 0x80;
    cp = (cp << 6) | (d & 0x3F);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  ok = ok && cp >= least[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  *code_point = ok ? cp : 0xFFFFFFFFu;
  return ok ? n : 1;
}

std::vector<Char> characters(std::string_view t) {
  std::vector<Char> out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    uint32_t cp = 0;
    const size_t n = char_at(t, i, &cp);
    out.push_back({i, n, cp, cp == 0xFFFFFFFFu ? CharClass::other : class_of(cp)});
    i += n;
  }
  return out;
}

uint64_t count_characters(std::string_view t) {
  uint64_t count = 0;
  uint32_t cp = 0;
  for (size_t i = 0; i < t.size(); ++count) i += static_cast<unsigned char>(t[i]) < 0x80 ? 1 : char_at(t, i, &cp);
  return count;
}

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

// GPT-2's bytes_to_unicode: the code point standing for each byte.
std::array<uint32_t, 256> byte_alphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t k = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : 256 + k++;
  }
  return cp;
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else if (cp < 0x800) s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  else s += static_cast<char>(0xE0 | (cp >> 12)), s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
       s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// A token's text in the byte alphabet -> the bytes it stands for; false when
// a character is outside the alphabet (an added token such as "<pad>" made
// of other characters is its own text).
bool alphabet_bytes(const std::string& token, std::string* out) {
  static const std::map<uint32_t, unsigned char> to_byte = [] {
    std::map<uint32_t, unsigned char> m;
    const std::array<uint32_t, 256> cp = byte_alphabet();
    for (uint32_t b = 0; b < 256; ++b) m[cp[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  out->clear();
  for (const Char& c : characters(token)) {
    auto it = to_byte.find(c.cp);
    if (it == to_byte.end()) return false;
    *out += static_cast<char>(it->second);
  }
  return true;
}

std::string bytes_as_alphabet(const std::string& bytes) {
  static const std::array<uint32_t, 256> cp = byte_alphabet();
  std::string s;
  for (char b : bytes) s += utf8_of(cp[static_cast<unsigned char>(b)]);
  return s;
}

// What a tokenizer.json adds to the vocabulary and the merges.
struct Extras {
  std::vector<AddedTokenSpec> added;
  bool ignore_merges = false;
  bool nfc = false;
  std::vector<PreStep> pre;   // empty: GPT-2's ByteLevel alone
};

nlohmann::json step_json(const PreStep& p) {
  static const char* const behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  switch (p.kind) {
    case PreStep::split:
      return {{"type", "Split"},
              {"pattern", {{p.pattern_regex ? "Regex" : "String", p.pattern}}},
              {"behavior", behaviors[static_cast<int>(p.behavior)]},
              {"invert", p.invert}};
    case PreStep::digits: return {{"type", "Digits"}, {"individual_digits", p.individual_digits}};
    case PreStep::byte_level:
      return {{"type", "ByteLevel"}, {"add_prefix_space", p.add_prefix_space}, {"trim_offsets", true},
              {"use_regex", p.use_regex}};
  }
  return nullptr;
}

// The model from the vocabulary, the merges (by rank, each two tokens) and
// the extras (added tokens outside the vocabulary get their ids); Errors
// prefixed by the field or file names given.
std::shared_ptr<const ByteLevelModel> build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                            const std::vector<std::pair<std::string, std::string>>& merges,
                                            Extras extras, const std::string& vocab_field,
                                            const std::string& merges_field) {
  auto m = std::make_shared<ByteLevelModel>();
  const bool ignore_merges = extras.ignore_merges;
  m->ignore_merges = ignore_merges;
  m->nfc = extras.nfc;
  if (extras.pre.empty()) extras.pre.push_back(PreStep{});
  m->pre = extras.pre;
  m->gpt2 = !m->nfc && m->pre.size() == 1 && m->pre[0].kind == PreStep::byte_level && m->pre[0].use_regex &&
            !m->pre[0].add_prefix_space;
  m->added = extras.added;
  int64_t size = 0;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= (int64_t{1} << 24))
      throw Error(vocab_field + ": token '" + token + "' has id " + std::to_string(id) + ", outside [0, 2^24)");
    size = std::max(size, id + 1);
  }
  for (const AddedTokenSpec& a : m->added) size = std::max(size, int64_t{a.id} + 1);
  if (size == 0) throw Error(vocab_field + " is empty");
  m->bytes.assign(static_cast<size_t>(size), std::string());
  std::vector<bool> seen(static_cast<size_t>(size), false);
  std::string b;
  for (const auto& [token, id] : vocab) {
    if (seen[static_cast<size_t>(id)])
      throw Error(vocab_field + ": id " + std::to_string(id) + " is given to two tokens (one is '" + token + "')");
    seen[static_cast<size_t>(id)] = true;
    if (alphabet_bytes(token, &b)) {
      m->bytes[static_cast<size_t>(id)] = b;
      m->id_of.emplace(b, static_cast<int32_t>(id));
    } else {
      m->bytes[static_cast<size_t>(id)] = token;   // not made from the text's bytes: decodes as written
    }
  }
  // An added token that is the vocabulary's token of its id (the same text:
  // GPT-2's "<|endoftext|>") decodes as that token; any other decodes as its
  // text as written, so that a text holding it comes back exactly. (The
  // `tokenizers` library passes an added token's characters through the byte
  // alphabet when they all are in it: the same bytes for the printable ASCII
  // of the usual "<|...|>" names; for "café" it would give a byte 0xE9.)
  std::map<int64_t, const std::string*> key_of;
  for (const auto& [token, id] : vocab) key_of[id] = &token;
  for (const AddedTokenSpec& a : m->added) {
    auto k = key_of.find(a.id);
    if (k == key_of.end() || *k->second != a.content) m->bytes[static_cast<size_t>(a.id)] = a.content;
  }
  for (int c = 0; c < 256; ++c) {
    auto it = m->id_of.find(std::string(1, static_cast<char>(c)));
    if (it == m->id_of.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw Error(vocab_field + " has no token for the byte " + hex + " ('" +
                  bytes_as_alphabet(std::string(1, static_cast<char>(c))) +
                  "'): a text holding it could not be encoded (capstep needs all 256 bytes)");
    }
    m->byte_id[static_cast<size_t>(c)] = it->second;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [l, rt] = merges[r];
    std::string lb, rb;
    auto id = [&](const std::string& tok, std::string* bytes) -> int32_t {
      if (!alphabet_bytes(tok, bytes)) return -1;
      auto it = m->id_of.find(*bytes);
      return it == m->id_of.end() ? -1 : it->second;
    };
    const int32_t li = id(l, &lb), ri = id(rt, &rb);
    auto merged = m->id_of.find(lb + rb);
    if (li < 0 || ri < 0 || merged == m->id_of.end())
      throw Error(merges_field + ": merge " + std::to_string(r) + " '" + l + " " + rt + "': " +
                  (li < 0 ? "'" + l + "'" : ri < 0 ? "'" + rt + "'" : "'" + l + rt + "'") + " is not in the vocabulary");
    const uint64_t key = static_cast<uint64_t>(li) << 32 | static_cast<uint32_t>(ri);
    m->merges.emplace(key, std::make_pair(static_cast<int32_t>(r), merged->second));   // the first rank wins
  }
  // The canonical tokenizer.json.
  nlohmann::json v = nlohmann::json::object();
  for (const auto& [token, id] : vocab) v[token] = id;
  nlohmann::json ms = nlohmann::json::array();
  for (const auto& [l, r] : merges) ms.push_back(l + " " + r);
  nlohmann::json at = nlohmann::json::array();
  for (const AddedTokenSpec& a : m->added)
    at.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                  {"normalized", a.normalized}, {"special", a.special}});
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::json pre_json;
  if (m->pre.size() == 1) {
    pre_json = step_json(m->pre[0]);
  } else {
    pre_json = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
    for (const PreStep& p : m->pre) pre_json["pretokenizers"].push_back(step_json(p));
  }
  const nlohmann::json j = {{"version", "1.0"},
                            {"truncation", nullptr},
                            {"padding", nullptr},
                            {"added_tokens", at},
                            {"normalizer", m->nfc ? nlohmann::json{{"type", "NFC"}} : nlohmann::json()},
                            {"pre_tokenizer", pre_json},
                            {"post_processor", nullptr},
                            {"decoder", byte_level},
                            {"model",
                             {{"type", "BPE"},
                              {"dropout", nullptr},
                              {"unk_token", nullptr},
                              {"continuing_subword_prefix", nullptr},
                              {"end_of_word_suffix", nullptr},
                              {"fuse_unk", false},
                              {"byte_fallback", false},
                              {"ignore_merges", ignore_merges},
                              {"vocab", v},
                              {"merges", ms}}}};
  m->json = j.dump() + "\n";
  return m;
}

// o[key] (o holds it) when it is of the type wanted (number_float: any
// number); Error naming the field and the type found otherwise.
const nlohmann::json& typed(const nlohmann::json& o, const char* key, const std::string& field,
                            nlohmann::json::value_t want, const char* want_name) {
  const nlohmann::json& v = o.at(key);
  const bool ok = want == nlohmann::json::value_t::number_float ? v.is_number() : v.type() == want;
  if (!ok) {
    const std::string found = v.type_name();
    throw Error(field + " is " + (v.is_null() ? "null" : (v.is_object() || v.is_array() ? "an " : "a ") + found) +
                ", not " + want_name);
  }
  return v;
}
// The same for a string or a boolean, `fallback` when o has no such key.
std::string string_field(const nlohmann::json& o, const char* key, const std::string& field, const std::string& fallback) {
  if (!o.contains(key)) return fallback;
  return typed(o, key, field, nlohmann::json::value_t::string, "a string").get<std::string>();
}
bool bool_field(const nlohmann::json& o, const char* key, const std::string& field, bool fallback) {
  if (!o.contains(key)) return fallback;
  return typed(o, key, field, nlohmann::json::value_t::boolean, "a boolean").get<bool>();
}

bool null_or_empty(const nlohmann::json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

// BPE on one piece's bytes: the pair of the lowest rank is merged, at every
// place it occurs from the left, until no adjacent pair has a merge. The
// pieces are a list linked through `next` and `prev` (a merged right part
// drops out: its id is -1), the pairs with a merge a heap by (rank,
// position): all the places of the lowest rank are taken off at once and
// merged from the left, each checked against the list as it is then (a place
// whose pair a merge has changed is passed over), and a merge puts its new
// pairs on the heap.
void merge_piece(const ByteLevelModel& m, std::string_view piece, std::vector<int32_t>& ids) {
  ids.clear();
  if (m.ignore_merges) {
    auto it = m.id_of.find(std::string(piece));
    if (it != m.id_of.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  for (char c : piece) ids.push_back(m.byte_id[static_cast<unsigned char>(c)]);
  const size_t n = ids.size();
  if (n < 2) return;
  constexpr size_t none = SIZE_MAX;
  std::vector<size_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) next[i] = i + 1 < n ? i + 1 : none, prev[i] = i > 0 ? i - 1 : none;
  // The merge of the pair that starts at i: (rank, merged id), or null.
  auto merge_at = [&](size_t i) -> const std::pair<int32_t, int32_t>* {
    if (next[i] == none) return nullptr;
    auto it = m.merges.find(static_cast<uint64_t>(ids[i]) << 32 | static_cast<uint32_t>(ids[next[i]]));
    return it == m.merges.end() ? nullptr : &it->second;
  };
  struct Place {
    int32_t rank;
    size_t at;
  };
  auto later = [](const Place& a, const Place& b) { return a.rank != b.rank ? a.rank > b.rank : a.at > b.at; };
  std::vector<Place> heap;
  auto push = [&](size_t i) {
    if (const auto* g = merge_at(i)) {
      heap.push_back({g->first, i});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<size_t> places;
  while (!heap.empty()) {
    // Every place of the lowest rank, from the left: one pass of the rule
    // above. A merge's new pairs are never of this rank (the merged id is
    // neither of its parts), so none of them belongs to this pass.
    const int32_t rank = heap.front().rank;
    places.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      places.push_back(heap.front().at);
      std::pop_heap(heap.begin(), heap.end(), later);
      heap.pop_back();
    }
    for (size_t i : places) {
      if (ids[i] < 0) continue;
      const auto* g = merge_at(i);
      if (g == nullptr || g->first != rank) continue;
      const size_t j = next[i];
      ids[i] = g->second;
      ids[j] = -1;
      next[i] = next[j];
      if (next[j] != none) prev[next[j]] = i;
      if (prev[i] != none) push(prev[i]);
      push(i);
    }
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

#if defined(CAPSTEP_HAVE_PCRE2)
std::shared_ptr<const SplitRegex> compile_split(const std::string& pattern, bool regex, const std::string& field) {
  int code = 0;
  PCRE2_SIZE at = 0;
  // UTF mode with Unicode properties for \p{..}, \s, \w; a byte that is not
  // valid UTF-8 matches nothing (the text may hold any bytes).
  // (A literal string takes neither \p nor PCRE2_UCP.)
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (regex ? PCRE2_UCP : PCRE2_LITERAL);
  auto r = std::make_shared<SplitRegex>();
  r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &code, &at, nullptr);
  if (r->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(code, message, sizeof message);
    throw Error(field + " \"" + pattern + "\" does not compile (PCRE2, at offset " + std::to_string(at) +
                "): " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);   // without a JIT it runs interpreted
  return r;
}
#endif

bool have_split_regex() {
#if defined(CAPSTEP_HAVE_PCRE2)
  return true;
#else
  return false;
#endif
}

bool have_nfc() {
#if defined(CAPSTEP_HAVE_UTF8PROC)
  return true;
#else
  return false;
#endif
}

// The normalizer: null, NFC or a Sequence of those; true for NFC.
bool read_normalizer(const nlohmann::json& n, const std::string& field) {
  if (n.is_null()) return false;
  if (!n.is_object()) throw Error(field + " is " + n.dump() + ", not an object or null");
  const std::string type = string_field(n, "type", field + ".type", "");
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) throw Error(field + ".normalizers is not an array");
    bool nfc = false;
    for (size_t i = 0; i < n["normalizers"].size(); ++i)
      nfc = read_normalizer(n["normalizers"][i], field + ".normalizers[" + std::to_string(i) + "]") || nfc;
    return nfc;
  }
  if (type != "NFC")
    throw Error(field + ".type is \"" + type + "\"; capstep reads no normalizer, NFC, or a Sequence of NFC");
  if (!have_nfc())
    throw Error(field + " is NFC, and this capstep was built without utf8proc (Debian: libutf8proc-dev), which "
                "it normalizes with");
  return true;
}

// The pre-tokenizer `p` (a Sequence flattened) appended to `out`.
void read_pre_tokenizer(const nlohmann::json& p, const std::string& field, std::vector<PreStep>& out) {
  if (!p.is_object()) throw Error(field + " is " + p.dump() + ", not an object");
  const std::string type = string_field(p, "type", field + ".type", "");
  PreStep s;
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      throw Error(field + ".pretokenizers is not an array");
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      read_pre_tokenizer(p["pretokenizers"][i], field + ".pretokenizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = PreStep::byte_level;
    s.add_prefix_space = bool_field(p, "add_prefix_space", field + ".add_prefix_space", false);
    s.use_regex = bool_field(p, "use_regex", field + ".use_regex", true);
  } else if (type == "Digits") {
    s.kind = PreStep::digits;
    s.individual_digits = bool_field(p, "individual_digits", field + ".individual_digits", false);
  } else if (type == "Split") {
    s.kind = PreStep::split;
    if (!p.contains("pattern") || !p["pattern"].is_object() || p["pattern"].size() != 1)
      throw Error(field + ".pattern is not {\"Regex\": ...} or {\"String\": ...}");
    const auto it = p["pattern"].begin();
    if ((it.key() != "Regex" && it.key() != "String") || !it.value().is_string())
      throw Error(field + ".pattern is " + p["pattern"].dump() + ", not {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    s.pattern_regex = it.key() == "Regex";
    s.pattern = it.value().get<std::string>();
    const std::string behavior = string_field(p, "behavior", field + ".behavior", "");
    static const char* const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const auto* b = std::find(std::begin(names), std::end(names), behavior);
    if (b == std::end(names))
      throw Error(field + ".behavior is \"" + behavior +
                  "\"; it is one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    s.behavior = static_cast<SplitBehavior>(b - std::begin(names));
    s.invert = bool_field(p, "invert", field + ".invert", false);
#if defined(CAPSTEP_HAVE_PCRE2)
    s.regex = compile_split(s.pattern, s.pattern_regex, field + ".pattern");
#else
    throw Error(field + " is a Split by a regex, and this capstep was built without PCRE2 (Debian: libpcre2-dev), "
                "which it runs those with");
#endif
  } else {
    throw Error(field + ".type is \"" + type +
                "\"; capstep reads the pre-tokenizers ByteLevel, Split, Digits and a Sequence of them");
  }
  out.push_back(std::move(s));
}

std::shared_ptr<const ByteLevelModel> from_tokenizer_json(const std::string& text) {
  const nlohmann::json j = parse_json(text, "");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) throw Error("no object \"model\"");
  const nlohmann::json& model = j["model"];
  const std::string type = string_field(model, "type", "model.type", "");
  if (type != "BPE")
    throw Error("model.type is \"" + type + "\"; capstep reads a byte-level BPE (\"BPE\", GPT-2's) from tokenizer.json");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!null_or_empty(model, k)) throw Error(std::string("model.") + k + " is set; a byte-level BPE has none");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      typed(model, "dropout", "model.dropout", nlohmann::json::value_t::number_float, "a number").get<double>() != 0)
    throw Error("model.dropout is set; capstep's encoding is the deterministic one");
  Extras extras;
  extras.nfc = read_normalizer(j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), "normalizer");
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
    throw Error("pre_tokenizer is missing; a byte-level BPE has ByteLevel (GPT-2's byte alphabet) last");
  read_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", extras.pre);
  for (size_t i = 0; i < extras.pre.size(); ++i)
    if ((extras.pre[i].kind == PreStep::byte_level) != (i + 1 == extras.pre.size()))
      throw Error("pre_tokenizer " + j["pre_tokenizer"].dump() +
                  " does not end in one ByteLevel (GPT-2's byte alphabet), which capstep's byte-level BPE needs last");
  if (!model.contains("vocab") || !model["vocab"].is_object()) throw Error("model.vocab is not an object");
  std::vector<std::pair<std::string, int64_t>> vocab;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) throw Error("model.vocab: token '" + it.key() + "' has no integer id");
    vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges")) {
    if (!model["merges"].is_array()) throw Error("model.merges is not an array");
    for (const nlohmann::json& e : model["merges"]) {
      // "a b" (older files) or ["a", "b"] (tokenizers 0.20 on).
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw Error("model.merges: \"" + s + "\" is not two tokens");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        throw Error("model.merges: " + e.dump() + " is not two tokens");
      }
    }
  }
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) throw Error("added_tokens is not an array");
    std::map<int64_t, size_t> ids;
    for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const nlohmann::json& a = j["added_tokens"][i];
      const std::string f = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) throw Error(f + " is not an object");
      if (!a.contains("id") || !a["id"].is_number_integer()) throw Error(f + ".id is not an integer");
      if (!a.contains("content") || !a["content"].is_string()) throw Error(f + ".content is not a string");
      AddedTokenSpec t;
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 24)) throw Error(f + ".id " + std::to_string(id) + " is outside [0, 2^24)");
      if (!ids.emplace(id, i).second)
        throw Error(f + ".id " + std::to_string(id) + " is also added_tokens[" + std::to_string(ids[id]) + "]'s");
      t.id = static_cast<int32_t>(id);
      t.content = a["content"].get<std::string>();
      if (t.content.empty()) throw Error(f + ".content is empty");
      t.special = bool_field(a, "special", f + ".special", false);
      t.normalized = bool_field(a, "normalized", f + ".normalized", !t.special);
      for (const char* k : {"single_word", "lstrip", "rstrip"})
        if (bool_field(a, k, f + "." + k, false))
          throw Error(f + "." + k + " is true ('" + t.content + "'); capstep reads added tokens without " + k);
      if (t.normalized && extras.nfc)
        throw Error(f + ".normalized is true ('" + t.content +
                    "') with the NFC normalizer; capstep finds added tokens in the text as written");
      extras.added.push_back(std::move(t));
    }
  }
  extras.ignore_merges = bool_field(model, "ignore_merges", "model.ignore_merges", false);
  return build(vocab, merges, std::move(extras), "model.vocab", "model.merges");
}

std::shared_ptr<const ByteLevelModel> from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  const nlohmann::json v = parse_json(vocab_json, "vocab.json");
  if (!v.is_object()) throw Error("vocab.json is not an object of token -> id");
  std::vector<std::pair<std::string, int64_t>> vocab;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer()) throw Error("vocab.json: token '" + it.key() + "' has no integer id");
    vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  size_t at = 0, line = 0;
  while (at < merges_txt.size()) {
    size_t end = merges_txt.find('\n', at);
    if (end == std::string::npos) end = merges_txt.size();
    std::string s = merges_txt.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.empty() || (line == 1 && s.rfind("#version", 0) == 0)) continue;
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      throw Error("merges.txt: line " + std::to_string(line) + " \"" + s + "\" is not two tokens");
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  return build(vocab, merges, Extras{}, "vocab.json", "merges.txt");
}

}  // namespace

// The readers check every field they use; a JSON exception that still gets
// out of them (a case they miss) is an Error naming the file, as theirs are.
std::shared_ptr<const ByteLevelModel> bytelevel_from_tokenizer_json(const std::string& text) {
  try {
    return from_tokenizer_json(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer.json: ") + e.what());
  }
}

std::shared_ptr<const ByteLevelModel> bytelevel_from_vocab_merges(const std::string& vocab_json,
                                                                   const std::string& merges_txt) {
  try {
    return from_vocab_merges(vocab_json, merges_txt);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("vocab.json and merges.txt: ") + e.what());
  }
}

const std::string& bytelevel_json(const ByteLevelModel& m) { return m.json; }

int64_t bytelevel_size(const ByteLevelModel& m) { return static_cast<int64_t>(m.bytes.size()); }

namespace {

// GPT-2's regex on `text` in parts of about 1 MiB (the characters of a part
// take 24 bytes each), cut where the regex cuts too: after a newline that is
// a whitespace run of its own between two printable ASCII characters ("x\ny":
// '\n' is a piece alone, and y starts the next, with or without the cut).
// Calls piece(bytes) for each piece.
template <class Piece>
void gpt2_pieces(std::string_view text, Piece&& piece) {
  auto printable = [](char c) { return c > 0x20 && c < 0x7F; };
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.size();
    for (size_t p = begin + (size_t{1} << 20); p + 1 < text.size(); ++p)
      if (text[p] == '\n' && printable(text[p - 1]) && printable(text[p + 1])) {
        end = p + 1;
        break;
      }
    const std::string_view part = text.substr(begin, end - begin);
    const std::vector<Char> ch = characters(part);
    pretokenize(ch, [&](size_t b, size_t e) {
      const size_t from = ch[b].at, to = ch[e - 1].at + ch[e - 1].len;
      piece(part.substr(from, to - from));
    });
    begin = end;
  }
}

// The pieces of a Split's or Digits' matches (`tokenizers`'
// SplitDelimiterBehavior), one span [begin, end) of the piece at a time:
// add(begin, end, is_match) in order, then finish(). A piece with an unmerged
// neighbour waits in `pending`.
struct Combiner {
  SplitBehavior behavior;
  const std::function<void(size_t, size_t)>& emit;   // non-empty pieces only
  bool pending = false, prev_match = false;
  size_t pb = 0, pe = 0;
  void flush() {
    if (pending && pe > pb) emit(pb, pe);
    pending = false;
  }
  void hold(size_t b, size_t e) { pending = true, pb = b, pe = e; }
  void add(size_t b, size_t e, bool match) {
    switch (behavior) {
      case SplitBehavior::isolated:
        if (e > b) emit(b, e);
        break;
      case SplitBehavior::removed:
        if (!match && e > b) emit(b, e);
        break;
      case SplitBehavior::merged_with_previous:   // a match joins the piece before it, unless that is a match
        if (match && !prev_match && pending) pe = e;
        else flush(), hold(b, e);
        break;
      case SplitBehavior::contiguous:   // runs of matches, and of the rest, are one piece each
        if (match == prev_match && pending) pe = e;
        else flush(), hold(b, e);
        break;
      case SplitBehavior::merged_with_next:   // a match joins the piece after it, unless that is a match
        if (pending) {
          if (!match) pe = e, flush();
          else flush(), hold(b, e);
        } else if (match) {
          hold(b, e);
        } else if (e > b) {
          emit(b, e);
        }
        break;
    }
    prev_match = match;
  }
};

#if defined(CAPSTEP_HAVE_PCRE2)
struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) throw Error("out of memory for a regex match");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};
#endif

// Runs the pre-tokenizers from step k on `piece`, then bpe(piece) for each
// piece the last one gives.
void run_steps(const ByteLevelModel& m, size_t k, std::string_view piece,
               const std::function<void(std::string_view)>& bpe) {
  if (piece.empty()) return;
  const PreStep& step = m.pre[k];
  const std::function<void(size_t, size_t)> next = [&](size_t b, size_t e) {
    run_steps(m, k + 1, piece.substr(b, e - b), bpe);
  };
  switch (step.kind) {
    case PreStep::byte_level: {   // the last step: the byte alphabet is the BPE's own
      std::string spaced;
      if (step.add_prefix_space && piece.front() != ' ') {
        spaced = " " + std::string(piece);
        piece = spaced;
      }
      if (step.use_regex) gpt2_pieces(piece, [&](std::string_view p) { bpe(p); });
      else bpe(piece);
      return;
    }
    case PreStep::digits: {   // each digit (\p{N}, Rust's char::is_numeric) a match
      Combiner c{step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous, next};
      size_t from = 0;
      uint32_t cp = 0;
      for (size_t i = 0; i < piece.size();) {
        const size_t n = char_at(piece, i, &cp);
        if (cp != 0xFFFFFFFFu && class_of(cp) == CharClass::number) {
          if (from < i) c.add(from, i, false);
          c.add(i, i + n, true);
          from = i + n;
        }
        i += n;
      }
      if (from < piece.size()) c.add(from, piece.size(), false);
      c.flush();
      return;
    }
    case PreStep::split: {
#if defined(CAPSTEP_HAVE_PCRE2)
      Combiner c{step.behavior, next};
      MatchData data(step.regex->code);
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t prev = 0, at = 0;
      uint32_t cp = 0;
      while (at < piece.size()) {
        int rc = pcre2_match(step.regex->code, subject, piece.size(), at, 0, data.md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   // a long run for the JIT's stack: the interpreter takes any
          rc = pcre2_match(step.regex->code, subject, piece.size(), at, PCRE2_NO_JIT, data.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof message);
          throw Error("pre-tokenizer Split \"" + step.pattern + "\": PCRE2 failed to match at byte " +
                      std::to_string(at) + ": " + reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
        const size_t b = ov[0], e = ov[1];
        if (e <= b || b < at) {   // an empty match cuts nothing: go on from the next character
          at = std::max(at, b) + char_at(piece, std::max(at, b), &cp);
          continue;
        }
        if (prev < b) c.add(prev, b, step.invert);
        c.add(b, e, !step.invert);
        prev = at = e;
      }
      if (prev < piece.size()) c.add(prev, piece.size(), step.invert);
      c.flush();
#endif
      return;
    }
  }
}

// `text` in NFC: each run of valid UTF-8 normalized, a byte that is not
// part of valid UTF-8 kept as it is.
std::string nfc_of(std::string_view text) {
  std::string out;
  out.reserve(text.size());
#if defined(CAPSTEP_HAVE_UTF8PROC)
  uint32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    bool ascii = true;
    while (j < text.size()) {
      const size_t n = char_at(text, j, &cp);
      if (cp == 0xFFFFFFFFu) break;
      ascii = ascii && cp < 0x80;
      j += n;
    }
    if (ascii) {
      out.append(text.substr(i, j - i));
    } else {
      utf8proc_uint8_t* dst = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                              static_cast<utf8proc_ssize_t>(j - i), &dst,
                                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n < 0) throw Error(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
      out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
      std::free(dst);
    }
    if (j < text.size()) out += text[j++];   // the invalid byte
    i = j;
  }
#else
  out = text;
#endif
  return out;
}

// Cuts `text` at the added tokens it holds (special ones only when
// `special`): those that are not normalized first, then the normalized ones
// in the rest, each time the leftmost, the longest there, as `tokenizers`'
// AddedVocabulary does. Calls span(text) for the text between them and id(t)
// for each token.
void cut_added(const ByteLevelModel& m, std::string_view text, bool special,
               const std::function<void(std::string_view)>& span, const std::function<void(int32_t)>& id) {
  auto pass = [&](bool normalized, std::string_view t, const std::function<void(std::string_view)>& rest) {
    std::array<std::vector<const AddedTokenSpec*>, 256> first{};
    bool any = false;
    for (const AddedTokenSpec& a : m.added)
      if (a.normalized == normalized && (special || !a.special)) {
        first[static_cast<unsigned char>(a.content[0])].push_back(&a);
        any = true;
      }
    if (!any) return rest(t);
    for (auto& v : first)
      std::stable_sort(v.begin(), v.end(), [](const AddedTokenSpec* a, const AddedTokenSpec* b) {
        return a->content.size() > b->content.size();
      });
    size_t from = 0;
    for (size_t i = 0; i < t.size();) {
      const AddedTokenSpec* hit = nullptr;
      for (const AddedTokenSpec* a : first[static_cast<unsigned char>(t[i])])
        if (t.compare(i, a->content.size(), a->content) == 0) {
          hit = a;
          break;
        }
      if (!hit) {
        ++i;
        continue;
      }
      if (from < i) rest(t.substr(from, i - from));
      id(hit->id);
      i += hit->content.size();
      from = i;
    }
    if (from < t.size()) rest(t.substr(from));
  };
  pass(false, text, [&](std::string_view gap) { pass(true, gap, span); });
}

}  // namespace

bool bytelevel_have_split_regex() { return have_split_regex(); }
bool bytelevel_have_nfc() { return have_nfc(); }

void bytelevel_encode(const ByteLevelModel& m, std::string_view text, TokenIds& out, TextStats& s, bool special) {
  s.characters += count_characters(text);
  // Pieces repeat (words): their ids are kept, up to a bound on the cache.
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<int32_t> ids;
  std::string key;
  const std::function<void(std::string_view)> bpe = [&](std::string_view piece) {
    if (piece.size() > 64) {
      merge_piece(m, piece, ids);
      for (int32_t id : ids) out.push_back(id);
      return;
    }
    key.assign(piece);
    auto it = cache.find(key);
    if (it == cache.end()) {
      merge_piece(m, piece, ids);
      if (cache.size() >= (size_t{1} << 20)) {
        for (int32_t id : ids) out.push_back(id);
        return;
      }
      it = cache.emplace(key, ids).first;
    }
    for (int32_t id : it->second) out.push_back(id);
  };
  const std::function<void(std::string_view)> span = [&](std::string_view t) {
    if (m.gpt2) return gpt2_pieces(t, bpe);
    if (!m.nfc) return run_steps(m, 0, t, bpe);
    const std::string normal = nfc_of(t);
    run_steps(m, 0, normal, bpe);
  };
  const bool cut = std::any_of(m.added.begin(), m.added.end(), [&](const AddedTokenSpec& a) { return special || !a.special; });
  if (!cut) return span(text);
  cut_added(m, text, special, span, [&](int32_t id) { out.push_back(id); });
}

bool bytelevel_gives_text_back(const ByteLevelModel& m, bool special) {
  for (const PreStep& p : m.pre)
    if ((p.kind == PreStep::split && p.behavior == SplitBehavior::removed) ||
        (p.kind == PreStep::byte_level && p.add_prefix_space))
      return false;
  for (const AddedTokenSpec& a : m.added)
    if ((special || !a.special) && m.bytes[static_cast<size_t>(a.id)] != a.content) return false;
  return true;
}

std::vector<std::string> bytelevel_pieces(const ByteLevelModel& m, std::string_view text) {
  std::vector<std::string> out;
  const std::function<void(std::string_view)> piece = [&](std::string_view p) { out.emplace_back(p); };
  if (m.gpt2) gpt2_pieces(text, piece);
  else if (!m.nfc) run_steps(m, 0, text, piece);
  else run_steps(m, 0, nfc_of(text), piece);
  return out;
}

std::optional<int32_t> bytelevel_token_id(const ByteLevelModel& m, std::string_view text) {
  for (const AddedTokenSpec& a : m.added)
    if (a.content == text) return a.id;
  auto it = m.id_of.find(std::string(text));
  if (it != m.id_of.end()) return it->second;
  return std::nullopt;
}

std::vector<AddedToken> bytelevel_added_tokens(const ByteLevelModel& m) {
  std::vector<AddedToken> out;
  for (const AddedTokenSpec& a : m.added) out.push_back({a.content, a.id, a.special});
  return out;
}

const std::string& bytelevel_piece(const ByteLevelModel& m, int32_t id) { return m.bytes[static_cast<size_t>(id)]; }

std::vector<size_t> bytelevel_pretokenize(std::string_view text) {
  const std::vector<Char> ch = characters(text);
  std::vector<size_t> out;
  pretokenize(ch, [&](size_t b, size_t e) { out.push_back(ch[e - 1].at + ch[e - 1].len - ch[b].at); });
  return out;
}

}  // namespace capstep::data
