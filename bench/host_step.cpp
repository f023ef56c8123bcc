// Times the host interpreter on the seed model's gradient program (the work of
// lane 1 without AdamW) and lists the program's primitives and matmul work.
//
// Built by CMake as bench_host_step; run: build/bench_host_step [steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "capstep/autodiff.h"
#include "capstep/interpreter.h"
#include "capstep/nn.h"

using namespace capstep;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
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
  host::Interpreter it(grad);
  std::printf("arena: %.1f KiB\n", static_cast<double>(it.arena_bytes()) / 1024.0);
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
  std::vector<Array> out;
  it.run(in, out);
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    auto t0 = Clock::now();
    it.run(in, out);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("loss %.6f; run() median %.3f ms, min %.3f ms over %d runs\n", out[0].get(0), ms[ms.size() / 2], ms[0],
              steps);

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
