// LoRA (Hu et al., low-rank adaptation) as PEFT does it, in the program:
//  - lora() (transforms.h): a Program -> Program transform that gives chosen weight inputs W
//    [in, out] a pair of new inputs A [r, in] and B [out, r] (PEFT's layouts,
//    nn.Linear's) and replaces every y = x W by
//        y = x W + ((x A^T) B^T) * scale,   scale = alpha / r
//    (alpha / sqrt(r) with rslora), as new equations. The base W stays an
//    input: value_and_grad(lora(loss, ...), adapter_inputs(...)) trains only
//    A and B.
//  - targets_for(): the targets of PEFT's target_modules (q_proj, ...,
//    "all-linear") in one of capstep's models (nn.h, hf.h's names).
//  - init_adapter() (transforms.h): PEFT's initialisation (A kaiming-uniform, B zeros).
//  - PEFT's files (adapter_config.json, adapter_model.safetensors), both ways.
//  - merge() (transforms.h): W += scale (B A)^T, the model without the adapter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"
#include "capstep/nn.h"
#include "capstep/safetensors.h"
#include "capstep/transforms.h"  // Target, Options, Adapter, the lora() pass, init_adapter, merge

namespace capstep::lora {

// The targets PEFT's target_modules picks in model c (gpt2 or llama; Error
// for seed, which has no transformers names): each entry either a module's
// name or a suffix of its path after a '.' ("q_proj", "self_attn.q_proj",
// PEFT's rule for a list), or the one entry "all-linear" (every linear layer
// but the output head: llama's q, k, v, o, gate, up and down projections,
// GPT-2's c_attn, attn.c_proj, c_fc and mlp.c_proj). A module that is not a
// linear layer (an embedding, a norm) is an Error naming it, as is an entry
// that picks nothing. Targets in lm_parameters order. The module paths are
// hf.h's (nn::hf_matrices).
std::vector<Target> targets_for(const nn::LmConfig& c, const std::vector<std::string>& target_modules);
// transformers' module of a target of targets_for ("model.layers.0.self_attn.q_proj").
std::string hf_module(const nn::LmConfig& c, const Target& t);

// PEFT's files for model c and an adapter of targets_for's targets.
// adapter_model.safetensors: per target "base_model.model.<module>.lora_A.weight"
// [r, in] and ".lora_B.weight" [out, r], f32, in targets' order, metadata
// {"format": "pt"} (as PEFT's save_pretrained writes them).
std::vector<NamedArray> peft_tensors(const nn::LmConfig& c, const Adapter& a);
// adapter_config.json as PEFT 0.21 writes it for a LoraConfig of
// task_type CAUSAL_LM: peft_type "LORA", r, lora_alpha, use_rslora,
// target_modules, base_model_name_or_path, and every other field PEFT writes
// at its default (lora_dropout 0, bias "none", fan_in_fan_out true for gpt2's
// Conv1D layers, ...).
std::string peft_config_json(const nn::LmConfig& c, const Adapter& a);
// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors
// (atomically, each), creating DIR if needed.
void write_peft_dir(const std::string& dir, const nn::LmConfig& c, const Adapter& a);
// An adapter PEFT (or write_peft_dir) saved for model c: the config's
// peft_type must be LORA; r, lora_alpha, use_rslora and target_modules (a
// list, or a string: PEFT's regular expression over the module paths, or
// "all-linear") are read; anything capstep would compute otherwise is an
// Error naming the field: use_dora, rank_pattern / alpha_pattern,
// layers_to_transform, modules_to_save, a bias other than "none",
// lora_bias, target_parameters, trainable_token_indices,
// layer_replication, exclude_modules. Keys with or without the adapter's name
// (".lora_A.weight" or ".lora_A.default.weight"); every target's two tensors
// must be there with their shapes, f32 (bf16 and f16 are widened), and no
// other (Error naming the key).
Adapter read_peft_dir(const std::string& dir, const nn::LmConfig& c);

}  // namespace capstep::lora
