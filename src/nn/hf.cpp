// capstep's models in transformers' names and layouts, and back (hf.h): one
// table of pieces per configuration drives both directions.
#include "capstep/hf.h"

#include "capstep/data.h"
#include "data/json.h"
#include "data/read_file.h"
#include "data/subword.h"
#include "nn/hf_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace capstep::nn {

using hf_detail::is_qwen2;
using hf_detail::require_hf_arch;

namespace {

// How one capstep parameter sits in one transformers tensor.
enum class How {
  copy,        // the same layout
  transpose,   // capstep [in, out], transformers [out, in] (nn.Linear)
  columns,     // part `part` of `parts` column blocks side by side (GPT-2's c_attn.weight)
  segment      // part `part` of `parts` pieces end to end (GPT-2's c_attn.bias)
};
struct Piece {
  size_t param;            // index in lm_parameters
  std::string hf;          // transformers' name
  How how = How::copy;
  int part = 0, parts = 1;
};
struct HfTensor {
  std::string name;
  Shape shape;
};

// The pieces of every parameter, and transformers' tensors in the order of
// their first piece.
void layout(const LmConfig& c, std::vector<Piece>& pieces, std::vector<HfTensor>& tensors) {
  require_hf_arch(c);
  const std::vector<ParamSpec> ps = lm_parameters(c);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ps.size(); ++i) index[ps[i].name] = i;
  std::map<std::string, bool> seen;
  auto add = [&](const std::string& ours, const std::string& hf, How how, int part = 0, int parts = 1) {
    const size_t i = index.at(ours);
    pieces.push_back({i, hf, how, part, parts});
    if (seen[hf]) return;
    seen[hf] = true;
    Shape s = ps[i].type.shape;
    if (how == How::transpose) std::swap(s[0], s[1]);
    if (how == How::columns) s[1] *= parts;
    if (how == How::segment) s[0] *= parts;
    tensors.push_back({hf, s});
  };
  if (c.arch == Arch::gpt2) {
    add("tok_emb", "transformer.wte.weight", How::copy);
    add("pos_emb", "transformer.wpe.weight", How::copy);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
      add(b + "attn_norm", h + "ln_1.weight", How::copy);
      add(b + "attn_norm_bias", h + "ln_1.bias", How::copy);
      const char* qkv[] = {"q", "k", "v"};
      for (int j = 0; j < 3; ++j) add(b + "attn.w" + qkv[j], h + "attn.c_attn.weight", How::columns, j, 3);
      for (int j = 0; j < 3; ++j) add(b + "attn.b" + qkv[j], h + "attn.c_attn.bias", How::segment, j, 3);
      add(b + "attn.wo", h + "attn.c_proj.weight", How::copy);
      add(b + "attn.bo", h + "attn.c_proj.bias", How::copy);
      add(b + "mlp_norm", h + "ln_2.weight", How::copy);
      add(b + "mlp_norm_bias", h + "ln_2.bias", How::copy);
      add(b + "mlp.w1", h + "mlp.c_fc.weight", How::copy);
      add(b + "mlp.b1", h + "mlp.c_fc.bias", How::copy);
      add(b + "mlp.w2", h + "mlp.c_proj.weight", How::copy);
      add(b + "mlp.b2", h + "mlp.c_proj.bias", How::copy);
    }
    add("final_norm", "transformer.ln_f.weight", How::copy);
    add("final_norm_bias", "transformer.ln_f.bias", How::copy);
    return;
  }
  // Llama and Qwen2: nn.Linear's weight [out, in], then its bias where the
  // model has one.
  add("tok_emb", "model.embed_tokens.weight", How::copy);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    add(b + "attn_norm", h + "input_layernorm.weight", How::copy);
    for (const char* w : {"q", "k", "v", "o"}) {
      add(b + "attn.w" + w, h + "self_attn." + w + "_proj.weight", How::transpose);
      if (std::string(w) == "o" ? c.o_bias : c.qkv_bias)
        add(b + "attn.b" + w, h + "self_attn." + w + "_proj.bias", How::copy);
    }
    add(b + "mlp_norm", h + "post_attention_layernorm.weight", How::copy);
    for (const char* w : {"gate", "up", "down"}) {
      add(b + "mlp.w_" + w, h + "mlp." + w + "_proj.weight", How::transpose);
      if (c.mlp_bias) add(b + "mlp.b_" + w, h + "mlp." + w + "_proj.bias", How::copy);
    }
  }
  add("final_norm", "model.norm.weight", How::copy);
  if (!c.tied_head) add("head", "lm_head.weight", How::transpose);
}

// Element (ours index i) <-> (transformers index) for one piece; calls
// f(ours_index, hf_index) for every element of the parameter.
template <class F>
void each_element(const Piece& p, const Shape& ours, const Shape& hf, F f) {
  const int64_t n = ours.empty() ? 1 : [&] {
    int64_t k = 1;
    for (int64_t d : ours) k *= d;
    return k;
  }();
  switch (p.how) {
    case How::copy:
      for (int64_t i = 0; i < n; ++i) f(i, i);
      return;
    case How::transpose: {
      const int64_t in = ours[0], out = ours[1];
      for (int64_t r = 0; r < in; ++r)
        for (int64_t k = 0; k < out; ++k) f(r * out + k, k * in + r);
      return;
    }
    case How::columns: {
      const int64_t rows = ours[0], w = ours[1], W = hf[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < w; ++k) f(r * w + k, r * W + p.part * w + k);
      return;
    }
    case How::segment:
      for (int64_t i = 0; i < n; ++i) f(i, p.part * n + i);
      return;
  }
}

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

std::vector<std::vector<std::string>> hf_parameter_names(const LmConfig& c) {
  std::vector<std::vector<std::string>> names(lm_parameters(c).size());
  if (c.arch == Arch::seed) return names;
  std::vector<Piece> pieces;
  std::vector<HfTensor> hf;
  layout(c, pieces, hf);
  for (const Piece& p : pieces) names[p.param].push_back(p.hf);
  return names;
}

const char* hf_architecture(const LmConfig& c) {
  require_hf_arch(c);
  return c.arch == Arch::gpt2 ? "GPT2LMHeadModel" : is_qwen2(c) ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

std::vector<NamedArray> to_hf_tensors(const LmConfig& c, const std::vector<Array>& params) {
  std::vector<Piece> pieces;
  std::vector<HfTensor> hf;
  layout(c, pieces, hf);
  const std::vector<ParamSpec> ps = lm_parameters(c);
  if (params.size() != ps.size())
    throw Error("to_hf_tensors: " + std::to_string(params.size()) + " parameters for a model of " +
                std::to_string(ps.size()));
  std::vector<NamedArray> out;
  std::map<std::string, size_t> at;
  for (const HfTensor& t : hf) {
    at[t.name] = out.size();
    out.push_back({t.name, Array(Type{DType::f32, t.shape})});
  }
  for (const Piece& p : pieces) {
    const Array src = params[p.param].dtype() == DType::f32 ? params[p.param] : params[p.param].converted(DType::f32);
    if (src.shape() != ps[p.param].type.shape)
      throw Error("to_hf_tensors: parameter " + ps[p.param].name + " is " + shape_text(src.shape()) + ", not " +
                  shape_text(ps[p.param].type.shape));
    Array& dst = out[at[p.hf]].array;
    const float* s = src.data<float>();
    float* d = dst.data<float>();
    each_element(p, src.shape(), dst.shape(), [&](int64_t i, int64_t j) { d[j] = s[i]; });
  }
  return out;
}

std::vector<HfMatrix> hf_matrices(const LmConfig& c) {
  std::vector<Piece> pieces;
  std::vector<HfTensor> hf;
  layout(c, pieces, hf);
  const std::vector<ParamSpec> ps = lm_parameters(c);
  std::vector<HfMatrix> out;
  for (const Piece& p : pieces) {
    const std::string suffix = ".weight";
    if (ps[p.param].type.rank() != 2 || p.hf.size() <= suffix.size() ||
        p.hf.compare(p.hf.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    out.push_back({ps[p.param].name, p.hf.substr(0, p.hf.size() - suffix.size()), p.part, p.parts});
  }
  return out;
}

std::vector<Array> params_from_hf(const LmConfig& c, const std::vector<NamedArray>& tensors) {
  std::vector<Piece> pieces;
  std::vector<HfTensor> hf;
  layout(c, pieces, hf);
  std::map<std::string, const Array*> by_name;
  for (const NamedArray& t : tensors) by_name[t.name] = &t.array;
  std::map<std::string, Shape> want;
  for (const HfTensor& t : hf) want[t.name] = t.shape;
  for (const auto& [name, a] : by_name) {
    if (want.count(name)) continue;
    auto ends = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
    // Causal-mask buffers that older GPT-2 files carry: not parameters.
    if (c.arch == Arch::gpt2 && (ends(".attn.bias") || ends(".attn.masked_bias"))) continue;
    // A tied head written out anyway: the embedding again.
    const char* embedding = c.arch == Arch::gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    const bool tied = c.arch == Arch::gpt2 || c.tied_head;
    if (tied && name == "lm_head.weight" && by_name.count(embedding) && by_name.at(embedding)->bit_equal(*a)) continue;
    throw Error("unexpected tensor '" + name + "': transformers' " + hf_architecture(c) +
                " of this config.json has no such parameter" +
                (name == "lm_head.weight" && tied ? " (the head is the token embedding, tie_word_embeddings)" : ""));
  }
  for (const HfTensor& t : hf) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) throw Error("missing tensor '" + t.name + "' " + shape_text(t.shape));
    const DType dt = it->second->dtype();
    if (dt != DType::f32 && dt != DType::bf16)
      throw Error("tensor '" + t.name + "' is " + dtype_name(dt) + "; capstep reads F32, BF16 and F16 weights");
    if (it->second->shape() != t.shape)
      throw Error("tensor '" + t.name + "' is " + shape_text(it->second->shape()) + " but config.json makes it " +
                  shape_text(t.shape));
  }
  // bf16 weights are read into f32, exactly.
  std::map<std::string, Array> widened;
  for (const HfTensor& t : hf)
    if (by_name.at(t.name)->dtype() != DType::f32) widened.emplace(t.name, by_name.at(t.name)->converted(DType::f32));
  std::vector<Array> out;
  for (const ParamSpec& p : lm_parameters(c)) out.emplace_back(p.type);
  for (const Piece& p : pieces) {
    const Array& src = widened.count(p.hf) ? widened.at(p.hf) : *by_name.at(p.hf);
    Array& dst = out[p.param];
    const float* s = src.data<float>();
    float* d = dst.data<float>();
    each_element(p, dst.shape(), src.shape(), [&](int64_t i, int64_t j) { d[i] = s[j]; });
  }
  return out;
}

}  // namespace capstep::nn
