// libFuzzer target for the text reader and the tokenizers on any bytes. Built
// and run by scripts/fuzz-text. For every input:
//   - nothing crashes; the reader either returns ids or throws capstep::Error
//     naming the text;
//   - nothing is dropped without being counted: the char tokenizer gives one
//     id per character, its known characters are the input's known bytes in
//     order, and every other character is counted in TextStats::unknown (the
//     share the CLI prints), at the first position it reports;
//   - text -> tokens -> text is exact where it must be: always through the
//     byte tokenizer, and through the char tokenizer when nothing is unknown;
//   - refusal follows the documented limit: UnknownTextError exactly when
//     more than kMaxUnknownShare is unknown and not allowed;
//   - reading the bytes from a file gives the same ids as from memory;
//   - TokenIds of every width keep every id;
//   - with SentencePiece in the build (CAPSTEP_HAVE_SENTENCEPIECE), a bpe
//     tokenizer trained once on a fixed text: any bytes come back exactly
//     with nothing unknown, and on valid UTF-8 without U+2581 the ids are
//     SentencePiece's own encoder's;
//   - with CAPSTEP_GOLDEN_DIR (tests/golden/hf), the byte-level BPE of
//     gpt2-bpe/tokenizer.json and (with SentencePiece) Llama's kind of
//     SentencePiece model, llama-sp/tokenizer.model, whose dummy prefix capstep
//     puts before the text itself: any bytes come back exactly, piece by piece
//     for the byte-level BPE, with nothing unknown and every character
//     counted; and the Llama model's ids are SentencePiece's own (with the
//     dummy prefix) on valid UTF-8 without U+2581.
// A broken invariant is __builtin_trap(), which libFuzzer reports as a crash.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "capstep/data.h"

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

using namespace capstep;
using namespace capstep::data;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

const std::string& scratch_file() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir && *dir ? dir : "/tmp") + "/capstep-text-fuzz-" + std::to_string(getpid()) + ".txt";
    std::atexit([] { std::remove(scratch_file().c_str()); });
    return p;
  }();
  return path;
}

// Ids, or "" with the error's message in *error; the error must name `name`.
bool reader(const std::string& text, const std::string& name, const Tokenizer& tok, bool allow, TokenIds* ids,
            TextStats* stats, bool* unknown_error) {
  *unknown_error = false;
  try {
    *ids = text_tokens(text, name, tok, allow, stats);
    return true;
  } catch (const UnknownTextError& e) {
    *unknown_error = true;
    require(std::string(e.what()).find(name) != std::string::npos);
  } catch (const Error& e) {
    require(std::string(e.what()).find(name) != std::string::npos);
  }
  return false;
}

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
// A bpe tokenizer trained once, and SentencePiece's own processor on its model.
struct Subword {
  Tokenizer tok;
  sentencepiece::SentencePieceProcessor sp;
};
const Subword& subword() {
  static const Subword* s = [] {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "The cat naps in the den " + std::to_string(i) + ". x[i] = y(i) * 2; caf\xC3\xA9 \xE6\x97\xA5 "
              "na\xC3\xAFve, \"quoted\" (paren) {brace} tab\there\r\n";
    auto* r = new Subword{Tokenizer::parse("bpe:350").trained_on(text), {}};
    require(r->sp.LoadFromSerializedProto(r->tok.model()).ok());
    return r;
  }();
  return *s;
}

// Characters SentencePiece's own encoder would not give back, counted
// independently of capstep's reading: bytes outside valid UTF-8 (by the
// standard's table of well-formed sequences) and U+2581.
struct Utf8Count {
  uint64_t characters = 0;   // well-formed sequences, and each other byte alone
  uint64_t lost = 0;         // those other bytes, and U+2581
};
Utf8Count utf8_count(const std::string& t) {
  Utf8Count r;
  for (size_t i = 0; i < t.size();) {
    const auto b = [&](size_t k) { return i + k < t.size() ? static_cast<unsigned char>(t[i + k]) : 0x100u; };
    const unsigned c = b(0);
    size_t n = 0;
    if (c < 0x80) n = 1;
    else if (c >= 0xC2 && c <= 0xDF && b(1) >= 0x80 && b(1) <= 0xBF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      if (b(1) >= lo && b(1) <= hi && b(2) >= 0x80 && b(2) <= 0xBF) n = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      if (b(1) >= lo && b(1) <= hi && b(2) >= 0x80 && b(2) <= 0xBF && b(3) >= 0x80 && b(3) <= 0xBF) n = 4;
    }
    if (n == 0 || (n == 3 && t.compare(i, 3, "\xE2\x96\x81") == 0)) ++r.lost;
    ++r.characters;
    i += n ? n : 1;
  }
  return r;
}
#endif

#ifdef CAPSTEP_GOLDEN_DIR
std::string golden(const std::string& name) {
  std::ifstream f(std::string(CAPSTEP_GOLDEN_DIR) + "/" + name, std::ios::binary);
  require(static_cast<bool>(f));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
const Tokenizer& bytelevel() {
  static const Tokenizer* t = new Tokenizer(Tokenizer::from_bytelevel(golden("gpt2-bpe/tokenizer.json")));
  return *t;
}
#ifdef CAPSTEP_HAVE_SENTENCEPIECE
const Subword& llama() {
  static const Subword* s = [] {
    const std::string model = golden("llama-sp/tokenizer.model");
    auto* r = new Subword{Tokenizer::from_sentencepiece(model), {}};
    require(r->sp.LoadFromSerializedProto(model).ok());
    return r;
  }();
  return *s;
}
#endif
#endif

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
#ifdef CAPSTEP_HAVE_SENTENCEPIECE
  subword();   // trained before the first input, not timed as one
#endif
#ifdef CAPSTEP_GOLDEN_DIR
  bytelevel();
#ifdef CAPSTEP_HAVE_SENTENCEPIECE
  llama();
#endif
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Tokenizer chars(TokenizerKind::chars), bytes(TokenizerKind::bytes);

  // ---- the char tokenizer: counted, never silently dropped
  TextStats s;
  const TokenIds ids = chars.encode(text, &s);
  require(ids.vocab() == 64 && ids.width() == 1 && ids.size() == s.characters);
  const std::vector<int32_t> v = ids.to_vector();
  require(v == encode(text));   // the free function: the same reading
  const std::string decoded = chars.decode(ids);
  require(decoded == decode(v));
  size_t unknown = 0;
  for (int32_t id : v) unknown += id == kUnknownId;
  require(unknown == s.unknown);
  std::string known_in, known_out;
  for (char c : text)
    if (encode_char(static_cast<unsigned char>(c)) != kUnknownId) known_in += c;
  for (char c : decoded)
    if (c != kUnknownSymbol) known_out += c;
  require(known_in == known_out);
  require(s.characters <= size && (size == 0) == (s.characters == 0));
  if (s.unknown == 0) require(decoded == text);
  if (s.unknown > 0) {
    require(s.first_unknown_offset < size);
    require(static_cast<unsigned char>(text[s.first_unknown_offset]) == s.first_unknown_byte);
    require(encode_char(s.first_unknown_byte) == kUnknownId);
    require(s.first_unknown_line ==
            1 + static_cast<uint64_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(s.first_unknown_offset), '\n')));
    // Nothing unknown before the reported first one.
    for (size_t i = 0; i < s.first_unknown_offset; ++i)
      require(encode_char(static_cast<unsigned char>(text[i])) != kUnknownId);
    const std::string m = describe_unknown(s, "char");
    require(m.find(std::to_string(s.unknown) + " of " + std::to_string(s.characters) + " characters") == 0);
  }

  // ---- the byte tokenizer: exact on any bytes
  TextStats b;
  const TokenIds bids = bytes.encode(text, &b);
  require(bids.size() == size && b.characters == size && b.unknown == 0);
  require(bytes.decode(bids) == text && bytes.decode(bids.to_vector()) == text);

  // ---- the reader's decisions, in memory and from a file
  const std::string name = "text file 'fuzz.txt'";
  TokenIds got;
  TextStats rs;
  bool unknown_error = false;
  const bool ok = reader(text, name, chars, false, &got, &rs, &unknown_error);
  const bool has_nul = text.find('\0') != std::string::npos;
  if (ok) {
    require(!text.empty() && !has_nul && s.share() <= kMaxUnknownShare && s.unknown < s.characters);
    require(got == ids && rs.unknown == s.unknown && rs.characters == s.characters);
  } else if (unknown_error) {
    require(!has_nul && s.share() > kMaxUnknownShare && s.unknown < s.characters);
  } else {
    require(text.empty() || has_nul || s.unknown == s.characters);
  }
  const bool ok_allowed = reader(text, name, chars, true, &got, &rs, &unknown_error);
  require(!unknown_error);
  require(ok_allowed == (!text.empty() && !has_nul && s.unknown < s.characters));
  if (ok_allowed) require(got == ids);
  require(reader(text, name, bytes, false, &got, &rs, &unknown_error) == !text.empty());
  if (!text.empty()) require(got == bids);

  if (std::FILE* f = std::fopen(scratch_file().c_str(), "wb")) {
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    std::fclose(f);
    if (written) {
      try {
        require(read_text_tokens(scratch_file(), bytes, false) == bids && !text.empty());
      } catch (const Error& e) {
        require(text.empty() && std::string(e.what()).find(scratch_file()) != std::string::npos);
      }
      try {
        require(read_text_tokens(scratch_file(), chars, true) == ids && ok_allowed);
      } catch (const Error& e) {
        require(!ok_allowed && std::string(e.what()).find(scratch_file()) != std::string::npos);
      }
    }
  }

  // ---- ids of every width keep every value
  std::vector<int32_t> two_bytes(bids.to_vector()), four_bytes(two_bytes);
  for (size_t i = 1; i < two_bytes.size(); i += 2) {
    two_bytes[i] = two_bytes[i] * 256 + two_bytes[i - 1];             // < 65536
    four_bytes[i] = four_bytes[i] * 65536 + two_bytes[i];             // < 2^24
  }
  const TokenIds two(two_bytes, 65536), four(four_bytes, 1 << 24);
  require(two.width() == 2 && four.width() == 4);
  require(two.to_vector() == two_bytes && four.to_vector() == four_bytes);
  const TokenIds sixteen(bids.to_vector(), 300);
  require(sixteen.width() == 2 && sixteen.to_vector() == bids.to_vector());

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
  // ---- a subword tokenizer: SentencePiece's ids, exact where it can be
  const Subword& sw = subword();
  TextStats ss;
  const TokenIds sids = sw.tok.encode(text, &ss);
  const std::vector<int32_t> mine = sids.to_vector();
  const Utf8Count count = utf8_count(text);
  require(ss.unknown == 0 && ss.characters == count.characters);
  require(sw.tok.decode(sids) == text);
  std::string pieces;
  for (int32_t id : mine) pieces += sw.tok.piece(id);
  require(pieces == text);
  if (count.lost == 0) {
    std::vector<int> own;
    require(sw.sp.Encode(text, &own).ok());
    require(mine.size() == own.size() && std::equal(mine.begin(), mine.end(), own.begin()));
  }
#endif

#ifdef CAPSTEP_GOLDEN_DIR
  // ---- tokenizers transformers made: any bytes back, nothing unknown
  {
    const Tokenizer& bl = bytelevel();
    TextStats bs;
    const TokenIds bids2 = bl.encode(text, &bs);
    require(bs.unknown == 0);
    require(bl.decode(bids2) == text);
    std::string parts;
    for (int32_t id : bids2.to_vector()) parts += bl.piece(id);
    require(parts == text);
  }
#ifdef CAPSTEP_HAVE_SENTENCEPIECE
  {
    const Subword& ll = llama();
    TextStats ls;
    const TokenIds lids = ll.tok.encode(text, &ls);
    require(ls.unknown == 0 && ll.tok.decode(lids) == text);
    if (utf8_count(text).lost == 0) {
      std::vector<int> own;
      require(ll.sp.Encode(text, &own).ok());
      const std::vector<int32_t> got = lids.to_vector();
      require(got.size() == own.size() && std::equal(got.begin(), got.end(), own.begin()));
    }
  }
#endif
#endif
  return 0;
}
