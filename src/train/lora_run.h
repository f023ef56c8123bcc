// LoRA in the training loop (lora_run.cpp): what train() and the checkpoint
// readers share.
#pragma once

#include <string>
#include <vector>

#include "capstep/lora.h"
#include "capstep/train.h"

namespace capstep::train {

// A run's LoRA: off, or its metadata and, for a fresh run, the starting
// adapter inputs (adapter_inputs order: init_adapter's, or --lora-from's).
struct LoraRun {
  bool on = false;
  LoraMeta meta;
  std::vector<Array> start;                // empty when resuming
  std::vector<std::string> base_targets;   // the weights the adapters adapt
};
// `loss`: the model's loss program (init_adapter reads the shapes from it).
// Error for --train/--freeze with LoRA, bad options, a bad --lora-from dir.
LoraRun make_lora_run(const Options& o, const Program& loss);
std::vector<std::string> default_lora_targets(const nn::LmConfig& c);
LoraMeta parse_lora_metadata(const std::string& text);   // Error naming what is wrong
// The adapter inputs' names and types (A f32 [r, in], B f32 [out, r]).
std::vector<ParamSpec> lora_specs(const nn::LmConfig& c, const LoraMeta& m);
// A LoRA checkpoint's tensors: `expected` (the model's parameters) gets the
// adapters appended and, with base_precision bf16, its target weights bf16;
// returns which of the model's parameters to widen back to f32 after loading.
std::vector<bool> lora_expected(const TrainMeta& m, std::vector<ParamSpec>& expected);

}  // namespace capstep::train
