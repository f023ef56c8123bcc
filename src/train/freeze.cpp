// Which parameters train (Options::train_patterns, freeze_patterns): glob
// patterns over capstep's names and, for gpt2 and llama, transformers' names.
#include "capstep/hf.h"
#include "capstep/train.h"

namespace capstep::train {

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative glob with one backtracking point for the last '*'.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<bool> trainable_mask(const nn::LmConfig& c, const std::vector<std::string>& train,
                                 const std::vector<std::string>& freeze) {
  const std::vector<nn::ParamSpec> ps = nn::lm_parameters(c);
  const std::vector<std::vector<std::string>> hf = nn::hf_parameter_names(c);
  // Every pattern of a flag's comma-separated list; each must match something.
  auto matches = [&](const std::vector<std::string>& lists, const char* flag) {
    std::vector<bool> hit(ps.size(), false);
    for (const std::string& list : lists)
      for (size_t a = 0; a <= list.size();) {
        const size_t b = std::min(list.find(',', a), list.size());
        const std::string pat = list.substr(a, b - a);
        a = b + 1;
        if (pat.empty()) throw Error(std::string(flag) + ": an empty pattern in '" + list + "'");
        bool any = false;
        for (size_t j = 0; j < ps.size(); ++j) {
          bool m = glob_match(pat, ps[j].name);
          for (const std::string& h : hf[j]) m = m || glob_match(pat, h);
          if (m) hit[j] = any = true;
        }
        if (!any)
          throw Error(std::string(flag) + ": pattern '" + pat + "' matches no parameter of the model (its names: " +
                      ps.front().name + ", ..., " + ps.back().name +
                      (hf.front().empty() ? std::string() : ", or transformers' " + hf.front().front() + ", ...") + ")");
      }
    return hit;
  };
  const std::vector<bool> t = matches(train, "--train"), f = matches(freeze, "--freeze");
  std::vector<bool> on(ps.size());
  bool any = false;
  for (size_t j = 0; j < ps.size(); ++j) {
    on[j] = (train.empty() || t[j]) && !f[j];
    any = any || on[j];
  }
  if (!any) throw Error("--train/--freeze: no parameter is left to train");
  return on;
}

}  // namespace capstep::train
