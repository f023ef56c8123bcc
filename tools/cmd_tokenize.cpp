// `capstep tokenize`: a text file encoded into llm.c's token file layout
// (data::tokenize_file), with the tokenizer `train` and `sample` would use.
#include <cstdio>
#include <filesystem>

#include "capstep/hf.h"
#include "capstep/token_file.h"
#include "commands.h"

namespace capstep::cli {

int run_tokenize(const TokenizeArgs& a) {
  std::error_code ec;
  if (std::filesystem::is_directory(a.out, ec)) throw UsageError("--out: '" + a.out + "' is a directory; give a file name");
  if (!a.overwrite && std::filesystem::exists(a.out, ec))
    throw UsageError("--out: '" + a.out + "' exists; give --overwrite to replace it");
  data::Tokenizer tok = data::Tokenizer::parse(a.tokenizer);
  std::string from;
  if (!a.tokenizer_from.empty()) {
    if (std::filesystem::is_directory(a.tokenizer_from, ec)) {
      // A Hugging Face directory: its own tokenizer, as `train --init-from` reads it.
      const nn::HfModel m = nn::read_hf_dir(a.tokenizer_from);
      if (m.tokenizer.empty())
        throw UsageError("--tokenizer-from: '" + a.tokenizer_from + "' holds no tokenizer (looked for " +
                         nn::hf_tokenizer_files() + ")");
      tok = data::Tokenizer::parse(m.tokenizer).has_model() ? data::Tokenizer::from_model(m.tokenizer, m.tokenizer_model)
                                                             : data::Tokenizer::parse(m.tokenizer);
    } else {
      // A checkpoint: the tokenizer it was trained with, as `sample` takes it.
      const train::TrainMeta meta = train::parse_meta(load_checkpoint(a.tokenizer_from));
      tok = data::Tokenizer::parse(meta.tokenizer).has_model() ? train::checkpoint_tokenizer(meta)
                                                                : data::Tokenizer::parse(meta.tokenizer);
    }
    from = " (from '" + a.tokenizer_from + "')";
  } else if (!tok.trained()) {
    throw UsageError("--tokenizer " + a.tokenizer + ": its pieces are trained on a text by `capstep train`; take them "
                     "from its checkpoint or a directory with --tokenizer-from");
  }
  data::TokenizeOptions o;
  o.overwrite = a.overwrite;
  o.allow_unknown = a.allow_unknown;
  o.progress = [](uint64_t done, uint64_t total) {
    std::fprintf(stderr, "\rtokenize: %.1f of %.1f MiB (%.0f%%)", static_cast<double>(done) / (1 << 20),
                 static_cast<double>(total) / (1 << 20), total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
    std::fflush(stderr);
  };
  const data::TokenizeResult r = data::tokenize_file(a.text, a.out, tok, o);
  std::fprintf(stderr, "\n");
  if (r.stats.unknown > 0) std::printf("note: %s\n", data::describe_unknown(r.stats, tok.name()).c_str());
  std::printf("%s: %llu tokens of the %s tokenizer%s from %llu bytes, uint%d ids (llm.c's magic %d, version %d)\n",
              a.out.c_str(), static_cast<unsigned long long>(r.tokens), tok.name().c_str(), from.c_str(),
              static_cast<unsigned long long>(r.bytes), r.width == 2 ? 16 : 32,
              r.width == 2 ? data::kLlmcMagicU16 : data::kLlmcMagicU32,
              r.width == 2 ? data::kLlmcVersionU16 : data::kLlmcVersionU32);
  return kOk;
}

}  // namespace capstep::cli
