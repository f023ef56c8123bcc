// Hugging Face directories (hf.h): safetensors weights, sharded or not,
// read and written, and a whole directory (config, weights, tokenizer) read
// and written.
#include "capstep/hf.h"

#include "capstep/data.h"
#include "data/json.h"
#include "data/read_file.h"
#include "nn/hf_internal.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace capstep::nn {

using hf_detail::config_from_json;
using hf_detail::read_foreign_tokenizer;
using hf_detail::read_if_there;

// hf_internal.h
bool hf_detail::read_if_there(const std::string& path, std::string* out) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

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
