// The lanes of the seed: one training step of the causal LM, several ways,
// from the same start on the same batches, each timed.
//   [1] host: the gradient program in the interpreter, AdamW in C++ on the host
//   [1f] host, AdamW in the program: the with_adamw program in the interpreter,
//       parameters and moments updated in place (lanes[3]; printed after [1])
//   [2] GPU, AdamW on the host: upload every parameter, download every gradient
//   [3] GPU, AdamW in the program: parameters and moments stay on the device
//   [4] XLA (PJRT), AdamW in the program, donated buffers: the with_adamw
//       program through a PJRT plugin (Options::backend.pjrt.plugin; skipped
//       by name without one), parameters and moments in the plugin's buffers
// Shared by examples/training_step_on_device and `capstep bench`: a
// benchmark's report, not part of the installed API.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "capstep/backend_options.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/train.h"

namespace capstep::lanes {

struct Options {
  nn::LmConfig model;
  optim::AdamW adamw;
  int steps = 10;          // compared and timed steps per lane
  int warmup = 3;          // untimed steps first, on a copy of the start
  uint64_t seed = 1;       // initial parameters and batch order
  BackendOptions backend;  // the host and CUDA switches every lane builds its Interpreter or Executable with
  // bf16: every lane's program from optim::mixed_precision_bf16 of the loss,
  // on the host and on the GPU (bf16 kernels: stored bf16, f32 arithmetic,
  // rounded on every store as the host does; bf16 GEMMs through cuBLASLt).
  optim::Precision precision = optim::Precision::f32;
  bool fused_attention = false;  // fuse_attention (trace.h) on the loss program of every lane
  std::string text_path;   // empty: the built-in corpus
  std::string size;        // the ladder's name of `model` (nn::LmConfig::preset), for the report; empty: none
  std::string only;        // empty: every lane; "1", "1f", "2", "3" or "4": that lane alone
                           // (the others skip, "not selected"), e.g. to time one lane's CPU
  void validate() const;
};

// One lane's run: what it is (a backend and where AdamW runs, the one
// capstep::Lane) and what it measured.
struct LaneResult {
  std::string tag;                   // "1", "1f", "2", "3", "4" (Options::only)
  std::string label;                 // "[1] host"
  Lane lane;
  bool ran = false;
  std::string skipped;               // reason, when not ran
  std::vector<double> losses;        // one per step
  std::vector<double> step_ms;       // one per step
  double median_ms = 0;
  double cpu_ms_per_step = 0;        // the process's CPU time (all threads) over the timed steps, per step
  double max_rel_vs_host = 0;        // GPU lanes and [4]: largest relative loss difference from [1]
  size_t device_bytes = 0;           // GPU lanes: every device buffer the step's executable holds; [4]: the plugin's buffers
  std::string kernels;               // GPU lanes: cuda::Executable::describe_launches(); [4]: the backend's device and plan
};

struct Report {
  std::string model_line;
  std::string device;                // the GPU, or why there is none
  std::string gemm;                  // the host's GEMM libraries, versions, kernel sets and CPU ("GEMM: " line)
  int host_threads = 1;              // threads the host lanes' steps use (Options::backend.host_threads)
  std::string host_threads_line;     // that, and where it came from ("host: " line)
  std::string host_loops;            // what runs the fused groups' elementwise work (on the "host: " line)
  std::string host_subnormals;       // "subnormals flushed (DAZ/FTZ)" or "subnormals kept (IEEE)" (on the "host: " line)
  double host_round_trip_ns = 0;     // host::threads_round_trip_ns() before the host lanes (0: one thread)
  bool tf32 = true;
  std::string precision = "f32";     // optim::precision_name
  int steps = 0;
  int warmup = 0;
  std::string size;                  // Options::size
  int64_t tokens_per_step = 0;       // batch x seq
  std::vector<LaneResult> lanes;     // always five: [1], [2], [3], [1f], [4]
  const LaneResult& lane(const std::string& tag) const;   // Error for an unknown tag
  LaneResult& lane(const std::string& tag);
};

Report run(const Options& o);
void print(const Report& r, std::ostream& out);       // the seed's layout
std::string to_json(const Report& r);                   // every figure, one object

double median(std::vector<double> v);

}  // namespace capstep::lanes
