// capstep lora-merge: a PEFT LoRA adapter merged into a transformers model
// (lora.h's read_peft_dir and merge, hf.h's directories); capstep
// export-peft: a LoRA run's adapter as PEFT's files (write_peft_dir).
#include <filesystem>
#include <iostream>

#include "capstep/hf.h"
#include "capstep/lora.h"
#include "capstep/train.h"
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

int run_export_peft(const ExportPeftArgs& a) {
  std::error_code ec;
  if (std::filesystem::exists(a.out, ec) && !std::filesystem::is_directory(a.out, ec))
    throw UsageError("--out: '" + a.out + "' is a file; give a directory");
  train::TrainMeta meta;
  const Checkpoint c = train::load_model_checkpoint(a.checkpoint, &meta);
  if (!meta.lora)
    throw UsageError("--checkpoint: '" + a.checkpoint + "' is not a LoRA run's (train it with --lora-rank or --lora-from)");
  const lora::Adapter ad = train::checkpoint_adapter(c, meta);
  lora::write_peft_dir(a.out, meta.model, ad);
  std::cout << "wrote " << a.out << "/adapter_config.json, adapter_model.safetensors: " << ad.targets.size()
            << " LoRA pairs, r " << ad.options.r << ", alpha " << ad.options.alpha << (ad.options.rslora ? ", rslora" : "")
            << ", at step " << c.step << "\n";
  return kOk;
}

}  // namespace capstep::cli
