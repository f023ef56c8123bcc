// Times the host interpreter on the seed model's gradient program (the work of
// lane 1 without AdamW), fused and unfused, and lists the program's primitives
// and matmul work.
//
// Built by CMake as bench_host_step; run: build/bench_host_step [steps]
// (NO_PER_OP=1: skip the one-equation-at-a-time table; TILE=n: fused tile size).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <string>

#include "backend/host/parallel.h"
#include "capstep/autodiff.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "../tools/env_options.h"  // apply_openblas_environment, as the capstep command does

using namespace capstep;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  env::apply_openblas_environment();  // capstep's OpenBLAS kernel set and one thread, before it loads
  const int steps = argc > 1 ? std::atoi(argv[1]) : 50;
  nn::LmConfig c;
  Program loss = nn::lm_loss_program(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  Program grad = value_and_grad(loss, names);
  std::map<std::string, int> ops;
  for (const Eqn& e : grad.eqns) ops[op_name(e.op)]++;
  std::printf("%s\ngradient program: %zu equations\n", c.describe().c_str(), grad.eqns.size());
  for (auto& [k, v] : ops) std::printf("  %-18s %d\n", k.c_str(), v);

  double flops = 0;  // 2 * batch * M * N * K over every dot_general
  for (const Eqn& e : grad.eqns) {
    if (e.op != Op::dot_general) continue;
    double n = 2;
    for (int64_t d : grad.type(e.out).shape) n *= static_cast<double>(d);
    for (int64_t a : e.attrs.lhs_contract) n *= static_cast<double>(grad.type(e.inputs[0]).shape[static_cast<size_t>(a)]);
    flops += n;
  }
  std::printf("dot_general work: %.1f MFLOP per run\n", flops / 1e6);
  host::InterpreterOptions unfused_opts;
  unfused_opts.fuse = false;
  host::InterpreterOptions fused_opts;
  if (const char* t = getenv("TILE")) fused_opts.tile_elems = std::atoll(t);  // TILE=n: elements per tile
  host::Interpreter it(grad, fused_opts), unfused(grad, unfused_opts);
  std::printf("arena: %.1f KiB fused (%d groups run tile by tile, %d equations, %d compiled loops), %.1f KiB unfused\n",
              static_cast<double>(it.arena_bytes()) / 1024.0, it.fused_groups(), it.fused_equations(), it.jit_loops(),
              static_cast<double>(unfused.arena_bytes()) / 1024.0);
  std::vector<Array> params = nn::init_parameters(c, 1);
  Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set(i, static_cast<double>((i * 7) % c.vocab));
    targets.set(i, static_cast<double>((i * 7 + 1) % c.vocab));
  }
  std::vector<const Array*> in;
  for (Array& p : params) in.push_back(&p);
  in.push_back(&tokens);
  in.push_back(&targets);
  std::vector<Array> out, out_unfused;
  it.run(in, out);
  unfused.run(in, out_unfused);
  bool same = out.size() == out_unfused.size();
  for (size_t j = 0; same && j < out.size(); ++j) same = out[j].bit_equal(out_unfused[j]);
  std::printf("loss %.6f; fused outputs %s the unfused ones\n", out[0].get(0), same ? "are bitwise" : "DIFFER FROM");
  // Lane 1's step (the gradient program, then AdamW on the host) and lane 1f's
  // (the with_adamw program in place), as the lanes run them.
  optim::AdamW aw;
  const Program step = optim::with_adamw(grad, names, aw);
  host::Interpreter step_fused(step, fused_opts), step_unfused(step, unfused_opts);
  std::printf("with_adamw program: %zu equations; arena %.1f KiB fused (%d groups, %d equations), %.1f KiB unfused\n",
              step.eqns.size(), static_cast<double>(step_fused.arena_bytes()) / 1024.0, step_fused.fused_groups(),
              step_fused.fused_equations(), static_cast<double>(step_unfused.arena_bytes()) / 1024.0);
  const size_t np = params.size();
  std::vector<Array> m, v;
  for (const Array& p : params) m.emplace_back(p.type()), v.emplace_back(p.type());
  std::vector<Array> p1 = params;  // lane 1's parameters (updated in place)
  std::vector<const Array*> in1;
  for (Array& p : p1) in1.push_back(&p);
  in1.push_back(&tokens);
  in1.push_back(&targets);
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 1);
  // the with_adamw state: outputs "loss", then p, m, v (.new); as lane 1f runs
  // it, two sets that swap each step (read one, write the other)
  std::vector<Array> state[2][2];
  std::vector<const Array*> ins[2];
  int cur[2] = {0, 0};
  std::vector<Array> scalars(4, Array({DType::f32, {}}));
  const float sv[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
  for (int i = 0; i < 4; ++i) scalars[static_cast<size_t>(i)].data<float>()[0] = sv[i];
  for (int f = 0; f < 2; ++f) {
    for (int b = 0; b < 2; ++b) {
      state[f][b].resize(step.outputs.size());
      for (size_t j = 0; j < np; ++j) {
        state[f][b][1 + j] = params[j];
        state[f][b][1 + np + j] = m[j];
        state[f][b][1 + 2 * np + j] = v[j];
      }
    }
    ins[f].resize(3 * np);
    ins[f].push_back(&tokens);
    ins[f].push_back(&targets);
    for (Array& x : scalars) ins[f].push_back(&x);
  }
  auto step_1f = [&](host::Interpreter& interp, int f) {
    for (size_t j = 0; j < 3 * np; ++j) ins[f][j] = &state[f][cur[f]][1 + j];
    interp.run(ins[f], state[f][1 - cur[f]]);
    cur[f] = 1 - cur[f];
  };
  struct Variant {
    const char* name;
    std::function<void()> run;
    std::vector<double> ms, cpu;
  };
  std::vector<Variant> variants = {
      {"gradient program, fused", [&] { it.run(in, out); }, {}, {}},
      {"gradient program, unfused", [&] { unfused.run(in, out_unfused); }, {}, {}},
      {"lane 1 step (fused + AdamW on the host)",
       [&] {
         it.run(in1, out);
         // in the run's subnormal mode, as host::HostAdamW updates
         const host::SubnormalMode mode(it.options().flush_subnormals);
         optim::adamw_update(aw, sc, p1, out.data() + 1, m, v);
       },
       {}, {}},
      {"lane 1f step (with_adamw), fused", [&] { step_1f(step_fused, 0); }, {}, {}},
      {"lane 1f step (with_adamw), unfused", [&] { step_1f(step_unfused, 1); }, {}, {}},
  };
  // The variants alternate in blocks of 10 runs, so that a busy machine slows
  // them alike; wall and thread CPU time per run. ONLY=k: time variant k alone
  // (for a profiler).
  const char* only_env = getenv("ONLY");
  const int only = only_env ? std::atoi(only_env) : -1;
  for (Variant& x : variants) x.run();  // warm-up (sizes the outputs)
  for (int s = 0; s < steps; s += 10)
    for (size_t k = 0; k < variants.size(); ++k) {
      if (only >= 0 && static_cast<int>(k) != only) continue;
      for (int r = 0; r < 10; ++r) {
        timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        auto t0 = Clock::now();
        variants[k].run();
        variants[k].ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        variants[k].cpu.push_back((c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) * 1e-6);
      }
    }
  if (only >= 0) return 0;
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::printf("over %zu runs each: median wall ms, median CPU ms, min wall ms\n", variants[0].ms.size());
  for (const Variant& x : variants)
    std::printf("  %-46s %7.3f %7.3f %7.3f\n", x.name, med(x.ms), med(x.cpu), *std::min_element(x.ms.begin(), x.ms.end()));
  std::printf("  unfused / fused (median CPU): gradient %.2fx, lane 1f step %.2fx; lane 1 / lane 1f %.2fx\n",
              med(variants[1].cpu) / med(variants[0].cpu), med(variants[4].cpu) / med(variants[3].cpu),
              med(variants[2].cpu) / med(variants[3].cpu));
  if (getenv("NO_PER_OP")) return 0;

  // Each equation alone, as a one-equation program on zero inputs, to see where
  // the time goes (cache effects of the whole step are not reproduced).
  std::map<std::string, double> per_op;
  std::vector<std::pair<double, std::string>> slowest;
  for (const Eqn& e : grad.eqns) {
    if (e.op == Op::reshape || e.op == Op::constant || e.op == Op::iota) continue;
    Program one;
    std::vector<int> ins;
    for (size_t k = 0; k < e.inputs.size(); ++k) ins.push_back(one.add_input("in" + std::to_string(k), grad.type(e.inputs[k])));
    one.add_output("out", one.add_eqn_typed(e.op, ins, e.attrs, grad.type(e.out)));
    host::Interpreter oi(one);
    std::vector<Array> arrays;
    for (size_t k = 0; k < e.inputs.size(); ++k) arrays.emplace_back(grad.type(e.inputs[k]));
    std::vector<const Array*> ptrs;
    for (Array& a : arrays) ptrs.push_back(&a);
    std::vector<Array> o;
    oi.run(ptrs, o);
    std::vector<double> t;
    for (int r = 0; r < 50; ++r) {
      auto t0 = Clock::now();
      oi.run(ptrs, o);
      t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    per_op[op_name(e.op)] += t[t.size() / 2];
    slowest.emplace_back(t[t.size() / 2], eqn_text(grad, e));
  }
  double total = 0;
  for (auto& [k, v] : per_op) total += v;
  std::printf("equations one at a time: %.0f us in all\n", total);
  for (auto& [k, v] : per_op) std::printf("  %-18s %7.1f us\n", k.c_str(), v);
  std::sort(slowest.rbegin(), slowest.rend());
  for (size_t i = 0; i < (getenv("ALL") ? slowest.size() : 12) && i < slowest.size(); ++i) std::printf("  %6.1f us  %s\n", slowest[i].first, slowest[i].second.c_str());
}
