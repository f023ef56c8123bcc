// The subcommands of `capstep`, apart from their command-line parsing (which
// lives in main.cpp, the one file that includes CLI11): each takes its parsed
// options and returns the exit code.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "lanes/lanes.h"
#include "capstep/train.h"

namespace capstep::cli {

// Exit codes of every subcommand.
constexpr int kOk = 0;
constexpr int kFailed = 1;   // a runtime failure (a file, a diverged run, no GPU with --require-gpu)
constexpr int kUsage = 2;    // a bad option, or a bad combination of options

// A usage error found after parsing (e.g. heads that do not divide d_model):
// main prints it with the subcommand's name and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Model size options shared by train, show and export; `given` records which
// ones the user wrote, so that --resume can refuse a conflicting one.
struct ModelArgs {
  nn::LmConfig config;
  bool given = false;
  bool shape_given = false;       // an option other than --batch and --seq
  bool kv_heads_given = false, rope_theta_given = false;
  // validate(), as a UsageError; --kv-heads and --rope-theta without --arch
  // llama are refused by name.
  nn::LmConfig checked() const;
};

struct TrainArgs {
  ModelArgs model;
  train::Options opts;                // model and steps etc. filled by main
  std::string lane;                   // --lane: backend and AdamW's place in one word
  std::string backend = "host";       // --backend
  std::string adamw = "host";         // --adamw
  bool seed_given = false, lr_given = false, text_given = false;
  bool warmup_given = false, schedule_given = false, min_lr_given = false, clip_given = false;
  bool precision_given = false, fused_attention_given = false, val_fraction_given = false;
  bool overwrite = false;             // --overwrite: --save may replace an existing file
  bool no_progress = false;           // --no-progress: plain log lines even on a terminal
  bool tokenizer_given = false;
  bool accum_given = false;           // --grad-accum
  std::string lora_targets;           // --lora-targets a,b,... (train::Options::Lora::targets)
  std::string base_precision = "f32"; // --base-precision f32|bf16 (Lora::base_bf16)
  double lora_dropout = 0;            // --lora-dropout: only 0 (no dropout) is supported
  bool lora_given = false;            // any --lora-* flag or --base-precision
  std::string init_from;              // --init-from DIR (train::Options::init_from)
  std::string log_csv;                // --log
  std::string plot;                   // --plot (.svg or .png)
  int64_t print_every = 0;            // plain log lines: 0 picks about twenty a run
  bool data_parallel = false;         // --data-parallel: one replica per MPI rank
  double dp_timeout = 60;             // --dp-timeout: seconds one all_reduce waits for the other ranks
};

struct TokenizeArgs {
  std::string text, out;              // --text, --out
  std::string tokenizer = "char";     // --tokenizer
  std::string tokenizer_from;         // --tokenizer-from: a checkpoint file or a Hugging Face directory
  bool overwrite = false, allow_unknown = false;
};

struct SampleArgs {
  train::SampleOptions opts;
};

struct BenchArgs {
  lanes::Options opts;
  bool json = false;
};

struct ShowArgs {
  ModelArgs model;
  optim::Precision precision = optim::Precision::f32;   // --precision
  std::string program = "grad";       // forward | grad | fused
  bool kernels = false;               // the kernel plan instead of the program text
  bool unfused = false;               // with kernels: one kernel per equation (the baseline)
  bool fused_attention = false;       // fuse_attention on the loss program
  int data_parallel = 0;              // --data-parallel N: the step with all_reduce; ends with the bytes it reduces
  int checkpoint_every = 0;           // --checkpoint-every K (--checkpoint-activations: 1); ends with what it recomputes
};

struct ExportArgs {
  ModelArgs model;
  optim::Precision precision = optim::Precision::f32;   // --precision
  std::string program = "fused";      // grad | fused
  std::string out;
  bool fused_attention = false;       // fuse_attention on the loss program
  int data_parallel = 0;              // --data-parallel N: the step with all_reduce, for N replicas (0: none)
  int checkpoint_every = 0;           // --checkpoint-every K (--checkpoint-activations: 1)
};

struct ExportHfArgs {
  std::string checkpoint;             // --checkpoint
  std::string out;                    // --out DIR
  std::string dtype = "f32";          // --dtype f32 | bf16 (nn::HfWriteOptions::dtype)
  std::string max_shard_size = "5GB"; // --max-shard-size: bytes, or with KB MB GB KiB MiB GiB; 0: one file
};

// --max-shard-size's value in bytes, as transformers' save_pretrained reads
// its max_shard_size: an integer, or one with the suffix B, KB, MB, GB
// (powers of 1000) or KiB, MiB, GiB (of 1024), in any case. UsageError
// naming the option otherwise.
int64_t parse_shard_size(const std::string& s);

// Before any work: an output file that cannot be written fails now, not
// after a run. A directory where a file is needed is a UsageError; a missing
// or read-only directory an Error, each naming `option`.
void check_output(const char* option, const std::string& path);

int run_train(TrainArgs a);
int run_sample(const SampleArgs& a);
int run_bench(const BenchArgs& a);
int run_show(const ShowArgs& a);
int run_export(const ExportArgs& a);
int run_export_hf(const ExportHfArgs& a);
int run_tokenize(const TokenizeArgs& a);

// capstep lora-merge (tools/cmd_lora.cpp): a transformers directory with a
// PEFT LoRA adapter merged into its weights.
struct LoraMergeArgs {
  std::string base;                   // --base DIR (config.json, model.safetensors)
  std::string adapter;                // --adapter DIR (adapter_config.json, adapter_model.safetensors)
  std::string out;                    // --out DIR
};
int run_lora_merge(const LoraMergeArgs& a);
// capstep export-peft (tools/cmd_lora.cpp): a LoRA run's adapter as PEFT's
// adapter_config.json and adapter_model.safetensors.
struct ExportPeftArgs {
  std::string checkpoint;             // --checkpoint FILE (of a train --lora-* run)
  std::string out;                    // --out DIR
};
int run_export_peft(const ExportPeftArgs& a);

}  // namespace capstep::cli
