// The safetensors reader's validation: every check on a file image, with no
// dependency beyond ir.h's Error and DType, so that the fuzz target compiles
// this one file. Any input either parses or throws Error; nothing else.
#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capstep/safetensors.h"

namespace capstep {
namespace {

// std::map-based on purpose: ordered_json keeps members in a vector, and
// growing that vector copies each member, recursively: a deeply nested value
// followed by one more key overflowed the stack. Tensors are ordered by their
// offsets anyway (empty tensors at one offset then come by name).
using json = nlohmann::json;

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  out += ']';
  return out;
}

std::string range_text(uint64_t b, uint64_t e) {
  // Appended piecewise: g++ 12 warns falsely (-Wrestrict) on "[" + string&&.
  std::string out = "[";
  out += std::to_string(b);
  out += ", ";
  out += std::to_string(e);
  out += ']';
  return out;
}

// Text for an error message, cut short: a header may hold 100 MB strings.
std::string short_text(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 77) + "..."; }

// A JSON value for an error message. Never dump() a nested value: dump is
// recursive, and a header of 5 million '[' would overflow the stack.
std::string brief(const json& v) {
  if (v.is_array()) {
    bool flat = v.size() <= 8;
    for (const json& e : v) flat = flat && e.is_primitive();
    return flat ? short_text(v.dump()) : "an array of " + std::to_string(v.size()) + " elements";
  }
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " fields";
  return short_text(v.dump());
}

// A JSON value that must be a non-negative integer that fits in 64 bits.
uint64_t as_u64(const json& v, const std::string& what) {
  if (!v.is_number_unsigned()) fail(what + " must be a non-negative integer, not " + brief(v));
  return v.get<uint64_t>();
}

TensorEntry parse_entry(const std::string& name, const json& info) {
  const std::string where = "tensor '" + short_text(name) + "'";
  if (name.empty()) fail("a tensor has an empty name");
  if (!info.is_object()) fail(where + ": expected an object with dtype, shape and data_offsets, got " + std::string(info.type_name()));
  for (const auto& [key, _] : info.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(where + ": unknown field '" + short_text(key) + "' (expected dtype, shape, data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(where + ": missing field '" + key + "'");

  TensorEntry e;
  e.name = name;
  const json& dt = info.at("dtype");
  if (!dt.is_string()) fail(where + ": dtype must be a string, not " + brief(dt));
  try {
    e.dtype = parse_safetensors_dtype(dt.get<std::string>());
  } catch (const Error& err) {
    fail(where + ": dtype '" + short_text(dt.get<std::string>()) + "' is not supported (capstep reads F32, F64, BF16, I32 and BOOL)");
  }

  const json& shape = info.at("shape");
  if (!shape.is_array()) fail(where + ": shape must be an array, not " + brief(shape));
  // The product of the nonzero dimensions must fit in int64 even when a zero
  // dimension makes the tensor empty: Type::numel multiplies the dimensions in
  // order, and a partial product that overflows is undefined behaviour.
  constexpr uint64_t kMaxCount = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t count = 1;
  bool overflow = false, empty = false;
  for (const json& d : shape) {
    const uint64_t n = as_u64(d, where + ": each shape dimension");
    if (n > kMaxCount) fail(where + ": shape dimension " + std::to_string(n) + " is too large");
    e.shape.push_back(static_cast<int64_t>(n));
    if (n == 0) empty = true;
    else if (count > kMaxCount / n) overflow = true;
    else count *= n;
  }
  if (overflow || (!empty && count > std::numeric_limits<uint64_t>::max() / dtype_size(e.dtype)))
    fail(where + ": shape " + shape_text(e.shape) + " is too large to address");
  const uint64_t bytes = empty ? 0 : count * dtype_size(e.dtype);

  const json& off = info.at("data_offsets");
  if (!off.is_array() || off.size() != 2) fail(where + ": data_offsets must be [begin, end], not " + brief(off));
  e.begin = as_u64(off[0], where + ": data_offsets begin");
  e.end = as_u64(off[1], where + ": data_offsets end");
  if (e.end < e.begin) fail(where + ": data_offsets " + range_text(e.begin, e.end) + " end before they begin");
  if (e.end - e.begin != bytes)
    fail(where + ": dtype " + dt.get<std::string>() + " and shape " + shape_text(e.shape) + " need " + std::to_string(bytes) +
         " bytes, but data_offsets " + range_text(e.begin, e.end) + " hold " + std::to_string(e.end - e.begin));
  return e;
}

Metadata parse_metadata(const json& m) {
  if (!m.is_object()) fail("__metadata__ must be an object of strings, not " + std::string(m.type_name()));
  Metadata out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) fail("__metadata__ value of '" + short_text(key) + "' must be a string, not " + brief(value));
    out[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::i1: return "BOOL";
    case DType::bf16: return "BF16";
  }
  return "?";
}

DType parse_safetensors_dtype(std::string_view s) {
  if (s == "F32") return DType::f32;
  if (s == "F64") return DType::f64;
  if (s == "I32") return DType::i32;
  if (s == "BOOL") return DType::i1;
  if (s == "BF16") return DType::bf16;
  fail("dtype '" + std::string(s) + "' is not supported (capstep reads F32, F64, BF16, I32 and BOOL)");
}

SafetensorsLayout parse_safetensors_layout(const uint8_t* bytes, size_t size) {
  if (size < 8)
    fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length (truncated?)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];   // little-endian
  if (n > kSafetensorsMaxHeader)
    fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kSafetensorsMaxHeader) +
         " bytes (not a safetensors file, or corrupted)");
  if (n > size - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
         " bytes): truncated or corrupted");
  if (n < 2 || bytes[8] != '{') fail("header does not start with a JSON object '{'");

  const char* header = reinterpret_cast<const char*>(bytes + 8);
  // A callback sees each key of the top-level object, to catch duplicates
  // (a plain parse would keep one silently).
  std::set<std::string> keys;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(header, header + n, cb);
  } catch (const json::exception& e) {
    // nlohmann quotes the token it stopped at, which may be huge.
    const std::string what = e.what();
    fail("header is not valid JSON: " + (what.size() <= 300 ? what : what.substr(0, 297) + "..."));
  }
  if (!duplicate.empty()) fail("header names '" + short_text(duplicate) + "' twice");
  if (!h.is_object()) fail("header must be a JSON object");

  SafetensorsLayout out;
  out.data_start = 8 + n;
  const uint64_t data_size = size - out.data_start;
  for (const auto& [name, info] : h.items()) {
    if (name == "__metadata__") {
      out.metadata = parse_metadata(info);
      continue;
    }
    TensorEntry e = parse_entry(name, info);
    if (e.end > data_size)
      fail("tensor '" + short_text(name) + "': data_offsets " + range_text(e.begin, e.end) + " run past the end of the data (" +
           std::to_string(data_size) + " bytes): file truncated?");
    out.tensors.push_back(std::move(e));
  }

  // Sorted by offset, the tensors must tile the data exactly.
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t covered = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry& e : out.tensors) {
    if (e.begin < covered)
      fail("tensor '" + short_text(e.name) + "' data " + range_text(e.begin, e.end) + " overlaps tensor '" +
           short_text(prev->name) + "' " +
           range_text(prev->begin, prev->end));
    if (e.begin > covered)
      fail("data bytes " + range_text(covered, e.begin) + " belong to no tensor (gap before tensor '" + short_text(e.name) + "')");
    covered = e.end;
    if (e.end > e.begin) prev = &e;
  }
  if (covered != data_size)
    fail("data section is " + std::to_string(data_size) + " bytes but the tensors cover " + std::to_string(covered) +
         " (trailing bytes: corrupted or wrongly concatenated)");

  // BOOL must be 0 or 1: anything else is a corrupted byte, not a truth value.
  for (const TensorEntry& e : out.tensors) {
    if (e.dtype != DType::i1) continue;
    const uint8_t* p = bytes + out.data_start + e.begin;
    for (uint64_t i = 0; i < e.end - e.begin; ++i)
      if (p[i] > 1)
        fail("tensor '" + short_text(e.name) + "' (BOOL) has byte value " + std::to_string(p[i]) + " at element " + std::to_string(i) +
             "; BOOL bytes must be 0 or 1");
  }
  return out;
}

}  // namespace capstep
