// The part of the PJRT C API (XLA's xla/pjrt/c/pjrt_c_api.h) that the PJRT
// backend calls, declared here so that the backend always builds: no header
// from XLA, TensorFlow or JAX is needed, only a plugin at run time.
//
// Layouts follow API version 0.90 (the header in the tensorflow-cpu 2.21.0
// wheel), which is ABI-compatible with every 0.x plugin: within a major
// version, the API only appends fields to the end of a struct and functions to
// the end of PJRT_Api. Every argument struct starts with struct_size, the
// bytes up to and including its last field that the caller knows of, so a
// plugin built at a later minor version reads no field that we did not write,
// and one that requires more than we know of answers with an error (which the
// backend passes on). PJRT_Api's own struct_size says which functions the
// plugin has: the backend checks it for each function it calls (plugin.cpp).
//
// Only what is used is typed; the other entries of PJRT_Api keep their place
// as untyped pointers. Names are the API's, in namespace capstep::pjrt::c.
#pragma once

#include <cstddef>
#include <cstdint>

namespace capstep::pjrt::c {

// Bytes up to and including `field`: what struct_size holds.
#define CAPSTEP_PJRT_SIZE(T, field) (offsetof(T, field) + sizeof(static_cast<T*>(nullptr)->field))

struct PJRT_Extension_Base;
struct PJRT_Error;
struct PJRT_Event;
struct PJRT_Client;
struct PJRT_Device;
struct PJRT_DeviceDescription;
struct PJRT_Memory;
struct PJRT_Executable;
struct PJRT_LoadedExecutable;
struct PJRT_Buffer;

// ---- errors ----------------------------------------------------------------
struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error;
};
struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message;  // out, lives as long as the error
  size_t message_size;  // out
};
// absl::StatusCode's values (1 cancelled ... 16 unauthenticated).
enum PJRT_Error_Code : int { PJRT_Error_Code_RESOURCE_EXHAUSTED = 8 };
struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code;  // out
};

// ---- named values (client create options) ----------------------------------
enum PJRT_NamedValue_Type : int {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64,
  PJRT_NamedValue_kInt64List,
  PJRT_NamedValue_kFloat,
  PJRT_NamedValue_kBool,
};
struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;  // elements of a list or string; 1 for a scalar
};

// ---- plugin, events ----------------------------------------------------------
struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version;
  int minor_version;
};
struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
};
struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};

// ---- client ----------------------------------------------------------------------
struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;  // multi-process key-value store: unused (nullptr)
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client;  // out
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
};
struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
};
struct PJRT_Client_PlatformName_Args {  // also PlatformVersion's layout
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* text;  // out, lives as long as the client
  size_t text_size;  // out
};
struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* addressable_devices;  // out
  size_t num_addressable_devices;           // out
};
struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description;  // out
};
struct PJRT_DeviceDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* device_kind;  // out
  size_t device_kind_size;  // out
};

// ---- compile -------------------------------------------------------------------
struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;  // "mlir": MLIR text or bytecode
  size_t code_size;
  const char* format;
  size_t format_size;
};
struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;  // a serialized xla.CompileOptionsProto
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable;  // out
};
struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
};
struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable;  // out; destroyed by the caller
};
struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
};
struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;  // out
};

// ---- the compile cache: an executable to bytes and back (optional entries) ----
struct PJRT_SerializedExecutable;
struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;   // out; lives as long as serialized_executable
  size_t serialized_bytes_size;   // out
  PJRT_SerializedExecutable* serialized_executable;                       // out
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable* exec);  // out; call once
};
struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable;           // out
  const char* overridden_serialized_compile_options;  // null: the options it was compiled with
  size_t overridden_serialized_compile_options_size;
};

// ---- execute ---------------------------------------------------------------------
struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  void* send_callbacks;  // host send/recv: unused
  void* recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  // Inputs that must not be donated even where the program aliases them.
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
};
struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;  // [num_devices][num_args]
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;     // [num_devices][num_outputs], filled by the plugin
  PJRT_Event** device_complete_events;   // [num_devices], optional
  PJRT_Device* execute_device;           // nullptr: the compiled device assignment
};

// ---- buffers -----------------------------------------------------------------------
enum PJRT_Buffer_Type : int {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
};
enum PJRT_HostBufferSemantics : int {
  // The plugin copies the host data before BufferFromHostBuffer returns.
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
};
struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;  // nullptr: dense, major to minor
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;
  PJRT_Memory* memory;           // nullptr: the device's default memory
  void* device_layout;           // nullptr: the device's default layout
  PJRT_Event* done_with_host_buffer;  // out
  PJRT_Buffer* buffer;                // out
};
struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
};
struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  void* host_layout;  // nullptr: dense, major to minor
  void* dst;
  size_t dst_size;
  PJRT_Event* event;  // out
};
struct PJRT_Buffer_IsDeleted_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  bool is_deleted;  // out
};
struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes;  // out
};
struct PJRT_Buffer_ReadyEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event;  // out
};
struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* device_memory_ptr;  // out
};

// ---- the function table ---------------------------------------------------------------
template <class Args> using Fn = PJRT_Error* (*)(Args*);
using Unused = void*;

struct PJRT_Api {
  size_t struct_size;  // bytes of this table the plugin fills
  PJRT_Extension_Base* extension_start;
  PJRT_Api_Version pjrt_api_version;
  void (*PJRT_Error_Destroy)(PJRT_Error_Destroy_Args*);
  void (*PJRT_Error_Message)(PJRT_Error_Message_Args*);
  Fn<PJRT_Error_GetCode_Args> PJRT_Error_GetCode;
  Fn<PJRT_Plugin_Initialize_Args> PJRT_Plugin_Initialize;
  Unused PJRT_Plugin_Attributes;
  Fn<PJRT_Event_Destroy_Args> PJRT_Event_Destroy;
  Unused PJRT_Event_IsReady;
  Unused PJRT_Event_Error;
  Fn<PJRT_Event_Await_Args> PJRT_Event_Await;
  Unused PJRT_Event_OnReady;
  Fn<PJRT_Client_Create_Args> PJRT_Client_Create;
  Fn<PJRT_Client_Destroy_Args> PJRT_Client_Destroy;
  Fn<PJRT_Client_PlatformName_Args> PJRT_Client_PlatformName;
  Unused PJRT_Client_ProcessIndex;
  Fn<PJRT_Client_PlatformName_Args> PJRT_Client_PlatformVersion;
  Unused PJRT_Client_Devices;
  Fn<PJRT_Client_AddressableDevices_Args> PJRT_Client_AddressableDevices;
  Unused PJRT_Client_LookupDevice;
  Unused PJRT_Client_LookupAddressableDevice;
  Unused PJRT_Client_AddressableMemories;
  Fn<PJRT_Client_Compile_Args> PJRT_Client_Compile;
  Unused PJRT_Client_DefaultDeviceAssignment;
  Fn<PJRT_Client_BufferFromHostBuffer_Args> PJRT_Client_BufferFromHostBuffer;
  Unused PJRT_DeviceDescription_Id;
  Unused PJRT_DeviceDescription_ProcessIndex;
  Unused PJRT_DeviceDescription_Attributes;
  Fn<PJRT_DeviceDescription_Kind_Args> PJRT_DeviceDescription_Kind;
  Unused PJRT_DeviceDescription_DebugString;
  Unused PJRT_DeviceDescription_ToString;
  Fn<PJRT_Device_GetDescription_Args> PJRT_Device_GetDescription;
  Unused PJRT_Device_IsAddressable;
  Unused PJRT_Device_LocalHardwareId;
  Unused PJRT_Device_AddressableMemories;
  Unused PJRT_Device_DefaultMemory;
  Unused PJRT_Device_MemoryStats;
  Unused PJRT_Memory_Id;
  Unused PJRT_Memory_Kind;
  Unused PJRT_Memory_DebugString;
  Unused PJRT_Memory_ToString;
  Unused PJRT_Memory_AddressableByDevices;
  Fn<PJRT_Executable_Destroy_Args> PJRT_Executable_Destroy;
  Unused PJRT_Executable_Name;
  Unused PJRT_Executable_NumReplicas;
  Unused PJRT_Executable_NumPartitions;
  Fn<PJRT_Executable_NumOutputs_Args> PJRT_Executable_NumOutputs;
  Unused PJRT_Executable_SizeOfGeneratedCodeInBytes;
  Unused PJRT_Executable_GetCostAnalysis;
  Unused PJRT_Executable_OutputMemoryKinds;
  Unused PJRT_Executable_OptimizedProgram;
  Fn<PJRT_Executable_Serialize_Args> PJRT_Executable_Serialize;
  Fn<PJRT_LoadedExecutable_Destroy_Args> PJRT_LoadedExecutable_Destroy;
  Fn<PJRT_LoadedExecutable_GetExecutable_Args> PJRT_LoadedExecutable_GetExecutable;
  Unused PJRT_LoadedExecutable_AddressableDevices;
  Unused PJRT_LoadedExecutable_Delete;
  Unused PJRT_LoadedExecutable_IsDeleted;
  Fn<PJRT_LoadedExecutable_Execute_Args> PJRT_LoadedExecutable_Execute;
  Fn<PJRT_Executable_DeserializeAndLoad_Args> PJRT_Executable_DeserializeAndLoad;
  Unused PJRT_LoadedExecutable_Fingerprint;
  Fn<PJRT_Buffer_Destroy_Args> PJRT_Buffer_Destroy;
  Unused PJRT_Buffer_ElementType;
  Unused PJRT_Buffer_Dimensions;
  Unused PJRT_Buffer_UnpaddedDimensions;
  Unused PJRT_Buffer_DynamicDimensionIndices;
  Unused PJRT_Buffer_GetMemoryLayout;
  Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args> PJRT_Buffer_OnDeviceSizeInBytes;
  Unused PJRT_Buffer_Device;
  Unused PJRT_Buffer_Memory;
  Unused PJRT_Buffer_Delete;
  Fn<PJRT_Buffer_IsDeleted_Args> PJRT_Buffer_IsDeleted;
  Unused PJRT_Buffer_CopyToDevice;
  Fn<PJRT_Buffer_ToHostBuffer_Args> PJRT_Buffer_ToHostBuffer;
  Unused PJRT_Buffer_IsOnCpu;
  Fn<PJRT_Buffer_ReadyEvent_Args> PJRT_Buffer_ReadyEvent;
  Unused PJRT_Buffer_UnsafePointer;
  Unused PJRT_Buffer_IncreaseExternalReferenceCount;
  Unused PJRT_Buffer_DecreaseExternalReferenceCount;
  Fn<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args> PJRT_Buffer_OpaqueDeviceMemoryDataPointer;
  // ... more entries follow in the plugin's table; none is used here.
};

// The table's offsets, as in the API's header (a missing or extra entry above
// would move every later one): the header, then one pointer per entry. Every
// field offset of every struct here is compared with pjrt_c_api.h 0.90 by
// scripts/pjrt-check-abi (a program that includes both; run it after an edit).
static_assert(offsetof(PJRT_Api, PJRT_Error_Destroy) == 40);
static_assert(offsetof(PJRT_Api, PJRT_Client_Compile) == 40 + 20 * sizeof(void*));
static_assert(offsetof(PJRT_Api, PJRT_LoadedExecutable_Execute) == 40 + 55 * sizeof(void*));
static_assert(offsetof(PJRT_Api, PJRT_Buffer_OpaqueDeviceMemoryDataPointer) == 40 + 76 * sizeof(void*));

using GetPjrtApiFn = const PJRT_Api* (*)();

}  // namespace capstep::pjrt::c
