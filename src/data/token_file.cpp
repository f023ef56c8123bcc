// Token files (include/capstep/token_file.h): llm.c's shards and nanoGPT's raw
// uint16 files, memory-mapped for the batch stream; llm.c's layout written by
// `capstep tokenize`.
#include "capstep/token_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace capstep::data {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;   // FNV-1a 64, as train::file_fingerprint
constexpr uint64_t kFnvPrime = 1099511628211ull;

std::string hex16(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

std::string quoted(const std::string& path) { return "token file '" + path + "'"; }

// A file descriptor closed on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at offset (retrying short reads); false at end of file.
bool read_at(int fd, void* p, size_t n, uint64_t offset) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r, n -= static_cast<size_t>(r), offset += static_cast<uint64_t>(r);
  }
  return true;
}

int32_t le32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

int open_regular(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: a FIFO is refused below, never waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw Error("cannot read " + quoted(path) + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read " + quoted(path) + ": not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

TokenFileInfo inspect_fd(int fd, const std::string& path, uint64_t size, TokenFileFormat format) {
  TokenFileInfo info;
  info.path = path;
  if (size == 0) throw Error(quoted(path) + " is empty");
  unsigned char head[kLlmcHeaderBytes];
  const size_t got = static_cast<size_t>(std::min<uint64_t>(size, kLlmcHeaderBytes));
  if (!read_at(fd, head, got, 0)) throw Error("cannot read " + quoted(path) + ": " + std::strerror(errno));
  const int32_t magic = got >= 4 ? le32(head) : 0;
  const bool known = magic == kLlmcMagicU16 || magic == kLlmcMagicU32;
  const bool asked_llmc = format == TokenFileFormat::llmc;
  if (format == TokenFileFormat::automatic) format = known ? TokenFileFormat::llmc : TokenFileFormat::raw_u16;
  info.format = format;
  if (format == TokenFileFormat::raw_u16) {
    if (size % 2 != 0)
      throw Error(quoted(path) + " (raw uint16 ids, no header) has an odd size, " + std::to_string(size) +
                  " bytes: it is truncated or not a token file");
    info.width = 2;
    info.count = size / 2;
    info.offset = 0;
    return info;
  }
  if (!known)
    throw Error(quoted(path) + " is not an llm.c token file: its magic is " + std::to_string(magic) + ", not " +
                std::to_string(kLlmcMagicU16) + " (uint16 ids) or " + std::to_string(kLlmcMagicU32) + " (uint32 ids)");
  if (got < kLlmcHeaderBytes)
    throw Error(quoted(path) + " is truncated: " + std::to_string(size) + " bytes, shorter than llm.c's header of " +
                std::to_string(kLlmcHeaderBytes));
  info.version = le32(head + 4);
  const int32_t want = magic == kLlmcMagicU16 ? kLlmcVersionU16 : kLlmcVersionU32;
  if (info.version != want)
    throw Error(quoted(path) + " has llm.c's magic " + std::to_string(magic) + " with version " +
                std::to_string(info.version) + ", not " + std::to_string(want) +
                (asked_llmc ? std::string()
                                                 : "; if it is raw uint16 ids, give the layout (--tokens-format raw-u16)"));
  info.width = magic == kLlmcMagicU16 ? 2 : 4;
  info.offset = kLlmcHeaderBytes;
  const int32_t count = le32(head + 8);
  if (count < 0) throw Error(quoted(path) + "'s header counts " + std::to_string(count) + " tokens");
  info.count = static_cast<uint64_t>(count);
  const uint64_t expect = kLlmcHeaderBytes + info.count * info.width;
  if (size < expect)
    throw Error(quoted(path) + " is truncated: its header counts " + std::to_string(info.count) + " tokens of " +
                std::to_string(info.width) + " bytes (" + std::to_string(expect) + " bytes with the header), the file has " +
                std::to_string(size));
  if (size > expect)
    throw Error(quoted(path) + ": its header's count of " + std::to_string(info.count) + " tokens (" +
                std::to_string(expect) + " bytes with the header) does not match the file's size, " +
                std::to_string(size) + " bytes");
  return info;
}

}  // namespace

const char* token_file_format_name(TokenFileFormat f) {
  switch (f) {
    case TokenFileFormat::automatic: return "auto";
    case TokenFileFormat::llmc: return "llmc";
    case TokenFileFormat::raw_u16: return "raw-u16";
  }
  return "?";
}

TokenFileFormat parse_token_file_format(std::string_view s) {
  for (TokenFileFormat f : {TokenFileFormat::automatic, TokenFileFormat::llmc, TokenFileFormat::raw_u16})
    if (s == token_file_format_name(f)) return f;
  throw Error("unknown token file layout '" + std::string(s) + "'; the layouts are auto, llmc, raw-u16");
}

TokenFileInfo inspect_token_file(const std::string& path, TokenFileFormat format) {
  uint64_t size = 0;
  Fd f{open_regular(path, &size)};
  return inspect_fd(f.fd, path, size, format);
}

std::vector<std::string> token_file_paths(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (out.empty()) throw Error("no token file matches '" + pattern + "'");
  std::sort(out.begin(), out.end());
  return out;
}

// ---- MappedTokens ----------------------------------------------------------------

std::shared_ptr<const MappedTokens> MappedTokens::open(const std::string& file_or_glob, int64_t vocab,
                                                       TokenFileFormat format) {
  if (vocab < 1 || vocab > INT32_MAX)
    throw Error("token files: the vocabulary must have 1 to 2147483647 symbols, got " + std::to_string(vocab));
  std::shared_ptr<MappedTokens> t(new MappedTokens());
  t->vocab_ = vocab;
  std::string prints;
  std::vector<unsigned char> buf(size_t{4} << 20);
  for (const std::string& path : token_file_paths(file_or_glob)) {
    uint64_t size = 0;
    Fd f{open_regular(path, &size)};
    TokenFileInfo info = inspect_fd(f.fd, path, size, format);
    // One pass in bounded chunks: the fingerprint of every byte and the
    // first id outside the vocabulary.
    uint64_t h = kFnvOffset;
    int32_t max_id = -1;
    for (uint64_t at = 0; at < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
      if (!read_at(f.fd, buf.data(), n, at))
        throw Error("cannot read " + quoted(path) + " (it may have shrunk while read)");
      for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * kFnvPrime;
      // The ids of this chunk: at and the chunk's size are multiples of the
      // width past the header (the buffer is, and the header is 1024 bytes).
      const uint64_t from = std::max(at, info.offset);
      auto id_at = [&](uint64_t b) {
        const unsigned char* p = buf.data() + (b - at);
        return info.width == 2 ? static_cast<uint32_t>(p[0] | p[1] << 8) : static_cast<uint32_t>(le32(p));
      };
      // The chunk's largest id first (a loop the compiler vectorizes); the
      // offending id's place only when there is one.
      uint32_t top = 0;
      if (info.width == 2) {
        for (uint64_t b = from; b + 2 <= at + n; b += 2) top = std::max(top, id_at(b));
      } else {
        for (uint64_t b = from; b + 4 <= at + n; b += 4) top = std::max(top, id_at(b));
      }
      if (from < at + n && top >= static_cast<uint64_t>(vocab))
        for (uint64_t b = from; b + info.width <= at + n; b += info.width)
          if (const uint32_t v = id_at(b); v >= static_cast<uint64_t>(vocab))
            throw Error(quoted(path) + ": id " + std::to_string(v) + " at token " +
                        std::to_string((b - info.offset) / info.width) + " (byte offset " + std::to_string(b) +
                        ") is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
      if (from < at + n) max_id = std::max(max_id, static_cast<int32_t>(top));
      at += n;
    }
    const std::string fp = hex16(h);
    prints += fp + "\n";
    Shard s;
    s.width = info.width;
    s.count = info.count;
    s.start = t->size_;
    if (info.count > 0) {
      s.map_bytes = static_cast<size_t>(size);
      s.map = ::mmap(nullptr, s.map_bytes, PROT_READ, MAP_SHARED, f.fd, 0);
      if (s.map == MAP_FAILED) {
        const int err = errno;
        throw Error("cannot map " + quoted(path) + ": " + std::strerror(err));
      }
      // The batches read a few windows at random places: no read-ahead (and no
      // fault-around) mapping pages nobody reads.
      ::madvise(s.map, s.map_bytes, MADV_RANDOM);
      s.ids = static_cast<const unsigned char*>(s.map) + info.offset;
      t->shards_.push_back(s);
    }
    t->size_ += info.count;
    t->max_id_ = std::max(t->max_id_, max_id);
    t->infos_.push_back(std::move(info));
    if (t->infos_.size() == 1) t->fingerprint_ = fp;
  }
  t->touched_ = std::make_unique<std::atomic<bool>[]>(t->shards_.size());
  if (t->infos_.size() > 1) {
    uint64_t h = kFnvOffset;
    for (unsigned char c : prints) h = (h ^ c) * kFnvPrime;
    t->fingerprint_ = hex16(h);
  }
  return t;
}

MappedTokens::~MappedTokens() {
  for (const Shard& s : shards_) ::munmap(s.map, s.map_bytes);
}

void MappedTokens::copy_to(size_t begin, size_t n, int32_t* out) const {
  // The shard holding `begin`: the last one starting at or before it.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), begin,
                             [](size_t v, const Shard& s) { return v < s.start; });
  size_t k = static_cast<size_t>(it - shards_.begin()) - 1;
  if (n > 0 && (copies_.fetch_add(1, std::memory_order_relaxed) + 1) % kReleaseEvery == 0) {
    // The pages mapped since the last release back to the page cache (see
    // the header): the next read of them is a minor fault.
    for (size_t j = 0; j < shards_.size(); ++j)
      if (touched_[j].exchange(false, std::memory_order_relaxed))
        ::madvise(shards_[j].map, shards_[j].map_bytes, MADV_DONTNEED);
  }
  while (n > 0) {
    touched_[k].store(true, std::memory_order_relaxed);
    const Shard& s = shards_[k++];
    const size_t from = begin - s.start;
    const size_t take = std::min<size_t>(n, s.count - from);
    const unsigned char* p = s.ids + from * s.width;
    if (s.width == 2) {
      for (size_t i = 0; i < take; ++i) out[i] = static_cast<int32_t>(p[2 * i] | p[2 * i + 1] << 8);
    } else {
      for (size_t i = 0; i < take; ++i) out[i] = le32(p + 4 * i);
    }
    out += take, begin += take, n -= take;
  }
}

// ---- TokenFileWriter ----------------------------------------------------------------

TokenFileWriter::TokenFileWriter(const std::string& path, int64_t vocab)
    : path_(path), vocab_(vocab), width_(vocab <= 65536 ? 2 : 4) {
  if (vocab < 1 || vocab > INT32_MAX)
    throw Error("token file '" + path + "': the vocabulary must have 1 to 2147483647 symbols, got " +
                std::to_string(vocab));
  tmp_ = path + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw Error("cannot write token file '" + path + "': cannot create '" + tmp_ + "': " + std::strerror(err));
  }
  // The header, its count filled in by commit().
  std::string head(kLlmcHeaderBytes, '\0');
  const int32_t words[2] = {width_ == 2 ? kLlmcMagicU16 : kLlmcMagicU32, width_ == 2 ? kLlmcVersionU16 : kLlmcVersionU32};
  for (int w = 0; w < 2; ++w)
    for (int b = 0; b < 4; ++b) head[static_cast<size_t>(4 * w + b)] = static_cast<char>((static_cast<uint32_t>(words[w]) >> (8 * b)) & 0xFF);
  buffer_ = std::move(head);
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void TokenFileWriter::put(const char* bytes, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, bytes, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      throw Error("cannot write token file '" + path_ + "' ('" + tmp_ + "'): " + std::strerror(err));
    }
    bytes += w, n -= static_cast<size_t>(w);
  }
}

void TokenFileWriter::write(const int32_t* ids, size_t n) {
  if (fd_ < 0) throw Error("token file '" + path_ + "': written to after commit");
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_)
      throw Error("token file '" + path_ + "': id " + std::to_string(ids[i]) + " at token " +
                  std::to_string(count_ + i) + " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    for (size_t b = 0; b < width_; ++b) buffer_.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
    if (buffer_.size() >= (size_t{1} << 20)) {
      put(buffer_.data(), buffer_.size());
      buffer_.clear();
    }
  }
  count_ += n;
}

void TokenFileWriter::write(const TokenSource& ids) {
  std::vector<int32_t> chunk;
  for (size_t at = 0; at < ids.size();) {
    const size_t n = std::min<size_t>(ids.size() - at, size_t{1} << 18);
    chunk.resize(n);
    ids.copy_to(at, n, chunk.data());
    write(chunk.data(), n);
    at += n;
  }
}

void TokenFileWriter::commit() {
  if (fd_ < 0) throw Error("token file '" + path_ + "': committed twice");
  if (count_ > static_cast<uint64_t>(INT32_MAX))
    throw Error("token file '" + path_ + "': " + std::to_string(count_) +
                " tokens are more than llm.c's header counts (2147483647); cut the text into shards");
  put(buffer_.data(), buffer_.size());
  buffer_.clear();
  unsigned char count[4];
  for (int b = 0; b < 4; ++b) count[b] = static_cast<unsigned char>((count_ >> (8 * b)) & 0xFF);
  auto fail = [&](const std::string& what) {
    const int err = errno;
    throw Error("cannot write token file '" + path_ + "': " + what + ": " + std::strerror(err));
  };
  if (::pwrite(fd_, count, 4, 8) != 4) fail("cannot write the header of '" + tmp_ + "'");
  if (::fsync(fd_) != 0) fail("cannot fsync '" + tmp_ + "'");
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_.c_str());
    fail("cannot close '" + tmp_ + "'");
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    errno = err;
    fail("cannot rename '" + tmp_ + "' over it");
  }
}

// ---- tokenize_file -------------------------------------------------------------------

TokenizeResult tokenize_file(const std::string& text_path, const std::string& out_path, const Tokenizer& tok,
                             const TokenizeOptions& o) {
  if (!tok.trained())
    throw Error("the " + tok.name() + " tokenizer is not trained; take a trained one from a checkpoint or a "
                "directory (--tokenizer-from)");
  if (o.chunk_bytes == 0) throw Error("tokenize: the chunk size must be positive");
  struct stat st {};
  if (!o.overwrite && ::stat(out_path.c_str(), &st) == 0)
    throw Error("'" + out_path + "' exists; give --overwrite to replace it");
  const std::string which = "text file '" + text_path + "'";
  uint64_t size = 0;
  Fd in;
  {
    const int fd = ::open(text_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      throw Error("cannot read " + which + ": " + std::strerror(err));
    }
    in.fd = fd;
    struct stat s {};
    if (::fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) throw Error("cannot read " + which + ": not a regular file");
    size = static_cast<uint64_t>(s.st_size);
    if (size == 0) throw Error(which + " is empty");
  }
  TokenizeResult r;
  r.bytes = size;
  r.width = tok.vocab() <= 65536 ? 2 : 4;
  // Whether the ids of a text cut after a newline are those of the whole.
  {
    const std::string a = "ab\n", b = "Cd ef\n";
    const TokenIds whole = tok.encode(a + b), left = tok.encode(a), right = tok.encode(b);
    std::vector<int32_t> joined = left.to_vector(), rest = right.to_vector();
    joined.insert(joined.end(), rest.begin(), rest.end());
    r.whole = joined != whole.to_vector();
  }
  TokenFileWriter out(out_path, tok.vocab());
  uint64_t newlines = 0;   // in chunks before the first unknown character
  auto add = [&](std::string text, uint64_t at) {
    TextStats s;
    uint64_t lines = 0;
    if (tok.kind() == TokenizerKind::chars && r.stats.unknown == 0)
      lines = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
    const TokenIds ids = tok.encode(std::move(text), &s);
    out.write(ids);
    if (s.unknown > 0 && r.stats.unknown == 0) {
      r.stats.first_unknown_offset = at + s.first_unknown_offset;
      r.stats.first_unknown_line = newlines + s.first_unknown_line;
      r.stats.first_unknown_byte = s.first_unknown_byte;
    }
    if (r.stats.unknown == 0 && s.unknown == 0) newlines += lines;
    r.stats.characters += s.characters;
    r.stats.unknown += s.unknown;
    r.tokens += ids.size();
  };
  auto read_range = [&](uint64_t at, size_t n) {
    std::string s(n, '\0');
    if (!read_at(in.fd, s.data(), n, at)) throw Error("cannot read " + which + " (it may have shrunk while read)");
    return s;
  };
  if (r.whole) {
    if (size > (uint64_t{1} << 30)) throw Error(which + " is larger than 1 GiB, and the " + tok.name() +
                                                " tokenizer encodes it at once (its ids depend on where a text starts)");
    add(read_range(0, static_cast<size_t>(size)), 0);
    if (o.progress) o.progress(size, size);
  } else {
    std::string pending;   // read, not yet encoded
    uint64_t pending_at = 0, read = 0;
    while (read < size || !pending.empty()) {
      if (read < size) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(o.chunk_bytes, size - read));
        pending += read_range(read, n);
        read += n;
      }
      // The last cut in pending: after a '\n' followed by a printable,
      // non-space ASCII byte.
      size_t cut = 0;
      if (read == size) {
        cut = pending.size();
      } else {
        for (size_t i = pending.size() - 1; i > 0; --i)
          if (pending[i - 1] == '\n' && pending[i] > ' ' && pending[i] < 0x7F) {
            cut = i;
            break;
          }
      }
      if (cut == 0) continue;   // no cut yet: read more
      std::string rest = pending.substr(cut);
      pending.resize(cut);
      add(std::move(pending), pending_at);
      pending_at += cut;
      pending = std::move(rest);
      if (o.progress) o.progress(read, size);
    }
  }
  if (tok.kind() == TokenizerKind::chars && r.stats.characters > 0 && r.stats.unknown > 0 && !o.allow_unknown &&
      r.stats.share() > kMaxUnknownShare)
    throw UnknownTextError(which + ": " + describe_unknown(r.stats, tok.name()));
  if (r.tokens == 0) throw Error(which + " encodes to no tokens");
  if (!o.overwrite && ::stat(out_path.c_str(), &st) == 0)
    throw Error("'" + out_path + "' exists (made while the text was tokenized); give --overwrite to replace it");
  out.commit();
  return r;
}

}  // namespace capstep::data
