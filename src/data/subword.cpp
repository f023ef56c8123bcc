// The subword tokenizers (bpe:N, unigram:N) on SentencePiece: training on the
// user's text, encoding with byte fallback, decoding. Built with
// CAPSTEP_HAVE_SENTENCEPIECE when CMake finds the library; otherwise every
// entry point is an Error naming the package.
#include "subword.h"

#include <algorithm>
#include <cstdio>

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace capstep::data {

#ifdef CAPSTEP_HAVE_SENTENCEPIECE

struct SubwordModel {
  sentencepiece::SentencePieceProcessor sp;
  std::string proto;
  int byte_id[256] = {};   // the byte fallback's pieces "<0x00>".."<0xFF>"
  // The model adds a dummy prefix (normalizer_spec.add_dummy_prefix, as
  // Llama's): SentencePiece is loaded without it and the text is encoded
  // with one space before it instead, once, however the text is cut into
  // runs; decode takes that space off again.
  bool dummy_prefix = false;
  int model_type = 1;   // trainer_spec.model_type: 1 unigram, 2 bpe, 3 word, 4 char
};

bool have_sentencepiece() { return true; }

namespace {

// The training sentences: the text's non-empty lines, up to
// kSubwordTrainingBytes of them, without a copy of the text.
class Lines : public sentencepiece::SentenceIterator {
 public:
  explicit Lines(std::string_view text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    for (;;) {
      if (at_ >= text_.size() || used_ >= kSubwordTrainingBytes) {
        done_ = true;
        return;
      }
      size_t end = text_.find('\n', at_);
      if (end == std::string_view::npos) end = text_.size();
      line_.assign(text_.substr(at_, end - at_));
      at_ = end + 1;
      used_ += line_.size() + 1;
      if (!line_.empty()) return;
    }
  }
  std::string_view text_;
  size_t at_ = 0, used_ = 0;
  std::string line_;
  bool done_ = false;
};

// The length of the valid UTF-8 sequence at text[i], or 0 when it is not one
// (a stray continuation byte, a truncated or overlong sequence, a surrogate,
// beyond U+10FFFF).
size_t utf8_length(std::string_view text, size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

Error sp_error(const std::string& what, const sentencepiece::util::Status& s) {
  return Error(what + ": SentencePiece: " + s.ToString());
}

// ---- a minimal reading of SentencePiece's ModelProto (protobuf wire format),
// for the fields the installed headers do not expose: trainer_spec (2) .model_type
// (3); normalizer_spec (3) .name (1), .precompiled_charsmap (2),
// .add_dummy_prefix (3, default true), .remove_extra_whitespaces (4, default
// true).
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;      // varint
  std::string_view bytes;  // length-delimited
  size_t begin = 0, end = 0;
};

bool read_varint(std::string_view s, size_t& at, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= s.size()) return false;
    const unsigned char c = static_cast<unsigned char>(s[at++]);
    v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

// The fields of a message; false when it is not well formed.
bool fields(std::string_view s, std::vector<Field>& out) {
  out.clear();
  for (size_t at = 0; at < s.size();) {
    Field f;
    f.begin = at;
    uint64_t tag;
    if (!read_varint(s, at, tag)) return false;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.wire == 0) {
      if (!read_varint(s, at, f.value)) return false;
    } else if (f.wire == 2) {
      uint64_t n;
      if (!read_varint(s, at, n) || n > s.size() - at) return false;
      f.bytes = s.substr(at, n);
      at += n;
    } else if (f.wire == 1 || f.wire == 5) {
      at += f.wire == 1 ? 8 : 4;
      if (at > s.size()) return false;
    } else {
      return false;
    }
    f.end = at;
    out.push_back(f);
  }
  return true;
}

void write_varint(std::string& s, uint64_t v) {
  do {
    s += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
}

// Reads the fields above into m and returns the proto SentencePiece loads:
// the same, with add_dummy_prefix off when it was on (set m.dummy_prefix).
// Error when the model normalizes the text, or when these fields cannot be
// read: SentencePiece would then apply what they say unchecked (an absent
// normalizer_spec is its defaults, which remove spaces).
std::string inspect(SubwordModel& m, const std::string& what) {
  std::vector<Field> top, sub;
  if (!fields(m.proto, top))
    throw Error(what + ": it is not a SentencePiece model (not a well-formed protobuf ModelProto)");
  // A field given twice is merged, the last value winning, as protobuf does.
  bool dummy = true, extra_spaces = true;
  std::string name, charsmap;
  bool has_normalizer = false;
  for (const Field& f : top) {
    if ((f.number == 2 || f.number == 3) && f.wire != 2)
      throw Error(what + ": " + (f.number == 2 ? "trainer_spec" : "normalizer_spec") +
                  " is not a message (protobuf wire type " + std::to_string(f.wire) + ")");
    if (f.number == 2) {
      if (!fields(f.bytes, sub))
        throw Error(what + ": trainer_spec is not a well-formed protobuf message");
      for (const Field& g : sub)
        if (g.number == 3 && g.wire == 0) m.model_type = static_cast<int>(g.value);
    }
    if (f.number == 3) {
      if (!fields(f.bytes, sub))
        throw Error(what + ": normalizer_spec is not a well-formed protobuf message");
      has_normalizer = true;
      for (const Field& g : sub) {
        if (g.number == 1 && g.wire == 2) name = std::string(g.bytes);
        if (g.number == 2 && g.wire == 2) charsmap = std::string(g.bytes);
        if (g.number == 3 && g.wire == 0) dummy = g.value != 0;
        if (g.number == 4 && g.wire == 0) extra_spaces = g.value != 0;
      }
    }
  }
  if (!has_normalizer)
    throw Error(what + ": normalizer_spec is missing, so SentencePiece's defaults apply (remove_extra_whitespaces "
                "on); capstep reads SentencePiece models that keep every space, so that the text comes back exactly");
  if (name != "identity")
    throw Error(what + ": normalizer_spec.name is \"" + name +
                "\"; capstep reads SentencePiece models that leave the text as it is (\"identity\"), so that "
                "it comes back exactly");
  // The rules SentencePiece applies are the charsmap's, whatever the name says.
  if (!charsmap.empty())
    throw Error(what + ": normalizer_spec.precompiled_charsmap is not empty (" + std::to_string(charsmap.size()) +
                " bytes of normalization rules); capstep reads SentencePiece models that leave the text as it is, "
                "so that it comes back exactly");
  if (extra_spaces)
    throw Error(what + ": normalizer_spec.remove_extra_whitespaces is on; capstep reads SentencePiece models that "
                "keep every space, so that the text comes back exactly");
  m.dummy_prefix = dummy;
  if (!dummy) return m.proto;
  std::string out;
  for (const Field& f : top) {
    if (f.number != 3) {
      out.append(m.proto, f.begin, f.end - f.begin);
      continue;
    }
    out += '\x1A';   // field 3, length-delimited
    write_varint(out, f.bytes.size() + 2);
    out.append(f.bytes);
    out += "\x18";   // field 3 (add_dummy_prefix) = false: the last value wins
    out += '\0';
  }
  return out;
}

// Loads m->proto and finds the 256 byte pieces (a model without them, made
// elsewhere without byte fallback, cannot give every text back: refused).
void load(SubwordModel& m, const std::string& what) {
  const auto st = m.sp.LoadFromSerializedProto(inspect(m, what));
  if (!st.ok()) throw sp_error(what, st);
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    m.byte_id[b] = m.sp.PieceToId(piece);
    if (!m.sp.IsByte(m.byte_id[b]))
      throw Error(what + ": the model has no byte piece " + piece + " (it was made without byte fallback)");
  }
}

}  // namespace

std::shared_ptr<const SubwordModel> subword_train(TokenizerKind kind, int64_t vocab, std::string_view text) {
  Lines lines(text);
  auto m = std::make_shared<SubwordModel>();
  // Exact round trips: no normalization, no space added or removed; byte
  // fallback for any character outside the pieces (character_coverage 1:
  // every character seen in training gets a piece before merges are made);
  // one thread and no sampling of sentences, so the same text gives the same
  // model on every machine.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", kind == TokenizerKind::bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(vocab)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &m->proto);
  if (!st.ok())
    throw sp_error("cannot train the " + std::string(kind == TokenizerKind::bpe ? "bpe:" : "unigram:") +
                       std::to_string(vocab) + " tokenizer on the text",
                   st);
  load(*m, "the trained tokenizer does not load");
  return m;
}

std::shared_ptr<const SubwordModel> subword_load(const std::string& proto) {
  auto m = std::make_shared<SubwordModel>();
  m->proto = proto;
  load(*m, "the tokenizer's model does not load");
  return m;
}

const std::string& subword_proto(const SubwordModel& m) { return m.proto; }

int64_t subword_size(const SubwordModel& m) { return m.sp.GetPieceSize(); }

int subword_type(const SubwordModel& m) { return m.model_type; }

bool subword_dummy_prefix(const SubwordModel& m) { return m.dummy_prefix; }

void subword_encode(const SubwordModel& m, std::string_view text, TokenIds& out, TextStats& s) {
  // SentencePiece encodes runs of valid UTF-8 without U+2581; what it could
  // not give back (a byte that is not UTF-8 would come back as U+FFFD, U+2581
  // as a space) goes in as its bytes' pieces. So every text comes back, and
  // nothing is unknown.
  std::vector<int> ids;
  // A model without a usable piece for U+2581 (SentencePiece's sign for a
  // space) falls back to that sign's three bytes for each space: those bytes
  // come out of SentencePiece only for a space (the text's own U+2581 does
  // not go in), so they go out as the space's byte piece, which decodes to
  // the space.
  const int sign[3] = {m.byte_id[0xE2], m.byte_id[0x96], m.byte_id[0x81]};
  auto put = [&] {
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k + 2 < ids.size() && ids[k] == sign[0] && ids[k + 1] == sign[1] && ids[k + 2] == sign[2]) {
        out.push_back(m.byte_id[0x20]);
        k += 2;
      } else {
        out.push_back(ids[k]);
      }
    }
  };
  bool prefix = m.dummy_prefix && !text.empty();   // the space still to put before the text
  auto run = [&](size_t begin, size_t end) {
    if (prefix) {
      // The first run (perhaps empty) with the model's dummy prefix.
      prefix = false;
      size_t stop = std::min(end, begin + (size_t{1} << 20));
      if (stop < end) {
        const size_t nl = text.substr(0, end).find('\n', stop);
        stop = nl == std::string_view::npos ? end : nl + 1;
      }
      std::string first;
      first.reserve(stop - begin + 1);
      first += ' ';
      first.append(text.substr(begin, stop - begin));
      const auto st = m.sp.Encode(first, &ids);
      if (!st.ok()) throw sp_error("cannot encode the text", st);
      put();
      begin = stop;
    }
    // In pieces of about 1 MiB ending at a newline: no piece spans a newline
    // (training saw lines only, so '\n' is a byte piece of its own), so the
    // ids are those of the whole run, without its ids as int twice over.
    for (size_t at = begin; at < end;) {
      size_t stop = std::min(end, at + (size_t{1} << 20));
      if (stop < end) {
        const size_t nl = text.substr(0, end).find('\n', stop);
        stop = nl == std::string_view::npos ? end : nl + 1;
      }
      const auto st = m.sp.Encode(text.substr(at, stop - at), &ids);
      if (!st.ok()) throw sp_error("cannot encode the text", st);
      put();
      at = stop;
    }
  };
  size_t begin = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    ++s.characters;
    if (n != 0 && !(n == 3 && text.compare(i, 3, "\xE2\x96\x81") == 0)) {
      i += n;
      continue;
    }
    run(begin, i);
    for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) out.push_back(m.byte_id[static_cast<unsigned char>(text[i + k])]);
    i += std::max<size_t>(n, 1);
    begin = i;
  }
  run(begin, text.size());
}

std::string subword_decode(const SubwordModel& m, const std::vector<int32_t>& ids) {
  // The pieces' text in order, not SentencePiece's Decode: that one turns
  // bytes that are not UTF-8 into U+FFFD; these give every byte back.
  std::string text;
  for (int32_t id : ids) text += subword_piece(m, id);
  if (m.dummy_prefix && !text.empty() && text[0] == ' ') text.erase(0, 1);   // the space encode put there
  return text;
}

std::string subword_piece(const SubwordModel& m, int32_t id) {
  if (m.sp.IsByte(id)) {
    // "<0xAB>": the byte itself, so a character split in bytes comes out whole.
    const std::string& p = m.sp.IdToPiece(id);
    return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  }
  if (m.sp.IsControl(id) || m.sp.IsUnknown(id)) return "";
  const std::string& p = m.sp.IdToPiece(id);
  std::string text;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
      text += ' ';
      i += 2;
    } else {
      text += p[i];
    }
  }
  return text;
}

std::vector<SubwordPiece> subword_pieces(const SubwordModel& m) {
  std::vector<SubwordPiece> out(static_cast<size_t>(m.sp.GetPieceSize()));
  for (int id = 0; id < m.sp.GetPieceSize(); ++id) {
    SubwordPiece& p = out[static_cast<size_t>(id)];
    p.text = m.sp.IdToPiece(id);
    p.score = m.sp.GetScore(id);
    p.kind = m.sp.IsUnknown(id) ? SubwordPieceKind::unknown
             : m.sp.IsControl(id) ? SubwordPieceKind::control
             : m.sp.IsByte(id)    ? SubwordPieceKind::byte
             : m.sp.IsUnused(id)  ? SubwordPieceKind::unused
                                  : SubwordPieceKind::normal;
  }
  return out;
}

#else  // no SentencePiece in this build

struct SubwordModel {};

bool have_sentencepiece() { return false; }

namespace {
[[noreturn]] void absent() {
  throw Error("the subword tokenizers (bpe:N, unigram:N) need SentencePiece, and this capstep was built without it "
              "(Debian: apt-get install libsentencepiece-dev, or run scripts/install-deps, then rebuild)");
}
}  // namespace

std::shared_ptr<const SubwordModel> subword_train(TokenizerKind, int64_t, std::string_view) { absent(); }
std::shared_ptr<const SubwordModel> subword_load(const std::string&) { absent(); }
const std::string& subword_proto(const SubwordModel&) { absent(); }
int64_t subword_size(const SubwordModel&) { absent(); }
int subword_type(const SubwordModel&) { absent(); }
bool subword_dummy_prefix(const SubwordModel&) { absent(); }
void subword_encode(const SubwordModel&, std::string_view, TokenIds&, TextStats&) { absent(); }
std::string subword_decode(const SubwordModel&, const std::vector<int32_t>&) { absent(); }
std::string subword_piece(const SubwordModel&, int32_t) { absent(); }
std::vector<SubwordPiece> subword_pieces(const SubwordModel&) { absent(); }

#endif

}  // namespace capstep::data
