// cuda::Executable: device memory (inputs, statics, arena, cuBLAS workspace),
// uploads and downloads, and the step: enqueued eagerly the first time (which
// also lets cuBLAS finish its lazy set-up outside a capture), then captured
// once as a CUDA graph and replayed (Options::cuda_graph).
//
// Per step nothing crosses the host but what the caller uploads and downloads,
// plus the 24-byte device error flag of gather/scatter, read back so that a bad
// index is reported by the step that saw it.
#include <cstdio>
#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/executable_impl.h"
#include "capstep/transforms.h"

namespace capstep::cuda {

Executable::Impl::~Impl() {
  // Errors are ignored here: a destructor must not throw, and after a sticky
  // device fault every call fails anyway.
  if (graph_exec) cudaGraphExecDestroy(graph_exec);
  if (graph) cudaGraphDestroy(graph);
  if (loop_lib) cudaLibraryUnload(loop_lib);
  if (persist_lib) cudaLibraryUnload(persist_lib);
  if (attn_lib) cudaLibraryUnload(attn_lib);
  for (cudaEvent_t e : stage_done)
    if (e) cudaEventDestroy(e);
  for (void* p : h_stage)
    if (p) cudaFreeHost(p);
  if (h_err) cudaFreeHost(h_err);
  lt_gemm.clear();
  if (lt) cublasLtDestroy(lt);
  if (blas) cublasDestroy(blas);
  for (void* p : {static_cast<void*>(d_inputs), static_cast<void*>(d_statics), static_cast<void*>(d_arena), d_workspace,
                  static_cast<void*>(d_err)})
    if (p) cudaFree(p);
  if (stream) cudaStreamDestroy(stream);
}

char* Executable::Impl::addr(const plan::Loc& l) const {
  switch (l.space) {
    case plan::Space::inputs: return d_inputs + l.offset;
    case plan::Space::statics: return d_statics + l.offset;
    case plan::Space::arena: return d_arena + l.offset;
  }
  return nullptr;
}

void* Executable::Impl::device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const size_t ask = bytes < plan::kDeviceAlign ? plan::kDeviceAlign : bytes;
  const cudaError_t e = cudaMalloc(&p, ask);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    auto mib = [](size_t b) { return std::to_string(b / (1024 * 1024)) + " MiB"; };
    throw Error("out of device memory: program \"" + prog.name + "\" needs " + mib(ask) + " for its " + what +
                " (" + mib(held_bytes) + " already held by it); the device has " + mib(free_b) + " free of " +
                mib(total_b));
  }
  check(e, "cudaMalloc", std::string("for the ") + what);
  held_bytes += ask;
  return p;
}

std::string Executable::Impl::eqn_what(int eqn) const {
  return "equation " + std::to_string(eqn) + " (" + eqn_text(prog, prog.eqns[static_cast<size_t>(eqn)]) + ")";
}

void Executable::Impl::enqueue_step() {
  for (const Launch& l : launches) l.enqueue();
}

void Executable::Impl::check_device_error() {
  CAPSTEP_CU(cudaMemcpyAsync(h_err, d_err, sizeof(k::DeviceError), cudaMemcpyDeviceToHost, stream),
             "(reading the device error flag)");
  CAPSTEP_CU(cudaStreamSynchronize(stream), "(waiting for the step)");
  if (h_err->flag == 0) return;
  throw Error(index_error_text(prog, h_err->eqn, h_err->position, h_err->value));
}

Executable::Executable(Program p, Options o) : impl_(std::make_unique<Impl>()) {
  p = expand_adamw(p);  // AdamW by name (ir.h): the GPU runs its plain equations
  check_supported(p);
  std::string why;
  if (!available(&why)) throw Error("cuda::Executable: " + why);
  Impl& m = *impl_;
  m.prog = std::move(p);
  m.opt = o;
  verify(m.prog);
  CAPSTEP_CU(cudaSetDevice(0));
  // Generated code the compiler or the device refuses: say why on stderr (and
  // in describe_launches()), unload what was loaded, and go on without it.
  auto refused = [&](const Error& ex, const char* what, cudaLibrary_t& lib) {
    std::fprintf(stderr, "capstep cuda: %s for program \"%s\": %s\n", what, m.prog.name.c_str(), ex.what());
    (void)cudaGetLastError();
    if (lib) (void)cudaLibraryUnload(lib);
    lib = nullptr;
  };
  if (m.opt.fuse) {
    // Generated code is new code: when NVRTC or the loader refuses it, the
    // program still runs, one kernel per equation, and says why on stderr
    // (describe_launches() too; the GPU tests insist on the fused path).
    try {
      plan::KernelPlanOptions ko;
      if (!m.opt.generated_gemm) ko.gemm_max_macs = 0;
      m.kp = plan::plan_kernels(m.prog, ko);
      m.compile_kernels();
    } catch (const Error& ex) {
      m.fuse_failure = ex.what();
      refused(ex, "no fused kernels (running one kernel per equation)", m.loop_lib);
      m.source_kernel.clear();
      m.opt.fuse = false;
    }
  }
  if (m.opt.fuse && m.opt.persistent) {
    try {
      m.compile_persistent();
    } catch (const Error& ex) {
      m.persist_failure = ex.what();
      refused(ex, "no persistent kernel (launching the plan's kernels)", m.persist_lib);
      m.persist_kernel = nullptr;
    }
  }
  if (!m.opt.fuse) m.kp = plan::plan_kernels(m.prog, {false, 0});
  m.prog = m.kp.fused.program;  // the same equations, each fused group contiguous
  const plan::Plan& plan = m.kp.memory;

  CAPSTEP_CU(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.d_inputs = static_cast<char*>(m.device_alloc(plan.inputs_bytes, "inputs"));
  m.d_statics = static_cast<char*>(m.device_alloc(plan.statics_bytes, "constants"));
  m.d_arena = static_cast<char*>(m.device_alloc(plan.arena_bytes, "arena of intermediate values"));
  m.d_err = static_cast<k::DeviceError*>(m.device_alloc(sizeof(k::DeviceError), "error flag"));
  CAPSTEP_CU(cudaMallocHost(reinterpret_cast<void**>(&m.h_err), sizeof(k::DeviceError)));
  std::memset(m.h_err, 0, sizeof(k::DeviceError));
  m.point_error_flag();
  // a never-uploaded input reads as zeros; on our stream, so that it is ordered before any upload
  CAPSTEP_CU(cudaMemsetAsync(m.d_inputs, 0, plan.inputs_bytes, m.stream));

  bool any_dot = false;
  for (const Eqn& e : m.prog.eqns) any_dot |= e.op == Op::dot_general;
  if (any_dot) {
    CAPSTEP_CU(cublasCreate(&m.blas));
    CAPSTEP_CU(cublasSetStream(m.blas, m.stream));
    CAPSTEP_CU(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));
    m.workspace_bytes = size_t{32} << 20;  // NVIDIA's advice for Hopper; fixed so capture allocates nothing
    m.d_workspace = m.device_alloc(m.workspace_bytes, "cuBLAS workspace");
    CAPSTEP_CU(cublasSetWorkspace(m.blas, m.d_workspace, m.workspace_bytes));
    CAPSTEP_CU(cublasLtCreate(&m.lt));
  }
  m.fill_statics();
  m.build_launches();
  m.h_stage.assign(m.prog.inputs.size(), nullptr);
  m.stage_done.assign(m.prog.inputs.size(), nullptr);
  // The statics went up on the legacy default stream, which our non-blocking
  // stream does not wait for: finish all set-up work before the first step.
  CAPSTEP_CU(cudaDeviceSynchronize(), "(finishing the set-up of program \"" + m.prog.name + "\")");
}

Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;

const Program& Executable::program() const { return impl_->prog; }

size_t Executable::device_bytes() const { return impl_ ? impl_->held_bytes : 0; }

std::string Executable::describe_launches() const {
  const Impl& m = *impl_;
  if (!m.opt.fuse) {
    int n = 0;
    for (const Eqn& e : m.prog.eqns) n += e.op != Op::constant && e.op != Op::iota && e.op != Op::reshape;
    return "unfused: " + std::to_string(m.prog.eqns.size()) + " equations, " + std::to_string(n) + " launches" +
           (m.fuse_failure.empty() ? "" : " (the fused kernels failed: " + m.fuse_failure + ")");
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "; %d kernels per step, NVRTC %.2f s", m.kp.kernels(), m.nvrtc_seconds);
  int split = 0;
  for (const auto& g : m.lt_gemm) split += g && !g->single_kernel();
  std::string persistent;
  if (m.persist_kernel)
    persistent = "; persistent: the step as 1 cooperative kernel of " + std::to_string(m.kp.sources.size()) +
                 " phases on " + std::to_string(m.persist_grid) + " blocks";
  else if (m.opt.persistent)
    persistent = "; no persistent kernel: " + m.persist_failure;
  return "fused: " + m.kp.fused.summary() + buf +
         (split ? "; " + std::to_string(split) + " GEMMs could not avoid split-K (more kernels)" : "") + persistent;
}

void Executable::upload(int input, const Array& a) {
  Impl& m = *impl_;
  if (input < 0 || input >= static_cast<int>(m.prog.inputs.size()))
    throw Error("cuda::Executable::upload: input " + std::to_string(input) + " out of range (the program has " +
                std::to_string(m.prog.inputs.size()) + " inputs)");
  const Type& want = m.prog.input_type(input);
  if (a.type() != want)
    throw Error("cuda::Executable::upload: input \"" + m.prog.inputs[static_cast<size_t>(input)].name + "\" is " +
                want.str() + ", got " + a.type().str());
  if (a.bytes() == 0) return;
  const size_t i = static_cast<size_t>(input);
  // Through pinned staging: the copy is truly asynchronous and ordered before
  // the next step on the same stream; the event guards the staging buffer.
  if (!m.h_stage[i]) {
    CAPSTEP_CU(cudaMallocHost(&m.h_stage[i], a.bytes()));
    CAPSTEP_CU(cudaEventCreateWithFlags(&m.stage_done[i], cudaEventDisableTiming));
  } else {
    CAPSTEP_CU(cudaEventSynchronize(m.stage_done[i]));
  }
  std::memcpy(m.h_stage[i], a.raw(), a.bytes());
  CAPSTEP_CU(cudaMemcpyAsync(m.addr(m.plan().input_loc[i]), m.h_stage[i], a.bytes(), cudaMemcpyHostToDevice, m.stream),
             "(uploading input \"" + m.prog.inputs[i].name + "\")");
  CAPSTEP_CU(cudaEventRecord(m.stage_done[i], m.stream));
}

void Executable::step() {
  Impl& m = *impl_;
  CAPSTEP_CU(cudaSetDevice(0));
  // The first step runs eagerly; a graph is captured on the second.
  if (m.opt.cuda_graph && m.steps_run > 0 && !m.graph_exec && !m.graph_failed) {
    // A capture that fails (a library call that cannot be captured, say) is
    // not fatal: the step then runs its launches one by one, as said on stderr.
    CAPSTEP_CU(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
    bool capturing = true;
    try {
      m.enqueue_step();
      capturing = false;
      CAPSTEP_CU(cudaStreamEndCapture(m.stream, &m.graph), "(capturing the step as a CUDA graph)");
      CAPSTEP_CU(cudaGraphInstantiate(&m.graph_exec, m.graph, 0), "(instantiating the step's CUDA graph)");
    } catch (const Error& ex) {
      if (capturing) {
        cudaGraph_t g = nullptr;
        (void)cudaStreamEndCapture(m.stream, &g);
        if (g) cudaGraphDestroy(g);
      }
      if (m.graph) cudaGraphDestroy(m.graph);
      m.graph = nullptr;
      m.graph_exec = nullptr;
      (void)cudaGetLastError();
      m.graph_failed = true;
      std::fprintf(stderr, "capstep cuda: graph capture failed, running launches one by one: %s\n", ex.what());
    }
  }
  if (m.graph_exec) {
    CAPSTEP_CU(cudaGraphLaunch(m.graph_exec, m.stream), "(replaying the step's CUDA graph)");
  } else {
    m.enqueue_step();
  }
  ++m.steps_run;
  m.check_device_error();
}

void Executable::download_output(int output, Array& dst) {
  Impl& m = *impl_;
  if (output < 0 || output >= static_cast<int>(m.prog.outputs.size()))
    throw Error("cuda::Executable::download_output: output " + std::to_string(output) +
                " out of range (the program has " + std::to_string(m.prog.outputs.size()) + " outputs)");
  const Type& t = m.prog.output_type(output);
  dst.reset(t);
  if (t.bytes() == 0) return;
  CAPSTEP_CU(cudaMemcpyAsync(dst.raw(), m.addr(m.plan().output_loc[static_cast<size_t>(output)]), t.bytes(),
                             cudaMemcpyDeviceToHost, m.stream),
             "(downloading output \"" + m.prog.outputs[static_cast<size_t>(output)].name + "\")");
  CAPSTEP_CU(cudaStreamSynchronize(m.stream));
}

void Executable::download_input(int input, Array& dst) {
  Impl& m = *impl_;
  if (input < 0 || input >= static_cast<int>(m.prog.inputs.size()))
    throw Error("cuda::Executable::download_input: input " + std::to_string(input) + " out of range (the program has " +
                std::to_string(m.prog.inputs.size()) + " inputs)");
  const Type& t = m.prog.input_type(input);
  dst.reset(t);
  if (t.bytes() == 0) return;
  CAPSTEP_CU(cudaMemcpyAsync(dst.raw(), m.addr(m.plan().input_loc[static_cast<size_t>(input)]), t.bytes(),
                             cudaMemcpyDeviceToHost, m.stream),
             "(downloading input \"" + m.prog.inputs[static_cast<size_t>(input)].name + "\")");
  CAPSTEP_CU(cudaStreamSynchronize(m.stream));
}

std::vector<Array> Executable::run(const std::vector<Array>& inputs) {
  Impl& m = *impl_;
  if (inputs.size() != m.prog.inputs.size())
    throw Error("cuda::Executable::run: program \"" + m.prog.name + "\" takes " + std::to_string(m.prog.inputs.size()) +
                " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) upload(static_cast<int>(i), inputs[i]);
  step();
  std::vector<Array> out(m.prog.outputs.size());
  for (size_t o = 0; o < out.size(); ++o) download_output(static_cast<int>(o), out[o]);
  return out;
}

}  // namespace capstep::cuda
