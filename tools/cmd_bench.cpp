// `capstep bench`: the lanes of the seed, by the same code as
// examples/training_step_on_device (src/lanes/three_lanes.cpp).
#include <iostream>

#include "commands.h"
#include "env_options.h"

namespace capstep::cli {

int run_bench(const BenchArgs& a) {
  lanes::Options o = a.opts;
  o.backend = env::backend_options(o.backend);
  const lanes::Report r = lanes::run(o);
  if (a.json) std::cout << lanes::to_json(r) << '\n';
  else lanes::print(r, std::cout);
  return kOk;
}

}  // namespace capstep::cli
