// training_step_on_device: one training step of the seed's causal LM, five
// ways (host; host with AdamW in the program; GPU with AdamW on the host; GPU
// with AdamW in the program; XLA through a PJRT plugin, AdamW in the program),
// each timed, each checked against the host lane. The lanes live in
// src/lanes/three_lanes.cpp, shared with `capstep bench`, whose flags it takes
// for what they share. Lane [4]'s plugin is --pjrt-plugin or
// CAPSTEP_PJRT_PLUGIN (scripts/run-example fetches a CPU plugin; docs/pjrt.md).
#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>

#include "lanes/lanes.h"
#include "env_options.h"  // tools/: the CAPSTEP_HOST_* and CAPSTEP_CUDA_* switches, read as `capstep` reads them,
                          // and CAPSTEP_PJRT_PLUGIN; OpenBLAS's own variables

int main(int argc, char** argv) {
  // First: OpenBLAS's kernel set and thread count, before any thread exists
  // and before it loads, where the user set neither (docs/cli.md, "Environment").
  capstep::env::apply_openblas_environment();
  capstep::lanes::Options o;
  bool json = false, no_tf32 = false;
  CLI::App app{"One training step of a small causal LM, five ways, each timed."};
  app.add_option("--steps", o.steps, "compared and timed steps per lane")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", o.warmup, "untimed warm-up steps per lane")->check(CLI::Range(0, 1000));
  // Read as text: CLI11 would wrap "-1" to 2^64-1, silently another seed.
  std::string seed_text = "1";
  app.add_option("--seed", seed_text, "seed of the initial parameters and the batch order, in [0, 2^64)");
  app.add_option("--text", o.text_path, "train on this text file instead of the built-in corpus");
  app.add_flag("--no-tf32", no_tf32, "full f32 dots on the GPU (TF32 is the default)");
  app.add_flag("--json", json, "print one JSON object with every figure");
  app.add_option("--only", o.only, "run this lane alone: 1, 1f, 2, 3 or 4")
      ->check(CLI::IsMember({"1", "1f", "2", "3", "4"}));
  std::string precision = "f32";
  app.add_option("--precision", precision,
                 "f32, or bf16: GEMM operands in bf16 with f32 accumulation, parameters, AdamW and reductions in f32 "
                 "(default f32)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_flag("--fused-attention", o.fused_attention,
               "each layer's causal attention as one attention primitive (fuse_attention)");
  std::string plugin, cache;
  app.add_option("--pjrt-plugin", plugin, "the PJRT plugin (.so) of lane [4] (default: CAPSTEP_PJRT_PLUGIN; none: [4] skips)");
  app.add_option("--pjrt-cache", cache, "a directory of compiled XLA executables for lane [4] (default: CAPSTEP_PJRT_CACHE; none)");
  app.add_option("--size", o.size,
                 "the model of the size ladder: seed (default), middle (8 layers, d_model 512, batch 8 x 256) or "
                 "gpt2-small (12 layers, d_model 768, batch 8 x 512)")
      ->check(CLI::IsMember(capstep::nn::LmConfig::preset_names()));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto [end, ec] = std::from_chars(seed_text.data(), seed_text.data() + seed_text.size(), o.seed);
  if (seed_text.empty() || ec != std::errc() || end != seed_text.data() + seed_text.size()) {
    std::cerr << "--seed: '" << seed_text << "' is not an integer in [0, 18446744073709551615]\n";
    return 2;
  }
  o.backend.cuda.tf32 = !no_tf32;
  try {
    if (!o.size.empty()) o.model = capstep::nn::LmConfig::preset(o.size);
    o.precision = capstep::optim::parse_precision(precision);
    // --pjrt-plugin and --pjrt-cache over CAPSTEP_PJRT_PLUGIN and CAPSTEP_PJRT_CACHE, as in capstep
    o.backend = capstep::env::backend_options(o.backend);
    if (!plugin.empty()) o.backend.pjrt.plugin = plugin;
    if (!cache.empty()) o.backend.pjrt.cache_dir = cache;
    capstep::lanes::Report r = capstep::lanes::run(o);
    if (json) std::cout << capstep::lanes::to_json(r) << '\n';
    else capstep::lanes::print(r, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "training_step_on_device: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
