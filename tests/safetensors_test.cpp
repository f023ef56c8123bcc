// safetensors: bit-exact round trips, the file layout read by hand, every
// corruption with its message, and atomic replacement.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include "capstep/data.h"
#include "capstep/safetensors.h"

#include "test_util.h"

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;

namespace {

void spit(const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// A file image built by hand: the 8-byte length, this header, these data bytes.
std::string image(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); });
}

SafetensorsFile parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::vector<NamedArray> every_dtype() {
  const float fnan = std::bit_cast<float>(0x7fc01234u);   // NaN with a payload
  const double dnan = std::bit_cast<double>(0x7ff800000000abcdULL);
  return {
      {"f32", Array::f32({2, 3}, {1.5f, -0.0f, fnan, std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::denorm_min(), 3.0e38f})},
      {"f64", Array::f64({3}, {dnan, -1e-310, 0.1})},
      {"i32", Array::i32({2, 2}, {std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()})},
      {"bool", Array::from_doubles(Type{DType::i1, {5}}, {1, 0, 0, 1, 1})},
      {"scalar", Array::scalar(2.5, DType::f32)},
      {"empty", Array(Type{DType::f32, {0, 3}})},
  };
}

}  // namespace

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
  TempDir d;
  const std::vector<NamedArray> in = every_dtype();
  const Metadata meta{{"note", "hello \"world\" \xC3\xA9"}, {"step", "12"}};
  write_safetensors(d.file("a.safetensors"), in, meta);
  const SafetensorsFile out = read_safetensors(d.file("a.safetensors"));
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].name, in[i].name);   // written order is kept
    EXPECT_EQ(out.tensors[i].array.type(), in[i].array.type()) << in[i].name;
    EXPECT_TRUE(out.tensors[i].array.bit_equal(in[i].array)) << in[i].name;
    if (in[i].array.bytes() > 0) {   // an empty Array may hold no buffer at all
      EXPECT_EQ(std::memcmp(out.tensors[i].array.raw(), in[i].array.raw(), in[i].array.bytes()), 0) << in[i].name;
    }
  }
  EXPECT_EQ(out.metadata, meta);
  ASSERT_NE(out.find("i32"), nullptr);
  EXPECT_EQ(out.find("i32")->data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out.find("nope"), nullptr);
  EXPECT_EQ(d.entries(), 1u);   // no temporary file left behind
}

TEST(Safetensors, FileLayoutReadByHand) {
  TempDir d;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  write_safetensors(d.file("b.safetensors"), {{"w", Array::f32({2, 3}, w)}, {"ids", Array::i32({2}, {7, -8})}},
                    {{"k", "v"}});
  const std::string bytes = slurp(d.file("b.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<size_t>(i)])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);                    // padded so data is 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 8);  // header + 6 floats + 2 ints
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"], (nlohmann::json{{"k", "v"}}));
  EXPECT_EQ(h["w"]["dtype"], "F32");
  EXPECT_EQ(h["w"]["shape"], (nlohmann::json{2, 3}));
  EXPECT_EQ(h["w"]["data_offsets"], (nlohmann::json{0, 24}));
  EXPECT_EQ(h["ids"]["dtype"], "I32");
  EXPECT_EQ(h["ids"]["shape"], (nlohmann::json{2}));
  EXPECT_EQ(h["ids"]["data_offsets"], (nlohmann::json{24, 32}));
  EXPECT_EQ(h.size(), 3u);
  // Little-endian data exactly where the offsets say.
  float got[6];
  std::memcpy(got, bytes.data() + 8 + n, 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], w[static_cast<size_t>(i)]);
  const unsigned char* ids = reinterpret_cast<const unsigned char*>(bytes.data() + 8 + n + 24);
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[4], 0xF8);   // -8 little-endian
  EXPECT_EQ(ids[7], 0xFF);
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  // As another writer might produce it: no padding, keys in any order.
  std::string data(12, '\0');
  const float v[3] = {0.5f, -2.0f, 8.0f};
  std::memcpy(data.data(), v, 12);
  const SafetensorsFile f = parse(image(R"({"x":{"shape":[3],"data_offsets":[0,12],"dtype":"F32"}})", data));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].array.type().str(), "f32[3]");
  EXPECT_EQ(f.tensors[0].array.data<float>()[1], -2.0f);
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_TRUE(parse(image("{}")).tensors.empty());
}

TEST(Safetensors, EachCorruptionHasItsMessage) {
  const std::string d24(24, '\0');
  const std::string good = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  ASSERT_NO_THROW(parse(image(good, d24)));

  struct Case {
    std::string bytes, message;
  };
  std::string huge(8, '\0');
  huge[5] = 0x10;   // 2^44
  std::string too_long = image(good, d24);
  too_long[0] = static_cast<char>(good.size() + 30);
  const std::vector<Case> cases = {
      {"abc", "too short for the 8-byte header length"},
      {huge + "{}", "exceeds the limit"},
      {too_long, "runs past the end of the file"},
      {image("[1,2]"), "does not start with a JSON object"},
      {image(R"({"a":{"dtype":"F32",)"), "not valid JSON"},
      {image(R"({"a":1})"), "expected an object"},
      {image(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "1234"), "dtype 'F16' is not supported"},
      {image(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,4]}})", "1234"), "dtype must be a string"},
      {image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, '\0')),
       "need 24 bytes, but data_offsets [0, 20] hold 20"},
      {image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", std::string(20, '\0')),
       "run past the end of the data (20 bytes)"},
      {image(R"({"a":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", d24), "non-negative integer"},
      {image(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,24]}})", d24), "non-negative integer"},
      {image(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,24]}})", d24), "shape must be an array"},
      {image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,24]}})", d24),
       "too large to address"},
      // Empty, but Type::numel would overflow int64 multiplying 2^62 by 4.
      {image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})"), "too large to address"},
      {image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d24), "end before they begin"},
      {image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d24), "must be [begin, end]"},
      {image(R"({"a":{"dtype":"F32","shape":[2]}})", d24), "missing field 'data_offsets'"},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "1234"), "unknown field 'x'"},
      {image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d24),
       "tensor 'b' data [8, 24] overlaps tensor 'a' [0, 16]"},
      {image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", d24),
       "data bytes [8, 16] belong to no tensor"},
      {image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d24), "tensors cover 8 (trailing bytes"},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678"),
       "names 'a' twice"},
      {image(R"({"__metadata__":{"k":3}})"), "__metadata__ value of 'k' must be a string"},
      {image(R"({"__metadata__":[1]})"), "__metadata__ must be an object"},
      {image(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3)),
       "byte value 2 at element 2"},
      {image(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "1234"), "empty name"},
      {image("{\"a\xff\":{}}"), "not valid JSON"},
  };
  for (const Case& c : cases) {
    const std::string m = parse_error(c.bytes);
    EXPECT_NE(m.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << m;
  }
}

// Deeply nested JSON (found by hand, beyond the fuzzer's reach): the reader
// once dump()ed such a value into its message and overflowed the stack.
TEST(Safetensors, DeepNestingAndHugeNamesGiveShortMessages) {
  // 200,000 levels: enough to overflow an 8 MiB stack through any recursion.
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  for (const std::string& h : {R"({"__metadata__":{"k":)" + deep + "}}",
                               R"({"a":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})",
                               R"({"a":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,4]}})",
                               R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
                               R"({"a":{"dtype":"F32","shape":[1],"data_offsets":)" + deep + "}}",
                               "{\"a\":" + std::string(200'000, '[') + "x"}) {
    const std::string m = parse_error(image(h, "1234"));
    EXPECT_LT(m.size(), 400u) << m.substr(0, 400);
    EXPECT_FALSE(m.empty());
  }
  const std::string name(1'000'000, 'n');
  const std::string m = parse_error(image("{\"" + name + R"(":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", "12"));
  EXPECT_NE(m.find("nnn...': dtype 'F16' is not supported"), std::string::npos) << m.substr(0, 400);
  EXPECT_LT(m.size(), 400u);
}

TEST(Safetensors, ReadErrorsNameThePath) {
  TempDir d;
  std::string m = error_of([&] { read_safetensors(d.file("missing.safetensors")); });
  EXPECT_NE(m.find("missing.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;

  write_safetensors(d.file("t.safetensors"), every_dtype());
  std::string bytes = slurp(d.file("t.safetensors"));
  spit(d.file("t.safetensors"), bytes.substr(0, bytes.size() - 3));
  m = error_of([&] { read_safetensors(d.file("t.safetensors")); });
  EXPECT_NE(m.find("safetensors file '" + d.file("t.safetensors") + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;

  m = error_of([&] { read_safetensors(d.path.string()); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;

  // A FIFO without a writer is refused at once: opening it must not wait.
  const std::string fifo = d.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  m = error_of([&] { read_safetensors(fifo); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
}

TEST(Safetensors, CheckWritableFailsWhereASaveWouldAndLeavesNothing) {
  TempDir d;
  const std::string p = d.file("x.safetensors");
  EXPECT_NO_THROW(check_writable(p));
  EXPECT_EQ(d.entries(), 0u) << "the probe's temporary file was left behind";
  std::string m = error_of([&] { check_writable(d.file("no/dir/x.safetensors")); });
  EXPECT_NE(m.find("cannot save '" + d.file("no/dir/x.safetensors") + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
  EXPECT_NE(error_of([&] { check_writable(d.path.string()); }).find("is a directory"), std::string::npos);
  spit(d.file("plain"), "x");   // a file where a directory should be
  EXPECT_NE(error_of([&] { check_writable(d.file("plain/x.safetensors")); }).find("Not a directory"), std::string::npos);
  if (geteuid() != 0) {   // root writes into a read-only directory anyway
    fs::create_directory(d.path / "ro");
    fs::permissions(d.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(error_of([&] { check_writable(d.file("ro/x.safetensors")); }).find("Permission denied"), std::string::npos);
    fs::permissions(d.path / "ro", fs::perms::owner_all);
  }
}

TEST(Safetensors, EveryTruncationAndByteFlipIsAnErrorOrAFile) {
  const std::string good = serialize_safetensors(every_dtype(), {{"a", "b"}});
  // Every proper prefix is rejected: no prefix can cover the data exactly.
  for (size_t len = 0; len < good.size(); ++len) EXPECT_FALSE(parse_error(good.substr(0, len)).empty()) << len;
  // Random corruption: parses or throws capstep::Error, never anything else.
  uint64_t s = 99;
  int rejected = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(data::splitmix64(s) % 4);
    for (int f = 0; f < flips; ++f)
      bad[data::splitmix64(s) % bad.size()] = static_cast<char>(data::splitmix64(s) & 0xff);
    try {
      parse(bad);
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 500);
}

TEST(Safetensors, WriterRejectsBadNames) {
  TempDir d;
  const Array a = Array::f32({1}, {1});
  EXPECT_NE(error_of([&] { write_safetensors(d.file("x"), {{"a", a}, {"a", a}}); }).find("'a' is used twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(d.file("x"), {{"", a}}); }).find("empty name"), std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(d.file("x"), {{"__metadata__", a}}); }).find("reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(d.file("x"), {{"bad\xff", a}}); }).find("cannot write the header"),
            std::string::npos);
  EXPECT_EQ(d.entries(), 0u);
}

TEST(Safetensors, FailedSaveLeavesThePreviousFileIntact) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  write_safetensors(p, {{"v", Array::f32({3}, {1, 2, 3})}}, {{"gen", "old"}});
  const std::string before = slurp(p);
  for (const char* stage : {"open", "write-half", "fsync", "rename"}) {
    set_atomic_write_hook_for_testing([&](const char* s) {
      if (std::string(s) == stage) throw Error(std::string("injected failure at ") + s);
    });
    const std::string m = error_of([&] { write_safetensors(p, {{"v", Array::f32({4}, {9, 9, 9, 9})}}, {{"gen", "new"}}); });
    set_atomic_write_hook_for_testing({});
    EXPECT_NE(m.find(stage), std::string::npos) << m;
    EXPECT_EQ(slurp(p), before) << stage;
    EXPECT_EQ(read_safetensors(p).metadata.at("gen"), "old") << stage;
    EXPECT_EQ(d.entries(), 1u) << "temporary file left after failing at " << stage;
  }
  // Once renamed, the new file is in place even if the directory fsync fails.
  set_atomic_write_hook_for_testing([](const char* s) {
    if (std::string(s) == "fsync-dir") throw Error("injected");
  });
  EXPECT_THROW(write_safetensors(p, {{"v", Array::f32({1}, {5})}}, {{"gen", "new"}}), Error);
  set_atomic_write_hook_for_testing({});
  EXPECT_EQ(read_safetensors(p).metadata.at("gen"), "new");
  EXPECT_EQ(d.entries(), 1u);
}

TEST(Safetensors, SaveIntoAMissingDirectoryIsAClearError) {
  TempDir d;
  const std::string p = d.file("no/such/dir/x.safetensors");
  const std::string m = error_of([&] { write_safetensors(p, {{"v", Array::f32({1}, {1})}}); });
  EXPECT_NE(m.find("cannot save '" + p + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
  EXPECT_NE(error_of([&] { write_safetensors(d.path.string(), {}); }).find("is a directory"), std::string::npos);
}

// Optional outside oracle: Hugging Face's own safetensors package reads our
// file and writes it back with its writer, which we must read bit-exactly.
// Runs when CAPSTEP_SAFETENSORS_PYTHON names a python with safetensors and numpy.
TEST(Safetensors, HuggingFaceReaderAgrees) {
  const char* python = std::getenv("CAPSTEP_SAFETENSORS_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "set CAPSTEP_SAFETENSORS_PYTHON to a python with safetensors and numpy";
  TempDir d;
  const std::vector<NamedArray> in = every_dtype();
  const Metadata meta{{"capstep.step", "7"}, {"note", "x"}};
  write_safetensors(d.file("ours.safetensors"), in, meta);
  const std::string script = d.file("roundtrip.py");
  std::ofstream(script) << "import sys\n"
                           "from safetensors import safe_open\n"
                           "from safetensors.numpy import load_file, save_file\n"
                           "t = load_file(sys.argv[1])\n"
                           "with safe_open(sys.argv[1], framework='np') as f: meta = f.metadata()\n"
                           "assert sorted(t) == sorted(['f32','f64','i32','bool','scalar','empty']), sorted(t)\n"
                           "assert t['f32'].shape == (2, 3) and str(t['f32'].dtype) == 'float32'\n"
                           "assert t['i32'][0, 0] == -2**31 and str(t['bool'].dtype) == 'bool'\n"
                           "save_file(t, sys.argv[2], metadata=meta)\n";
  const std::string cmd = std::string(python) + " " + script + " " + d.file("ours.safetensors") + " " +
                          d.file("theirs.safetensors");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const SafetensorsFile back = read_safetensors(d.file("theirs.safetensors"));
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), in.size());
  for (const NamedArray& t : in) {
    const Array* got = back.find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->type(), t.array.type()) << t.name;
    EXPECT_TRUE(got->bit_equal(t.array)) << t.name;
  }
}
