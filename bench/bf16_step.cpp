// Times one training step of GPT-2 124M (vocab 50257, 12 layers, d_model 768,
// 12 heads, d_ff 3072, context 1024, the head tied to the token embedding) at
// batch 2 x 256 tokens in the host interpreter: lane 1f's program
// (with_adamw(value_and_grad(...))), fused, in f32 or in bf16 mixed precision
// (optim::with_precision: bf16 GEMM operands, f32 accumulation). One process
// per precision, so that the two do not share the memory and caches:
//
//   cmake --build build --target bench_bf16_step
//   build/bench_bf16_step f32 [steps] [threads]    # threads: 2 by default
//   build/bench_bf16_step bf16 [steps] [threads]
//
// Prints the GEMM line, each step's wall time and the process's CPU time
// (all threads; on a machine that other work keeps busy the CPU time moves
// less than the wall time), and their medians (after one warm-up step). bench/torch_jax_step.py --run torch --gpt2-124m --autocast-bf16
// times PyTorch on the same model.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/host/gemm.h"
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
  const std::string prec = argc > 1 ? argv[1] : "bf16";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  host::set_host_threads(threads);
  nn::LmConfig c;
  c.arch = nn::Arch::gpt2;
  c.vocab = 50257;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.d_ff = 3072;
  c.context = 1024;
  c.batch = 2;
  c.seq = 256;
  std::printf("%s\nGEMM: %s\n%s; precision %s\n", c.describe().c_str(), host::gemm_info().line.c_str(),
              host::host_threads_line().c_str(), prec.c_str());
  const Program loss = nn::lm_loss_program(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  optim::AdamW aw;
  const Program step =
      optim::with_adamw(value_and_grad(optim::with_precision(loss, optim::parse_precision(prec)), names), names, aw);
  host::Interpreter it(step);
  std::vector<Array> params = nn::init_parameters(c, 1);
  const size_t np = params.size();
  std::vector<Array> m, v;
  for (const Array& p : params) m.emplace_back(p.type()), v.emplace_back(p.type());
  Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set(i, static_cast<double>((i * 7919) % c.vocab));
    targets.set(i, static_cast<double>((i * 7919 + 1) % c.vocab));
  }
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 1);
  std::vector<Array> scalars(4, Array({DType::f32, {}}));
  const float sv[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
  for (int i = 0; i < 4; ++i) scalars[static_cast<size_t>(i)].data<float>()[0] = sv[i];
  // Two sets of state that swap each step (read one, write the other), as lane 1f runs it.
  std::vector<Array> state[2];
  for (auto& s : state) {
    s.resize(step.outputs.size());
    for (size_t j = 0; j < np; ++j) s[1 + j] = params[j], s[1 + np + j] = m[j], s[1 + 2 * np + j] = v[j];
  }
  std::vector<const Array*> in(3 * np);
  in.push_back(&tokens);
  in.push_back(&targets);
  for (Array& x : scalars) in.push_back(&x);
  int cur = 0;
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
  };
  std::vector<double> ms, cpu;
  for (int s = 0; s <= steps; ++s) {
    for (size_t j = 0; j < 3 * np; ++j) in[j] = &state[cur][1 + j];
    const auto t0 = Clock::now();
    const double c0 = cpu_ms();
    it.run(in, state[1 - cur]);
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), ct = cpu_ms() - c0;
    cur = 1 - cur;
    std::printf("step %d: %.0f ms, CPU %.0f ms, loss %.4f%s\n", s, t, ct, state[cur][0].get(0),
                s == 0 ? " (warm-up)" : "");
    if (s > 0) ms.push_back(t), cpu.push_back(ct);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  if (!ms.empty())
    std::printf("median step (%s, %d threads, of %zu): %.0f ms, CPU %.0f ms\n", prec.c_str(), threads, ms.size(),
                ms[ms.size() / 2], cpu[cpu.size() / 2]);
}
