// Reading a user's text file for training, with an Error a person can act on.
#include "capstep/data.h"
#include "read_file.h"

namespace capstep::data {

std::string read_text_file(const std::string& path) {
  const std::string text = read_regular_file(path, "text file", uint64_t{1} << 30);
  if (text.empty()) throw Error("text file '" + path + "' is empty: there is nothing to train on");
  // No text holds a NUL byte; binary data (and UTF-16) nearly always does.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error("text file '" + path + "' holds a NUL byte at offset " + std::to_string(nul) +
                ": it is a binary file (or UTF-16), not text in ASCII or UTF-8");
  for (unsigned char c : text)
    if (encode_char(c) != kUnknownId) return text;
  throw Error("text file '" + path + "' holds none of the tokenizer's symbols (newline, space, letters, " +
              "! \" ' , - . : ; ?): is it a binary file?");
}

}  // namespace capstep::data
