// `capstep bench`: the lanes of the seed, by the same code as
// examples/training_step_on_device (src/lanes/three_lanes.cpp).
#include <iostream>

#include "commands.h"
#include "env_options.h"

namespace capstep::cli {

int run_bench(const BenchArgs& a) {
  lanes::Options o = a.opts;
  // --pjrt-plugin and --pjrt-cache over CAPSTEP_PJRT_PLUGIN and CAPSTEP_PJRT_CACHE
  const std::string plugin = o.backend.pjrt.plugin, cache = o.backend.pjrt.cache_dir;
  o.backend = env::backend_options(o.backend);
  if (!plugin.empty()) o.backend.pjrt.plugin = plugin;
  if (!cache.empty()) o.backend.pjrt.cache_dir = cache;
  const lanes::Report r = lanes::run(o);
  if (a.json) std::cout << lanes::to_json(r) << '\n';
  else lanes::print(r, std::cout);
  return kOk;
}

}  // namespace capstep::cli
