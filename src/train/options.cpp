// Lane names and the range checks of train::Options and SampleOptions.
#include <cmath>
#include <string>

#include "capstep/train.h"

namespace capstep::train {

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::host: return "host";
    case Lane::gpu: return "gpu";
    case Lane::gpu_fused: return "gpu-fused";
  }
  return "?";
}

Lane parse_lane(const std::string& s) {
  for (Lane l : {Lane::host, Lane::gpu, Lane::gpu_fused})
    if (s == lane_name(l)) return l;
  throw Error("unknown lane '" + s + "'; the lanes are host, gpu, gpu-fused");
}

void Options::validate() const {
  model.validate();
  adamw.validate();
  if (model.vocab != 64)
    throw Error("the model's vocabulary must be the tokenizer's 64 symbols, got " + std::to_string(model.vocab));
  if (steps < 1 || steps > 100000000) throw Error("steps must be in [1, 100000000], got " + std::to_string(steps));
  if (save_every < 0) throw Error("save-every must be >= 0 (0: only at the end), got " + std::to_string(save_every));
  if (save_every > 0 && save_path.empty()) throw Error("save-every needs a checkpoint path to save to");
}

void SampleOptions::validate() const {
  if (checkpoint.empty()) throw Error("sampling needs a checkpoint");
  if (tokens < 0 || tokens > 1000000) throw Error("tokens must be in [0, 1000000], got " + std::to_string(tokens));
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100)
    throw Error("temperature must be in [0, 100] (0: always the most likely symbol), got " + std::to_string(temperature));
  if (window < 0) throw Error("window must be >= 0 (0: the training sequence length), got " + std::to_string(window));
}

}  // namespace capstep::train
