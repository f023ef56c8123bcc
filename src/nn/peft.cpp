// LoRA in capstep's models under PEFT's names (lora.h): which weights
// target_modules picks (through hf.h's module paths), and PEFT's
// adapter_config.json and adapter_model.safetensors both ways.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capstep/hf.h"
#include "capstep/lora.h"
#include "capstep/safetensors.h"
#include "data/json.h"

namespace capstep::lora {
namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// capstep's name for a pair over several weights: GPT-2's c_attn "blocks.L.attn.wq" -> "blocks.L.attn.wqkv".
std::string group_name(const std::vector<std::string>& weights) {
  std::string n = weights.at(0);
  for (size_t i = 1; i < weights.size(); ++i) n += weights[i].substr(weights[i].rfind('.') + 2);
  return n;
}

// One LoRA-able module of transformers' model: its path and capstep's weights.
struct Module {
  std::string path;
  std::vector<std::string> weights;
  bool embedding = false;   // token or position embedding: not a linear layer
  bool head = false;        // the output head (lm_head)
};

std::vector<Module> modules_of(const nn::LmConfig& c) {
  std::vector<Module> out;
  std::map<std::string, size_t> at;
  for (const nn::HfMatrix& m : nn::hf_matrices(c)) {
    auto it = at.find(m.module);
    if (it == at.end()) {
      it = at.emplace(m.module, out.size()).first;
      Module mod;
      mod.path = m.module;
      mod.embedding = m.param == "tok_emb" || m.param == "pos_emb";
      mod.head = m.param == "head";
      out.push_back(mod);
    }
    out[it->second].weights.push_back(m.param);
  }
  return out;
}

Target target_of(const Module& m) { return {m.weights.size() == 1 ? m.weights[0] : group_name(m.weights), m.weights}; }

// PEFT's check_target_module_exists: a string is a regular expression that
// must match the whole path; a list entry matches the path or a suffix after a '.'.
bool picks(const std::vector<std::string>& list, const std::string& regex, bool is_regex, const std::string& path) {
  if (is_regex) return std::regex_match(path, std::regex(regex));
  for (const std::string& t : list)
    if (path == t || ends_with(path, "." + t)) return true;
  return false;
}

std::vector<Target> select(const nn::LmConfig& c, const std::vector<std::string>& list, const std::string& regex,
                           bool is_regex) {
  const std::vector<Module> mods = modules_of(c);
  const bool all_linear = !is_regex && list.size() == 1 && list[0] == "all-linear";
  if (!is_regex && list.empty()) throw Error("LoRA target_modules is empty");
  std::vector<Target> out;
  std::set<std::string> used;
  for (const Module& m : mods) {
    bool take;
    if (all_linear) {
      take = !m.embedding && !m.head;
    } else {
      take = picks(list, regex, is_regex, m.path);
      if (take && m.embedding)
        throw Error("LoRA target_modules picks '" + m.path + "', an embedding; capstep's LoRA adapts linear layers only");
    }
    if (!take) continue;
    out.push_back(target_of(m));
    if (!is_regex)
      for (const std::string& t : list)
        if (m.path == t || ends_with(m.path, "." + t)) used.insert(t);
  }
  if (!all_linear && !is_regex)
    for (const std::string& t : list)
      if (!used.count(t)) {
        std::string names;
        std::set<std::string> last;
        for (const Module& m : mods)
          if (!m.embedding && last.insert(m.path.substr(m.path.rfind('.') + 1)).second)
            names += (names.empty() ? "" : ", ") + m.path.substr(m.path.rfind('.') + 1);
        throw Error("LoRA target_modules entry '" + t + "' names no linear layer of this " + nn::arch_name(c.arch) +
                    " model (its linear layers: " + names + "; or all-linear)");
      }
  if (out.empty()) throw Error("LoRA target_modules '" + regex + "' picks no linear layer of this model");
  return out;
}

const Module& module_of(const nn::LmConfig& c, const std::vector<Module>& mods, const Target& t) {
  for (const Module& m : mods)
    if (m.weights == t.weights) return m;
  throw Error("LoRA target '" + t.name + "' is no module of this " + nn::arch_name(c.arch) + " model");
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<Target> targets_for(const nn::LmConfig& c, const std::vector<std::string>& target_modules) {
  return select(c, target_modules, "", false);
}

std::string hf_module(const nn::LmConfig& c, const Target& t) { return module_of(c, modules_of(c), t).path; }

std::vector<NamedArray> peft_tensors(const nn::LmConfig& c, const Adapter& a) {
  const std::vector<Module> mods = modules_of(c);
  if (a.a.size() != a.targets.size() || a.b.size() != a.targets.size())
    throw Error("LoRA adapter: " + std::to_string(a.targets.size()) + " targets but " + std::to_string(a.a.size()) +
                " A and " + std::to_string(a.b.size()) + " B matrices");
  std::vector<NamedArray> out;
  for (size_t i = 0; i < a.targets.size(); ++i) {
    const std::string k = "base_model.model." + module_of(c, mods, a.targets[i]).path;
    out.push_back({k + ".lora_A.weight", a.a[i].dtype() == DType::f32 ? a.a[i] : a.a[i].converted(DType::f32)});
    out.push_back({k + ".lora_B.weight", a.b[i].dtype() == DType::f32 ? a.b[i] : a.b[i].converted(DType::f32)});
  }
  return out;
}

std::string peft_config_json(const nn::LmConfig& c, const Adapter& a) {
  a.options.validate();
  const std::vector<Module> mods = modules_of(c);
  nlohmann::json modules = nlohmann::json::array();
  if (a.target_modules.empty() || (a.target_modules.size() == 1 && a.target_modules[0] == "all-linear")) {
    // PEFT writes the paths "all-linear" picked.
    for (const Target& t : a.targets) modules.push_back(module_of(c, mods, t).path);
  } else {
    for (const std::string& m : a.target_modules) modules.push_back(m);
  }
  const nlohmann::json null;
  // Every field PEFT 0.21's LoraConfig.save_pretrained writes, at its default
  // where capstep has no counterpart.
  const nlohmann::json j = {{"alora_invocation_tokens", null},
                            {"alpha_pattern", nlohmann::json::object()},
                            {"arrow_config", null},
                            {"auto_mapping", null},
                            {"base_model_name_or_path", a.base_model.empty() ? null : nlohmann::json(a.base_model)},
                            {"bias", "none"},
                            {"corda_config", null},
                            {"ensure_weight_tying", false},
                            {"eva_config", null},
                            {"exclude_modules", null},
                            // GPT-2's Conv1D stores its weight [in, out]: PEFT sets this for it.
                            {"fan_in_fan_out", c.arch == nn::Arch::gpt2},
                            {"inference_mode", true},
                            {"init_lora_weights", true},
                            {"kasa_config", null},
                            {"layer_replication", null},
                            {"layers_pattern", null},
                            {"layers_to_transform", null},
                            {"loftq_config", nlohmann::json::object()},
                            // PEFT's lora_alpha is an int: a whole alpha is written as one.
                            {"lora_alpha", a.options.alpha == std::floor(a.options.alpha) && a.options.alpha < 1e15
                                               ? nlohmann::json(static_cast<int64_t>(a.options.alpha))
                                               : nlohmann::json(a.options.alpha)},
                            {"lora_bias", false},
                            {"lora_dropout", 0.0},
                            {"lora_ga_config", null},
                            {"megatron_config", null},
                            {"megatron_core", "megatron.core"},
                            {"modules_to_save", null},
                            {"monteclora_config", null},
                            {"peft_type", "LORA"},
                            {"qalora_group_size", 16},
                            {"r", a.options.r},
                            {"rank_pattern", nlohmann::json::object()},
                            {"revision", null},
                            {"target_modules", modules},
                            {"target_parameters", null},
                            {"task_type", "CAUSAL_LM"},
                            {"trainable_token_indices", null},
                            {"use_bdlora", null},
                            {"use_dora", false},
                            {"use_qalora", false},
                            {"use_rslora", a.options.rslora},
                            {"velora_config", null}};
  return j.dump(2) + "\n";
}

void write_peft_dir(const std::string& dir, const nn::LmConfig& c, const Adapter& a) {
  const std::vector<NamedArray> tensors = peft_tensors(c, a);
  const std::string config = peft_config_json(c, a);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory '" + dir + "': " + ec.message());
  write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomically(dir + "/adapter_config.json", config);
}

Adapter read_peft_dir(const std::string& dir, const nn::LmConfig& c) {
  const std::string cfg_path = dir + "/adapter_config.json", weights_path = dir + "/adapter_model.safetensors";
  if (!std::filesystem::exists(cfg_path))
    throw Error("cannot read '" + cfg_path + "'" + (std::filesystem::exists(dir) ? "" : ": no such directory"));
  const nlohmann::json j = data::parse_json(slurp(cfg_path), cfg_path);
  auto field = [&](const std::string& f) { return cfg_path + ": field \"" + f + "\""; };
  if (!j.is_object()) throw Error(cfg_path + " is not a JSON object");
  if (!j.contains("peft_type") || j["peft_type"] != "LORA")
    throw Error(field("peft_type") + " must be \"LORA\"" + (j.contains("peft_type") ? ", got " + j["peft_type"].dump() : ""));
  Adapter ad;
  try {
    ad.options.r = j.at("r").get<int64_t>();
    ad.options.alpha = j.contains("lora_alpha") ? j["lora_alpha"].get<double>() : 8.0;
    ad.options.rslora = j.contains("use_rslora") && !j["use_rslora"].is_null() && j["use_rslora"].get<bool>();
    if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      ad.base_model = j["base_model_name_or_path"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(cfg_path + ": r, lora_alpha or use_rslora: " + e.what());
  }
  try {
    ad.options.validate();
  } catch (const Error& e) {
    throw Error(cfg_path + ": " + e.what());
  }
  // What capstep would compute differently: refused, by field.
  auto refuse_unless = [&](const std::string& f, bool ok, const std::string& why) {
    if (j.contains(f) && !ok) throw Error(field(f) + " is " + j.at(f).dump() + ": " + why);
  };
  auto unset = [&](const std::string& f) {
    if (!j.contains(f)) return true;
    const nlohmann::json& v = j.at(f);
    return v.is_null() || v == false || (v.is_object() && v.empty()) || (v.is_array() && v.empty());
  };
  for (const char* f : {"use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern",
                        "modules_to_save", "lora_bias", "target_parameters", "trainable_token_indices",
                        "layer_replication", "exclude_modules", "use_qalora", "alora_invocation_tokens", "use_bdlora"})
    refuse_unless(f, unset(f), "capstep's LoRA has no such variant");
  refuse_unless("bias", !j.contains("bias") || j.at("bias") == "none", "capstep's LoRA trains no biases (bias \"none\")");
  if (j.contains("task_type") && !j["task_type"].is_null() && j["task_type"] != "CAUSAL_LM")
    throw Error(field("task_type") + " is " + j["task_type"].dump() + "; capstep's models are CAUSAL_LM");
  if (!j.contains("target_modules")) throw Error(field("target_modules") + " is missing");
  const nlohmann::json& tm = j["target_modules"];
  try {
  if (tm.is_string()) {
    const std::string s = tm.get<std::string>();
    ad.target_modules = {s};
    try {
      ad.targets = s == "all-linear" ? select(c, {s}, "", false) : select(c, {}, s, true);
    } catch (const std::regex_error& e) {
      throw Error(field("target_modules") + " is not a regular expression: " + e.what());
    }
  } else if (tm.is_array()) {
    for (const nlohmann::json& m : tm) {
      if (!m.is_string()) throw Error(field("target_modules") + " holds " + m.dump() + ", not a name");
      ad.target_modules.push_back(m.get<std::string>());
    }
    ad.targets = select(c, ad.target_modules, "", false);
  } else {
    throw Error(field("target_modules") + " must be a list of names or a string");
  }
  } catch (const Error& e) {
    const std::string m = e.what();
    throw Error(m.rfind(cfg_path, 0) == 0 ? m : cfg_path + ": " + m);
  }

  const SafetensorsFile f = read_safetensors(weights_path);
  const std::vector<Module> mods = modules_of(c);
  std::map<std::string, const Array*> by_key;
  for (const NamedArray& t : f.tensors) {
    std::string k = t.name;
    for (const char* m : {".lora_A.", ".lora_B."}) {   // ".lora_A.<adapter>.weight" -> ".lora_A.weight"
      const size_t at = k.find(m);
      if (at != std::string::npos && ends_with(k, ".weight")) k = k.substr(0, at + 8) + "weight";
    }
    if (!by_key.emplace(k, &t.array).second)
      throw Error(weights_path + ": tensor '" + t.name + "' is there twice (with and without the adapter's name)");
  }
  std::set<std::string> taken;
  auto get = [&](const std::string& key, const Shape& shape) {
    auto it = by_key.find(key);
    if (it == by_key.end()) throw Error(weights_path + ": no tensor '" + key + "'");
    const Array& x = *it->second;
    if (x.shape() != shape)
      throw Error(weights_path + ": tensor '" + key + "' is " + x.type().str() + ", not " + Type{DType::f32, shape}.str());
    if (!is_float(x.dtype())) throw Error(weights_path + ": tensor '" + key + "' is " + dtype_name(x.dtype()));
    taken.insert(key);
    return x.dtype() == DType::f32 ? x : x.converted(DType::f32);
  };
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  auto shape_of = [&](const std::string& w) {
    for (const nn::ParamSpec& p : ps)
      if (p.name == w) return p.type.shape;
    throw Error("no parameter " + w);
  };
  for (const Target& t : ad.targets) {
    const std::string k = "base_model.model." + module_of(c, mods, t).path;
    int64_t out = 0;
    for (const std::string& w : t.weights) out += shape_of(w)[1];
    ad.a.push_back(get(k + ".lora_A.weight", {ad.options.r, shape_of(t.weights[0])[0]}));
    ad.b.push_back(get(k + ".lora_B.weight", {out, ad.options.r}));
  }
  for (const NamedArray& t : f.tensors) {
    std::string k = t.name;
    bool known = false;
    for (const auto& [key, arr] : by_key)
      if (arr == &t.array) known = taken.count(key) > 0;
    if (!known)
      throw Error(weights_path + ": tensor '" + k + "' belongs to no module that target_modules picks in this " +
                  nn::arch_name(c.arch) + " model");
  }
  return ad;
}

}  // namespace capstep::lora
