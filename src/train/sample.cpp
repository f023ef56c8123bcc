// Sampling text from a checkpoint on the host. One logits program of `window`
// tokens is built once; shorter text is right-padded, which causal attention
// never lets position len-1 see, so every step costs the same and no program
// is rebuilt per length.
#include <algorithm>
#include <cmath>

#include "backend/host/parallel.h"
#include "capstep/data.h"
#include "capstep/interpreter.h"
#include "capstep/train.h"

namespace capstep::train {
namespace {

// Index drawn from softmax(logits / t), or the argmax when t == 0.
int32_t draw(const float* logits, int64_t vocab, double t, uint64_t& rng, std::vector<double>& p) {
  int32_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  if (t == 0) return best;
  double sum = 0;
  p.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    p[static_cast<size_t>(i)] = std::exp((static_cast<double>(logits[i]) - logits[best]) / t);
    sum += p[static_cast<size_t>(i)];
  }
  // 53 random bits, uniform in [0, sum).
  double u = static_cast<double>(data::splitmix64(rng) >> 11) * 0x1.0p-53 * sum;
  for (int64_t i = 0; i < vocab; ++i) {
    u -= p[static_cast<size_t>(i)];
    if (u < 0) return static_cast<int32_t>(i);
  }
  return best;   // rounding left u at or just above 0
}

}  // namespace

std::string sample(const SampleOptions& o) {
  o.validate();
  if (o.backend.host_threads != 0) host::set_host_threads(o.backend.host_threads);
  TrainMeta meta;
  Checkpoint c = load_model_checkpoint(o.checkpoint, &meta);
  const nn::LmConfig& m = meta.model;
  const data::Tokenizer tokenizer = checkpoint_tokenizer(meta);
  if (m.vocab != tokenizer.vocab())
    throw Error("checkpoint '" + o.checkpoint + "' has a vocabulary of " + std::to_string(m.vocab) + "; its " +
                tokenizer.name() + " tokenizer has " + std::to_string(tokenizer.vocab()) + " symbols");
  const int64_t window = o.window == 0 ? m.seq : o.window;
  if (window > m.context)
    throw Error("window " + std::to_string(window) + " is longer than the model's context " + std::to_string(m.context));

  host::Interpreter interp(nn::lm_logits_program(m, window), o.backend.host);
  std::vector<const Array*> ins;
  for (const NamedArray& p : c.params) ins.push_back(&p.array);
  Array tokens({DType::i32, {1, window}});
  ins.push_back(&tokens);
  std::vector<Array> outs;

  // A prompt character the tokenizer cannot represent is refused: the model
  // would read '~' in its place.
  data::TextStats unknown;
  std::vector<int32_t> text = tokenizer.encode(o.prompt.empty() ? std::string("\n") : o.prompt, &unknown).to_vector();
  if (unknown.unknown > 0)
    throw data::UnknownTextError("the prompt: " + data::describe_unknown(unknown, tokenizer.name()) +
                                 "; the checkpoint's model was trained without them");
  std::string result;
  result.reserve(static_cast<size_t>(o.tokens));
  uint64_t rng = o.seed;
  std::vector<double> probs;
  for (int64_t k = 0; k < o.tokens; ++k) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(text.size()), window);
    int32_t* w = tokens.data<int32_t>();
    std::copy(text.end() - len, text.end(), w);
    std::fill(w + len, w + window, 0);
    interp.run(ins, outs);
    const float* logits = outs[0].data<float>() + (len - 1) * m.vocab;
    const int32_t id = draw(logits, m.vocab, o.temperature, rng, probs);
    text.push_back(id);
    for (const char ch : tokenizer.piece(id)) {
      result.push_back(ch);
      if (o.on_char) o.on_char(ch);
    }
  }
  return result;
}

}  // namespace capstep::train
