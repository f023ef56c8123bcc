// The data layer: a 64-symbol character tokenizer, a built-in corpus the
// project generates itself, text files, and a deterministic, resumable stream
// of next-token batches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"

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
  // Throws Error if a token id is outside the vocabulary, batch or seq is not
  // positive, or there are fewer than seq+1 tokens.
  BatchStream(std::vector<int32_t> tokens, uint64_t seed, int64_t batch = 4, int64_t seq = 16);

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
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  uint64_t seed_;
  int64_t batch_;
  int64_t seq_;
  uint64_t position_ = 0;
};

// ---- held-out split (issue 15) ---------------------------------------------------
// The token stream cut once at a fixed place: train is the first
// n - floor(n * val_fraction) tokens, val the rest (the last part of the text,
// as nanoGPT does). Windows drawn from one part never contain a token of the
// other. val_fraction in [0, 1); Error otherwise.
struct TokenSplit {
  std::vector<int32_t> train, val;
};
TokenSplit split_tokens(const std::vector<int32_t>& tokens, double val_fraction);

// splitmix64: the one generator behind the corpus and the batch windows.
uint64_t splitmix64(uint64_t& state);

}  // namespace capstep::data
