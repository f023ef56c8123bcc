// Training checkpoints: parameters, both AdamW moments, the step count and the
// data position, in one safetensors file that PyTorch and JAX users can read.
//
// Tensors:   "param/<name>", "adam_m/<name>", "adam_v/<name>"  (same names)
// Metadata:  "capstep.format"        "checkpoint-1"
//            "capstep.version"       CAPSTEP_VERSION of the writer
//            "capstep.step"          decimal uint64: optimizer steps taken
//            "capstep.data_position" decimal uint64: BatchStream::position()
//            "capstep.model_config"  JSON text describing the model
//            "capstep.data_fnv1a64"  16 hex digits: FNV-1a 64 of the data section,
//                                    checked on load when present (corruption)
//            "capstep.frozen"        present when some parameters were frozen:
//                                    their names, comma-separated (they have
//                                    no adam_m/ adam_v/ tensors)
//            any other key           Checkpoint::extra (the trainer's own: seed,
//                                    schedule, ...); keys "capstep.*" are reserved
//
// Saving is atomic (see write_safetensors): a crash, a full disk or a kill
// during a save leaves the previous checkpoint file as it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/ir.h"
#include "capstep/safetensors.h"
#include "capstep/version.h"   // CAPSTEP_VERSION

namespace capstep {

struct Checkpoint {
  std::vector<NamedArray> params;
  std::vector<NamedArray> adam_m;           // same names and types as params, but for the frozen ones
  std::vector<NamedArray> adam_v;
  // Parameters that do not train (train::Options::freeze): no moments.
  std::vector<std::string> frozen;
  uint64_t step = 0;
  uint64_t data_position = 0;
  std::string model_config = "{}";          // JSON text
  std::string version;                      // filled by save; read by load
  Metadata extra;                           // the trainer's own string pairs

  const Array* param(std::string_view name) const;
};

// What the model expects: each parameter's name and type.
struct ParamSpec {
  std::string name;
  Type type;
};

// Throws Error (and leaves any previous file untouched) if m or v does not
// match params name for name and type (the frozen ones excepted, which must
// be parameters without moments), the model config is not valid JSON, or
// any value is NaN or infinite: a diverged run must not overwrite the last
// good checkpoint.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// Reads and validates a checkpoint (file format, metadata, the data's
// checksum, every value finite, moments matching parameters). Parameters come
// in file order.
Checkpoint load_checkpoint(const std::string& path);

// As above, and checks the tensors against the model: a missing or extra
// tensor, or a type mismatch, is an Error naming the tensor and both types.
// Parameters come in the order of `expected`.
Checkpoint load_checkpoint(const std::string& path, const std::vector<ParamSpec>& expected);

}  // namespace capstep
