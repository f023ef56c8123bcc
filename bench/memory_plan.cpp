// The host interpreter's planned memory (host::memory_needed) of the training
// step and the validation forward of a model in transformers' layout, and
// the program's largest constants and iotas (what becomes the statics); then
// the step program `capstep train` builds (train_loop.cpp: value_and_grad,
// recompute_where_smaller, TrainStep::program on the host lane, AdamW on the
// host) without and with --checkpoint-activations. Nothing is allocated:
//   bench_memory_plan DIR [BATCH SEQ]   (MEMORY_PLAN_FUSED=1: as train --fused-attention)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "capstep/autodiff.h"
#include "capstep/hf.h"
#include "capstep/host_options.h"
#include "capstep/nn.h"
#include "capstep/trace.h"
#include "capstep/train_step.h"
#include "capstep/transforms.h"

using namespace capstep;

namespace {

std::string shape_text(Op op, const Type& t) {
  std::string s = op == Op::constant ? "constant [" : "iota [";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

double mib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

void report(const char* what, const Program& p) {
  const host::MemoryPlan m = host::memory_needed(p);
  std::printf("%s: %zu equations; arena %.1f MiB, statics %.1f MiB, tiles %.1f MiB, inputs %.1f MiB, outputs %.1f MiB; "
              "held %.1f MiB\n",
              what, p.eqns.size(), mib(m.arena), mib(m.statics), mib(m.tiles), mib(m.inputs), mib(m.outputs),
              mib(m.held()));
  std::vector<std::pair<size_t, std::string>> big;
  for (const Eqn& e : p.eqns)
    if ((e.op == Op::constant || e.op == Op::iota) && p.type(e.out).bytes() >= (1u << 20))
      big.emplace_back(p.type(e.out).bytes(), shape_text(e.op, p.type(e.out)));
  std::sort(big.rbegin(), big.rend());
  for (size_t i = 0; i < big.size() && i < 12; ++i) std::printf("  %8.1f MiB  %s\n", mib(big[i].first), big[i].second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: bench_memory_plan DIR [BATCH SEQ]\n");
    return 2;
  }
  nn::LmConfig c = nn::read_hf_dir(argv[1]).config;
  c.batch = argc == 4 ? std::atoi(argv[2]) : 2;
  c.seq = argc == 4 ? std::atoi(argv[3]) : 256;
  const Program loss = std::getenv("MEMORY_PLAN_FUSED") ? fuse_attention(nn::lm_loss_program(c)) : nn::lm_loss_program(c);
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) names.push_back(s.name);
  std::printf("%s, %lld parameters, batch %lld x %lld\n", c.describe().c_str(),
              static_cast<long long>(nn::count_parameters(c)), static_cast<long long>(c.batch),
              static_cast<long long>(c.seq));
  report("validation forward", loss);
  const Program grad = value_and_grad(loss, names);
  report("step (value_and_grad)", grad);
  const Program trained = host::recompute_where_smaller(grad);
  const Lane lane{BackendKind::host, false};
  const optim::AdamW adamw{};
  report("step (train's, plain)", TrainStep::program(trained, names, adamw, lane));
  report("step (train's, --checkpoint-activations)",
         TrainStep::program(checkpoint_activations(trained, nn::lm_checkpoint_regions(c, trained, 1)), names, adamw, lane));
  return 0;
}
