// The subword tokenizers' SentencePiece side (src/data/subword.cpp), behind
// data::Tokenizer: the one file that includes SentencePiece's headers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/data.h"

namespace capstep::data {

// A model of `vocab` pieces trained on `text`'s lines (at most
// kSubwordTrainingBytes of them); Error with SentencePiece's reason.
std::shared_ptr<const SubwordModel> subword_train(TokenizerKind kind, int64_t vocab, std::string_view text);
// A model from its serialized proto; Error when it does not load.
std::shared_ptr<const SubwordModel> subword_load(const std::string& proto);
const std::string& subword_proto(const SubwordModel& m);
int64_t subword_size(const SubwordModel& m);
// trainer_spec.model_type: 1 unigram, 2 bpe, 3 word, 4 char.
int subword_type(const SubwordModel& m);
// Whether the model puts a space before the text (normalizer_spec.add_dummy_prefix;
// capstep's own models do not, Llama's do).
bool subword_dummy_prefix(const SubwordModel& m);
// Appends the ids of `text` to `out` and counts its characters into `s` (none
// is unknown: what SentencePiece cannot give back goes in as byte pieces).
void subword_encode(const SubwordModel& m, std::string_view text, TokenIds& out, TextStats& s);
std::string subword_decode(const SubwordModel& m, const std::vector<int32_t>& ids);   // ids checked by the caller
std::string subword_piece(const SubwordModel& m, int32_t id);

// Every piece of the model in id order, as SentencePiece keeps it: its text
// (U+2581 for a space; "<0xAB>" for a byte piece), its score and its kind.
// For writing the model in other formats (nn::hf_tokenizer_json).
enum class SubwordPieceKind { normal, unknown, control, byte, unused };
struct SubwordPiece {
  std::string text;
  float score = 0;
  SubwordPieceKind kind = SubwordPieceKind::normal;
};
std::vector<SubwordPiece> subword_pieces(const SubwordModel& m);

}  // namespace capstep::data
