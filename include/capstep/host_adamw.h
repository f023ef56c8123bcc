// AdamW on the host overlapped with a run of the host backend (lane 1): the
// optimizer's update of each parameter starts on the host's idle threads as
// soon as the run has its gradient and reads the parameter no more (the
// backend's run events, capstep/backend.h). Part of the host backend: it
// uses its threads and its slots; optim/ holds only the settings and the
// scalars.
#pragma once

#include <cstdint>
#include <vector>

#include "capstep/backend.h"
#include "capstep/optim.h"

namespace capstep::host {

class Background;
struct InterpreterOptions;

// step() runs `b` (the host backend of a gradient program: its inputs
// 0..n-1 are the parameters, n = m.size(), and output first_grad + j is
// parameter j's gradient) once, and updates every parameter's slot
// (b.host_input(j)), m[j] and v[j] to what optim::adamw_update(o, s, p,
// gradients, m, v) after the run gives (the same bits: the same operations
// per element; subnormals as the backend's InterpreterOptions::
// flush_subnormals says). Each parameter's update is cut into chunks of
// kChunk elements that the host's idle threads take (host::Background) as
// soon as the run has its gradient and reads the parameter no more
// (RunEvents): in the backward pass, while a thread would otherwise wait at
// the end of a GEMM's or a group's parts, or while the other runs a step
// that has no parts. What is left runs on every thread after the run. The
// parameters must be f32, not donated, m and v of their types (Error
// otherwise, before anything runs); nothing is allocated per step after the
// first. A run that throws may leave some parameters updated.
// With finite_output >= 0 (a scalar f32 output made before the gradients:
// the loss), no update starts before that output is final, and none is made
// when it is not finite (NaN or infinite): step() then returns false, having
// only run the program, as a training loop that skips such a step wants.
class HostAdamW {
 public:
  static constexpr int64_t kChunk = 2048;
  explicit HostAdamW(const optim::AdamW& o);
  bool step(Backend& b, int first_grad, const optim::AdamWScalars& s, std::vector<Array>& m, std::vector<Array>& v,
            int finite_output = -1);
  // Of the last step's chunks, how many ran before the run ended (on idle
  // threads), and how many there were.
  int early_chunks() const { return early_; }
  int chunks() const { return count_; }

 private:
  struct Chunk {
    float *p, *m, *v;
    const float* g;
    int64_t n;
  };
  static void run_chunk(void* self, int i);
  void ready(int j);  // parameter j's gradient is final and the run reads it no more: its chunks may run
  optim::AdamW o_;
  optim::AdamWScalars s_{};
  std::vector<Chunk> chunks_;  // in the order the parameters became ready
  int count_ = 0, early_ = 0;
  std::vector<char> grad_done_, param_done_;
  std::vector<int> waiting_;  // parameters ready before finite_output was known
  int finite_output_ = -1;
  enum class Gate { open, waiting, shut } gate_ = Gate::open;
  Backend* b_ = nullptr;
  std::vector<Array>*m_ = nullptr, *v_ = nullptr;
  int first_grad_ = 0;
  Background* background_ = nullptr;  // the step under way's idle-thread work
};

// The interpreter options a host backend was made with; Error naming the
// backend for another kind.
const InterpreterOptions& interpreter_options(const Backend& b);

}  // namespace capstep::host
