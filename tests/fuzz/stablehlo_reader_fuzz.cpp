// libFuzzer target for the StableHLO reader (src/export/stablehlo_reader.cpp):
// any bytes either read as a Program or throw capstep::Error -- never crash,
// hang or trip a sanitizer. What reads must also export, and the export must
// read back to the same text (the writer and reader agree on everything the
// reader accepts). Built and run by scripts/fuzz-stablehlo.
#include <cstddef>
#include <cstdint>
#include <string>

#include "capstep/stablehlo.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  capstep::Program p;
  try {
    p = capstep::from_stablehlo(text);
  } catch (const capstep::Error&) {
    return 0;  // the expected outcome for malformed input
  }
  // Accepted: it must export, and that export must be a fixed point. An
  // exception escaping here is a finding (libFuzzer reports it as a crash).
  std::string once = capstep::to_stablehlo(p);
  std::string twice = capstep::to_stablehlo(capstep::from_stablehlo(once));
  if (once != twice) __builtin_trap();
  return 0;
}
