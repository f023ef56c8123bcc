// `capstep sample`: the prompt, then each generated character as it comes.
#include <cstdio>

#include "commands.h"
#include "env_options.h"

namespace capstep::cli {

int run_sample(const SampleArgs& a) {
  train::SampleOptions o = a.opts;
  o.backend = env::backend_options(o.backend);
  try {
    o.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // --window is bounded by the checkpoint's model: out of range is a usage error.
  if (o.window > 0) {
    const nn::LmConfig m = train::parse_meta(load_checkpoint(o.checkpoint)).model;
    if (o.window > m.context)
      throw UsageError("--window: " + std::to_string(o.window) + " is longer than the context of the checkpoint's model (" +
                       std::to_string(m.context) + ")");
  }
  // The prompt goes out with the first character, once the checkpoint has
  // loaded: a bad checkpoint prints nothing on standard output.
  bool started = false;
  o.on_char = [&](char c) {
    if (!started) std::fputs(a.opts.prompt.c_str(), stdout);
    started = true;
    std::fputc(c, stdout);
    std::fflush(stdout);
  };
  train::SampleStats stats;
  o.stats = &stats;
  train::sample(o);
  if (!started) std::fputs(a.opts.prompt.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  // The rate goes to standard error: standard output is the text alone.
  if (o.kv_cache)
    std::fprintf(stderr, "prefill %lld tokens in %.3f s; ", static_cast<long long>(stats.prompt_tokens), stats.prefill_s);
  std::fprintf(stderr, "%lld tokens in %.3f s (%.1f tokens/s)", static_cast<long long>(stats.tokens), stats.generate_s,
               stats.tokens_per_s());
  if (stats.slides > 0) std::fprintf(stderr, "; the window slid %lld times", static_cast<long long>(stats.slides));
  std::fputc('\n', stderr);
  return kOk;
}

}  // namespace capstep::cli
