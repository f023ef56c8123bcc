// The training metadata a checkpoint carries beside the model config, so a
// resumed run or a sampler knows the model and what it was trained with.
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "capstep/data.h"
#include "capstep/train.h"

namespace capstep::train {

std::string train_metadata(const Options& o, const std::string& text) {
  const optim::AdamW& a = o.adamw;
  nlohmann::json j = {{"seed", o.seed},
                      {"lr", a.lr},
                      {"beta1", a.beta1},
                      {"beta2", a.beta2},
                      {"eps", a.eps},
                      {"weight_decay", a.weight_decay},
                      {"text", text},
                      {"schedule", schedule_name(o.schedule.kind)},
                      {"warmup_steps", o.schedule.warmup_steps},
                      {"min_lr", o.schedule.min_lr},
                      {"steps", o.steps},
                      {"clip_grad_norm", o.clip_grad_norm},
                      {"tokenizer", o.tokenizer}};
  return j.dump();
}

TrainMeta parse_meta(const Checkpoint& c) {
  TrainMeta m;
  m.model = nn::LmConfig::from_json(c.model_config);   // Error naming the missing key
  m.model.validate();
  if (auto b = c.extra.find(kBestValLossKey); b != c.extra.end()) {
    char* end = nullptr;
    m.best_val_loss = std::strtod(b->second.c_str(), &end);
    if (b->second.empty() || *end != 0) throw Error("the checkpoint's \"best_val_loss\" is not a number: " + b->second);
  }
  auto it = c.extra.find(kTrainMetadataKey);
  if (it == c.extra.end()) return m;
  try {
    const nlohmann::json t = nlohmann::json::parse(it->second);
    m.seed = t.at("seed").get<uint64_t>();
    m.adamw.lr = t.at("lr").get<double>();
    m.adamw.beta1 = t.at("beta1").get<double>();
    m.adamw.beta2 = t.at("beta2").get<double>();
    m.adamw.eps = t.at("eps").get<double>();
    m.adamw.weight_decay = t.at("weight_decay").get<double>();
    m.text = t.at("text").get<std::string>();
    if (t.contains("tokenizer")) m.tokenizer = t.at("tokenizer").get<std::string>();
    const int64_t vocab = data::Tokenizer::parse(m.tokenizer).vocab();   // Error naming an unknown one
    if (vocab != m.model.vocab)
      throw Error("the checkpoint's model has a vocabulary of " + std::to_string(m.model.vocab) + " but its " +
                  m.tokenizer + " tokenizer has " + std::to_string(vocab) + " symbols");
    if (t.contains("schedule")) {
      m.schedule.kind = parse_schedule(t.at("schedule").get<std::string>());
      m.schedule.warmup_steps = t.at("warmup_steps").get<int64_t>();
      m.schedule.min_lr = t.at("min_lr").get<double>();
      m.steps = t.at("steps").get<int64_t>();
      m.clip_grad_norm = t.at("clip_grad_norm").get<double>();
      if (m.schedule.warmup_steps < 0 || m.steps < 1 || !(m.schedule.min_lr >= 0) || !(m.clip_grad_norm >= 0))
        throw Error("the checkpoint's \"train\" metadata has a schedule out of range: " + it->second);
      m.has_schedule = true;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("the checkpoint's \"train\" metadata is malformed: ") + e.what());
  }
  m.adamw.validate();
  m.has_train = true;
  return m;
}

Checkpoint load_model_checkpoint(const std::string& path, TrainMeta* meta) {
  // The first read finds the model; the second checks every tensor against it
  // and puts the parameters in the programs' order.
  const TrainMeta m = parse_meta(load_checkpoint(path));
  std::vector<ParamSpec> expected;
  for (const nn::ParamSpec& p : nn::lm_parameters(m.model)) expected.push_back({p.name, p.type});
  Checkpoint c = load_checkpoint(path, expected);
  if (meta) *meta = parse_meta(c);   // of the file that was read
  return c;
}

}  // namespace capstep::train
