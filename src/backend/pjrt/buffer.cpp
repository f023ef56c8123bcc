// Buffers on a PJRT device: host to device, device to host, and the events
// that say when a copy is done.
#include "backend/pjrt/pjrt.h"
#include "capstep/ir.h"

namespace capstep::pjrt {

using namespace c;

namespace {

PJRT_Buffer_Type buffer_type(DType d) {
  switch (d) {
    case DType::f32: return PJRT_Buffer_Type_F32;
    case DType::f64: return PJRT_Buffer_Type_F64;
    case DType::i32: return PJRT_Buffer_Type_S32;
    case DType::i1: return PJRT_Buffer_Type_PRED;  // one byte per element, as Array stores it
    case DType::bf16: return PJRT_Buffer_Type_BF16;
  }
  return PJRT_Buffer_Type_INVALID;
}

// A valid address for arrays without elements (Array holds none for them).
const char kNoElements[8] = {};

}  // namespace

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    c_ = o.c_;
    b_ = o.b_;
    o.b_ = nullptr;
  }
  return *this;
}

void Buffer::reset() {
  if (!b_) return;
  PJRT_Buffer_Destroy_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer);
  a.buffer = b_;
  b_ = nullptr;
  // Destroying a handle does not fail in XLA's plugins; nothing to do if one did.
  discard(*c_->plugin, c_->api()->PJRT_Buffer_Destroy(&a));
}

void await(const Client& c, PJRT_Event* e, const std::string& what) {
  if (!e) return;
  PJRT_Event_Await_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Event_Await_Args, event);
  a.event = e;
  PJRT_Error* err = c.api()->PJRT_Event_Await(&a);
  PJRT_Event_Destroy_Args d{};
  d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Event_Destroy_Args, event);
  d.event = e;
  PJRT_Error* derr = c.api()->PJRT_Event_Destroy(&d);
  if (err) discard(*c.plugin, derr);  // the wait's error is the one to report
  check(*c.plugin, err, what);
  check(*c.plugin, derr, what + " (PJRT_Event_Destroy)");
}

Buffer upload(const Client& c, const Array& a) {
  const Type& t = a.type();
  PJRT_Client_BufferFromHostBuffer_Args h{};
  h.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer);
  h.client = c.client;
  h.data = a.bytes() > 0 ? a.raw() : kNoElements;
  h.type = buffer_type(t.dtype);
  h.dims = t.shape.data();
  h.num_dims = t.shape.size();
  h.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  h.device = c.device;
  const std::string what = "PJRT_Client_BufferFromHostBuffer (" + t.str() + ")";
  check(*c.plugin, c.api()->PJRT_Client_BufferFromHostBuffer(&h), what);
  Buffer b(&c, h.buffer);
  await(c, h.done_with_host_buffer, what);
  PJRT_Buffer_ReadyEvent_Args r{};
  r.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_ReadyEvent_Args, event);
  r.buffer = b.get();
  check(*c.plugin, c.api()->PJRT_Buffer_ReadyEvent(&r), what + ": PJRT_Buffer_ReadyEvent");
  await(c, r.event, what);
  return b;
}

void download(const Client& c, PJRT_Buffer* b, Array& dst) {
  PJRT_Buffer_ToHostBuffer_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event);
  a.src = b;
  a.dst = dst.bytes() > 0 ? dst.raw() : nullptr;
  a.dst_size = dst.bytes();
  if (dst.bytes() == 0) return;
  const std::string what = "PJRT_Buffer_ToHostBuffer (" + dst.type().str() + ")";
  check(*c.plugin, c.api()->PJRT_Buffer_ToHostBuffer(&a), what);
  await(c, a.event, what);
}

bool is_deleted(const Client& c, PJRT_Buffer* b) {
  PJRT_Buffer_IsDeleted_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_IsDeleted_Args, is_deleted);
  a.buffer = b;
  check(*c.plugin, c.api()->PJRT_Buffer_IsDeleted(&a), "PJRT_Buffer_IsDeleted");
  return a.is_deleted;
}

const void* device_pointer(const Client& c, PJRT_Buffer* b) {
  PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args, device_memory_ptr);
  a.buffer = b;
  check(*c.plugin, c.api()->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&a), "PJRT_Buffer_OpaqueDeviceMemoryDataPointer");
  return a.device_memory_ptr;
}

size_t device_bytes(const Client& c, PJRT_Buffer* b) {
  PJRT_Buffer_OnDeviceSizeInBytes_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes);
  a.buffer = b;
  check(*c.plugin, c.api()->PJRT_Buffer_OnDeviceSizeInBytes(&a), "PJRT_Buffer_OnDeviceSizeInBytes");
  return a.on_device_size_in_bytes;
}

}  // namespace capstep::pjrt
