// AdamW's settings and the four per-step scalars that the host update
// (src/backend/host/adamw.cpp) and with_adamw's program both take.
#include <cmath>

#include "capstep/optim.h"

namespace capstep::optim {

void AdamW::validate() const {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw Error("invalid AdamW option: " + why);
  };
  need(std::isfinite(lr) && lr > 0, "lr must be positive and finite, got " + std::to_string(lr));
  need(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got " + std::to_string(beta1));
  need(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got " + std::to_string(beta2));
  need(std::isfinite(eps) && eps > 0, "eps must be positive, got " + std::to_string(eps));
  need(std::isfinite(weight_decay) && weight_decay >= 0, "weight decay must be >= 0, got " + std::to_string(weight_decay));
}

AdamWScalars adamw_scalars(const AdamW& o, int64_t step) { return adamw_scalars(o, step, o.lr); }

AdamWScalars adamw_scalars(const AdamW& o, int64_t step, double lr) {
  if (step < 1) throw Error("AdamW step counts from 1, got " + std::to_string(step));
  const double t = static_cast<double>(step);
  return {static_cast<float>(lr), static_cast<float>(1.0 / (1.0 - std::pow(o.beta1, t))),
          static_cast<float>(1.0 / (1.0 - std::pow(o.beta2, t))), static_cast<float>(1.0 - lr * o.weight_decay)};
}

}  // namespace capstep::optim
