// Tokenizers in transformers' files (hf.h): tokenizer.json written from a
// capstep tokenizer, and a directory's tokenizer files and special tokens read.
#include "capstep/hf.h"

#include "capstep/data.h"
#include "data/json.h"
#include "data/subword.h"
#include "nn/hf_internal.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace capstep::nn {

using hf_detail::read_if_there;

namespace {

// UTF-8 of one code point.
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

namespace {

// The start of each UTF-8 character of `s` but the first (where a piece can be
// split in two).
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  return at;
}

// A subword tokenizer (SentencePiece, trained by capstep with normalization
// off, no dummy prefix, byte fallback) as the `tokenizers` library's
// Unigram or BPE model. The pieces are written with real spaces where
// SentencePiece has U+2581, so no normalizer or pre-tokenizer is needed and a
// U+2581 in the text is a character without a piece, encoded as its bytes,
// as capstep does. Neither SentencePiece nor this splits the text into words:
// its pieces never cross a newline, and the whole text is one sequence.
nlohmann::json subword_tokenizer_json(const data::Tokenizer& t, std::vector<std::string>* warnings) {
  const std::shared_ptr<const data::SubwordModel> sm = data::subword_load(t.model());
  const std::vector<data::SubwordPiece> pieces = data::subword_pieces(*sm);
  const bool bpe = t.kind() == data::TokenizerKind::bpe;
  std::vector<std::string> text(pieces.size());
  std::map<std::string, int64_t> id_of;
  int64_t unk_id = -1;
  float least = 0;   // the lowest score of a normal piece
  for (size_t id = 0; id < pieces.size(); ++id) {
    const data::SubwordPiece& p = pieces[id];
    if (p.kind == data::SubwordPieceKind::normal) {
      for (size_t i = 0; i < p.text.size(); ++i) {
        if (p.text.compare(i, 3, "\xE2\x96\x81") == 0) {
          text[id] += ' ';
          i += 2;
        } else {
          text[id] += p.text[i];
        }
      }
      least = std::min(least, p.score);
    } else {
      text[id] = p.text;   // "<unk>", "<0x0A>", a control piece's name
      if (p.kind == data::SubwordPieceKind::unknown && unk_id < 0) unk_id = static_cast<int64_t>(id);
    }
    if (!id_of.emplace(text[id], static_cast<int64_t>(id)).second)
      throw Error("the " + t.name() + " tokenizer has two pieces that read '" + text[id] + "' (ids " +
                  std::to_string(id_of[text[id]]) + " and " + std::to_string(id) + "); tokenizer.json cannot hold both");
  }
  if (unk_id < 0) throw Error("the " + t.name() + " tokenizer has no unknown piece");
  nlohmann::json model;
  if (!bpe) {
    // SentencePiece never matches the text against the names of the unknown,
    // byte and control pieces; `tokenizers` matches every piece of the
    // vocabulary. Those get a score below any path of normal pieces through
    // their name (one piece a character at most, each scoring at least
    // `least`; "<0x41>" is 6 characters), so a text that holds "<0x41>" or
    // "<unk>" takes the normal pieces, as SentencePiece does -- unless a
    // character of the name has no piece of its own, where `tokenizers` would
    // take the name's piece (its unknown characters score lower still): said
    // in *warnings.
    size_t longest = 0;   // characters in the longest reserved name
    for (size_t id = 0; id < pieces.size(); ++id)
      if (pieces[id].kind != data::SubwordPieceKind::normal)
        longest = std::max(longest, char_boundaries(text[id]).size() + 1);
    const double reserved = std::max<double>(10.0, static_cast<double>(longest) + 1.0) * static_cast<double>(least) - 100.0;
    nlohmann::json vocab = nlohmann::json::array();
    std::string missing;
    for (size_t id = 0; id < pieces.size(); ++id) {
      const bool normal = pieces[id].kind == data::SubwordPieceKind::normal;
      vocab.push_back({text[id], normal ? static_cast<double>(pieces[id].score) : reserved});
      if (normal) continue;
      std::vector<size_t> cut = char_boundaries(text[id]);
      cut.insert(cut.begin(), 0);
      cut.push_back(text[id].size());
      for (size_t k = 0; k + 1 < cut.size(); ++k) {
        const std::string ch = text[id].substr(cut[k], cut[k + 1] - cut[k]);
        auto it = id_of.find(ch);
        const bool has = it != id_of.end() && pieces[static_cast<size_t>(it->second)].kind == data::SubwordPieceKind::normal;
        if (!has && missing.find("'" + ch + "'") == std::string::npos) missing += (missing.empty() ? "'" : ", '") + ch + "'";
      }
    }
    if (!missing.empty() && warnings)
      warnings->push_back("the " + t.name() + " tokenizer has no piece for the character" +
                          (missing.find(',') == std::string::npos ? " " : "s ") + missing +
                          ", so transformers' tokenizer encodes a text that spells a reserved piece's name (\"<unk>\", "
                          "\"<0x41>\", ...) as that piece, where capstep encodes its characters");
    // Ties: two segmentations of the same score (the same pieces in another
    // order, as in a run of one character: "--" "----" or "----" "--").
    // tokenizers sums the scores exactly (in double, of float scores) and
    // keeps the first it finds; SentencePiece sums in float, whose rounding
    // picks one or the other (scripts/check-hf-export checks that every
    // difference it finds is such a tie).
    if (warnings)
      warnings->push_back("the " + t.name() + " tokenizer: where two segmentations of a text score the same (the "
                          "same pieces in another order, as in a run of one character), SentencePiece (single "
                          "precision) and transformers' tokenizers (double) can choose different ones, and the ids "
                          "differ there (both decode to the text); the bpe tokenizer has no such case");
    model = {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", true}};
  } else {
    // SentencePiece's BPE merges, at each step, the adjacent pair whose
    // concatenation is the piece of the highest score; `tokenizers` merges
    // the pair of the lowest rank. So the merges are every split of every
    // normal piece into two normal pieces, ranked by the whole piece's score
    // (then by the parts' ids), and only normal pieces take part: the
    // reserved ones are never made from the text.
    std::vector<size_t> order;
    for (size_t id = 0; id < pieces.size(); ++id)
      if (pieces[id].kind == data::SubwordPieceKind::normal) order.push_back(id);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].score > pieces[b].score; });
    nlohmann::json merges = nlohmann::json::array();
    auto normal_id = [&](const std::string& s) -> int64_t {
      auto it = id_of.find(s);
      return it != id_of.end() && pieces[static_cast<size_t>(it->second)].kind == data::SubwordPieceKind::normal
                 ? it->second : -1;
    };
    for (size_t id : order) {
      std::vector<std::pair<int64_t, int64_t>> splits;
      for (size_t b : char_boundaries(text[id])) {
        const int64_t l = normal_id(text[id].substr(0, b)), r = normal_id(text[id].substr(b));
        if (l >= 0 && r >= 0) splits.emplace_back(l, r);
      }
      std::sort(splits.begin(), splits.end());
      for (const auto& [l, r] : splits) merges.push_back({text[static_cast<size_t>(l)], text[static_cast<size_t>(r)]});
    }
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t id = 0; id < pieces.size(); ++id) vocab[text[id]] = id;
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", text[static_cast<size_t>(unk_id)]},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},
             {"byte_fallback", true},
             {"ignore_merges", false},
             {"vocab", vocab},
             {"merges", merges}};
  }
  nlohmann::json decoders = {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  nlohmann::json normalizer = nullptr;
  if (data::subword_dummy_prefix(*sm)) {
    // A model that puts a space before the text (Llama's): so does the
    // normalizer, and the decoder takes it off again, as capstep does.
    normalizer = {{"type", "Prepend"}, {"prepend", " "}};
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model", model}};
}

}  // namespace

std::string hf_tokenizer_json(const data::Tokenizer& t, std::vector<std::string>* warnings) {
  if (t.kind() == data::TokenizerKind::bytelevel_bpe) {
    // Its model is the tokenizer.json capstep writes for it.
    if (!t.trained()) throw Error("no tokenizer.json for the " + t.name() + " tokenizer: it has no model");
    return t.model();
  }
  if (t.subword()) {
    if (!t.trained()) throw Error("no tokenizer.json for the " + t.name() + " tokenizer: it is not trained");
    return subword_tokenizer_json(t, warnings).dump() + "\n";   // one line: thousands of pieces
  }
  const std::string name = t.name();
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                      {"added_tokens", nlohmann::json::array()}, {"normalizer", nullptr}, {"post_processor", nullptr}};
  nlohmann::json model = {{"type", "BPE"},          {"dropout", nullptr},       {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},      {"byte_fallback", false},   {"ignore_merges", false},
                          {"merges", nlohmann::json::array()}};
  if (name == "byte") {
    // GPT-2's byte-level alphabet (bytes_to_unicode): printable bytes stand
    // for themselves, the others for 256 + their rank. No merges: every byte
    // is its own token, id = the byte's value, as capstep's byte tokenizer.
    std::vector<uint32_t> cp(256, 0);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? b : 256 + n++;
    }
    for (uint32_t b = 0; b < 256; ++b) vocab[utf8(cp[b])] = b;
    const nlohmann::json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    j["pre_tokenizer"] = byte_level;
    j["decoder"] = byte_level;
  } else if (name == "char") {
    // One token per character, '~' for any other (as capstep's char tokenizer);
    // no pre-tokenizer, so the text is one word split into its characters.
    const data::Tokenizer t(data::TokenizerKind::chars);
    for (int32_t id = 0; id < t.vocab(); ++id) {
      const std::string p = t.piece(id);
      if (!p.empty() && !vocab.contains(p)) vocab[p] = id;
    }
    model["unk_token"] = "~";
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Fuse"}};
  }
  model["vocab"] = vocab;
  j["model"] = model;
  return j.dump(1) + "\n";
}

std::string hf_tokenizer_json(const std::string& tokenizer) { return hf_tokenizer_json(data::Tokenizer::parse(tokenizer)); }

// hf_internal.h
void hf_detail::read_foreign_tokenizer(const std::string& dir, HfModel& m) {
  std::string text, merges;
  data::Tokenizer t;
  std::string file;
  if (read_if_there(file = dir + "/tokenizer.model", &text)) {
    try {
      t = data::Tokenizer::from_sentencepiece(text);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  } else if (read_if_there(file = dir + "/tokenizer.json", &text)) {
    try {
      t = data::Tokenizer::from_bytelevel(text);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  } else {
    const bool vocab = read_if_there(dir + "/vocab.json", &text), merged = read_if_there(dir + "/merges.txt", &merges);
    if (!vocab && !merged) return;
    if (!vocab || !merged)
      throw Error("'" + dir + "' has " + (vocab ? "vocab.json but no merges.txt" : "merges.txt but no vocab.json") +
                  "; a GPT-2 tokenizer needs both");
    file = dir + "/vocab.json";
    try {
      t = data::Tokenizer::from_bytelevel(text, &merges);
    } catch (const Error& e) {
      throw Error("'" + dir + "': " + e.what());
    }
  }
  // A vocab_size above the tokenizer's (padded, or with room for added
  // tokens) is the tokenizer padded to it; below, its ids would not fit.
  if (t.vocab() > m.config.vocab)
    throw Error("'" + file + "' has " + std::to_string(t.vocab()) + " ids (the " + t.name() +
                " tokenizer) but config.json's vocab_size is " + std::to_string(m.config.vocab) +
                ": its ids do not fit in the model's");
  if (t.vocab() < m.config.vocab) {
    try {
      t = t.padded_to(m.config.vocab);
    } catch (const Error& e) {
      throw Error("'" + file + "' with config.json's vocab_size " + std::to_string(m.config.vocab) + ": " + e.what());
    }
  }
  m.tokenizer = t.name();
  m.tokenizer_model = t.model();
  m.tokenizer_file = file;
}

namespace {

// An id of generation_config.json's `field` (`v`), checked against the vocabulary.
int64_t special_id(const nlohmann::json& v, const std::string& field, const data::Tokenizer& t) {
  if (!v.is_number_integer()) throw Error(field + " is " + v.dump() + ", not an integer id");
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= t.vocab())
    throw Error(field + " is " + std::to_string(id) + ", outside the " + t.name() + " tokenizer's [0, " +
                std::to_string(t.vocab()) + ")");
  return id;
}

}  // namespace

HfSpecialTokens read_hf_special_tokens(const std::string& dir, const data::Tokenizer& t) {
  HfSpecialTokens out;
  std::string text;
  std::vector<int64_t> gen_eos;
  int64_t gen_bos = -1;
  std::string file = dir + "/generation_config.json";
  if (read_if_there(file, &text)) {
    try {
      const nlohmann::json j = data::parse_json(text, "generation_config.json");
      if (!j.is_object()) throw Error("not an object");
      if (j.contains("bos_token_id") && !j["bos_token_id"].is_null())
        gen_bos = special_id(j["bos_token_id"], "bos_token_id", t);
      if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
        const nlohmann::json& e = j["eos_token_id"];
        if (e.is_array()) {
          for (size_t i = 0; i < e.size(); ++i)
            gen_eos.push_back(special_id(e[i], "eos_token_id[" + std::to_string(i) + "]", t));
        } else {
          gen_eos.push_back(special_id(e, "eos_token_id", t));
        }
      }
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  }
  file = dir + "/tokenizer_config.json";
  if (read_if_there(file, &text)) {
    try {
      const nlohmann::json j = data::parse_json(text, "tokenizer_config.json");
      if (!j.is_object()) throw Error("not an object");
      auto token = [&](const char* key) -> int64_t {
        if (!j.contains(key) || j[key].is_null()) return -1;
        const nlohmann::json& v = j[key];
        std::string content;
        if (v.is_string()) content = v.get<std::string>();
        else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
        else throw Error(std::string(key) + " is " + v.dump() + ", not a token's text or an object with its \"content\"");
        const std::optional<int32_t> id = t.token_id(content);
        if (!id) throw Error(std::string(key) + " \"" + content + "\" is not a token of the " + t.name() + " tokenizer");
        return *id;
      };
      out.bos = token("bos_token");
      const int64_t eos = token("eos_token");
      if (eos >= 0) out.eos.push_back(eos);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  }
  if (out.bos < 0) out.bos = gen_bos;
  for (int64_t id : gen_eos)
    if (std::find(out.eos.begin(), out.eos.end(), id) == out.eos.end()) out.eos.push_back(id);
  return out;
}

std::string hf_tokenizer_files() {
  return "config.json's \"capstep_tokenizer\", tokenizer.model (SentencePiece), tokenizer.json (byte-level BPE) "
         "and vocab.json + merges.txt (GPT-2's)";
}

}  // namespace capstep::nn
