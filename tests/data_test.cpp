// Tokenizer, built-in corpus, text files and the batch stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <sys/stat.h>

#include "capstep/data.h"

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>   // the reference encoder for capstep's subword ids
#endif

#include "test_util.h"

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;
using namespace capstep::data;

// Counts heap allocations, to prove BatchStream::fill makes none.
static std::atomic<long> g_allocations{0};
[[gnu::noinline]] void* operator new(size_t n) {
  g_allocations++;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Out of line (and operator new too), so g++ does not pair an inlined free()
// or malloc() with the other and warn (-Wmismatched-new-delete).
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

// ---- tokenizer ------------------------------------------------------------------

TEST(Tokenizer, HasExactly64DistinctSymbolsInAsciiOrder) {
  const std::string_view a = alphabet();
  ASSERT_EQ(a.size(), 64u);
  EXPECT_EQ(std::set<char>(a.begin(), a.end()).size(), 64u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i - 1], a[i]) << i;
  EXPECT_EQ(a[0], '\n');
  EXPECT_EQ(a[1], ' ');
  EXPECT_EQ(a[63], '~');
  EXPECT_EQ(kUnknownId, 63);
}

TEST(Tokenizer, EncodesToTheDocumentedIds) {
  // '\n'=0, ' '=1, '!'=2, '?'=10, 'A'=11, 'Z'=36, 'a'=37, 'z'=62.
  EXPECT_EQ(encode("\n !?AZaz"), (std::vector<int32_t>{0, 1, 2, 10, 11, 36, 37, 62}));
  // "Hi." : 'H' = 11 + 7, 'i' = 37 + 8, '.' = 7
  EXPECT_EQ(encode("Hi."), (std::vector<int32_t>{18, 45, 7}));
}

TEST(Tokenizer, RoundTripsEveryKnownSymbol) {
  const std::string known(alphabet().substr(0, 63));
  std::string text;
  for (int rep = 0; rep < 3; ++rep) text += known;
  text += "The cat said: \"Where is it?\" - it's here; see, no!\n";
  EXPECT_EQ(decode(encode(text)), text);
  for (int32_t id : encode(known)) EXPECT_NE(id, kUnknownId);
}

TEST(Tokenizer, MapsEverythingElseToTheOneUnknownSymbol) {
  // digits, tab, carriage return, parenthesis, '~' itself
  EXPECT_EQ(encode("a1b\tc\r(~"), (std::vector<int32_t>{37, 63, 38, 63, 39, 63, 63, 63}));
  EXPECT_EQ(decode(encode("x=3")), "x~~");
  // UTF-8: "é" is 2 bytes, "日" 3 bytes, "😀" 4 bytes: one unknown per character.
  EXPECT_EQ(encode("caf\xC3\xA9!"), (std::vector<int32_t>{39, 37, 42, 63, 2}));
  EXPECT_EQ(encode("\xE6\x97\xA5\xF0\x9F\x98\x80"), (std::vector<int32_t>{63, 63}));
  // Latin-1 bytes: 0xB0 (degree sign) alone, 0xE9 (e acute) before ASCII.
  EXPECT_EQ(encode("\xB0" "C \xE9t\xE9"), (std::vector<int32_t>{63, 13, 1, 63, 56, 63}));
  for (int c = 0; c < 256; ++c) {
    const int32_t id = encode_char(static_cast<unsigned char>(c));
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 64);
    if (id != kUnknownId) {
      EXPECT_EQ(alphabet()[static_cast<size_t>(id)], static_cast<char>(c));
    }
  }
}

TEST(Tokenizer, RejectsIdsOutsideTheVocabulary) {
  const std::string m = error_of([] { decode({1, 2, 64}); });
  EXPECT_NE(m.find("token id 64 at position 2"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 64)"), std::string::npos) << m;
  EXPECT_NE(error_of([] { decode_id(-1); }).find("token id -1"), std::string::npos);
  EXPECT_EQ(decode_id(63), '~');
}

// ---- runtime tokenizers and compact ids ---------------------------------------------

TEST(Tokenizer, CharKindMatchesTheFreeFunctionsAndStoresOneBytePerId) {
  const Tokenizer t = Tokenizer::parse("char");
  EXPECT_EQ(t.name(), "char");
  EXPECT_EQ(t.vocab(), 64);
  const std::string text = "caf\xC3\xA9 x=3\n\xE6\x97\xA5!" + builtin_corpus(kCorpusSeed, 5000);
  TextStats s;
  const TokenIds ids = t.encode(text, &s);
  EXPECT_EQ(ids.to_vector(), encode(text));
  EXPECT_EQ(ids.width(), 1u);
  EXPECT_EQ(ids.bytes(), ids.size());
  EXPECT_EQ(t.decode(ids), decode(encode(text)));
  // 11 characters before the corpus; "é", "=", "3" and "日" are unknown.
  EXPECT_EQ(s.characters, 5011u);
  EXPECT_EQ(s.unknown, 4u);
  EXPECT_EQ(s.first_unknown_offset, 3u);
  EXPECT_EQ(s.first_unknown_line, 1u);
  EXPECT_EQ(s.first_unknown_byte, 0xC3);
}

TEST(Tokenizer, ByteKindRoundTripsEveryByteSequence) {
  const Tokenizer t = Tokenizer::parse("byte");
  EXPECT_EQ(t.name(), "byte");
  EXPECT_EQ(t.vocab(), 256);
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  // Invalid UTF-8 too: a stray continuation byte, a truncated and an overlong sequence.
  const std::string text = all + "\x80\xC3\xE6\x97" "A\xC0\xAF" + std::string("\0\0", 2);
  TextStats s;
  const TokenIds ids = t.encode(text, &s);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(text[i])) << i;
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.decode(ids.to_vector()), text);
  EXPECT_EQ(s.characters, text.size());
  EXPECT_EQ(s.unknown, 0u);
  EXPECT_EQ(t.piece(0xE9), "\xE9");
  EXPECT_NE(error_of([&] { t.decode(std::vector<int32_t>{65, 256}); }).find("token id 256 at position 1"),
            std::string::npos);
  const std::string m = error_of([] { Tokenizer::parse("bpe"); });
  EXPECT_NE(m.find("unknown tokenizer 'bpe'; the tokenizers are char, byte"), std::string::npos) << m;
  EXPECT_EQ(Tokenizer::names(), (std::vector<std::string>{"char", "byte", "bpe:N", "unigram:N", "bytelevel-bpe:N"}));
}

TEST(TokenIds, UseTheNarrowestWidthAndKeepEveryValue) {
  EXPECT_EQ(TokenIds(64).width(), 1u);
  EXPECT_EQ(TokenIds(256).width(), 1u);
  EXPECT_EQ(TokenIds(257).width(), 2u);
  EXPECT_EQ(TokenIds(65536).width(), 2u);
  EXPECT_EQ(TokenIds(65537).width(), 4u);
  for (int64_t vocab : {2, 64, 256, 300, 65536, 100000}) {
    std::vector<int32_t> v;
    uint64_t seed = static_cast<uint64_t>(vocab);
    for (int i = 0; i < 1000; ++i) v.push_back(static_cast<int32_t>(splitmix64(seed) % static_cast<uint64_t>(vocab)));
    v.push_back(static_cast<int32_t>(vocab - 1));
    const TokenIds ids(v, vocab);
    EXPECT_EQ(ids.to_vector(), v) << vocab;
    EXPECT_EQ(ids.bytes(), v.size() * ids.width()) << vocab;
    EXPECT_EQ(ids.to_vector(10, 20), std::vector<int32_t>(v.begin() + 10, v.begin() + 20));
    TokenIds pushed(vocab);
    for (int32_t x : v) pushed.push_back(x);
    EXPECT_TRUE(pushed == ids) << vocab;
  }
  std::string m = error_of([] { TokenIds({1, 2, 300}, 300); });
  EXPECT_NE(m.find("token id 300 at position 2"), std::string::npos) << m;
  m = error_of([] { TokenIds(64).push_back(-1); });
  EXPECT_NE(m.find("token id -1 at position 0"), std::string::npos) << m;
  m = error_of([] { TokenIds::from_bytes("\x01\x02\x40", 64); });
  EXPECT_NE(m.find("token id 64 at position 2"), std::string::npos) << m;
  m = error_of([] { TokenIds({1, 2, 3}, 4).to_vector(2, 5); });
  EXPECT_NE(m.find("[2, 5) is not within the 3 ids"), std::string::npos) << m;
  EXPECT_THROW(TokenIds(0), Error);
}

// ---- subword tokenizers (SentencePiece) ----------------------------------------------

namespace {
// A text of prose, code, tabs, CRLF, non-ASCII and a NUL byte, over 1 MiB (so
// encoding goes in more than one piece), fixed.
std::string mixed_text() {
  std::string t;
  const std::string code = "for (int i = 0; i < 137; ++i) x[i] = y(i) * 2;\r\n\tif (z != 0) return \"caf\xC3\xA9\";\n";
  const std::string corpus = builtin_corpus(kCorpusSeed, 200000);
  for (int rep = 0; t.size() < (size_t{3} << 19); ++rep) {
    t += corpus.substr(static_cast<size_t>(rep) * 5000 % 150000, 5000);
    t += code;
    t += "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 na\xC3\xAFve \xCE\xBB" + std::to_string(rep) + "\n";
  }
  t += std::string("end\0", 4);
  return t;
}
}  // namespace

TEST(Subword, NamesAndSizesAreChecked) {
  std::string m = error_of([] { Tokenizer::parse("bpe:299"); });
  EXPECT_NE(m.find("tokenizer 'bpe:299': the size must be an integer in [300, 65536]"), std::string::npos) << m;
  EXPECT_THROW(Tokenizer::parse("unigram:65537"), Error);
  EXPECT_THROW(Tokenizer::parse("bpe:"), Error);
  EXPECT_THROW(Tokenizer::parse("bpe:4k"), Error);
  EXPECT_THROW(Tokenizer::parse("wordpiece:400"), Error);
  if (!have_sentencepiece()) {
    m = error_of([] { Tokenizer::parse("bpe:400"); });
    EXPECT_NE(m.find("libsentencepiece-dev"), std::string::npos) << m;
    GTEST_SKIP() << "built without SentencePiece";
  }
  const Tokenizer t = Tokenizer::parse("bpe:400");
  EXPECT_EQ(t.name(), "bpe:400");
  EXPECT_EQ(t.vocab(), 400);
  EXPECT_FALSE(t.trained());
  m = error_of([&] { t.encode("abc"); });
  EXPECT_NE(m.find("the bpe:400 tokenizer is not trained yet"), std::string::npos) << m;
  EXPECT_EQ(Tokenizer::parse("unigram:500").name(), "unigram:500");
  EXPECT_TRUE(Tokenizer().trained());
  EXPECT_EQ(Tokenizer().model(), "");
}

#ifdef CAPSTEP_HAVE_SENTENCEPIECE
TEST(Subword, IdsAreSentencePiecesOwnAndRoundTripExactly) {
  const std::string text = mixed_text();
  for (const char* name : {"bpe:600", "unigram:500"}) {
    SCOPED_TRACE(name);
    const Tokenizer t = Tokenizer::parse(name).trained_on(text);
    ASSERT_TRUE(t.trained());
    TextStats s;
    const TokenIds ids = t.encode(text, &s);
    EXPECT_EQ(ids.width(), 2u);
    EXPECT_EQ(s.unknown, 0u);
    EXPECT_LT(ids.size(), text.size() / 2);   // subwords: fewer ids than bytes
    // SentencePiece's own encoder, on the whole text at once.
    sentencepiece::SentencePieceProcessor sp;
    ASSERT_TRUE(sp.LoadFromSerializedProto(t.model()).ok());
    EXPECT_EQ(sp.GetPieceSize(), t.vocab());
    std::vector<int> own;
    ASSERT_TRUE(sp.Encode(text, &own).ok());
    const std::vector<int32_t> mine = ids.to_vector();
    ASSERT_EQ(mine.size(), own.size());
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), own.begin()));
    // Exact round trip, through decode and through the pieces sample prints.
    EXPECT_EQ(t.decode(ids), text);
    std::string pieces;
    for (int32_t id : mine) pieces += t.piece(id);
    EXPECT_EQ(pieces, text);
    // The model reloads to the same ids; training is deterministic.
    const Tokenizer again = Tokenizer::from_model(name, t.model());
    EXPECT_TRUE(again.encode(text) == ids);
    EXPECT_EQ(Tokenizer::parse(name).trained_on(text).model(), t.model());
    // A larger name pads the vocabulary (ids past the model's decode to
    // nothing); a smaller one cannot hold the model's ids.
    const std::string kind = std::string(name).substr(0, std::string(name).find(':'));
    const Tokenizer padded = Tokenizer::from_model(kind + ":700", t.model());
    EXPECT_EQ(padded.vocab(), 700);
    EXPECT_EQ(padded.model_size(), t.vocab());
    EXPECT_TRUE(padded.encode(text).to_vector() == ids.to_vector());
    EXPECT_EQ(padded.decode(std::vector<int32_t>{static_cast<int32_t>(t.vocab()), 699}), "");
    EXPECT_EQ(padded.piece(699), "");
    EXPECT_THROW(Tokenizer::from_model(kind + ":300", t.model()), Error);
    EXPECT_THROW(Tokenizer::from_model(name, "not a model"), Error);
  }
}

TEST(Subword, AnyBytesComeBackAndNothingIsUnknown) {
  const Tokenizer t = Tokenizer::parse("bpe:400").trained_on(mixed_text());
  // A byte that is not UTF-8, and U+2581 (SentencePiece's sign for a space,
  // which its decoder gives back as a space): their bytes' pieces.
  TextStats s;
  const std::string odd = "ab\n\x80z \xE2\x96\x81y";
  const TokenIds ids = t.encode(odd, &s);
  EXPECT_EQ(s.characters, 8u);
  EXPECT_EQ(s.unknown, 0u);
  EXPECT_EQ(t.decode(ids), odd);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(t.model()).ok());
  const std::vector<int32_t> v = ids.to_vector();
  for (const char* piece : {"<0x80>", "<0xE2>", "<0x96>", "<0x81>"})
    EXPECT_EQ(std::count(v.begin(), v.end(), sp.PieceToId(piece)), 1) << piece;
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(t.decode(t.encode(all + all)), all + all);
  EXPECT_EQ(text_tokens(odd, "text file 'odd.txt'", t, false).to_vector(), v);
  // A vocabulary the text cannot fill: SentencePiece's reason.
  const std::string small = error_of([] { Tokenizer::parse("unigram:5000").trained_on("The cat naps.\n"); });
  EXPECT_NE(small.find("cannot train the unigram:5000 tokenizer on the text: SentencePiece:"), std::string::npos)
      << small;
}
#endif

// ---- the share of unknown characters (issue 26, item 3) -------------------------------

TEST(UnknownText, CountsAndDescribesTheShareWithThePosition) {
  // 1001 characters, 4 unknown: '7', "é" (two bytes, one character), '9', '9'.
  const std::string text = std::string(200, 'a') + "\n" + std::string(300, 'b') + "7" + std::string(496, 'c') +
                           "\xC3\xA9" "99";
  TextStats s;
  const TokenIds ids = text_tokens(text, "text file 'a.txt'", Tokenizer(), false, &s);
  EXPECT_EQ(ids.size(), 1001u);
  EXPECT_EQ(s.characters, 1001u);
  EXPECT_EQ(s.unknown, 4u);
  EXPECT_NEAR(s.share(), 4.0 / 1001.0, 1e-15);
  EXPECT_EQ(describe_unknown(s, "char"),
            "4 of 1001 characters (0.40%) are outside the char tokenizer's 63 symbols and train as '~' "
            "(the first, '7', at line 2, byte offset 501)");
  // Names for the characters a person cannot see.
  TextStats t;
  Tokenizer().encode("ab\r\n", &t);
  EXPECT_NE(describe_unknown(t, "char").find("(the first, a carriage return '\\r', at line 1, byte offset 2)"),
            std::string::npos) << describe_unknown(t, "char");
  Tokenizer().encode("Hi\n\nyou\t", &t);
  EXPECT_NE(describe_unknown(t, "char").find("a tab, at line 3, byte offset 7"), std::string::npos);
  Tokenizer().encode("a\xE2\x80\x99s", &t);
  EXPECT_NE(describe_unknown(t, "char").find("a non-ASCII character (byte 0xE2)"), std::string::npos);
  // A tiny share is never printed as 0.00%.
  TextStats tiny;
  tiny.characters = 1000000;
  tiny.unknown = 1;
  tiny.first_unknown_line = 1;
  tiny.first_unknown_byte = '1';
  EXPECT_NE(describe_unknown(tiny, "char").find("(0.0001%)"), std::string::npos) << describe_unknown(tiny, "char");
}

TEST(UnknownText, MoreThanOnePercentIsRefusedUnlessAllowed) {
  // Exactly 1%: taken. One more unknown character: refused.
  const std::string at_limit = std::string(990, 'a') + std::string(10, '1');
  TextStats s;
  EXPECT_EQ(text_tokens(at_limit, "text file 'ok.txt'", Tokenizer(), false, &s).size(), 1000u);
  EXPECT_EQ(s.unknown, 10u);
  const std::string code = "x[0] = 137 + y(0);\r\n";
  std::string m;
  try {
    text_tokens(code, "text file 'code.txt'", Tokenizer(), false);
    ADD_FAILURE() << "a text 60% unknown was taken";
  } catch (const UnknownTextError& e) {
    m = e.what();
  }
  // 20 characters: x, the two spaces, ';', '\n' and 'y' are known; 12 are not.
  EXPECT_NE(m.find("text file 'code.txt': 12 of 20 characters (60.00%) are outside the char tokenizer's 63 symbols"),
            std::string::npos) << m;
  EXPECT_NE(m.find("(the first, '[', at line 1, byte offset 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("; more than 1% unknown is refused: use the byte tokenizer, which represents any text, or allow "
                   "unknown characters"),
            std::string::npos) << m;
  // Allowed: the same ids as the plain encoding, '~' where unknown.
  const TokenIds allowed = text_tokens(code, "text file 'code.txt'", Tokenizer(), true, &s);
  EXPECT_EQ(allowed.to_vector(), encode(code));
  EXPECT_EQ(s.unknown, 12u);
  // The byte tokenizer takes it, and binary data, whole.
  const std::string binary("\x00\x01\xFF" "x[0]\r\n", 9);
  EXPECT_EQ(Tokenizer(TokenizerKind::bytes).decode(text_tokens(binary, "b", Tokenizer(TokenizerKind::bytes), false)),
            binary);
  // Nothing known at all is refused even when unknown characters are allowed.
  m = error_of([] { text_tokens("1234\t", "text file 'n.txt'", Tokenizer(), true); });
  EXPECT_NE(m.find("text file 'n.txt' holds none of the char tokenizer's symbols"), std::string::npos) << m;
}

TEST(UnknownText, AFileIsReadOnceIntoOneBytePerCharacter) {
  TempDir d;
  std::string text;
  while (text.size() < 1000000) text += builtin_corpus(kCorpusSeed, 100000);
  text += "1";   // one unknown character
  const std::string p = d.write("big.txt", text);
  TextStats s;
  const TokenIds ids = read_text_tokens(p, Tokenizer(), false, &s);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids.bytes(), text.size());
  EXPECT_EQ(s.unknown, 1u);
  EXPECT_EQ(s.first_unknown_offset, text.size() - 1);
  EXPECT_EQ(s.first_unknown_line, 1u + static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')));
  EXPECT_EQ(ids.to_vector(), encode(text));
  // Errors name the file.
  const std::string nul = d.write("nul.txt", std::string("The cat.\0", 9));
  std::string m = error_of([&] { read_text_tokens(nul, Tokenizer(), false); });
  EXPECT_NE(m.find("text file '" + nul + "' holds a NUL byte at offset 8"), std::string::npos) << m;
  EXPECT_EQ(read_text_tokens(nul, Tokenizer(TokenizerKind::bytes), false).size(), 9u);
  m = error_of([&] { read_text_tokens(d.file("missing.txt"), Tokenizer(), false); });
  EXPECT_NE(m.find("missing.txt"), std::string::npos) << m;
  const std::string empty = d.write("empty.txt", "");
  m = error_of([&] { read_text_tokens(empty, Tokenizer(TokenizerKind::bytes), false); });
  EXPECT_NE(m.find("text file '" + empty + "' is empty"), std::string::npos) << m;
}

// ---- corpus -----------------------------------------------------------------------

TEST(Corpus, IsDeterministicWithTheDocumentedSize) {
  const std::string a = builtin_corpus();
  EXPECT_EQ(a.size(), kCorpusSize);
  EXPECT_EQ(a.size(), 262144u);
  EXPECT_EQ(a, builtin_corpus(kCorpusSeed));
  // Pinned: any change to the generator or word lists changes this hash, and
  // with it every recorded loss curve. Update deliberately, never silently.
  EXPECT_EQ(fnv1a(a), 16495923197064692736ULL) << "fnv1a = " << fnv1a(a);
  const std::string b = builtin_corpus(kCorpusSeed + 1);
  EXPECT_EQ(b.size(), kCorpusSize);
  EXPECT_NE(a, b);
  EXPECT_EQ(builtin_corpus(kCorpusSeed, 1000), a.substr(0, 1000));
}

TEST(Corpus, UsesOnlyKnownSymbols) {
  const std::vector<int32_t> ids = encode(builtin_corpus());
  ASSERT_EQ(ids.size(), kCorpusSize);
  std::set<int32_t> used(ids.begin(), ids.end());
  EXPECT_EQ(used.count(kUnknownId), 0u);
  EXPECT_GE(used.size(), 35u);   // letters of both cases, punctuation, newline
}

TEST(Corpus, HasGrammarAModelCanLearn) {
  const std::string text = builtin_corpus();
  // Questions are answered with their own noun.
  const std::regex where(R"(Where is the (\w+)\? The (\w+) is in the (\w+)\.)");
  int questions = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), where); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ((*it)[1], (*it)[2]);
    ++questions;
  }
  EXPECT_GT(questions, 300);
  // Articles agree with the next word.
  EXPECT_FALSE(std::regex_search(text, std::regex(R"(\ba [aeiou])")));
  EXPECT_FALSE(std::regex_search(text, std::regex(R"(\ban [^aeiou])")));
  // Counts agree with plurals.
  EXPECT_FALSE(std::regex_search(text, std::regex(R"(\bhas one \w+s\.)")));
  EXPECT_FALSE(std::regex_search(text, std::regex(R"(\bhas (two|three|four|five) \w+[^s]\.)")));
  // Every paragraph (line) ends a sentence.
  size_t lines = 0;
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1, ++lines) {
    const char last = text[nl - 1];
    EXPECT_TRUE(last == '.' || last == '!' || last == '"') << text.substr(start, nl - start);
  }
  EXPECT_GT(lines, 1000u);

  // Character entropy: far below the uniform ln(64) = 4.16 nats, so the loss
  // has room to fall; the bigram (conditional) entropy lower still.
  std::map<char, double> uni;
  std::map<std::pair<char, char>, double> bi;
  for (size_t i = 0; i < text.size(); ++i) {
    uni[text[i]] += 1;
    if (i) bi[{text[i - 1], text[i]}] += 1;
  }
  double h1 = 0, h2 = 0;
  const double n = static_cast<double>(text.size());
  for (auto& [c, k] : uni) h1 -= k / n * std::log(k / n);
  for (auto& [cc, k] : bi) h2 -= k / (n - 1) * std::log(k / uni[cc.first]);
  EXPECT_LT(h1, 3.0) << "unigram entropy " << h1;
  EXPECT_LT(h2, 1.75) << "bigram conditional entropy " << h2;
  std::printf("corpus: %zu chars, %zu lines, unigram entropy %.3f nats, bigram conditional %.3f nats\n",
              text.size(), lines, h1, h2);
}

// ---- text files ---------------------------------------------------------------------

TEST(TextFile, ReadsAFile) {
  TempDir d;
  const std::string p = d.write("a.txt", "Hello, world.\n");
  EXPECT_EQ(read_text_file(p), "Hello, world.\n");
}

TEST(TextFile, ClearErrorsNamingThePath) {
  TempDir d;
  const std::string missing = (d.path / "missing.txt").string();
  std::string m = error_of([&] { read_text_file(missing); });
  EXPECT_NE(m.find("'" + missing + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;

  const std::string empty = d.write("empty.txt", "");
  m = error_of([&] { read_text_file(empty); });
  EXPECT_NE(m.find(empty), std::string::npos) << m;
  EXPECT_NE(m.find("is empty"), std::string::npos) << m;

  const std::string binary = d.write("bin.dat", "\x01\x02\x03" "123\t\r~");
  m = error_of([&] { read_text_file(binary); });
  EXPECT_NE(m.find("holds none"), std::string::npos) << m;

  m = error_of([&] { read_text_file(d.path.string()); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;

  // Binary data has letters too, but it has NUL bytes (so has UTF-16).
  const std::string nul = d.write("nul.bin", std::string("The cat naps.\x00\x01\x7f", 16));
  m = error_of([&] { read_text_file(nul); });
  EXPECT_NE(m.find(nul), std::string::npos) << m;
  EXPECT_NE(m.find("NUL byte at offset 13"), std::string::npos) << m;

  // A FIFO without a writer is refused at once: opening it must not wait.
  const std::string fifo = (d.path / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  m = error_of([&] { read_text_file(fifo); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
}

// ---- batches ---------------------------------------------------------------------------

namespace {
std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(splitmix64(seed) % 64);
  return t;
}
}  // namespace

TEST(Batches, AreWindowsWithNextTokenTargets) {
  const std::vector<int32_t> tokens = random_tokens(5000, 7);
  BatchStream s(tokens, 42);
  EXPECT_EQ(s.batch(), 4);
  EXPECT_EQ(s.seq(), 16);
  for (int k = 0; k < 50; ++k) {
    Batch b = s.next();
    ASSERT_EQ(b.inputs.type().str(), "i32[4,16]");
    ASSERT_EQ(b.targets.type().str(), "i32[4,16]");
    const int32_t* in = b.inputs.data<int32_t>();
    const int32_t* tg = b.targets.data<int32_t>();
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t + 1 < 16; ++t) ASSERT_EQ(tg[r * 16 + t], in[r * 16 + t + 1]);
      // The row is some window of 17 consecutive tokens: search for it.
      std::vector<int32_t> window(in + r * 16, in + r * 16 + 16);
      window.push_back(tg[r * 16 + 15]);
      auto it = std::search(tokens.begin(), tokens.end(), window.begin(), window.end());
      ASSERT_NE(it, tokens.end()) << "batch " << k << " row " << r;
      EXPECT_EQ(it - tokens.begin(), s.window_start(static_cast<uint64_t>(k), r));
    }
  }
  EXPECT_EQ(s.position(), 50u);
}

TEST(Batches, AreDeterministicAndResumable) {
  const std::vector<int32_t> tokens = encode(builtin_corpus());
  BatchStream a(tokens, 1), b(tokens, 1), other(tokens, 2);
  std::vector<Batch> seen;
  for (int k = 0; k < 20; ++k) {
    seen.push_back(a.next());
    Batch y = b.next();
    EXPECT_TRUE(seen.back().inputs.bit_equal(y.inputs));
    EXPECT_TRUE(seen.back().targets.bit_equal(y.targets));
  }
  int differ = 0;
  for (int k = 0; k < 20; ++k) differ += !other.next().inputs.bit_equal(seen[static_cast<size_t>(k)].inputs);
  EXPECT_GE(differ, 19);

  // A fresh stream resumed at saved position 12 continues bit-identically.
  BatchStream resumed(tokens, 1);
  resumed.set_position(12);
  for (int k = 12; k < 20; ++k) {
    Batch y = resumed.next();
    EXPECT_TRUE(y.inputs.bit_equal(seen[static_cast<size_t>(k)].inputs)) << k;
    EXPECT_TRUE(y.targets.bit_equal(seen[static_cast<size_t>(k)].targets)) << k;
  }
  EXPECT_EQ(resumed.position(), 20u);
  // at() does not move; fill() writes into existing arrays.
  EXPECT_TRUE(resumed.at(3).inputs.bit_equal(seen[3].inputs));
  EXPECT_EQ(resumed.position(), 20u);
  Array in(Type{DType::i32, {4, 16}}), tg(Type{DType::i32, {4, 16}});
  resumed.fill(5, in, tg);
  EXPECT_TRUE(in.bit_equal(seen[5].inputs));
  EXPECT_TRUE(tg.bit_equal(seen[5].targets));
  const long before = g_allocations.load();
  for (uint64_t k = 0; k < 100; ++k) resumed.fill(k, in, tg);
  EXPECT_EQ(g_allocations.load() - before, 0) << "fill allocated";
  EXPECT_TRUE(in.bit_equal(resumed.at(99).inputs));
}

TEST(Batches, StartsCoverEveryWindowUniformly) {
  const size_t n = 1000;
  BatchStream s(random_tokens(n, 3), 9, 8, 16);
  std::vector<int> hits(n, 0);
  double sum = 0;
  const int draws = 20000;
  for (int k = 0; k < draws / 8; ++k)
    for (int r = 0; r < 8; ++r) {
      const int64_t st = s.window_start(static_cast<uint64_t>(k), r);
      ASSERT_GE(st, 0);
      ASSERT_LE(st, static_cast<int64_t>(n - 17));   // window of 17 must fit
      hits[static_cast<size_t>(st)]++;
      sum += static_cast<double>(st);
    }
  EXPECT_GT(hits[0] + hits[1] + hits[2], 0);
  EXPECT_GT(hits[n - 17] + hits[n - 18] + hits[n - 19], 0);
  // Mean of a uniform start over [0, 983]: 491.5; std error ~ 2.
  EXPECT_NEAR(sum / draws, 491.5, 10.0);
}

TEST(Batches, OverSharedIdsMatchTheVectorStreamAndStayInTheirRange) {
  const std::vector<int32_t> all = encode(builtin_corpus());
  auto ids = std::make_shared<const TokenIds>(all, kVocabSize);
  const size_t cut = split_point(all.size(), 0.1);
  const TokenSplit split = split_tokens(all, 0.1);
  ASSERT_EQ(split.train.size(), cut);
  BatchStream shared_train(ids, 0, cut, 5), shared_val(ids, cut, all.size(), 5);
  BatchStream train(split.train, 5), val(split.val, 5);
  EXPECT_EQ(shared_train.size(), cut);
  EXPECT_EQ(shared_val.size(), all.size() - cut);
  EXPECT_EQ(shared_val.token(0), all[cut]);
  for (uint64_t k = 0; k < 200; ++k) {
    EXPECT_TRUE(shared_train.at(k).inputs.bit_equal(train.at(k).inputs)) << k;
    EXPECT_TRUE(shared_train.at(k).targets.bit_equal(train.at(k).targets)) << k;
    EXPECT_TRUE(shared_val.at(k).inputs.bit_equal(val.at(k).inputs)) << k;
    EXPECT_TRUE(shared_val.at(k).targets.bit_equal(val.at(k).targets)) << k;
  }
  // Two-byte ids give the same batches as one-byte ids of the same values.
  BatchStream wide(TokenIds(all, 1000), 5);
  BatchStream narrow(TokenIds(all, 64), 5);
  EXPECT_EQ(wide.vocab(), 1000);
  for (uint64_t k = 0; k < 20; ++k) EXPECT_TRUE(wide.at(k).inputs.bit_equal(narrow.at(k).inputs)) << k;
  // The byte tokenizer's ids: vocabulary 256.
  std::vector<int32_t> bytes(100, 255);
  EXPECT_NO_THROW(BatchStream(bytes, 1, 4, 16, 256));
  EXPECT_NE(error_of([&] { BatchStream(bytes, 1); }).find("token id 255 at position 0"), std::string::npos);
  const std::string m = error_of([&] { BatchStream(ids, cut, all.size() + 1, 5); });
  EXPECT_NE(m.find("is not within the " + std::to_string(all.size()) + " tokens"), std::string::npos) << m;
  EXPECT_NE(error_of([&] { BatchStream(ids, 10, 20, 5); }).find("need at least 17"), std::string::npos);
}

TEST(Batches, RejectBadTokensAndShapes) {
  std::vector<int32_t> bad = random_tokens(100, 1);
  bad[37] = 64;
  std::string m = error_of([&] { BatchStream(bad, 1); });
  EXPECT_NE(m.find("token id 64 at position 37"), std::string::npos) << m;
  bad[37] = -5;
  EXPECT_NE(error_of([&] { BatchStream(bad, 1); }).find("token id -5"), std::string::npos);

  m = error_of([] { BatchStream(std::vector<int32_t>(16, 1), 1); });
  EXPECT_NE(m.find("need at least 17"), std::string::npos) << m;
  EXPECT_NO_THROW(BatchStream(std::vector<int32_t>(17, 1), 1));
  EXPECT_NE(error_of([] { BatchStream(std::vector<int32_t>(100, 1), 1, 0, 16); }).find("must be positive"),
            std::string::npos);

  BatchStream s(random_tokens(100, 1), 1);
  Array wrong(Type{DType::i32, {4, 8}}), right(Type{DType::i32, {4, 16}});
  m = error_of([&] { s.fill(0, wrong, right); });
  EXPECT_NE(m.find("i32[4,16]"), std::string::npos) << m;
  Array f32(Type{DType::f32, {4, 16}});
  EXPECT_THROW(s.fill(0, right, f32), Error);
  EXPECT_NO_THROW(s.fill(0, right, right));
}
