// The switches of the host and CUDA backends, as one value that the lanes
// (lanes::Options), `capstep train` (train::Options) and `capstep sample`
// (train::SampleOptions) pass to every Interpreter and cuda::Executable they
// build. Each field has a fixed default: the library reads no environment
// variable for them. The capstep command and the example fill this from
// CAPSTEP_HOST_* and CAPSTEP_CUDA_* (tools/env_options.h, docs/cli.md).
// Also here: the OpenBLAS variables a program puts into its environment at
// the start of main (host::openblas_environment), which the library never sets.
#pragma once

#include <string>
#include <vector>

#include "capstep/collective.h"
#include "capstep/cuda_options.h"
#include "capstep/host_options.h"

namespace capstep {

namespace host {

// OpenBLAS, which runs the host's larger GEMMs, takes two settings only from
// the environment, once, inside its constructor when it loads (on the first
// Interpreter): its kernel set (OPENBLAS_CORETYPE) and the worker threads it
// starts (OPENBLAS_NUM_THREADS). The library sets no environment variable
// (changing the environment races with any other thread reading it) and
// reads none: it says what it would ask for, and the program applies that at
// the very start of main, before any thread exists, where the user has not
// set the variable (env::apply_openblas_environment in tools/env_options.h
// does for the capstep command, the example, the benches and the tests;
// docs/cli.md, "Environment"). A program that does not gets OpenBLAS's own
// choices, and GemmInfo says so.
struct EnvVariable {
  std::string name, value;
};

// What capstep asks of OpenBLAS on this CPU:
//  - OPENBLAS_CORETYPE, the kernel set from the CPU's feature flags
//    (SkylakeX or Cooperlake on AVX-512, Haswell on AVX2, Sandybridge on AVX;
//    none below AVX): Debian 12's OpenBLAS 0.3.21 picks by model number and
//    runs its SSE3 kernels on CPUs newer than itself (far slower there:
//    bench/results/2026-12-02-host-gemm-library.md);
//  - OPENBLAS_NUM_THREADS=1: the step's GEMMs are too small for OpenBLAS's
//    own threads, whose start-up spinning competes with the host's threads
//    even after openblas_set_num_threads(1).
std::vector<EnvVariable> openblas_environment();

// How the program set OpenBLAS's environment up, as it tells the library
// (which reads no environment): GemmInfo reports it, and a thread count the
// user chose is left alone.
struct OpenblasEnvironment {
  // The program put openblas_environment() into the environment where the
  // user had not set the variable. false (nothing told): the library knows
  // nothing of the environment, and GemmInfo says so.
  bool applied = false;
  std::string user_coretype;      // the user's own OPENBLAS_CORETYPE; "" when they set none
  bool user_num_threads = false;  // the user set OPENBLAS_NUM_THREADS: OpenBLAS keeps their count
};

// Tells the library how the environment was set up. Takes effect only before
// OpenBLAS loads (the first Interpreter, or GemmInfo); returns false, and
// changes nothing, after.
bool describe_openblas_environment(const OpenblasEnvironment& e);

}  // namespace host

// An XLA device through a PJRT plugin (capstep/backend.h, BackendKind::pjrt):
// a shared library exporting GetPjrtApi, loaded at run time. The library
// never searches for one: the path comes from the caller (the capstep
// command's --pjrt-plugin, or CAPSTEP_PJRT_PLUGIN in tools/ and the example).
struct PjrtOptions {
  std::string plugin;  // path of the plugin's .so; empty: no PJRT backend
  // For a GPU plugin: do not reserve most of the device's memory when the
  // client starts (XLA's default), so that it shares the GPU with capstep's
  // own executors; allocate as the programs need.
  bool preallocate = false;
  // For a GPU plugin: the most of the device's memory its allocator may take
  // (XLA's "memory_fraction"); 0: the plugin's default (0.75 in XLA).
  float memory_fraction = 0;
  // A directory for compiled executables (made if missing): a program
  // compiled once for this plugin and device is loaded from there by later
  // backends and processes instead of compiled again. Empty: no cache.
  std::string cache_dir;
};

struct BackendOptions {
  host::InterpreterOptions host;  // fuse, jit, pair_dots, tile_elems
  // The host's worker threads (the caller's included), 1 to 64, for the whole
  // process from the start of the run; 0: the CPUs this process may run on,
  // at most 4.
  int host_threads = 0;
  // fuse, lt_gemm, generated_gemm and persistent; a lane sets tf32 and
  // cuda_graph from its own options. (cuda.nccl is the CUDA backend's own:
  // it sets it from `communicator` below, over whatever the caller put there.)
  cuda::Options cuda;
  PjrtOptions pjrt;
  // The replicas that the program's all_reduce equations sum over, for every
  // backend (not owned; must outlive the backend). nullptr: one replica, and
  // all_reduce is the identity.
  //  - host: the interpreter calls it for each all_reduce (or pack of them).
  //  - CUDA: for a program with all_reduce equations, the backend builds its
  //    own NCCL communicator from it (rank 0 makes the NCCL id,
  //    Communicator::broadcast carries it to the others), on the current CUDA
  //    device, and each all_reduce is an ncclAllReduce on the step's stream.
  //    That is a collective: every rank must make its CUDA backend for that
  //    program at the same point, or the ranks wait on each other for ever.
  //    A program without all_reduce joins no collective.
  //    A communicator of one rank takes the same NCCL path (what a one-GPU
  //    machine can test). Without NCCL in the build, a communicator of more
  //    than one rank is an Error; of one rank, all_reduce is a device copy.
  //  - PJRT: it runs one replica; a communicator of more than one is an Error.
  Communicator* communicator = nullptr;
};

}  // namespace capstep
