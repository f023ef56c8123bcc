// The held-out split of a token stream (include/capstep/data.h).
#include <cmath>
#include <string>

#include "capstep/data.h"

namespace capstep::data {

size_t split_point(size_t n, double val_fraction) {
  if (!std::isfinite(val_fraction) || val_fraction < 0 || val_fraction >= 1)
    throw Error("the validation fraction must be in [0, 1), got " + std::to_string(val_fraction));
  return n - static_cast<size_t>(std::floor(static_cast<double>(n) * val_fraction));
}

TokenSplit split_tokens(const std::vector<int32_t>& tokens, double val_fraction) {
  const size_t cut = split_point(tokens.size(), val_fraction);
  TokenSplit s;
  s.train.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(cut));
  s.val.assign(tokens.begin() + static_cast<std::ptrdiff_t>(cut), tokens.end());
  return s;
}

}  // namespace capstep::data
