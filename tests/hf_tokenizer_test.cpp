// Tokenizers that transformers made, read from a Hugging Face directory (issue
// 27, `capstep train --init-from` of a directory with its own tokenizer):
// tests/golden/hf/gpt2-bpe (a byte-level BPE `tokenizers` trained, saved by
// GPT2TokenizerFast: tokenizer.json, vocab.json, merges.txt) and
// tests/golden/hf/llama-sp (a SentencePiece model made as Llama's is, with
// the tokenizer.json transformers' LlamaTokenizer converts it to), each with
// golden.json: texts and the ids transformers gives them without special
// tokens (scripts/make-hf-goldens; no Python runs here). capstep must give
// those ids exactly, give any bytes back, and say what it cannot read.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "capstep/data.h"
#include "capstep/hf.h"
#include "capstep/nn.h"
#include "data/bytelevel.h"
#include "test_util.h"

using namespace capstep;
using capstep::test::slurp;
using capstep::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string golden_dir(const std::string& name) {
  const char* s = std::getenv("CAPSTEP_SOURCE_DIR");
  const std::string root = s ? s : fs::path(__FILE__).parent_path().parent_path().string();
  return root + "/tests/golden/hf/" + name;
}

using test::error_of;

// Every golden text encodes to the ids under `key` ("ids": transformers';
// "sentencepiece_ids") and decodes back; `skip` says where capstep differs
// on purpose.
void check_golden(const data::Tokenizer& t, const std::string& dir, const std::string& key = "ids",
                  const std::function<bool(const std::string&)>& skip = nullptr) {
  const nlohmann::json golden = nlohmann::json::parse(slurp(golden_dir(dir) + "/golden.json"));
  ASSERT_EQ(golden["texts"].size(), golden[key].size());
  ASSERT_GE(golden["texts"].size(), 10u);
  size_t checked = 0;
  for (size_t i = 0; i < golden["texts"].size(); ++i) {
    const std::string text = golden["texts"][i].get<std::string>();
    EXPECT_EQ(t.decode(t.encode(text)), text) << dir << ": " << text;
    if (skip && skip(text)) continue;
    const std::vector<int32_t> want = golden[key][i].get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(text).to_vector(), want) << dir << " " << key << ": " << text;
    EXPECT_EQ(t.decode(want), text) << dir << ": " << text;
    ++checked;
  }
  EXPECT_GE(checked, 10u);
}

// Random texts: valid UTF-8 of every length class (ASCII, letters, digits,
// spaces of several kinds, apostrophes, CJK, emoji), and random bytes.
std::vector<std::string> random_texts(int n) {
  std::mt19937_64 rng(27);
  const std::vector<std::string> atoms = {"a", "Z", "7", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'ll", "é", "ß",
                                          "日本", "🙂", "\u00a0", "\u3000", "\u2581", "٣", "x[0]", "<|endoftext|>",
                                          "don't", ".", "\u200d", "e\u0301"};
  std::vector<std::string> out;
  for (int k = 0; k < n; ++k) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    if (k % 3 == 2) {
      for (int i = 0; i < len; ++i) s += static_cast<char>(rng() % 256);   // any bytes
    } else {
      for (int i = 0; i < len; ++i) s += atoms[rng() % atoms.size()];
    }
    out.push_back(s);
  }
  return out;
}

// Protobuf wire format, to make SentencePiece models that differ from
// llama-sp's in one field.
std::string varint(uint64_t v) {
  std::string s;
  do {
    s += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return s;
}
std::string bytes_field(uint32_t number, const std::string& bytes) {
  return varint(number << 3 | 2) + varint(bytes.size()) + bytes;
}
std::string varint_field(uint32_t number, uint64_t v) { return varint(number << 3) + varint(v); }

// llama-sp's tokenizer.model without its normalizer_spec (field 3): its
// pieces (1) and trainer_spec (2), which are length-delimited fields.
std::string llama_without_normalizer() {
  const std::string m = slurp(golden_dir("llama-sp") + "/tokenizer.model");
  std::string out;
  for (size_t at = 0; at < m.size();) {
    const size_t begin = at;
    uint64_t tag = 0, n = 0;
    for (int shift = 0;; shift += 7) {
      tag |= static_cast<uint64_t>(m[at] & 0x7F) << shift;
      if (!(m[at++] & 0x80)) break;
    }
    EXPECT_EQ(tag & 7, 2u);
    for (int shift = 0;; shift += 7) {
      n |= static_cast<uint64_t>(m[at] & 0x7F) << shift;
      if (!(m[at++] & 0x80)) break;
    }
    at += n;
    if (tag >> 3 != 3) out.append(m, begin, at - begin);
  }
  return out;
}

// llama-sp's normalizer_spec: identity, an empty charsmap, a dummy prefix,
// every space kept.
std::string llama_normalizer(const std::string& charsmap = "") {
  return bytes_field(1, "identity") + bytes_field(2, charsmap) + varint_field(3, 1) + varint_field(4, 0);
}

}  // namespace

TEST(HfTokenizer, ByteLevelBpeGivesTransformersIds) {
  const data::Tokenizer t = data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  EXPECT_EQ(t.name(), "bytelevel-bpe:400");
  EXPECT_EQ(t.kind(), data::TokenizerKind::bytelevel_bpe);
  check_golden(t, "gpt2-bpe");
  // GPT-2's older files give the same tokenizer.
  const std::string merges = slurp(golden_dir("gpt2-bpe") + "/merges.txt");
  const data::Tokenizer old = data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/vocab.json"), &merges);
  EXPECT_EQ(old.name(), t.name());
  check_golden(old, "gpt2-bpe");
  // What a checkpoint keeps (the model as capstep writes tokenizer.json) reads back the same.
  const data::Tokenizer again = data::Tokenizer::from_model(t.name(), t.model());
  EXPECT_EQ(again.model(), t.model());
  check_golden(again, "gpt2-bpe");
}

// GPT-2's regex, piece by piece.
TEST(HfTokenizer, ByteLevelPreTokenizer) {
  auto pieces = [](const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t n : data::bytelevel_pretokenize(s)) out.push_back(s.substr(at, n)), at += n;
    EXPECT_EQ(at, s.size());
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("it's we'll I'M"), (V{"it", "'s", " we", "'ll", " I", "'", "M"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces("x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces("f(7, 42)"), (V{"f", "(", "7", ",", " 42", ")"}));
  EXPECT_EQ(pieces(" ..!? ab"), (V{" ..!?", " ab"}));
  EXPECT_EQ(pieces("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC"), (V{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"}));
  EXPECT_EQ(pieces("a\xFF\xFE" "b"), (V{"a", "\xFF\xFE", "b"}));   // bytes that are not UTF-8: other characters
  EXPECT_EQ(pieces("\t\n"), (V{"\t\n"}));
  EXPECT_EQ(pieces("\u3000x"), (V{"\u3000", "x"}));   // an ideographic space is \s, not the optional ' '
}

TEST(HfTokenizer, LlamaSentencePieceGivesTransformersIds) {
  if (!data::have_sentencepiece()) GTEST_SKIP() << "built without SentencePiece";
  const data::Tokenizer t = data::Tokenizer::from_sentencepiece(slurp(golden_dir("llama-sp") + "/tokenizer.model"));
  EXPECT_EQ(t.name(), "bpe:600");
  // SentencePiece's ids (Llama's training text was encoded with it), but for
  // a U+2581 in the text, which SentencePiece and transformers take for a
  // space and capstep encodes as its three bytes, so that it comes back (as
  // with its own subword tokenizers).
  auto has_2581 = [](const std::string& x) { return x.find("\u2581") != std::string::npos; };
  check_golden(t, "llama-sp", "sentencepiece_ids", has_2581);
  // transformers' too, but for a text that starts with a space: its
  // Metaspace puts no dummy prefix before one, SentencePiece does.
  check_golden(t, "llama-sp", "ids", [&](const std::string& x) { return has_2581(x) || x.rfind(" ", 0) == 0; });
  // No BOS: the text's own pieces only (the first is the dummy prefix's).
  const std::vector<int32_t> ids = t.encode("The cat").to_vector();
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids[0], 1);
  EXPECT_EQ(t.piece(ids[0]).substr(0, 1), " ");
  const data::Tokenizer again = data::Tokenizer::from_model(t.name(), t.model());
  check_golden(again, "llama-sp", "sentencepiece_ids", has_2581);
}

// A SentencePiece model whose text would not come back is refused, whatever
// the way it says so: SentencePiece's defaults where it has no
// normalizer_spec, a charsmap under the name "identity", a later
// normalizer_spec merged over the first; and one whose fields cannot be read.
TEST(HfTokenizer, SentencePieceModelsThatNormalizeAreRefused) {
  if (!data::have_sentencepiece()) GTEST_SKIP() << "built without SentencePiece";
  const std::string base = llama_without_normalizer();
  auto refusal = [](const std::string& model) {
    return error_of([&] { data::Tokenizer::from_sentencepiece(model); });
  };
  // Rebuilt as it was, it reads as the golden one.
  const data::Tokenizer t = data::Tokenizer::from_sentencepiece(base + bytes_field(3, llama_normalizer()));
  EXPECT_EQ(t.name(), "bpe:600");
  EXPECT_EQ(t.decode(t.encode("a  b")), "a  b");
  EXPECT_EQ(t.encode("The  cat").to_vector(),
            data::Tokenizer::from_sentencepiece(slurp(golden_dir("llama-sp") + "/tokenizer.model"))
                .encode("The  cat")
                .to_vector());

  std::string e = refusal(base);
  EXPECT_NE(e.find("normalizer_spec is missing, so SentencePiece's defaults apply (remove_extra_whitespaces on)"),
            std::string::npos) << e;
  e = refusal(base + bytes_field(3, llama_normalizer(std::string("\x04\0\0\0rule", 8))));
  EXPECT_NE(e.find("normalizer_spec.precompiled_charsmap is not empty (8 bytes"), std::string::npos) << e;
  e = refusal(base + bytes_field(3, llama_normalizer()) + bytes_field(3, varint_field(4, 1)));
  EXPECT_NE(e.find("normalizer_spec.remove_extra_whitespaces is on"), std::string::npos) << e;
  e = refusal(base + bytes_field(3, llama_normalizer()) + bytes_field(3, bytes_field(1, "nmt_nfkc")));
  EXPECT_NE(e.find("normalizer_spec.name is \"nmt_nfkc\""), std::string::npos) << e;
  e = refusal(base + bytes_field(3, bytes_field(2, "") + varint_field(4, 0)));
  EXPECT_NE(e.find("normalizer_spec.name is \"\""), std::string::npos) << e;
  // Fields that cannot be read.
  e = refusal(base + bytes_field(3, "\x0A\x7F" "identity"));   // a length past the message's end
  EXPECT_NE(e.find("normalizer_spec is not a well-formed protobuf message"), std::string::npos) << e;
  e = refusal(base + varint_field(3, 0));
  EXPECT_NE(e.find("normalizer_spec is not a message (protobuf wire type 0)"), std::string::npos) << e;
  e = refusal(base + bytes_field(3, llama_normalizer()) + "\x0A\xFF");   // truncated
  EXPECT_NE(e.find("not a well-formed protobuf ModelProto"), std::string::npos) << e;
  e = refusal("");
  EXPECT_NE(e.find("normalizer_spec is missing"), std::string::npos) << e;

  // read_hf_dir names the file (its tokenizer is read before config.json's
  // vocab_size or the weights are compared with it).
  TempDir d;
  const std::string dir = d.file("sp");
  fs::create_directories(dir);
  fs::copy_file(golden_dir("gpt2-bpe") + "/config.json", dir + "/config.json");
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << base;
  e = error_of([&] { nn::read_hf_dir(dir); });
  EXPECT_NE(e.find("'" + dir + "/tokenizer.model': the tokenizer's model does not load: normalizer_spec is missing"),
            std::string::npos) << e;
}

TEST(HfTokenizer, AnyBytesComeBack) {
  std::vector<data::Tokenizer> ts = {
      data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"))};
  if (data::have_sentencepiece())
    ts.push_back(data::Tokenizer::from_sentencepiece(slurp(golden_dir("llama-sp") + "/tokenizer.model")));
  for (const data::Tokenizer& t : ts) {
    for (const std::string& s : random_texts(3000)) {
      data::TextStats st;
      const data::TokenIds ids = t.encode(s, &st);
      ASSERT_EQ(t.decode(ids), s) << t.name();
      EXPECT_EQ(st.unknown, 0u);
      std::string pieces;
      for (int32_t id : ids.to_vector()) pieces += t.piece(id);
      if (t.kind() == data::TokenizerKind::bytelevel_bpe) {
        EXPECT_EQ(pieces, s);
      }
    }
  }
}

// A SentencePiece model without a piece for U+2581 (its sign for a space)
// gives a space as that sign's three byte pieces; capstep gives the space's
// own byte piece there, so the space comes back as a space, and a U+2581 in
// the text still comes back as itself.
TEST(HfTokenizer, SentencePieceModelWithoutASpacePiece) {
  if (!data::have_sentencepiece()) GTEST_SKIP() << "built without SentencePiece";
  std::string model = slurp(golden_dir("llama-sp") + "/tokenizer.model");
  // The piece "\u2581" (field 1, 3 bytes) renamed to "\u2582", which the
  // text below does not hold: the same length, so no length changes.
  const std::string piece = std::string("\x0A\x03") + "\u2581" + "\x15";
  const size_t at = model.find(piece);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(model.find(piece, at + 1), std::string::npos);
  model.replace(at + 2, 3, "\u2582");
  const data::Tokenizer t = data::Tokenizer::from_sentencepiece(model);
  const std::string text = "The cat  naps.\n a \u2581b\u2581 c ";
  const std::vector<int32_t> ids = t.encode(text).to_vector();
  EXPECT_EQ(t.decode(t.encode(text)), text);
  std::string pieces;
  int signs = 0, spaces = 0;
  for (int32_t id : ids) {
    pieces += t.piece(id);
    signs += t.piece(id) == "\xE2";
    spaces += t.piece(id) == " ";
  }
  EXPECT_EQ(pieces, " " + text);   // the dummy prefix's space first
  // The first byte of U+2581 only for the text's own two; spaces that are
  // not inside a longer piece (" c" and the like) are the space's byte piece.
  EXPECT_EQ(signs, 2);
  EXPECT_GE(spaces, 3);
  for (const std::string& s : random_texts(300)) ASSERT_EQ(t.decode(t.encode(s)), s);
}

// A text of several MiB is encoded in parts cut where GPT-2's regex cuts
// too: the ids are those of its pieces, each encoded alone.
TEST(HfTokenizer, ByteLevelBpeLargeTextInParts) {
  const data::Tokenizer t = data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  std::string text;
  for (const std::string& s : random_texts(60000)) text += s + (s.size() % 3 ? "\n" : " \n");
  ASSERT_GT(text.size(), size_t{2} << 20);
  const std::vector<int32_t> got = t.encode(text).to_vector();
  std::vector<int32_t> want;
  size_t at = 0;
  for (size_t n : data::bytelevel_pretokenize(text)) {
    for (int32_t id : t.encode(text.substr(at, n)).to_vector()) want.push_back(id);
    at += n;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(t.decode(got), text);
}

// A tokenizer.json whose fields have the wrong type: an Error naming the
// field and the type found (read_hf_dir adds the file), never another exception.
TEST(HfTokenizer, WrongTypedFieldsAreNamed) {
  const nlohmann::json good = nlohmann::json::parse(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  auto refusal = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    try {
      data::Tokenizer::from_bytelevel(j.dump());
    } catch (const Error& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("not an Error: ") + e.what();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["model"]["dropout"] = "0.1"; }), "model.dropout is a string, not a number");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["model"]["dropout"] = 0.0; }), "(no error)");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["model"]["type"] = 3; }), "model.type is a number, not a string");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["model"]["ignore_merges"] = "false"; }),
            "model.ignore_merges is a string, not a boolean");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["type"] = nlohmann::json::array(); }),
            "pre_tokenizer.type is an array, not a string");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["add_prefix_space"] = 0; }),
            "pre_tokenizer.add_prefix_space is a number, not a boolean");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["use_regex"] = nullptr; }),
            "pre_tokenizer.use_regex is null, not a boolean");
  const data::Tokenizer t = data::Tokenizer::from_bytelevel(good.dump());
  EXPECT_EQ(t.name(), "bytelevel-bpe:400");

  TempDir d;
  const std::string dir = d.file("gpt2");
  fs::create_directories(dir);
  fs::copy_file(golden_dir("gpt2-bpe") + "/config.json", dir + "/config.json");
  nlohmann::json j = good;
  j["model"]["dropout"] = {{"p", 0.1}};
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  EXPECT_EQ(error_of([&] { nn::read_hf_dir(dir); }), "'" + dir + "/tokenizer.json': model.dropout is an object, not a number");
}

// GPT-2's bpe() as its Python has it, on one piece, from tokenizer.json's
// vocab and merges: the bytes in GPT-2's alphabet, then the pair of the lowest
// rank merged at every place from the left, again until no pair has a merge.
class ReferenceBpe {
 public:
  explicit ReferenceBpe(const nlohmann::json& j) {
    alphabet_.resize(256);
    for (uint32_t b = 0, extra = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t c = printable ? b : 256 + extra++;
      alphabet_[b] = c < 0x80 ? std::string(1, static_cast<char>(c))
                              : std::string{static_cast<char>(0xC0 | c >> 6), static_cast<char>(0x80 | (c & 0x3F))};
    }
    for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
      id_[it.key()] = it.value().get<int32_t>();
    int32_t rank = 0;
    for (const nlohmann::json& m : j["model"]["merges"])   // "a b" or ["a", "b"]
      rank_.emplace(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>(),
                    rank++);
  }
  std::vector<int32_t> encode(std::string_view piece) const {
    std::vector<std::string> t;
    for (char c : piece) t.push_back(alphabet_[static_cast<unsigned char>(c)]);
    for (;;) {
      int32_t best = INT32_MAX;
      std::string l, r;
      for (size_t i = 0; i + 1 < t.size(); ++i) {
        auto it = rank_.find(t[i] + " " + t[i + 1]);
        if (it != rank_.end() && it->second < best) best = it->second, l = t[i], r = t[i + 1];
      }
      if (best == INT32_MAX) break;
      std::vector<std::string> u;
      for (size_t i = 0; i < t.size(); ++i) {
        if (i + 1 < t.size() && t[i] == l && t[i + 1] == r) {
          u.push_back(l + r);
          ++i;
        } else {
          u.push_back(t[i]);
        }
      }
      t = std::move(u);
    }
    std::vector<int32_t> ids;
    for (const std::string& s : t) ids.push_back(id_.at(s));
    return ids;
  }

 private:
  std::vector<std::string> alphabet_;
  std::unordered_map<std::string, int32_t> id_, rank_;
};

// The merging gives the ids of GPT-2's bpe() (ReferenceBpe) on every piece,
// and on long pieces of one class (a DNA line, a run of digits, of spaces, of
// one letter), up to one of 1 MiB, which is one part of the text.
TEST(HfTokenizer, ByteLevelBpeMergesAsGpt2OnLongPieces) {
  // The golden BPE with merges that make long pieces of a, c, g, t merge
  // many times over: runs of 'a' by doubling, every 2- and 4-mer.
  nlohmann::json j = nlohmann::json::parse(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  auto add = [&](const std::string& l, const std::string& r) {
    if (!j["model"]["vocab"].contains(l + r)) j["model"]["vocab"][l + r] = j["model"]["vocab"].size();
    j["model"]["merges"].push_back({l, r});
  };
  for (std::string a = "a"; a.size() <= 1024; a += a) add(a, a);
  const std::vector<std::string> bases = {"a", "c", "g", "t"};
  std::vector<std::string> two;
  for (const std::string& x : bases)
    for (const std::string& y : bases) add(x, y), two.push_back(x + y);
  for (const std::string& x : two)
    for (const std::string& y : two) add(x, y);
  const std::string json = j.dump();
  const data::Tokenizer t = data::Tokenizer::from_bytelevel(json);
  const ReferenceBpe ref(j);
  for (const std::string& s : random_texts(3000)) {
    size_t at = 0;
    for (size_t n : data::bytelevel_pretokenize(s)) {
      const std::string piece = s.substr(at, n);
      ASSERT_EQ(t.encode(piece).to_vector(), ref.encode(piece)) << piece;
      at += n;
    }
  }
  std::mt19937_64 rng(3);
  auto random_of = [&](const std::vector<std::string>& atoms, size_t bytes) {
    std::string s;
    while (s.size() < bytes) s += atoms[rng() % atoms.size()];
    return s;
  };
  std::vector<std::string> pieces;
  for (size_t n : {2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100, 257, 5000}) pieces.push_back(std::string(n, 'a'));
  pieces.push_back(random_of({"a", "c", "g", "t"}, 20000));
  pieces.push_back(random_of({"A", "C", "G", "T"}, 20000));
  pieces.push_back(random_of({"e", "t", "h", "\u00e9", "\u65e5"}, 20000));
  pieces.push_back(random_of({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, 20000));
  pieces.push_back(" " + random_of({"t", "h", "e", "r"}, 20000));
  pieces.push_back(std::string(20000, ' '));
  pieces.push_back(random_of({".", ",", "!", "(", ")", "=", "-"}, 20000));
  for (const std::string& p : pieces) {
    ASSERT_EQ(data::bytelevel_pretokenize(p).size(), 1u) << p.substr(0, 20);
    EXPECT_EQ(t.encode(p).to_vector(), ref.encode(p)) << p.substr(0, 20) << " (" << p.size() << " bytes)";
  }
  EXPECT_EQ(t.encode(std::string(5000, 'a')).size(), 6u);      // 2 of 2048 'a', then 512, 256, 128, 8
  EXPECT_LT(t.encode(pieces[14]).size(), pieces[14].size() / 2);   // a, c, g, t: mostly 4-mers
  // Merges of a merge's result ranked before that merge (no trainer makes
  // them, a file may hold them): still bpe()'s passes, one rank at a time.
  nlohmann::json odd = nlohmann::json::parse(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  nlohmann::json first = nlohmann::json::array();
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"aa", "a"}, {"a", "aa"}, {"aa", "aa"}, {"aaa", "b"}, {"b", "aa"}, {"a", "a"}, {"a", "b"}, {"ab", "ab"}}) {
    if (!odd["model"]["vocab"].contains(l + r)) odd["model"]["vocab"][l + r] = odd["model"]["vocab"].size();
    for (const std::string& x : {l, r})
      if (!odd["model"]["vocab"].contains(x)) odd["model"]["vocab"][x] = odd["model"]["vocab"].size();
    first.push_back({l, r});
  }
  for (const nlohmann::json& m : odd["model"]["merges"]) first.push_back(m);
  odd["model"]["merges"] = first;
  const data::Tokenizer to = data::Tokenizer::from_bytelevel(odd.dump());
  const ReferenceBpe ro(odd);
  for (size_t n = 1; n <= 40; ++n) EXPECT_EQ(to.encode(std::string(n, 'a')).to_vector(), ro.encode(std::string(n, 'a'))) << n;
  for (int k = 0; k < 200; ++k) {
    const std::string p = random_of({"a", "b", "aa"}, 1 + rng() % 60);
    EXPECT_EQ(to.encode(p).to_vector(), ro.encode(p)) << p;
  }

  // A piece of 1 MiB and more (the whole text is one part: no newline).
  const std::string dna = random_of({"a", "c", "g", "t"}, (size_t{1} << 20) + 7);
  const data::TokenIds ids = t.encode(dna);
  ASSERT_EQ(data::bytelevel_pretokenize(dna).size(), 1u);
  EXPECT_EQ(t.decode(ids), dna);
  EXPECT_LT(ids.size(), dna.size());
  const std::vector<int32_t> head = t.encode(dna.substr(0, 4096)).to_vector();
  EXPECT_EQ(ref.encode(dna.substr(0, 4096)), head);
}

// read_hf_dir: the directory's own tokenizer when config.json names none.
TEST(HfTokenizer, ReadFromADirectory) {
  TempDir d;
  const nn::HfModel g = nn::read_hf_dir(golden_dir("gpt2-bpe"));
  EXPECT_EQ(g.tokenizer, "bytelevel-bpe:400");
  EXPECT_EQ(g.tokenizer_file, golden_dir("gpt2-bpe") + "/tokenizer.json");
  EXPECT_EQ(g.config.vocab, 400);
  // vocab.json + merges.txt alone; one of them alone is refused.
  const std::string old = d.file("old");
  fs::create_directories(old);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    fs::copy_file(golden_dir("gpt2-bpe") + "/" + f, old + "/" + f);
  // The same but for added_tokens: vocab.json does not say which tokens are added ones.
  auto without_added = [](const std::string& model) {
    nlohmann::json j = nlohmann::json::parse(model);
    j.erase("added_tokens");
    return j;
  };
  EXPECT_EQ(without_added(nn::read_hf_dir(old).tokenizer_model), without_added(g.tokenizer_model));
  fs::remove(old + "/merges.txt");
  EXPECT_NE(error_of([&] { nn::read_hf_dir(old); }).find("has vocab.json but no merges.txt"), std::string::npos);
  // None at all: no tokenizer, no error (--tokenizer char or byte may apply).
  fs::remove(old + "/vocab.json");
  EXPECT_EQ(nn::read_hf_dir(old).tokenizer, "");
  EXPECT_NE(nn::hf_tokenizer_files().find("tokenizer.model (SentencePiece), tokenizer.json"), std::string::npos);

  // A tokenizer.json capstep cannot read: the file and the field.
  nlohmann::json j = nlohmann::json::parse(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  j["model"]["type"] = "WordPiece";
  std::ofstream(old + "/tokenizer.json") << j.dump();
  std::string e = error_of([&] { nn::read_hf_dir(old); });
  EXPECT_NE(e.find("'" + old + "/tokenizer.json': model.type is \"WordPiece\""), std::string::npos) << e;
  j["model"]["type"] = "BPE";
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
  std::ofstream(old + "/tokenizer.json") << j.dump();
  e = error_of([&] { nn::read_hf_dir(old); });
  EXPECT_NE(e.find("tokenizer.json': pre_tokenizer.type is \"Metaspace\""), std::string::npos) << e;
  // More ids than config.json's vocab_size: both numbers.
  j = nlohmann::json::parse(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  j["model"]["vocab"]["extra"] = 400;
  std::ofstream(old + "/tokenizer.json") << j.dump();
  e = error_of([&] { nn::read_hf_dir(old); });
  EXPECT_NE(e.find("tokenizer.json' has 401 ids (the bytelevel-bpe:401 tokenizer) but config.json's vocab_size is "
                   "400: its ids do not fit in the model's"),
            std::string::npos) << e;
  // Fewer: the tokenizer padded to vocab_size (a padded config, as Llama's
  // with an added pad token); the ids past it decode to nothing.
  j["model"]["vocab"].erase("extra");
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
    if (it.value() == 399) {
      j["model"]["vocab"].erase(it.key());   // the last merge's token: 399 ids left
      break;
    }
  j["model"]["merges"].erase(j["model"]["merges"].size() - 1);
  std::ofstream(old + "/tokenizer.json") << j.dump();
  const nn::HfModel padded = nn::read_hf_dir(old);
  EXPECT_EQ(padded.tokenizer, "bytelevel-bpe:400");
  EXPECT_EQ(data::Tokenizer::from_model(padded.tokenizer, padded.tokenizer_model).model_size(), 399);
  fs::copy_file(golden_dir("gpt2-bpe") + "/tokenizer.json", old + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  std::string config = slurp(old + "/config.json");
  const std::string vocab_size = "\"vocab_size\": 400";
  config.replace(config.find(vocab_size), vocab_size.size(), "\"vocab_size\": 416");
  std::ofstream(old + "/config.json") << config;
  e = error_of([&] { nn::read_hf_dir(old); });
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;   // the tokenizer passed; the weights are 400 rows

  // A Llama directory: its tokenizer.model, before its tokenizer.json.
  if (!data::have_sentencepiece()) return;
  nn::LmConfig c;
  c.arch = nn::Arch::llama;
  c.vocab = 600;
  c.n_layers = 1, c.d_model = 16, c.n_heads = 2, c.d_ff = 16, c.context = 16, c.seq = 8;
  const std::string llama = d.file("llama");
  nn::write_hf_dir(llama, c, nn::init_parameters(c, 1));
  for (const char* f : {"tokenizer.model", "tokenizer.json"})
    fs::copy_file(golden_dir("llama-sp") + "/" + f, llama + "/" + f);
  const nn::HfModel l = nn::read_hf_dir(llama);
  EXPECT_EQ(l.tokenizer, "bpe:600");
  EXPECT_EQ(l.tokenizer_model, slurp(llama + "/tokenizer.model"));
  // export-hf of it: transformers' tokenizer.json puts the dummy prefix back and takes it off.
  const std::string out = d.file("llama-out");
  nn::write_hf_dir(out, c, l.params, l.tokenizer, l.tokenizer_model);
  const nlohmann::json w = nlohmann::json::parse(slurp(out + "/tokenizer.json"));
  EXPECT_EQ(w["normalizer"]["type"], "Prepend");
  EXPECT_EQ(nn::read_hf_dir(out).tokenizer_model, l.tokenizer_model);
  fs::remove(llama + "/tokenizer.model");   // then its tokenizer.json: not a byte-level BPE
  e = error_of([&] { nn::read_hf_dir(llama); });
  EXPECT_NE(e.find("'" + llama + "/tokenizer.json': "), std::string::npos) << e;
  std::ofstream(llama + "/tokenizer.model") << "not a model";
  e = error_of([&] { nn::read_hf_dir(llama); });
  EXPECT_NE(e.find("'" + llama + "/tokenizer.model': "), std::string::npos) << e;
}

// A tokenizer padded to a larger vocabulary: the same ids, nothing for the
// ids past its own, and its name and model read back.
TEST(HfTokenizer, PaddedVocabulary) {
  const data::Tokenizer t = data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  const data::Tokenizer p = t.padded_to(416);
  EXPECT_EQ(p.name(), "bytelevel-bpe:416");
  EXPECT_EQ(p.vocab(), 416);
  EXPECT_EQ(p.model_size(), 400);
  check_golden(p, "gpt2-bpe");
  EXPECT_EQ(p.decode(std::vector<int32_t>{400, 415}), "");
  EXPECT_EQ(p.piece(415), "");
  EXPECT_EQ(data::Tokenizer::from_model(p.name(), p.model()).vocab(), 416);
  EXPECT_NE(error_of([&] { t.padded_to(399); }).find("400 ids do not fit in a vocabulary of 399"), std::string::npos);
  EXPECT_NE(error_of([&] { data::Tokenizer::from_model("bytelevel-bpe:399", t.model()); }).find("more than its name's 399"),
            std::string::npos);
  EXPECT_NE(error_of([] { data::Tokenizer(data::TokenizerKind::bytes).padded_to(300); }).find("only a tokenizer with a model"),
            std::string::npos);
}

// export-hf of a byte-level BPE: config.json names it, tokenizer.json is its
// model, and the directory reads back to the same tokenizer.
TEST(HfTokenizer, ByteLevelBpeExportReadsBack) {
  TempDir d;
  const nn::HfModel g = nn::read_hf_dir(golden_dir("gpt2-bpe"));
  nn::LmConfig c = g.config;
  nn::write_hf_dir(d.file("out"), c, g.params, g.tokenizer, g.tokenizer_model);
  EXPECT_NE(slurp(d.file("out") + "/config.json").find("\"capstep_tokenizer\": \"bytelevel-bpe:400\""),
            std::string::npos);
  EXPECT_EQ(slurp(d.file("out") + "/tokenizer.json"), g.tokenizer_model);
  EXPECT_FALSE(fs::exists(d.file("out") + "/tokenizer.model"));
  const nn::HfModel back = nn::read_hf_dir(d.file("out"));
  EXPECT_EQ(back.tokenizer, g.tokenizer);
  EXPECT_EQ(back.tokenizer_model, g.tokenizer_model);
  const nlohmann::json j = nlohmann::json::parse(g.tokenizer_model);
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["model"]["vocab"].size(), 400u);
  // bytelevel-bpe is never trained by capstep.
  EXPECT_NE(error_of([] { data::Tokenizer::parse("bytelevel-bpe:400").trained_on("text"); }).find("is not trained by capstep"),
            std::string::npos);
}

// ---- issue 38: the tokenizer.json of Llama 3, Qwen2, SmolLM2 ----------------------
// tests/golden/hf/pretok (scripts/make-hf-goldens ... pretok): byte-level BPEs
// that `tokenizers` trained with those models' pre-tokenizers, normalizer and
// added tokens, with transformers' ids and decodings of texts that hold
// special tokens too.

namespace {

// Bytes in GPT-2's byte alphabet (bytes_to_unicode), as UTF-8.
std::string in_byte_alphabet(const std::string& bytes) {
  std::string out;
  for (char ch : bytes) {
    const uint32_t b = static_cast<unsigned char>(ch);
    uint32_t c = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
      c = 256;
      for (uint32_t x = 0; x < b; ++x) c += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    if (c < 0x80) out += static_cast<char>(c);
    else out += static_cast<char>(0xC0 | c >> 6), out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

bool can_read(const std::string& name) {
  if (name != "smollm2" && !data::bytelevel_have_split_regex()) return false;
  return name != "qwen2" || data::bytelevel_have_nfc();
}

data::Tokenizer pretok(const std::string& name) {
  return data::Tokenizer::from_bytelevel(slurp(golden_dir("pretok/" + name) + "/tokenizer.json"));
}

}  // namespace

TEST(HfTokenizer, NewerModelsGiveTransformersIds) {
  for (const std::string name : {"llama3", "qwen2", "smollm2", "o200k"}) {
    if (!can_read(name)) {
      std::printf("skipped %s: this build has no PCRE2 or utf8proc\n", name.c_str());
      continue;
    }
    SCOPED_TRACE(name);
    const data::Tokenizer t = pretok(name);
    const nlohmann::json golden = nlohmann::json::parse(slurp(golden_dir("pretok/" + name) + "/golden.json"));
    ASSERT_GE(golden["texts"].size(), 17u);
    std::set<int32_t> special;
    for (const data::AddedToken& a : t.added_tokens())
      if (a.special) special.insert(a.id);
    EXPECT_FALSE(special.empty());
    // What a checkpoint keeps reads back as the same tokenizer.
    const data::Tokenizer again = data::Tokenizer::from_model(t.name(), t.model());
    EXPECT_EQ(again.model(), t.model());
    // And it is the file's tokenizer for the `tokenizers` library too (what
    // export-hf writes): the same normalizer, pre-tokenizer, added tokens,
    // vocabulary and merges (written as "a b").
    const nlohmann::json file = nlohmann::json::parse(slurp(golden_dir("pretok/" + name) + "/tokenizer.json"));
    const nlohmann::json mine = nlohmann::json::parse(t.model());
    EXPECT_EQ(mine["normalizer"], file["normalizer"]);
    EXPECT_EQ(mine["pre_tokenizer"], file["pre_tokenizer"]);
    EXPECT_EQ(mine["added_tokens"], file["added_tokens"]);
    EXPECT_EQ(mine["model"]["vocab"], file["model"]["vocab"]);
    EXPECT_EQ(mine["model"]["ignore_merges"], file["model"]["ignore_merges"]);
    ASSERT_EQ(mine["model"]["merges"].size(), file["model"]["merges"].size());
    for (size_t i = 0; i < file["model"]["merges"].size(); ++i) {
      const nlohmann::json& m = file["model"]["merges"][i];
      EXPECT_EQ(mine["model"]["merges"][i], m.is_string() ? m : nlohmann::json(m[0].get<std::string>() + " " + m[1].get<std::string>()));
    }
    size_t with_special = 0;
    for (size_t i = 0; i < golden["texts"].size(); ++i) {
      const std::string text = golden["texts"][i].get<std::string>();
      const std::vector<int32_t> want = golden["ids"][i].get<std::vector<int32_t>>();
      const std::string decoded = golden["decoded"][i].get<std::string>();
      EXPECT_EQ(t.encode(text, nullptr, true).to_vector(), want) << text;
      EXPECT_EQ(again.encode(text, nullptr, true).to_vector(), want) << text;
      EXPECT_EQ(t.decode(want), decoded) << text;
      // Without special tokens, their names are text: the same decoding, no special id.
      const std::vector<int32_t> plain = t.encode(text).to_vector();
      EXPECT_EQ(t.decode(plain), decoded) << text;
      bool had = false;
      for (int32_t id : want) had = had || special.count(id);
      for (int32_t id : plain) EXPECT_EQ(special.count(id), 0u) << text;
      with_special += had;
    }
    EXPECT_GE(with_special, 1u);
    // The special tokens by their text.
    for (auto it = golden["special"].begin(); it != golden["special"].end(); ++it)
      EXPECT_EQ(t.token_id(it.key()), std::optional<int32_t>(it.value().get<int32_t>())) << it.key();
    EXPECT_EQ(t.token_id("<|no such token|>"), std::nullopt);
  }
}

// Qwen2's NFC: a decomposed character comes back composed, as transformers
// gives it; text already in NFC, and bytes that are not UTF-8, come back as
// they were.
TEST(HfTokenizer, NfcNormalizer) {
  if (!can_read("qwen2")) GTEST_SKIP() << "no PCRE2 or utf8proc in this build";
  const data::Tokenizer t = pretok("qwen2");
  EXPECT_EQ(t.decode(t.encode("e\u0301 A\u030a \u212b")), "\u00e9 \u00c5 \u00c5");
  EXPECT_EQ(t.encode("e\u0301").to_vector(), t.encode("\u00e9").to_vector());
  const std::string bytes = "a\x80\xff e\xcc\x81\xc3(z";   // invalid UTF-8 around a decomposed é
  EXPECT_EQ(t.decode(t.encode(bytes)), "a\x80\xff \xc3\xa9\xc3(z");
  // The random texts made of atoms (not the random bytes: NFC changes some
  // characters, U+037E to ';' say) but for a combining mark.
  const std::vector<std::string> random = random_texts(300);
  for (size_t k = 0; k < random.size(); ++k)
    if (k % 3 != 2 && random[k].find("\u0301") == std::string::npos) EXPECT_EQ(t.decode(t.encode(random[k])), random[k]);
  EXPECT_EQ(t.decode(t.encode("\xF6\xCD\xBE")), "\xF6;");
}

// The same vocabulary and merges under other pre-tokenizers: every Split
// behavior with and without invert, a String pattern, Digits without
// individual_digits, ByteLevel's add_prefix_space; the `tokenizers` library's ids.
TEST(HfTokenizer, PreTokenizerVariants) {
  if (!data::bytelevel_have_split_regex()) GTEST_SKIP() << "no PCRE2 in this build";
  const nlohmann::json base = nlohmann::json::parse(slurp(golden_dir("pretok/llama3") + "/tokenizer.json"));
  const nlohmann::json v = nlohmann::json::parse(slurp(golden_dir("pretok") + "/variants.json"));
  ASSERT_GE(v["variants"].size(), 16u);
  for (const nlohmann::json& variant : v["variants"]) {
    nlohmann::json j = base;
    j["pre_tokenizer"] = variant["pre_tokenizer"];
    SCOPED_TRACE(variant["pre_tokenizer"].dump());
    const data::Tokenizer t = data::Tokenizer::from_bytelevel(j.dump());
    const data::Tokenizer again = data::Tokenizer::from_model(t.name(), t.model());
    const auto model = data::bytelevel_from_tokenizer_json(j.dump());
    for (size_t i = 0; i < v["texts"].size(); ++i) {
      const std::string text = v["texts"][i].get<std::string>();
      // The pieces, each in GPT-2's byte alphabet as `tokenizers` shows them.
      std::vector<std::string> pieces;
      for (const std::string& p : data::bytelevel_pieces(*model, text)) pieces.push_back(in_byte_alphabet(p));
      EXPECT_EQ(pieces, variant["pieces"][i].get<std::vector<std::string>>()) << text;
      const std::vector<int32_t> want = variant["ids"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(t.encode(text, nullptr, true).to_vector(), want) << text;
      EXPECT_EQ(again.encode(text, nullptr, true).to_vector(), want) << text;
      EXPECT_EQ(t.decode(want), variant["decoded"][i].get<std::string>()) << text;
    }
  }
}

// Any bytes through the new pre-tokenizers: what is not removed comes back
// (Llama 3's and SmolLM2's have nothing that changes the text), long runs
// of one class included (a run of spaces longer than PCRE2's JIT stack holds).
TEST(HfTokenizer, NewerModelsAnyBytesComeBack) {
  for (const std::string name : {"llama3", "smollm2", "o200k"}) {
    if (!can_read(name)) continue;
    SCOPED_TRACE(name);
    const data::Tokenizer t = pretok(name);
    for (const std::string& s : random_texts(300)) {
      EXPECT_EQ(t.decode(t.encode(s)), s);
      EXPECT_EQ(t.decode(t.encode(s, nullptr, true)), s);
    }
    for (const std::string& s : {std::string(300000, ' ') + "x", std::string(300000, '7'), "a" + std::string(200000, '\n'),
                                 std::string(200000, 'q') + " " + std::string(100000, '\t')}) {
      EXPECT_EQ(t.decode(t.encode(s)), s);
    }
  }
}

TEST(HfTokenizer, NewerModelsRefusalsNameTheField) {
  if (!data::bytelevel_have_split_regex()) GTEST_SKIP() << "no PCRE2 in this build";
  const nlohmann::json good = nlohmann::json::parse(slurp(golden_dir("pretok/llama3") + "/tokenizer.json"));
  auto refusal = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    try {
      data::Tokenizer::from_bytelevel(j.dump());
    } catch (const Error& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("not an Error: ") + e.what();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["added_tokens"][1]["lstrip"] = true; }),
            "added_tokens[1].lstrip is true ('<|end_of_text|>'); capstep reads added tokens without lstrip");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["added_tokens"][0]["single_word"] = true; }),
            "added_tokens[0].single_word is true ('<|begin_of_text|>'); capstep reads added tokens without single_word");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["added_tokens"][0]["content"] = ""; }), "added_tokens[0].content is empty");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["added_tokens"][1]["id"] = 500; }),
            "added_tokens[1].id 500 is also added_tokens[0]'s");
  // The id of another vocabulary token ("a"'s, whose text the BPE still
  // gives that id).
  EXPECT_EQ(refusal([](nlohmann::json& j) {
              j["added_tokens"][1]["id"] = j["model"]["vocab"]["a"];
              j["added_tokens"][1]["special"] = false;
            }),
            "added_tokens[1].id " + std::to_string(good["model"]["vocab"]["a"].get<int>()) +
                " ('<|end_of_text|>') is model.vocab's 'a': that token's text would come back as '<|end_of_text|>'");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; }),
            "normalizer.type is \"NFKC\"; capstep reads no normalizer, NFC, or a Sequence of NFC");
  if (data::bytelevel_have_nfc())
    EXPECT_EQ(refusal([](nlohmann::json& j) {
                j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
                j["added_tokens"][2]["normalized"] = true;
              }),
              "added_tokens[2].normalized is true ('<|reserved_special_token_0|>') with the NFC normalizer; capstep "
              "finds added tokens in the text as written");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Merged"; }),
            "pre_tokenizer.pretokenizers[0].behavior is \"Merged\"; it is one of Removed, Isolated, MergedWithPrevious, "
            "MergedWithNext, Contiguous");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a"}}; }),
            "pre_tokenizer.pretokenizers[0].pattern \"(a\" does not compile (PCRE2, at offset 2): missing closing "
            "parenthesis");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "a"}}; }),
            "pre_tokenizer.pretokenizers[0].pattern is {\"Glob\":\"a\"}, not {\"Regex\": \"...\"} or {\"String\": \"...\"}");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Whitespace"; }),
            "pre_tokenizer.pretokenizers[1].type is \"Whitespace\"; capstep reads the pre-tokenizers ByteLevel, Split, "
            "Digits and a Sequence of them");
  std::string e = refusal([](nlohmann::json& j) {
    std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]);
  });
  EXPECT_NE(e.find("does not end in one ByteLevel"), std::string::npos) << e;
  e = refusal([](nlohmann::json& j) { j["pre_tokenizer"] = nullptr; });
  EXPECT_NE(e.find("pre_tokenizer is missing"), std::string::npos) << e;
}

// BOS and EOS ids from tokenizer_config.json and generation_config.json.
TEST(HfTokenizer, SpecialTokenIds) {
  if (!can_read("llama3") || !can_read("qwen2")) GTEST_SKIP() << "no PCRE2 or utf8proc in this build";
  const data::Tokenizer llama = pretok("llama3");
  nn::HfSpecialTokens s = nn::read_hf_special_tokens(golden_dir("pretok/llama3"), llama);
  const int32_t bot = *llama.token_id("<|begin_of_text|>"), eot = *llama.token_id("<|eot_id|>"),
                eom = *llama.token_id("<|eom_id|>"), end = *llama.token_id("<|end_of_text|>");
  EXPECT_EQ(s.bos, bot);
  EXPECT_EQ(s.eos, (std::vector<int64_t>{eot, end, eom}));   // tokenizer_config's first, then generation_config's
  s = nn::read_hf_special_tokens(golden_dir("pretok/qwen2"), pretok("qwen2"));
  EXPECT_EQ(s.bos, -1);
  EXPECT_EQ(s.eos, (std::vector<int64_t>{*pretok("qwen2").token_id("<|im_end|>")}));
  s = nn::read_hf_special_tokens(golden_dir("pretok/smollm2"), pretok("smollm2"));
  EXPECT_EQ(s.bos, 1);   // SmolLM2's special tokens are its first ids
  EXPECT_EQ(s.eos, (std::vector<int64_t>{2}));
  // GPT-2's: its <|endoftext|> is a vocabulary token.
  s = nn::read_hf_special_tokens(golden_dir("gpt2-bpe"),
                                 data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json")));
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, (std::vector<int64_t>{0}));

  TempDir d;
  const std::string dir = d.file("l");
  fs::create_directories(dir);
  // AddedToken objects, an id alone, no file at all.
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "special": true}, "eos_token": null})";
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": 505})";
  s = nn::read_hf_special_tokens(dir, llama);
  EXPECT_EQ(s.bos, bot);
  EXPECT_EQ(s.eos, (std::vector<int64_t>{eom}));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [501, 9999]})";
  EXPECT_EQ(error_of([&] { nn::read_hf_special_tokens(dir, llama); }),
            "'" + dir + "/generation_config.json': eos_token_id[1] is 9999, outside the " + llama.name() +
                " tokenizer's [0, " + std::to_string(llama.vocab()) + ")");
  std::ofstream(dir + "/generation_config.json") << R"({"bos_token_id": "1"})";
  EXPECT_EQ(error_of([&] { nn::read_hf_special_tokens(dir, llama); }),
            "'" + dir + "/generation_config.json': bos_token_id is \"1\", not an integer id");
  fs::remove(dir + "/generation_config.json");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  EXPECT_EQ(error_of([&] { nn::read_hf_special_tokens(dir, llama); }),
            "'" + dir + "/tokenizer_config.json': eos_token \"<|im_end|>\" is not a token of the " + llama.name() +
                " tokenizer");
  fs::remove(dir + "/tokenizer_config.json");
  s = nn::read_hf_special_tokens(dir, llama);
  EXPECT_EQ(s.bos, -1);
  EXPECT_TRUE(s.eos.empty());

  // read_hf_dir of a Llama directory with Llama 3's tokenizer files.
  nn::LmConfig c;
  c.arch = nn::Arch::llama;
  c.vocab = 512;
  c.n_layers = 1, c.d_model = 16, c.n_heads = 2, c.d_ff = 16, c.context = 16, c.seq = 8;
  const std::string model = d.file("model");
  nn::write_hf_dir(model, c, nn::init_parameters(c, 1));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(golden_dir("pretok/llama3") + "/" + f, model + "/" + f);
  const nn::HfModel m = nn::read_hf_dir(model);
  EXPECT_EQ(m.tokenizer, "bytelevel-bpe:512");
  EXPECT_EQ(m.special.bos, bot);
  EXPECT_EQ(m.special.eos, (std::vector<int64_t>{eot, end, eom}));
  EXPECT_EQ(data::Tokenizer::from_model(m.tokenizer, m.tokenizer_model).encode("<|eot_id|>", nullptr, true).to_vector(),
            std::vector<int32_t>{eot});
}
