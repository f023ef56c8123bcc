// The byte-level BPE tokenizer (GPT-2's: Tokenizer "bytelevel-bpe:N"), behind
// data::Tokenizer: read from a Hugging Face tokenizer.json or vocab.json +
// merges.txt, never trained by capstep. src/data/bytelevel.cpp reads it,
// bytelevel_encode.cpp runs it; bytelevel_model.h is the model they share.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/data.h"

namespace capstep::data {

struct ByteLevelModel;

// A model from the text of a tokenizer.json: model.type "BPE" without
// continuing_subword_prefix or end_of_word_suffix; the normalizer null, NFC
// or a Sequence of NFC; the pre_tokenizer a Sequence of Split (a regex or a
// string, any behavior, invert), Digits and ByteLevel (with or without
// GPT-2's regex and a prefix space), or one of them, with one ByteLevel and
// that one last; every one of the 256 bytes a token, every merge's parts and
// result tokens; added tokens without single_word, lstrip or rstrip, and not
// normalized when there is a normalizer.
// Error naming the field and what is wrong ("model.type is \"WordPiece\"").
std::shared_ptr<const ByteLevelModel> bytelevel_from_tokenizer_json(const std::string& json);
// The same from GPT-2's older files: vocab.json (token -> id) and merges.txt
// (one merge "a b" a line, by rank; a first line "#version: ..." skipped).
// Error naming the file ("vocab.json", "merges.txt") and the entry.
std::shared_ptr<const ByteLevelModel> bytelevel_from_vocab_merges(const std::string& vocab_json,
                                                                   const std::string& merges_txt);
// The model as a tokenizer.json capstep writes (the form above, merges as
// "a b" strings, which every `tokenizers` version reads): what a checkpoint
// keeps and what `capstep export-hf` writes. Reading it back gives the same model.
const std::string& bytelevel_json(const ByteLevelModel& m);
// The number of ids: one more than the largest id of the vocabulary (and of
// added tokens outside it).
int64_t bytelevel_size(const ByteLevelModel& m);
// Appends the ids of `text` (any bytes) to `out`, counting its characters into
// `s` (a byte that is not part of valid UTF-8 counts as one; none is unknown).
// The text is cut at the added tokens it holds first (the special ones only
// when `special`), then each part between them is normalized (NFC), cut by
// the pre-tokenizers in order and each piece merged by the BPE.
void bytelevel_encode(const ByteLevelModel& m, std::string_view text, TokenIds& out, TextStats& s, bool special);
// The id of an added token whose content is `text`, else of the vocabulary's
// token of exactly those bytes; nullopt when there is neither.
std::optional<int32_t> bytelevel_token_id(const ByteLevelModel& m, std::string_view text);
// tokenizer.json's added_tokens, as listed.
std::vector<AddedToken> bytelevel_added_tokens(const ByteLevelModel& m);
// Whether this build runs Split pre-tokenizers (PCRE2) and the NFC normalizer
// (utf8proc); a tokenizer.json that needs what the build lacks is an Error
// naming the Debian package.
bool bytelevel_have_split_regex();
bool bytelevel_have_nfc();
// The bytes an id stands for (an id the vocabulary does not hold: empty;
// an added token outside the byte alphabet: its text). Id checked by the caller.
const std::string& bytelevel_piece(const ByteLevelModel& m, int32_t id);

// Whether any text in NFC decodes back from its ids exactly (encoded with
// `special` as bytelevel_encode's): false when a Split removes its matches,
// ByteLevel adds a prefix space, or an added token that encode would cut
// out decodes to other bytes (the vocabulary's token of its id, in the byte
// alphabet, is not its text).
bool bytelevel_gives_text_back(const ByteLevelModel& m, bool special);
// The normalizer and the pre-tokenizers of `m` alone (for tests): the bytes
// of each piece the BPE would get (no added token is cut out).
std::vector<std::string> bytelevel_pieces(const ByteLevelModel& m, std::string_view text);
// The pre-tokenization alone (for tests): the byte lengths of the pieces
// GPT-2's regex cuts `text` into; a byte that is not valid UTF-8 is a
// character of its own that is neither a letter, a number nor a space.
std::vector<size_t> bytelevel_pretokenize(std::string_view text);

}  // namespace capstep::data
