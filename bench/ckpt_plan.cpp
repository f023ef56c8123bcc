// The host interpreter's plan (host::memory_needed) of the step program that
// `capstep train` builds for a model in transformers' layout, with and without
// --checkpoint-activations, as train_loop.cpp builds it: value_and_grad,
// recompute_in_backward where it plans less, checkpoint_activations, then
// TrainStep::program (AdamW on the host, the default lane). Nothing allocated:
//   bench_ckpt_plan DIR [BATCH SEQ]   (CKPT_FUSED=1: as train --fused-attention)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "capstep/autodiff.h"
#include "capstep/hf.h"
#include "capstep/host_options.h"
#include "capstep/nn.h"
#include "capstep/train_step.h"
#include "capstep/trace.h"
#include "capstep/transforms.h"

using namespace capstep;

namespace {

double mib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

void report(const char* what, const Program& p) {
  const host::MemoryPlan m = host::memory_needed(p);
  std::printf("%s: %zu equations; arena %.1f MiB, statics %.1f MiB, tiles %.1f MiB, inputs %.1f MiB, outputs %.1f MiB; "
              "held %.1f MiB\n",
              what, p.eqns.size(), mib(m.arena), mib(m.statics), mib(m.tiles), mib(m.inputs), mib(m.outputs),
              mib(m.held()));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: bench_ckpt_plan DIR [BATCH SEQ]\n");
    return 2;
  }
  nn::LmConfig c = nn::read_hf_dir(argv[1]).config;
  c.batch = argc == 4 ? std::atoi(argv[2]) : 8;
  c.seq = argc == 4 ? std::atoi(argv[3]) : 1024;
  const Program loss = std::getenv("CKPT_FUSED") ? fuse_attention(nn::lm_loss_program(c)) : nn::lm_loss_program(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  std::printf("%s, %lld parameters, batch %lld x %lld\n", c.describe().c_str(),
              static_cast<long long>(nn::count_parameters(c)), static_cast<long long>(c.batch),
              static_cast<long long>(c.seq));
  Program grad = value_and_grad(loss, names);
  {
    Program r = recompute_in_backward(grad);
    if (host::memory_needed(r).arena < host::memory_needed(grad).arena) grad = std::move(r);
  }
  const Lane lane{BackendKind::host, false};
  const optim::AdamW adamw{.lr = 1e-3};
  const char* only = std::getenv("CKPT_PLAN_ONLY");  // "plain" or "ckpt": one of the two
  if (!only || std::string(only) == "plain") report("step (train's, plain)", TrainStep::program(grad, names, adamw, lane));
  if (!only || std::string(only) == "ckpt")
    report("step (train's, --checkpoint-activations)",
           TrainStep::program(checkpoint_activations(grad, every_kth_region(grad, 1)), names, adamw, lane));
  return 0;
}
