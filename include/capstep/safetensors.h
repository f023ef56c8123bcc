// The safetensors format (https://github.com/huggingface/safetensors), so that
// PyTorch and JAX users can read capstep's checkpoints:
//
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    a JSON object: "name": {"dtype": "F32", "shape": [2,3],
//              "data_offsets": [begin, end]} per tensor, and an optional
//              "__metadata__": {string: string}; capstep pads it with spaces
//              to a multiple of 8 so that the data is aligned
//   the data   row-major little-endian tensors; offsets are relative to the
//              first data byte, and the tensors cover it exactly, without gaps
//              or overlaps
//
// dtypes: F32, F64, I32, BOOL (capstep's f32, f64, i32, i1). The reader checks
// everything and throws capstep::Error with a message; it never crashes on any
// input (a libFuzzer target, tests/fuzz/safetensors_fuzz.cpp, holds it to that).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "capstep/array.h"
#include "capstep/files.h"
#include "capstep/ir.h"

namespace capstep {

struct NamedArray {
  std::string name;
  Array array;
};
using Metadata = std::map<std::string, std::string>;

// The largest header the reader accepts (the reference reader's limit too).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// One tensor as the header describes it; begin/end are relative to data_start.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A validated file: entries sorted by begin offset (the order they were written).
struct SafetensorsLayout {
  std::vector<TensorEntry> tensors;
  Metadata metadata;
  uint64_t data_start = 0;                  // 8 + header length
};

// Validates the whole file image (header and data; BOOL bytes must be 0 or 1)
// without copying any tensor. Needs nothing but ir.h's Error and DType, so the
// fuzz target builds from this one source file (src/data/safetensors_format.cpp).
SafetensorsLayout parse_safetensors_layout(const uint8_t* bytes, size_t size);

// The safetensors name of a dtype ("F32", ...) and back; the latter throws
// Error for any other name, saying which ones are supported.
const char* safetensors_dtype_name(DType d);
DType parse_safetensors_dtype(std::string_view s);

// The file image for these tensors (in this order) and metadata. Throws Error
// for an empty, duplicate or reserved ("__metadata__") name.
std::string serialize_safetensors(const std::vector<NamedArray>& tensors, const Metadata& metadata);

struct SafetensorsFile {
  std::vector<NamedArray> tensors;          // in file (data) order
  Metadata metadata;
  const Array* find(std::string_view name) const;   // nullptr if absent
};

// Parses a file image already in memory (used by the fuzz target and tests).
SafetensorsFile parse_safetensors(const uint8_t* bytes, size_t size);

// Atomic: writes a temporary file in the same directory, fsyncs it, renames it
// over `path` and fsyncs the directory. If anything fails (or the process dies)
// the previous file at `path` is untouched. Throws Error naming the path and
// the system's reason.
void write_safetensors(const std::string& path, const std::vector<NamedArray>& tensors,
                       const Metadata& metadata = {});
// Throws Error naming the path and what is wrong with the file.
SafetensorsFile read_safetensors(const std::string& path);

// write_file_atomically, check_writable: capstep/files.h.

}  // namespace capstep
