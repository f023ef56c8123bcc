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
//   - TokenIds of every width keep every id.
// A broken invariant is __builtin_trap(), which libFuzzer reports as a crash.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "capstep/data.h"

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

}  // namespace

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
  return 0;
}
