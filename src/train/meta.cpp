// The training metadata a checkpoint carries beside the model config, so a
// resumed run or a sampler knows the model and what it was trained with.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "capstep/data.h"
#include "capstep/train.h"
#include "lora_run.h"

namespace capstep::train {

std::string train_metadata(const Options& o, const std::string& text, const std::string& text_hash,
                           const TokensMeta* tokens) {
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
                      {"precision", optim::precision_name(o.precision)},
                      {"fused_attention", o.fused_attention},
                      {"val_fraction", o.val_fraction},
                      {"tokenizer", o.tokenizer},
                      {"grad_accum", o.grad_accum}};
  if (!text_hash.empty()) j["text_hash"] = text_hash;
  if (!o.sft_path.empty())
    j["sft"] = {{"path", absolute_path(o.sft_path)}, {"hash", file_fingerprint(o.sft_path)},
                {"chat_template", o.chat_template}, {"mask_prompt", o.mask_prompt}, {"pack", o.sft_pack}};
  if (tokens) {
    j["tokens"] = tokens->tokens;
    j["tokens_hash"] = tokens->tokens_hash;
    j["tokens_format"] = tokens->format;
    if (!tokens->val_tokens.empty()) {
      j["val_tokens"] = tokens->val_tokens;
      j["val_tokens_hash"] = tokens->val_tokens_hash;
    }
  }
  return j.dump();
}

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read text file '" + path + "'");
  uint64_t h = 14695981039346656037ull;   // FNV-1a 64
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i)
      h = (h ^ static_cast<unsigned char>(buf[static_cast<size_t>(i)])) * 1099511628211ull;
  }
  if (in.bad()) throw Error("cannot read text file '" + path + "'");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

TrainMeta parse_meta(const Checkpoint& c) {
  TrainMeta m;
  m.model = nn::LmConfig::from_json(c.model_config);   // Error naming the missing key
  m.model.validate();
  m.frozen = c.frozen;
  if (auto b = c.extra.find(kBestValLossKey); b != c.extra.end()) {
    char* end = nullptr;
    m.best_val_loss = std::strtod(b->second.c_str(), &end);
    if (b->second.empty() || *end != 0) throw Error("the checkpoint's \"best_val_loss\" is not a number: " + b->second);
  }
  if (auto t = c.extra.find(kTokenizerModelKey); t != c.extra.end()) {
    try {
      m.tokenizer_model = base64_decode(t->second);
    } catch (const Error& e) {
      throw Error(std::string("the checkpoint's \"tokenizer_model\" is malformed: ") + e.what());
    }
  }
  if (auto l = c.extra.find(kLoraMetadataKey); l != c.extra.end()) m.lora = parse_lora_metadata(l->second);
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
    // Keys newer than the schedule's: each optional, so older checkpoints load.
    if (t.contains("text_hash")) m.text_hash = t.at("text_hash").get<std::string>();
    if (t.contains("precision")) {
      const std::string p = t.at("precision").get<std::string>();
      if (p != "f32" && p != "bf16") throw Error("the checkpoint's \"train\" metadata has an unknown precision: " + p);
      m.precision = optim::parse_precision(p);
    }
    if (t.contains("tokens")) {
      TokensMeta k;
      k.tokens = t.at("tokens").get<std::string>();
      k.tokens_hash = t.at("tokens_hash").get<std::string>();
      k.format = t.at("tokens_format").get<std::string>();
      if (t.contains("val_tokens")) {
        k.val_tokens = t.at("val_tokens").get<std::string>();
        k.val_tokens_hash = t.at("val_tokens_hash").get<std::string>();
      }
      m.tokens = k;
    }
    if (t.contains("sft")) {
      const nlohmann::json& f = t.at("sft");
      m.sft = SftMeta{f.at("path").get<std::string>(), f.at("hash").get<std::string>(),
                      f.at("chat_template").get<std::string>(), f.at("mask_prompt").get<bool>(), f.at("pack").get<bool>()};
    }
    if (t.contains("fused_attention")) m.fused_attention = t.at("fused_attention").get<bool>();
    if (t.contains("val_fraction")) {
      const double f = t.at("val_fraction").get<double>();
      if (!(f >= 0 && f < 1))
        throw Error("the checkpoint's \"train\" metadata has a val_fraction out of [0, 1): " + it->second);
      m.val_fraction = f;
    }
    if (t.contains("grad_accum")) {
      const int64_t n = t.at("grad_accum").get<int64_t>();
      if (n < 1) throw Error("the checkpoint's \"train\" metadata has a grad_accum below 1: " + it->second);
      m.grad_accum = n;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("the checkpoint's \"train\" metadata is malformed: ") + e.what());
  }
  m.adamw.validate();
  m.has_train = true;
  return m;
}

data::Tokenizer checkpoint_tokenizer(const TrainMeta& m) {
  try {
    return data::Tokenizer::from_model(m.tokenizer, m.tokenizer_model);
  } catch (const Error& e) {
    throw Error(std::string("the checkpoint's tokenizer: ") + e.what());
  }
}

std::string base64_encode(const std::string& bytes) {
  static const char* const k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[v & 63] : '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) throw Error("base64 of " + std::to_string(text.size()) + " characters, not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const bool last = i + 4 == text.size();
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int d = value(c);
      if (d < 0 || pad) throw Error("not base64: character " + std::to_string(i + k));
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xFF);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

Checkpoint load_model_checkpoint(const std::string& path, TrainMeta* meta) {
  // The first read finds the model; the second checks every tensor against it
  // and puts the parameters in the programs' order.
  const TrainMeta m = parse_meta(load_checkpoint(path));
  std::vector<ParamSpec> expected;
  for (const nn::ParamSpec& p : nn::lm_parameters(m.model)) expected.push_back({p.name, p.type});
  const std::vector<bool> widen = lora_expected(m, expected);   // a LoRA run's adapters (lora_run.h)
  Checkpoint c = load_checkpoint(path, expected);
  for (size_t j = 0; j < widen.size(); ++j)
    if (widen[j]) c.params[j].array = c.params[j].array.converted(DType::f32);
  if (meta) *meta = parse_meta(c);   // of the file that was read
  return c;
}

}  // namespace capstep::train
