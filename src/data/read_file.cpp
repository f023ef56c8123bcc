#include "read_file.h"

#include <cerrno>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capstep/ir.h"

namespace capstep::data {

std::string read_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const std::string name = what + " '" + path + "'";
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever;
  // fstat then refuses it. It changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + name + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(name + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw Error(name + " is " + std::to_string(size) + " bytes; the limit is " + std::to_string(max_bytes));
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw Error(name + " (" + std::to_string(size) + " bytes) does not fit in memory");
  }
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read " + name + ": " + std::strerror(errno));
    if (n == 0) break;   // the file shrank while we read
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace capstep::data
