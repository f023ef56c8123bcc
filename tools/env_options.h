// The one place that reads the backends' switches from the environment, for
// the capstep command and examples/training_step_on_device; the library itself
// takes them as values (capstep::BackendOptions) and reads none.
//
// One rule for every on/off switch: unset or empty leaves the option's
// default; "1" or "on" turns it on; "0" or "off" turns it off; anything else
// is an Error naming the variable. CAPSTEP_HOST_THREADS is a whole number
// from 1 to 64 (unset or empty: the CPUs this process may run on, at most 4).
// docs/cli.md, "Environment", lists them.
//
// Also here, for the same programs and the tests' main: OpenBLAS's own
// variables, which the library computes (host::openblas_environment) but
// never sets (apply_openblas_environment).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "capstep/backend_options.h"
#include "capstep/ir.h"

namespace capstep::env {

// The switch `name` applied to *value (left alone when unset or empty).
inline void read_switch(const char* name, bool* value) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return;
  const std::string s = e;
  if (s == "1" || s == "on") *value = true;
  else if (s == "0" || s == "off") *value = false;
  else throw Error(std::string(name) + "=" + s + ": expected 0, 1, off or on");
}

// CAPSTEP_HOST_THREADS into *threads (left alone when unset or empty).
inline void read_threads(const char* name, int* threads) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (end == e || *end != '\0' || v < 1 || v > 64)
    throw Error(std::string(name) + "=" + e + ": expected a whole number from 1 to 64");
  *threads = static_cast<int>(v);
}

// `o` with every CAPSTEP_HOST_*, CAPSTEP_CUDA_* and CAPSTEP_PJRT_{PLUGIN,CACHE} variable that is set applied.
inline BackendOptions backend_options(BackendOptions o = {}) {
  read_threads("CAPSTEP_HOST_THREADS", &o.host_threads);
  read_switch("CAPSTEP_HOST_FUSION", &o.host.fuse);
  read_switch("CAPSTEP_HOST_JIT", &o.host.jit);
  read_switch("CAPSTEP_HOST_PAIRS", &o.host.pair_dots);
  read_switch("CAPSTEP_HOST_FLUSH_SUBNORMALS", &o.host.flush_subnormals);
  read_switch("CAPSTEP_CUDA_FUSE", &o.cuda.fuse);
  read_switch("CAPSTEP_CUDA_LT", &o.cuda.lt_gemm);
  read_switch("CAPSTEP_CUDA_OWN_GEMM", &o.cuda.generated_gemm);
  read_switch("CAPSTEP_CUDA_PERSISTENT", &o.cuda.persistent);
  if (const char* e = std::getenv("CAPSTEP_PJRT_PLUGIN"); e != nullptr && *e != '\0') o.pjrt.plugin = e;
  if (const char* e = std::getenv("CAPSTEP_PJRT_CACHE"); e != nullptr && *e != '\0') o.pjrt.cache_dir = e;
  return o;
}

// Call first thing in main, before any thread exists and before OpenBLAS
// loads (the first Interpreter): puts each of host::openblas_environment()
// (capstep's kernel set for this CPU in OPENBLAS_CORETYPE,
// OPENBLAS_NUM_THREADS=1) that the user has not set (unset or empty) into the
// environment, and tells the library which the user had set, for GemmInfo and
// OpenBLAS's thread count. setenv is safe here only because nothing else runs
// yet; OpenBLAS reads both only when it loads. Child processes inherit them.
inline host::OpenblasEnvironment apply_openblas_environment() {
  auto users = [](const char* name) {
    const char* e = std::getenv(name);
    return std::string(e != nullptr ? e : "");
  };
  host::OpenblasEnvironment told;
  told.applied = true;
  told.user_coretype = users("OPENBLAS_CORETYPE");
  told.user_num_threads = !users("OPENBLAS_NUM_THREADS").empty();
  for (const host::EnvVariable& v : host::openblas_environment())
    if (users(v.name.c_str()).empty()) ::setenv(v.name.c_str(), v.value.c_str(), 1);
  host::describe_openblas_environment(told);
  // capstep's own host threads share every GEMM, each part one OpenBLAS call:
  // OpenBLAS's threads under each of them oversubscribe the CPUs, which makes
  // the step several times longer. Kept, as asked, but said.
  const std::string n = users("OPENBLAS_NUM_THREADS");
  if (!n.empty() && std::atoi(n.c_str()) > 1)
    std::fprintf(stderr,
                 "capstep: OPENBLAS_NUM_THREADS=%s from the environment: OpenBLAS starts that many threads inside "
                 "each of capstep's host threads, which already share every GEMM; unset it for the host's speed "
                 "(or run one host thread: CAPSTEP_HOST_THREADS=1)\n",
                 n.c_str());
  return told;
}

}  // namespace capstep::env
