// Reading a user's text file for training, with an Error a person can act on.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>

#include "capstep/data.h"

namespace capstep::data {

std::string read_text_file(const std::string& path) {
  constexpr long long kMaxBytes = 1LL << 30;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot read text file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    throw Error("text file '" + path + "' is not a regular file");
  }
  if (st.st_size > kMaxBytes) {
    std::fclose(f);
    throw Error("text file '" + path + "' is " + std::to_string(st.st_size) + " bytes; the limit is 1 GiB");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const size_t got = text.empty() ? 0 : std::fread(text.data(), 1, text.size(), f);
  const bool read_error = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (read_error) throw Error("cannot read text file '" + path + "': " + std::strerror(err));
  text.resize(got);
  if (text.empty()) throw Error("text file '" + path + "' is empty: there is nothing to train on");
  for (unsigned char c : text)
    if (encode_char(c) != kUnknownId) return text;
  throw Error("text file '" + path + "' holds none of the tokenizer's symbols (newline, space, letters, " +
              "! \" ' , - . : ; ?): is it a binary file?");
}

}  // namespace capstep::data
