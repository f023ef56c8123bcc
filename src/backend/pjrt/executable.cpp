// Compiling StableHLO text with a PJRT plugin, and running the executable.
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "backend/pjrt/pjrt.h"
#include "capstep/ir.h"
#include "capstep/safetensors.h"   // write_file_atomically

namespace capstep::pjrt {

using namespace c;

namespace {

// Protocol-buffer wire format, the little of it needed here: a field's key is
// (number << 3 | wire type), varints 7 bits a byte, least significant first.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void int_field(std::string& out, int number, int64_t v) {  // wire type 0
  varint(out, static_cast<uint64_t>(number) << 3);
  varint(out, static_cast<uint64_t>(v));
}
void message_field(std::string& out, int number, const std::string& bytes) {  // wire type 2
  varint(out, static_cast<uint64_t>(number) << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}

void destroy(const Client& c, PJRT_LoadedExecutable*& exe) {
  if (!exe) return;
  PJRT_LoadedExecutable_Destroy_Args d{};
  d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_LoadedExecutable_Destroy_Args, executable);
  d.executable = exe;
  exe = nullptr;
  discard(*c.plugin, c.api()->PJRT_LoadedExecutable_Destroy(&d));  // does not fail in XLA's plugins
}

}  // namespace

// xla/pjrt/proto/compile_options.proto (the field numbers checked against the
// generated compile_options.pb.h of the tensorflow-cpu 2.21.0 wheel):
//   message ExecutableBuildOptionsProto { int64 num_replicas = 4; int64 num_partitions = 5; ... }
//   message CompileOptionsProto { ExecutableBuildOptionsProto executable_build_options = 3; ... }
std::string compile_options(int64_t replicas, int64_t partitions) {
  std::string build;
  int_field(build, 4, replicas);
  int_field(build, 5, partitions);
  std::string options;
  message_field(options, 3, build);
  return options;
}

namespace {

// Whether the plugin's table reaches past entry `name` and fills it in.
#define CAPSTEP_PJRT_HAS(api, name) \
  ((api)->struct_size >= offsetof(PJRT_Api, name) + sizeof((api)->name) && (api)->name != nullptr)

PJRT_LoadedExecutable* compile(const Client& c, const std::string& mlir, const std::string& opts) {
  std::string code = mlir;
  static const char kFormat[] = "mlir";
  PJRT_Program prog{};
  prog.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Program, format_size);
  prog.code = code.data();
  prog.code_size = code.size();
  prog.format = kFormat;
  prog.format_size = sizeof kFormat - 1;
  PJRT_Client_Compile_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_Compile_Args, executable);
  a.client = c.client;
  a.program = &prog;
  a.compile_options = opts.data();
  a.compile_options_size = opts.size();
  check(*c.plugin, c.api()->PJRT_Client_Compile(&a), "PJRT_Client_Compile");
  return a.executable;
}

// The PJRT_Executable of a loaded one, destroyed with this object.
class Unloaded {
 public:
  Unloaded(const Client& c, PJRT_LoadedExecutable* exe) : c_(c) {
    PJRT_LoadedExecutable_GetExecutable_Args g{};
    g.struct_size = CAPSTEP_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable);
    g.loaded_executable = exe;
    check(*c.plugin, c.api()->PJRT_LoadedExecutable_GetExecutable(&g), "PJRT_LoadedExecutable_GetExecutable");
    e_ = g.executable;
  }
  ~Unloaded() {
    PJRT_Executable_Destroy_Args d{};
    d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_Destroy_Args, executable);
    d.executable = e_;
    discard(*c_.plugin, c_.api()->PJRT_Executable_Destroy(&d));  // does not fail in XLA's plugins
  }
  Unloaded(const Unloaded&) = delete;
  Unloaded& operator=(const Unloaded&) = delete;
  PJRT_Executable* get() const { return e_; }

 private:
  const Client& c_;
  PJRT_Executable* e_ = nullptr;
};

// ---- the compile cache ----------------------------------------------------------------
// An entry is one file, <dir>/<16 hex digits>.pjrt: a first line naming the
// format, then the key (one line: the plugin, its API version, the platform
// and device, hashes and sizes of the compile options and of the StableHLO
// text), then the plugin's serialized executable. The file's name is the
// key's hash; an entry is used only when its key line is the one asked for,
// so a hash collision or a stale entry is a miss, never a wrong executable.
constexpr std::string_view kCacheFormat = "capstep PJRT executable 1\n";

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}
std::string hex64(uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 15];
  return s;
}

// The entry at `path` if it exists, holds `key` and the plugin loads it;
// otherwise nullptr, and `why` says why when an entry was there.
PJRT_LoadedExecutable* load_cached(const Client& c, const std::string& path, const std::string& key, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  const std::string head = std::string(kCacheFormat) + key;
  if (bytes.compare(0, head.size(), head) != 0) {
    why = "the entry there was for another program or plugin, or damaged; replaced";
    return nullptr;
  }
  PJRT_Executable_DeserializeAndLoad_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_DeserializeAndLoad_Args, overridden_serialized_compile_options_size);
  a.client = c.client;
  a.serialized_executable = bytes.data() + head.size();
  a.serialized_executable_size = bytes.size() - head.size();
  try {
    check(*c.plugin, c.api()->PJRT_Executable_DeserializeAndLoad(&a), "PJRT_Executable_DeserializeAndLoad");
  } catch (const Error& e) {
    why = std::string("the plugin could not load the entry there (") + e.what() + "); replaced";
    return nullptr;
  }
  return a.loaded_executable;
}

void save_cached(const Client& c, PJRT_LoadedExecutable* exe, const std::string& dir, const std::string& path,
                 const std::string& key) {
  const Unloaded u(c, exe);
  PJRT_Executable_Serialize_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter);
  a.executable = u.get();
  check(*c.plugin, c.api()->PJRT_Executable_Serialize(&a), "PJRT_Executable_Serialize");
  std::string bytes = std::string(kCacheFormat) + key;
  bytes.append(a.serialized_bytes, a.serialized_bytes_size);
  if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("PJRT compile cache: cannot make the directory '" + dir + "': " + ec.message());
  try {
    write_file_atomically(path, bytes);
  } catch (const Error& e) {
    throw Error(std::string("PJRT compile cache: ") + e.what());
  }
}

}  // namespace

Executable::Executable(const Client& c, const std::string& mlir, const std::string& cache_dir) : c_(c) {
  const std::string opts = compile_options(1, 1);
  const PJRT_Api* api = c.api();
  std::string entry, key, why;
  if (!cache_dir.empty()) {
    if (!CAPSTEP_PJRT_HAS(api, PJRT_Executable_Serialize) || !CAPSTEP_PJRT_HAS(api, PJRT_Executable_DeserializeAndLoad)) {
      why = "this plugin does not serialize executables, so the compile cache is not used";
    } else {
      key = "plugin " + c.plugin->path + ", PJRT C API " + c.plugin->version() + ", " + c.platform + " " +
            c.platform_version + ", " + c.device_kind + ", compile options " + hex64(fnv1a(opts)) + ", StableHLO " +
            std::to_string(mlir.size()) + " bytes " + hex64(fnv1a(mlir)) + "\n";
      entry = (std::filesystem::path(cache_dir) / (hex64(fnv1a(key)) + ".pjrt")).string();
      exe_ = load_cached(c, entry, key, why);
    }
  }
  if (exe_) {
    from_cache_ = true;
    origin_ = "loaded from the compile cache (" + entry + ")";
  } else {
    exe_ = compile(c, mlir, opts);
    origin_ = "compiled";
    try {
      if (!entry.empty()) {
        save_cached(c, exe_, cache_dir, entry, key);
        origin_ += ", saved in the compile cache (" + entry + ")";
      }
    } catch (...) {
      destroy(c, exe_);
      throw;
    }
    if (!why.empty()) origin_ += "; " + why;
  }

  try {
    const Unloaded u(c, exe_);
    PJRT_Executable_NumOutputs_Args n{};
    n.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_NumOutputs_Args, num_outputs);
    n.executable = u.get();
    check(*c.plugin, api->PJRT_Executable_NumOutputs(&n), "PJRT_Executable_NumOutputs");
    num_outputs_ = n.num_outputs;
  } catch (...) {
    destroy(c, exe_);
    throw;
  }
}

Executable::~Executable() { destroy(c_, exe_); }

std::vector<Buffer> Executable::execute(const std::vector<PJRT_Buffer*>& args, const std::vector<int64_t>& non_donatable) {
  PJRT_ExecuteOptions o{};
  o.struct_size = CAPSTEP_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids);
  o.non_donatable_input_indices = non_donatable.data();
  o.num_non_donatable_input_indices = non_donatable.size();
  std::vector<PJRT_Buffer*> outs(num_outputs_ > 0 ? num_outputs_ : 1, nullptr);
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Buffer** out_list = outs.data();
  PJRT_Event* done = nullptr;
  PJRT_LoadedExecutable_Execute_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device);
  a.executable = exe_;
  a.options = &o;
  a.argument_lists = &arg_list;
  a.num_devices = 1;
  a.num_args = args.size();
  a.output_lists = &out_list;
  a.device_complete_events = &done;
  check(*c_.plugin, c_.api()->PJRT_LoadedExecutable_Execute(&a), "PJRT_LoadedExecutable_Execute");
  std::vector<Buffer> result;
  result.reserve(num_outputs_);
  for (size_t j = 0; j < num_outputs_; ++j) result.emplace_back(&c_, outs[j]);
  await(c_, done, "PJRT_LoadedExecutable_Execute");
  return result;
}

}  // namespace capstep::pjrt
