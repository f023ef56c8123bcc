// The seed's causal LM as capture code: one function builds the graph, the two
// program builders only differ in their inputs and outputs.
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capstep/nn.h"
#include "capstep/trace.h"

namespace capstep::nn {

void LmConfig::validate() const {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw Error("invalid model configuration: " + why);
  };
  need(vocab >= 2 && vocab <= 1 << 20, "vocab must be in [2, 1048576], got " + std::to_string(vocab));
  need(d_model >= 1 && d_model <= 16384, "d_model must be in [1, 16384], got " + std::to_string(d_model));
  need(n_layers >= 1 && n_layers <= 256, "layers must be in [1, 256], got " + std::to_string(n_layers));
  need(n_heads >= 1, "heads must be at least 1, got " + std::to_string(n_heads));
  need(d_model % n_heads == 0, "d_model " + std::to_string(d_model) + " is not a multiple of heads " +
                                   std::to_string(n_heads));
  need(d_ff >= 1 && d_ff <= 65536, "feed-forward width must be in [1, 65536], got " + std::to_string(d_ff));
  need(context >= 1 && context <= 65536, "context must be in [1, 65536], got " + std::to_string(context));
  need(seq >= 1 && seq <= context, "sequence length " + std::to_string(seq) + " must be in [1, context " +
                                       std::to_string(context) + "]");
  need(batch >= 1 && batch <= 65536, "batch must be in [1, 65536], got " + std::to_string(batch));
  need(norm_eps > 0 && std::isfinite(norm_eps), "norm eps must be positive");
}

const std::vector<std::string>& LmConfig::preset_names() {
  static const std::vector<std::string> names = {"seed", "middle", "gpt2-small"};
  return names;
}

LmConfig LmConfig::preset(const std::string& size) {
  LmConfig c;
  if (size == "seed") return c;
  if (size == "middle") {
    c.n_layers = 8, c.d_model = 512, c.n_heads = 8, c.d_ff = 2048, c.context = 256, c.batch = 8, c.seq = 256;
    return c;
  }
  if (size == "gpt2-small") {
    c.n_layers = 12, c.d_model = 768, c.n_heads = 12, c.d_ff = 3072, c.context = 1024, c.batch = 8, c.seq = 512;
    return c;
  }
  throw Error("unknown model size '" + size + "': the sizes are seed, middle and gpt2-small");
}

std::string LmConfig::describe() const {
  std::ostringstream o;
  o << "A " << n_layers << "-layer causal LM, dModel " << d_model << ", " << count_parameters(*this)
    << " parameters; batch " << batch << " \u00d7 " << seq << " tokens.";
  return o.str();
}

std::string LmConfig::to_json() const {
  nlohmann::json j = {{"vocab", vocab}, {"d_model", d_model}, {"n_layers", n_layers}, {"n_heads", n_heads},
                      {"d_ff", d_ff},   {"context", context}, {"batch", batch},       {"seq", seq},
                      {"norm_eps", norm_eps}};
  return j.dump();
}

LmConfig LmConfig::from_json(const std::string& s) {
  LmConfig c;
  try {
    nlohmann::json j = nlohmann::json::parse(s);
    c.vocab = j.at("vocab").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.n_layers = j.at("n_layers").get<int64_t>();
    c.n_heads = j.at("n_heads").get<int64_t>();
    c.d_ff = j.at("d_ff").get<int64_t>();
    c.context = j.at("context").get<int64_t>();
    c.batch = j.at("batch").get<int64_t>();
    c.seq = j.at("seq").get<int64_t>();
    c.norm_eps = j.at("norm_eps").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model configuration JSON: ") + e.what());
  }
  c.validate();
  return c;
}

std::vector<ParamSpec> lm_parameters(const LmConfig& c, DType d) {
  c.validate();
  if (!is_float(d)) throw Error(std::string("the model's parameters are f32 or f64, not ") + dtype_name(d));
  const int64_t D = c.d_model;
  std::vector<ParamSpec> ps;
  ps.push_back({"tok_emb", {d, {c.vocab, D}}});
  ps.push_back({"pos_emb", {d, {c.context, D}}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    ps.push_back({b + "attn_norm", {d, {D}}, true});
    for (const char* w : {"wq", "wk", "wv", "wo"}) ps.push_back({b + "attn." + w, {d, {D, D}}});
    ps.push_back({b + "mlp_norm", {d, {D}}, true});
    ps.push_back({b + "mlp.w1", {d, {D, c.d_ff}}});
    ps.push_back({b + "mlp.w2", {d, {c.d_ff, D}}});
  }
  ps.push_back({"final_norm", {d, {D}}, true});
  ps.push_back({"head", {d, {D, c.vocab}}});
  return ps;
}

int64_t count_parameters(const LmConfig& c) {
  int64_t n = 0;
  for (const ParamSpec& p : lm_parameters(c)) n += p.type.numel();
  return n;
}

namespace {

// The model body: tokens i32[B, T] -> logits [B, T, V].
Tensor logits_of(Tracer& tr, const LmConfig& c, const std::vector<Tensor>& params, const Tensor& tokens) {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), D = c.d_model, H = c.n_heads, Dh = D / H;
  size_t k = 0;
  auto next = [&]() { return params.at(k++); };
  Tensor tok_emb = next(), pos_emb = next();
  Tensor positions = tr.iota({DType::i32, {T}}, 0);
  Tensor x = gather_rows(tok_emb, tokens) + gather_rows(pos_emb, positions);  // [B,T,D] + [T,D]
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, H, Dh}), {0, 2, 1, 3}); };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Tensor g1 = next(), wq = next(), wk = next(), wv = next(), wo = next();
    Tensor h = rms_norm(x, g1, c.norm_eps);
    Tensor att = causal_attention(heads(matmul(h, wq)), heads(matmul(h, wk)), heads(matmul(h, wv)));
    x = x + matmul(reshape(transpose(att, {0, 2, 1, 3}), {B, T, D}), wo);
    Tensor g2 = next(), w1 = next(), w2 = next();
    x = x + matmul(gelu_tanh(matmul(rms_norm(x, g2, c.norm_eps), w1)), w2);
  }
  Tensor gf = next(), head = next();
  return matmul(rms_norm(x, gf, c.norm_eps), head);
}

std::vector<Tensor> param_inputs(Tracer& tr, const LmConfig& c, DType d) {
  std::vector<Tensor> ps;
  for (const ParamSpec& p : lm_parameters(c, d)) ps.push_back(tr.input(p.name, p.type));
  return ps;
}

}  // namespace

Program lm_loss_program(const LmConfig& c, DType d) {
  Tracer tr;
  std::vector<Tensor> ps = param_inputs(tr, c, d);
  Tensor tokens = tr.input("tokens", {DType::i32, {c.batch, c.seq}});
  Tensor targets = tr.input("targets", {DType::i32, {c.batch, c.seq}});
  Tensor loss = cross_entropy(logits_of(tr, c, ps, tokens), targets);
  Program p = tr.finish({{"loss", loss}});
  p.name = "causal_lm_loss";
  return p;
}

Program lm_logits_program(const LmConfig& c, int64_t t, DType d) {
  if (t < 1 || t > c.context)
    throw Error("sequence length " + std::to_string(t) + " must be in [1, context " + std::to_string(c.context) + "]");
  Tracer tr;
  std::vector<Tensor> ps = param_inputs(tr, c, d);
  Tensor tokens = tr.input("tokens", {DType::i32, {1, t}});
  Program p = tr.finish({{"logits", logits_of(tr, c, ps, tokens)}});
  p.name = "causal_lm_logits";
  return p;
}

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform01(uint64_t& s) { return (static_cast<double>(splitmix64(s) >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

std::vector<Array> init_parameters(const LmConfig& c, uint64_t seed, DType d) {
  std::vector<Array> out;
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  for (const ParamSpec& p : lm_parameters(c, d)) {
    Array a(p.type);
    const int64_t n = a.numel();
    if (p.is_gain) {
      for (int64_t i = 0; i < n; ++i) a.set(i, 1.0);
    } else {
      for (int64_t i = 0; i < n; i += 2) {  // Box-Muller: two normals per pair of uniforms
        double r = std::sqrt(-2.0 * std::log(uniform01(state)));
        double th = 2.0 * M_PI * uniform01(state);
        a.set(i, 0.02 * r * std::cos(th));
        if (i + 1 < n) a.set(i + 1, 0.02 * r * std::sin(th));
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace capstep::nn
