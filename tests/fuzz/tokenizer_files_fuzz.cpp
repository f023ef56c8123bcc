// libFuzzer target for the readers of tokenizer files made elsewhere, which
// `capstep train --init-from` reads from any directory: tokenizer.json
// (bytelevel_from_tokenizer_json), vocab.json + merges.txt
// (bytelevel_from_vocab_merges) and, with SentencePiece in the build, a
// SentencePiece model (the protobuf reader of subword.cpp, then
// SentencePiece). Built and run by scripts/fuzz-text. The first byte of an
// input says which reader gets the rest (its value mod 3: 0 tokenizer.json,
// 1 vocab.json and merges.txt, cut at the first NUL byte, 2 tokenizer.model).
// For every input:
//   - the reader gives a tokenizer or throws capstep::Error; any other
//     exception, or a crash, is a failure;
//   - a tokenizer it gives reads back from its own model (what a checkpoint
//     keeps) with the same name and the same ids, and encodes a fixed text of
//     every kind of character (in NFC, with a special token's name in it)
//     with nothing unknown, with and without special tokens; it gives the
//     text back exactly unless its pre-tokenizers drop or add text (a Split
//     that removes its matches, ByteLevel's add_prefix_space) or an added
//     token decodes to other bytes (bytelevel_gives_text_back). A
//     tokenizer.json may hold any pre-tokenizer capstep reads: Split regexes
//     (PCRE2), Digits, ByteLevel, the NFC normalizer, added tokens.
// A broken invariant is __builtin_trap(), which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bytelevel.h"
#include "capstep/data.h"

using namespace capstep;
using namespace capstep::data;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

const char kText[] = "The cat's 42 naps.\n  caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 \xE2\x96\x81"
                    "a\x80\xFF\x00z\r\nDON'T 3.14159<|endoftext|><|im_start|>\t\t x";

void check(const Tokenizer& t, bool exact = true, bool exact_special = true) {
  const std::string text(kText, sizeof kText - 1);
  TextStats s;
  const TokenIds ids = t.encode(text, &s);
  require(s.unknown == 0);
  require(!exact || t.decode(ids) == text);
  const TokenIds with_special = t.encode(text, nullptr, true);
  require(!exact_special || t.decode(with_special) == text);
  const Tokenizer again = Tokenizer::from_model(t.name(), t.model());
  require(again.name() == t.name() && again.model() == t.model());
  require(again.encode(text) == ids);
  require(again.encode(text, nullptr, true) == with_special);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const Tokenizer t = Tokenizer::from_bytelevel(rest);
        const auto m = bytelevel_from_tokenizer_json(rest);
        check(t, bytelevel_gives_text_back(*m, false), bytelevel_gives_text_back(*m, true));
        break;
      }
      case 1: {
        const size_t cut = rest.find('\0');
        const std::string vocab = rest.substr(0, cut);
        const std::string merges = cut == std::string::npos ? "" : rest.substr(cut + 1);
        check(Tokenizer::from_bytelevel(vocab, &merges));
        break;
      }
      default:
        if (!have_sentencepiece()) return 0;
        check(Tokenizer::from_sentencepiece(rest));
        break;
    }
  } catch (const Error&) {
    // a refusal: what the readers give for a file they cannot read
  }
  return 0;
}
