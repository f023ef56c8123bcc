// capstep lora-merge: a PEFT LoRA adapter merged into a transformers model
// (lora.h's read_peft_dir and merge, hf.h's directories).
#include <filesystem>
#include <iostream>

#include "capstep/hf.h"
#include "capstep/lora.h"
#include "commands.h"

namespace capstep::cli {

int run_lora_merge(const LoraMergeArgs& a) {
  std::error_code ec;
  if (std::filesystem::exists(a.out, ec) && !std::filesystem::is_directory(a.out, ec))
    throw UsageError("--out: '" + a.out + "' is a file; give a directory");
  nn::HfModel m = nn::read_hf_dir(a.base);
  const lora::Adapter ad = lora::read_peft_dir(a.adapter, m.config);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(m.config)) names.push_back(p.name);
  lora::merge(ad, names, m.params);
  // The base's tokenizer goes along as export-hf writes one (capstep_tokenizer
  // in config.json, tokenizer.json), when the base directory has one.
  std::vector<std::string> warnings;
  nn::write_hf_dir(a.out, m.config, m.params, m.tokenizer, m.tokenizer_model, &warnings);
  std::cout << "wrote " << a.out << "/config.json, model.safetensors" << (m.tokenizer.empty() ? "" : ", tokenizer.json")
            << ": " << a.base << " with " << a.adapter << " merged (" << ad.targets.size() << " LoRA pairs, r "
            << ad.options.r << ", alpha " << ad.options.alpha << (ad.options.rslora ? ", rslora" : "") << ", scale "
            << lora::scale(ad.options) << ")\n";
  for (const std::string& w : warnings) std::cerr << "capstep lora-merge: warning: " << w << "\n";
  return kOk;
}

}  // namespace capstep::cli
