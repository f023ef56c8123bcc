// `capstep show` and `capstep export`: the captured programs of the model, as
// capstep's own text or as StableHLO; `capstep export-hf`: a checkpoint's
// model in the Hugging Face layout.
#include <algorithm>
#include <cctype>
#include <iostream>

#include "capstep/kernel_report.h"
#include <filesystem>

#include "capstep/autodiff.h"
#include "capstep/data.h"
#include "capstep/hf.h"
#include "capstep/host_options.h"
#include "capstep/safetensors.h"
#include "capstep/stablehlo.h"
#include "capstep/trace.h"
#include "commands.h"

namespace capstep::cli {
namespace {

// forward: params, tokens, targets -> loss; grad: + "grad.<p>" for every
// parameter; fused: with_adamw(grad), parameters and moments donated. With
// fused_attention the loss goes through fuse_attention first; bf16: then
// through optim::mixed_precision_bf16. replicas > 0: the gradient program
// through optim::data_parallel.
// prefill: the KV cache's first program over --seq prompt tokens; decode: its
// one-token program over a cache of --context rows (nn::lm_prefill_program,
// lm_decode_program: the programs `capstep sample` builds, whose cache has
// --window rows, by default the model's --seq), in f32.
Program model_program(const nn::LmConfig& c, const std::string& which, optim::Precision precision, bool fused_attention,
                      int replicas, int checkpoint_every) {
  if (checkpoint_every > 0 && which != "grad" && which != "fused")
    throw UsageError("--checkpoint-activations and --checkpoint-every go with --program grad or fused");
  if (which == "prefill" || which == "decode") {
    if (precision != optim::Precision::f32) throw UsageError("--precision: the " + which + " program is f32 only");
    if (fused_attention) throw UsageError("--fused-attention goes with --program forward, grad or fused");
    if (replicas > 0) throw UsageError("--data-parallel goes with --program grad or fused");
    return which == "prefill" ? nn::lm_prefill_program(c, c.seq) : nn::lm_decode_program(c, c.context);
  }
  Program loss = nn::lm_loss_program(c);
  if (fused_attention) loss = fuse_attention(loss);
  loss = optim::with_precision(loss, precision);
  if (which == "forward") return loss;
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  Program grad = value_and_grad(loss, names);
  if (checkpoint_every > 0) grad = checkpoint_activations(grad, nn::lm_checkpoint_regions(c, grad, checkpoint_every));
  if (replicas > 0) grad = optim::data_parallel(grad, names, replicas);
  if (which == "grad") return grad;
  if (which == "fused") return optim::with_adamw(grad, names, optim::AdamW{});
  throw UsageError("--program: '" + which + "' is not one of forward, grad, fused, prefill, decode");
}

}  // namespace

int run_show(const ShowArgs& a) {
  if (a.unfused && !a.kernels) throw UsageError("--unfused goes with --kernels");
  if (a.data_parallel > 0 && a.program == "forward") throw UsageError("--data-parallel goes with --program grad or fused");
  const nn::LmConfig c = a.model.checked();
  const Program p = model_program(c, a.program, a.precision, a.fused_attention, a.data_parallel, a.checkpoint_every);
  if (a.kernels) std::cout << describe_gpu_kernels(p, !a.unfused);
  else std::cout << to_text(p);
  if (a.data_parallel > 0) {
    int64_t n = 0, bytes = 0;
    for (const Eqn& e : p.eqns)
      if (e.op == Op::all_reduce) {
        ++n;
        bytes += static_cast<int64_t>(p.type(e.out).bytes());
      }
    std::cout << "data-parallel over " << a.data_parallel << " replicas: " << n << " all_reduce equations, " << bytes
              << " bytes all-reduced per step (" << nn::count_parameters(c) << " parameters x 4 bytes + the f32 loss)\n";
  }
  if (a.checkpoint_every > 0) {
    // What checkpointing changed: the equations it added (the recomputed
    // forward) and the host's planned memory of the step without and with it
    // (host::memory_needed: the arena of intermediate values; held(): the
    // arena, constants and tiles).
    const Program plain = model_program(c, a.program, a.precision, a.fused_attention, a.data_parallel, 0);
    const std::vector<int> r = nn::lm_checkpoint_regions(c, p, a.checkpoint_every);
    const int64_t chunks = nn::lm_loss_chunks(c);
    const host::MemoryPlan mp = host::memory_needed(plain), mc = host::memory_needed(p);
    auto mib = [](size_t b) { return std::to_string((b + (1u << 19)) >> 20); };
    std::cout << "activation checkpointing: " << (static_cast<int64_t>(r.size()) - (chunks > 1 ? chunks : 0))
              << " of " << c.n_layers << " blocks"
              << (chunks > 1 ? " and the loss's " + std::to_string(chunks) + " chunks of logits" : std::string())
              << " recomputed in the backward, " << (p.eqns.size() - plain.eqns.size())
              << " equations added (" << plain.eqns.size() << " -> " << p.eqns.size()
              << "); the host's plan: intermediate values " << mib(mp.arena) << " MiB -> " << mib(mc.arena)
              << " MiB, all it holds besides inputs and outputs " << mib(mp.held()) << " MiB -> " << mib(mc.held())
              << " MiB\n";
  }
  std::cout.flush();
  return kOk;
}

int run_export(const ExportArgs& a) {
  if (a.program == "forward") throw UsageError("--program: export takes grad, fused, prefill or decode");
  // "-": the program on standard output and the summary on standard error, so
  // that `capstep export --out - | tool` reads the program alone.
  const bool to_stdout = a.out == "-";
  if (!to_stdout) check_output("--out", a.out);
  const nn::LmConfig c = a.model.checked();
  const int replicas = a.data_parallel;
  const std::string text =
      to_stablehlo(model_program(c, a.program, a.precision, a.fused_attention, replicas, a.checkpoint_every), "capstep",
                   std::max(replicas, 1));
  if (to_stdout) {
    std::cout << text << std::flush;
    if (!std::cout) throw Error("--out -: cannot write to standard output");
  } else {
    write_file_atomically(a.out, text);
  }
  std::ostream& say = to_stdout ? std::cerr : std::cout;
  say << "wrote " << (to_stdout ? "standard output" : a.out) << " (" << text.size() << " bytes): the " << a.program
      << (a.precision == optim::Precision::bf16 ? " bf16 mixed-precision" : "") << " program of \"" << c.describe()
      << "\" as StableHLO";
  if (replicas > 0) say << ", data-parallel over " << replicas << " replicas (batch " << c.batch << " each)";
  if (a.checkpoint_every == 1) say << ", every block's activations recomputed in the backward";
  if (a.checkpoint_every > 1)
    say << ", the activations of blocks 0, " << a.checkpoint_every << ", " << 2 * a.checkpoint_every
        << ", ... recomputed in the backward";
  if (a.program == "prefill") say << ", over " << c.seq << " prompt tokens";
  if (a.program == "decode") say << ", one token over a cache of " << c.context << " rows";
  say << "\n";
  return kOk;
}

int64_t parse_shard_size(const std::string& s) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  std::string unit = s.substr(digits);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::pair<const char*, int64_t> units[] = {{"", 1},           {"B", 1},          {"KB", 1000},
                                                   {"MB", 1000000},   {"GB", 1000000000}, {"KIB", 1 << 10},
                                                   {"MIB", 1 << 20},  {"GIB", 1 << 30}};
  for (const auto& [name, scale] : units) {
    if (unit != name || digits == 0 || digits > 12) continue;
    return std::stoll(s.substr(0, digits)) * scale;
  }
  throw UsageError("--max-shard-size: '" + s + "' is not a size (bytes, or a whole number with KB, MB, GB, KiB, MiB "
                   "or GiB: 5GB; 0 for one file)");
}

int run_export_hf(const ExportHfArgs& a) {
  std::error_code ec;
  if (std::filesystem::exists(a.out, ec) && !std::filesystem::is_directory(a.out, ec))
    throw UsageError("--out: '" + a.out + "' is a file; give a directory");
  const int64_t max_shard_bytes = parse_shard_size(a.max_shard_size);
  train::TrainMeta meta;
  const Checkpoint c = train::load_model_checkpoint(a.checkpoint, &meta);
  if (meta.model.arch == nn::Arch::seed)
    throw UsageError("--checkpoint: '" + a.checkpoint +
                     "' holds the seed architecture (learned positions with RMSNorm and an untied head), which has no "
                     "transformers counterpart; train with --arch gpt2 or --arch llama to export");
  // A LoRA run's checkpoint: the merged model (lora::merge, f32).
  std::vector<Array> params;
  std::vector<std::string> names;
  for (const nn::ParamSpec& s : nn::lm_parameters(meta.model)) {
    names.push_back(s.name);
    params.push_back(c.params[params.size()].array);
  }
  if (meta.lora) lora::merge(train::checkpoint_adapter(c, meta), names, params);
  // The tokenizer is named in config.json ("capstep_tokenizer") for `capstep
  // train --init-from`, and written as tokenizer.json for transformers (a
  // SentencePiece one also as tokenizer.model).
  std::vector<std::string> warnings;
  nn::HfWriteOptions options;
  options.dtype = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  options.max_shard_bytes = max_shard_bytes;
  nn::write_hf_dir(a.out, meta.model, params, meta.tokenizer, meta.tokenizer_model, &warnings, options);
  const bool subword = data::Tokenizer::parse(meta.tokenizer).subword();
  // The weights' files: one model.safetensors, or the shards and their index.
  std::string weights = "model.safetensors";
  if (std::filesystem::exists(a.out + "/model.safetensors.index.json", ec)) {
    size_t shards = 0;
    for (const auto& e : std::filesystem::directory_iterator(a.out, ec))
      shards += e.path().filename().string().rfind("model-", 0) == 0;
    weights = std::to_string(shards) + " shards (model-NNNNN-of-NNNNN.safetensors), model.safetensors.index.json";
  }
  std::cout << "wrote " << a.out << "/config.json, " << weights << (a.dtype == "bf16" ? " (bf16)" : "")
            << ", tokenizer.json, tokenizer_config.json" << (subword ? ", tokenizer.model" : "") << ": \""
            << meta.model.describe() << "\" as transformers' " << nn::hf_architecture(meta.model) << " at step "
            << c.step << ", the " << meta.tokenizer << " tokenizer\n";
  for (const std::string& w : warnings) std::cerr << "capstep export-hf: warning: " << w << "\n";
  return kOk;
}

}  // namespace capstep::cli
