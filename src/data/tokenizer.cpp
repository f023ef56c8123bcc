// The 64-symbol character tokenizer documented in include/capstep/data.h.
#include <array>

#include "capstep/data.h"

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

}  // namespace

std::string_view alphabet() { return kAlphabet; }

int32_t encode_char(unsigned char c) { return kTable[c]; }

std::vector<int32_t> encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  bool in_character = false;   // inside a multi-byte UTF-8 character
  for (unsigned char c : text) {
    // UTF-8 continuation bytes (10xxxxxx) after a lead byte belong to the
    // character whose lead byte already produced one unknown id. A stray one
    // (Latin-1 text, say) is a character of its own.
    if ((c & 0xC0) == 0x80 && in_character) continue;
    in_character = c >= 0xC0;
    ids.push_back(kTable[c]);
  }
  return ids;
}

void check_token_ids(const int32_t* ids, size_t n, std::string_view what) {
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= kVocabSize)
      throw Error(std::string(what) + ": token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(kVocabSize) + ")");
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

}  // namespace capstep::data
