// LoRA (Hu et al., low-rank adaptation) as PEFT does it, in the program:
//  - lora(): a Program -> Program transform that gives chosen weight inputs W
//    [in, out] a pair of new inputs A [r, in] and B [out, r] (PEFT's layouts,
//    nn.Linear's) and replaces every y = x W by
//        y = x W + ((x A^T) B^T) * scale,   scale = alpha / r
//    (alpha / sqrt(r) with rslora), as new equations. The base W stays an
//    input: value_and_grad(lora(loss, ...), adapter_inputs(...)) trains only
//    A and B.
//  - targets_for(): the targets of PEFT's target_modules (q_proj, ...,
//    "all-linear") in one of capstep's models (nn.h, hf.h's names).
//  - init_adapter(): PEFT's initialisation (A kaiming-uniform, B zeros).
//  - PEFT's files (adapter_config.json, adapter_model.safetensors), both ways.
//  - merge(): W += scale (B A)^T, the model without the adapter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"
#include "capstep/nn.h"
#include "capstep/safetensors.h"

namespace capstep::lora {

// One LoRA pair, A [r, in] and B [out, r], the program inputs
// "lora.A.<name>" and "lora.B.<name>". `weights` are the base matrices it
// adapts, each an input [in, out_j] of one `in`; B's rows are their outs end
// to end (out = the sum), so each weight j gets the rows of B from
// out_0 + ... + out_{j-1} on. One weight is the usual case, and then `name`
// is that weight's name; GPT-2's c_attn (capstep's wq | wk | wv, one
// transformers tensor) is one pair over three weights, named
// "blocks.L.attn.wqkv": PEFT's one lora_A [r, D] and lora_B [3D, r] on it.
struct Target {
  std::string name;
  std::vector<std::string> weights;
};
std::string a_name(const std::string& target);   // "lora.A.<target>"
std::string b_name(const std::string& target);   // "lora.B.<target>"
// The new inputs of lora(p, targets, ...), in its order: A then B of each target.
std::vector<std::string> adapter_inputs(const std::vector<Target>& targets);

struct Options {
  int64_t r = 8;           // the rank, >= 1
  double alpha = 8;        // PEFT's lora_alpha
  bool rslora = false;     // PEFT's use_rslora: scale alpha / sqrt(r) instead of alpha / r
  // lora() only: the target weights (the frozen base) become bf16 inputs of
  // the same names, each converted to f32 once where the program starts, so
  // they take half the memory; the program computes as with f32 weights
  // rounded to bf16. f32 targets only.
  bool base_bf16 = false;
  void validate() const;   // Error naming the option out of range
};
double scale(const Options& o);   // alpha / r, or alpha / sqrt(r) with rslora

// The transform. Every weight of every target must be a rank-2 f32 input of p
// (or f64, for gradient checks; A and B take the weight's type) used only as
// the right operand of dot_general equations contracting the left operand's
// last axis (of the weight's type, any rank) with the weight's first axis, no
// batch axes (what trace.h's matmul(x, W) records for x [..., in]); not an
// output. Error naming the weight, and the equation that uses it otherwise
// (also for an unknown or repeated weight or target name, weights of one
// target with different `in`, names already taken). Each such equation
// y = dot_general(x, W) is kept, and after it come
//   t  = dot_general(x, A)  {lhs_contract=[last], rhs_contract=[1]}    [..., r]
//        (one per target and x: GPT-2's q, k and v share it)
//   Bj = slice(B, rows of weight j)                                    (only for several weights)
//   u  = dot_general(t, Bj) {lhs_contract=[last], rhs_contract=[1]}    [..., out_j]
//   y' = y + u * scale
// with y' in y's place for every later use. With base_bf16, each weight input
// is bf16 and the first equations are its convert to f32, which every use
// reads. Inputs: p's, then A and B of each
// target (adapter_inputs order). Outputs, names and aliases: p's. With B
// all zeros, y' = y bit for bit (y + 0), so the loss is the base model's.
Program lora(const Program& p, const std::vector<Target>& targets, const Options& o);

// A program (a gradient program of lora() with base_bf16, usually) with every
// convert of a bf16 input to f32 made again just before each equation that
// reads it, instead of once where the step starts: the f32 copy of a frozen
// bf16 weight then lives from its convert to its one reader (the forward's
// x W, the backward's dY W^T), not from the forward through the backward.
// Each converted weight costs one more convert a step; the numbers are the
// same bit for bit. Other equations, inputs, outputs and aliases: p's.
Program convert_at_each_use(const Program& p);

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

// An adapter: the options, its targets, and per target A [r, in] and B
// [out, r] (f32), with what PEFT's adapter_config.json records besides.
struct Adapter {
  Options options;
  std::vector<Target> targets;
  std::vector<Array> a, b;                      // targets' order
  std::vector<std::string> target_modules;      // as given to targets_for (written to the config)
  std::string base_model;                       // base_model_name_or_path; may be empty
  // The program inputs of adapter_inputs(targets) in its order: A, B, A, B, ...
  std::vector<Array> inputs() const;
};
// PEFT's initialisation (LoraLayer.reset_lora_parameters with
// init_lora_weights=True): A kaiming-uniform with a = sqrt(5) over its [r, in]
// (uniform in +-1/sqrt(in)), B zeros, so the adapted model starts as the base.
// Deterministic from the seed (SplitMix64, the same on every platform, not
// torch's generator). The shapes are read from the weights' input types in p;
// A and B are f32 (for an f64 program, convert them).
Adapter init_adapter(const Program& p, const std::vector<Target>& targets, const Options& o, uint64_t seed);

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

// The merged weights: for every target and each of its weights j,
//   W_j += scale * (B_j A)^T    (capstep's [in, out]; B_j: weight j's rows of B)
// in f32 (B_j A summed in double, rounded to f32, times scale in f32, added
// in f32). names[i] is params[i]'s input name (lm_parameters' for a model);
// Error for a weight not there or of another shape.
void merge(const Adapter& a, const std::vector<std::string>& names, std::vector<Array>& params);

}  // namespace capstep::lora
