// config.json both ways (hf.h): hf_config_json writes transformers'
// GPT2Config / LlamaConfig / Qwen2Config, config_from_hf reads one back.
#include "capstep/hf.h"

#include "data/json.h"
#include "nn/hf_internal.h"

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace capstep::nn {

using hf_detail::is_qwen2;
using hf_detail::require_hf_arch;

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

}  // namespace

namespace hf_detail {

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

}  // namespace hf_detail

LmConfig config_from_hf(const std::string& text) { return hf_detail::config_from_json(data::parse_json(text, "config.json")); }

}  // namespace capstep::nn
