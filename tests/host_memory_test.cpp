// The memory a training run will take, known before its first step:
// host::memory_needed (the Interpreter's plan, nothing allocated) against what
// an Interpreter then allocates; the room this process has (MemAvailable and
// the memory cgroup, on fake /proc and cgroup trees); the refusal and its
// figures (src/train/memory.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <new>

#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "backend/plan/fusion.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "capstep/train.h"
#include "seed_step.h"
#include "test_util.h"
#include "train/memory.h"

using namespace capstep;
namespace fs = std::filesystem;

namespace {

void expect_same_plan(const host::MemoryPlan& planned, const host::MemoryPlan& built, const std::string& what) {
  EXPECT_EQ(planned.arena, built.arena) << what;
  EXPECT_EQ(planned.statics, built.statics) << what;
  EXPECT_EQ(planned.tiles, built.tiles) << what;
  EXPECT_EQ(planned.inputs, built.inputs) << what;
  EXPECT_EQ(planned.outputs, built.outputs) << what;
}

// The seed's step: the plan is what the Interpreter allocates, to the byte
// (a factor of exactly 1), fused and unfused, for the gradient program and
// for with_adamw's; and the arena is what packing buys: at least the largest
// intermediate value, less than all of them side by side.
TEST(HostMemory, PlanIsWhatTheInterpreterAllocatesForTheSeedStep) {
  const test::SeedStep s;
  const optim::AdamW aw;
  for (const Program& p : {s.grad, optim::with_adamw(s.grad, s.names, aw)})
    for (bool fuse : {true, false}) {
      host::InterpreterOptions o;
      o.fuse = fuse;
      const host::MemoryPlan planned = host::memory_needed(p, o);
      host::Interpreter it(p, o);
      expect_same_plan(planned, it.memory(), p.name + (fuse ? " fused" : " unfused"));
      EXPECT_EQ(planned.arena, it.arena_bytes());
    }
  const host::MemoryPlan m = host::memory_needed(s.grad);
  // Inputs: 311936 f32 parameters, tokens and targets i32[4,16]; outputs: the
  // loss and a gradient per parameter.
  EXPECT_EQ(nn::count_parameters(s.c), 311936);
  EXPECT_EQ(m.inputs, 311936u * 4 + 2 * 4 * 16 * 4);
  EXPECT_EQ(m.outputs, 4 + 311936u * 4);
  size_t largest = 0, all = 0;
  for (const Eqn& e : s.grad.eqns) {
    largest = std::max(largest, s.grad.type(e.out).bytes());
    all += s.grad.type(e.out).bytes();
  }
  EXPECT_GE(m.arena, largest);
  EXPECT_LT(m.arena, all);
  EXPECT_GT(m.held(), m.arena);  // constants too
}

// The cross-entropy's shape: the logits' exponential made in a fused group
// from the logits (a GEMM's result) and the one-hot correction added by
// scatter_add_rows: the exponential is computed over the logits' buffer
// (every member of its group reads the logits before it writes), the
// scatter's result over the exponential's, so the arena holds one [rows, V]
// buffer where it held three; the results are the unfused interpreter's.
TEST(HostMemory, LossGradientSharesTheLogitsBuffer) {
  const int64_t R = 64, V = 500, D = 8;
  Tracer tr;
  Tensor h = tr.input("h", {DType::f32, {R, D}}), w = tr.input("w", {DType::f32, {D, V}});
  Tensor idx = tr.input("idx", {DType::i32, {R}}), upd = tr.input("upd", {DType::f32, {R, 1}});
  Tensor logits = matmul(h, w);
  Tensor e = exp(logits - broadcast_to(max(logits, {1}, true), {R, V}));
  Tensor flat = reshape(e, {R * V, 1});
  Tensor g = scatter_add_rows(flat, idx, upd);  // one element per row, as the one-hot's
  const Program p = tr.finish({{"y", matmul(reshape(g, {R, V}), transpose(w, {1, 0}))}});
  const size_t buffer = static_cast<size_t>(R * V) * sizeof(float);
  const host::MemoryPlan m = host::memory_needed(p);
  EXPECT_LT(m.arena, 2 * buffer);
  EXPECT_GE(m.arena, buffer);
  Array ids(Type{DType::i32, {R}});
  for (int64_t r = 0; r < R; ++r) ids.set(r, static_cast<double>(r * V + (r * 37) % V));
  const std::vector<Array> in = {test::lcg_array(p.input_type(0), 1), test::lcg_array(p.input_type(1), 2), ids,
                                 test::lcg_array(p.input_type(3), 3)};
  host::InterpreterOptions unfused;
  unfused.fuse = false;
  EXPECT_TRUE(host::run(p, in)[0].bit_equal(host::run(p, in, unfused)[0]));
}

// A broadcast read again far from where it is made (softmax's row sums over
// [rows, cols], read by the forward and again by the backward) is made again
// in the far reader's group from the small sums (plan::copy_far_broadcasts,
// Target::broadcasts_join_readers_first) instead of held in a [rows, cols]
// buffer between the two: the arena holds no buffer of that size. The
// copies compute the same values: the program with them gives the bits of
// the one without, and the fused run the bits of the unfused one.
TEST(HostMemory, FarBroadcastsAreMadeAgainWhereTheyAreRead) {
  const int64_t R = 64, C = 2048;  // 131072 elements: copied from 65536 up
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {R, C}}), z = tr.input("z", {DType::f32, {R}});
  Tensor m = tr.input("m", {DType::f32, {C, C}});
  Tensor b = broadcast_to(sum(exp(x), {1}, true), {R, C});
  Tensor y = exp(x) / b;
  Tensor far = z;
  for (int i = 0; i < 20; ++i) far = tanh(far * 1.5 + 0.25);  // equations between the two readers
  // the far reader reads y through a GEMM: it runs after y's group
  Tensor w = matmul(y, m) / b + broadcast_to(reshape(far, {R, 1}), {R, C});
  const Program p = tr.finish({{"w", w}});
  const Program q = plan::copy_far_broadcasts(p, 65536, 16);
  int broadcasts_p = 0, broadcasts_q = 0;
  for (const Eqn& e : p.eqns) broadcasts_p += e.op == Op::broadcast_in_dim && p.type(e.out).numel() == R * C;
  for (const Eqn& e : q.eqns) broadcasts_q += e.op == Op::broadcast_in_dim && q.type(e.out).numel() == R * C;
  EXPECT_EQ(broadcasts_q, broadcasts_p + 1);  // one copy for the far reader
  const std::vector<Array> in = {test::lcg_array(p.input_type(0), 5), test::lcg_array(p.input_type(1), 6),
                                 test::lcg_array(p.input_type(2), 7)};
  host::InterpreterOptions unfused;
  unfused.fuse = false;
  const std::vector<Array> want = host::run(p, in, unfused);
  for (const Program* prog : {&p, &q}) {
    const std::vector<Array> got = host::run(*prog, in);
    for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(got[j].bit_equal(want[j])) << "output " << j;
  }
  EXPECT_TRUE(host::run(q, in, unfused)[0].bit_equal(want[0]));
  // y and the GEMM's result: two buffers of [rows, cols], not three
  EXPECT_LT(host::memory_needed(p).arena, 3 * static_cast<size_t>(R * C) * sizeof(float));
}

// Planning allocates none of it: a program whose intermediate value is 4 PiB
// (more than any address space) is planned, and only building the
// Interpreter fails. (Unfused: fused, the value would live in tiles.)
TEST(HostMemory, PlanningAllocatesNothing) {
  host::InterpreterOptions unfused;
  unfused.fuse = false;
  Program p;
  const Type big{DType::f32, {int64_t{1} << 50}};
  const int x = p.add_input("x", {DType::f32, {1}});
  const int b = p.add_eqn_typed(Op::broadcast_in_dim, {x}, Attrs{.dims = {0}}, big);
  const int e = p.add_eqn(Op::exponential, {b}, {});
  p.add_output("s", p.add_eqn_typed(Op::reduce_sum, {e}, Attrs{.dims = {0}}, Type{DType::f32, {}}));
  const host::MemoryPlan m = host::memory_needed(p, unfused);
  EXPECT_GE(m.arena, size_t{4} << 50);
  EXPECT_EQ(m.inputs, 4u);
  EXPECT_EQ(m.outputs, 4u);
#if !defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer aborts on an allocation this large instead of throwing.
  EXPECT_THROW(host::Interpreter(p, unfused), std::bad_alloc);
#endif
}

// A fake /proc and cgroup tree.
struct FakeMachine {
  test::TempDir d;
  std::string proc() const { return d.file("proc"); }
  std::string cgroup() const { return d.file("cg"); }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(d.file(rel));
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  FakeMachine(double mem_available_kb, const std::string& self_cgroup) {
    write("proc/meminfo", "MemTotal:       24683652 kB\nMemFree:         1000 kB\nMemAvailable:   " +
                              std::to_string(static_cast<long long>(mem_available_kb)) + " kB\n");
    write("proc/self/cgroup", self_cgroup);
  }
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(HostMemory, RoomIsMemAvailableOrTheCgroupsRoomWhicheverIsLess) {
  {  // no cgroup limit (v2 "max"): MemAvailable
    FakeMachine m(8 * 1024 * 1024, "0::/job\n");
    m.write("cg/job/memory.max", "max\n");
    m.write("cg/job/memory.current", "123\n");
    const train::MemoryRoom r = train::memory_room(m.proc(), m.cgroup());
    EXPECT_EQ(r.bytes, 8 * kGiB);
    EXPECT_EQ(r.source, "MemAvailable in " + m.proc() + "/meminfo");
  }
  {  // v2: 4 GiB limit, 3 GiB in use of which 0.5 GiB inactive file cache: 1.5 GiB
    FakeMachine m(8 * 1024 * 1024, "0::/job\n");
    m.write("cg/job/memory.max", "4294967296\n");
    m.write("cg/job/memory.current", "3221225472\n");
    m.write("cg/job/memory.stat", "anon 2684354560\nactive_file 0\ninactive_file 536870912\n");
    const train::MemoryRoom r = train::memory_room(m.proc(), m.cgroup());
    EXPECT_EQ(r.bytes, 1.5 * kGiB);
    EXPECT_NE(r.source.find("memory.max: 4.00 GiB, 3.00 GiB in use"), std::string::npos) << r.source;
  }
  {  // v2: the parent's limit is the tighter one
    FakeMachine m(8 * 1024 * 1024, "0::/a/b\n");
    m.write("cg/a/b/memory.max", "4294967296\n");
    m.write("cg/a/b/memory.current", "1073741824\n");
    m.write("cg/a/memory.max", "2147483648\n");
    m.write("cg/a/memory.current", "1610612736\n");
    EXPECT_EQ(train::memory_room(m.proc(), m.cgroup()).bytes, 0.5 * kGiB);
  }
  {  // v1, in a cgroup namespace (the process's path is not under the mount): the mount's own files
    FakeMachine m(8 * 1024 * 1024, "5:cpu:/\n4:memory:/docker/abc\n0::/\n");
    m.write("cg/memory/memory.limit_in_bytes", "2147483648\n");
    m.write("cg/memory/memory.usage_in_bytes", "1073741824\n");
    m.write("cg/memory/memory.stat", "cache 0\ntotal_inactive_file 1073741824\n");
    const train::MemoryRoom r = train::memory_room(m.proc(), m.cgroup());
    EXPECT_EQ(r.bytes, 2 * kGiB);
    EXPECT_NE(r.source.find("memory.limit_in_bytes: 2.00 GiB"), std::string::npos) << r.source;
  }
  {  // v1 without a limit (2^63 rounded down to pages)
    FakeMachine m(1024, "4:memory:/\n");
    m.write("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
    m.write("cg/memory/memory.usage_in_bytes", "50651136\n");
    EXPECT_EQ(train::memory_room(m.proc(), m.cgroup()).bytes, 1024.0 * 1024);
  }
  {  // no meminfo: unknown, and nothing is refused
    test::TempDir d;
    EXPECT_LT(train::memory_room(d.file("none"), d.file("none")).bytes, 0);
  }
}

// The seed's run: its figures, refused when the room is a byte short, not
// when it is exactly enough.
TEST(HostMemory, RefusalGivesTheFigures) {
  train::Options o;
  o.save_path = "run.safetensors";
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(o.model)) names.push_back(p.name);
  const Program loss = nn::lm_loss_program(o.model);
  const Program grad = value_and_grad(loss, names);
  const train::HostMemory need = train::plan_host_memory(o, true, grad, &loss);
  EXPECT_EQ(need.params, 311936u * 4);
  EXPECT_EQ(need.state, 3 * need.params);
  EXPECT_EQ(need.copy, need.state);
  const host::MemoryPlan step = host::memory_needed(grad), val = host::memory_needed(loss);
  EXPECT_EQ(need.step.arena, step.arena);
  EXPECT_EQ(need.validation.held(), val.held());
  EXPECT_EQ(need.batch(), 2u * 4 * 16 * 4);  // tokens and targets
  // The step's arena and validation's are resident one at a time on the host.
  EXPECT_EQ(need.still_needed(), need.copy + std::max(step.arena, val.arena) + step.statics + step.tiles +
                                     step.outputs + need.batch() + val.statics + val.tiles);
  // Off the host lane the step is the GPU's.
  EXPECT_EQ(train::plan_host_memory(o, false, grad, nullptr).still_needed(), need.copy);
  // Without --save, validation reads the parameters in place where AdamW runs
  // on the host: no copy; with AdamW in the program it copies the parameters
  // (not the moments) out, and with --save that comes on the checkpoint's.
  {
    train::Options v = o;
    v.save_path.clear();
    EXPECT_EQ(train::plan_host_memory(v, true, grad, &loss).copy, 0u);
    v.lane = train::parse_lane("host-fused");
    EXPECT_EQ(train::plan_host_memory(v, true, grad, &loss).copy, need.params);
    v.save_path = o.save_path;
    EXPECT_EQ(train::plan_host_memory(v, true, grad, &loss).copy, need.state + need.params);
  }

  train::MemoryRoom room;
  room.bytes = static_cast<double>(need.still_needed());
  room.source = "a test's figure";
  EXPECT_EQ(train::memory_refusal(need, room, o), "");
  room.bytes -= 1;
  const std::string m = train::memory_refusal(need, room, o);
  auto mib = [](size_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
    return std::string(s);
  };
  for (const std::string& piece :
       {"the run needs " + mib(need.still_needed()) + " of memory more than the " + mib(need.state) +
            " its parameters and AdamW moments hold, and " + mib(need.still_needed() - 1) +
            " is available (a test's figure): ",
        mib(step.arena) + " of intermediate values of the step (the host interpreter's arena)",
        mib(step.outputs) + " for the gradients", mib(val.held()) + " for the validation program",
        mib(need.copy) + " for the copy that checkpoints and validation read",
        std::string("a smaller --batch (now 4) or --seq (now 16) needs less")})
    EXPECT_NE(m.find(piece), std::string::npos) << piece << "\nin: " << m;
  room.bytes = -1;  // unknown: no refusal
  EXPECT_EQ(train::memory_refusal(need, room, o), "");
}

// train() refuses a batch whose step exceeds any machine's memory before the
// first step, with the figures, having allocated only the (small) model.
TEST(HostMemory, TrainRefusesAStepLargerThanAnyMachine) {
  train::Options o;
  o.model.n_layers = 1;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.seq = o.model.context = 4096;
  o.model.batch = 65536;
  o.steps = 1;
  int steps = 0;
  o.on_step = [&](const train::StepInfo&) { ++steps; };
  try {
    train::train(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("the run needs ", 0), 0u) << m;
    EXPECT_NE(m.find("GiB of intermediate values of the step"), std::string::npos) << m;
    EXPECT_NE(m.find("a smaller --batch (now 65536) or --seq (now 4096)"), std::string::npos) << m;
  }
  EXPECT_EQ(steps, 0);
}

}  // namespace
