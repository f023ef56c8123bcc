// safetensors: Arrays to a file image and back, and the file-level read/write.
// The checks on a file live in safetensors_format.cpp.
#include <cstdint>
#include <set>

#include <nlohmann/json.hpp>

#include "capstep/safetensors.h"
#include "read_file.h"

namespace capstep {

const Array* SafetensorsFile::find(std::string_view name) const {
  for (const NamedArray& t : tensors)
    if (t.name == name) return &t.array;
  return nullptr;
}

std::string serialize_safetensors(const std::vector<NamedArray>& tensors, const Metadata& metadata) {
  // ordered_json keeps the tensors in the caller's order in the header too.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedArray& t : tensors) {
    if (t.name.empty()) throw Error("safetensors: a tensor has an empty name");
    if (t.name == "__metadata__") throw Error("safetensors: '__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(t.name).second) throw Error("safetensors: tensor name '" + t.name + "' is used twice");
    const uint64_t n = t.array.bytes();
    h[t.name] = {{"dtype", safetensors_dtype_name(t.array.dtype())},
                 {"shape", t.array.shape()},
                 {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception& e) {   // e.g. a name that is not UTF-8
    throw Error(std::string("safetensors: cannot write the header: ") + e.what());
  }
  // Spaces (valid JSON whitespace) so that the data starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t hn = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((hn >> (8 * i)) & 0xff));
  out += header;
  for (const NamedArray& t : tensors) {
    const char* p = static_cast<const char*>(t.array.raw());
    if (t.array.dtype() == DType::i1) {
      // Normalise truth values to 0/1, the only bytes the reader accepts.
      for (size_t i = 0; i < t.array.bytes(); ++i) out.push_back(p[i] ? 1 : 0);
    } else if (t.array.bytes() > 0) {
      out.append(p, t.array.bytes());
    }
  }
  return out;
}

SafetensorsFile parse_safetensors(const uint8_t* bytes, size_t size) {
  SafetensorsLayout layout = parse_safetensors_layout(bytes, size);
  SafetensorsFile out;
  out.metadata = std::move(layout.metadata);
  out.tensors.reserve(layout.tensors.size());
  for (TensorEntry& e : layout.tensors) {
    Type t{e.dtype, std::move(e.shape)};
    out.tensors.push_back({std::move(e.name), Array(t, bytes + layout.data_start + e.begin)});
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedArray>& tensors, const Metadata& metadata) {
  std::string image;
  try {
    image = serialize_safetensors(tensors, metadata);
  } catch (const Error& e) {
    throw Error("cannot save '" + path + "': " + e.what());
  }
  write_file_atomically(path, image);
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string image = data::read_regular_file(path, "safetensors file", UINT64_MAX);
  try {
    return parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  } catch (const Error& e) {
    throw Error("safetensors file '" + path + "': " + e.what());
  }
}

}  // namespace capstep
