// Token files: ids already tokenized, read by `capstep train --tokens` and
// written by `capstep tokenize`. Two layouts:
//
//   llmc     llm.c's shards: a header of 256 little-endian int32 (1024 bytes),
//            word 0 the magic, word 1 the version, word 2 the token count,
//            then the ids, little-endian:
//              magic 20240520, version 1: uint16 ids (GPT-2's vocabulary);
//              magic 20240801, version 7: uint32 ids (Llama 3's).
//   raw-u16  nanoGPT's train.bin / val.bin: little-endian uint16 ids, no header.
//
// The layout of a file read with TokenFileFormat::automatic is chosen by its
// first word: one of llm.c's two magics makes it an llm.c file (whose version
// must then be that magic's), anything else (or a file shorter than 4 bytes)
// a raw uint16 file. A raw file whose first two ids happen to spell a magic
// is read as llmc and refused for its header: name the layout (raw-u16) then.
//
// A file or a glob of shards is memory-mapped read-only (MappedTokens): the
// batches are copied out of the mapping window by window, so the process
// never holds a copy of the file. The pages a window touches are the kernel's
// page cache, mapped on demand (random access: no read-ahead); a kernel may
// map a whole large folio (up to megabytes) for one window, so after every
// kReleaseEvery windows the mapped pages are handed back to the page cache
// (madvise MADV_DONTNEED, which keeps them cached): the resident set stays
// within about kReleaseEvery such folios, whatever the file's size and the
// run's length.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/data.h"

namespace capstep::data {

enum class TokenFileFormat { automatic, llmc, raw_u16 };
const char* token_file_format_name(TokenFileFormat f);        // "auto", "llmc", "raw-u16"
TokenFileFormat parse_token_file_format(std::string_view s);  // those; Error naming them otherwise

constexpr int32_t kLlmcMagicU16 = 20240520;
constexpr int32_t kLlmcVersionU16 = 1;
constexpr int32_t kLlmcMagicU32 = 20240801;
constexpr int32_t kLlmcVersionU32 = 7;
constexpr size_t kLlmcHeaderBytes = 1024;   // 256 int32

// What a token file's header and size say (nothing of its ids is read).
struct TokenFileInfo {
  std::string path;
  TokenFileFormat format = TokenFileFormat::raw_u16;   // llmc or raw_u16, as read
  int32_t version = 0;                                 // llmc: 1 or 7; raw: 0
  size_t width = 2;                                    // bytes per id: 2 or 4
  uint64_t count = 0;                                  // ids in the file
  uint64_t offset = 0;                                 // bytes before the first id (1024 or 0)
};
// Error naming the file: it cannot be opened, is not a regular file, is
// empty; (llmc) a wrong magic (with TokenFileFormat::llmc), a version that is
// not its magic's, a header shorter than 1024 bytes, a file shorter than its
// count says (truncated) or longer (the count does not match the size); (raw)
// an odd size.
TokenFileInfo inspect_token_file(const std::string& path, TokenFileFormat format = TokenFileFormat::automatic);

// The files a pattern names: the pattern itself when it has no glob
// character (*, ?, [), else its matches sorted by name (Error naming the
// pattern when nothing matches).
std::vector<std::string> token_file_paths(const std::string& file_or_glob);

// The ids of one file or a glob of shards, mapped read-only and concatenated
// in name order: a batch window may span the end of one shard and the start
// of the next, as it spans two documents within one. The ids are checked once
// when opened, read in bounded chunks (not through the mapping, so the check
// leaves no pages mapped): an id >= vocab is an Error naming the file, the
// id's index in it and its byte offset. The same pass gives the fingerprint.
class MappedTokens final : public TokenSource {
 public:
  static constexpr uint64_t kReleaseEvery = 16;   // copy_to calls between releases of the mapped pages
  static std::shared_ptr<const MappedTokens> open(const std::string& file_or_glob, int64_t vocab,
                                                  TokenFileFormat format = TokenFileFormat::automatic);
  ~MappedTokens() override;
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;

  int64_t vocab() const override { return vocab_; }
  size_t size() const override { return size_; }
  void copy_to(size_t begin, size_t n, int32_t* out) const override;
  const std::vector<TokenFileInfo>& files() const { return infos_; }
  // One file: train::file_fingerprint of it (FNV-1a 64 of its bytes, 16 hex
  // digits); several: FNV-1a 64 of their fingerprints, one a line, in order
  // (another shard, a missing one or an edited one changes it).
  const std::string& fingerprint() const { return fingerprint_; }
  int32_t max_id() const { return max_id_; }   // the largest id of all files (-1: none)

 private:
  MappedTokens() = default;
  struct Shard {
    const unsigned char* ids = nullptr;   // into the mapping
    void* map = nullptr;
    size_t map_bytes = 0;
    size_t width = 2;
    uint64_t start = 0;                   // index of its first id in the whole
    uint64_t count = 0;
  };
  std::vector<Shard> shards_;
  mutable std::atomic<uint64_t> copies_{0};
  std::unique_ptr<std::atomic<bool>[]> touched_;   // per shard, since the last release
  std::vector<TokenFileInfo> infos_;
  int64_t vocab_ = 0;
  size_t size_ = 0;
  int32_t max_id_ = -1;
  std::string fingerprint_;
};

// ---- writing -------------------------------------------------------------------
// Ids to a file in llm.c's layout: uint16 (magic 20240520, version 1) when
// vocab <= 65536, else uint32 (20240801, version 7). Written to a temporary
// beside `path` and renamed over it by commit() (fsynced first), so `path`
// holds either nothing new or the whole file; destroyed uncommitted, the
// temporary is removed. Error naming the path when it cannot be written, and
// for an id outside [0, vocab).
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, int64_t vocab);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  void write(const TokenSource& ids);
  void write(const int32_t* ids, size_t n);
  void commit();
  uint64_t count() const { return count_; }
  size_t width() const { return width_; }

 private:
  void put(const char* bytes, size_t n);
  std::string path_, tmp_;
  int fd_ = -1;
  int64_t vocab_;
  size_t width_;
  uint64_t count_ = 0;
  std::string buffer_;
};

// `capstep tokenize`: the text file `text_path` encoded with `tok` (trained)
// into `out_path` in llm.c's layout, in bounded memory: the text is read in
// chunks of about chunk_bytes, each cut after a newline that is followed by a
// printable ASCII character other than a space (no piece of GPT-2's byte-level
// BPE or of a SentencePiece model spans such a cut, and no character of the
// char tokenizer); a chunk with no such newline grows until one comes. A
// tokenizer whose ids of a text cut there differ from those of the whole (a
// SentencePiece model with a dummy prefix, as Llama's, puts a space before
// each piece it is given) gets the whole text at once. The ids equal
// Tokenizer::encode of the whole text. Error when `out_path` exists and
// overwrite is false, when the text is not a readable, non-empty regular file,
// or with the char tokenizer when more than kMaxUnknownShare of its characters
// are unknown and allow_unknown is false (UnknownTextError). progress, when
// given, gets (bytes read, total bytes) after each chunk.
struct TokenizeOptions {
  size_t chunk_bytes = size_t{16} << 20;
  bool overwrite = false;
  bool allow_unknown = false;
  std::function<void(uint64_t, uint64_t)> progress;
};
struct TokenizeResult {
  uint64_t bytes = 0;       // of the text
  uint64_t tokens = 0;      // written
  size_t width = 2;         // bytes per id in the file
  TextStats stats;          // summed over the chunks
  bool whole = false;       // the text was encoded at once (see above)
};
TokenizeResult tokenize_file(const std::string& text_path, const std::string& out_path, const Tokenizer& tok,
                             const TokenizeOptions& o = {});

}  // namespace capstep::data
