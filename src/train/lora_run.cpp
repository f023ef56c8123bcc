// LoRA in the training loop and its checkpoints (train.h's Options::Lora,
// kLoraMetadataKey): the run's adapter options, their metadata, and the
// adapter read back from a checkpoint.
#include <nlohmann/json.hpp>

#include "lora_run.h"

namespace capstep::train {

std::string lora_metadata(const LoraMeta& m) {
  nlohmann::json targets = nlohmann::json::array();
  for (const lora::Target& t : m.targets) targets.push_back({{"name", t.name}, {"weights", t.weights}});
  return nlohmann::json{{"r", m.options.r},
                        {"alpha", m.options.alpha},
                        {"rslora", m.options.rslora},
                        {"base_precision", m.options.base_bf16 ? "bf16" : "f32"},
                        {"target_modules", m.target_modules},
                        {"targets", targets}}
      .dump();
}

LoraMeta parse_lora_metadata(const std::string& text) {
  LoraMeta m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    m.options.r = j.at("r").get<int64_t>();
    m.options.alpha = j.at("alpha").get<double>();
    m.options.rslora = j.at("rslora").get<bool>();
    const std::string p = j.at("base_precision").get<std::string>();
    if (p != "f32" && p != "bf16") throw Error("the checkpoint's \"lora\" metadata has base_precision '" + p + "'");
    m.options.base_bf16 = p == "bf16";
    m.target_modules = j.at("target_modules").get<std::vector<std::string>>();
    for (const nlohmann::json& t : j.at("targets"))
      m.targets.push_back({t.at("name").get<std::string>(), t.at("weights").get<std::vector<std::string>>()});
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("the checkpoint's \"lora\" metadata is malformed: ") + e.what());
  }
  try {
    m.options.validate();
  } catch (const Error& e) {
    throw Error(std::string("the checkpoint's \"lora\" metadata: ") + e.what());
  }
  if (m.targets.empty()) throw Error("the checkpoint's \"lora\" metadata has no targets");
  return m;
}

std::vector<ParamSpec> lora_specs(const nn::LmConfig& c, const LoraMeta& m) {
  std::vector<ParamSpec> out;
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  auto type_of = [&](const std::string& w) -> const Type& {
    for (const nn::ParamSpec& p : ps)
      if (p.name == w) return p.type;
    throw Error("LoRA target weight '" + w + "' is not a parameter of the model");
  };
  for (const lora::Target& t : m.targets) {
    if (t.weights.empty()) throw Error("LoRA target '" + t.name + "' has no weights");
    int64_t in = 0, outs = 0;
    for (const std::string& w : t.weights) {
      const Type& ty = type_of(w);
      if (ty.shape.size() != 2) throw Error("LoRA target weight '" + w + "' is not a matrix");
      in = ty.shape[0];
      outs += ty.shape[1];
    }
    out.push_back({lora::a_name(t.name), Type{DType::f32, {m.options.r, in}}});
    out.push_back({lora::b_name(t.name), Type{DType::f32, {outs, m.options.r}}});
  }
  return out;
}

std::vector<bool> lora_expected(const TrainMeta& m, std::vector<ParamSpec>& expected) {
  std::vector<bool> widen(expected.size(), false);
  if (!m.lora) return widen;
  for (size_t j = 0; j < expected.size(); ++j)
    for (const lora::Target& t : m.lora->targets)
      for (const std::string& w : t.weights)
        if (m.lora->options.base_bf16 && w == expected[j].name) {
          expected[j].type.dtype = DType::bf16;
          widen[j] = true;
        }
  for (ParamSpec& s : lora_specs(m.model, *m.lora)) expected.push_back(std::move(s));
  return widen;
}

lora::Adapter checkpoint_adapter(const Checkpoint& c, const TrainMeta& m) {
  if (!m.lora) throw Error("the checkpoint is not a LoRA run's (no \"lora\" metadata)");
  lora::Adapter ad;
  ad.options = m.lora->options;
  ad.options.base_bf16 = false;
  ad.targets = m.lora->targets;
  ad.target_modules = m.lora->target_modules;
  for (const lora::Target& t : ad.targets) {
    const Array* a = c.param(lora::a_name(t.name));
    const Array* b = c.param(lora::b_name(t.name));
    if (!a || !b) throw Error("the checkpoint lacks the LoRA pair of target '" + t.name + "'");
    ad.a.push_back(*a);
    ad.b.push_back(*b);
  }
  return ad;
}

std::vector<std::string> default_lora_targets(const nn::LmConfig& c) {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.
  if (c.arch == nn::Arch::gpt2) return {"c_attn"};
  if (c.arch == nn::Arch::llama) return {"q_proj", "v_proj"};
  throw Error("LoRA: the seed architecture has no transformers module names to target; train with --arch gpt2 or llama");
}

LoraRun make_lora_run(const Options& o, const Program& loss) {
  LoraRun r;
  if (!o.lora.on()) return r;
  if (!o.train_patterns.empty() || !o.freeze_patterns.empty())
    throw Error("LoRA trains the adapters only, every base parameter frozen: give no --train/--freeze with it");
  r.on = true;
  if (!o.lora.from.empty()) {
    lora::Adapter ad = lora::read_peft_dir(o.lora.from, o.model);
    r.meta.options = ad.options;
    r.meta.options.base_bf16 = o.lora.base_bf16;
    r.meta.target_modules = ad.target_modules;
    r.meta.targets = ad.targets;
    r.start = ad.inputs();
  } else {
    r.meta.options.r = o.lora.rank;
    r.meta.options.alpha = o.lora.alpha;
    r.meta.options.rslora = o.lora.rslora;
    r.meta.options.base_bf16 = o.lora.base_bf16;
    r.meta.options.validate();
    r.meta.target_modules = o.lora.targets.empty() ? default_lora_targets(o.model) : o.lora.targets;
    r.meta.targets = lora::targets_for(o.model, r.meta.target_modules);
    if (o.resume_path.empty()) r.start = lora::init_adapter(loss, r.meta.targets, r.meta.options, o.seed).inputs();
  }
  for (const lora::Target& t : r.meta.targets)
    for (const std::string& w : t.weights) r.base_targets.push_back(w);
  return r;
}

}  // namespace capstep::train
