// The PJRT backend's parts (capstep/backend.h, BackendKind::pjrt), one family
// a file:
//   plugin.cpp      loading a plugin, its version and function table, errors,
//                   the client and its device
//   buffer.cpp      buffers: host to device, device to host, events
//   executable.cpp  compile options, compiling StableHLO text, executing
//   pjrt_backend.cpp  the Backend: one buffer per input slot, donation
// Everything here throws capstep::Error, with the plugin's own message where
// the plugin gave one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/pjrt/c_api.h"
#include "capstep/array.h"
#include "capstep/backend_options.h"

namespace capstep::pjrt {

// ---- plugin.cpp -------------------------------------------------------------------
// A loaded plugin: dlopen'ed once per path for the life of the process (a
// plugin cannot be unloaded; PJRT_Plugin_Initialize runs once).
struct Plugin {
  std::string path;
  const c::PJRT_Api* api = nullptr;
  int major = 0, minor = 0;  // the PJRT C API version the plugin serves
  std::string version() const { return std::to_string(major) + "." + std::to_string(minor); }
};
// Loads the plugin at `path` (the caller's path, never searched for), checks
// its API version and that its table has every function this backend calls,
// and initializes it. Error: no such file, not a plugin (no GetPjrtApi), an
// API version it cannot serve, a failed initialization.
const Plugin& load_plugin(const std::string& path);

// Throws Error("<what>: <the plugin's message>") when `e` is an error (and
// frees it); does nothing for nullptr. Out-of-memory errors say so first.
void check(const Plugin& plugin, c::PJRT_Error* e, const std::string& what);
// Frees `e` (nullptr: nothing) without reporting it: a second error after the
// one being reported.
void discard(const Plugin& plugin, c::PJRT_Error* e);

// A client with its one device, made once per plugin and options and kept for
// the life of the process (clients own thread pools and, on a GPU, the
// allocator: one per process shares them between backends).
struct Client {
  const Plugin* plugin = nullptr;
  c::PJRT_Client* client = nullptr;
  c::PJRT_Device* device = nullptr;  // the first addressable device
  std::string platform;              // "cpu", "cuda", ...
  std::string platform_version;
  std::string device_kind;
  const c::PJRT_Api* api() const { return plugin->api; }
};
const Client& client(const PjrtOptions& o);

// ---- buffer.cpp ------------------------------------------------------------------
// Owns one PJRT_Buffer (PJRT_Buffer_Destroy when dropped or replaced).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Client* c, c::PJRT_Buffer* b) : c_(c), b_(b) {}
  Buffer(Buffer&& o) noexcept : c_(o.c_), b_(o.b_) { o.b_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();
  c::PJRT_Buffer* get() const { return b_; }
  explicit operator bool() const { return b_ != nullptr; }

 private:
  const Client* c_ = nullptr;
  c::PJRT_Buffer* b_ = nullptr;
};

// Copies `a` to a new buffer on the client's device and waits until it is there.
Buffer upload(const Client& c, const Array& a);
// Copies the buffer to `dst` (its type already the buffer's) and waits.
void download(const Client& c, c::PJRT_Buffer* b, Array& dst);
// Waits for `e` and frees it; Error with the plugin's message if it failed.
void await(const Client& c, c::PJRT_Event* e, const std::string& what);
// What the plugin says about a buffer: whether it was deleted (a donated
// input after a run), where its memory is, how many bytes it takes.
bool is_deleted(const Client& c, c::PJRT_Buffer* b);
const void* device_pointer(const Client& c, c::PJRT_Buffer* b);
size_t device_bytes(const Client& c, c::PJRT_Buffer* b);

// ---- executable.cpp ------------------------------------------------------------------
// A serialized xla.CompileOptionsProto asking for `replicas` x `partitions`
// devices. (Compiling with empty options makes XLA's CPU client abort the
// whole process on a failed CHECK: replica_count > 0.)
std::string compile_options(int64_t replicas, int64_t partitions);

class Executable {
 public:
  // Compiles StableHLO text (MLIR) for the client's device: Error with the
  // compiler's message. With a `cache_dir` (PjrtOptions::cache_dir), an
  // executable compiled before for the same text, options, plugin and device
  // is loaded from there instead, and one compiled here is saved there (an
  // entry that does not load is compiled again and replaced; a directory
  // that cannot be written is an Error).
  Executable(const Client& c, const std::string& mlir, const std::string& cache_dir = "");
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  size_t num_outputs() const { return num_outputs_; }
  bool from_cache() const { return from_cache_; }
  // "compiled", "compiled, saved in the compile cache (PATH)", "loaded from
  // the compile cache (PATH)", and why a cache entry was not used.
  const std::string& origin() const { return origin_; }
  // Runs once on `args` and waits. The inputs listed in `non_donatable` are
  // not donated; every other input that the program aliases to an output is,
  // and its buffer is deleted (the output takes its memory).
  std::vector<Buffer> execute(const std::vector<c::PJRT_Buffer*>& args, const std::vector<int64_t>& non_donatable);

 private:
  const Client& c_;
  c::PJRT_LoadedExecutable* exe_ = nullptr;
  size_t num_outputs_ = 0;
  bool from_cache_ = false;
  std::string origin_;
};

}  // namespace capstep::pjrt
