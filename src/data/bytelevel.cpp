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
#include "bytelevel.h"
#include "json.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace capstep::data {

struct ByteLevelModel {
  std::vector<std::string> bytes;                  // id -> the bytes it stands for
  std::unordered_map<std::string, int32_t> id_of;  // bytes -> id (tokens of the byte alphabet only)
  std::array<int32_t, 256> byte_id{};              // the token of each single byte
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool ignore_merges = false;   // a piece that is a token is taken whole (model.ignore_merges)
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

std::vector<Char> characters(std::string_view t) {
  std::vector<Char> out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) n = 1, cp = c;
    else if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
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
    if (!ok) {
      out.push_back({i, 1, 0xFFFFFFFFu, CharClass::other});
      ++i;
    } else {
      out.push_back({i, n, cp, class_of(cp)});
      i += n;
    }
  }
  return out;
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

// The model from the vocabulary, the merges (by rank, each two tokens) and
// added tokens outside the vocabulary (id -> text); Errors prefixed by the
// field or file names given.
std::shared_ptr<const ByteLevelModel> build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                            const std::vector<std::pair<std::string, std::string>>& merges,
                                            const std::map<int64_t, std::string>& added, bool ignore_merges,
                                            const std::string& vocab_field, const std::string& merges_field) {
  auto m = std::make_shared<ByteLevelModel>();
  m->ignore_merges = ignore_merges;
  int64_t size = 0;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= (int64_t{1} << 24))
      throw Error(vocab_field + ": token '" + token + "' has id " + std::to_string(id) + ", outside [0, 2^24)");
    size = std::max(size, id + 1);
  }
  for (const auto& [id, text] : added) size = std::max(size, id + 1);
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
  for (const auto& [id, text] : added)
    if (!seen[static_cast<size_t>(id)]) m->bytes[static_cast<size_t>(id)] = text;
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
  for (const auto& [id, text] : added)
    if (!seen[static_cast<size_t>(id)])
      at.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                    {"normalized", false}, {"special", true}});
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::json j = {{"version", "1.0"},
                            {"truncation", nullptr},
                            {"padding", nullptr},
                            {"added_tokens", at},
                            {"normalizer", nullptr},
                            {"pre_tokenizer", byte_level},
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
  if (!j.contains("normalizer") || !j["normalizer"].is_null())
    throw Error("normalizer is " + (j.contains("normalizer") ? j["normalizer"].dump() : std::string("missing")) +
                "; a byte-level BPE has none (null)");
  const nlohmann::json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json();
  if (!pre.is_object() || string_field(pre, "type", "pre_tokenizer.type", "") != "ByteLevel")
    throw Error("pre_tokenizer is " + pre.dump() +
                ", not ByteLevel (GPT-2's regex and byte alphabet): capstep reads only that pre-tokenizer");
  if (bool_field(pre, "add_prefix_space", "pre_tokenizer.add_prefix_space", false))
    throw Error("pre_tokenizer.add_prefix_space is true; capstep's byte-level BPE adds no space");
  if (!bool_field(pre, "use_regex", "pre_tokenizer.use_regex", true))
    throw Error("pre_tokenizer.use_regex is false; capstep splits with GPT-2's regex");
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
  std::map<int64_t, std::string> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const nlohmann::json& a : j["added_tokens"])
      if (a.contains("id") && a["id"].is_number_integer() && a.contains("content") && a["content"].is_string()) {
        const int64_t id = a["id"].get<int64_t>();
        if (id < 0 || id >= (int64_t{1} << 24)) throw Error("added_tokens: id " + std::to_string(id) + " out of range");
        added[id] = a["content"].get<std::string>();
      }
  return build(vocab, merges, added, bool_field(model, "ignore_merges", "model.ignore_merges", false), "model.vocab",
               "model.merges");
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
  return build(vocab, merges, {}, false, "vocab.json", "merges.txt");
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

void bytelevel_encode(const ByteLevelModel& m, std::string_view text, TokenIds& out, TextStats& s) {
  // Pieces repeat (words): their ids are kept, up to a bound on the cache.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  std::vector<int32_t> ids;
  // In parts of about 1 MiB (the characters of a part take 24 bytes each),
  // cut where the regex cuts too: after a newline that is a whitespace run
  // of its own between two printable ASCII characters ("x\ny": '\n' is a
  // piece alone, and y starts the next, with or without the cut).
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
    s.characters += ch.size();
    pretokenize(ch, [&](size_t b, size_t e) {
      const size_t from = ch[b].at, to = ch[e - 1].at + ch[e - 1].len;
      const std::string_view piece = part.substr(from, to - from);
      auto it = piece.size() <= 64 ? cache.find(piece) : cache.end();
      if (it == cache.end()) {
        merge_piece(m, piece, ids);
        if (piece.size() <= 64 && cache.size() < (size_t{1} << 20)) it = cache.emplace(piece, ids).first;
      }
      for (int32_t id : it != cache.end() ? it->second : ids) out.push_back(id);
    });
    begin = end;
  }
}

const std::string& bytelevel_piece(const ByteLevelModel& m, int32_t id) { return m.bytes[static_cast<size_t>(id)]; }

std::vector<size_t> bytelevel_pretokenize(std::string_view text) {
  const std::vector<Char> ch = characters(text);
  std::vector<size_t> out;
  pretokenize(ch, [&](size_t b, size_t e) { out.push_back(ch[e - 1].at + ch[e - 1].len - ch[b].at); });
  return out;
}

}  // namespace capstep::data
