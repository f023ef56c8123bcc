// Token files (capstep/token_file.h): llm.c's v1 and v7 layouts and nanoGPT's
// raw uint16 written here from known ids train to the same losses as those ids
// given in memory (bit-equal on the host); a file `capstep tokenize` writes
// reads back as the in-memory encoding; bad files are Errors naming the file;
// `capstep train --tokens` and the refusal of --log / --plot over a file.
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "capstep/token_file.h"
#include "capstep/train.h"
#include "process_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;

namespace {

std::string golden_dir(const std::string& name) {
  const char* s = std::getenv("CAPSTEP_SOURCE_DIR");
  const std::string root = s ? s : fs::path(__FILE__).parent_path().parent_path().string();
  return root + "/tests/golden/hf/" + name;
}

void put32(std::string& s, uint32_t v) {
  for (int b = 0; b < 4; ++b) s.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

// ids in llm.c's layout (magic, version; width 2 or 4), or raw uint16 (magic 0).
std::string layout(const std::vector<int32_t>& ids, int32_t magic, int32_t version, size_t width) {
  std::string s;
  if (magic != 0) {
    put32(s, static_cast<uint32_t>(magic));
    put32(s, static_cast<uint32_t>(version));
    put32(s, static_cast<uint32_t>(ids.size()));
    s.resize(1024, '\0');
  }
  for (int32_t id : ids) {
    const uint32_t v = static_cast<uint32_t>(id);
    for (size_t b = 0; b < width; ++b) s.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
  }
  return s;
}

// A text of many short lines, bytes 32..126 and newlines.
std::string some_text(size_t lines) {
  std::string t;
  uint64_t st = 5;
  for (size_t i = 0; i < lines; ++i) {
    const size_t n = data::splitmix64(st) % 40;
    for (size_t k = 0; k < n; ++k) t += static_cast<char>(32 + data::splitmix64(st) % 95);
    if (i % 7 == 3) t += "  ";
    t += '\n';
  }
  return t;
}

train::Options small_options() {
  train::Options o;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_ff = 64;
  o.model.context = 32;
  o.model.batch = 2;
  o.model.seq = 8;
  o.model.vocab = 256;
  o.tokenizer = "byte";
  o.seed = 7;
  o.steps = 4;
  return o;
}

std::vector<int32_t> byte_ids(const std::string& text) {
  std::vector<int32_t> v;
  for (unsigned char c : text) v.push_back(c);
  return v;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST(TokenFile, FormatNames) {
  for (auto f : {data::TokenFileFormat::automatic, data::TokenFileFormat::llmc, data::TokenFileFormat::raw_u16})
    EXPECT_EQ(data::parse_token_file_format(data::token_file_format_name(f)), f);
  expect_error([] { data::parse_token_file_format("npy"); }, {"'npy'", "auto, llmc, raw-u16"});
}

// The three layouts of the same ids, read back, and trained on: the losses
// are those of the same ids in memory (a text under the byte tokenizer).
TEST(TokenFile, LayoutsTrainAsTheIdsInMemory) {
  TempDir d;
  const std::string text = some_text(60);
  const std::vector<int32_t> ids = byte_ids(text);
  train::Options mem = small_options();
  mem.text_path = d.write("t.txt", text);
  const train::Result want = train::train(mem);
  ASSERT_EQ(want.losses.size(), 4u);

  struct Case {
    const char* name;
    std::string bytes;
    size_t width;
    int32_t version;
  } cases[] = {{"v1.bin", layout(ids, data::kLlmcMagicU16, 1, 2), 2, 1},
               {"v7.bin", layout(ids, data::kLlmcMagicU32, 7, 4), 4, 7},
               {"raw.bin", layout(ids, 0, 0, 2), 2, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = d.write(c.name, c.bytes);
    const data::TokenFileInfo info = data::inspect_token_file(path);
    EXPECT_EQ(info.width, c.width);
    EXPECT_EQ(info.version, c.version);
    EXPECT_EQ(info.count, ids.size());
    auto m = data::MappedTokens::open(path, 256);
    ASSERT_EQ(m->size(), ids.size());
    std::vector<int32_t> back(ids.size());
    m->copy_to(0, ids.size(), back.data());
    EXPECT_EQ(back, ids);
    EXPECT_EQ(m->fingerprint(), train::file_fingerprint(path));
    train::Options o = small_options();
    o.tokens_path = path;
    const train::Result r = train::train(o);
    EXPECT_TRUE(same_bits(r.losses, want.losses)) << r.losses[0] << " vs " << want.losses[0];
  }
}

// Two shards by a glob: the ids concatenated in name order, windows across the
// cut included; a checkpoint records the glob and the fingerprint.
TEST(TokenFile, GlobOfShardsTrainsAsTheirConcatenation) {
  TempDir d;
  const std::string text = some_text(60);
  const std::vector<int32_t> ids = byte_ids(text);
  train::Options mem = small_options();
  mem.text_path = d.write("t.txt", text);
  mem.steps = 6;
  const train::Result want = train::train(mem);
  const size_t cut = ids.size() / 3;
  // Written in the other order: the glob sorts them.
  d.write("s_001.bin", layout({ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end()}, data::kLlmcMagicU16, 1, 2));
  d.write("s_000.bin", layout({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)}, data::kLlmcMagicU32, 7, 4));
  auto m = data::MappedTokens::open(d.file("s_*.bin"), 256);
  ASSERT_EQ(m->files().size(), 2u);
  EXPECT_EQ(m->files()[0].path, d.file("s_000.bin"));
  std::vector<int32_t> span(10);
  m->copy_to(cut - 5, 10, span.data());   // across the two shards
  EXPECT_EQ(span, std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(cut - 5),
                                       ids.begin() + static_cast<std::ptrdiff_t>(cut + 5)));
  train::Options o = small_options();
  o.steps = 6;
  o.tokens_path = d.file("s_*.bin");
  o.save_path = d.file("c.safetensors");
  const train::Result r = train::train(o);
  EXPECT_TRUE(same_bits(r.losses, want.losses));
  const train::TrainMeta meta = train::parse_meta(load_checkpoint(o.save_path));
  ASSERT_TRUE(meta.tokens.has_value());
  EXPECT_EQ(meta.tokens->tokens, d.file("s_*.bin"));
  EXPECT_EQ(meta.tokens->tokens_hash, m->fingerprint());
  EXPECT_EQ(meta.text, "");
  // Resumed on the same shards: bit-identical to the run through, no warning.
  train::Options first = o;
  first.steps = 3;
  first.save_path = d.file("half.safetensors");
  const train::Result r1 = train::train(first);
  train::Options rest = o;
  rest.save_path.clear();
  rest.resume_path = first.save_path;
  std::vector<std::string> said;
  rest.on_message = [&](const std::string& s) { said.push_back(s); };
  const train::Result r2 = train::train(rest);
  std::vector<double> joined = r1.losses;
  joined.insert(joined.end(), r2.losses.begin(), r2.losses.end());
  EXPECT_TRUE(same_bits(joined, r.losses));
  for (const std::string& s : said) EXPECT_EQ(s.find("warning"), std::string::npos) << s;
  // Another shard set: said.
  d.write("s_002.bin", layout({1, 2, 3}, data::kLlmcMagicU16, 1, 2));
  said.clear();
  train::train(rest);
  bool warned = false;
  for (const std::string& s : said) warned |= s.find("other ids") != std::string::npos;
  EXPECT_TRUE(warned);
}

// --val-tokens: the validation batches come from that file. Train and
// validation files cut where val_fraction cuts give that run's losses.
TEST(TokenFile, ValTokensAreTheValidationBatches) {
  TempDir d;
  const std::string text = some_text(80);
  const std::vector<int32_t> ids = byte_ids(text);
  train::Options mem = small_options();
  mem.text_path = d.write("t.txt", text);
  mem.val_fraction = 0.25;
  mem.eval_every = 2;
  mem.eval_batches = 3;
  const train::Result want = train::train(mem);
  ASSERT_EQ(want.val_losses.size(), 2u);
  const size_t cut = data::split_point(ids.size(), 0.25);
  train::Options o = small_options();
  o.eval_every = 2;
  o.eval_batches = 3;
  o.tokens_path = d.write("train.bin", layout({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)}, 0, 0, 2));
  o.val_tokens_path = d.write("val.bin", layout({ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end()}, 0, 0, 2));
  const train::Result r = train::train(o);
  EXPECT_TRUE(same_bits(r.losses, want.losses));
  EXPECT_TRUE(same_bits(r.val_losses, want.val_losses));
  EXPECT_EQ(r.val_steps, want.val_steps);
  o.val_fraction = 0.1;
  expect_error([&] { train::train(o); }, {"val-tokens", "val-fraction"});
}

TEST(TokenFile, BadFilesAreErrorsNamingTheFile) {
  TempDir d;
  std::vector<int32_t> ids(40, 7);
  const std::string v1 = layout(ids, data::kLlmcMagicU16, 1, 2);
  // Truncated: the header counts more than the file holds.
  const std::string cut = d.write("cut.bin", v1.substr(0, v1.size() - 3));
  expect_error([&] { data::MappedTokens::open(cut, 256); }, {"'" + cut + "'", "truncated", "40 tokens"});
  // Longer than the count says.
  const std::string longer = d.write("long.bin", v1 + "ab");
  expect_error([&] { data::MappedTokens::open(longer, 256); }, {"'" + longer + "'", "does not match the file's size"});
  // A header cut short.
  const std::string head = d.write("head.bin", v1.substr(0, 100));
  expect_error([&] { data::MappedTokens::open(head, 256); }, {"'" + head + "'", "shorter than llm.c's header"});
  // A wrong version of a known magic.
  std::string bad_version = v1;
  bad_version[4] = 7;
  const std::string ver = d.write("ver.bin", bad_version);
  expect_error([&] { data::MappedTokens::open(ver, 256); }, {"'" + ver + "'", "version 7, not 1", "raw-u16"});
  // A wrong magic where llm.c's layout is asked for; raw uint16 in auto.
  std::string bad_magic = v1;
  bad_magic[0] = 1;
  const std::string mag = d.write("magic.bin", bad_magic);
  expect_error([&] { data::MappedTokens::open(mag, 65536, data::TokenFileFormat::llmc); },
               {"'" + mag + "'", "not an llm.c token file", "20240520"});
  EXPECT_EQ(data::inspect_token_file(mag).format, data::TokenFileFormat::raw_u16);
  // An odd raw size.
  const std::string odd = d.write("odd.raw", std::string(41, '\1'));
  expect_error([&] { data::MappedTokens::open(odd, 65536); }, {"'" + odd + "'", "odd size"});
  // Empty, missing, a directory, no match.
  const std::string empty = d.write("empty.bin", "");
  expect_error([&] { data::MappedTokens::open(empty, 256); }, {"'" + empty + "'", "empty"});
  expect_error([&] { data::MappedTokens::open(d.file("none.bin"), 256); }, {"'" + d.file("none.bin") + "'"});
  expect_error([&] { data::MappedTokens::open(d.path.string(), 256); }, {"not a regular file"});
  expect_error([&] { data::MappedTokens::open(d.file("x_*.bin"), 256); }, {"no token file matches", "x_*.bin"});
  // An id outside the vocabulary: the file, its index and byte offset.
  ids[17] = 300;
  const std::string big = d.write("big.bin", layout(ids, data::kLlmcMagicU16, 1, 2));
  expect_error([&] { data::MappedTokens::open(big, 256); },
               {"'" + big + "'", "id 300 at token 17 (byte offset 1058)", "[0, 256)"});
  EXPECT_NO_THROW(data::MappedTokens::open(big, 301));
  // In training: the id against the model's vocabulary, and too few tokens.
  train::Options o = small_options();
  o.tokens_path = big;
  expect_error([&] { train::train(o); }, {"'" + big + "'", "id 300 at token 17"});
  o.tokens_path = d.write("short.bin", layout({1, 2, 3, 4, 5, 6, 7, 8}, data::kLlmcMagicU16, 1, 2));
  expect_error([&] { train::train(o); }, {"'" + o.tokens_path + "'", "8 tokens", "at least 9"});
  o.tokens_path = d.write("ok.bin", layout(std::vector<int32_t>(40, 1), 0, 0, 2));
  o.val_tokens_path = o.tokens_path.substr(0, o.tokens_path.size() - 6) + "short.bin";
  expect_error([&] { train::train(o); }, {"'" + o.val_tokens_path + "'", "8 tokens"});
  o.val_tokens_path.clear();
  o.text_path = d.write("t.txt", "hello\n");
  expect_error([&] { train::train(o); }, {"text", "tokens"});
}

// The file tokenize_file writes holds exactly the in-memory encoding of the
// whole text, whatever the chunk size: the char and byte tokenizers, GPT-2's
// byte-level BPE (chunks cut after newlines) and a SentencePiece model with a
// dummy prefix (encoded at once).
TEST(TokenFile, TokenizeEqualsEncodingTheWholeText) {
  TempDir d;
  std::string text = some_text(300);
  text += "tail without a newline  ";
  const std::string in = d.write("in.txt", text);
  std::vector<data::Tokenizer> toks = {data::Tokenizer::parse("char"), data::Tokenizer::parse("byte"),
                                       data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"))};
  if (data::have_sentencepiece())
    toks.push_back(data::Tokenizer::from_sentencepiece(slurp(golden_dir("llama-sp") + "/tokenizer.model")));
  for (const data::Tokenizer& tok : toks) {
    for (size_t chunk : {size_t{7}, size_t{100}, size_t{1} << 20}) {
      SCOPED_TRACE(tok.name() + " chunk " + std::to_string(chunk));
      const std::string out = d.file("out.bin");
      data::TokenizeOptions o;
      o.chunk_bytes = chunk;
      o.overwrite = true;
      o.allow_unknown = true;
      uint64_t last = 0;
      o.progress = [&](uint64_t done, uint64_t total) {
        EXPECT_EQ(total, text.size());
        last = done;
      };
      const data::TokenizeResult r = data::tokenize_file(in, out, tok, o);
      EXPECT_EQ(last, text.size());
      EXPECT_EQ(r.whole, tok.subword());   // llama-sp has a dummy prefix
      const std::vector<int32_t> want = tok.encode(text).to_vector();
      EXPECT_EQ(r.tokens, want.size());
      auto m = data::MappedTokens::open(out, tok.vocab());
      EXPECT_EQ(m->files()[0].format, data::TokenFileFormat::llmc);
      EXPECT_EQ(m->files()[0].version, 1);
      std::vector<int32_t> back(m->size());
      m->copy_to(0, back.size(), back.data());
      EXPECT_EQ(back, want);
    }
  }
  // Refuses to replace a file; leaves no temporary behind.
  const size_t before = d.entries();
  data::TokenizeOptions keep;
  expect_error([&] { data::tokenize_file(in, d.file("out.bin"), toks[1], keep); }, {"out.bin", "exists", "--overwrite"});
  EXPECT_EQ(d.entries(), before);
}

// However many windows a run reads, the pages mapped for them stay few: a
// kernel that maps a whole large folio for each window would otherwise map
// most of the file (RssFile of /proc/self/status).
TEST(TokenFile, MappedPagesStayFewWhateverTheRunsLength) {
  TempDir d;
  const std::string path = d.file("big.bin");
  {
    std::ofstream f(path, std::ios::binary);
    const std::string block(size_t{1} << 20, '\x05');   // ids 0x0505, under 65536
    for (int k = 0; k < 128; ++k) f << block;
  }
  auto rss_file_kb = [] {
    std::ifstream f("/proc/self/status");
    for (std::string l; std::getline(f, l);)
      if (l.rfind("RssFile:", 0) == 0) return std::stoll(l.substr(8));
    return -1LL;
  };
  const long long before = rss_file_kb();
  if (before < 0) GTEST_SKIP() << "no RssFile in /proc/self/status";
  auto m = data::MappedTokens::open(path, 65536);
  uint64_t s = 3;
  int32_t window[17];
  long long most = 0;
  for (int k = 0; k < 2000; ++k) {
    m->copy_to(data::splitmix64(s) % (m->size() - 17), 17, window);
    ASSERT_EQ(window[16], 0x0505);
    if (k % 50 == 0) most = std::max(most, rss_file_kb() - before);
  }
  // 16 windows between releases, a folio of at most 2 MiB each: 32 MiB, of a
  // 128 MiB file that 2000 windows would otherwise map nearly all of.
  EXPECT_LT(most, 40 * 1024) << "KiB of the file mapped";
}

// A vocabulary beyond 65536 gets llm.c's uint32 layout (version 7).
TEST(TokenFile, WriterPicksTheWidthByVocabulary) {
  TempDir d;
  {
    data::TokenFileWriter w(d.file("w.bin"), 100000);
    const int32_t ids[] = {0, 99999, 65536, 5};
    w.write(ids, 4);
    expect_error([&] { const int32_t bad = 100000; w.write(&bad, 1); }, {"w.bin", "id 100000 at token 4"});
    w.commit();
  }
  const data::TokenFileInfo info = data::inspect_token_file(d.file("w.bin"));
  EXPECT_EQ(info.version, 7);
  EXPECT_EQ(info.width, 4u);
  EXPECT_EQ(info.count, 4u);
  auto m = data::MappedTokens::open(d.file("w.bin"), 100000);
  std::vector<int32_t> back(4);
  m->copy_to(0, 4, back.data());
  EXPECT_EQ(back, (std::vector<int32_t>{0, 99999, 65536, 5}));
  {
    data::TokenFileWriter w(d.file("gone.bin"), 256);   // never committed: nothing left
    const int32_t ids[] = {1, 2};
    w.write(ids, 2);
  }
  EXPECT_FALSE(fs::exists(d.file("gone.bin")));
  EXPECT_EQ(d.entries(), 1u);
}

// ---- the command line ------------------------------------------------------------

namespace {

Outcome run(const std::vector<std::string>& args) {
  TempDir io;
  std::vector<std::string> all = {capstep_binary()};
  all.insert(all.end(), args.begin(), args.end());
  const pid_t pid = spawn_process(all, io.file("out"), io.file("err"));
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(io.file("out"));
  r.err = slurp(io.file("err"));
  return r;
}

#define NEED_BINARY()                                                                                  \
  do {                                                                                                 \
    if (capstep_binary().empty() || !fs::exists(capstep_binary()))                                     \
      GTEST_SKIP() << "the capstep binary (target capstep_cli) is not built (set CAPSTEP_BINARY_DIR)"; \
  } while (0)

}  // namespace

TEST(TokenFileCli, TokenizeThenTrainOnTheTokens) {
  NEED_BINARY();
  TempDir d;
  const std::string text = d.write("t.txt", some_text(60));
  const std::vector<std::string> model = {"--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "32",
                                          "--batch", "2", "--seq", "8", "--steps", "3", "--no-progress"};
  Outcome t = run({"tokenize", "--text", text, "--out", d.file("t.bin"), "--tokenizer", "byte"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_THAT(t.out, ::testing::HasSubstr("uint16 ids"));
  EXPECT_THAT(t.err, ::testing::HasSubstr("tokenize:"));
  t = run({"tokenize", "--text", text, "--out", d.file("t.bin"), "--tokenizer", "byte"});
  EXPECT_EQ(t.code, 2);
  EXPECT_THAT(t.err, ::testing::HasSubstr("exists; give --overwrite"));
  EXPECT_EQ(run({"tokenize", "--text", text, "--out", d.file("t.bin"), "--tokenizer", "byte", "--overwrite"}).code, 0);

  std::vector<std::string> a = {"train", "--tokenizer", "byte", "--tokens", d.file("t.bin"), "--log", d.file("a.csv")};
  a.insert(a.end(), model.begin(), model.end());
  std::vector<std::string> b = {"train", "--tokenizer", "byte", "--text", text, "--log", d.file("b.csv")};
  b.insert(b.end(), model.begin(), model.end());
  const Outcome ra = run(a), rb = run(b);
  ASSERT_EQ(ra.code, 0) << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.err;
  EXPECT_THAT(ra.out, ::testing::HasSubstr("tokens: " + d.file("t.bin")));
  // The same losses (the CSV's loss column; the times differ).
  auto losses = [](const std::string& csv) {
    std::string out;
    for (const std::string& l : lines_of(csv)) out += l.substr(0, l.find(',', l.find(',') + 1)) + "\n";
    return out;
  };
  EXPECT_EQ(losses(slurp(d.file("a.csv"))), losses(slurp(d.file("b.csv"))));
  // --log and --plot onto an existing file: refused, unless --overwrite.
  Outcome again = run(a);
  EXPECT_EQ(again.code, 2);
  EXPECT_THAT(again.err, ::testing::HasSubstr("--log: '" + d.file("a.csv") + "' exists; use --overwrite"));
  const std::string old_plot = d.write("p.svg", "x");
  std::vector<std::string> p = {"train", "--steps", "1", "--plot", old_plot};
  again = run(p);
  EXPECT_EQ(again.code, 2);
  EXPECT_THAT(again.err, ::testing::HasSubstr("--plot: '" + old_plot + "' exists; use --overwrite"));
  a.push_back("--overwrite");
  again = run(a);
  EXPECT_EQ(again.code, 0) << again.err;
  // --val-tokens: validation on those ids, no share held out (the CLI's
  // default --val-fraction 0.1 yields to it); with --val-fraction: refused.
  std::vector<std::string> v = {"train", "--tokenizer", "byte", "--tokens", d.file("t.bin"), "--val-tokens",
                                d.file("t.bin")};
  v.insert(v.end(), model.begin(), model.end());
  const Outcome rv = run(v);
  ASSERT_EQ(rv.code, 0) << rv.err;
  EXPECT_THAT(rv.out, ::testing::HasSubstr("validation loss"));
  v.insert(v.end(), {"--val-fraction", "0.2"});
  EXPECT_EQ(run(v).code, 2);
  // --tokens with --text; a byte id over the char tokenizer's 64.
  std::vector<std::string> both = {"train", "--tokens", d.file("t.bin"), "--text", text};
  EXPECT_EQ(run(both).code, 2);
  const Outcome wide = run({"train", "--tokens", d.file("t.bin"), "--steps", "1"});
  EXPECT_EQ(wide.code, 1);
  EXPECT_THAT(wide.err, ::testing::HasSubstr("'" + d.file("t.bin") + "': id"));
  EXPECT_THAT(wide.err, ::testing::HasSubstr("[0, 64)"));
}

// The tokenizer of a Hugging Face directory or of a checkpoint
// (--tokenizer-from); a run on token files resumed without --tokens takes the
// checkpoint's files, and sample decodes with its tokenizer.
TEST(TokenFileCli, TokenizerFromAndResume) {
  NEED_BINARY();
  TempDir d;
  const std::string text = some_text(80);
  const std::string in = d.write("t.txt", text);
  Outcome t = run({"tokenize", "--text", in, "--out", d.file("g.bin"), "--tokenizer-from", golden_dir("gpt2-bpe")});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_THAT(t.out, ::testing::HasSubstr("bytelevel-bpe:400"));
  const data::Tokenizer gpt2 = data::Tokenizer::from_bytelevel(slurp(golden_dir("gpt2-bpe") + "/tokenizer.json"));
  auto g = data::MappedTokens::open(d.file("g.bin"), gpt2.vocab());
  std::vector<int32_t> back(g->size());
  g->copy_to(0, back.size(), back.data());
  EXPECT_EQ(back, gpt2.encode(text).to_vector());

  t = run({"tokenize", "--text", in, "--out", d.file("b.bin"), "--tokenizer", "byte"});
  ASSERT_EQ(t.code, 0) << t.err;
  const std::vector<std::string> model = {"--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "32",
                                          "--batch", "2", "--seq", "8", "--no-progress"};
  std::vector<std::string> a = {"train", "--tokenizer", "byte", "--tokens", d.file("b.bin"), "--steps", "2", "--save",
                                d.file("c.st")};
  a.insert(a.end(), model.begin(), model.end());
  ASSERT_EQ(run(a).code, 0);
  // The checkpoint's tokenizer (byte) encodes as --tokenizer byte does.
  t = run({"tokenize", "--text", in, "--out", d.file("c.bin"), "--tokenizer-from", d.file("c.st")});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(slurp(d.file("c.bin")), slurp(d.file("b.bin")));
  const Outcome r = run({"train", "--resume", d.file("c.st"), "--steps", "3", "--no-progress"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("note: the token files '" + d.file("b.bin") + "' come from the checkpoint"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("trained steps 3..3"));
  const Outcome s = run({"sample", "--checkpoint", d.file("c.st"), "--tokens", "5"});
  EXPECT_EQ(s.code, 0) << s.err;
}
