// Reading a user's text file for training, with an Error a person can act on,
// and the refusal of a text the tokenizer would mostly replace by '~'.
#include "capstep/data.h"
#include "read_file.h"

namespace capstep::data {
namespace {

constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;

void refuse_nul(const std::string& text, const std::string& name) {
  // No text holds a NUL byte; binary data (and UTF-16) nearly always does.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(name + " holds a NUL byte at offset " + std::to_string(nul) +
                ": it is a binary file (or UTF-16), not text in ASCII or UTF-8");
}

}  // namespace

std::string read_text_file(const std::string& path) {
  const std::string text = read_regular_file(path, "text file", kMaxTextBytes);
  const std::string name = "text file '" + path + "'";
  if (text.empty()) throw Error(name + " is empty: there is nothing to train on");
  refuse_nul(text, name);
  for (unsigned char c : text)
    if (encode_char(c) != kUnknownId) return text;
  throw Error(name + " holds none of the tokenizer's symbols (newline, space, letters, " +
              "! \" ' , - . : ; ?): is it a binary file?");
}

TokenIds text_tokens(std::string text, const std::string& name, const Tokenizer& tok, bool allow_unknown,
                     TextStats* stats) {
  if (text.empty()) throw Error(name + " is empty: there is nothing to train on");
  // The byte tokenizer represents every byte; the char tokenizer reads text.
  if (tok.kind() == TokenizerKind::chars) refuse_nul(text, name);
  TextStats s;
  TokenIds ids = tok.encode(std::move(text), &s);
  if (stats) *stats = s;
  if (s.unknown == s.characters)
    throw Error(name + " holds none of the " + tok.name() + " tokenizer's symbols" +
                (tok.kind() == TokenizerKind::chars ? " (newline, space, letters, ! \" ' , - . : ; ?)" : "") +
                ": is it a binary file? (the byte tokenizer takes any bytes)");
  if (!allow_unknown && s.share() > kMaxUnknownShare)
    throw UnknownTextError(name + ": " + describe_unknown(s, tok.name()) + "; more than 1% unknown is refused: " +
                           "use the byte tokenizer, which represents any text, or allow unknown characters");
  return ids;
}

std::string read_text_bytes(const std::string& path) {
  std::string text = read_regular_file(path, "text file", kMaxTextBytes);
  if (text.empty()) throw Error("text file '" + path + "' is empty: there is nothing to train on");
  return text;
}

TokenIds read_text_tokens(const std::string& path, const Tokenizer& tok, bool allow_unknown, TextStats* stats) {
  return text_tokens(read_regular_file(path, "text file", kMaxTextBytes), "text file '" + path + "'", tok,
                     allow_unknown, stats);
}

}  // namespace capstep::data
