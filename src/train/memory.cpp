// The run's host-memory check before the first step (memory.h).
#include "memory.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace capstep::train {
namespace {

namespace fs = std::filesystem;

// The first number of a one-line file; false when absent, "max" or not a number.
bool read_number(const fs::path& p, double* v) {
  std::ifstream f(p);
  std::string s;
  if (!(f >> s) || s == "max") return false;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  *v = x;
  return true;
}

// The value of `key` in a "key value" file (memory.stat), or 0.
double stat_value(const fs::path& p, const std::string& key) {
  std::ifstream f(p);
  std::string k;
  double v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

// kB of "MemAvailable:" in meminfo, as bytes; < 0 when absent.
double mem_available(const std::string& proc) {
  std::ifstream f(proc + "/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    double kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lf kB", &kb) == 1) return kb * 1024;
  }
  return -1;
}

// "12.34 GiB", or "5.6 MiB" below a GiB.
std::string size_text(double bytes) {
  char b[32];
  if (bytes < 1024.0 * 1024.0 * 1024.0) std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return b;
}

// Limits at or above this are "no limit" (v1 writes 2^63 rounded to pages).
constexpr double kNoLimit = 1e18;

// The tightest room under the limits of `dir` and its ancestors up to `top`.
void cgroup_room(fs::path dir, const fs::path& top, const char* limit_file, const char* usage_file,
                 const char* inactive_key, MemoryRoom& room) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) dir = top;  // a cgroup namespace: the mount is the process's own cgroup
  for (;;) {
    double limit = 0, usage = 0;
    if (read_number(dir / limit_file, &limit) && limit < kNoLimit && read_number(dir / usage_file, &usage)) {
      const double free = std::max(0.0, limit - usage + stat_value(dir / "memory.stat", inactive_key));
      if (room.bytes < 0 || free < room.bytes) {
        room.bytes = free;
        room.source = "the memory cgroup's limit (" + (dir / limit_file).string() + ": " + size_text(limit) + ", " +
                      size_text(usage) + " in use)";
      }
    }
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
}

}  // namespace

MemoryRoom memory_room(const std::string& proc, const std::string& cgroup_root) {
  MemoryRoom room;
  room.bytes = mem_available(proc);
  if (room.bytes < 0) return room;
  room.source = "MemAvailable in " + proc + "/meminfo";
  // /proc/self/cgroup: "0::/path" (v2) or "N:memory,...:/path" (v1).
  std::ifstream f(proc + "/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const fs::path rel = fs::path(path).relative_path();
    if (line.compare(0, 3, "0::") == 0) {
      const fs::path top(cgroup_root);
      cgroup_room(top / rel, top, "memory.max", "memory.current", "inactive_file", room);
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      const fs::path top = fs::path(cgroup_root) / "memory";
      cgroup_room(top / rel, top, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", room);
    }
  }
  return room;
}

HostMemory plan_host_memory(const Options& o, bool step_on_host, const Program& grad, const Program* validation) {
  HostMemory m;
  // Moments for the trained parameters only (Options::train_patterns, freeze_patterns).
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(o.model);
  // (LoRA: the base frozen, the adapters, inputs lora.*, trained.)
  const std::vector<bool> trains =
      o.lora.on() ? std::vector<bool>(ps.size(), false) : trainable_mask(o.model, o.train_patterns, o.freeze_patterns);
  size_t trained = 0;
  for (size_t i = 0; i < grad.inputs.size(); ++i)
    if (o.lora.on() && grad.inputs[i].name.rfind("lora.", 0) == 0) {
      m.params += grad.input_type(static_cast<int>(i)).bytes();
      trained += grad.input_type(static_cast<int>(i)).bytes();
    }
  for (size_t j = 0; j < ps.size(); ++j) {
    const int i = grad.input_index(ps[j].name);
    if (i < 0) throw Error("plan_host_memory: program \"" + grad.name + "\" has no input \"" + ps[j].name + "\"");
    m.params += grad.input_type(i).bytes();
    if (trains[j]) trained += grad.input_type(i).bytes();
  }
  m.state = m.params + 2 * trained;
  // The checkpoint's copy of the state; validation's own copy of the
  // parameters the step does not hold as host Arrays (TrainStep::read).
  if (!o.save_path.empty() || o.comm) m.copy = m.state;
  if (validation && (o.lane.adamw_in_program || !step_on_host)) m.copy += m.params;
  if (step_on_host) m.step = host::memory_needed(grad, o.backend.host);
  if (validation) m.validation = host::memory_needed(*validation, o.backend.host);
  return m;
}

std::string memory_refusal(const HostMemory& need, const MemoryRoom& room, const Options& o) {
  const double more = static_cast<double>(need.still_needed());
  if (room.bytes < 0 || more <= room.bytes) return "";
  auto g = [](size_t b) { return size_text(static_cast<double>(b)); };
  std::ostringstream m;
  m << "the run needs " << size_text(more) << " of memory more than the " << g(need.state)
    << " its parameters and AdamW moments hold, and " << size_text(room.bytes) << " is available (" << room.source << "): ";
  std::vector<std::string> parts;
  if (need.step.held() > 0) {
    parts.push_back(g(need.step.arena) + " of intermediate values of the step (the host interpreter's arena)");
    parts.push_back(g(need.step.statics) + " of its constants");
    parts.push_back(g(need.step.outputs) + " for the gradients");
    parts.push_back(g(need.batch() + need.step.tiles) + " for the batch and scratch tiles");
  }
  if (need.validation.held() > 0)
    parts.push_back(g(need.validation.held()) + " for the validation program (" + g(need.validation.statics) +
                    " of constants; --val-fraction 0: none)");
  if (need.copy > 0) parts.push_back(g(need.copy) + " for the copy that checkpoints and validation read");
  if (need.step.arena > 0 && need.validation.arena > 0)
    parts.push_back("of the step's and validation's intermediate values only the larger counted (they are resident one "
                    "at a time)");
  for (size_t i = 0; i < parts.size(); ++i) m << (i ? ", " : "") << parts[i];
  m << "; a smaller --batch (now " << o.model.batch << ") or --seq (now " << o.model.seq << ") needs less";
  return m.str();
}

void check_host_memory(const Options& o, bool step_on_host, const Program& grad, const Program* validation) {
  const std::string why = memory_refusal(plan_host_memory(o, step_on_host, grad, validation), memory_room(), o);
  if (!why.empty()) throw Error(why);
}

}  // namespace capstep::train
