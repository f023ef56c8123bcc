// The environment's backend switches are read in one place, tools/env_options.h
// (the capstep command and the example), with one rule; the library itself
// reads none of them: its options keep their fixed defaults whatever is set.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../tools/env_options.h"
#include "test_util.h"

namespace capstep {
namespace {

const char* const kSwitches[] = {"CAPSTEP_HOST_FUSION", "CAPSTEP_HOST_JIT",     "CAPSTEP_HOST_PAIRS",
                                 "CAPSTEP_CUDA_FUSE",   "CAPSTEP_CUDA_LT",      "CAPSTEP_CUDA_OWN_GEMM",
                                 "CAPSTEP_CUDA_PERSISTENT", "CAPSTEP_HOST_THREADS", "CAPSTEP_HOST_FLUSH_SUBNORMALS"};

// Sets the variables for the test's length, then unsets every one.
class Env : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* n : kSwitches) ::unsetenv(n);
  }
  static void set(const char* n, const char* v) { ::setenv(n, v, 1); }
};

TEST_F(Env, UnsetOrEmptyKeepsTheDefaults) {
  const BackendOptions d;
  for (const char* n : kSwitches) set(n, "");
  const BackendOptions o = env::backend_options();
  EXPECT_EQ(o.host_threads, 0);
  EXPECT_EQ(o.host.fuse, d.host.fuse);
  EXPECT_EQ(o.host.jit, d.host.jit);
  EXPECT_EQ(o.host.pair_dots, d.host.pair_dots);
  EXPECT_EQ(o.host.flush_subnormals, d.host.flush_subnormals);
  EXPECT_EQ(o.cuda.fuse, d.cuda.fuse);
  EXPECT_EQ(o.cuda.lt_gemm, d.cuda.lt_gemm);
  EXPECT_EQ(o.cuda.generated_gemm, d.cuda.generated_gemm);
  EXPECT_EQ(o.cuda.persistent, d.cuda.persistent);
}

TEST_F(Env, OneRuleForEverySwitch) {
  for (const char* off : {"0", "off"}) {
    for (const char* n : kSwitches)
      if (std::string(n) != "CAPSTEP_HOST_THREADS") set(n, off);
    const BackendOptions o = env::backend_options();
    EXPECT_FALSE(o.host.fuse || o.host.jit || o.host.pair_dots || o.host.flush_subnormals) << off;
    EXPECT_FALSE(o.cuda.fuse || o.cuda.lt_gemm || o.cuda.generated_gemm || o.cuda.persistent) << off;
  }
  for (const char* on : {"1", "on"}) {
    BackendOptions start;
    start.host = {.fuse = false, .jit = false, .pair_dots = false, .flush_subnormals = false};
    start.cuda.fuse = start.cuda.lt_gemm = start.cuda.generated_gemm = false;
    for (const char* n : kSwitches)
      if (std::string(n) != "CAPSTEP_HOST_THREADS") set(n, on);
    const BackendOptions o = env::backend_options(start);
    EXPECT_TRUE(o.host.fuse && o.host.jit && o.host.pair_dots && o.host.flush_subnormals) << on;
    EXPECT_TRUE(o.cuda.fuse && o.cuda.lt_gemm && o.cuda.generated_gemm && o.cuda.persistent) << on;
  }
}

TEST_F(Env, AnythingElseIsAnErrorNamingTheVariable) {
  set("CAPSTEP_CUDA_PERSISTENT", "yes");
  test::expect_error([] { env::backend_options(); }, {"CAPSTEP_CUDA_PERSISTENT=yes", "expected 0, 1, off or on"});
  clear();
  set("CAPSTEP_HOST_THREADS", "0");
  test::expect_error([] { env::backend_options(); }, {"CAPSTEP_HOST_THREADS=0", "1 to 64"});
  set("CAPSTEP_HOST_THREADS", "3x");
  test::expect_error([] { env::backend_options(); }, {"CAPSTEP_HOST_THREADS=3x"});
  set("CAPSTEP_HOST_THREADS", "3");
  EXPECT_EQ(env::backend_options().host_threads, 3);
}

TEST_F(Env, TheLibraryReadsNone) {
  for (const char* n : kSwitches)
    if (std::string(n) != "CAPSTEP_HOST_THREADS") set(n, "0");
  set("CAPSTEP_CUDA_PERSISTENT", "1");
  const host::InterpreterOptions h = host::InterpreterOptions::defaults();
  EXPECT_TRUE(h.fuse && h.jit && h.pair_dots && h.flush_subnormals);
  const cuda::Options c;
  EXPECT_TRUE(c.fuse && c.lt_gemm && c.generated_gemm);
  EXPECT_FALSE(c.persistent);
}

// Nor does it read or change any other variable: changing the environment
// races with any other thread of the user's process reading it, so the
// programs do it at the start of main (OpenBLAS's variables:
// apply_openblas_environment). No source of the library names the calls.
TEST(Environment, TheLibraryReadsAndSetsNoVariable) {
  namespace fs = std::filesystem;
  const char* d = std::getenv("CAPSTEP_SOURCE_DIR");
  const fs::path root = d != nullptr && *d != '\0' ? d : ".";
  int files = 0;
  for (const char* dir : {"src", "include"}) {
    ASSERT_TRUE(fs::is_directory(root / dir)) << root / dir << " (CAPSTEP_SOURCE_DIR: the checkout)";
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream f(e.path());
      std::stringstream s;
      s << f.rdbuf();
      ++files;
      for (const char* call : {"getenv", "setenv", "unsetenv", "putenv", "clearenv"})
        EXPECT_EQ(s.str().find(call), std::string::npos) << call << " in " << e.path();
    }
  }
  EXPECT_GT(files, 50);
}

}  // namespace
}  // namespace capstep
