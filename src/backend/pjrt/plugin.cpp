// Loading a PJRT plugin, checking what it serves, its errors, and its client.
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/pjrt/pjrt.h"
#include "capstep/ir.h"

namespace capstep::pjrt {
namespace {

using namespace c;

// Every entry of PJRT_Api that the backend calls: the plugin's table must
// reach past each one (its struct_size) and have it filled in.
#define CAPSTEP_PJRT_USED(X)                                                                             \
  X(PJRT_Error_Destroy) X(PJRT_Error_Message) X(PJRT_Error_GetCode) X(PJRT_Plugin_Initialize)            \
  X(PJRT_Event_Destroy) X(PJRT_Event_Await) X(PJRT_Client_Create) X(PJRT_Client_Destroy)                 \
  X(PJRT_Client_PlatformName) X(PJRT_Client_PlatformVersion) X(PJRT_Client_AddressableDevices)           \
  X(PJRT_Client_Compile) X(PJRT_Client_BufferFromHostBuffer) X(PJRT_DeviceDescription_Kind)              \
  X(PJRT_Device_GetDescription) X(PJRT_Executable_Destroy) X(PJRT_Executable_NumOutputs)                 \
  X(PJRT_LoadedExecutable_Destroy) X(PJRT_LoadedExecutable_GetExecutable)                                \
  X(PJRT_LoadedExecutable_Execute) X(PJRT_Buffer_Destroy) X(PJRT_Buffer_OnDeviceSizeInBytes)             \
  X(PJRT_Buffer_IsDeleted) X(PJRT_Buffer_ToHostBuffer) X(PJRT_Buffer_ReadyEvent)                         \
  X(PJRT_Buffer_OpaqueDeviceMemoryDataPointer)

// The API major version this backend's declarations (c_api.h) follow.
constexpr int kMajor = 0;

std::string missing_function(const PJRT_Api* api) {
#define CAPSTEP_PJRT_CHECK(name)                                                           \
  if (api->struct_size < offsetof(PJRT_Api, name) + sizeof(api->name) || api->name == nullptr) \
    return #name;
  CAPSTEP_PJRT_USED(CAPSTEP_PJRT_CHECK)
#undef CAPSTEP_PJRT_CHECK
  return "";
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::string text(const char* s, size_t n) { return s ? std::string(s, n) : std::string(); }

}  // namespace

const Plugin& load_plugin(const std::string& path) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  // Never freed: a plugin is not unloaded, and its clients live as long.
  static auto* loaded = new std::map<std::string, Plugin>();
  if (auto it = loaded->find(path); it != loaded->end()) return it->second;

  const std::string who = "PJRT plugin " + path;
  if (path.empty()) throw Error("no PJRT plugin: PjrtOptions::plugin is empty");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error("no PJRT plugin at " + path + " (no such file; scripts/pjrt-plugin downloads a CPU plugin)");
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    throw Error(who + " cannot be loaded: " + (e ? e : "dlopen failed"));
  }
  auto get = reinterpret_cast<GetPjrtApiFn>(dlsym(h, "GetPjrtApi"));
  if (!get) throw Error(who + " is not a PJRT plugin: it exports no GetPjrtApi");
  const PJRT_Api* api = get();
  if (!api || api->struct_size < offsetof(PJRT_Api, PJRT_Error_Destroy))
    throw Error(who + ": GetPjrtApi returned " + (api ? "a table too small to hold a version" : "no table"));
  Plugin p;
  p.path = path;
  p.api = api;
  p.major = api->pjrt_api_version.major_version;
  p.minor = api->pjrt_api_version.minor_version;
  if (p.major != kMajor)
    throw Error(who + " serves PJRT C API " + p.version() + "; capstep speaks major version " +
                std::to_string(kMajor) + " (0.x, declared from 0.90)");
  if (std::string fn = missing_function(api); !fn.empty())
    throw Error(who + " (PJRT C API " + p.version() + ") lacks " + fn + ", which capstep calls");
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Plugin_Initialize_Args, extension_start);
  check(p, api->PJRT_Plugin_Initialize(&init), who + ": PJRT_Plugin_Initialize");
  return loaded->emplace(path, std::move(p)).first->second;
}

void check(const Plugin& plugin, PJRT_Error* e, const std::string& what) {
  if (!e) return;
  const PJRT_Api* api = plugin.api;
  PJRT_Error_Message_Args m{};
  m.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Error_Message_Args, message_size);
  m.error = e;
  api->PJRT_Error_Message(&m);
  std::string msg = text(m.message, m.message_size);
  PJRT_Error_GetCode_Args g{};
  g.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Error_GetCode_Args, code);
  g.error = e;
  PJRT_Error* ge = api->PJRT_Error_GetCode(&g);
  const bool oom = !ge && g.code == PJRT_Error_Code_RESOURCE_EXHAUSTED;
  PJRT_Error_Destroy_Args d{};
  d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Error_Destroy_Args, error);
  if (ge) {
    d.error = ge;
    api->PJRT_Error_Destroy(&d);
  }
  d.error = e;
  api->PJRT_Error_Destroy(&d);
  throw Error(what + ": " + (oom ? "out of device memory: " : "") + msg);
}

void discard(const Plugin& plugin, PJRT_Error* e) {
  if (!e) return;
  PJRT_Error_Destroy_Args d{};
  d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Error_Destroy_Args, error);
  d.error = e;
  plugin.api->PJRT_Error_Destroy(&d);
}

namespace {

// The first attempt passes XLA's GPU client options (pjrt_c_api_gpu_internal.cc:
// "preallocate" bool, "memory_fraction" float); a plugin that knows none of
// them (the CPU plugins refuse unknown names) gets a second attempt without.
PJRT_Client* create_client(const Plugin& p, const PjrtOptions& o) {
  std::vector<PJRT_NamedValue> opts;
  auto named = [&](const char* name, PJRT_NamedValue_Type t) -> PJRT_NamedValue& {
    PJRT_NamedValue v{};
    v.struct_size = CAPSTEP_PJRT_SIZE(PJRT_NamedValue, value_size);
    v.name = name;
    v.name_size = std::strlen(name);
    v.type = t;
    v.value_size = 1;
    opts.push_back(v);
    return opts.back();
  };
  named("preallocate", PJRT_NamedValue_kBool).bool_value = o.preallocate;
  if (o.memory_fraction > 0) named("memory_fraction", PJRT_NamedValue_kFloat).float_value = o.memory_fraction;

  for (int attempt = 0; attempt < 2; ++attempt) {
    PJRT_Client_Create_Args a{};
    a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg);
    a.create_options = attempt == 0 ? opts.data() : nullptr;
    a.num_options = attempt == 0 ? opts.size() : 0;
    PJRT_Error* e = p.api->PJRT_Client_Create(&a);
    if (!e) return a.client;
    if (attempt == 0) {
      // Only a refusal of the options themselves is retried.
      PJRT_Error_Message_Args m{};
      m.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Error_Message_Args, message_size);
      m.error = e;
      p.api->PJRT_Error_Message(&m);
      const std::string msg = text(m.message, m.message_size);
      if (msg.find("option") != std::string::npos) {
        discard(p, e);
        continue;
      }
    }
    check(p, e, "PJRT plugin " + p.path + ": PJRT_Client_Create");
  }
  throw Error("PJRT plugin " + p.path + ": PJRT_Client_Create failed");
}

}  // namespace

const Client& client(const PjrtOptions& o) {
  const Plugin& p = load_plugin(o.plugin);
  std::lock_guard<std::mutex> lock(registry_mutex());
  using Key = std::tuple<std::string, bool, float>;
  // Kept for the life of the process, like the plugin (see pjrt.h).
  static auto* clients = new std::map<Key, Client>();
  const Key key{o.plugin, o.preallocate, o.memory_fraction};
  if (auto it = clients->find(key); it != clients->end()) return it->second;

  Client c;
  c.plugin = &p;
  c.client = create_client(p, o);
  const std::string who = "PJRT plugin " + p.path;
  try {
    PJRT_Client_PlatformName_Args n{};
    n.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_PlatformName_Args, text_size);
    n.client = c.client;
    check(p, p.api->PJRT_Client_PlatformName(&n), who + ": PJRT_Client_PlatformName");
    c.platform = text(n.text, n.text_size);
    n.text = nullptr;
    n.text_size = 0;
    check(p, p.api->PJRT_Client_PlatformVersion(&n), who + ": PJRT_Client_PlatformVersion");
    c.platform_version = text(n.text, n.text_size);
    PJRT_Client_AddressableDevices_Args d{};
    d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_AddressableDevices_Args, num_addressable_devices);
    d.client = c.client;
    check(p, p.api->PJRT_Client_AddressableDevices(&d), who + ": PJRT_Client_AddressableDevices");
    if (d.num_addressable_devices == 0) throw Error(who + ": the client has no addressable device");
    c.device = d.addressable_devices[0];
    PJRT_Device_GetDescription_Args g{};
    g.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Device_GetDescription_Args, device_description);
    g.device = c.device;
    check(p, p.api->PJRT_Device_GetDescription(&g), who + ": PJRT_Device_GetDescription");
    PJRT_DeviceDescription_Kind_Args k{};
    k.struct_size = CAPSTEP_PJRT_SIZE(PJRT_DeviceDescription_Kind_Args, device_kind_size);
    k.device_description = g.device_description;
    check(p, p.api->PJRT_DeviceDescription_Kind(&k), who + ": PJRT_DeviceDescription_Kind");
    c.device_kind = text(k.device_kind, k.device_kind_size);
  } catch (...) {
    PJRT_Client_Destroy_Args d{};
    d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_Destroy_Args, client);
    d.client = c.client;
    discard(p, p.api->PJRT_Client_Destroy(&d));  // the first error is the one to report
    throw;
  }
  return clients->emplace(key, std::move(c)).first->second;
}

}  // namespace capstep::pjrt
