// Compiling StableHLO text with a PJRT plugin, and running the executable.
#include "backend/pjrt/pjrt.h"
#include "capstep/ir.h"

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

Executable::Executable(const Client& c, const std::string& mlir) : c_(c) {
  std::string code = mlir;
  static const char kFormat[] = "mlir";
  PJRT_Program prog{};
  prog.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Program, format_size);
  prog.code = code.data();
  prog.code_size = code.size();
  prog.format = kFormat;
  prog.format_size = sizeof kFormat - 1;
  const std::string opts = compile_options(1, 1);
  PJRT_Client_Compile_Args a{};
  a.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Client_Compile_Args, executable);
  a.client = c.client;
  a.program = &prog;
  a.compile_options = opts.data();
  a.compile_options_size = opts.size();
  check(*c.plugin, c.api()->PJRT_Client_Compile(&a), "PJRT_Client_Compile");
  exe_ = a.executable;

  try {
    PJRT_LoadedExecutable_GetExecutable_Args g{};
    g.struct_size = CAPSTEP_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable);
    g.loaded_executable = exe_;
    check(*c.plugin, c.api()->PJRT_LoadedExecutable_GetExecutable(&g), "PJRT_LoadedExecutable_GetExecutable");
    PJRT_Executable_NumOutputs_Args n{};
    n.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_NumOutputs_Args, num_outputs);
    n.executable = g.executable;
    PJRT_Error* e = c.api()->PJRT_Executable_NumOutputs(&n);
    PJRT_Executable_Destroy_Args d{};
    d.struct_size = CAPSTEP_PJRT_SIZE(PJRT_Executable_Destroy_Args, executable);
    d.executable = g.executable;
    PJRT_Error* de = c.api()->PJRT_Executable_Destroy(&d);
    if (e) {  // the first error is the one to report
      discard(*c.plugin, de);
      de = nullptr;
    }
    check(*c.plugin, e, "PJRT_Executable_NumOutputs");
    check(*c.plugin, de, "PJRT_Executable_Destroy");
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
