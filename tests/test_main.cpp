// The tests' main: what GoogleTest's gtest_main does, after putting capstep's
// OpenBLAS settings into the environment where the user set none, as the
// capstep command and the example do (tools/env_options.h): the library sets
// no environment variable, and without this OpenBLAS would run its own choice
// of kernel set (SSE3 ones on CPUs newer than Debian 12's OpenBLAS) and start
// its own threads. A user's (or a machine's) OPENBLAS_CORETYPE is left as it
// is, so the suite runs on whatever kernel set the environment asks for;
// scripts/test-kernel-sets is what forces each one.
#include <gtest/gtest.h>

#include <cstdio>

#include "../tools/env_options.h"

int main(int argc, char** argv) {
  try {
    capstep::env::apply_openblas_environment();  // before any thread exists and before OpenBLAS loads
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test main: %s\n", e.what());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
