// `capstep bench`: the lanes of the seed, by the same code as
// examples/training_step_on_device (src/lanes/three_lanes.cpp).
#include <iostream>

#include "commands.h"

namespace capstep::cli {

int run_bench(const BenchArgs& a) {
  const lanes::Report r = lanes::run(a.opts);
  if (a.json) std::cout << lanes::to_json(r) << '\n';
  else lanes::print(r, std::cout);
  return kOk;
}

}  // namespace capstep::cli
