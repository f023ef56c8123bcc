// Sampling text from a checkpoint on the host, with a KV cache (a prefill
// program for the prompt, a one-token decode program per new token) or, as
// the reference, the whole logits program over the window for every token.
// The reference builds one program of `window` tokens; shorter text is
// right-padded, which causal attention never lets position len-1 see, so
// every step costs the same and no program is rebuilt per length.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "capstep/backend.h"
#include "capstep/data.h"
#include "capstep/host.h"
#include "capstep/train.h"

namespace capstep::train {
namespace {

// A program on the host backend fed from the caller's arrays: each input
// borrowed where it lies (read in place, no copy) or, on a backend that
// cannot borrow, copied in before every run; outputs read where the backend
// keeps them, or copied out.
class Feed {
 public:
  Feed(Program p, const BackendOptions& o, std::vector<const Array*> ins)
      : b_(make_backend(BackendKind::host, std::move(p), o)), ins_(std::move(ins)), borrowed_(ins_.size(), 0) {
    for (size_t i = 0; i < ins_.size(); ++i) borrowed_[i] = b_->borrow_input(static_cast<int>(i), *ins_[i]);
  }
  void run() {
    for (size_t i = 0; i < ins_.size(); ++i)
      if (!borrowed_[i]) b_->set_input(static_cast<int>(i), *ins_[i]);
    b_->run();
  }
  // Output j of the last run, valid until the next run.
  const Array& output(int j) {
    if (const Array* a = b_->host_output(j)) return *a;
    copies_.resize(b_->program().outputs.size());
    b_->read_output(j, copies_[static_cast<size_t>(j)]);
    return copies_[static_cast<size_t>(j)];
  }

 private:
  std::unique_ptr<Backend> b_;
  std::vector<const Array*> ins_;
  std::vector<char> borrowed_;
  std::vector<Array> copies_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Sampler {
  double t;
  int64_t top_k;
  double top_p;
  uint64_t rng;
  std::vector<double> p;
  std::vector<int32_t> order;

  // Index drawn from softmax(logits / t) cut to top_k and top_p, or the
  // argmax (the lowest index among equals) when t == 0.
  int32_t draw(const float* logits, int64_t vocab) {
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
    if ((top_k > 0 && top_k < vocab) || top_p < 1) {
      // The symbols by falling probability (ties: lower index first); the
      // kept ones are a prefix of that order, the rest get probability 0.
      order.resize(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
      int64_t keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
      if (top_p < 1) {
        double acc = 0;
        int64_t n = 0;
        while (n < keep) {
          acc += p[static_cast<size_t>(order[static_cast<size_t>(n)])];
          ++n;
          if (acc >= top_p * sum) break;
        }
        keep = n;
      }
      sum = 0;
      for (int64_t j = 0; j < vocab; ++j) {
        const size_t i = static_cast<size_t>(order[static_cast<size_t>(j)]);
        if (j >= keep) p[i] = 0;
        sum += p[i];
      }
    }
    // 53 random bits, uniform in [0, sum).
    double u = static_cast<double>(data::splitmix64(rng) >> 11) * 0x1.0p-53 * sum;
    for (int64_t i = 0; i < vocab; ++i) {
      u -= p[static_cast<size_t>(i)];
      if (u < 0 && p[static_cast<size_t>(i)] > 0) return static_cast<int32_t>(i);
    }
    return best;   // rounding left u at or just above 0
  }
};

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

  // A prompt character the tokenizer cannot represent is refused: the model
  // would read '~' in its place.
  data::TextStats unknown;
  std::vector<int32_t> text = tokenizer.encode(o.prompt.empty() ? std::string("\n") : o.prompt, &unknown, o.special_tokens).to_vector();
  if (unknown.unknown > 0)
    throw data::UnknownTextError("the prompt: " + data::describe_unknown(unknown, tokenizer.name()) +
                                 "; the checkpoint's model was trained without them");

  // A LoRA checkpoint: every program wrapped in lora::lora, the adapters
  // (after the base parameters in c.params) its last inputs.
  const size_t n_base = nn::lm_parameters(m).size();
  std::vector<const Array*> params, adapters;
  for (size_t j = 0; j < c.params.size(); ++j) (j < n_base ? params : adapters).push_back(&c.params[j].array);
  auto adapted = [&](Program p) {
    if (!meta.lora) return p;
    lora::Options lo = meta.lora->options;
    lo.base_bf16 = false;   // load_model_checkpoint widened the base
    return lora::lora(p, meta.lora->targets, lo);
  };
  std::string result;
  result.reserve(static_cast<size_t>(o.tokens));
  Sampler sampler{o.temperature, o.top_k, o.top_p, o.seed, {}, {}};
  SampleStats stats;
  auto emit = [&](int32_t id) {
    text.push_back(id);
    for (const char ch : tokenizer.piece(id)) {
      result.push_back(ch);
      if (o.on_char) o.on_char(ch);
    }
  };
  auto t0 = std::chrono::steady_clock::now();

  if (!o.kv_cache) {
    Array tokens({DType::i32, {1, window}});
    std::vector<const Array*> ins = params;
    ins.push_back(&tokens);
    ins.insert(ins.end(), adapters.begin(), adapters.end());
    Feed logits_program(adapted(nn::lm_logits_program(m, window)), o.backend, ins);
    for (int64_t k = 0; k < o.tokens; ++k) {
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(text.size()), window);
      int32_t* w = tokens.data<int32_t>();
      std::copy(text.end() - len, text.end(), w);
      std::fill(w + len, w + window, 0);
      logits_program.run();
      const float* logits = logits_program.output(0).data<float>() + (len - 1) * m.vocab;
      if (o.on_logits) o.on_logits(len, logits);
      emit(sampler.draw(logits, m.vocab));
    }
    stats.tokens = o.tokens;
    stats.generate_s = seconds_since(t0);
    if (o.stats) *o.stats = stats;
    return result;
  }

  // The caches [1, KV, window, Dh] per layer, rows 0..cached-1 filled.
  const int64_t KV = m.kv_heads(), Dh = m.head_width(), L = m.n_layers;
  std::vector<Array> k_cache, v_cache;
  for (int64_t l = 0; l < L; ++l) {
    k_cache.emplace_back(Type{DType::f32, {1, KV, window, Dh}});
    v_cache.emplace_back(Type{DType::f32, {1, KV, window, Dh}});
  }
  // Rows [at, at + n) of every head of `cache` from `rows` [1, KV, n, Dh].
  auto write_rows = [&](Array& cache, const Array& rows, int64_t at, int64_t n) {
    for (int64_t h = 0; h < KV; ++h)
      std::memcpy(cache.data<float>() + (h * window + at) * Dh, rows.data<float>() + h * n * Dh,
                  static_cast<size_t>(n * Dh) * sizeof(float));
  };
  // One prefill program per length (the prompt's, the slide's), built at need.
  // Each with the tokens it reads.
  std::map<int64_t, std::pair<std::unique_ptr<Array>, std::unique_ptr<Feed>>> prefills;
  Feed* last = nullptr;   // the program whose output 0 holds the next token's logits
  int64_t cached = 0;
  auto prefill = [&](int64_t n) {
    auto it = prefills.find(n);
    if (it == prefills.end()) {
      auto tokens = std::make_unique<Array>(Type{DType::i32, {1, n}});
      std::vector<const Array*> ins = params;
      ins.push_back(tokens.get());
      ins.insert(ins.end(), adapters.begin(), adapters.end());
      auto feed = std::make_unique<Feed>(adapted(nn::lm_prefill_program(m, n)), o.backend, ins);
      it = prefills.emplace(n, std::make_pair(std::move(tokens), std::move(feed))).first;
    }
    std::copy(text.end() - n, text.end(), it->second.first->data<int32_t>());
    Feed& f = *it->second.second;
    f.run();
    for (int64_t l = 0; l < L; ++l) {
      write_rows(k_cache[static_cast<size_t>(l)], f.output(static_cast<int>(1 + 2 * l)), 0, n);
      write_rows(v_cache[static_cast<size_t>(l)], f.output(static_cast<int>(2 + 2 * l)), 0, n);
    }
    last = &f;
    cached = n;
  };

  Array token({DType::i32, {1, 1}}), pos({DType::i32, {1}});
  std::vector<const Array*> dins = params;
  dins.push_back(&token);
  dins.push_back(&pos);
  for (int64_t l = 0; l < L; ++l) {
    dins.push_back(&k_cache[static_cast<size_t>(l)]);
    dins.push_back(&v_cache[static_cast<size_t>(l)]);
  }
  dins.insert(dins.end(), adapters.begin(), adapters.end());
  Feed decode(adapted(nn::lm_decode_program(m, window)), o.backend, dins);

  stats.prompt_tokens = std::min<int64_t>(static_cast<int64_t>(text.size()), window);
  if (o.tokens > 0) prefill(stats.prompt_tokens);
  stats.prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const int64_t keep = std::max<int64_t>(1, window / 2);
  for (int64_t k = 0; k < o.tokens; ++k) {
    const float* logits = last->output(0).data<float>();
    if (o.on_logits) o.on_logits(cached, logits);
    const int32_t id = sampler.draw(logits, m.vocab);
    emit(id);
    if (k + 1 == o.tokens) break;
    if (cached == window) {   // full: slide by prefilling the last `keep` tokens again
      prefill(keep);
      ++stats.slides;
      continue;
    }
    token.data<int32_t>()[0] = id;
    pos.data<int32_t>()[0] = static_cast<int32_t>(cached);
    decode.run();
    for (int64_t l = 0; l < L; ++l) {
      write_rows(k_cache[static_cast<size_t>(l)], decode.output(static_cast<int>(1 + 2 * l)), cached, 1);
      write_rows(v_cache[static_cast<size_t>(l)], decode.output(static_cast<int>(2 + 2 * l)), cached, 1);
    }
    last = &decode;
    ++cached;
  }
  stats.tokens = o.tokens;
  stats.generate_s = seconds_since(t0);
  if (o.stats) *o.stats = stats;
  return result;
}

}  // namespace capstep::train
