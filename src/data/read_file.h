// Reading a whole regular file into memory with an Error that names it: the
// one place text files and safetensors files are opened.
#pragma once

#include <cstdint>
#include <string>

namespace capstep::data {

// The bytes of `path`. Throws Error "<what> '<path>' ..." (or "cannot read
// <what> '<path>': <reason>") when the file cannot be opened or read, is not a
// regular file (a directory; a FIFO is refused at once, never waited on), is
// larger than max_bytes, or does not fit in memory. A file that shrinks while
// it is read is returned as read.
std::string read_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes);

}  // namespace capstep::data
