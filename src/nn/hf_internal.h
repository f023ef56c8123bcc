// What the parts of hf.h (hf.cpp: the tensor tables; hf_config.cpp:
// config.json; hf_tokenizer.cpp: tokenizer files; hf_files.cpp: weights and
// directories) share. Private to src/nn.
#pragma once

#include "capstep/hf.h"
#include "capstep/nn.h"

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace capstep::nn::hf_detail {

// An Error for the seed architecture, which has no transformers counterpart.
inline void require_hf_arch(const LmConfig& c) {
  if (c.arch == Arch::seed)
    throw Error("the seed architecture (learned positions with RMSNorm and an untied head) has no transformers "
                "counterpart; train with --arch gpt2 or --arch llama to export or import");
}

// A llama with q/k/v biases and no o bias: transformers' Qwen2ForCausalLM.
inline bool is_qwen2(const LmConfig& c) { return c.arch == Arch::llama && c.qkv_bias && !c.o_bias; }

// config_from_hf of the parsed text (hf_config.cpp).
LmConfig config_from_json(const nlohmann::json& j);

// The bytes of a file; false when it does not exist. Error when it exists
// and cannot be read (hf_files.cpp).
bool read_if_there(const std::string& path, std::string* out);

// A directory's own tokenizer when config.json names none (one made by
// transformers): tokenizer.model (SentencePiece, Llama's), else
// tokenizer.json (a byte-level BPE, GPT-2's), else vocab.json + merges.txt
// (GPT-2's older files). Sets m.tokenizer and m.tokenizer_model, or leaves
// them empty when there is none of these files (hf_tokenizer.cpp).
void read_foreign_tokenizer(const std::string& dir, HfModel& m);

}  // namespace capstep::nn::hf_detail
