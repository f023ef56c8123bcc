// The tokenizers documented in include/capstep/data.h: the 64-symbol character
// tokenizer (the free functions and Tokenizer "char"), the 256-symbol byte
// tokenizer (Tokenizer "byte"), the subword ones' front (their SentencePiece
// side is subword.cpp) and the byte-level BPE's (bytelevel.cpp, bytelevel_encode.cpp), with the
// compact TokenIds they produce.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "bytelevel.h"
#include "capstep/data.h"
#include "subword.h"

namespace capstep::data {
namespace {

// id order = ASCII order; the unknown symbol '~' last.
constexpr std::string_view kAlphabet =
    "\n !\"',-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz~";
static_assert(kAlphabet.size() == kVocabSize, "the tokenizer has exactly 64 symbols");
static_assert(kAlphabet[kUnknownId] == kUnknownSymbol);

// byte -> id; '~' itself is not a known symbol, so it maps to kUnknownId like
// any other character outside the set.
constexpr std::array<int32_t, 256> make_table() {
  std::array<int32_t, 256> t{};
  for (auto& v : t) v = kUnknownId;
  for (int i = 0; i < kUnknownId; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = i;
  return t;
}
constexpr std::array<int32_t, 256> kTable = make_table();

constexpr int64_t kByteVocab = 256;

// The char tokenizer's reading of UTF-8: calls emit(id, offset) once per
// character. Continuation bytes (10xxxxxx) after a lead byte belong to the
// character whose lead byte already produced one unknown id; a stray one
// (Latin-1 text, say) is a character of its own.
template <class Emit>
void char_ids(std::string_view text, Emit&& emit) {
  bool in_character = false;   // inside a multi-byte UTF-8 character
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80 && in_character) continue;
    in_character = c >= 0xC0;
    emit(kTable[c], i);
  }
}

std::string id_error(std::string_view what, int64_t id, size_t position, int64_t vocab) {
  return std::string(what) + ": token id " + std::to_string(id) + " at position " + std::to_string(position) +
         " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
}

size_t width_of(int64_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

}  // namespace

// ---- the char tokenizer's free functions --------------------------------------

std::string_view alphabet() { return kAlphabet; }

int32_t encode_char(unsigned char c) { return kTable[c]; }

std::vector<int32_t> encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  char_ids(text, [&](int32_t id, size_t) { ids.push_back(id); });
  return ids;
}

void check_token_ids(const int32_t* ids, size_t n, std::string_view what) {
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= kVocabSize) throw Error(id_error(what, ids[i], i, kVocabSize));
}

char decode_id(int32_t id) {
  check_token_ids(&id, 1, "decode");
  return kAlphabet[static_cast<size_t>(id)];
}

std::string decode(const std::vector<int32_t>& ids) {
  check_token_ids(ids.data(), ids.size(), "decode");
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) out[i] = kAlphabet[static_cast<size_t>(ids[i])];
  return out;
}

// ---- TokenIds -------------------------------------------------------------------

TokenIds::TokenIds(int64_t vocab) : vocab_(vocab), width_(width_of(vocab)) {
  if (vocab < 1 || vocab > INT32_MAX)
    throw Error("token ids: the vocabulary must have 1 to 2147483647 symbols, got " + std::to_string(vocab));
}

TokenIds::TokenIds(const std::vector<int32_t>& ids, int64_t vocab) : TokenIds(vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_) throw Error(id_error("token ids", ids[i], i, vocab_));
  storage_.resize(ids.size() * width_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    for (size_t b = 0; b < width_; ++b) storage_[i * width_ + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
  }
}

TokenIds TokenIds::from_bytes(std::string bytes, int64_t vocab) {
  TokenIds t(vocab);
  if (t.width_ != 1)
    throw Error("token ids: one byte per id holds a vocabulary of at most 256, not " + std::to_string(vocab));
  if (vocab < 256)
    for (size_t i = 0; i < bytes.size(); ++i)
      if (static_cast<unsigned char>(bytes[i]) >= vocab)
        throw Error(id_error("token ids", static_cast<unsigned char>(bytes[i]), i, vocab));
  t.storage_ = std::move(bytes);
  return t;
}

int32_t TokenIds::operator[](size_t i) const {
  if (width_ == 1) return static_cast<unsigned char>(storage_[i]);
  uint32_t v = 0;
  for (size_t b = 0; b < width_; ++b) v |= static_cast<uint32_t>(static_cast<unsigned char>(storage_[i * width_ + b])) << (8 * b);
  return static_cast<int32_t>(v);
}

void TokenIds::push_back(int32_t id) {
  if (id < 0 || id >= vocab_) throw Error(id_error("token ids", id, size(), vocab_));
  const uint32_t v = static_cast<uint32_t>(id);
  for (size_t b = 0; b < width_; ++b) storage_.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

std::vector<int32_t> TokenIds::to_vector(size_t begin, size_t end) const {
  if (begin > end || end > size())
    throw Error("token ids: range [" + std::to_string(begin) + ", " + std::to_string(end) + ") is not within the " +
                std::to_string(size()) + " ids");
  std::vector<int32_t> out(end - begin);
  copy_to(begin, out.size(), out.data());
  return out;
}

void TokenIds::copy_to(size_t begin, size_t n, int32_t* out) const {
  if (width_ == 1) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(storage_.data()) + begin;
    for (size_t i = 0; i < n; ++i) out[i] = p[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = (*this)[begin + i];
}

// ---- Tokenizer ----------------------------------------------------------------------

Tokenizer::Tokenizer(TokenizerKind k) : kind_(k), vocab_(k == TokenizerKind::chars ? kVocabSize : kByteVocab) {
  if (subword()) throw Error("a subword tokenizer needs a size: parse \"bpe:N\" or \"unigram:N\"");
}

Tokenizer Tokenizer::parse(std::string_view name) {
  if (name == "char") return Tokenizer(TokenizerKind::chars);
  if (name == "byte") return Tokenizer(TokenizerKind::bytes);
  const size_t colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  if (colon != std::string_view::npos && kind == "bytelevel-bpe") {
    // Read from a directory, so any size its file has (at least the 256 bytes).
    const std::string_view n = name.substr(colon + 1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (n.empty() || ec != std::errc() || end != n.data() + n.size() || v < 256 || v > (int64_t{1} << 24))
      throw Error("tokenizer '" + std::string(name) + "': the size must be an integer in [256, 16777216]");
    Tokenizer t;
    t.kind_ = TokenizerKind::bytelevel_bpe;
    t.vocab_ = v;
    return t;
  }
  if (colon != std::string_view::npos && (kind == "bpe" || kind == "unigram")) {
    const std::string_view n = name.substr(colon + 1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (n.empty() || ec != std::errc() || end != n.data() + n.size() || v < kMinSubwordVocab || v > 65536)
      throw Error("tokenizer '" + std::string(name) + "': the size must be an integer in [" +
                  std::to_string(kMinSubwordVocab) + ", 65536]");
    if (!have_sentencepiece()) subword_load("");   // the Error naming the package
    Tokenizer t;
    t.kind_ = kind == "bpe" ? TokenizerKind::bpe : TokenizerKind::unigram;
    t.vocab_ = v;
    return t;
  }
  throw Error("unknown tokenizer '" + std::string(name) +
              "'; the tokenizers are char, byte, bpe:N, unigram:N, bytelevel-bpe:N");
}

std::vector<std::string> Tokenizer::names() { return {"char", "byte", "bpe:N", "unigram:N", "bytelevel-bpe:N"}; }

std::string Tokenizer::name() const {
  switch (kind_) {
    case TokenizerKind::chars: return "char";
    case TokenizerKind::bytes: return "byte";
    case TokenizerKind::bpe: return "bpe:" + std::to_string(vocab_);
    case TokenizerKind::unigram: return "unigram:" + std::to_string(vocab_);
    case TokenizerKind::bytelevel_bpe: return "bytelevel-bpe:" + std::to_string(vocab_);
  }
  return "?";
}

Tokenizer Tokenizer::from_model(std::string_view name, const std::string& model) {
  Tokenizer t = parse(name);
  if (!t.has_model()) {
    if (!model.empty()) throw Error("the " + t.name() + " tokenizer has no model, but one was given");
    return t;
  }
  if (model.empty()) throw Error("the " + t.name() + " tokenizer's model is missing");
  if (t.kind_ == TokenizerKind::bytelevel_bpe) {
    t.bytelevel_ = bytelevel_from_tokenizer_json(model);
    if (bytelevel_size(*t.bytelevel_) > t.vocab_)
      throw Error("the " + t.name() + " tokenizer's model has " + std::to_string(bytelevel_size(*t.bytelevel_)) +
                  " ids, more than its name's " + std::to_string(t.vocab_));
    return t;
  }
  t.model_ = subword_load(model);
  const int type = subword_type(*t.model_);
  if (type != (t.kind_ == TokenizerKind::bpe ? 2 : 1))
    throw Error("the " + t.name() + " tokenizer's model is of another type (" +
                (type == 1 ? "unigram" : type == 2 ? "bpe" : type == 3 ? "word" : "char") + ")");
  if (subword_size(*t.model_) > t.vocab_)
    throw Error("the " + t.name() + " tokenizer's model has " + std::to_string(subword_size(*t.model_)) +
                " pieces, more than its name's " + std::to_string(t.vocab_));
  return t;
}

Tokenizer Tokenizer::from_sentencepiece(const std::string& model) {
  auto m = subword_load(model);
  const int type = subword_type(*m);
  if (type != 1 && type != 2)
    throw Error(std::string("the SentencePiece model is of type ") + (type == 3 ? "word" : type == 4 ? "char" : "unknown") +
                " (trainer_spec.model_type " + std::to_string(type) + "); capstep reads bpe and unigram models");
  Tokenizer t;
  t.kind_ = type == 2 ? TokenizerKind::bpe : TokenizerKind::unigram;
  t.vocab_ = subword_size(*m);
  if (t.vocab_ < kMinSubwordVocab || t.vocab_ > 65536)
    throw Error("the SentencePiece model has " + std::to_string(t.vocab_) + " pieces; capstep reads " +
                std::to_string(kMinSubwordVocab) + " to 65536");
  t.model_ = std::move(m);
  return t;
}

Tokenizer Tokenizer::from_bytelevel(const std::string& json_or_vocab, const std::string* merges_txt) {
  Tokenizer t;
  t.kind_ = TokenizerKind::bytelevel_bpe;
  t.bytelevel_ = merges_txt ? bytelevel_from_vocab_merges(json_or_vocab, *merges_txt)
                            : bytelevel_from_tokenizer_json(json_or_vocab);
  t.vocab_ = bytelevel_size(*t.bytelevel_);
  return t;
}

int64_t Tokenizer::model_size() const {
  if (bytelevel_) return bytelevel_size(*bytelevel_);
  if (model_) return subword_size(*model_);
  return vocab_;
}

Tokenizer Tokenizer::padded_to(int64_t vocab) const {
  if (!has_model() || !trained()) throw Error("only a tokenizer with a model is padded, not the " + name() + " one");
  if (vocab < model_size())
    throw Error("the " + name() + " tokenizer's " + std::to_string(model_size()) + " ids do not fit in a vocabulary of " +
                std::to_string(vocab));
  Tokenizer t = parse(name().substr(0, name().find(':')) + ":" + std::to_string(vocab));   // Error for a size out of range
  t.model_ = model_;
  t.bytelevel_ = bytelevel_;
  return t;
}

Tokenizer Tokenizer::trained_on(std::string_view text) const {
  if (kind_ == TokenizerKind::bytelevel_bpe && !bytelevel_)
    throw Error("the " + name() + " tokenizer is not trained by capstep: it is read from a Hugging Face "
                "directory's tokenizer.json or vocab.json + merges.txt (capstep train --init-from DIR)");
  if (!subword()) return *this;
  Tokenizer t = *this;
  t.model_ = subword_train(kind_, vocab_, text);
  return t;
}

std::string Tokenizer::model() const {
  if (bytelevel_) return bytelevel_json(*bytelevel_);
  return model_ ? subword_proto(*model_) : std::string();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  if (bytelevel_) return bytelevel_token_id(*bytelevel_, text);
  if (model_) {
    // SentencePiece's piece texts ("</s>", "<0x0A>", U+2581 for a space).
    const std::vector<SubwordPiece> pieces = subword_pieces(*model_);
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].text == text) return static_cast<int32_t>(i);
  }
  return std::nullopt;
}

std::vector<AddedToken> Tokenizer::added_tokens() const {
  return bytelevel_ ? bytelevel_added_tokens(*bytelevel_) : std::vector<AddedToken>();
}

TokenIds Tokenizer::encode(std::string text, TextStats* stats, bool special_tokens) const {
  TextStats s;
  if (kind_ == TokenizerKind::bytelevel_bpe) {
    if (!bytelevel_) throw Error("the " + name() + " tokenizer has no model: read it from a directory first");
    TokenIds ids(vocab_);
    bytelevel_encode(*bytelevel_, text, ids, s, special_tokens);
    if (stats) *stats = s;
    return ids;
  }
  if (subword()) {
    if (!model_) throw Error("the " + name() + " tokenizer is not trained yet: train it on a text first");
    TokenIds ids(vocab_);
    subword_encode(*model_, text, ids, s);
    if (stats) *stats = s;
    return ids;
  }
  if (kind_ == TokenizerKind::bytes) {
    s.characters = text.size();
    if (stats) *stats = s;
    return TokenIds::from_bytes(std::move(text), kByteVocab);
  }
  // In place: a character's id goes to index j <= its first byte's index i
  // (a character is at least one byte), so a byte is read before it is
  // overwritten.
  size_t j = 0;
  uint64_t lines_before = 0;   // newlines before the first unknown character
  char_ids(text, [&](int32_t id, size_t i) {
    if (id == kUnknownId) {
      if (s.unknown++ == 0) {
        s.first_unknown_offset = i;
        s.first_unknown_line = lines_before + 1;
        s.first_unknown_byte = static_cast<unsigned char>(text[i]);
      }
    } else if (id == 0 && s.unknown == 0) {
      ++lines_before;
    }
    text[j++] = static_cast<char>(id);
  });
  s.characters = j;
  // Multi-byte characters made the ids shorter than the text: give the rest
  // back when it is worth a copy of the ids.
  const size_t bytes = text.size();
  text.resize(j);
  if (j < bytes - bytes / 8) text.shrink_to_fit();
  if (stats) *stats = s;
  return TokenIds::from_bytes(std::move(text), kVocabSize);
}

std::string Tokenizer::decode(const TokenIds& ids) const {
  if (has_model()) return decode(ids.to_vector());
  if (ids.vocab() > vocab())
    throw Error("decode: ids of a vocabulary of " + std::to_string(ids.vocab()) + " for the " + name() +
                " tokenizer's " + std::to_string(vocab()) + " symbols");
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    out[i] = kind_ == TokenizerKind::chars ? kAlphabet[static_cast<size_t>(id)] : static_cast<char>(id);
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab()) throw Error(id_error("decode", ids[i], i, vocab()));
  // Ids past the model's (a padded vocabulary, padded_to) decode to nothing.
  if (kind_ == TokenizerKind::bytelevel_bpe) {
    if (!bytelevel_) throw Error("the " + name() + " tokenizer has no model: it has nothing to decode with");
    std::string out;
    const int64_t size = model_size();
    for (int32_t id : ids)
      if (id < size) out += bytelevel_piece(*bytelevel_, id);
    return out;
  }
  if (subword()) {
    if (!model_) throw Error("the " + name() + " tokenizer is not trained yet: it has nothing to decode with");
    const int64_t size = model_size();
    if (std::all_of(ids.begin(), ids.end(), [&](int32_t id) { return id < size; })) return subword_decode(*model_, ids);
    std::vector<int32_t> in_model;
    for (int32_t id : ids)
      if (id < size) in_model.push_back(id);
    return subword_decode(*model_, in_model);
  }
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i] = kind_ == TokenizerKind::chars ? kAlphabet[static_cast<size_t>(ids[i])] : static_cast<char>(ids[i]);
  }
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (bytelevel_) {
    if (id < 0 || id >= vocab_) throw Error(id_error("piece", id, 0, vocab_));
    return id < model_size() ? bytelevel_piece(*bytelevel_, id) : std::string();
  }
  if (subword() && model_) {
    if (id < 0 || id >= vocab_) throw Error(id_error("piece", id, 0, vocab_));
    return id < model_size() ? subword_piece(*model_, id) : std::string();
  }
  return decode(std::vector<int32_t>{id});
}

// ---- unknown characters ---------------------------------------------------------------

std::string describe_unknown(const TextStats& s, const std::string& tokenizer_name) {
  char share[32];
  const double pct = 100.0 * s.share();
  // Never "0.00%" for a share that is not zero.
  std::snprintf(share, sizeof share, pct > 0 && pct < 0.01 ? "%.2g%%" : "%.2f%%", pct);
  std::string what;
  const unsigned char c = s.first_unknown_byte;
  if (c == '\t') what = "a tab";
  else if (c == '\r') what = "a carriage return '\\r'";
  else if (c >= 0x20 && c < 0x7F) what = std::string("'") + static_cast<char>(c) + "'";
  else {
    char b[48];
    std::snprintf(b, sizeof b, c >= 0x80 ? "a non-ASCII character (byte 0x%02X)" : "a control character (byte 0x%02X)", c);
    what = b;
  }
  const std::string outside =
      tokenizer_name == "char"
          ? "are outside the char tokenizer's " + std::to_string(kVocabSize - 1) + " symbols and train as '~'"
          : "are outside the " + tokenizer_name + " tokenizer's symbols";
  return std::to_string(s.unknown) + " of " + std::to_string(s.characters) + " characters (" + share + ") " +
         outside + " (the first, " + what + ", at line " + std::to_string(s.first_unknown_line) + ", byte offset " +
         std::to_string(s.first_unknown_offset) + ")";
}

}  // namespace capstep::data
