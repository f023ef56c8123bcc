// The data layer: tokenizers (a 64-symbol character one and a 256-symbol byte
// one), token ids stored one byte each where the vocabulary allows, a built-in
// corpus the project generates itself, text files with the share of characters
// a tokenizer cannot represent, and a deterministic, resumable stream of
// next-token batches.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"
#include "capstep/random.h"

namespace capstep::data {

// ---- tokenizer ----------------------------------------------------------------
// Exactly 64 symbols; a symbol's id is its position in this list (ASCII order):
//
//   id  0      '\n'
//   id  1      ' '
//   ids 2-10   ! " ' , - . : ; ?
//   ids 11-36  A-Z
//   ids 37-62  a-z
//   id  63     '~'  the unknown symbol
//
// Every other character (digits, tabs, '\r', '(', any non-ASCII character, and
// '~' itself) encodes as id 63, which decodes as '~'. A multi-byte UTF-8
// character counts as one character: it becomes a single '~', not one per byte
// (a byte 0x80-0xBF not preceded by a lead byte is one unknown character).
// Text made only of the 63 known symbols round-trips exactly.
constexpr int kVocabSize = 64;
constexpr int32_t kUnknownId = 63;
constexpr char kUnknownSymbol = '~';

// The 64 symbols in id order (a 64-character string).
std::string_view alphabet();
// The id of one byte of ASCII text (kUnknownId for anything outside the set).
int32_t encode_char(unsigned char c);
std::vector<int32_t> encode(std::string_view text);
// Throws Error for an id outside [0, 64), naming its position and value.
std::string decode(const std::vector<int32_t>& ids);
char decode_id(int32_t id);
// Throws Error if any id is outside [0, kVocabSize); `what` names the source
// ("batch inputs", "tokens of 'file.txt'") in the message.
void check_token_ids(const int32_t* ids, size_t n, std::string_view what);

// ---- token sources --------------------------------------------------------------
// What a batch stream draws its windows from: ids [0, size()) of a vocabulary
// of vocab() symbols. TokenIds (below) holds them in memory; a
// data::MappedTokens (capstep/token_file.h) reads them from memory-mapped
// token files without a copy.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t vocab() const = 0;
  virtual size_t size() const = 0;
  // Ids [begin, begin + n) written to out as int32 (no allocation); the range
  // must lie within the ids (unchecked: for the batch stream's inner loop).
  virtual void copy_to(size_t begin, size_t n, int32_t* out) const = 0;
};

// ---- token ids ------------------------------------------------------------------
// A sequence of token ids of a vocabulary, each stored in the narrowest width
// that holds every id of it: one byte for up to 256 symbols, two for up to
// 65536, four beyond. A text of n characters under the char or the byte
// tokenizer takes n bytes, not the 4n of a std::vector<int32_t>.
class TokenIds final : public TokenSource {
 public:
  TokenIds() = default;                              // vocabulary 256, empty
  explicit TokenIds(int64_t vocab);                  // empty; Error unless vocab in [1, 2^31)
  // Throws Error for an id outside [0, vocab), naming its position and value.
  TokenIds(const std::vector<int32_t>& ids, int64_t vocab);
  // One id per byte of `bytes` (moved in, not copied); vocab <= 256. Error
  // for a byte >= vocab, naming its position.
  static TokenIds from_bytes(std::string bytes, int64_t vocab);

  int64_t vocab() const override { return vocab_; }
  size_t size() const override { return storage_.size() / width_; }
  bool empty() const { return storage_.empty(); }
  size_t width() const { return width_; }            // bytes per id: 1, 2 or 4
  size_t bytes() const { return storage_.size(); }   // the ids' memory
  int32_t operator[](size_t i) const;
  void push_back(int32_t id);                        // Error outside [0, vocab)
  void reserve(size_t n) { storage_.reserve(n * width_); }
  // Ids [begin, end) as int32; Error when the range is not within [0, size()].
  std::vector<int32_t> to_vector(size_t begin, size_t end) const;
  std::vector<int32_t> to_vector() const { return to_vector(0, size()); }
  void copy_to(size_t begin, size_t n, int32_t* out) const override;   // as TokenSource's
  bool operator==(const TokenIds& o) const { return vocab_ == o.vocab_ && storage_ == o.storage_; }

 private:
  int64_t vocab_ = 256;
  size_t width_ = 1;
  std::string storage_;   // little-endian ids of width_ bytes each
};

// ---- tokenizers -------------------------------------------------------------------
// What encoding a text left out: every character the tokenizer cannot
// represent counts once in `unknown` (the char tokenizer encodes it as '~').
// Characters are counted as the char tokenizer reads them (a multi-byte UTF-8
// character is one; a byte 0x80-0xBF without a lead byte is one); the byte
// tokenizer counts bytes and has no unknown ones; a subword tokenizer counts
// UTF-8 characters (a byte that is not part of one counts as one) and has no
// unknown ones.
struct TextStats {
  uint64_t characters = 0;
  uint64_t unknown = 0;
  // The first unknown character: its byte offset, its line (from 1) and its
  // first byte. Valid when unknown > 0.
  uint64_t first_unknown_offset = 0;
  uint64_t first_unknown_line = 0;
  unsigned char first_unknown_byte = 0;
  double share() const { return characters ? static_cast<double>(unknown) / static_cast<double>(characters) : 0.0; }
};

// A text's unknown characters in words, for a person: "3 of 1200 characters
// (0.25%) are outside the char tokenizer's 63 symbols and train as '~' (the
// first, '1', at line 2, byte offset 57)"; `tokenizer_name` is
// Tokenizer::name().
std::string describe_unknown(const TextStats& s, const std::string& tokenizer_name);

// The tokenizers, chosen at run time (`capstep train --tokenizer`):
//   char       the 64-symbol alphabet above; anything else is '~' (id 63),
//              counted as unknown. The seed's model and the built-in corpus
//              use it.
//   byte       256 symbols: id = the byte's value. Any byte sequence (invalid
//              UTF-8, NUL bytes included) encodes and decodes back exactly;
//              nothing is ever unknown.
//   bpe:N      subword tokenizers of N symbols (N in [kMinSubwordVocab,
//   unigram:N  65536]), trained with SentencePiece on the user's text (at most
//              its first kSubwordTrainingBytes, whole lines), byte fallback on:
//              a character outside the pieces is encoded as its UTF-8 bytes.
//              Normalization is off (identity), no space is added or removed.
//              What SentencePiece itself would not give back (bytes that are
//              not valid UTF-8, and U+2581 '▁', its sign for a space) is
//              encoded as byte pieces too, so any bytes round-trip exactly and
//              nothing is unknown; elsewhere the ids are SentencePiece's own.
//              Needs a build with SentencePiece (have_sentencepiece()); Error
//              otherwise.
//              A SentencePiece model made elsewhere (a Llama directory's
//              tokenizer.model, see from_model) is one of these too, named by
//              its type and piece count; when it adds a dummy prefix (a space
//              before the text, as Llama's does) capstep does too, and decode
//              takes that one space off again, so the text still round-trips.
//              No BOS or EOS id is ever added.
//   bytelevel-bpe:N  GPT-2's byte-level BPE of N ids, read from a Hugging
//              Face tokenizer.json or vocab.json + merges.txt (never trained
//              by capstep): the text is cut by GPT-2's regex (\p{L} and \p{N}
//              of Unicode 14, src/data/unicode_classes.inc), each piece's bytes
//              merged by rank. Any bytes round-trip exactly (a byte that is not
//              valid UTF-8 is a piece of its own) unless an NFC normalizer
//              changes them, nothing is unknown. The tokenizer.json of Llama
//              3, Qwen2 and SmolLM2 read too: an NFC normalizer, a Sequence
//              of Split (their own regex, run by PCRE2), Digits and ByteLevel
//              pre-tokenizers, and added tokens, which the BPE never splits;
//              special ones such as "<|endoftext|>" are made from the text
//              only when encode is asked to (special_tokens), see encode.
// A subword or byte-level tokenizer is parsed untrained; trained_on() (not for
// bytelevel-bpe) or from_model() give one that encodes. Its model
// (SentencePiece's serialized ModelProto; the byte-level BPE's tokenizer.json
// as capstep writes it) is what a checkpoint keeps. Copies share the model.
enum class TokenizerKind { chars, bytes, bpe, unigram, bytelevel_bpe };
// One of a tokenizer.json's added tokens (bytelevel-bpe): its text, its id,
// and whether it is special (a control token such as "<|begin_of_text|>").
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
};
constexpr int64_t kMinSubwordVocab = 300;   // the 256 byte pieces, <unk> and room for merges
constexpr size_t kSubwordTrainingBytes = size_t{32} << 20;
bool have_sentencepiece();

struct SubwordModel;     // src/data/subword.cpp
struct ByteLevelModel;   // src/data/bytelevel_model.h

class Tokenizer {
 public:
  // char or byte; Error for a subword kind (it needs a size: parse "bpe:N").
  explicit Tokenizer(TokenizerKind k = TokenizerKind::chars);
  // "char", "byte", "bpe:N", "unigram:N" or "bytelevel-bpe:N"; Error naming
  // the allowed names otherwise, or N out of range, or a subword kind without
  // SentencePiece.
  static Tokenizer parse(std::string_view name);
  static std::vector<std::string> names();   // {"char", "byte", "bpe:N", "unigram:N", "bytelevel-bpe:N"}
  // A trained tokenizer of this name from its model (empty for char and byte);
  // Error when the model does not load or has more ids than the name's N (a
  // model of fewer is padded: padded_to).
  static Tokenizer from_model(std::string_view name, const std::string& model);
  // A SentencePiece model made anywhere (a Llama directory's tokenizer.model):
  // "bpe:N" or "unigram:N" by its type and piece count. Error when it does not
  // load or cannot be read field by field, is of another type (word, char),
  // has no byte pieces (byte fallback), or may normalize the text (no
  // normalizer_spec, whose defaults do; a name other than "identity"; a
  // non-empty precompiled_charsmap; remove_extra_whitespaces): its text
  // would not come back.
  static Tokenizer from_sentencepiece(const std::string& model);
  // A byte-level BPE from a tokenizer.json's text, or from vocab.json and
  // merges.txt (merges_txt given): "bytelevel-bpe:N". Error naming the field.
  static Tokenizer from_bytelevel(const std::string& json_or_vocab, const std::string* merges_txt = nullptr);

  TokenizerKind kind() const { return kind_; }
  std::string name() const;                           // "char", "byte", "bpe:4000", ...
  int64_t vocab() const { return vocab_; }            // 64, 256 or N
  // SentencePiece's kinds (bpe:N, unigram:N).
  bool subword() const { return kind_ == TokenizerKind::bpe || kind_ == TokenizerKind::unigram; }
  // A kind with a model a checkpoint must keep (the subword ones and bytelevel-bpe).
  bool has_model() const { return subword() || kind_ == TokenizerKind::bytelevel_bpe; }
  bool trained() const { return !has_model() || model_ != nullptr || bytelevel_ != nullptr; }
  // The ids its model has (the pieces, the byte-level BPE's largest id + 1);
  // vocab() for char and byte.
  int64_t model_size() const;
  // The same model in a vocabulary of `vocab` ids, named by it
  // ("bytelevel-bpe:50304"): for a config.json whose vocab_size pads the
  // tokenizer's. The ids past the model's are never encoded and decode to
  // nothing. Error for char and byte, or a vocab smaller than model_size().
  Tokenizer padded_to(int64_t vocab) const;
  // A subword tokenizer trained on `text` (Error naming SentencePiece's reason,
  // e.g. a vocabulary too large for the text); char and byte return themselves.
  Tokenizer trained_on(std::string_view text) const;
  // SentencePiece's serialized model, or the byte-level BPE's tokenizer.json;
  // empty for char and byte.
  std::string model() const;

  // Encodes `text`, reusing its buffer for the ids when the ids are one byte
  // each (no second copy of a large text); *stats, when given, gets the counts
  // of characters and unknown ones. Error for an untrained subword tokenizer.
  // bytelevel-bpe: the text is first cut at the added tokens it holds, which
  // become their ids: the special ones (added_tokens' "special": true, such
  // as "<|endoftext|>", "<|im_start|>") only when `special_tokens` is true,
  // the others always. transformers' tokenizers take both by default
  // (split_special_tokens=False); capstep's default is false, so a training
  // text or a prompt that spells a control token's name gets that name's
  // characters, never the control token; pass true where the text is meant
  // to hold them (a chat template's output) to get transformers' ids. Other
  // kinds ignore `special_tokens`.
  TokenIds encode(std::string text, TextStats* stats = nullptr, bool special_tokens = false) const;
  // The id of the token whose text is `text`: an added token's content (a
  // special token "<|eot_id|>", say), else a vocabulary token of exactly those
  // bytes (bytelevel-bpe) or that piece (a SentencePiece model: "</s>");
  // nullopt when there is none, and for char and byte.
  std::optional<int32_t> token_id(std::string_view text) const;
  // bytelevel-bpe: its tokenizer.json's added tokens, as listed there; empty
  // for the other kinds.
  std::vector<AddedToken> added_tokens() const;
  // Error for an id outside the vocabulary, naming its position and value.
  std::string decode(const TokenIds& ids) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The text of one id: one character (char), one byte (byte), a piece with
  // its spaces, one byte of a character (a subword byte piece), or the bytes
  // of a byte-level BPE token.
  std::string piece(int32_t id) const;

 private:
  TokenizerKind kind_;
  int64_t vocab_;
  std::shared_ptr<const SubwordModel> model_;
  std::shared_ptr<const ByteLevelModel> bytelevel_;
};

// The largest share of unknown characters a text may have before it is
// refused (unless allowed): 1%. Above it the model would mostly learn '~'.
constexpr double kMaxUnknownShare = 0.01;

// Thrown when a text holds more than kMaxUnknownShare unknown characters and
// they are not allowed; `capstep train` exits 2 for it, naming its options
// (--tokenizer byte, --allow-unknown).
class UnknownTextError : public Error {
 public:
  using Error::Error;
};

// ---- built-in corpus ----------------------------------------------------------
// Templated English sentences from small word lists with a grammar (articles
// agree with the next word, verbs with their subject, counts with plurals;
// questions are answered by repeating their noun), three to six sentences a
// paragraph, one paragraph a line. Generated from a seed with capstep's own
// generator (splitmix64), so it is the same bytes on every platform. Only the
// 63 known symbols occur; the text is cut to exactly kCorpusSize characters.
// Its character entropy is 2.95 nats (unigram) and 1.70 nats (given the
// previous character), against ln(64) = 4.16 for a fresh model: a model that
// learns character pairs is below 2.0, one that learns the words well below.
// A sample: "The sad hog naps in the den. Sam and Tim pat the hogs. Is the hog
// tan? Yes, the hog is tan. Where is the rat? The rat is in the barn."
constexpr size_t kCorpusSize = 262144;          // 256 KiB
constexpr uint64_t kCorpusSeed = 20261129;
std::string builtin_corpus(uint64_t seed = kCorpusSeed, size_t size = kCorpusSize);

// ---- text files ---------------------------------------------------------------
// The file's bytes. Throws Error naming the path when it cannot be read, is
// not a regular file (a directory, a FIFO: never waits for a writer), is
// empty, is larger than 1 GiB, holds a NUL byte (binary data or UTF-16), or
// holds no symbol of the tokenizer's 63 known ones (it would train on nothing
// but '~').
std::string read_text_file(const std::string& path);

// The bytes of a text file, unchecked but for what any tokenizer needs: Error
// naming the path when it cannot be read, is not a regular file, is empty or
// is larger than 1 GiB. (A subword tokenizer is trained on them before
// text_tokens encodes them.)
std::string read_text_bytes(const std::string& path);

// A text file encoded with `tok`, read once and encoded in place (the peak is
// about one byte per character of the file, not five). Errors as
// read_text_file's where they apply to the tokenizer: empty, larger than 1 GiB,
// not a regular file; with the char tokenizer also a NUL byte and no known
// symbol at all; the byte tokenizer takes any bytes. Throws UnknownTextError,
// naming the file, the share and the first unknown character's position, when
// more than kMaxUnknownShare of the characters are unknown and allow_unknown
// is false. *stats, when given, gets the counts (to print a smaller share).
TokenIds read_text_tokens(const std::string& path, const Tokenizer& tok, bool allow_unknown,
                          TextStats* stats = nullptr);
// The same checks on a text already in memory; `name` names it in errors
// ("text file 'a.txt'", "the prompt").
TokenIds text_tokens(std::string text, const std::string& name, const Tokenizer& tok, bool allow_unknown,
                     TextStats* stats = nullptr);

// ---- batches --------------------------------------------------------------------
// inputs and targets are i32[batch, seq]: targets[b][t] = inputs[b][t+1] within
// one window of seq+1 consecutive tokens.
struct Batch {
  Array inputs;
  Array targets;
};

// Batch k draws each of its `batch` windows at a start chosen by a counter-based
// generator from (seed, k, row), uniform over every full window of the tokens.
// The stream's whole state is its position k (a uint64): save position(),
// restore it with set_position(), and a resumed run sees bit-identical batches.
// Every caller with the same tokens and seed sees the same sequence.
class BatchStream {
 public:
  // Throws Error if a token id is outside the vocabulary (the char
  // tokenizer's 64 symbols unless `vocab` says otherwise), batch or seq is not
  // positive, or there are fewer than seq+1 tokens.
  BatchStream(const std::vector<int32_t>& tokens, uint64_t seed, int64_t batch = 4, int64_t seq = 16,
              int64_t vocab = kVocabSize);
  BatchStream(TokenIds tokens, uint64_t seed, int64_t batch = 4, int64_t seq = 16);
  // Ids [begin, end) of shared ids (in memory or mapped): the training and
  // validation parts of one text without a copy of either. Error when the
  // range is not within the ids.
  BatchStream(std::shared_ptr<const TokenSource> tokens, size_t begin, size_t end, uint64_t seed, int64_t batch = 4,
              int64_t seq = 16);

  Batch next();                                  // batch at position(), then advance
  Batch at(uint64_t index) const;                // any batch, without moving
  // Writes batch `index` into arrays that already have type i32[batch, seq]
  // (no allocation, checks included: for a training loop's steady state);
  // throws Error otherwise.
  void fill(uint64_t index, Array& inputs, Array& targets) const;
  // Rows [first_row, first_row + R) of batch `index` into arrays of type
  // i32[R, seq]: a data-parallel replica's share of the global batch, so the
  // data seen does not depend on how many replicas share it. Error when the
  // rows are not within [0, batch) or the arrays have another type.
  void fill_rows(uint64_t index, int64_t first_row, Array& inputs, Array& targets) const;
  // Start of window `row` of batch `index` in the token vector.
  int64_t window_start(uint64_t index, int64_t row) const;

  uint64_t position() const { return position_; }
  void set_position(uint64_t p) { position_ = p; }
  uint64_t seed() const { return seed_; }
  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  size_t size() const { return size_; }               // tokens in the stream
  int64_t vocab() const { return tokens_->vocab(); }
  int32_t token(size_t i) const {   // i < size(), unchecked
    int32_t id;
    tokens_->copy_to(begin_ + i, 1, &id);
    return id;
  }

 private:
  BatchStream(std::shared_ptr<const TokenSource> tokens, size_t begin, size_t end, uint64_t seed, int64_t batch,
              int64_t seq, bool all);   // all: the whole of tokens
  void check_sizes(size_t n) const;
  // Window `start` of the stream: seq inputs and their next-token targets.
  void copy_window(int64_t start, int32_t* in, int32_t* tg) const;

  std::shared_ptr<const TokenSource> tokens_;
  size_t begin_ = 0;
  size_t size_ = 0;
  uint64_t seed_;
  int64_t batch_;
  int64_t seq_;
  uint64_t position_ = 0;
};

// ---- held-out split --------------------------------------------------------------
// The token stream cut once at a fixed place: train is the first
// n - floor(n * val_fraction) tokens, val the rest (the last part of the text,
// as nanoGPT does). Windows drawn from one part never contain a token of the
// other. val_fraction in [0, 1); Error otherwise.
struct TokenSplit {
  std::vector<int32_t> train, val;
};
TokenSplit split_tokens(const std::vector<int32_t>& tokens, double val_fraction);
// Where split_tokens cuts n tokens: n - floor(n * val_fraction).
size_t split_point(size_t n, double val_fraction);

// splitmix64 (capstep/random.h): the one generator behind the corpus and the batch windows.
using capstep::splitmix64;

}  // namespace capstep::data
