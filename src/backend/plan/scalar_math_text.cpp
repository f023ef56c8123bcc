// The <cmath> stand-in NVRTC gets beside scalar_math.h. The text of
// scalar_math.h itself (kScalarMathText) is generated from the header at
// configure time (cmake/scalar_math_text.cpp.in), so there is one definition.
#include "backend/plan/kernel_source.h"

namespace capstep::plan {

const char* const kNvrtcCmathText =
    "#pragma once\n"
    "namespace std { using ::exp; using ::log; using ::tanh; using ::sqrt; }\n";

}  // namespace capstep::plan
