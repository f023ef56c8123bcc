// capstep's models in transformers' names and layouts, and back (hf.h): one
// table of pieces per configuration drives both directions.
#include "capstep/hf.h"

#include "capstep/data.h"
#include "data/json.h"
#include "data/read_file.h"
#include "data/subword.h"

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

void require_hf_arch(const LmConfig& c) {
  if (c.arch == Arch::seed)
    throw Error("the seed architecture (learned positions with RMSNorm and an untied head) has no transformers "
                "counterpart; train with --arch gpt2 or --arch llama to export or import");
}

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

bool is_qwen2(const LmConfig& c) { return c.arch == Arch::llama && c.qkv_bias && !c.o_bias; }

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

std::string hf_config_json(const LmConfig& c, const std::string& extra) {
  require_hf_arch(c);
  c.validate();
  nlohmann::json j;
  if (c.arch == Arch::gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab},
         {"n_positions", c.context},
         {"n_embd", c.d_model},
         {"n_layer", c.n_layers},
         {"n_head", c.n_heads},
         {"n_inner", c.d_ff},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", c.norm_eps},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"scale_attn_weights", true},
         {"scale_attn_by_inverse_layer_idx", false},
         {"reorder_and_upcast_attn", false},
         {"add_cross_attention", false},
         {"tie_word_embeddings", true},
         {"bos_token_id", 0},
         {"eos_token_id", 0},
         {"initializer_range", 0.02},
         {"use_cache", true},
         {"torch_dtype", "float32"}};
  } else {
    // rope_theta both at the top (transformers 4) and in rope_parameters (5);
    // Llama 3's scaling both as rope_scaling (4) and in rope_parameters (5).
    nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    nlohmann::json scaling = nullptr;
    if (c.rope_factor != 0) {
      scaling = {{"rope_type", "llama3"},
                 {"factor", c.rope_factor},
                 {"low_freq_factor", c.rope_low_freq_factor},
                 {"high_freq_factor", c.rope_high_freq_factor},
                 {"original_max_position_embeddings", c.rope_original_context}};
      rope = scaling;
      rope["rope_theta"] = c.rope_theta;
    }
    const bool qwen2 = is_qwen2(c);
    j = {{"architectures", {hf_architecture(c)}},
         {"model_type", qwen2 ? "qwen2" : "llama"},
         {"vocab_size", c.vocab},
         {"hidden_size", c.d_model},
         {"intermediate_size", c.d_ff},
         {"num_hidden_layers", c.n_layers},
         {"num_attention_heads", c.n_heads},
         {"num_key_value_heads", c.kv_heads()},
         {"head_dim", c.head_width()},
         {"max_position_embeddings", c.context},
         {"rms_norm_eps", c.norm_eps},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", scaling},
         {"rope_parameters", rope},
         {"hidden_act", "silu"},
         {"attention_dropout", 0.0},
         {"tie_word_embeddings", c.tied_head},
         {"bos_token_id", 0},
         {"eos_token_id", 0},
         {"initializer_range", 0.02},
         {"use_cache", true},
         {"torch_dtype", "float32"}};
    if (qwen2) {
      // Qwen2's q/k/v biases are not a field: its class always has them.
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = c.n_layers;
      j["layer_types"] = std::vector<std::string>(static_cast<size_t>(c.n_layers), "full_attention");
    } else {
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
      j["pretraining_tp"] = 1;
    }
  }
  if (!extra.empty()) j.update(nlohmann::json::parse(extra));
  return j.dump(2) + "\n";
}

namespace {

// The rotary embedding's fields: rope_theta (read before) and the scaling,
// from rope_scaling (transformers 4) and rope_parameters (5, which may also
// hold rope_theta). rope_type "default" (or none) and "llama3" are read;
// another type, or a field of them capstep does not have, is an Error.
void read_rope(const nlohmann::json& j, LmConfig& c) {
  struct Scaling {
    bool llama3 = false;
    double factor = 0, low = 0, high = 0;
    int64_t original = 0;
  };
  auto read = [&](const char* key) -> std::pair<bool, Scaling> {
    Scaling sc;
    if (!j.contains(key) || j[key].is_null()) return {false, sc};
    const nlohmann::json& r = j[key];
    const std::string where = std::string("config.json: field '") + key;
    if (!r.is_object()) throw Error(where + "' is " + r.dump() + ", not an object");
    // transformers 4's older configs call rope_type "type".
    const char* type_key = r.contains("rope_type") ? "rope_type" : r.contains("type") ? "type" : nullptr;
    const nlohmann::json type = type_key ? r[type_key] : nlohmann::json("default");
    if (type != "default" && type != "llama3")
      throw Error(where + "." + type_key + "' is " + type.dump() +
                  "; capstep's rotary embedding is the default one or Llama 3's (\"llama3\")");
    auto num = [&](const char* k) {
      if (!r.contains(k) || r[k].is_null()) throw Error(where + "." + k + "' is missing (rope_type \"llama3\" needs it)");
      if (!r[k].is_number()) throw Error(where + "." + k + "' is not a number");
      return r[k].get<double>();
    };
    if (r.contains("rope_theta") && !r["rope_theta"].is_null()) {
      if (!r["rope_theta"].is_number()) throw Error(where + ".rope_theta' is not a number");
      c.rope_theta = r["rope_theta"].get<double>();
    }
    if (r.contains("partial_rotary_factor") && !r["partial_rotary_factor"].is_null() && r["partial_rotary_factor"] != 1)
      throw Error(where + ".partial_rotary_factor' is " + r["partial_rotary_factor"].dump() +
                  "; capstep rotates the whole head");
    if (type == "llama3") {
      sc.llama3 = true;
      sc.factor = num("factor");
      sc.low = num("low_freq_factor");
      sc.high = num("high_freq_factor");
      const double o = num("original_max_position_embeddings");
      if (o != std::floor(o) || o < 1 || o > 1e12)
        throw Error(where + ".original_max_position_embeddings' is " + r["original_max_position_embeddings"].dump() +
                    "; it must be a positive integer");
      sc.original = static_cast<int64_t>(o);
      if (!(sc.factor >= 1) || !(sc.low > 0) || !(sc.high > sc.low) || !std::isfinite(sc.factor) ||
          !std::isfinite(sc.high))
        throw Error(where + "' is " + r.dump() + "; Llama 3's scaling needs factor >= 1 and 0 < low_freq_factor < "
                    "high_freq_factor");
    }
    return {true, sc};
  };
  const auto [has_old, old] = read("rope_scaling");
  const auto [has_new, now] = read("rope_parameters");
  const Scaling& sc = has_new ? now : old;
  if (has_old && has_new && (old.llama3 != now.llama3 || old.factor != now.factor || old.low != now.low ||
                             old.high != now.high || old.original != now.original))
    throw Error("config.json: fields 'rope_scaling' and 'rope_parameters' give different rotary scalings");
  if (sc.llama3) {
    c.rope_factor = sc.factor;
    c.rope_low_freq_factor = sc.low;
    c.rope_high_freq_factor = sc.high;
    c.rope_original_context = sc.original;
  }
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null() && j["partial_rotary_factor"] != 1)
    throw Error("config.json: field 'partial_rotary_factor' is " + j["partial_rotary_factor"].dump() +
                "; capstep rotates the whole head");
}

// config_from_hf of the parsed text.
LmConfig config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("config.json is not a JSON object");
  auto field = [&](const char* k) -> const nlohmann::json& {
    if (!j.contains(k) || j[k].is_null()) throw Error(std::string("config.json: field '") + k + "' is missing");
    return j[k];
  };
  auto integer = [&](const char* k) {
    const nlohmann::json& v = field(k);
    if (!v.is_number_integer()) throw Error(std::string("config.json: field '") + k + "' is not an integer");
    return v.get<int64_t>();
  };
  auto number = [&](const char* k, double dflt) {
    if (!j.contains(k) || j[k].is_null()) return dflt;
    if (!j[k].is_number()) throw Error(std::string("config.json: field '") + k + "' is not a number");
    return j[k].get<double>();
  };
  // A field capstep's model has one value of: absent (transformers' default) or that value.
  auto must = [&](const char* k, const nlohmann::json& want, const std::string& why) {
    if (j.contains(k) && !j[k].is_null() && j[k] != want)
      throw Error(std::string("config.json: field '") + k + "' is " + j[k].dump() + "; capstep" + why);
  };
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  LmConfig c;
  if (type == "gpt2") {
    c.arch = Arch::gpt2;
    c.vocab = integer("vocab_size");
    c.context = integer("n_positions");
    c.d_model = integer("n_embd");
    c.n_layers = integer("n_layer");
    c.n_heads = integer("n_head");
    c.d_ff = j.contains("n_inner") && !j["n_inner"].is_null() ? integer("n_inner") : 4 * c.d_model;
    c.norm_eps = number("layer_norm_epsilon", 1e-5);
    if (j.contains("activation_function") && !j["activation_function"].is_string())
      throw Error("config.json: field 'activation_function' is not a string");
    const std::string act = j.contains("activation_function") ? j["activation_function"].get<std::string>() : "gelu_new";
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw Error("config.json: field 'activation_function' is \"" + act +
                  "\"; capstep's GPT-2 has GELU in its tanh form (gelu_new, gelu_pytorch_tanh)");
    must("scale_attn_weights", true, " scales the attention scores by 1/sqrt(head width)");
    must("scale_attn_by_inverse_layer_idx", false, " does not scale the attention by layer");
    must("add_cross_attention", false, " has no cross-attention");
    must("tie_word_embeddings", true, " ties GPT-2's head to the token embedding");
  } else if (type == "llama" || type == "qwen2") {
    const bool qwen2 = type == "qwen2";
    c.arch = Arch::llama;
    c.vocab = integer("vocab_size");
    c.d_model = integer("hidden_size");
    c.d_ff = integer("intermediate_size");
    c.n_layers = integer("num_hidden_layers");
    c.n_heads = integer("num_attention_heads");
    c.n_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? integer("num_key_value_heads") : c.n_heads;
    c.context = integer("max_position_embeddings");
    c.norm_eps = number("rms_norm_eps", 1e-6);
    c.rope_theta = number("rope_theta", 10000);
    read_rope(j, c);
    must("hidden_act", "silu", std::string("'s ") + (qwen2 ? "Qwen2" : "Llama") + " MLP is SwiGLU (silu)");
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      const int64_t hd = integer("head_dim");
      if (hd < 1) throw Error("config.json: field 'head_dim' is " + j["head_dim"].dump() + "; it must be at least 1");
      // The width d_model / n_heads gives is no field of LmConfig (0 stands for it).
      if (c.n_heads < 1 || c.d_model % c.n_heads != 0 || hd != c.d_model / c.n_heads) c.head_dim = hd;
    }
    if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
      if (!j["tie_word_embeddings"].is_boolean()) throw Error("config.json: field 'tie_word_embeddings' is not a boolean");
      c.tied_head = j["tie_word_embeddings"].get<bool>();
    }
    auto flag = [&](const char* k) {
      if (!j.contains(k) || j[k].is_null()) return false;
      if (!j[k].is_boolean()) throw Error(std::string("config.json: field '") + k + "' is not a boolean");
      return j[k].get<bool>();
    };
    if (qwen2) {
      // Qwen2Attention: q, k and v with biases, o without; no MLP biases.
      c.qkv_bias = true;
      must("use_sliding_window", false, "'s attention is full (causal) in every layer: no sliding window");
      if (j.contains("layer_types") && !j["layer_types"].is_null()) {
        if (!j["layer_types"].is_array()) throw Error("config.json: field 'layer_types' is not a list");
        for (const nlohmann::json& t : j["layer_types"])
          if (t != "full_attention")
            throw Error("config.json: field 'layer_types' holds " + t.dump() +
                        "; capstep's attention is full (causal) in every layer (\"full_attention\")");
      }
    } else {
      c.qkv_bias = c.o_bias = flag("attention_bias");
      c.mlp_bias = flag("mlp_bias");
      must("pretraining_tp", 1, " computes each product whole (pretraining_tp 1)");
    }
  } else {
    throw Error("config.json: field 'model_type' is " + (j.contains("model_type") ? j["model_type"].dump() : "missing") +
                "; capstep reads gpt2, llama and qwen2");
  }
  c.seq = std::min<int64_t>(c.seq, c.context);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(std::string("config.json: ") + e.what());
  }
  return c;
}

}  // namespace

LmConfig config_from_hf(const std::string& text) { return config_from_json(data::parse_json(text, "config.json")); }

namespace {

// UTF-8 of one code point.
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

namespace {

// The start of each UTF-8 character of `s` but the first (where a piece can be
// split in two).
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  return at;
}

// A subword tokenizer (SentencePiece, trained by capstep with normalization
// off, no dummy prefix, byte fallback) as the `tokenizers` library's
// Unigram or BPE model. The pieces are written with real spaces where
// SentencePiece has U+2581, so no normalizer or pre-tokenizer is needed and a
// U+2581 in the text is a character without a piece, encoded as its bytes,
// as capstep does. Neither SentencePiece nor this splits the text into words:
// its pieces never cross a newline, and the whole text is one sequence.
nlohmann::json subword_tokenizer_json(const data::Tokenizer& t, std::vector<std::string>* warnings) {
  const std::shared_ptr<const data::SubwordModel> sm = data::subword_load(t.model());
  const std::vector<data::SubwordPiece> pieces = data::subword_pieces(*sm);
  const bool bpe = t.kind() == data::TokenizerKind::bpe;
  std::vector<std::string> text(pieces.size());
  std::map<std::string, int64_t> id_of;
  int64_t unk_id = -1;
  float least = 0;   // the lowest score of a normal piece
  for (size_t id = 0; id < pieces.size(); ++id) {
    const data::SubwordPiece& p = pieces[id];
    if (p.kind == data::SubwordPieceKind::normal) {
      for (size_t i = 0; i < p.text.size(); ++i) {
        if (p.text.compare(i, 3, "\xE2\x96\x81") == 0) {
          text[id] += ' ';
          i += 2;
        } else {
          text[id] += p.text[i];
        }
      }
      least = std::min(least, p.score);
    } else {
      text[id] = p.text;   // "<unk>", "<0x0A>", a control piece's name
      if (p.kind == data::SubwordPieceKind::unknown && unk_id < 0) unk_id = static_cast<int64_t>(id);
    }
    if (!id_of.emplace(text[id], static_cast<int64_t>(id)).second)
      throw Error("the " + t.name() + " tokenizer has two pieces that read '" + text[id] + "' (ids " +
                  std::to_string(id_of[text[id]]) + " and " + std::to_string(id) + "); tokenizer.json cannot hold both");
  }
  if (unk_id < 0) throw Error("the " + t.name() + " tokenizer has no unknown piece");
  nlohmann::json model;
  if (!bpe) {
    // SentencePiece never matches the text against the names of the unknown,
    // byte and control pieces; `tokenizers` matches every piece of the
    // vocabulary. Those get a score below any path of normal pieces through
    // their name (one piece a character at most, each scoring at least
    // `least`; "<0x41>" is 6 characters), so a text that holds "<0x41>" or
    // "<unk>" takes the normal pieces, as SentencePiece does -- unless a
    // character of the name has no piece of its own, where `tokenizers` would
    // take the name's piece (its unknown characters score lower still): said
    // in *warnings.
    size_t longest = 0;   // characters in the longest reserved name
    for (size_t id = 0; id < pieces.size(); ++id)
      if (pieces[id].kind != data::SubwordPieceKind::normal)
        longest = std::max(longest, char_boundaries(text[id]).size() + 1);
    const double reserved = std::max<double>(10.0, static_cast<double>(longest) + 1.0) * static_cast<double>(least) - 100.0;
    nlohmann::json vocab = nlohmann::json::array();
    std::string missing;
    for (size_t id = 0; id < pieces.size(); ++id) {
      const bool normal = pieces[id].kind == data::SubwordPieceKind::normal;
      vocab.push_back({text[id], normal ? static_cast<double>(pieces[id].score) : reserved});
      if (normal) continue;
      std::vector<size_t> cut = char_boundaries(text[id]);
      cut.insert(cut.begin(), 0);
      cut.push_back(text[id].size());
      for (size_t k = 0; k + 1 < cut.size(); ++k) {
        const std::string ch = text[id].substr(cut[k], cut[k + 1] - cut[k]);
        auto it = id_of.find(ch);
        const bool has = it != id_of.end() && pieces[static_cast<size_t>(it->second)].kind == data::SubwordPieceKind::normal;
        if (!has && missing.find("'" + ch + "'") == std::string::npos) missing += (missing.empty() ? "'" : ", '") + ch + "'";
      }
    }
    if (!missing.empty() && warnings)
      warnings->push_back("the " + t.name() + " tokenizer has no piece for the character" +
                          (missing.find(',') == std::string::npos ? " " : "s ") + missing +
                          ", so transformers' tokenizer encodes a text that spells a reserved piece's name (\"<unk>\", "
                          "\"<0x41>\", ...) as that piece, where capstep encodes its characters");
    // Ties: two segmentations of the same score (the same pieces in another
    // order, as in a run of one character: "--" "----" or "----" "--").
    // tokenizers sums the scores exactly (in double, of float scores) and
    // keeps the first it finds; SentencePiece sums in float, whose rounding
    // picks one or the other (scripts/check-hf-export checks that every
    // difference it finds is such a tie).
    if (warnings)
      warnings->push_back("the " + t.name() + " tokenizer: where two segmentations of a text score the same (the "
                          "same pieces in another order, as in a run of one character), SentencePiece (single "
                          "precision) and transformers' tokenizers (double) can choose different ones, and the ids "
                          "differ there (both decode to the text); the bpe tokenizer has no such case");
    model = {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", true}};
  } else {
    // SentencePiece's BPE merges, at each step, the adjacent pair whose
    // concatenation is the piece of the highest score; `tokenizers` merges
    // the pair of the lowest rank. So the merges are every split of every
    // normal piece into two normal pieces, ranked by the whole piece's score
    // (then by the parts' ids), and only normal pieces take part: the
    // reserved ones are never made from the text.
    std::vector<size_t> order;
    for (size_t id = 0; id < pieces.size(); ++id)
      if (pieces[id].kind == data::SubwordPieceKind::normal) order.push_back(id);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].score > pieces[b].score; });
    nlohmann::json merges = nlohmann::json::array();
    auto normal_id = [&](const std::string& s) -> int64_t {
      auto it = id_of.find(s);
      return it != id_of.end() && pieces[static_cast<size_t>(it->second)].kind == data::SubwordPieceKind::normal
                 ? it->second : -1;
    };
    for (size_t id : order) {
      std::vector<std::pair<int64_t, int64_t>> splits;
      for (size_t b : char_boundaries(text[id])) {
        const int64_t l = normal_id(text[id].substr(0, b)), r = normal_id(text[id].substr(b));
        if (l >= 0 && r >= 0) splits.emplace_back(l, r);
      }
      std::sort(splits.begin(), splits.end());
      for (const auto& [l, r] : splits) merges.push_back({text[static_cast<size_t>(l)], text[static_cast<size_t>(r)]});
    }
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t id = 0; id < pieces.size(); ++id) vocab[text[id]] = id;
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", text[static_cast<size_t>(unk_id)]},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},
             {"byte_fallback", true},
             {"ignore_merges", false},
             {"vocab", vocab},
             {"merges", merges}};
  }
  nlohmann::json decoders = {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  nlohmann::json normalizer = nullptr;
  if (data::subword_dummy_prefix(*sm)) {
    // A model that puts a space before the text (Llama's): so does the
    // normalizer, and the decoder takes it off again, as capstep does.
    normalizer = {{"type", "Prepend"}, {"prepend", " "}};
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model", model}};
}

}  // namespace

std::string hf_tokenizer_json(const data::Tokenizer& t, std::vector<std::string>* warnings) {
  if (t.kind() == data::TokenizerKind::bytelevel_bpe) {
    // Its model is the tokenizer.json capstep writes for it.
    if (!t.trained()) throw Error("no tokenizer.json for the " + t.name() + " tokenizer: it has no model");
    return t.model();
  }
  if (t.subword()) {
    if (!t.trained()) throw Error("no tokenizer.json for the " + t.name() + " tokenizer: it is not trained");
    return subword_tokenizer_json(t, warnings).dump() + "\n";   // one line: thousands of pieces
  }
  const std::string name = t.name();
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                      {"added_tokens", nlohmann::json::array()}, {"normalizer", nullptr}, {"post_processor", nullptr}};
  nlohmann::json model = {{"type", "BPE"},          {"dropout", nullptr},       {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},      {"byte_fallback", false},   {"ignore_merges", false},
                          {"merges", nlohmann::json::array()}};
  if (name == "byte") {
    // GPT-2's byte-level alphabet (bytes_to_unicode): printable bytes stand
    // for themselves, the others for 256 + their rank. No merges: every byte
    // is its own token, id = the byte's value, as capstep's byte tokenizer.
    std::vector<uint32_t> cp(256, 0);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? b : 256 + n++;
    }
    for (uint32_t b = 0; b < 256; ++b) vocab[utf8(cp[b])] = b;
    const nlohmann::json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    j["pre_tokenizer"] = byte_level;
    j["decoder"] = byte_level;
  } else if (name == "char") {
    // One token per character, '~' for any other (as capstep's char tokenizer);
    // no pre-tokenizer, so the text is one word split into its characters.
    const data::Tokenizer t(data::TokenizerKind::chars);
    for (int32_t id = 0; id < t.vocab(); ++id) {
      const std::string p = t.piece(id);
      if (!p.empty() && !vocab.contains(p)) vocab[p] = id;
    }
    model["unk_token"] = "~";
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Fuse"}};
  }
  model["vocab"] = vocab;
  j["model"] = model;
  return j.dump(1) + "\n";
}

std::string hf_tokenizer_json(const std::string& tokenizer) { return hf_tokenizer_json(data::Tokenizer::parse(tokenizer)); }

namespace {

// The tensors of a safetensors file in transformers' dtypes: F32 and BF16 as
// read_safetensors reads them, and F16 (which capstep has no dtype for) read
// into f32, exactly. F16 tensors are relabelled BF16 (also 2 bytes) in a
// copy of the header, so that read_safetensors' checks see the whole file,
// and their bits are then widened as IEEE half.
std::vector<NamedArray> read_weights_file(const std::string& path) {
  std::string image = data::read_regular_file(path, "safetensors file", UINT64_MAX);
  std::vector<std::string> halves;
  if (image.size() >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(image[static_cast<size_t>(i)]);
    if (n <= kSafetensorsMaxHeader && n <= image.size() - 8) {
      nlohmann::json h = nlohmann::json::parse(image.begin() + 8, image.begin() + 8 + static_cast<std::ptrdiff_t>(n),
                                               nullptr, false);
      if (h.is_object()) {
        for (auto& [name, info] : h.items())
          if (name != "__metadata__" && info.is_object() && info.contains("dtype") && info["dtype"] == "F16") {
            info["dtype"] = "BF16";
            halves.push_back(name);
          }
      }
      if (!halves.empty()) {
        std::string header = h.dump();
        header.append((8 - header.size() % 8) % 8, ' ');
        std::string len(8, '\0');
        for (size_t i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
        image = len + header + image.substr(8 + n);
      }
    }
  }
  SafetensorsFile f;
  try {
    f = parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  } catch (const Error& e) {
    throw Error("safetensors file '" + path + "': " + e.what());
  }
  for (const std::string& name : halves) {
    for (NamedArray& t : f.tensors) {
      if (t.name != name) continue;
      Array wide(Type{DType::f32, t.array.shape()});
      const uint16_t* h = t.array.data<uint16_t>();
      float* w = wide.data<float>();
      for (int64_t i = 0; i < wide.numel(); ++i) {
        const uint32_t sign = (h[i] & 0x8000u) << 16, exp = (h[i] >> 10) & 0x1f, man = h[i] & 0x3ffu;
        float v;
        if (exp == 0) {
          v = std::ldexp(static_cast<float>(man), -24);   // zero and subnormals
        } else if (exp == 31) {
          v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        } else {
          v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
        }
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        bits |= sign;
        std::memcpy(&w[i], &bits, 4);
      }
      t.array = std::move(wide);
    }
  }
  return std::move(f.tensors);
}

// save_pretrained's name of shard i (from 1) of n.
std::string shard_name(size_t i, size_t n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05zu-of-%05zu.safetensors", i, n);
  return b;
}

}  // namespace

std::vector<NamedArray> read_hf_weights(const std::string& dir, std::string* from) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec) || !std::filesystem::exists(index, ec)) {
    if (from) *from = single;
    if (!std::filesystem::exists(single, ec))
      throw Error("cannot read '" + single + "': the directory has neither model.safetensors nor "
                  "model.safetensors.index.json (its shards')");
    return read_weights_file(single);
  }
  if (from) *from = index;
  std::string text;
  {
    std::ifstream f(index, std::ios::binary);
    if (!f) throw Error("cannot read '" + index + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  nlohmann::json j;
  try {
    j = data::parse_json(text, "model.safetensors.index.json");
  } catch (const Error& e) {
    throw Error("'" + index + "': " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error("'" + index + "': field 'weight_map' is missing or not an object of tensor: file");
  std::vector<std::string> files;   // in order of first mention
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      throw Error("'" + index + "': field 'weight_map." + name + "' is " + file.dump() + ", not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw Error("'" + index + "': field 'weight_map." + name + "' is \"" + f +
                  "\"; a shard is a file of the directory");
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  std::vector<NamedArray> out;
  std::map<std::string, std::string> file_of;
  for (const std::string& f : files) {
    for (NamedArray& t : read_weights_file(dir + "/" + f)) {
      if (file_of.count(t.name))
        throw Error("'" + dir + "/" + f + "': tensor '" + t.name + "' is also in '" + file_of[t.name] + "'");
      const nlohmann::json& want = j["weight_map"].contains(t.name) ? j["weight_map"][t.name] : nlohmann::json();
      if (want != f)
        throw Error("'" + dir + "/" + f + "' holds tensor '" + t.name + "', which '" + index + "' puts in " +
                    (want.is_null() ? std::string("no file") : want.dump()));
      file_of[t.name] = f;
      out.push_back(std::move(t));
    }
  }
  for (const auto& [name, file] : j["weight_map"].items())
    if (!file_of.count(name))
      throw Error("'" + index + "' puts tensor '" + name + "' in " + file.dump() + ", which does not hold it");
  return out;
}

std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<NamedArray>& tensors,
                                          const HfWriteOptions& o) {
  if (o.dtype != DType::f32 && o.dtype != DType::bf16)
    throw Error(std::string("transformers' weights are written in f32 or bf16, not ") + dtype_name(o.dtype));
  if (o.max_shard_bytes < 0) throw Error("the shard size must be 0 (one file) or positive");
  std::vector<NamedArray> cast;
  for (const NamedArray& t : tensors)
    cast.push_back({t.name, t.array.dtype() == o.dtype ? t.array : t.array.converted(o.dtype)});
  // huggingface_hub's split_torch_state_dict_into_shards: in order, a new
  // shard where the next tensor would take the current one past the size; a
  // tensor larger than the size alone in a shard of its own.
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0, total = 0;
  const uint64_t limit = static_cast<uint64_t>(o.max_shard_bytes);
  for (size_t i = 0; i < cast.size(); ++i) {
    const uint64_t b = cast[i].array.type().bytes();
    total += b;
    if (limit == 0) {
      current.push_back(i);
      continue;
    }
    if (b > limit) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + b > limit && !current.empty()) {
      shards.push_back(current);
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += b;
  }
  if (!current.empty()) shards.push_back(current);
  std::error_code ec;
  std::vector<std::string> written;
  if (shards.size() <= 1) {
    write_safetensors(dir + "/model.safetensors", cast, {{"format", "pt"}});
    std::filesystem::remove(dir + "/model.safetensors.index.json", ec);   // a sharded save's, from before
    return {"model.safetensors"};
  }
  nlohmann::json map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s + 1, shards.size());
    std::vector<NamedArray> part;
    for (size_t i : shards[s]) {
      part.push_back(cast[i]);
      map[cast[i].name] = name;
    }
    write_safetensors(dir + "/" + name, part, {{"format", "pt"}});
    written.push_back(name);
  }
  // As transformers writes it: indent 2, keys sorted (nlohmann's objects are).
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  write_file_atomically(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  std::filesystem::remove(dir + "/model.safetensors", ec);   // an unsharded save's, from before: it would be read first
  written.push_back("model.safetensors.index.json");
  return written;
}

void write_hf_dir(const std::string& dir, const LmConfig& c, const std::vector<Array>& params,
                  const std::string& tokenizer, const std::string& tokenizer_model, std::vector<std::string>* warnings,
                  const HfWriteOptions& options) {
  const std::vector<NamedArray> tensors = to_hf_tensors(c, params);
  if (options.dtype != DType::f32 && options.dtype != DType::bf16)
    throw Error(std::string("transformers' weights are written in f32 or bf16, not ") + dtype_name(options.dtype));
  // The tokenizer's files, made before anything is written: a tokenizer
  // that cannot be written leaves no half-written directory behind.
  std::string tokenizer_json;
  data::Tokenizer t;
  if (!tokenizer.empty()) {
    t = data::Tokenizer::from_model(tokenizer, tokenizer_model);
    if (t.vocab() != c.vocab)
      throw Error("the " + t.name() + " tokenizer has " + std::to_string(t.vocab()) + " symbols, the model " +
                  std::to_string(c.vocab));
    tokenizer_json = hf_tokenizer_json(t, warnings);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory '" + dir + "': " + ec.message());
  nlohmann::json extra = nlohmann::json::object();
  if (!tokenizer.empty()) extra["capstep_tokenizer"] = t.name();
  if (options.dtype == DType::bf16) extra["torch_dtype"] = "bfloat16";
  write_hf_weights(dir, tensors, options);
  write_file_atomically(dir + "/config.json", hf_config_json(c, extra.empty() ? "" : extra.dump()));
  if (tokenizer.empty()) return;
  write_file_atomically(dir + "/tokenizer.json", tokenizer_json);
  // The subword model as SentencePiece saves it, for tools that read
  // tokenizer.model (and for `capstep train --init-from`). transformers'
  // AutoTokenizer reads tokenizer.json: the class below is the generic one
  // over it, which adds no token of its own.
  if (t.subword()) write_file_atomically(dir + "/tokenizer.model", t.model());
  const nlohmann::json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                             {"model_max_length", c.context},
                             {"clean_up_tokenization_spaces", false}};
  write_file_atomically(dir + "/tokenizer_config.json", tc.dump(2) + "\n");
}

namespace {

// The bytes of a file; false when it does not exist. Error when it exists
// and cannot be read.
bool read_if_there(const std::string& path, std::string* out) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// A directory's own tokenizer when config.json names none (one made by
// transformers): tokenizer.model (SentencePiece, Llama's), else
// tokenizer.json (a byte-level BPE, GPT-2's), else vocab.json + merges.txt
// (GPT-2's older files). Sets m.tokenizer and m.tokenizer_model, or leaves
// them empty when there is none of these files.
void read_foreign_tokenizer(const std::string& dir, HfModel& m) {
  std::string text, merges;
  data::Tokenizer t;
  std::string file;
  if (read_if_there(file = dir + "/tokenizer.model", &text)) {
    try {
      t = data::Tokenizer::from_sentencepiece(text);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  } else if (read_if_there(file = dir + "/tokenizer.json", &text)) {
    try {
      t = data::Tokenizer::from_bytelevel(text);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  } else {
    const bool vocab = read_if_there(dir + "/vocab.json", &text), merged = read_if_there(dir + "/merges.txt", &merges);
    if (!vocab && !merged) return;
    if (!vocab || !merged)
      throw Error("'" + dir + "' has " + (vocab ? "vocab.json but no merges.txt" : "merges.txt but no vocab.json") +
                  "; a GPT-2 tokenizer needs both");
    file = dir + "/vocab.json";
    try {
      t = data::Tokenizer::from_bytelevel(text, &merges);
    } catch (const Error& e) {
      throw Error("'" + dir + "': " + e.what());
    }
  }
  // A vocab_size above the tokenizer's (padded, or with room for added
  // tokens) is the tokenizer padded to it; below, its ids would not fit.
  if (t.vocab() > m.config.vocab)
    throw Error("'" + file + "' has " + std::to_string(t.vocab()) + " ids (the " + t.name() +
                " tokenizer) but config.json's vocab_size is " + std::to_string(m.config.vocab) +
                ": its ids do not fit in the model's");
  if (t.vocab() < m.config.vocab) {
    try {
      t = t.padded_to(m.config.vocab);
    } catch (const Error& e) {
      throw Error("'" + file + "' with config.json's vocab_size " + std::to_string(m.config.vocab) + ": " + e.what());
    }
  }
  m.tokenizer = t.name();
  m.tokenizer_model = t.model();
  m.tokenizer_file = file;
}

// An id of generation_config.json's `field` (`v`), checked against the vocabulary.
int64_t special_id(const nlohmann::json& v, const std::string& field, const data::Tokenizer& t) {
  if (!v.is_number_integer()) throw Error(field + " is " + v.dump() + ", not an integer id");
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= t.vocab())
    throw Error(field + " is " + std::to_string(id) + ", outside the " + t.name() + " tokenizer's [0, " +
                std::to_string(t.vocab()) + ")");
  return id;
}

}  // namespace

HfSpecialTokens read_hf_special_tokens(const std::string& dir, const data::Tokenizer& t) {
  HfSpecialTokens out;
  std::string text;
  std::vector<int64_t> gen_eos;
  int64_t gen_bos = -1;
  std::string file = dir + "/generation_config.json";
  if (read_if_there(file, &text)) {
    try {
      const nlohmann::json j = data::parse_json(text, "generation_config.json");
      if (!j.is_object()) throw Error("not an object");
      if (j.contains("bos_token_id") && !j["bos_token_id"].is_null())
        gen_bos = special_id(j["bos_token_id"], "bos_token_id", t);
      if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
        const nlohmann::json& e = j["eos_token_id"];
        if (e.is_array()) {
          for (size_t i = 0; i < e.size(); ++i)
            gen_eos.push_back(special_id(e[i], "eos_token_id[" + std::to_string(i) + "]", t));
        } else {
          gen_eos.push_back(special_id(e, "eos_token_id", t));
        }
      }
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  }
  file = dir + "/tokenizer_config.json";
  if (read_if_there(file, &text)) {
    try {
      const nlohmann::json j = data::parse_json(text, "tokenizer_config.json");
      if (!j.is_object()) throw Error("not an object");
      auto token = [&](const char* key) -> int64_t {
        if (!j.contains(key) || j[key].is_null()) return -1;
        const nlohmann::json& v = j[key];
        std::string content;
        if (v.is_string()) content = v.get<std::string>();
        else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
        else throw Error(std::string(key) + " is " + v.dump() + ", not a token's text or an object with its \"content\"");
        const std::optional<int32_t> id = t.token_id(content);
        if (!id) throw Error(std::string(key) + " \"" + content + "\" is not a token of the " + t.name() + " tokenizer");
        return *id;
      };
      out.bos = token("bos_token");
      const int64_t eos = token("eos_token");
      if (eos >= 0) out.eos.push_back(eos);
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
  }
  if (out.bos < 0) out.bos = gen_bos;
  for (int64_t id : gen_eos)
    if (std::find(out.eos.begin(), out.eos.end(), id) == out.eos.end()) out.eos.push_back(id);
  return out;
}

std::string hf_tokenizer_files() {
  return "config.json's \"capstep_tokenizer\", tokenizer.model (SentencePiece), tokenizer.json (byte-level BPE) "
         "and vocab.json + merges.txt (GPT-2's)";
}

HfModel read_hf_dir(const std::string& dir) {
  const std::string cfg = dir + "/config.json";
  std::ifstream f(cfg, std::ios::binary);
  if (!f) throw Error("cannot read '" + cfg + "'" + (std::filesystem::exists(dir) ? "" : ": no such directory"));
  std::stringstream ss;
  ss << f.rdbuf();
  HfModel m;
  try {
    const nlohmann::json j = data::parse_json(ss.str(), "config.json");
    m.config = config_from_json(j);
    if (j.contains("capstep_tokenizer") && j["capstep_tokenizer"].is_string())
      m.tokenizer = j["capstep_tokenizer"].get<std::string>();
  } catch (const Error& e) {
    throw Error("'" + cfg + "': " + e.what());
  }
  if (m.tokenizer.empty()) {
    read_foreign_tokenizer(dir, m);
  } else if (data::Tokenizer::parse(m.tokenizer).kind() == data::TokenizerKind::bytelevel_bpe) {
    // A byte-level BPE: its tokenizer.json, as export-hf wrote it.
    const std::string file = dir + "/tokenizer.json";
    std::string text;
    if (!read_if_there(file, &text))
      throw Error("cannot read '" + file + "': config.json names the " + m.tokenizer +
                  " tokenizer (\"capstep_tokenizer\"), whose vocabulary and merges are that file");
    try {
      m.tokenizer_model = data::Tokenizer::from_model(m.tokenizer, text).model();
    } catch (const Error& e) {
      throw Error("'" + file + "': " + e.what());
    }
    m.tokenizer_file = file;
  } else if (m.tokenizer != "char" && m.tokenizer != "byte") {
    // A subword tokenizer: its SentencePiece model, as export-hf wrote it.
    const std::string model = dir + "/tokenizer.model";
    m.tokenizer_file = model;
    std::ifstream t(model, std::ios::binary);
    if (!t)
      throw Error("cannot read '" + model + "': config.json names the " + m.tokenizer +
                  " tokenizer (\"capstep_tokenizer\"), whose SentencePiece model is that file");
    std::stringstream ts;
    ts << t.rdbuf();
    try {
      m.tokenizer_model = data::Tokenizer::from_model(m.tokenizer, ts.str()).model();
    } catch (const Error& e) {
      throw Error("'" + model + "': " + e.what());
    }
  }
  if (!m.tokenizer.empty()) {
    const data::Tokenizer t = data::Tokenizer::from_model(m.tokenizer, m.tokenizer_model);
    m.special = read_hf_special_tokens(dir, t);
  }
  std::string from;
  const std::vector<NamedArray> tensors = read_hf_weights(dir, &from);
  try {
    m.params = params_from_hf(m.config, tensors);
  } catch (const Error& e) {
    throw Error("'" + from + "': " + e.what());
  }
  return m;
}

}  // namespace capstep::nn
