// libFuzzer target for the safetensors reader: any input must either parse or
// throw capstep::Error. Anything else (a crash, a sanitizer report, another
// exception escaping) is a bug. Built and run by scripts/fuzz-safetensors.
#include <cstddef>
#include <cstdint>

#include "capstep/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const capstep::SafetensorsLayout layout = capstep::parse_safetensors_layout(data, size);
    // Read every byte each accepted tensor claims: AddressSanitizer then proves
    // the validated offsets stay inside the input.
    uint64_t sum = 0, covered = 0;
    for (const capstep::TensorEntry& t : layout.tensors) {
      // Type::numel multiplies the dimensions in order as int64: an accepted
      // shape must not overflow there, even when a later dimension is 0.
      int64_t numel = 1;
      for (int64_t d : t.shape)
        if (__builtin_mul_overflow(numel, d, &numel)) __builtin_trap();
      for (uint64_t i = t.begin; i < t.end; ++i) sum += data[layout.data_start + i];
      covered += t.end - t.begin;
    }
    // Accepted tensors tile the data exactly.
    if (layout.data_start + covered != size) __builtin_trap();
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const capstep::Error&) {
    // A rejected input: the expected outcome for almost everything.
  }
  return 0;
}
