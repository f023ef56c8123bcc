// Compiling StableHLO text with a PJRT plugin, and running the executable.
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "backend/pjrt/pjrt.h"
#include "capstep/ir.h"
#include "capstep/files.h"

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
// An entry is one file, <dir>/<16 hex digits>.pjrt:
//   capstep PJRT executable 2
//   <key: the plugin's path, size and modification time, its API version, the
//    platform, its version and the device kind, the compile options in hex>
//   text <bytes>
//   <the StableHLO text, whole>
//   executable <bytes> <64-bit FNV-1a of them>
//   <the plugin's serialized executable>
// The file's name is a hash of the key and the text. An entry is used only
// when everything up to the executable is exactly what is asked for and the
// executable's length and hash match, so a name collision, a stale entry or a
// damaged file is a miss (compiled again and replaced), never a wrong
// executable. Not in the key: XLA's own flags (XLA_FLAGS), which the plugin
// reads from the environment; clear the directory after changing them.
constexpr std::string_view kCacheFormat = "capstep PJRT executable 2\n";

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
std::string hex_bytes(std::string_view b) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char ch : b) s += {digits[ch >> 4], digits[ch & 15]};
  return s;
}

// Everything an entry holds before the executable's own line.
std::string entry_head(const Client& c, const std::string& opts, const std::string& mlir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(c.plugin->path, ec);
  const auto time = fs::last_write_time(c.plugin->path, ec).time_since_epoch().count();
  return std::string(kCacheFormat) + "plugin " + c.plugin->path + " (" + std::to_string(ec ? 0 : size) + " bytes, modified " +
         std::to_string(ec ? 0 : time) + "), PJRT C API " + c.plugin->version() + ", " + c.platform + " " +
         c.platform_version + ", " + c.device_kind + ", compile options " + hex_bytes(opts) + "\ntext " +
         std::to_string(mlir.size()) + "\n" + mlir + "\n";
}

// The entry at `path` if it exists, begins with `head`, its executable is
// whole and the plugin loads it; otherwise nullptr, and `why` says why when
// an entry was there.
PJRT_LoadedExecutable* load_cached(const Client& c, const std::string& path, const std::string& head, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.compare(0, head.size(), head) != 0) {
    why = "the entry there was for another program, plugin or device; replaced";
    return nullptr;
  }
  const size_t eol = bytes.find('\n', head.size());
  unsigned long long n = 0;
  char hash[17] = {};
  if (eol == std::string::npos ||
      std::sscanf(bytes.c_str() + head.size(), "executable %llu %16[0-9a-f]\n", &n, hash) != 2 ||
      n != bytes.size() - eol - 1 || hex64(fnv1a(std::string_view(bytes).substr(eol + 1))) != hash) {
    why = "the entry there was damaged (its executable's length or hash differs); replaced";
    return nullptr;
  }
  PJRT_Executable_DeserializeAndLoad_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_DeserializeAndLoad_Args, overridden_serialized_compile_options_size);
  a.client = c.client;
  a.serialized_executable = bytes.data() + eol + 1;
  a.serialized_executable_size = n;
  try {
    check(*c.plugin, c.api()->PJRT_Executable_DeserializeAndLoad(&a), "PJRT_Executable_DeserializeAndLoad");
  } catch (const Error& e) {
    why = std::string("the plugin could not load the entry there (") + e.what() + "); replaced";
    return nullptr;
  }
  return a.loaded_executable;
}

// Saves exe as the entry at `path`. A plugin that fails to serialize it
// leaves no entry and returns why (the run goes on, compiled); a directory
// that cannot be made or written is an Error (the caller asked for it).
std::string save_cached(const Client& c, PJRT_LoadedExecutable* exe, const std::string& dir, const std::string& path,
                        const std::string& head) {
  std::string bytes = head;
  try {
    const Unloaded u(c, exe);
    PJRT_Executable_Serialize_Args a{};
    a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter);
    a.executable = u.get();
    check(*c.plugin, c.api()->PJRT_Executable_Serialize(&a), "PJRT_Executable_Serialize");
    const std::string_view payload(a.serialized_bytes, a.serialized_bytes_size);
    bytes += "executable " + std::to_string(payload.size()) + " " + hex64(fnv1a(payload)) + "\n";
    bytes += payload;
    if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  } catch (const Error& e) {
    return std::string("not saved in the compile cache: ") + e.what();
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("PJRT compile cache: cannot make the directory '" + dir + "': " + ec.message());
  try {
    write_file_atomically(path, bytes);
  } catch (const Error& e) {
    throw Error(std::string("PJRT compile cache: ") + e.what());
  }
  return "";
}

}  // namespace

Executable::Executable(const Client& c, const std::string& mlir, const std::string& cache_dir) : c_(c) {
  const std::string opts = compile_options(1, 1);
  const PJRT_Api* api = c.api();
  std::string entry, head, why;
  if (!cache_dir.empty()) {
    if (!CAPSTEP_PJRT_HAS(api, PJRT_Executable_Serialize) || !CAPSTEP_PJRT_HAS(api, PJRT_Executable_DeserializeAndLoad)) {
      why = "this plugin does not serialize executables, so the compile cache is not used";
    } else {
      head = entry_head(c, opts, mlir);
      entry = (std::filesystem::path(cache_dir) / (hex64(fnv1a(head)) + ".pjrt")).string();
      exe_ = load_cached(c, entry, head, why);
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
        const std::string not_saved = save_cached(c, exe_, cache_dir, entry, head);
        origin_ += not_saved.empty() ? ", saved in the compile cache (" + entry + ")" : "; " + not_saved;
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
