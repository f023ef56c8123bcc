// Reading a user's text file for training, with an Error a person can act on.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstep/data.h"

namespace capstep::data {

std::string read_text_file(const std::string& path) {
  constexpr long long kMaxBytes = 1LL << 30;
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever;
  // fstat then refuses it (it has no effect on a regular file's reads).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read text file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("text file '" + path + "' is not a regular file");
  }
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw Error("cannot read text file '" + path + "': " + std::strerror(err));
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
