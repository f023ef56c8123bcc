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
//
// This file reads the model (tokenizer.json, vocab.json + merges.txt);
// bytelevel_encode.cpp runs it.
#include "bytelevel.h"
#include "bytelevel_model.h"
#include "json.h"

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

using bytelevel_detail::Char;
using bytelevel_detail::characters;
using bytelevel_detail::pretokenize;

namespace {

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
  // GPT-2's "<|endoftext|>") decodes as that token; one past the vocabulary
  // decodes as its text as written, so that a text holding it comes back
  // exactly. (The `tokenizers` library passes an added token's characters
  // through the byte alphabet when they all are in it: the same bytes for the
  // printable ASCII of the usual "<|...|>" names; for "café" it would give a
  // byte 0xE9.) One that takes the id of another vocabulary token is refused:
  // the BPE still gives that id to the other token's bytes, which would then
  // decode as the added token's text.
  std::map<int64_t, const std::string*> key_of;
  for (const auto& [token, id] : vocab) key_of[id] = &token;
  for (size_t i = 0; i < m->added.size(); ++i) {
    const AddedTokenSpec& a = m->added[i];
    auto k = key_of.find(a.id);
    if (k != key_of.end() && *k->second != a.content)
      throw Error("added_tokens[" + std::to_string(i) + "].id " + std::to_string(a.id) + " ('" + a.content + "') is " +
                  vocab_field + "'s '" + *k->second + "': that token's text would come back as '" + a.content + "'");
    if (k == key_of.end()) m->bytes[static_cast<size_t>(a.id)] = a.content;
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

bool bytelevel_have_split_regex() { return have_split_regex(); }
bool bytelevel_have_nfc() { return have_nfc(); }

}  // namespace capstep::data
