// The switches of the host and CUDA backends, as one value that the lanes
// (lanes::Options), `capstep train` (train::Options) and `capstep sample`
// (train::SampleOptions) pass to every Interpreter and cuda::Executable they
// build. Each field has a fixed default: the library reads no environment
// variable for them. The capstep command and the example fill this from
// CAPSTEP_HOST_* and CAPSTEP_CUDA_* (tools/env_options.h, docs/cli.md).
#pragma once

#include <string>

#include "capstep/collective.h"
#include "capstep/cuda.h"
#include "capstep/interpreter.h"

namespace capstep {

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
  // fuse, lt_gemm, generated_gemm and persistent; a lane sets tf32, cuda_graph
  // and nccl from its own options.
  cuda::Options cuda;
  PjrtOptions pjrt;
  // The replicas that a host backend's all_reduce equations sum over (not
  // owned; must outlive the backend). nullptr: one replica. (On CUDA:
  // cuda.nccl.)
  Communicator* communicator = nullptr;
};

}  // namespace capstep
