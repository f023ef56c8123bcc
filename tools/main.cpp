// `capstep`: train the causal LM on your own text, sample from it, run the
// three-lane benchmark, show or export the captured programs. This file only
// parses the command line (CLI11); the subcommands live in cmd_*.cpp.
//
// Exit codes: 0 success, 1 runtime failure, 2 usage error (docs/cli.md).
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <new>
#include <set>

#include "capstep/data.h"
#include "capstep/ir.h"
#include "capstep/version.h"
#include "commands.h"
#include "env_options.h"

namespace capstep::cli {
namespace {

// A seed: a decimal integer in [0, 2^64). CLI11's own conversion would wrap
// "-1" to 2^64-1 and clamp 2^64 to it, and read "010" as octal 8: silently
// another seed. Used with transform(): the value is rewritten as plain decimal.
const CLI::Validator kSeed(
    [](std::string& s) -> std::string {
      uint64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size())
        return "'" + s + "' is not an integer in [0, 18446744073709551615]";
      s = std::to_string(v);
      return "";
    },
    "UINT64");

// A positive, finite number (CLI11's PositiveNumber would print the largest
// double as the range).
const CLI::Validator kPositiveFinite(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) return "'" + s + "' is not a positive finite number";
      return "";
    },
    "POSITIVE");

// A whole number in [lo, hi], written in decimal. CLI11's Range says "not in
// range" for "1e3", and its conversion reads "010" as octal 8 and "0x10" as
// 16; this validator rewrites the value as plain decimal before CLI11
// converts it.
CLI::Validator int_range(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const char* b = s.data() + (s.size() > 1 && s[0] == '+' ? 1 : 0);
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
        if (s.empty() || end != s.data() + s.size() || ec == std::errc::invalid_argument)
          return "'" + s + "' is not an integer; give a whole number in " + range;
        if (ec == std::errc::result_out_of_range || v < lo || v > hi) return "'" + s + "' is not in " + range;
        s = std::to_string(v);
        return "";
      },
      range);
}

// A finite number in [lo, hi]: NaN and the infinities are refused (CLI11's
// Range lets NaN through, every comparison with it being false), and the range
// is printed as written ("[0, 1e+30]", not 31 digits and six decimals).
CLI::Validator real_range(double lo, double hi) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%g, %g]", lo, hi);
  const std::string range = buf;
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0') return "'" + s + "' is not a number; give one in " + range;
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number; give one in " + range;
        if (v < lo || v > hi) return "'" + s + "' is not in " + range;
        return "";
      },
      range);
}

// A path option: an empty one would silently mean "none".
const CLI::Validator kNonEmpty(
    [](std::string& s) -> std::string { return s.empty() ? "an empty path; give a file name" : ""; }, "PATH");

void add_model_options(CLI::App* c, ModelArgs& m) {
  nn::LmConfig& k = m.config;
  auto mark = [&m](CLI::Option* o) { o->each([&m](const std::string&) { m.given = true; }); };
  auto shape = [&m](CLI::Option* o) { o->each([&m](const std::string&) { m.given = m.shape_given = true; }); };
  shape(c->add_option_function<std::string>(
             "--arch", [&k](const std::string& s) { k.arch = nn::parse_arch(s); },
             "seed (the seed's model, default), gpt2 (LayerNorm with bias, biases, learned positions, tanh-GELU, "
             "tied head) or llama (RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied head)")
            ->check(CLI::IsMember({"seed", "gpt2", "llama"})));
  shape(c->add_option("--layers", k.n_layers, "transformer blocks")->capture_default_str()->transform(int_range(1, 256)));
  shape(c->add_option("--d-model", k.d_model, "width of the residual stream")->capture_default_str()->transform(int_range(1, 16384)));
  shape(c->add_option("--heads", k.n_heads, "attention heads (must divide --d-model)")->capture_default_str()->transform(int_range(1, 16384)));
  shape(c->add_option("--kv-heads", k.n_kv_heads, "--arch llama: key/value heads, dividing --heads (default: --heads)")
            ->transform(int_range(1, 16384))->each([&m](const std::string&) { m.kv_heads_given = true; }));
  shape(c->add_option("--rope-theta", k.rope_theta, "--arch llama: the rotary embedding's base")
            ->capture_default_str()->check(real_range(1.0, 1e12))
            ->each([&m](const std::string&) { m.rope_theta_given = true; }));
  shape(c->add_option("--context", k.context, "rows of the positional table: the longest sequence")
           ->capture_default_str()->transform(int_range(1, 65536)));
  shape(c->add_option("--d-ff", k.d_ff, "feed-forward width")->capture_default_str()->transform(int_range(1, 65536)));
  mark(c->add_option("--batch", k.batch, "sequences per batch")->capture_default_str()->transform(int_range(1, 65536)));
  mark(c->add_option("--seq", k.seq, "tokens per sequence (at most --context)")->capture_default_str()->transform(int_range(1, 65536)));
}

// --precision f32|bf16 (optim::Precision): bf16 runs the step from
// optim::mixed_precision_bf16, on the host and GPU lanes.
CLI::Option* add_precision_option(CLI::App* c, optim::Precision& p) {
  return c->add_option_function<std::string>(
       "--precision", [&p](const std::string& s) { p = optim::parse_precision(s); },
       "f32, or bf16: GEMM operands in bf16 with f32 accumulation, parameters, AdamW and reductions in f32 "
       "(default f32)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}

// A tokenizer name data::Tokenizer::parse takes (char, byte, bpe:N, unigram:N).
const CLI::Validator kTokenizer(
    [](std::string& s) -> std::string {
      try {
        capstep::data::Tokenizer::parse(s);
      } catch (const capstep::Error& e) {
        return e.what();
      }
      return "";
    },
    "TOKENIZER");

// --checkpoint-activations (every block) and --checkpoint-every K (every K-th
// block from block 0): checkpoint_activations (autodiff.h) on the step.
void add_checkpoint_options(CLI::App* c, int& every) {
  CLI::Option* all = c->add_flag_callback(
      "--checkpoint-activations", [&every] { every = 1; },
      "activation checkpointing: every transformer block's forward recomputed inside the backward instead of its "
      "activations held (less memory, about one more forward of compute; the same results bit for bit)");
  c->add_option("--checkpoint-every", every,
                "activation checkpointing of every K-th block from block 0 (1: as --checkpoint-activations)")
      ->transform(int_range(1, 256))->excludes(all);
}

const char* const kFusedAttentionHelp =
    "each layer's causal attention as one attention primitive (fuse_attention): fused forward and backward "
    "kernels on the GPU, the score matrix never stored; exported as plain StableHLO";

}  // namespace

nn::LmConfig ModelArgs::checked() const {
  const std::string arch = std::string("--arch ") + nn::arch_name(config.arch);
  if (kv_heads_given && config.arch != nn::Arch::llama) throw UsageError("--kv-heads applies to --arch llama, not " + arch);
  if (rope_theta_given && config.arch != nn::Arch::llama)
    throw UsageError("--rope-theta applies to --arch llama, not " + arch);
  try {
    config.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return config;
}

}  // namespace capstep::cli

int main(int argc, char** argv) {
  using namespace capstep::cli;
  // Before any thread and before OpenBLAS loads: capstep's kernel set and one
  // OpenBLAS thread, where the user set neither (docs/cli.md, "Environment").
  try {
    capstep::env::apply_openblas_environment();
  } catch (const std::exception& e) {
    std::cerr << "capstep: " << e.what() << '\n';
    return 1;
  }
  CLI::App app{"capstep: capture a training step as a program, differentiate it, run it on the host or a GPU.\n"
               "Train a small causal language model on your own text, and sample from it."};
  app.footer("Exit codes: 0 success, 1 runtime failure, 2 usage error. `capstep SUBCOMMAND --help` for its options.");
  app.require_subcommand(1);
  app.fallthrough(false);
  app.set_version_flag("--version", std::string("capstep ") + CAPSTEP_VERSION);
  std::function<int()> action;

  // ---- train
  TrainArgs ta;
  CLI::App* train = app.add_subcommand("train", "train the causal LM (the seed's model by default) on a text");
  train->add_option("--text", ta.opts.text_path, "train on this text file (default: the built-in corpus)")
      ->check(kNonEmpty)->check(CLI::ExistingFile)->each([&](const std::string&) { ta.text_given = true; });
  train->add_option("--tokens", ta.opts.tokens_path,
                    "train on these token ids instead of a text: a file or a quoted glob of shards (sorted), in llm.c's "
                    "layout or nanoGPT's raw uint16 (--tokens-format), memory-mapped; ids below the vocabulary of "
                    "--tokenizer (or --init-from's)")
      ->check(kNonEmpty);
  train->add_option("--val-tokens", ta.opts.val_tokens_path,
                    "with --tokens: the validation batches' ids, a file or a quoted glob (instead of --val-fraction)")
      ->check(kNonEmpty);
  train->add_option("--tokens-format", ta.opts.tokens_format,
                    "auto (llm.c's header by its magic, else raw uint16), llmc or raw-u16")
      ->capture_default_str()->check(CLI::IsMember({"auto", "llmc", "raw-u16"}));
  train->add_option("--sft", ta.opts.sft_path,
                    "instruction data instead of a text: JSONL rows {\"prompt\": ..., \"completion\": ...} or "
                    "{\"messages\": [{\"role\": system|user|assistant, \"content\": ...}, ...]}, in the model's chat "
                    "format, the loss on the completion/assistant tokens only (docs/cli.md, \"Instruction data\")")
      ->check(kNonEmpty)->check(CLI::ExistingFile);
  train->add_option("--chat-template", ta.opts.chat_template,
                    "with --sft: chatml, llama3 or plain (default: chatml or llama3 when the tokenizer has their "
                    "special tokens, else plain)")
      ->check(CLI::IsMember({"chatml", "llama3", "plain"}));
  train->add_flag("--mask-prompt,!--no-mask-prompt", ta.opts.mask_prompt,
                  "with --sft: the loss on completion/assistant tokens only (default); --no-mask-prompt: on every token");
  train->add_flag("--sft-pack", ta.opts.sft_pack,
                  "with --sft: concatenate the rows into windows of --seq (default: one row per batch row, padded, "
                  "a longer row cut)");
  train->add_option_function<std::string>(
           "--tokenizer",
           [&](const std::string& s) {
             ta.opts.tokenizer = s;
             ta.tokenizer_given = true;
           },
           "char: 63 symbols (letters, space, newline, ! \" ' , - . : ; ?) and '~' for anything else, the seed's "
           "(default); byte: the 256 byte values, any file, nothing unknown; bpe:N or unigram:N: N subword pieces "
           "(300 to 65536) trained on the text with SentencePiece, byte fallback on; bytelevel-bpe:N: GPT-2's "
           "byte-level BPE, read from --init-from's directory only; a resumed run keeps the checkpoint's")
      ->check(kTokenizer);
  train->add_flag("--allow-unknown", ta.opts.allow_unknown,
                  "train even when more than 1% of the text's characters are outside the tokenizer's symbols "
                  "(they train as '~'; the share is printed either way)");
  train->add_option("--steps", ta.opts.steps, "train until this step count (a resumed run continues from its step)")
      ->capture_default_str()->transform(int_range(1, 100000000));
  CLI::Option* backend_opt =
      train->add_option("--backend", ta.backend, "where the step runs: host, cuda or pjrt (an XLA device through --pjrt-plugin)")
          ->capture_default_str()->check(CLI::IsMember({"host", "cuda", "pjrt"}));
  CLI::Option* adamw_opt =
      train->add_option("--adamw", ta.adamw, "host (AdamW in C++ on the host) or program (in the step program: "
                                             "parameters and moments stay where the step runs)")
          ->capture_default_str()->check(CLI::IsMember({"host", "program"}));
  train->add_option("--lane", ta.lane, "--backend and --adamw in one word: host, host-fused, cuda, cuda-fused, pjrt, "
                                       "pjrt-fused (gpu and gpu-fused: cuda and cuda-fused)")
      ->check(CLI::IsMember({"host", "host-fused", "cuda", "cuda-fused", "pjrt", "pjrt-fused", "gpu", "gpu-fused"}))
      ->excludes(backend_opt)->excludes(adamw_opt);
  train->add_option("--pjrt-plugin", ta.opts.backend.pjrt.plugin,
                    "the PJRT plugin (.so) of --backend pjrt (default: CAPSTEP_PJRT_PLUGIN)");
  train->add_option("--pjrt-cache", ta.opts.backend.pjrt.cache_dir,
                    "a directory of compiled XLA executables for --backend pjrt: a step compiled once is loaded from "
                    "there afterwards (default: CAPSTEP_PJRT_CACHE; none)")
      ->check(kNonEmpty);
  train->add_flag("--require-backend,--require-gpu", ta.opts.require_backend,
                  "fail (exit 1) instead of falling back to the host when the backend cannot run here");
  train->add_flag("!--no-tf32", ta.opts.backend.cuda.tf32, "full f32 dots on the GPU (TF32 is the default)");
  CLI::Option* precision = add_precision_option(train, ta.opts.precision);
  CLI::Option* fused_attention =
      train->add_flag("--fused-attention,!--no-fused-attention", ta.opts.fused_attention,
                      std::string(kFusedAttentionHelp) + " (--no-fused-attention: off, as by default, for a --resume)");
  add_checkpoint_options(train, ta.opts.checkpoint_every);
  train->add_option("--save", ta.opts.save_path, "checkpoint file (safetensors), written atomically at the end")
      ->check(kNonEmpty);
  train->add_flag("--overwrite", ta.overwrite,
                  "let --save, --log and --plot replace existing files (a fresh run refuses to, without --resume "
                  "for --save)");
  train->add_flag("--no-progress", ta.no_progress,
                  "no progress bar on a terminal: plain log lines, as when the output is a file (mpirun gives "
                  "ranks a pty)");
  train->add_option("--save-every", ta.opts.save_every, "also save every K steps (needs --save)")
      ->transform(int_range(1, 100000000));
  train->add_option("--resume", ta.opts.resume_path,
                    "continue from this checkpoint (its model, seed, lr, schedule, clipping, precision, attention, "
                    "validation share and text by default)")
      ->check(kNonEmpty)->check(CLI::ExistingFile);
  train->add_option("--init-from", ta.init_from,
                    "start from the weights of this directory in the Hugging Face layout (config.json and "
                    "model.safetensors or its shards, from transformers or `capstep export-hf`: GPT-2, Llama, "
                    "Qwen2); architecture and sizes come from "
                    "its config.json (--batch and --seq apply), the tokenizer from --tokenizer or the directory's "
                    "own (config.json's capstep_tokenizer, tokenizer.model, tokenizer.json, or vocab.json + "
                    "merges.txt)")
      ->check(kNonEmpty)->check(CLI::ExistingDirectory);
  train->add_option("--seed", ta.opts.seed, "seed of the initial parameters and of the batch order")
      ->capture_default_str()->transform(kSeed)->each([&](const std::string&) { ta.seed_given = true; });
  train->add_option("--lr", ta.opts.adamw.lr, "AdamW learning rate")
      ->capture_default_str()->check(kPositiveFinite)->each([&](const std::string&) { ta.lr_given = true; });
  train->add_option("--warmup-steps", ta.opts.schedule.warmup_steps, "raise the lr linearly from 0 over the first W steps")
      ->capture_default_str()->transform(int_range(0, 100000000))
      ->each([&](const std::string&) { ta.warmup_given = true; });
  train->add_option_function<std::string>(
           "--schedule",
           [&](const std::string& s) {
             ta.opts.schedule.kind = capstep::train::parse_schedule(s);
             ta.schedule_given = true;
           },
           "lr after the warmup: constant, or cosine (down to --min-lr at the last step, --steps); default constant")
      ->check(CLI::IsMember({"constant", "cosine"}));
  train->add_option("--min-lr", ta.opts.schedule.min_lr, "the lr the cosine schedule ends at (at most --lr)")
      ->capture_default_str()->check(real_range(0.0, 1e30))
      ->each([&](const std::string&) { ta.min_lr_given = true; });
  train->add_flag("--data-parallel", ta.data_parallel,
                  "one replica per MPI rank (start with mpirun -np R): --batch is each rank's, the global batch R times "
                  "it; gradients and loss averaged by all_reduce; rank 0 prints and saves");
  train->add_option("--dp-timeout", ta.dp_timeout,
                    "with --data-parallel: seconds one all_reduce waits for the other ranks before stopping the run")
      ->capture_default_str()->check(real_range(0.1, 86400.0));
  train->add_option_function<std::string>(
           "--dp-pack", [&](const std::string& s) { ta.opts.dp_pack = s == "on"; },
           "with --data-parallel: on: every gradient and the loss in one all-reduce message per step; off: one "
           "message per value; default on")
      ->check(CLI::IsMember({"on", "off"}));
  train->add_option_function<double>(
           "--dp-bucket-mib", [&](double m) { ta.opts.dp_bucket_bytes = static_cast<int64_t>(m * 1048576.0); },
           "with --data-parallel and --dp-pack on: pack the values into messages of at most this many MiB (a larger "
           "value alone; 0: one message); default 4")
      ->check(real_range(0.0, 1e6));
  train->add_option("--clip-grad-norm", ta.opts.clip_grad_norm,
                    "scale the gradients by min(1, C/norm), norm over all of them, inside the step (0: off)")
      ->capture_default_str()->check(real_range(0.0, 1e30))
      ->each([&](const std::string&) { ta.clip_given = true; });
  train->add_option("--train", ta.opts.train_patterns,
                    "train only the parameters these glob patterns (* ?, comma-separated; capstep's or transformers' "
                    "names) match; the others are frozen (repeatable)")
      ->check(kNonEmpty)->allow_extra_args(false);
  train->add_option("--freeze", ta.opts.freeze_patterns,
                    "freeze the parameters these glob patterns (* ?, comma-separated; capstep's or transformers' "
                    "names) match: no gradient, no AdamW moments (repeatable)")
      ->check(kNonEmpty)->allow_extra_args(false);
  train->add_option("--grad-accum", ta.opts.grad_accum,
                    "micro-batches of --batch rows per optimizer step, one update of their mean gradient")
      ->capture_default_str()->transform(int_range(1, 1000000))
      ->each([&](const std::string&) { ta.accum_given = true; });
  auto lora_given = [&](const std::string&) { ta.lora_given = true; };
  train->add_option("--lora-rank", ta.opts.lora.rank,
                    "train LoRA adapters of this rank on --lora-targets, every base parameter frozen (0: no LoRA)")
      ->transform(int_range(0, 1 << 20))->each(lora_given);
  train->add_option("--lora-alpha", ta.opts.lora.alpha, "LoRA's alpha: the adapters' scale is alpha / rank (PEFT's lora_alpha)")
      ->capture_default_str()->check(real_range(1e-30, 1e30))->each(lora_given);
  train->add_flag("--lora-rslora", ta.opts.lora.rslora, "scale alpha / sqrt(rank) (PEFT's use_rslora)")->each(lora_given);
  train->add_option("--lora-targets", ta.lora_targets,
                    "the modules to adapt, comma-separated (q_proj,v_proj, ..., or all-linear: every linear layer but "
                    "the head); default PEFT's: llama q_proj,v_proj, gpt2 c_attn")
      ->check(kNonEmpty)->each(lora_given);
  train->add_option("--lora-from", ta.opts.lora.from,
                    "start from the LoRA adapter PEFT saved in this directory (rank, alpha, targets from its "
                    "adapter_config.json)")
      ->check(kNonEmpty)->check(CLI::ExistingDirectory)->each(lora_given);
  train->add_option("--lora-dropout", ta.lora_dropout, "LoRA dropout: not supported, only 0")
      ->check(real_range(0.0, 1.0))->each(lora_given);
  train->add_option("--base-precision", ta.base_precision,
                    "with LoRA: hold the adapted base weights in f32 or bf16 (half the memory)")
      ->capture_default_str()->check(CLI::IsMember({"f32", "bf16"}))->each(lora_given);
  ta.opts.val_fraction = 0.1;   // the CLI holds out 10% as nanoGPT does; the library default is none
  CLI::Option* val_fraction = train->add_option("--val-fraction", ta.opts.val_fraction,
                    "hold out the text's last fraction for a validation loss (0: none)")
      ->capture_default_str()->check(real_range(0.0, 0.99));
  train->add_option("--eval-every", ta.opts.eval_every, "validation loss every K steps (0: only at the end)")
      ->capture_default_str()->transform(int_range(0, 100000000));
  train->add_option("--eval-batches", ta.opts.eval_batches, "fixed validation batches averaged per evaluation")
      ->capture_default_str()->transform(int_range(1, 100000));
  train->add_option("--log", ta.log_csv, "write the loss and lr of every step to this CSV file")->check(kNonEmpty);
  train->add_option("--plot", ta.plot, "draw the loss curve into this .svg or .png file (with gnuplot)")
      ->check(kNonEmpty);
  train->add_option("--print-every", ta.print_every, "without a terminal: a log line every N steps (default: about 20 a run)")
      ->transform(int_range(1, 100000000));
  add_model_options(train, ta.model);
  train->callback([&] {
    ta.precision_given = precision->count() > 0;
    ta.fused_attention_given = fused_attention->count() > 0;
    ta.val_fraction_given = val_fraction->count() > 0;
    action = [&] { return run_train(ta); };
  });

  // ---- sample
  SampleArgs sa;
  CLI::App* sample = app.add_subcommand("sample", "generate text from a checkpoint, on the host");
  sample->add_option("--checkpoint", sa.opts.checkpoint, "a checkpoint written by `capstep train --save`")
      ->required()->check(kNonEmpty)->check(CLI::ExistingFile);
  sample->add_option("--prompt", sa.opts.prompt, "text to continue (default: the start of a paragraph)");
  sample->add_option("--tokens", sa.opts.tokens, "tokens to generate (characters with the char tokenizer, bytes with byte)")
      ->capture_default_str()->transform(int_range(0, 1000000));
  sample->add_option("--temperature", sa.opts.temperature, "softmax temperature; 0 picks the most likely symbol")
      ->capture_default_str()->check(real_range(0.0, 100.0));
  sample->add_option("--top-k", sa.opts.top_k, "draw among the k most likely symbols only; 0: no limit")
      ->capture_default_str()->transform(int_range(0, 1 << 20));
  sample->add_option("--top-p", sa.opts.top_p, "draw among the fewest most likely symbols whose probabilities reach p; 1: no limit")
      ->capture_default_str()->check(real_range(1e-9, 1.0));
  sample->add_flag_function("--no-kv-cache", [&sa](int64_t) { sa.opts.kv_cache = false; },
                            "run the whole window for every token (the reference the KV cache is checked against)");
  sample->add_flag("--special-tokens", sa.opts.special_tokens,
                   "the prompt's special tokens (<|im_start|>, <|eot_id|>, ...) as their ids, as transformers encodes them "
                   "and --sft's chat templates write them (default: as plain text)");
  sample->add_option("--seed", sa.opts.seed, "seed of the sampler")->capture_default_str()->transform(kSeed);
  sample->add_option("--window", sa.opts.window, "tokens the model reads (default: its training --seq, at most --context)")
      ->transform(int_range(1, 65536));
  sample->callback([&] { action = [&] { return run_sample(sa); }; });

  // ---- bench: the options of examples/training_step_on_device
  BenchArgs ba;
  bool no_tf32 = false;
  CLI::App* bench = app.add_subcommand("bench", "one training step of the seed's model, four ways, each timed");
  bench->add_option("--steps", ba.opts.steps, "compared and timed steps per lane")->capture_default_str()->transform(int_range(1, 1000000));
  bench->add_option("--warmup", ba.opts.warmup, "untimed warm-up steps per lane")->capture_default_str()->transform(int_range(0, 1000));
  bench->add_option("--seed", ba.opts.seed, "seed of the initial parameters and the batch order")
      ->capture_default_str()->transform(kSeed);
  bench->add_option("--text", ba.opts.text_path, "train on this text file instead of the built-in corpus")
      ->check(kNonEmpty)->check(CLI::ExistingFile);
  bench->add_flag("--no-tf32", no_tf32, "full f32 dots on the GPU (TF32 is the default)");
  bench->add_flag("--json", ba.json, "print one JSON object with every figure");
  add_precision_option(bench, ba.opts.precision);
  bench->add_option("--only", ba.opts.only, "run this lane alone: 1, 1f, 2, 3 or 4")
      ->check(CLI::IsMember({"1", "1f", "2", "3", "4"}));
  bench->add_flag("--fused-attention", ba.opts.fused_attention, kFusedAttentionHelp);
  bench->add_option("--pjrt-plugin", ba.opts.backend.pjrt.plugin,
                    "the PJRT plugin (.so) of lane [4] (default: CAPSTEP_PJRT_PLUGIN; none: [4] skips)");
  bench->add_option("--pjrt-cache", ba.opts.backend.pjrt.cache_dir,
                    "a directory of compiled XLA executables for lane [4] (default: CAPSTEP_PJRT_CACHE; none)")
      ->check(kNonEmpty);
  bench->add_option_function<std::string>(
           "--size",
           [&](const std::string& s) {
             ba.opts.model = capstep::nn::LmConfig::preset(s);
             ba.opts.size = s;
           },
           "the model of the benchmark's size ladder: seed (default), middle (8 layers, d_model 512, batch 8 x 256) "
           "or gpt2-small (12 layers, d_model 768, batch 8 x 512)")
      ->check(CLI::IsMember(capstep::nn::LmConfig::preset_names()));
  std::string bench_arch = "seed";
  bench->add_option("--arch", bench_arch,
                    "the architecture of the model (its sizes from --size): seed (default), gpt2 or llama "
                    "(--kv-heads and --rope-theta: its key/value heads and rotary base)")
      ->check(CLI::IsMember({"seed", "gpt2", "llama"}));
  int64_t bench_kv_heads = 0;
  double bench_rope_theta = 0;
  CLI::Option* bench_kv = bench->add_option("--kv-heads", bench_kv_heads,
                                            "--arch llama: key/value heads, dividing the size's heads (default: heads)")
                              ->transform(int_range(1, 16384));
  CLI::Option* bench_theta = bench->add_option("--rope-theta", bench_rope_theta,
                                               "--arch llama: the rotary embedding's base (default 10000)")
                                 ->check(real_range(1.0, 1e12));
  bench->callback([&] {
    ba.opts.model.arch = capstep::nn::parse_arch(bench_arch);
    if ((bench_kv->count() > 0 || bench_theta->count() > 0) && ba.opts.model.arch != capstep::nn::Arch::llama)
      throw CLI::ValidationError(bench_kv->count() > 0 ? "--kv-heads" : "--rope-theta",
                                 "applies to --arch llama, not " + bench_arch);
    if (bench_kv->count() > 0) ba.opts.model.n_kv_heads = bench_kv_heads;
    if (bench_theta->count() > 0) ba.opts.model.rope_theta = bench_rope_theta;
    try {
      ba.opts.model.validate();
    } catch (const capstep::Error& e) {
      throw CLI::ValidationError(e.what());
    }
    ba.opts.backend.cuda.tf32 = !no_tf32;
    action = [&] { return run_bench(ba); };
  });

  // ---- show
  ShowArgs sh;
  CLI::App* show = app.add_subcommand("show", "print the text of a captured program");
  show->add_option("--program", sh.program,
                   "forward (the loss), grad (loss and gradients), fused (with AdamW), or the KV cache's prefill (--seq "
                   "tokens) and decode (one token, a cache of --context rows) programs, as `capstep sample --window` builds them")
      ->capture_default_str()->check(CLI::IsMember({"forward", "grad", "fused", "prefill", "decode"}));
  show->add_flag("--kernels", sh.kernels,
                 "print the kernel plan a GPU runs for one step instead: one line per kernel, the counts by kind, "
                 "and the total (computed without a GPU)");
  show->add_flag("--unfused", sh.unfused, "with --kernels: the plan with one kernel per equation (CAPSTEP_CUDA_FUSE=0)");
  add_precision_option(show, sh.precision);
  show->add_flag("--fused-attention", sh.fused_attention, kFusedAttentionHelp);
  add_checkpoint_options(show, sh.checkpoint_every);
  show->add_option("--data-parallel", sh.data_parallel,
                   "the data-parallel step for N replicas (grad or fused), then one line: how many all_reduce "
                   "equations and bytes each replica sends into them per step")
      ->transform(int_range(1, 65536));
  add_model_options(show, sh.model);
  show->callback([&] { action = [&] { return run_show(sh); }; });

  // ---- export
  ExportArgs ea;
  CLI::App* exp = app.add_subcommand("export", "write a captured program as StableHLO text");
  exp->add_option("--program", ea.program,
                  "grad (loss and gradients), fused (with AdamW, parameters donated), or the KV cache's prefill (--seq "
                  "tokens) and decode (one token, a cache of --context rows) programs, as `capstep sample --window` builds them")
      ->capture_default_str()->check(CLI::IsMember({"grad", "fused", "prefill", "decode"}));
  exp->add_option("--out", ea.out, "the .mlir file to write; - writes to standard output")->required()->check(kNonEmpty);
  add_precision_option(exp, ea.precision);
  exp->add_flag("--fused-attention", ea.fused_attention, kFusedAttentionHelp);
  add_checkpoint_options(exp, ea.checkpoint_every);
  exp->add_option("--data-parallel", ea.data_parallel,
                  "the data-parallel step for N replicas: gradients and loss averaged by stablehlo.all_reduce, "
                  "mhlo.num_replicas = N")
      ->transform(int_range(1, 65536));
  add_model_options(exp, ea.model);
  exp->callback([&] { action = [&] { return run_export(ea); }; });

  // ---- export-hf
  ExportHfArgs eh;
  CLI::App* exp_hf = app.add_subcommand(
      "export-hf", "write a checkpoint's model in the Hugging Face layout (config.json, model.safetensors) for transformers");
  exp_hf->add_option("--checkpoint", eh.checkpoint, "a checkpoint of --arch gpt2 or llama written by `capstep train --save`")
      ->required()->check(kNonEmpty)->check(CLI::ExistingFile);
  exp_hf->add_option("--out", eh.out, "the directory to write (made if missing; its config.json and model.safetensors replaced)")
      ->required()->check(kNonEmpty);
  exp_hf->add_option("--dtype", eh.dtype, "the weights' dtype in the files: f32, or bf16 (rounded to nearest even)")
      ->capture_default_str()->check(CLI::IsMember({"f32", "bf16"}));
  exp_hf->add_option("--max-shard-size", eh.max_shard_size,
                     "split the weights into shards of at most this many bytes (model-00001-of-0000N.safetensors and "
                     "model.safetensors.index.json, as save_pretrained): bytes, or with KB, MB, GB, KiB, MiB, GiB; "
                     "0: one model.safetensors whatever its size")
      ->capture_default_str()->check(kNonEmpty);
  exp_hf->callback([&] { action = [&] { return run_export_hf(eh); }; });

  // ---- lora-merge
  LoraMergeArgs lm;
  CLI::App* lora_merge = app.add_subcommand(
      "lora-merge", "merge a PEFT LoRA adapter into a Hugging Face model's weights and write the merged model");
  lora_merge->add_option("--base", lm.base, "the base model's directory (config.json, model.safetensors; GPT-2 or Llama)")
      ->required()->check(kNonEmpty)->check(CLI::ExistingDirectory);
  lora_merge->add_option("--adapter", lm.adapter, "the adapter's directory (adapter_config.json, adapter_model.safetensors, "
                         "as PEFT's save_pretrained writes them)")->required()->check(kNonEmpty)->check(CLI::ExistingDirectory);
  lora_merge->add_option("--out", lm.out, "the directory to write (made if missing; its config.json and model.safetensors replaced)")
      ->required()->check(kNonEmpty);
  lora_merge->callback([&] { action = [&] { return run_lora_merge(lm); }; });

  // ---- export-peft
  ExportPeftArgs ep;
  CLI::App* exp_peft = app.add_subcommand(
      "export-peft", "write a LoRA run's adapter as PEFT's files (adapter_config.json, adapter_model.safetensors)");
  exp_peft->add_option("--checkpoint", ep.checkpoint, "a checkpoint written by `capstep train --lora-rank ... --save`")
      ->required()->check(kNonEmpty)->check(CLI::ExistingFile);
  exp_peft->add_option("--out", ep.out, "the directory to write (made if missing; its two files replaced)")
      ->required()->check(kNonEmpty);
  exp_peft->callback([&] { action = [&] { return run_export_peft(ep); }; });

  // ---- tokenize
  TokenizeArgs tk;
  CLI::App* tokenize = app.add_subcommand("tokenize", "encode a text file into token ids in llm.c's layout (for train --tokens)");
  tokenize->add_option("--text", tk.text, "the text file to encode")->required()->check(kNonEmpty)->check(CLI::ExistingFile);
  tokenize->add_option("--out", tk.out, "the token file to write (uint16 ids when the vocabulary fits, else uint32)")
      ->required()->check(kNonEmpty);
  CLI::Option* tk_kind = tokenize->add_option("--tokenizer", tk.tokenizer, "char or byte")->check(kTokenizer);
  tokenize->add_option("--tokenizer-from", tk.tokenizer_from,
                       "the tokenizer of a checkpoint (`capstep train --save`) or of a directory in the Hugging Face "
                       "layout (as --init-from reads it)")
      ->check(kNonEmpty)->check(CLI::ExistingPath)->excludes(tk_kind);
  tokenize->add_flag("--overwrite", tk.overwrite, "replace --out when it exists");
  tokenize->add_flag("--allow-unknown", tk.allow_unknown,
                     "with the char tokenizer: encode even when more than 1% of the characters are unknown");
  tokenize->callback([&] { action = [&] { return run_tokenize(tk); }; });

  // CLI11 would call a misspelt subcommand "an extra argument"; name it instead.
  const std::set<std::string> known = {"train", "sample", "bench", "show", "export", "export-hf", "lora-merge", "export-peft", "tokenize"};
  if (argc > 1 && argv[1][0] != '-' && !known.count(argv[1])) {
    std::cerr << "capstep: unknown subcommand '" << argv[1] << "'; the subcommands are train, sample, bench, show, export, export-hf, lora-merge, export-peft, tokenize\n"
              << "Run with --help for more information.\n";
    return kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);   // prints help (0) or the error with a hint
    return code == 0 ? kOk : kUsage;
  }
  const std::string name = app.get_subcommands().empty() ? "" : app.get_subcommands()[0]->get_name();
  try {
    return action();
  } catch (const UsageError& e) {
    std::cerr << "capstep " << name << ": " << e.what() << "\nRun with --help for more information.\n";
    return kUsage;
  } catch (const capstep::data::UnknownTextError& e) {
    // A text (or a prompt) the tokenizer would mostly replace: the user's
    // choice of text or tokenizer, so a usage error, with the options that
    // change it where there are some.
    std::cerr << "capstep " << name << ": " << e.what();
    if (name == "train") std::cerr << " (--tokenizer byte, or --allow-unknown)";
    if (name == "bench") std::cerr << " (bench runs the seed's char model; `capstep train` has --tokenizer byte)";
    std::cerr << '\n';
    return kUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << "capstep " << name << ": error: out of memory: the model or the batch is too large for this machine\n";
    return kFailed;
  } catch (const std::exception& e) {
    std::cerr << "capstep " << name << ": error: " << e.what() << '\n';
    return kFailed;
  }
}
