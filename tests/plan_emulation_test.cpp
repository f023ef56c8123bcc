// The kernel plan run on the host, without a GPU: the generated CUDA source of
// every fused kernel (loop, row and column groups, the sinks) is compiled as
// C++ with a small stand-in for the CUDA built-ins (one thread at a time, or
// 32 std::threads in lockstep per warp for the row kernels' shuffles), and the
// plan's items run in order on host buffers laid out exactly as the device
// memory plan says (inputs, statics, arena, donated inputs, end copies); the
// other items (GEMMs, gathers, scatters) run their equation in the host
// interpreter. The outputs must match the interpreter running the original
// program, step after step with donated parameters: this checks the grouping,
// the generated index maps and reductions, the memory plan and the launch
// order on every machine, before a GPU ever sees them.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "backend/plan/kernel_plan.h"
#include "backend/plan/persistent.h"
#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "ir/bf16.h"
#include "test_util.h"

// The library kernels' bf16 functions (kernels_*.cu), compiled for the host
// with stand-ins for the three CUDA intrinsics they use.
#define __device__
#define __forceinline__ inline
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
#include "backend/cuda/bf16_device.cuh"
#undef __device__
#undef __forceinline__

namespace capstep {
namespace {
using test::norm_diff;
using test::slurp;
using test::TempDir;

// The interpreter as the reference of the generated CUDA kernels, which keep
// IEEE's subnormals (NVRTC's default): the host's gradual underflow too, not
// its default flush (InterpreterOptions::flush_subnormals).
std::vector<Array> ieee_run(const Program& p, const std::vector<Array>& in) {
  host::InterpreterOptions o;
  o.flush_subnormals = false;
  return host::run(p, in, o);
}

// The CUDA built-ins the generated kernels use, for a host compiler.
const char* const kShim = R"(#pragma once
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <stdexcept>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(n)
inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
namespace capstep_emu {
// Threads that meet (a warp's shuffles, a block's __syncthreads, the
// persistent kernel's grid barrier) run as fibers (ucontext) on the calling
// thread, each in turn until it waits: one OS thread, no locks, and always
// the same order of switches. A kernel's threads that never meet run one
// after another as plain calls.
void yield();
// n fibers meet here: each waits until the last one arrives.
struct Bar {
  unsigned n, count = 0, gen = 0;
  explicit Bar(unsigned n) : n(n) {}
  void arrive_and_wait() {
    const unsigned g = gen;
    if (++count == n) { count = 0; ++gen; return; }
    while (gen == g) yield();
  }
};
struct Warp { Bar bar{32}; unsigned char slot[32][8]; };
inline thread_local Warp* warp = nullptr;
inline thread_local Bar* block_bar = nullptr;
struct Fiber {
  ucontext_t ctx;
  void* stack = nullptr;
  dim3 tid, bid;
  Warp* warp = nullptr;
  Bar* bar = nullptr;
  bool done = false;
};
constexpr size_t kStack = size_t(1) << 18;  // mapped, so only the pages a thread touches are memory
constexpr size_t kGuard = 1 << 16;          // below each stack, unmapped for access: an overflow faults
struct Scheduler {
  ucontext_t main;
  std::deque<Fiber> fibers;  // their stacks are reused from launch to launch
  size_t current = 0;
  const std::function<void()>* task = nullptr;
};
inline Scheduler sched;
inline void yield() { swapcontext(&sched.fibers[sched.current].ctx, &sched.main); }
inline void fiber_main() {
  (*sched.task)();
  sched.fibers[sched.current].done = true;  // returns to sched.main (uc_link)
}
// Runs f on `count` fibers, set(i, fiber) giving fiber i its indices, warp
// and block barrier; round after round until every one has returned.
template <class Set> void run_fibers(unsigned count, const Set& set, const std::function<void()>& f) {
  while (sched.fibers.size() < count) {
    Fiber& fb = sched.fibers.emplace_back();
    void* m = mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED || mprotect(m, kGuard, PROT_NONE) != 0) throw std::runtime_error("no memory for a fiber's stack");
    fb.stack = static_cast<char*>(m) + kGuard;
  }
  for (unsigned i = 0; i < count; ++i) {
    Fiber& fb = sched.fibers[i];
    getcontext(&fb.ctx);
    fb.ctx.uc_stack.ss_sp = fb.stack;
    fb.ctx.uc_stack.ss_size = kStack;
    fb.ctx.uc_link = &sched.main;
    makecontext(&fb.ctx, fiber_main, 0);
    fb.done = false;
    set(i, fb);
  }
  sched.task = &f;
  for (unsigned live = count; live > 0;)
    for (unsigned i = 0; i < count; ++i) {
      Fiber& fb = sched.fibers[i];
      if (fb.done) continue;
      sched.current = i;
      threadIdx = fb.tid;
      blockIdx = fb.bid;
      warp = fb.warp;
      block_bar = fb.bar;
      swapcontext(&sched.main, &fb.ctx);
      if (fb.done) --live;
    }
}
// Blocks one after another; without lockstep every thread runs to the end on
// its own (no kernel but the row kernels talks across threads); with it, each
// warp's 32 lanes run together.
inline void run(unsigned blocks, unsigned threads, bool lockstep, const std::function<void()>& f) {
  gridDim = {blocks, 1, 1};
  blockDim = {threads, 1, 1};
  Warp wp;
  for (unsigned b = 0; b < blocks; ++b) {
    if (!lockstep) {
      for (unsigned t = 0; t < threads; ++t) { blockIdx = {b, 1, 1}; threadIdx = {t, 1, 1}; f(); }
      continue;
    }
    for (unsigned w = 0; w < threads / 32; ++w)
      run_fibers(32, [&](unsigned l, Fiber& fb) { fb.tid = {w * 32 + l, 1, 1}; fb.bid = {b, 1, 1}; fb.warp = &wp; fb.bar = nullptr; }, f);
  }
}
// blocks [first, first + count) of a grid of `blocks`, every thread of them
// at once: each warp's lanes meet at shuffles, each block's threads at
// __syncthreads, and (the persistent kernel) all of them at its grid barrier.
inline void run_concurrently(unsigned blocks, unsigned first, unsigned count, unsigned threads,
                             const std::function<void()>& f) {
  gridDim = {blocks, 1, 1};
  blockDim = {threads, 1, 1};
  std::vector<Warp> warps(count * threads / 32);
  std::deque<Bar> bars;
  for (unsigned b = 0; b < count; ++b) bars.emplace_back(threads);
  run_fibers(count * threads, [&](unsigned i, Fiber& fb) {
    const unsigned b = i / threads, t = i % threads;
    fb.tid = {t, 1, 1};
    fb.bid = {first + b, 1, 1};
    fb.warp = &warps[i / 32];
    fb.bar = &bars[b];
  }, f);
}
// The persistent kernel: every thread of every block at once (its grid
// barrier needs all blocks resident).
inline void run_grid(unsigned blocks, unsigned threads, const std::function<void()>& f) {
  run_concurrently(blocks, 0, blocks, threads, f);
}
// A kernel whose blocks synchronise their threads (__syncthreads): block
// after block, each with all its threads at once.
inline void run_blocks(unsigned blocks, unsigned threads, const std::function<void()>& f) {
  for (unsigned b = 0; b < blocks; ++b) run_concurrently(blocks, b, 1, threads, f);
}
}  // namespace capstep_emu
inline void __syncthreads() { capstep_emu::block_bar->arrive_and_wait(); }
// A block's shared array: one per block slot (blocks that run at once have
// different indices below 64; blocks run one after another reuse slots).
#define CAPSTEP_SHARED(T, name, n) \
  static T name##_slots[64][n];    \
  T* const name = name##_slots[blockIdx.x % 64]
inline void __threadfence() {}  // one OS thread: every write is seen at once
inline void __nanosleep(unsigned) { capstep_emu::yield(); }  // a spin (the grid barrier) lets the others run
// One OS thread, and a fiber switches only where it waits: these are plain.
inline unsigned atomicAdd(unsigned* a, unsigned v) { const unsigned old = *a; *a = old + v; return old; }
inline unsigned atomicExch(unsigned* a, unsigned v) { const unsigned old = *a; *a = v; return old; }
inline int atomicCAS(int* a, int expected, int desired) {  // returns the old value, as CUDA's
  const int old = *a;
  if (old == expected) *a = desired;
  return old;
}
// The attention kernels (plan/attention_source.h) declare their shared
// memory directly: blocks run one after another (run_blocks), so a
// function-local static is the block's shared memory.
#define __shared__ static
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
  capstep_emu::Warp& w = *capstep_emu::warp;
  const unsigned lane = threadIdx.x & 31;
  std::memcpy(w.slot[lane], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  std::memcpy(&r, w.slot[lane ^ static_cast<unsigned>(o)], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}
)";

const char* mem_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int";
    case DType::i1: return "unsigned char";
    case DType::bf16: return "unsigned short";  // the bits, as kernel_source.cpp's kernels take them
  }
  return "?";
}

using Launcher = void (*)(void** params, long long n, unsigned blocks);
// An attention kernel: the nine pointers of its signature, t, dh, the scale,
// and the grid.
using AttentionLauncher = void (*)(void** params, int t, int dh, double scale, unsigned blocks);

// The plan's generated kernels, compiled for the host and loaded.
class HostKernels {
 public:
  // With `persistent`: that one kernel (plan/persistent.h), run on
  // `grid` blocks with every thread at once, instead of kp's kernels.
  HostKernels(const plan::KernelPlan& kp, const std::string& dir, const plan::KernelSource* persistent = nullptr,
              unsigned grid = 0) {
    std::filesystem::create_directories(dir + "/ir");
    write(dir + "/cuda_host_shim.h", kShim);
    write(dir + "/ir/scalar_math.h", plan::kScalarMathText);
    const std::vector<plan::KernelSource> ks = persistent ? std::vector<plan::KernelSource>{*persistent} : kp.sources;
    std::string src = "#include \"cuda_host_shim.h\"\n" + plan::kernel_module_source(ks);
    const Program& p = kp.fused.program;
    for (const plan::KernelSource& k : ks) {
      const std::string threads = std::to_string(plan::kLoopThreads);
      const std::string run =
          persistent                                          ? "capstep_emu::run_grid(" + std::to_string(grid) + ", " + threads
          : k.code.find("__syncthreads") != std::string::npos ? "capstep_emu::run_blocks(blocks, " + threads
                                                              : "capstep_emu::run(blocks, " + threads + ", " +
                                                                    (k.code.find("__shfl_xor_sync") != std::string::npos ? "true" : "false");
      src += "extern \"C\" void launch_" + k.name + "(void** p, long long n, unsigned blocks) {\n  (void)blocks;\n  " + run +
             ", [&] { " + k.name + "(";
      for (size_t a = 0; a < k.params.size(); ++a)
        src += std::string("(") + (static_cast<int>(a) < k.n_inputs ? "const " : "") +
               mem_type(p.type(k.params[a]).dtype) + "*)p[" + std::to_string(a) + "], ";
      src += "n); });\n}\n";
    }
    // the attention kernels of the plan's attention items, each with a launcher
    std::vector<Type> qs;
    for (const Eqn& e : p.eqns)
      if (e.op == Op::attention || e.op == Op::attention_grad) qs.push_back(p.type(e.inputs[0]));
    if (!qs.empty()) src += plan::attention_module_source(qs);
    for (const Type& q : qs) {
      const plan::AttentionLaunch a = plan::attention_launch(q);
      const std::string t = mem_type(q.dtype);
      for (const std::string& name : {a.fwd, a.dq, a.dkv}) {
        if (!attention_names_.insert(name).second) continue;
        src += "extern \"C\" void launch_" + name + "(void** p, int t, int dh, double scale, unsigned blocks) {\n" +
               "  capstep_emu::run_blocks(blocks, " + std::to_string(a.rows) + ", [&] { " + name + "(";
        for (int k = 0; k < 9; ++k) src += "(" + std::string(k < 5 ? "const " : "") + t + "*)p[" + std::to_string(k) + "], ";
        src += "t, dh, (" + t + ")scale); });\n}\n";
      }
    }
    write(dir + "/kernels.cpp", src);
    const char* cxx = std::getenv("CXX");
    const std::string cmd = std::string(cxx && *cxx ? cxx : "c++") + " -std=c++20 -O1 -ffp-contract=off -shared -fPIC -I" +
                            dir + " " + dir + "/kernels.cpp -o " + dir + "/kernels.so -pthread 2> " + dir + "/cc.log";
    if (std::system(cmd.c_str()) != 0) throw Error("compiling the kernels for the host failed:\n" + slurp(dir + "/cc.log"));
    lib_ = dlopen((dir + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw Error(std::string("dlopen: ") + dlerror());
    for (const plan::KernelSource& k : ks) {
      void* f = dlsym(lib_, ("launch_" + k.name).c_str());
      if (!f) throw Error("no launcher for " + k.name);
      launch_.push_back(reinterpret_cast<Launcher>(f));
    }
    for (const std::string& name : attention_names_) {
      void* f = dlsym(lib_, ("launch_" + name).c_str());
      if (!f) throw Error("no launcher for " + name);
      attention_[name] = reinterpret_cast<AttentionLauncher>(f);
    }
  }
  ~HostKernels() {
    if (lib_) dlclose(lib_);
  }
  Launcher operator[](int source) const { return launch_.at(static_cast<size_t>(source)); }
  // The module's capstep_err: where its generated gathers and scatters report
  // an index outside their table (the executor points it at its error flag).
  void set_error_flag(void* flag) const {
    void* slot = dlsym(lib_, "capstep_err");
    if (!slot) throw Error("the kernels have no capstep_err");
    std::memcpy(slot, &flag, sizeof flag);
  }
  AttentionLauncher attention(const std::string& name) const { return attention_.at(name); }

 private:
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  void* lib_ = nullptr;
  std::vector<Launcher> launch_;
  std::set<std::string> attention_names_;
  std::map<std::string, AttentionLauncher> attention_;
};

// One equation in the interpreter, on the plan's buffers.
class HostPlanRunner {
 public:
  // With `persistent`, k holds that one kernel (HostKernels' persistent).
  HostPlanRunner(const plan::KernelPlan& kp, const HostKernels& k, const plan::KernelSource* persistent = nullptr)
      : kp_(kp), k_(k), persistent_(persistent) {
    const plan::Plan& m = kp.memory;
    space_[plan::Space::inputs].assign(m.inputs_bytes + 8, 0);
    space_[plan::Space::statics].assign(m.statics_bytes + 8, 0);
    space_[plan::Space::arena].assign(m.arena_bytes + 8, 0);
    const Program& p = kp.fused.program;
    for (size_t d = 0; d < p.eqns.size(); ++d)
      if (p.eqns[d].op == Op::constant || p.eqns[d].op == Op::iota) run_eqn(static_cast<int>(d));
  }
  void upload(int input, const Array& a) {
    std::memcpy(at(kp_.memory.input_loc[static_cast<size_t>(input)]), a.raw(), a.bytes());
  }
  Array input(int i) const {
    Array a(kp_.fused.program.input_type(i));
    std::memcpy(a.raw(), at(kp_.memory.input_loc[static_cast<size_t>(i)]), a.bytes());
    return a;
  }
  Array output(int o) const {
    Array a(kp_.fused.program.output_type(o));
    std::memcpy(a.raw(), at(kp_.memory.output_loc[static_cast<size_t>(o)]), a.bytes());
    return a;
  }
  void step() {
    const Program& p = kp_.fused.program;
    int last_single = -1;
    if (persistent_) {
      std::vector<void*> ptrs;
      for (int x : persistent_->params) ptrs.push_back(value(x));
      k_[0](ptrs.data(), persistent_->numel, persistent_->blocks);
    }
    for (const plan::Item& it : kp_.items) {
      if (persistent_) break;
      if (it.source >= 0) {
        const plan::KernelSource& ks = kp_.sources[static_cast<size_t>(it.source)];
        std::vector<void*> ptrs;
        for (int x : ks.params) ptrs.push_back(value(x));
        k_[it.source](ptrs.data(), ks.numel, ks.blocks);
      } else if (it.kind == plan::ItemKind::attention && it.eqn != last_single) {
        run_attention(it);
        last_single = it.eqn;
      } else if (it.kind != plan::ItemKind::end_copy && it.eqn != last_single) {
        run_eqn(it.eqn);
        last_single = it.eqn;
      }
    }
    for (const plan::EndCopy& c : kp_.memory.end_copies) std::memmove(at(c.to), at(c.from), c.bytes);
    (void)p;
  }

 private:
  char* at(const plan::Loc& l) const { return const_cast<char*>(space_.at(l.space).data()) + l.offset; }
  char* value(int x) const { return at(kp_.memory.values[static_cast<size_t>(x)].loc); }
  // An attention item's kernels, as the CUDA executor launches them
  // (src/backend/cuda/attention_launch.cpp).
  void run_attention(const plan::Item& it) {
    const Program& p = kp_.fused.program;
    const Eqn& e = p.eqns[static_cast<size_t>(it.eqn)];
    const plan::AttentionLaunch a = plan::attention_launch(p.type(e.inputs[0]));
    if (a.blocks == 0 || a.t == 0) return;
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.dh));
    void* ptr[9] = {};
    for (size_t k = 0; k < e.inputs.size(); ++k) ptr[k] = value(e.inputs[k]);
    if (e.op == Op::attention) {
      ptr[5] = value(e.out);
      k_.attention(a.fwd)(ptr, a.t, a.dh, scale, a.blocks);
      return;
    }
    void* res[3] = {nullptr, nullptr, nullptr};
    for (int m : it.eqns) res[p.eqns[static_cast<size_t>(m)].attrs.axis] = value(p.eqns[static_cast<size_t>(m)].out);
    char* lse = at(kp_.memory.scratch_loc[static_cast<size_t>(it.eqn)].at(0));
    ptr[7] = lse;
    ptr[8] = lse + a.scratch_bytes / 2;
    ptr[5] = res[0];
    k_.attention(a.dq)(ptr, a.t, a.dh, scale, a.blocks);
    if (!res[1] && !res[2]) return;
    ptr[5] = res[1];
    ptr[6] = res[2];
    k_.attention(a.dkv)(ptr, a.t, a.dh, scale, a.blocks);
  }
  void run_eqn(int d) {
    const Program& p = kp_.fused.program;
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    Program one;
    std::vector<Array> args;
    std::vector<int> ins;
    for (int x : e.inputs) {
      ins.push_back(one.add_input("x" + std::to_string(ins.size()), p.type(x)));
      Array a(p.type(x));
      std::memcpy(a.raw(), value(x), a.bytes());
      args.push_back(std::move(a));
    }
    one.add_output("y", one.add_eqn_typed(e.op, ins, e.attrs, p.type(e.out)));
    const Array y = ieee_run(one, args)[0];
    std::memcpy(value(e.out), y.raw(), y.bytes());
  }
  const plan::KernelPlan& kp_;
  const HostKernels& k_;
  const plan::KernelSource* persistent_ = nullptr;
  std::map<plan::Space, std::vector<char>> space_;
};

nn::LmConfig small_config() {
  nn::LmConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 48;
  c.context = 16;
  c.batch = 3;
  c.seq = 11;
  return c;
}


// `steps` steps of `prog` (a small model's gradient program, or its fused
// AdamW program when `opt` is given) through kp on the host (with
// `persistent`: kp as that one kernel), against the interpreter.
// `tol`: the bound on norm_diff of the loss, gradients and moments, and the
// rounding of the updated parameters; `worst`, if given, gets the largest
// norm_diff seen among the former.
void expect_plan_matches_interpreter(const nn::LmConfig& c, const Program& prog, const optim::AdamW* opt,
                                     const plan::KernelPlan& kp, const HostKernels& kernels,
                                     const plan::KernelSource* persistent, int steps, double tol = 2e-5,
                                     double* worst = nullptr) {
  HostPlanRunner run(kp, kernels, persistent);
  const Program& p = kp.fused.program;  // same inputs and outputs as prog, in the same order
  std::vector<Array> in;
  std::vector<Array> params = nn::init_parameters(c, 5);
  std::mt19937 rng(9);
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Type& t = p.input_type(static_cast<int>(i));
    Array a(t);
    if (i < params.size()) a = params[i];
    in.push_back(std::move(a));
  }
  for (int s = 1; s <= steps; ++s) {
    for (const char* b : {"tokens", "targets"}) {
      const int i = p.input_index(b);
      for (int64_t k = 0; k < in[static_cast<size_t>(i)].numel(); ++k)
        in[static_cast<size_t>(i)].set(k, static_cast<double>(rng() % static_cast<unsigned>(c.vocab)));
    }
    if (opt) {
      const optim::AdamWScalars sc = optim::adamw_scalars(*opt, s);
      const float four[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
      for (int k = 0; k < 4; ++k) in[static_cast<size_t>(p.input_index(optim::kScalarNames[k]))] = Array::scalar(four[k]);
    }
    // Gradient accumulation (update_on_last): the update on even steps only.
    if (const int l = p.input_index(optim::kAccumLastName); l >= 0)
      in[static_cast<size_t>(l)] = Array::scalar(s % 2 == 0 ? 1.0f : 0.0f);
    // Every step starts from the host's state (an updated parameter may
    // differ by up to 2 lr, below, and would make the next step's
    // comparison meaningless); that the donated inputs carry the outputs
    // from step to step is checked bit for bit after each step.
    for (size_t i = 0; i < in.size(); ++i) run.upload(static_cast<int>(i), in[i]);
    const std::vector<Array> want = ieee_run(prog, in);
    run.step();
    for (size_t o = 0; o < want.size(); ++o) {
      const Array got = run.output(static_cast<int>(o));
      const std::string& name = p.outputs[o].name;
      const bool param = name.size() > 4 && name.compare(name.size() - 4, 4, ".new") == 0 && name.rfind("adamw.", 0) != 0 &&
                         name.rfind("accum.", 0) != 0;
      // GPT-2's key bias adds one number to every score of a softmax row: its
      // gradient is zero but for rounding, which differs with the order of
      // the sums, and AdamW scales that noise up to steps of +-lr. So: the
      // gradient tiny in both, the parameter within 2 lr, the moments unchecked.
      if (name.find(".attn.bk") != std::string::npos) {
        double g = 0, w = 0, step_diff = 0;
        for (int64_t k = 0; k < got.numel(); ++k) {
          g = std::max(g, std::fabs(got.get(k)));
          w = std::max(w, std::fabs(want[o].get(k)));
          step_diff = std::max(step_diff, std::fabs(got.get(k) - want[o].get(k)));
        }
        if (name.rfind("grad.", 0) == 0) {
          EXPECT_LT(g, 1e-6) << "step " << s << " output " << name;
          EXPECT_LT(w, 1e-6) << "step " << s << " output " << name;
        } else if (param) {
          EXPECT_LE(step_diff, 2 * opt->lr * (1 + 1e-6)) << "step " << s << " output " << name;
        }
        continue;
      }
      if (!param) {
        // loss, gradients, moments: sums in another order (double, then rounded), rounding only
        const double d = norm_diff(got, want[o]);
        if (worst) *worst = std::max(*worst, d);
        EXPECT_LE(d, tol) << "step " << s << " output " << name;
        continue;
      }
      // an updated parameter: within 2 lr, 99% of it within rounding (test_util.h)
      test::expect_updated_param_close(got, want[o], opt->lr, tol, "step " + std::to_string(s) + " output " + name);
    }
    for (const Alias& a : p.aliases) {
      EXPECT_TRUE(run.input(a.input).bit_equal(run.output(a.output)))
          << "step " << s << ": input " << p.inputs[static_cast<size_t>(a.input)].name
          << " does not hold output " << p.outputs[static_cast<size_t>(a.output)].name;
      in[static_cast<size_t>(a.input)] = want[static_cast<size_t>(a.output)];
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// Three steps of the fused AdamW program of a small model (and of its
// gradient program) through the plan on the host, against the interpreter.
// fused_attention: the loss program through fuse_attention (the attention
// kernels run too).
void check_training_steps(bool fused_attention, nn::Arch arch = nn::Arch::seed, bool checkpoint = false) {
  nn::LmConfig c = small_config();
  c.arch = arch;
  if (arch == nn::Arch::llama) c.n_heads = 4, c.n_kv_heads = 2;   // head width 8, grouped-query attention
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const optim::AdamW opt;
  const Program loss = nn::lm_loss_program(c);
  Program grad = value_and_grad(fused_attention ? fuse_attention(loss) : loss, names);
  if (checkpoint) grad = checkpoint_activations(grad, checkpoint_regions(grad));
  const Program fused = optim::with_adamw(grad, names, opt);
  TempDir dir;
  for (const Program* prog : {static_cast<const Program*>(&grad), &fused}) {
    SCOPED_TRACE(prog == &grad ? "gradient program" : "fused AdamW program");
    const plan::KernelPlan kp = plan::plan_kernels(*prog);
    ASSERT_FALSE(kp.sources.empty());
    const HostKernels kernels(kp, dir.file(prog == &grad ? "grad" : "fused"));
    expect_plan_matches_interpreter(c, *prog, prog == &fused ? &opt : nullptr, kp, kernels, nullptr, 3);
  }
}

// The persistent kernel (plan/persistent.h): the fused AdamW step of a small
// model as one kernel of the plan's kernels as phases with grid barriers
// between them, run with every thread of 2 blocks at once (so the barrier is
// really crossed by several blocks, and each phase strides over its blocks),
// two steps against the interpreter as above.
TEST(PlanEmulation, PersistentKernelStepsMatchTheInterpreter) {
  nn::LmConfig c = small_config();
  c.n_layers = 1;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const optim::AdamW opt;
  const Program fused = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, opt);
  const plan::KernelPlan kp = plan::plan_kernels(fused);
  ASSERT_EQ(plan::persistent_blocker(kp), "");
  const plan::KernelSource pk = plan::persistent_kernel_source(kp);
  EXPECT_EQ(pk.code.find("__global__"), pk.code.rfind("__global__")) << "one kernel";
  size_t barriers = 0;
  for (size_t at = pk.code.find("capstep_grid_sync();"); at != std::string::npos; at = pk.code.find("capstep_grid_sync();", at + 1))
    ++barriers;
  EXPECT_EQ(barriers, kp.sources.size() - 1) << "a barrier between each two phases";
  TempDir dir;
  const HostKernels kernels(kp, dir.file("persistent"), &pk, 2);
  expect_plan_matches_interpreter(c, fused, &opt, kp, kernels, &pk, 2);
}

// A plan with a library kernel cannot be one kernel, and says which.
TEST(PlanEmulation, PersistentKernelNamesWhatStopsIt) {
  const nn::LmConfig c = small_config();
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  plan::KernelPlanOptions library;
  library.gemm_max_macs = 0;  // every GEMM through the library
  const plan::KernelPlan kp = plan::plan_kernels(value_and_grad(nn::lm_loss_program(c), names), library);
  const std::string why = plan::persistent_blocker(kp);
  EXPECT_NE(why.find("(gemm: "), std::string::npos) << why;
  EXPECT_NE(why.find("is not a generated kernel"), std::string::npos) << why;
  try {
    plan::persistent_kernel_source(kp);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be one kernel"), std::string::npos) << e.what();
  }
}

// A column reduction over more rows than the row lanes (5000 of them, the
// scale of a large model's gain gradients) and a kept count that is no
// multiple of the tile (21), with a producer and a consumer in its group,
// and a max beside the sum: the col kernel against the interpreter.
TEST(PlanEmulation, ColumnReductionOverManyRows) {
  Program p;
  p.name = "columns";
  const int x = p.add_input("x", {DType::f32, {5000, 21}});
  const int sq = p.add_eqn(Op::multiply, {x, x}, {});
  Attrs over_rows;
  over_rows.dims = {0};
  const int s = p.add_eqn(Op::reduce_sum, {sq}, over_rows);
  const int m = p.add_eqn(Op::reduce_max, {x}, over_rows);
  p.add_output("norm", p.add_eqn(Op::sqrt, {s}, {}));
  p.add_output("max", p.add_eqn(Op::add, {m, s}, {}));
  const plan::KernelPlan kp = plan::plan_kernels(p);
  ASSERT_EQ(kp.kernels(), 1) << kp.describe();
  EXPECT_EQ(kp.items[0].kind, plan::ItemKind::col) << kp.describe();
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(4);
  Array a({DType::f32, {5000, 21}});
  for (int64_t k = 0; k < a.numel(); ++k) a.set(k, std::uniform_real_distribution<double>(-1, 1)(rng));
  run.upload(0, a);
  run.step();
  // the kernel sums in double and rounds once: against exact sums, f32 rounding
  Array exact_norm({DType::f32, {21}}), exact_max({DType::f32, {21}});
  for (int64_t c = 0; c < 21; ++c) {
    double sum = 0, top = -INFINITY;
    for (int64_t r = 0; r < 5000; ++r) {
      const double v = a.get(r * 21 + c);
      sum += static_cast<double>(static_cast<float>(v * v));
      top = std::max(top, v);
    }
    exact_norm.set(c, std::sqrt(static_cast<double>(static_cast<float>(sum))));
    exact_max.set(c, top + static_cast<double>(static_cast<float>(sum)));
  }
  EXPECT_LE(norm_diff(run.output(0), exact_norm), 2.4e-7);
  EXPECT_LE(norm_diff(run.output(1), exact_max), 2.4e-7);
  // the interpreter sums in f32 in row order: within its own rounding (5000 additions)
  const std::vector<Array> want = ieee_run(p, {a});
  EXPECT_LE(norm_diff(run.output(0), want[0]), 1e-5);
  EXPECT_LE(norm_diff(run.output(1), want[1]), 1e-5);
}

// One step of kp's items on the host from inputs whose element k of input i
// is value(i, k) (called in that order), beside the interpreter (IEEE) on the
// same inputs.
struct OneStep {
  std::vector<Array> got, want;
};
OneStep one_step(const Program& p, const plan::KernelPlan& kp, const std::function<double(int, int64_t)>& value) {
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  std::vector<Array> in;
  for (int i = 0; i < static_cast<int>(p.inputs.size()); ++i) {
    Array a(p.input_type(i));
    for (int64_t k = 0; k < a.numel(); ++k) a.set(k, value(i, k));
    run.upload(i, a);
    in.push_back(std::move(a));
  }
  run.step();
  OneStep r;
  for (int o = 0; o < static_cast<int>(p.outputs.size()); ++o) r.got.push_back(run.output(o));
  r.want = ieee_run(p, in);
  return r;
}

// Rotate-half (slices, a concatenate) and a pad, and their gradient: the
// plan gives each its own launches (a strided copy, a fill and a store, a
// store per operand) between the fused groups around them, and the memory
// plan keeps every operand alive until they have run.
TEST(PlanEmulation, SlicePadConcatenateBetweenFusedGroups) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2, 3, 6, 8}});
  Tensor cs = tr.input("cos", {DType::f32, {6, 8}});
  Tensor sn = tr.input("sin", {DType::f32, {6, 8}});
  Tensor x1 = slice(x, {0, 0, 0, 0}, {2, 3, 6, 4}), x2 = slice(x, {0, 0, 0, 4}, {2, 3, 6, 8});
  Tensor r = x * cs + concatenate({-x2, x1}, -1) * sn;
  Tensor padded = pad(tanh(r), {0, 0, 1, 0}, {0, 0, 0, 2});
  Tensor loss = sum(padded * padded) + sum(slice(r, {0, 0, 0, 0}, {2, 3, 6, 8}, {1, 2, 2, 3}));
  Program p = value_and_grad(tr.finish({{"loss", loss}, {"padded", padded}}), {"x", "cos"});
  const plan::KernelPlan kp = plan::plan_kernels(p);
  int strided = 0, fill = 0;
  for (const plan::Item& it : kp.items) {
    strided += it.kind == plan::ItemKind::strided;
    fill += it.kind == plan::ItemKind::fill;
  }
  EXPECT_GE(strided, 5) << kp.describe();
  EXPECT_GE(fill, 1) << kp.describe();
  std::mt19937 rng(5);
  const OneStep st = one_step(p, kp, [&](int, int64_t) { return std::uniform_real_distribution<double>(-1, 1)(rng); });
  ASSERT_EQ(st.want.size(), p.outputs.size());
  for (size_t o = 0; o < st.want.size(); ++o) EXPECT_LE(norm_diff(st.got[o], st.want[o]), 1e-6) << p.outputs[o].name;
}

// A product fused into a row kernel whose right operand is a splat constant:
// the product's loop reads the constant from its buffer in statics (the
// kernel once asked for a parameter it never declared), and the row sum of
// the product matches the interpreter.
TEST(PlanEmulation, RowKernelProductOfASplatConstant) {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {3, 5}});
  Tensor b = tr.input("b", {DType::f32, {3}});
  Tensor w = tr.constant({DType::f32, {5, 3}}, {0.5});
  Tensor y = broadcast_in_dim(b, {3, 5}, {0}) * x;
  const Program p = tr.finish({{"s", sum(dot_general(y, w, DotDims{{}, {}, {1}, {0}}), {1})}});
  const plan::KernelPlan kp = plan::plan_kernels(p);
  int rows = 0;
  for (const plan::Item& it : kp.items) rows += it.kind == plan::ItemKind::row;
  EXPECT_EQ(rows, 1) << kp.describe();
  const OneStep r = one_step(p, kp, [](int i, int64_t k) { return 0.25 * static_cast<double>(k + 1 + 7 * i); });
  EXPECT_LE(norm_diff(r.got[0], r.want[0]), 1e-6);
  EXPECT_GT(r.want[0].get(2), 1.0);
}

// A gather whose indices are a splat constant, in a fused kernel: the
// kernel reads the indices from their buffer (a splat there once threw
// map::at too), and the rows match the interpreter.
TEST(PlanEmulation, GatherOfSplatIndicesInAFusedKernel) {
  Tracer tr;
  Tensor table = tr.input("table", {DType::f32, {4, 3}});
  Tensor y = tr.input("y", {DType::f32, {5, 3}});
  Tensor idx = tr.constant({DType::i32, {5}}, {2});
  const Program p = tr.finish({{"g", gather_rows(table, idx) * 2.0 + y}});
  const OneStep r = one_step(p, plan::plan_kernels(p), [](int i, int64_t k) { return 0.5 * static_cast<double>(k + 1 + 20 * i); });
  EXPECT_TRUE(r.got[0].bit_equal(r.want[0]));
  EXPECT_EQ(r.want[0].get(0), 2 * 3.5 + 10.5);  // table[2][0] = 3.5, y[0][0] = 10.5
}

// The layout of cuda::k::DeviceError and of the kernels' capstep_device_error.
struct DeviceError {
  int flag = 0, eqn = 0;
  long long position = 0, value = 0;
};

// Generated scatter_add_rows: a thread per output element sums its rows in
// index order, so repeated indices give the interpreter's sums bit for bit;
// an index outside the table is reported (equation, position, value) and the
// other elements are still right.
TEST(PlanEmulation, GeneratedScatterSumsInIndexOrderAndReportsBadIndices) {
  Program p;
  p.name = "scatter";
  const int op = p.add_input("operand", {DType::f32, {6, 5}});
  const int idx = p.add_input("idx", {DType::i32, {3, 4}});
  const int upd = p.add_input("upd", {DType::f32, {3, 4, 5}});
  const int y = p.add_eqn(Op::scatter_add_rows, {op, idx, upd}, {});
  p.add_output("y", p.add_eqn(Op::multiply, {y, y}, {}));
  const plan::KernelPlan kp = plan::plan_kernels(p);
  int gen = 0;
  for (const plan::Item& it : kp.items) gen += it.kind == plan::ItemKind::scatter_gen;
  ASSERT_EQ(gen, 1) << kp.describe();
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  DeviceError err;
  kernels.set_error_flag(&err);
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(3);
  Array a({DType::f32, {6, 5}}), u({DType::f32, {3, 4, 5}}), ix({DType::i32, {3, 4}});
  for (int64_t k = 0; k < a.numel(); ++k) a.set(k, std::uniform_real_distribution<double>(-1, 1)(rng));
  for (int64_t k = 0; k < u.numel(); ++k) u.set(k, std::uniform_real_distribution<double>(-1, 1)(rng));
  const int rows[12] = {2, 0, 2, 5, 2, 1, 0, 2, 4, 2, 3, 2};  // row 2 five times: the order of its sums matters
  for (int64_t k = 0; k < 12; ++k) ix.set(k, rows[k]);
  const std::vector<Array> in = {a, ix, u};
  for (int i = 0; i < 3; ++i) run.upload(i, in[static_cast<size_t>(i)]);
  run.step();
  EXPECT_EQ(err.flag, 0);
  EXPECT_TRUE(run.output(0).bit_equal(ieee_run(p, in)[0]));

  ix.set(7, 6);  // one past the table
  run.upload(1, ix);
  run.step();
  EXPECT_EQ(err.flag, 1);
  EXPECT_EQ(kp.fused.program.eqns.at(static_cast<size_t>(err.eqn)).op, Op::scatter_add_rows);
  EXPECT_EQ(err.position, 7);
  EXPECT_EQ(err.value, 6);
}

// The seed model's gradient step on the plan's generated kernels, run in the
// host emulation with the device's error flag: what a bad index reports.
struct SeedGradOnThePlan {
  nn::LmConfig c = small_config();
  plan::KernelPlan kp;
  TempDir dir;
  std::unique_ptr<HostKernels> kernels;
  std::unique_ptr<HostPlanRunner> run;
  DeviceError err;
  Array tokens, targets;

  SeedGradOnThePlan() {
    std::vector<std::string> names;
    for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
    kp = plan::plan_kernels(value_and_grad(nn::lm_loss_program(c), names));
    for (const plan::Item& it : kp.items) EXPECT_NE(it.kind, plan::ItemKind::gather) << "a gather left to the library";
    kernels = std::make_unique<HostKernels>(kp, dir.file("k"));
    kernels->set_error_flag(&err);
    run = std::make_unique<HostPlanRunner>(kp, *kernels);
    const std::vector<Array> params = nn::init_parameters(c, 5);
    for (size_t i = 0; i < params.size(); ++i) run->upload(static_cast<int>(i), params[i]);
    tokens = Array({DType::i32, {c.batch, c.seq}});
    targets = tokens;
  }
  const Program& program() const { return kp.fused.program; }
  // One step on `tokens` and `targets`; the flag as it is after it.
  int step() {
    run->upload(program().input_index("tokens"), tokens);
    run->upload(program().input_index("targets"), targets);
    run->step();
    return err.flag;
  }
  // The flagged equation is the gather of `input`, at `position`, of `value`.
  void expect_gather_of(const std::string& input, int64_t position, int64_t value) const {
    const Program& p = program();
    const Eqn& e = p.eqns.at(static_cast<size_t>(err.eqn));
    EXPECT_EQ(e.op, Op::gather_rows);
    EXPECT_EQ(e.inputs.at(1), p.inputs.at(static_cast<size_t>(p.input_index(input))).value);
    EXPECT_EQ(err.position, position);
    EXPECT_EQ(err.value, value);
  }
};

// A token outside the vocabulary: the generated gather (the embedding, fused
// into a loop kernel) reports its equation, position and value.
TEST(PlanEmulation, GeneratedGatherReportsATokenOutsideTheTable) {
  SeedGradOnThePlan s;
  s.tokens.set(13, 64);  // vocabulary 0..63
  ASSERT_EQ(s.step(), 1);
  s.expect_gather_of("tokens", 13, 64);
}

// A target outside the vocabulary: cross_entropy's gather of the labels
// (generated, in a loop kernel) reports it as the embedding's gather reports a
// bad token, so the executor names the targets and the position.
TEST(PlanEmulation, GeneratedGatherReportsATargetOutsideTheClasses) {
  SeedGradOnThePlan s;
  const nn::LmConfig& c = s.c;
  const Program& p = s.program();
  DeviceError& err = s.err;
  EXPECT_EQ(s.step(), 0);
  s.targets.set(21, -1);
  ASSERT_EQ(s.step(), 1);
  s.expect_gather_of("targets", 21, -1);
  // What cuda::Executable then throws (the host's text, the same function).
  EXPECT_EQ(index_error_text(p, err.eqn, err.position, err.value).rfind(
                "gather_rows: index -1 at position 21 [" + std::to_string(21 / c.seq) + "," + std::to_string(21 % c.seq) +
                    "] of the indices i32[" + std::to_string(c.batch) + "," +
                    std::to_string(c.seq) + "] (input \"targets\") is out of range [0, " + std::to_string(c.vocab) + ")",
                0),
            0u)
      << index_error_text(p, err.eqn, err.position, err.value);
}

TEST(PlanEmulation, FusedTrainingStepsMatchTheInterpreter) { check_training_steps(false); }

// Gradient accumulation's fused step (optim::accumulate_gradients of 2, then
// with_adamw and update_on_last): steps 1 and 3 add into the donated
// accumulators and keep the state, step 2 updates it and zeroes them.
TEST(PlanEmulation, AccumulatingFusedStepMatchesTheInterpreter) {
  const nn::LmConfig c = small_config();
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const optim::AdamW opt;
  const Program step = optim::update_on_last(
      optim::with_adamw(optim::accumulate_gradients(value_and_grad(nn::lm_loss_program(c), names), names, 2), names, opt),
      names);
  TempDir dir;
  const plan::KernelPlan kp = plan::plan_kernels(step);
  const HostKernels kernels(kp, dir.file("accum"));
  expect_plan_matches_interpreter(c, step, &opt, kp, kernels, nullptr, 3);
}

// bf16 in the generated kernels, bit for bit against the interpreter where the
// order of operations is the same (elementwise, no sums): f32 -> bf16 at ties
// (even and odd), at overflow, NaN (both signs) and infinities; f64 and i32 ->
// bf16 rounded once (1 + 2^-8 + 2^-30 as f64 rounds up; through f32 it would
// tie and round to even, down); bf16 arithmetic in f32 rounded on every
// store, a bf16 value kept in registers between two members, compare and
// select on bf16, a bf16 max reduction, bf16 -> f32 / i32 / i1.
TEST(PlanEmulation, Bf16KernelsRoundAsTheInterpreterBitForBit) {
  Program p;
  p.name = "bf16";
  const int64_t n = 64;
  const int x = p.add_input("x", {DType::f32, {n}});
  const int y = p.add_input("y", {DType::f32, {n}});
  const int z = p.add_input("z", {DType::f64, {n}});
  const int w = p.add_input("w", {DType::i32, {n}});
  const int hb = p.add_input("h", {DType::bf16, {n}});
  auto cvt = [&](int v, DType t) { return p.add_eqn_typed(Op::convert, {v}, {}, Type{t, {n}}); };
  const int xb = cvt(x, DType::bf16), yb = cvt(y, DType::bf16);
  const int sum = p.add_eqn(Op::add, {xb, yb}, {});           // rounded, kept in a register
  const int prod = p.add_eqn(Op::multiply, {sum, hb}, {});     // from the register and from memory
  const int e = p.add_eqn(Op::exponential, {p.add_eqn(Op::negate, {hb}, {})}, {});
  Attrs lt;
  lt.cmp = Cmp::LT;
  const int less = p.add_eqn(Op::compare, {xb, hb}, lt);
  const int sel = p.add_eqn(Op::select, {less, prod, e}, {});
  p.add_output("x_bf16", xb);
  p.add_output("sel", sel);
  p.add_output("sel_f32", cvt(sel, DType::f32));
  p.add_output("z_bf16", cvt(z, DType::bf16));
  p.add_output("w_bf16", cvt(w, DType::bf16));
  p.add_output("h_i32", cvt(hb, DType::i32));
  p.add_output("h_i1", cvt(hb, DType::i1));
  Attrs all;
  all.dims = {0};
  p.add_output("max", p.add_eqn(Op::reduce_max, {prod}, all));
  const plan::KernelPlan kp = plan::plan_kernels(p);
  for (const plan::Item& it : kp.items) EXPECT_GE(it.source, 0) << "not a generated kernel: " << it.what;
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(7);
  Array xa({DType::f32, {n}}), ya({DType::f32, {n}}), za({DType::f64, {n}}), wa({DType::i32, {n}}), ha({DType::bf16, {n}});
  for (int64_t k = 0; k < n; ++k) {
    xa.set(k, std::uniform_real_distribution<double>(-3, 3)(rng));
    ya.set(k, std::uniform_real_distribution<double>(-3, 3)(rng));
    za.set(k, std::uniform_real_distribution<double>(-1e3, 1e3)(rng));
    wa.set(k, static_cast<double>(static_cast<int>(rng() % 2000001) - 1000000));
    ha.set(k, std::uniform_real_distribution<double>(-4, 4)(rng));
  }
  auto bits = [](uint32_t b) { float f; std::memcpy(&f, &b, 4); return static_cast<double>(f); };
  const double special[] = {bits(0x3F808000u),  // 1 + 2^-8: a tie, rounds to even (down)
                            bits(0x3F818000u),  // 1 + 3 * 2^-8: a tie, rounds to even (up)
                            bits(0x3F808001u),  // just above a tie: up
                            bits(0x7F7FFFFFu),  // the largest f32: rounds to infinity
                            bits(0x7FC00001u),  // NaN
                            bits(0xFFC00000u),  // -NaN
                            INFINITY, -INFINITY, 0.0, -0.0,
                            bits(0x00000001u)};  // the smallest subnormal
  for (size_t k = 0; k < std::size(special); ++k) xa.set(static_cast<int64_t>(k), special[k]);
  za.set(0, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30));
  za.set(1, -(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)));
  za.set(2, NAN);
  za.set(3, 1e300);
  const uint64_t neg_nan = 0xFFFA000000000000ull;  // -NaN with payload: sign and top payload bits kept
  double nn;
  std::memcpy(&nn, &neg_nan, 8);
  za.set(4, nn);
  wa.set(0, 16777217);  // 2^24 + 1
  wa.set(1, 257 * 65536 + 1);
  const std::vector<Array> in = {xa, ya, za, wa, ha};
  for (int i = 0; i < 5; ++i) run.upload(i, in[static_cast<size_t>(i)]);
  run.step();
  const std::vector<Array> want = ieee_run(p, in);
  const Program& fp = kp.fused.program;
  for (size_t o = 0; o < want.size(); ++o) {
    const Array got = run.output(fp.output_index(p.outputs[o].name));
    EXPECT_TRUE(got.bit_equal(want[o])) << p.outputs[o].name;
  }
}

// A reshape that cuts a transposed axis at a size that does not divide it
// (z^T [6, 4] read as [4, 6]) has no strided layout over z: the transpose is
// a copy, and the reshape a view of it (row-major: one contiguous run, which
// the reshape may cut anywhere). The generated GEMM reads it so; small
// integers keep the sums exact, the same bits as the interpreter's.
TEST(PlanEmulation, ReshapeOfATransposeIsReadFromACopy) {
  Program p;
  p.name = "reshape of a transpose";
  const int z = p.add_input("z", {DType::f32, {4, 6}});
  const int u = p.add_input("u", {DType::f32, {6, 2}});
  Attrs tr;
  tr.dims = {1, 0};
  Attrs mm;
  mm.lhs_contract = {1};
  mm.rhs_contract = {0};
  const int zt = p.add_eqn(Op::transpose, {z}, tr);
  const int zr = p.add_eqn_typed(Op::reshape, {zt}, {}, {DType::f32, {4, 6}});
  p.add_output("c", p.add_eqn(Op::dot_general, {zr, u}, mm));
  const plan::KernelPlan kp = plan::plan_kernels(p);
  const Program& fp = kp.fused.program;
  for (size_t d = 0; d < fp.eqns.size(); ++d) {
    if (fp.eqns[d].op == Op::transpose) EXPECT_EQ(kp.fused.view[d], 0) << "a copy";
    if (fp.eqns[d].op == Op::reshape) EXPECT_EQ(kp.fused.view[d], 1) << "a view of the copy";
  }
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(5);
  std::vector<Array> in;
  for (int i = 0; i < 2; ++i) {
    Array a(p.input_type(i));
    for (int64_t k = 0; k < a.numel(); ++k) a.set(k, static_cast<double>(static_cast<int>(rng() % 9) - 4));
    run.upload(i, a);
    in.push_back(a);
  }
  run.step();
  EXPECT_TRUE(run.output(fp.output_index("c")).bit_equal(ieee_run(p, in)[0]));
}

// Mixed precision converts a transposed GEMM operand's source (optim.h):
// the generated GEMM reads transpose(convert(x)) through the convert and the
// transpose as views, rounding x's f32 values on load. Where the chain of
// views is no strided layout (ReshapeOfATransposeIsReadFromACopy), the
// transpose is a copy, and so is the convert under it (only GEMMs read
// through a convert). Small integers: every sum exact, so the results equal
// the interpreter's bit for bit whatever the order of the additions.
TEST(PlanEmulation, Bf16TransposedOperandsThroughViewsAndCopies) {
  Program p;
  p.name = "bf16 transposed operands";
  const int x = p.add_input("x", {DType::f32, {2, 6}});
  const int y = p.add_input("y", {DType::f32, {2, 3}});
  const int z = p.add_input("z", {DType::f32, {4, 6}});
  const int u = p.add_input("u", {DType::f32, {6, 2}});
  auto bf = [&](int v) { Type t = p.type(v); t.dtype = DType::bf16; return p.add_eqn_typed(Op::convert, {v}, {}, t); };
  Attrs tr;
  tr.dims = {1, 0};
  Attrs mm;
  mm.lhs_contract = {1};
  mm.rhs_contract = {0};
  const int xt = p.add_eqn(Op::transpose, {bf(x)}, tr);                     // [6, 2]: a view
  p.add_output("a", p.add_eqn(Op::dot_general, {xt, bf(y)}, mm));           // [6, 3]
  const int zt = p.add_eqn(Op::transpose, {bf(z)}, tr);                     // [6, 4]
  const int zr = p.add_eqn_typed(Op::reshape, {zt}, {}, {DType::bf16, {4, 6}});  // rows of 4 of z's 6 columns
  p.add_output("b", p.add_eqn(Op::dot_general, {zr, bf(u)}, mm));           // [4, 2]
  const plan::KernelPlan kp = plan::plan_kernels(p);
  const Program& fp = kp.fused.program;
  std::map<std::string, int> views;  // per bf16 convert and transpose, by its result's type
  for (size_t d = 0; d < fp.eqns.size(); ++d) {
    const Eqn& e = fp.eqns[d];
    if (e.op == Op::convert || e.op == Op::transpose)
      views[std::string(op_name(e.op)) + " " + fp.type(e.out).str()] = kp.fused.view[d];
  }
  EXPECT_EQ(views["convert bf16[2,6]"], 1);
  EXPECT_EQ(views["transpose bf16[6,2]"], 1);
  EXPECT_EQ(views["convert bf16[4,6]"], 0) << "read by a transpose that is a copy";
  EXPECT_EQ(views["transpose bf16[6,4]"], 0);
  EXPECT_EQ(views["convert bf16[6,2]"], 1);
  for (const plan::Item& it : kp.items) EXPECT_GE(it.source, 0) << "not a generated kernel: " << it.what;
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(5);
  std::vector<Array> in;
  for (int i = 0; i < 4; ++i) {
    Array a(p.input_type(i));
    for (int64_t k = 0; k < a.numel(); ++k) a.set(k, static_cast<double>(static_cast<int>(rng() % 9) - 4));
    run.upload(i, a);
    in.push_back(a);
  }
  run.step();
  const std::vector<Array> want = ieee_run(p, in);
  for (size_t o = 0; o < want.size(); ++o) {
    const Array got = run.output(fp.output_index(p.outputs[o].name));
    EXPECT_TRUE(got.bit_equal(want[o])) << p.outputs[o].name;
  }
}

// Many f32 and f64 values to bf16: every f32 exponent and sign with mantissa
// tails at, just below and just above a tie, zero and random (NaNs with
// payloads among them), and f64 values: random bits, and values just above
// and just below a bf16 tie by less than f32 resolves (where rounding to f32
// first would land on the tie and round twice), exponents within f32's range.
struct Bf16Cases {
  std::vector<float> f;
  std::vector<double> d;
  Bf16Cases() {
    std::mt19937 rng(11);
    for (uint32_t hi = 0; hi < 0x10000u; ++hi)
      for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, static_cast<uint32_t>(rng() & 0xFFFFu)}) {
        const uint32_t b = hi << 16 | lo;
        float x;
        std::memcpy(&x, &b, 4);
        f.push_back(x);
      }
    for (int k = 0; k < 300000; ++k) {
      uint64_t b = static_cast<uint64_t>(rng()) << 32 | rng();
      if (k % 3 != 0) {  // mantissa bits 51..45 kept by bf16, 44 its round bit, 51..29 kept by f32
        const uint64_t sign = b & (1ull << 63), exp = 1023 - 120 + rng() % 240, m7 = (b >> 45) & 0x7F;
        const uint64_t tail = 1 + (b & ((1ull << 28) - 2));  // nonzero, below f32's round bit
        const uint64_t mant = k % 3 == 1 ? (m7 << 45) | (1ull << 44) | tail                              // above the tie
                                         : (m7 << 45) | (0x7FFFull << 29) | (1ull << 28) | tail;  // below it
        b = sign | exp << 52 | mant;
      }
      double x;
      std::memcpy(&x, &b, 8);
      d.push_back(x);
    }
  }
};

// The generated kernels' conversions (kernel_emitter.h's capstep_bf16_*)
// against the interpreter's (ir/bf16.h), bit for bit, on Bf16Cases.
TEST(PlanEmulation, Bf16ConversionsMatchTheInterpreterOnManyValues) {
  const Bf16Cases cs;
  const int64_t nf = static_cast<int64_t>(cs.f.size()), nd = static_cast<int64_t>(cs.d.size());
  Program p;
  p.name = "bf16 conversions";
  const int x = p.add_input("x", {DType::f32, {nf}});
  const int z = p.add_input("z", {DType::f64, {nd}});
  p.add_output("xb", p.add_eqn_typed(Op::convert, {x}, {}, Type{DType::bf16, {nf}}));
  p.add_output("zb", p.add_eqn_typed(Op::convert, {z}, {}, Type{DType::bf16, {nd}}));
  const plan::KernelPlan kp = plan::plan_kernels(p);
  TempDir dir;
  const HostKernels kernels(kp, dir.file("k"));
  HostPlanRunner run(kp, kernels);
  Array xa({DType::f32, {nf}}), za({DType::f64, {nd}});
  std::memcpy(xa.raw(), cs.f.data(), xa.bytes());
  std::memcpy(za.raw(), cs.d.data(), za.bytes());
  run.upload(0, xa);
  run.upload(1, za);
  run.step();
  const std::vector<Array> want = ieee_run(p, {xa, za});
  EXPECT_TRUE(run.output(0).bit_equal(want[0]));
  EXPECT_TRUE(run.output(1).bit_equal(want[1]));
}

// The library kernels' conversions (backend/cuda/bf16_device.cuh) against the
// interpreter's, bit for bit, on Bf16Cases.
TEST(PlanEmulation, LibraryKernelBf16ConversionsMatchTheInterpreter) {
  const Bf16Cases cs;
  int64_t bad = 0;
  for (float x : cs.f) {
    const uint16_t got = cuda::k::bf16_store(x), want = bf16::from_float(x);
    if (got != want && ++bad <= 5) ADD_FAILURE() << "f32 " << x << ": " << got << " vs " << want;
    const float back = cuda::k::bf16_load(want);
    EXPECT_EQ(bf16::bits_of(back), bf16::bits_of(bf16::to_float(want)));
  }
  for (double d : cs.d) {
    const uint16_t got = cuda::k::bf16_store_double(d), want = bf16::from_double(d);
    if (got != want && ++bad <= 10) ADD_FAILURE() << "f64 " << d << ": " << got << " vs " << want;
  }
  EXPECT_EQ(bad, 0);
}

// The seed model's bf16 mixed-precision AdamW step (optim::mixed_precision_bf16:
// GEMM operands in bf16, f32 accumulation) through the plan, three steps
// against the interpreter. Elementwise work and the bf16 roundings are the
// interpreter's bit for bit (test above); what differs is the order of the
// f32 sums in the GEMMs and reductions (about 2^-24 relative, as in f32).
// Where such a difference moves an f32 value across a bf16 rounding boundary,
// that bf16 operand changes by one bf16 ulp (2^-8 relative) and so does its
// share of the products it feeds; a gradient meets two such operands (the
// bf16 cotangent and the bf16 activation or weight), so the bound is two
// ulps, 2^-7 = 7.8e-3 of each output's largest magnitude, with the updated
// parameters within 2 lr and 99% of their elements within that rounding.
// Two plans: the default one (generated GEMMs read their operands' f32 values
// through bf16 operand views, rounding on load; no bf16 buffer is stored),
// and one with library GEMMs (as for large models: the bf16 operands are
// stored as bf16 by loop kernels, the GEMMs run in the interpreter here).
// Measured (printed): 3.7e-3 for both, one ulp's worth.
TEST(PlanEmulation, Bf16MixedPrecisionTrainingStepsMatchTheInterpreter) {
  const nn::LmConfig c = small_config();
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  const optim::AdamW opt;
  const Program fused =
      optim::with_adamw(value_and_grad(optim::mixed_precision_bf16(nn::lm_loss_program(c)), names), names, opt);
  TempDir dir;
  for (const bool library : {false, true}) {
    SCOPED_TRACE(library ? "library GEMMs" : "generated GEMMs");
    plan::KernelPlanOptions o;
    if (library) o.gemm_max_macs = 0;
    const plan::KernelPlan kp = plan::plan_kernels(fused, o);
    int bf16_buffers = 0, bf16_views = 0;
    for (const plan::KernelSource& k : kp.sources)
      for (int x : k.params) bf16_buffers += kp.fused.program.type(x).dtype == DType::bf16;
    for (size_t d = 0; d < kp.fused.program.eqns.size(); ++d)
      bf16_views += kp.fused.view[d] && kp.fused.program.eqns[d].op == Op::convert;
    if (library) {
      EXPECT_GT(bf16_buffers, 0) << "bf16 operands stored for the library GEMMs";
      EXPECT_EQ(bf16_views, 0);
    } else {
      EXPECT_GT(bf16_views, 0) << "bf16 operands read through views";
    }
    const HostKernels kernels(kp, dir.file(library ? "library" : "generated"));
    double worst = 0;
    expect_plan_matches_interpreter(c, fused, &opt, kp, kernels, nullptr, 3, 0x1p-7, &worst);
    std::printf("bf16 fused AdamW step (%s GEMMs), plan vs interpreter: worst norm_diff of loss/gradients/moments %.3g\n",
                library ? "library" : "generated", worst);
  }
}

TEST(PlanEmulation, FusedAttentionTrainingStepsMatchTheInterpreter) { check_training_steps(true); }
// Activation checkpointing (checkpoint_activations): the plan of the step
// with every block's forward recomputed in the backward (the copies and
// their anchors in the groups, the memory plan's shorter lifetimes).
TEST(PlanEmulation, CheckpointedTrainingStepsMatchTheInterpreter) {
  check_training_steps(false, nn::Arch::gpt2, true);
}

// GPT-2 (biases, LayerNorm, the tied head) and Llama (rotary constants, the
// rotation's product, grouped-query attention, SwiGLU; with and without the
// attention primitives) through the same plan.
TEST(PlanEmulation, Gpt2AndLlamaTrainingStepsMatchTheInterpreter) {
  const std::pair<nn::Arch, bool> cases[] = {{nn::Arch::gpt2, false}, {nn::Arch::llama, false}, {nn::Arch::llama, true}};
  for (const auto& [a, fused_attention] : cases) {
    SCOPED_TRACE(std::string(nn::arch_name(a)) + (fused_attention ? ", fused attention" : ""));
    check_training_steps(fused_attention, a);
  }
}

// The attention kernels alone, against the host reference: several query and
// key tiles (T above R, not a multiple of it), every register width, f32 and
// f64, and the gradient groups with dq only, dk and dv only, and all three.
// One program holds every case, so the kernels compile once.
TEST(PlanEmulation, AttentionKernelsMatchTheHostReference) {
  struct C { DType d; Shape s; std::vector<std::string> wrt; int items; };
  const std::vector<C> cases = {
      {DType::f32, {2, 2, 70, 20}, {"q", "k", "v"}, 3},  // D 32, R 64: 2 tiles
      {DType::f64, {1, 2, 37, 40}, {"q", "k", "v"}, 3},  // D 64, R 16: 3 tiles
      {DType::f32, {1, 2, 20, 100}, {"q"}, 2},           // D 128, R 16: 2 tiles; no dk/dv kernel
      {DType::f32, {1, 1, 2, 3}, {"k", "v"}, 3},         // two rows (with one, dk is exactly 0); dq kernel for lse and D only
      {DType::f64, {2, 1, 9, 1}, {"v"}, 3},              // Dh 1
  };
  Tracer tr;
  std::vector<std::string> wrt;
  Tensor loss;
  std::vector<std::pair<std::string, Tensor>> outs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Type t{cases[i].d, cases[i].s};
    const std::string n = std::to_string(i);
    Tensor q = tr.input("q" + n, t), k = tr.input("k" + n, t), v = tr.input("v" + n, t), r = tr.input("r" + n, t);
    Tensor out = attention(q, k, v);
    Tensor l = convert(sum(out * r), DType::f32);
    loss = i == 0 ? l : loss + l;
    outs.emplace_back("out" + n, out);
    for (const std::string& w : cases[i].wrt) wrt.push_back(w + n);
  }
  outs.insert(outs.begin(), {"loss", loss});
  const Program g = value_and_grad(tr.finish(outs), wrt);
  const plan::KernelPlan kp = plan::plan_kernels(g);
  int items = 0, want_items = 0;
  for (const plan::Item& it : kp.items) items += it.kind == plan::ItemKind::attention;
  for (const C& c : cases) want_items += c.items;
  EXPECT_EQ(items, want_items) << kp.describe();
  TempDir dir;
  const HostKernels kernels(kp, dir.file("attention"));
  HostPlanRunner run(kp, kernels);
  std::mt19937 rng(4);
  std::vector<Array> in;
  for (const NamedValue& x : g.inputs) {
    const Type& t = g.type(x.value);
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (double& y : v) y = std::uniform_real_distribution<double>(-2, 2)(rng);
    in.push_back(Array::from_doubles(t, v));
  }
  const Program& p = kp.fused.program;
  for (size_t i = 0; i < in.size(); ++i) run.upload(p.input_index(g.inputs[i].name), in[i]);
  const std::vector<Array> want = ieee_run(g, in);
  run.step();
  // f32: the kernels sum in f32 in another order than the reference's f64
  // sums (rows of at most 70 terms of products of 100 terms): 1e-5 of the
  // output's largest magnitude; f64: 1e-12.
  double worst32 = 0, worst64 = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    const double d = norm_diff(run.output(p.output_index(g.outputs[o].name)), want[o]);
    const bool f64 = want[o].dtype() == DType::f64;
    (f64 ? worst64 : worst32) = std::max(f64 ? worst64 : worst32, d);
    EXPECT_LE(d, f64 ? 1e-12 : 1e-5) << g.outputs[o].name;
  }
  std::printf("attention kernels vs host reference: worst |kernel-host|/max|host| f32 %.3g, f64 %.3g\n", worst32, worst64);
}

}  // namespace
}  // namespace capstep
