// Checkpoints on top of safetensors (layout documented in checkpoint.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "capstep/checkpoint.h"
#include "capstep/version.h"

namespace capstep {
namespace {

constexpr const char* kFormat = "checkpoint-1";
constexpr const char* kChecksumKey = "capstep.data_fnv1a64";
constexpr const char* kGroups[3] = {"param/", "adam_m/", "adam_v/"};

bool json_ok(const std::string& text) { return nlohmann::json::accept(text); }

// Index of the first NaN or infinity, or -1.
int64_t first_non_finite(const Array& a) {
  if (a.dtype() == DType::f32) {
    const float* p = a.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i)
      if (!std::isfinite(p[i])) return i;
  } else if (a.dtype() == DType::f64) {
    const double* p = a.data<double>();
    for (int64_t i = 0; i < a.numel(); ++i)
      if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

// FNV-1a (64 bits) over the data section, in file order: any flipped byte of a
// tensor shows, where a plausible but wrong weight would otherwise load.
// BOOL bytes are hashed as written (0 or 1).
void hash_into(uint64_t& h, const Array& a) {
  const unsigned char* p = static_cast<const unsigned char*>(a.raw());
  const bool truth = a.dtype() == DType::i1;
  for (size_t i = 0; i < a.bytes(); ++i) {
    h ^= truth ? (p[i] ? 1u : 0u) : p[i];
    h *= 0x100000001b3ULL;
  }
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t parse_u64(const Metadata& m, const std::string& key, const std::string& where) {
  auto it = m.find(key);
  if (it == m.end()) throw Error(where + ": metadata lacks '" + key + "'");
  const std::string& s = it->second;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw Error(where + ": metadata '" + key + "' is '" + s + "', not a non-negative integer");
  return v;
}

bool is_frozen(const Checkpoint& c, const std::string& name) {
  return std::find(c.frozen.begin(), c.frozen.end(), name) != c.frozen.end();
}

void check_moments(const Checkpoint& c, const std::string& where) {
  const std::vector<NamedArray>* moments[2] = {&c.adam_m, &c.adam_v};
  for (const std::string& f : c.frozen) {
    if (!c.param(f)) throw Error(where + ": frozen parameter '" + f + "' has no tensor 'param/" + f + "'");
    if (f.find(',') != std::string::npos) throw Error(where + ": frozen parameter '" + f + "' has a comma in its name");
    if (std::count(c.frozen.begin(), c.frozen.end(), f) > 1) throw Error(where + ": parameter '" + f + "' frozen twice");
  }
  for (int g = 0; g < 2; ++g) {
    const std::vector<NamedArray>& m = *moments[g];
    const char* label = kGroups[g + 1];
    for (const NamedArray& t : m)
      if (is_frozen(c, t.name))
        throw Error(where + ": frozen parameter '" + t.name + "' has a tensor '" + label + t.name + "'");
    // Name the first parameter without its moment: more telling than a count.
    for (size_t i = 0; i < c.params.size(); ++i) {
      const NamedArray& p = c.params[i];
      if (is_frozen(c, p.name)) continue;
      const NamedArray* match = i < m.size() && m[i].name == p.name ? &m[i] : nullptr;
      for (size_t j = 0; !match && j < m.size(); ++j)
        if (m[j].name == p.name) match = &m[j];
      if (!match) throw Error(where + ": parameter '" + p.name + "' has no tensor '" + label + p.name + "'");
      if (match->array.type() != p.array.type())
        throw Error(where + ": tensor '" + std::string(label) + p.name + "' is " + match->array.type().str() +
                    " but 'param/" + p.name + "' is " + p.array.type().str());
    }
    if (m.size() + c.frozen.size() != c.params.size())
      throw Error(where + ": " + std::to_string(c.params.size() - c.frozen.size()) + (c.frozen.empty() ? "" : " trained") + " parameters but " + std::to_string(m.size()) + " " +
                  label + " moments (a moment without a parameter, or a name used twice)");
  }
}

}  // namespace

const Array* Checkpoint::param(std::string_view name) const {
  for (const NamedArray& p : params)
    if (p.name == name) return &p.array;
  return nullptr;
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  const std::string where = "cannot save checkpoint '" + path + "'";
  check_moments(c, where);
  if (!json_ok(c.model_config)) throw Error(where + ": model_config is not valid JSON: " + c.model_config);
  const std::vector<NamedArray>* groups[3] = {&c.params, &c.adam_m, &c.adam_v};
  std::vector<NamedArray> tensors;
  tensors.reserve(3 * c.params.size());
  uint64_t hash = kFnvBasis;
  for (int g = 0; g < 3; ++g)
    for (const NamedArray& t : *groups[g]) {
      const int64_t bad = first_non_finite(t.array);
      if (bad >= 0)
        throw Error(where + ": tensor '" + kGroups[g] + t.name + "' element " + std::to_string(bad) + " is " +
                    std::to_string(t.array.get(bad)) + "; refusing to overwrite the last good checkpoint");
      tensors.push_back({kGroups[g] + t.name, t.array});
      hash_into(hash, t.array);   // the data section is the tensors in this order
    }
  Metadata meta{{"capstep.format", kFormat},
                {"capstep.version", CAPSTEP_VERSION},
                {"capstep.step", std::to_string(c.step)},
                {"capstep.data_position", std::to_string(c.data_position)},
                {"capstep.model_config", c.model_config},
                {kChecksumKey, hex64(hash)}};
  if (!c.frozen.empty()) {
    std::string list;
    for (const std::string& f : c.frozen) list += (list.empty() ? "" : ",") + f;
    meta["capstep.frozen"] = list;
  }
  for (const auto& [key, value] : c.extra) {
    if (key.rfind("capstep.", 0) == 0)
      throw Error(where + ": extra metadata key '" + key + "' uses the reserved prefix 'capstep.'");
    meta[key] = value;
  }
  write_safetensors(path, tensors, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::string where = "checkpoint '" + path + "'";
  SafetensorsFile f = read_safetensors(path);
  auto format = f.metadata.find("capstep.format");
  if (format == f.metadata.end())
    throw Error(where + " is a safetensors file but not a capstep checkpoint (no 'capstep.format' metadata)");
  if (format->second != kFormat)
    throw Error(where + " has format '" + format->second + "'; this capstep reads '" + kFormat + "'");

  Checkpoint c;
  c.step = parse_u64(f.metadata, "capstep.step", where);
  c.data_position = parse_u64(f.metadata, "capstep.data_position", where);
  auto version = f.metadata.find("capstep.version");
  c.version = version == f.metadata.end() ? "" : version->second;
  auto config = f.metadata.find("capstep.model_config");
  if (config == f.metadata.end()) throw Error(where + ": metadata lacks 'capstep.model_config'");
  if (!json_ok(config->second)) throw Error(where + ": metadata 'capstep.model_config' is not valid JSON");
  c.model_config = config->second;
  for (const auto& [key, value] : f.metadata)
    if (key.rfind("capstep.", 0) != 0) c.extra[key] = value;
  if (auto frozen = f.metadata.find("capstep.frozen"); frozen != f.metadata.end())
    for (size_t a = 0; a <= frozen->second.size();) {
      const size_t b = std::min(frozen->second.find(',', a), frozen->second.size());
      c.frozen.push_back(frozen->second.substr(a, b - a));
      a = b + 1;
    }

  // The data as written (checkpoints of other writers may lack the checksum),
  // and finite: save never writes a NaN or an infinity, so one is corruption.
  if (auto sum = f.metadata.find(kChecksumKey); sum != f.metadata.end()) {
    uint64_t hash = kFnvBasis;
    for (const NamedArray& t : f.tensors) hash_into(hash, t.array);   // file order
    if (hex64(hash) != sum->second)
      throw Error(where + " is corrupted: its tensor data hashes to " + hex64(hash) + " but was saved as " + sum->second +
                  " ('" + kChecksumKey + "')");
  }
  for (const NamedArray& t : f.tensors)
    if (const int64_t bad = first_non_finite(t.array); bad >= 0)
      throw Error(where + " is corrupted: tensor '" + t.name + "' element " + std::to_string(bad) + " is " +
                  std::to_string(t.array.get(bad)) + ", which a checkpoint never holds");

  std::vector<NamedArray>* groups[3] = {&c.params, &c.adam_m, &c.adam_v};
  for (NamedArray& t : f.tensors) {
    int g = 0;
    while (g < 3 && t.name.rfind(kGroups[g], 0) != 0) ++g;
    if (g == 3) throw Error(where + " has tensor '" + t.name + "', which is not param/, adam_m/ or adam_v/");
    std::string name = t.name.substr(std::string(kGroups[g]).size());
    if (name.empty()) throw Error(where + " has tensor '" + t.name + "' with an empty parameter name");
    groups[g]->push_back({std::move(name), std::move(t.array)});
  }
  // Every moment must belong to a parameter, and every parameter have both.
  std::set<std::string> names;
  for (const NamedArray& p : c.params) names.insert(p.name);
  for (int g = 1; g < 3; ++g)
    for (const NamedArray& m : *groups[g])
      if (!names.count(m.name))
        throw Error(where + " has tensor '" + kGroups[g] + m.name + "' but no parameter 'param/" + m.name + "'");
  check_moments(c, where);
  return c;
}

Checkpoint load_checkpoint(const std::string& path, const std::vector<ParamSpec>& expected) {
  Checkpoint c = load_checkpoint(path);
  const std::string where = "checkpoint '" + path + "'";
  std::map<std::string, const ParamSpec*> want;
  for (const ParamSpec& s : expected)
    if (!want.emplace(s.name, &s).second) throw Error("load_checkpoint: the model lists parameter '" + s.name + "' twice");
  // Types first, for tensors on both sides: the most telling message.
  for (const NamedArray& p : c.params) {
    auto it = want.find(p.name);
    if (it == want.end())
      throw Error(where + " has tensor 'param/" + p.name + "' (" + p.array.type().str() +
                  ") that the model does not have: a checkpoint of a different model?");
    if (p.array.type() != it->second->type)
      throw Error(where + ": tensor 'param/" + p.name + "' is " + p.array.type().str() + " but the model expects " +
                  it->second->type.str());
  }
  // Moments already match their parameter (load_checkpoint checked it).
  std::vector<NamedArray> groups[3];
  for (const ParamSpec& s : expected) {
    std::vector<NamedArray>* from[3] = {&c.params, &c.adam_m, &c.adam_v};
    for (int g = 0; g < (is_frozen(c, s.name) ? 1 : 3); ++g) {
      auto it = std::find_if(from[g]->begin(), from[g]->end(), [&](const NamedArray& t) { return t.name == s.name; });
      if (it == from[g]->end())
        throw Error(where + " lacks tensor '" + kGroups[g] + s.name + "' (" + s.type.str() + ") that the model expects");
      groups[g].push_back(std::move(*it));
    }
  }
  c.params = std::move(groups[0]);
  c.adam_m = std::move(groups[1]);
  c.adam_v = std::move(groups[2]);
  return c;
}

}  // namespace capstep
