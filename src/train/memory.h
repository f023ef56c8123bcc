// Before the first step: whether the run fits in the memory this process may
// still take, from the Interpreter's own plans of the step and validation
// programs (host::memory_needed: nothing allocated), so that a batch too large
// for the machine is refused with the figures instead of growing until an
// allocation fails or the kernel's OOM killer ends the process.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "capstep/host_options.h"
#include "capstep/ir.h"
#include "capstep/train.h"

namespace capstep::train {

// The bytes this process may still take: MemAvailable of <proc>/meminfo, or
// less where its memory cgroup (v2 memory.max, v1 memory.limit_in_bytes; its
// own or an ancestor's) leaves less room under the limit. A cgroup's room is
// its limit less its usage, the inactive file cache (which the kernel
// reclaims first) counted as room.
struct MemoryRoom {
  double bytes = -1;   // < 0: unknown (no readable meminfo): no check
  std::string source;  // where the figure comes from, for the message
};
MemoryRoom memory_room(const std::string& proc = "/proc", const std::string& cgroup_root = "/sys/fs/cgroup");

// What a training run takes in host memory besides the text: the parameters
// and both AdamW moments (held already when it is asked); the copy of them
// that checkpoints read (TrainStep::save), and validation's copy of the
// parameters where the step does not hold them as host Arrays (AdamW in the
// program, or off the host; elsewhere validation reads them in place,
// TrainStep::parameters_in_place); on the host lane, the
// step interpreter's blocks, its outputs (the loss and the gradients) and its
// other inputs (the batch); and the validation interpreter's blocks. (A GPU
// lane's step takes device memory, which cuda::Executable checks.)
struct HostMemory {
  size_t params = 0;              // the parameters' bytes
  size_t state = 0;               // parameters and the trained ones' moments: held already
  size_t copy = 0;                // copies for checkpoints and validation (0: none made)
  host::MemoryPlan step;          // the step program's plan (zeros off the host lane)
  host::MemoryPlan validation;    // the validation program's plan (zeros: none)
  size_t batch() const { return step.inputs > params ? step.inputs - params : 0; }
  // The step's arena is given back before validation runs and validation's
  // after (Backend::release_scratch), so only the larger of the two is
  // resident at once (off the host lane the step's is 0 here).
  size_t arenas() const { return std::max(step.arena, validation.arena); }
  size_t still_needed() const {
    return copy + arenas() + step.statics + step.tiles + step.outputs + batch() + validation.statics + validation.tiles;
  }
};
// grad: the step program, the parameters among its inputs (by name); the
// moments counted for the parameters that train only; validation: the
// forward program validation runs, or nullptr.
HostMemory plan_host_memory(const Options& o, bool step_on_host, const Program& grad, const Program* validation);

// "" when still_needed() fits in the room (or the room is unknown), else the
// refusal: every figure, where the room's figure comes from, what to change.
std::string memory_refusal(const HostMemory& need, const MemoryRoom& room, const Options& o);

// Both, on this machine: throws Error with the refusal.
void check_host_memory(const Options& o, bool step_on_host, const Program& grad, const Program* validation);

}  // namespace capstep::train
