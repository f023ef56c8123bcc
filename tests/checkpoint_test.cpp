// Checkpoints: round trip, the safetensors layout, mismatch messages, refusing
// to save a diverged run, and surviving a failure or SIGKILL mid-save.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <sys/wait.h>
#include <unistd.h>

#include "capstep/checkpoint.h"
#include "capstep/data.h"

#include "test_util.h"

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;

namespace {

Array filled(Shape s, uint64_t seed) {
  Array a(Type{DType::f32, std::move(s)});
  float* p = a.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i)
    p[i] = static_cast<float>(static_cast<int64_t>(data::splitmix64(seed) % 2001) - 1000) / 997.0f;
  return a;
}

// A small model's state: every value distinct, so a swapped tensor shows.
Checkpoint sample(uint64_t seed = 1, int64_t width = 3) {
  Checkpoint c;
  const std::vector<std::pair<std::string, Shape>> params = {
      {"embed", {5, width}}, {"blocks.0.attn.wq", {width, width}}, {"norm.gain", {width}}};
  for (const auto& [name, shape] : params) {
    c.params.push_back({name, filled(shape, seed++)});
    c.adam_m.push_back({name, filled(shape, seed++)});
    c.adam_v.push_back({name, filled(shape, seed++)});
  }
  c.step = 123;
  c.data_position = (1ULL << 40) + 5;
  c.model_config = R"({"d_model":3,"layers":1})";
  c.extra = {{"seed", "42"}, {"lr", "0.01"}};
  return c;
}

std::vector<ParamSpec> specs(const Checkpoint& c) {
  std::vector<ParamSpec> out;
  for (const NamedArray& p : c.params) out.push_back({p.name, p.array.type()});
  return out;
}

void expect_same(const Checkpoint& a, const Checkpoint& b) {
  const std::vector<NamedArray>* ga[3] = {&a.params, &a.adam_m, &a.adam_v};
  const std::vector<NamedArray>* gb[3] = {&b.params, &b.adam_m, &b.adam_v};
  for (int g = 0; g < 3; ++g) {
    ASSERT_EQ(ga[g]->size(), gb[g]->size());
    for (size_t i = 0; i < ga[g]->size(); ++i) {
      EXPECT_EQ((*ga[g])[i].name, (*gb[g])[i].name);
      EXPECT_TRUE((*ga[g])[i].array.bit_equal((*gb[g])[i].array)) << g << " " << (*ga[g])[i].name;
    }
  }
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.data_position, b.data_position);
  EXPECT_EQ(a.model_config, b.model_config);
  EXPECT_EQ(a.extra, b.extra);
}

}  // namespace

TEST(Checkpoint, RoundTrip) {
  TempDir d;
  const Checkpoint c = sample();
  save_checkpoint(d.file("c.safetensors"), c);
  const Checkpoint back = load_checkpoint(d.file("c.safetensors"));
  expect_same(c, back);
  EXPECT_EQ(back.version, CAPSTEP_VERSION);
  EXPECT_EQ(back.data_position, 1099511627781ULL);
  ASSERT_NE(back.param("norm.gain"), nullptr);
  EXPECT_TRUE(back.param("norm.gain")->bit_equal(c.params[2].array));
  expect_same(c, load_checkpoint(d.file("c.safetensors"), specs(c)));
}

TEST(Checkpoint, IsAPlainSafetensorsFile) {
  TempDir d;
  const Checkpoint c = sample();
  save_checkpoint(d.file("c.safetensors"), c);
  const SafetensorsFile f = read_safetensors(d.file("c.safetensors"));
  ASSERT_EQ(f.tensors.size(), 9u);
  EXPECT_EQ(f.tensors[0].name, "param/embed");
  ASSERT_NE(f.find("adam_m/blocks.0.attn.wq"), nullptr);
  EXPECT_TRUE(f.find("adam_m/blocks.0.attn.wq")->bit_equal(c.adam_m[1].array));
  EXPECT_TRUE(f.find("adam_v/norm.gain")->bit_equal(c.adam_v[2].array));
  EXPECT_EQ(f.metadata.at("capstep.step"), "123");
  EXPECT_EQ(f.metadata.at("capstep.data_position"), "1099511627781");
  EXPECT_EQ(f.metadata.at("capstep.model_config"), c.model_config);
  EXPECT_EQ(f.metadata.at("capstep.version"), CAPSTEP_VERSION);
  EXPECT_EQ(f.metadata.at("capstep.format"), "checkpoint-1");
  EXPECT_EQ(f.metadata.at("seed"), "42");
  // FNV-1a 64 of the data section, computed here from the file's own bytes.
  const std::string bytes = slurp(d.file("c.safetensors"));
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 8 + header; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  EXPECT_EQ(f.metadata.at("capstep.data_fnv1a64"), hex);
  EXPECT_EQ(f.metadata.size(), 8u);
}

TEST(Checkpoint, ExpectedOrderIsKept) {
  TempDir d;
  const Checkpoint c = sample();
  save_checkpoint(d.file("c.safetensors"), c);
  std::vector<ParamSpec> want = specs(c);
  std::swap(want[0], want[2]);
  const Checkpoint back = load_checkpoint(d.file("c.safetensors"), want);
  EXPECT_EQ(back.params[0].name, "norm.gain");
  EXPECT_EQ(back.adam_v[0].name, "norm.gain");
  EXPECT_TRUE(back.adam_v[0].array.bit_equal(c.adam_v[2].array));
  EXPECT_TRUE(back.params[2].array.bit_equal(c.params[0].array));
}

TEST(Checkpoint, MismatchWithTheModelNamesTheTensorAndBothTypes) {
  TempDir d;
  const Checkpoint c = sample();
  const std::string p = d.file("c.safetensors");
  save_checkpoint(p, c);

  std::vector<ParamSpec> want = specs(c);
  want[1].type.shape = {3, 4};
  std::string m = error_of([&] { load_checkpoint(p, want); });
  EXPECT_NE(m.find("tensor 'param/blocks.0.attn.wq' is f32[3,3] but the model expects f32[3,4]"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;

  want = specs(c);
  want[2].type.dtype = DType::f64;
  m = error_of([&] { load_checkpoint(p, want); });
  EXPECT_NE(m.find("'param/norm.gain' is f32[3] but the model expects f64[3]"), std::string::npos) << m;

  want = specs(c);
  want.push_back({"head", Type{DType::f32, {3, 64}}});
  m = error_of([&] { load_checkpoint(p, want); });
  EXPECT_NE(m.find("lacks tensor 'param/head' (f32[3,64])"), std::string::npos) << m;

  want = specs(c);
  want.erase(want.begin());
  m = error_of([&] { load_checkpoint(p, want); });
  EXPECT_NE(m.find("has tensor 'param/embed' (f32[5,3]) that the model does not have"), std::string::npos) << m;
}

TEST(Checkpoint, BrokenMomentsAndMetadataAreErrors) {
  TempDir d;
  const std::string p = d.file("x.safetensors");
  const Checkpoint c = sample();
  auto tensors = [&](bool drop_v, bool extra_m) {
    std::vector<NamedArray> t;
    for (size_t i = 0; i < c.params.size(); ++i) {
      t.push_back({"param/" + c.params[i].name, c.params[i].array});
      t.push_back({"adam_m/" + c.params[i].name, c.adam_m[i].array});
      if (!(drop_v && i == 1)) t.push_back({"adam_v/" + c.params[i].name, c.adam_v[i].array});
    }
    if (extra_m) t.push_back({"adam_m/ghost", c.adam_m[0].array});
    return t;
  };
  Metadata meta{{"capstep.format", "checkpoint-1"}, {"capstep.step", "7"}, {"capstep.data_position", "9"},
                {"capstep.model_config", "{}"}};

  write_safetensors(p, tensors(true, false), meta);
  std::string m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("'blocks.0.attn.wq' has no tensor 'adam_v/blocks.0.attn.wq'"), std::string::npos) << m;

  write_safetensors(p, tensors(false, true), meta);
  m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("'adam_m/ghost' but no parameter 'param/ghost'"), std::string::npos) << m;

  write_safetensors(p, {{"weights/x", c.params[0].array}}, meta);
  EXPECT_NE(error_of([&] { load_checkpoint(p); }).find("not param/, adam_m/ or adam_v/"), std::string::npos);

  Metadata bad = meta;
  bad["capstep.step"] = "12x";
  write_safetensors(p, tensors(false, false), bad);
  m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("'capstep.step' is '12x', not a non-negative integer"), std::string::npos) << m;
  bad = meta;
  bad.erase("capstep.data_position");
  write_safetensors(p, tensors(false, false), bad);
  EXPECT_NE(error_of([&] { load_checkpoint(p); }).find("lacks 'capstep.data_position'"), std::string::npos);

  write_safetensors(p, tensors(false, false), {});
  EXPECT_NE(error_of([&] { load_checkpoint(p); }).find("not a capstep checkpoint"), std::string::npos);

  // A moment whose shape differs from its parameter.
  auto t = tensors(false, false);
  t[1].array = Array(Type{DType::f32, {2}});
  write_safetensors(p, t, meta);
  m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("'adam_m/embed' is f32[2] but 'param/embed' is f32[5,3]"), std::string::npos) << m;
}

TEST(Checkpoint, TruncatedOrCorruptedFileIsAnError) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  save_checkpoint(p, sample());
  const std::string good = slurp(p);
  for (size_t len : {size_t{0}, size_t{5}, size_t{100}, good.size() / 2, good.size() - 1}) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << good.substr(0, len);
    const std::string m = error_of([&] { load_checkpoint(p); });
    EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  std::string bad = good;
  bad[good.find(':', 8)] = '#';   // inside the JSON header
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bad;
  EXPECT_NE(error_of([&] { load_checkpoint(p); }).find("not valid JSON"), std::string::npos);

  // One flipped bit in a weight still parses as a plausible float: the
  // checksum is what catches it.
  bad = good;
  bad[bad.size() - 10] ^= 0x01;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bad;
  std::string m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("checkpoint '" + p + "' is corrupted: its tensor data hashes to"), std::string::npos) << m;

  // Without a checksum (another writer), a NaN still shows: save never
  // writes one, so it can only be corruption.
  Checkpoint c = sample();
  std::vector<NamedArray> tensors;
  for (const NamedArray& t : c.params) tensors.push_back({"param/" + t.name, t.array});
  for (const NamedArray& t : c.adam_m) tensors.push_back({"adam_m/" + t.name, t.array});
  for (const NamedArray& t : c.adam_v) tensors.push_back({"adam_v/" + t.name, t.array});
  tensors[4].array.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  write_safetensors(p, tensors,
                    {{"capstep.format", "checkpoint-1"}, {"capstep.step", "1"}, {"capstep.data_position", "1"},
                     {"capstep.model_config", "{}"}});
  m = error_of([&] { load_checkpoint(p); });
  EXPECT_NE(m.find("is corrupted: tensor 'adam_m/blocks.0.attn.wq' element 2 is nan"), std::string::npos) << m;
}

TEST(Checkpoint, RefusesToSaveADivergedRun) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  const Checkpoint good = sample();
  save_checkpoint(p, good);
  const std::string before = slurp(p);
  Checkpoint bad = sample(50);
  bad.params[1].array.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  std::string m = error_of([&] { save_checkpoint(p, bad); });
  EXPECT_NE(m.find("'param/blocks.0.attn.wq' element 4 is nan"), std::string::npos) << m;
  bad = sample(50);
  bad.adam_v[2].array.data<float>()[0] = std::numeric_limits<float>::infinity();
  m = error_of([&] { save_checkpoint(p, bad); });
  EXPECT_NE(m.find("'adam_v/norm.gain' element 0 is inf"), std::string::npos) << m;
  bad = sample(50);
  bad.adam_m.pop_back();
  m = error_of([&] { save_checkpoint(p, bad); });
  EXPECT_NE(m.find("parameter 'norm.gain' has no tensor 'adam_m/norm.gain'"), std::string::npos) << m;
  bad = sample(50);
  bad.adam_v.push_back(bad.adam_v[0]);
  m = error_of([&] { save_checkpoint(p, bad); });
  EXPECT_NE(m.find("3 parameters but 4 adam_v/ moments"), std::string::npos) << m;
  bad = sample(50);
  bad.extra["capstep.step"] = "1";
  EXPECT_NE(error_of([&] { save_checkpoint(p, bad); }).find("reserved prefix"), std::string::npos);
  bad = sample(50);
  bad.model_config = "{oops";
  EXPECT_NE(error_of([&] { save_checkpoint(p, bad); }).find("model_config is not valid JSON"), std::string::npos);
  EXPECT_EQ(slurp(p), before);
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  const Checkpoint a = sample(1);
  save_checkpoint(p, a);
  Checkpoint b = sample(100, 4);
  b.step = 124;
  for (const char* stage : {"open", "write-half", "fsync", "rename"}) {
    set_atomic_write_hook_for_testing([&](const char* s) {
      if (std::string(s) == stage) throw Error("disk full (injected)");
    });
    EXPECT_THROW(save_checkpoint(p, b), Error);
    set_atomic_write_hook_for_testing({});
    expect_same(a, load_checkpoint(p, specs(a)));
  }
  save_checkpoint(p, b);
  expect_same(b, load_checkpoint(p, specs(b)));
}

// A process killed with SIGKILL half-way through writing leaves the previous
// checkpoint loadable; one killed at a random instant of a save loop leaves
// either the previous or the new one, whole.
TEST(Checkpoint, SigkillDuringSaveLeavesALoadableCheckpoint) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  const Checkpoint a = sample(1, 64);
  Checkpoint b = sample(1000, 64);
  b.step = 124;
  save_checkpoint(p, a);

  // A child killed half-way through writing b.
  const auto kill_mid_save = [&](const Checkpoint& next) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      set_atomic_write_hook_for_testing([](const char* s) {
        if (std::string(s) == "write-half") raise(SIGKILL);
      });
      try {
        save_checkpoint(p, next);
      } catch (...) {
      }
      _exit(0);   // not reached if the kill happened
    }
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  };
  int status = 0;
  kill_mid_save(b);
  expect_same(a, load_checkpoint(p, specs(a)));

  // Random instants: a child saving a and b in turn, killed after 1..40 ms.
  uint64_t rng = 5;
  int saw[2] = {0, 0};
  for (int round = 0; round < 8; ++round) {
    const pid_t saver = fork();
    ASSERT_GE(saver, 0);
    if (saver == 0) {
      try {
        for (int i = 0;; ++i) save_checkpoint(p, i % 2 ? a : b);
      } catch (...) {
      }
      _exit(1);   // a failed save: the parent sees a normal exit, not SIGKILL
    }
    usleep(static_cast<useconds_t>(1000 + data::splitmix64(rng) % 40000));
    kill(saver, SIGKILL);
    ASSERT_EQ(waitpid(saver, &status, 0), saver);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the save loop stopped by itself";
    const Checkpoint got = load_checkpoint(p);
    const bool is_b = got.step == 124;
    expect_same(is_b ? b : a, got);
    saw[is_b]++;
  }
  // A killed save leaves its temporary; the next save removes it.
  save_checkpoint(p, a);
  kill_mid_save(b);
  expect_same(a, load_checkpoint(p, specs(a)));
  const auto entries = [&] { return std::distance(fs::directory_iterator(d.path), fs::directory_iterator()); };
  EXPECT_GT(entries(), 1);
  save_checkpoint(p, a);
  EXPECT_EQ(entries(), 1);
  std::printf("killed 8 save loops: found the first checkpoint %d times, the second %d times\n", saw[0], saw[1]);
}
