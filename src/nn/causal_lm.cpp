// The causal LMs as capture code: one function builds the graph of every
// architecture (the differences are a few switches on LmConfig::arch), the two
// program builders only differ in their inputs and outputs.
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "capstep/nn.h"
#include "capstep/random.h"
#include "capstep/trace.h"
#include "capstep/transforms.h"

namespace capstep::nn {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::seed: return "seed";
    case Arch::gpt2: return "gpt2";
    case Arch::llama: return "llama";
  }
  return "?";
}

Arch parse_arch(const std::string& s) {
  for (Arch a : {Arch::seed, Arch::gpt2, Arch::llama})
    if (s == arch_name(a)) return a;
  throw Error("unknown architecture '" + s + "': the architectures are seed, gpt2 and llama");
}

void LmConfig::validate() const {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw Error("invalid model configuration: " + why);
  };
  need(vocab >= 2 && vocab <= 1 << 20, "vocab must be in [2, 1048576], got " + std::to_string(vocab));
  need(d_model >= 1 && d_model <= 16384, "d_model must be in [1, 16384], got " + std::to_string(d_model));
  need(n_layers >= 1 && n_layers <= 256, "layers must be in [1, 256], got " + std::to_string(n_layers));
  need(n_heads >= 1, "heads must be at least 1, got " + std::to_string(n_heads));
  need(head_dim > 0 || d_model % n_heads == 0, "d_model " + std::to_string(d_model) + " is not a multiple of heads " +
                                                   std::to_string(n_heads));
  need(d_ff >= 1 && d_ff <= 65536, "feed-forward width must be in [1, 65536], got " + std::to_string(d_ff));
  // Llama has no positional table: its context (transformers'
  // max_position_embeddings, 131072 for Llama 3.2) only bounds the sequence.
  const int64_t most = arch == Arch::llama ? int64_t{1} << 22 : 65536;
  need(context >= 1 && context <= most,
       "context must be in [1, " + std::to_string(most) + "], got " + std::to_string(context));
  need(seq >= 1 && seq <= context, "sequence length " + std::to_string(seq) + " must be in [1, context " +
                                       std::to_string(context) + "]");
  need(batch >= 1 && batch <= 65536, "batch must be in [1, 65536], got " + std::to_string(batch));
  need(norm_eps > 0 && std::isfinite(norm_eps), "norm eps must be positive");
  if (arch != Arch::llama) {
    need(n_kv_heads == 0 || n_kv_heads == n_heads,
         std::string("kv_heads applies to the llama architecture, not ") + arch_name(arch));
    need(rope_theta == 10000, std::string("rope_theta applies to the llama architecture, not ") + arch_name(arch));
    const bool variant = head_dim != 0 || tied_head || qkv_bias || o_bias || mlp_bias || rope_factor != 0 ||
                         rope_low_freq_factor != 0 || rope_high_freq_factor != 0 || rope_original_context != 0;
    need(!variant, std::string("head_dim, a tied head, q/k/v/o or MLP biases and rope scaling apply to the llama "
                               "architecture, not ") + arch_name(arch));
    return;
  }
  need(n_kv_heads >= 0 && kv_heads() <= n_heads && n_heads % kv_heads() == 0,
       "kv_heads " + std::to_string(kv_heads()) + " must divide heads " + std::to_string(n_heads));
  need(head_dim >= 0 && head_dim <= 16384, "head_dim must be in [0, 16384], got " + std::to_string(head_dim));
  if (head_dim == 0)
    need((d_model / n_heads) % 2 == 0, "the rotary embedding needs an even head width, got d_model / heads = " +
                                           std::to_string(d_model / n_heads));
  else
    need(head_dim % 2 == 0, "the rotary embedding needs an even head width, got head_dim " + std::to_string(head_dim));
  need(rope_theta > 1 && std::isfinite(rope_theta), "rope_theta must be a finite number above 1");
  need(!o_bias || qkv_bias, "an o bias needs the q/k/v biases (Llama's attention_bias has all four)");
  need(!(qkv_bias && !o_bias && mlp_bias),
       "q/k/v biases without an o bias (Qwen2's) do not go with MLP biases: no transformers model has both");
  if (rope_factor == 0) {
    need(rope_low_freq_factor == 0 && rope_high_freq_factor == 0 && rope_original_context == 0,
         "the rope scaling's frequency factors and original context need a rope factor");
  } else {
    need(std::isfinite(rope_factor) && rope_factor >= 1, "the rope factor must be at least 1");
    need(std::isfinite(rope_high_freq_factor) && rope_low_freq_factor > 0 &&
             rope_high_freq_factor > rope_low_freq_factor,
         "the rope scaling needs 0 < low_freq_factor < high_freq_factor");
    need(rope_original_context >= 1, "the rope scaling needs the original context (at least 1)");
  }
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
  const bool qwen2 = arch == Arch::llama && qkv_bias && !o_bias;
  o << "A " << n_layers << "-layer "
    << (arch == Arch::gpt2 ? "GPT-2 " : qwen2 ? "Qwen2 " : arch == Arch::llama ? "Llama " : "")
    << "causal LM, dModel " << d_model << ", " << count_parameters(*this)
    << " parameters; batch " << batch << " \u00d7 " << seq << " tokens.";
  return o.str();
}

std::string LmConfig::to_json() const {
  nlohmann::json j = {{"vocab", vocab}, {"d_model", d_model}, {"n_layers", n_layers}, {"n_heads", n_heads},
                      {"d_ff", d_ff},   {"context", context}, {"batch", batch},       {"seq", seq},
                      {"norm_eps", norm_eps}};
  if (arch != Arch::seed) j["arch"] = arch_name(arch);
  if (arch == Arch::llama) {
    j["n_kv_heads"] = kv_heads();
    j["rope_theta"] = rope_theta;
    // The variants, only where set: a plain Llama's JSON is as it was.
    if (head_dim != 0) j["head_dim"] = head_dim;
    if (tied_head) j["tied_head"] = true;
    if (qkv_bias) j["qkv_bias"] = true;
    if (o_bias) j["o_bias"] = true;
    if (mlp_bias) j["mlp_bias"] = true;
    if (rope_factor != 0)
      j["rope_scaling"] = {{"factor", rope_factor},
                           {"low_freq_factor", rope_low_freq_factor},
                           {"high_freq_factor", rope_high_freq_factor},
                           {"original_context", rope_original_context}};
  }
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
    if (j.contains("arch")) c.arch = parse_arch(j.at("arch").get<std::string>());
    if (j.contains("n_kv_heads")) c.n_kv_heads = j.at("n_kv_heads").get<int64_t>();
    if (j.contains("rope_theta")) c.rope_theta = j.at("rope_theta").get<double>();
    if (j.contains("head_dim")) c.head_dim = j.at("head_dim").get<int64_t>();
    if (j.contains("tied_head")) c.tied_head = j.at("tied_head").get<bool>();
    if (j.contains("qkv_bias")) c.qkv_bias = j.at("qkv_bias").get<bool>();
    if (j.contains("o_bias")) c.o_bias = j.at("o_bias").get<bool>();
    if (j.contains("mlp_bias")) c.mlp_bias = j.at("mlp_bias").get<bool>();
    if (j.contains("rope_scaling")) {
      const nlohmann::json& r = j.at("rope_scaling");
      c.rope_factor = r.at("factor").get<double>();
      c.rope_low_freq_factor = r.at("low_freq_factor").get<double>();
      c.rope_high_freq_factor = r.at("high_freq_factor").get<double>();
      c.rope_original_context = r.at("original_context").get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model configuration JSON: ") + e.what());
  }
  c.validate();
  return c;
}

std::vector<ParamSpec> lm_parameters(const LmConfig& c, DType d) {
  c.validate();
  if (!is_float(d)) throw Error(std::string("the model's parameters are f32 or f64, not ") + dtype_name(d));
  const int64_t D = c.d_model, Dq = c.n_heads * c.head_width(), Dkv = c.kv_heads() * c.head_width();
  const bool gpt2 = c.arch == Arch::gpt2, llama = c.arch == Arch::llama;
  std::vector<ParamSpec> ps;
  auto gain = [&](const std::string& n, int64_t w) {
    ps.push_back({n, {d, {w}}, true});
    if (gpt2) ps.push_back({n + "_bias", {d, {w}}, false, true});
  };
  // A matrix [in, out], then (gpt2, or a llama with that bias) its bias [out].
  auto linear = [&](const std::string& n, const std::string& bias, int64_t in, int64_t out, bool biased) {
    ps.push_back({n, {d, {in, out}}});
    if (biased) ps.push_back({bias, {d, {out}}, false, true});
  };
  ps.push_back({"tok_emb", {d, {c.vocab, D}}});
  if (!llama) ps.push_back({"pos_emb", {d, {c.context, D}}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    gain(b + "attn_norm", D);
    linear(b + "attn.wq", b + "attn.bq", D, Dq, gpt2 || c.qkv_bias);
    linear(b + "attn.wk", b + "attn.bk", D, Dkv, gpt2 || c.qkv_bias);
    linear(b + "attn.wv", b + "attn.bv", D, Dkv, gpt2 || c.qkv_bias);
    linear(b + "attn.wo", b + "attn.bo", Dq, D, gpt2 || c.o_bias);
    gain(b + "mlp_norm", D);
    if (llama) {
      linear(b + "mlp.w_gate", b + "mlp.b_gate", D, c.d_ff, c.mlp_bias);
      linear(b + "mlp.w_up", b + "mlp.b_up", D, c.d_ff, c.mlp_bias);
      linear(b + "mlp.w_down", b + "mlp.b_down", c.d_ff, D, c.mlp_bias);
    } else {
      linear(b + "mlp.w1", b + "mlp.b1", D, c.d_ff, gpt2);
      linear(b + "mlp.w2", b + "mlp.b2", c.d_ff, D, gpt2);
    }
  }
  gain("final_norm", D);
  if (!gpt2 && !c.tied_head) ps.push_back({"head", {d, {D, c.vocab}}});   // gpt2's head is tok_emb, transposed
  return ps;
}

int64_t count_parameters(const LmConfig& c) {
  int64_t n = 0;
  for (const ParamSpec& p : lm_parameters(c)) n += p.type.numel();
  return n;
}

namespace {

// LayerNorm over the last axis as torch.nn.LayerNorm: the biased variance.
Tensor layer_norm(const Tensor& x, const Tensor& gain, const Tensor& bias, double eps) {
  Tensor xc = x - mean(x, {-1}, true);
  return xc * rsqrt(mean(xc * xc, {-1}, true) + eps) * gain + bias;
}

// What the one-token decode step reads besides the parameters: the token's
// position (i32[1]) and every layer's cache of keys and values
// [1, KV, capacity, Dh] (rows at and beyond the position hold anything: the
// new row replaces row `pos`, and the mask hides the rows after it).
struct DecodeInputs {
  Tensor pos;
  std::vector<Tensor> k_cache, v_cache;
  int64_t capacity = 0;
};

// The model body's results: logits [B, T, V] (or, with last_only, the last
// position's [B, 1, V]), and each layer's keys and values [B, KV, T, Dh] as
// attention reads them (after the rotary embedding; before repeat_kv).
struct Body {
  Tensor logits;
  Tensor hidden, head;   // with head_apart: the final norm's [B, T, D] and the head [D, V], no logits
  std::vector<Tensor> k, v;
};

// The rotary embedding's inverse frequencies: the default ones (as trace.h's
// rope_tables computes them), or with rope_factor Llama 3's scaled ones, as
// transformers' _compute_llama3_parameters computes them from the default
// ones: every step in f32 (torch's f32 tensors with Python floats, which it
// takes as f32), and a Python number divided by a tensor as torch's __rdiv__
// does it, the tensor's reciprocal times the number (two roundings, not
// one). Wavelengths above original_context / low_freq_factor divide the
// frequency by the factor, those below original_context / high_freq_factor
// keep it, and the ones between blend the two.
std::vector<float> rotary_inv_freq(const LmConfig& c) {
  const int64_t dim = c.head_width(), half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j)
    inv[static_cast<size_t>(j)] =
        1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * j) / static_cast<float>(dim));
  if (c.rope_factor == 0) return inv;
  const float factor = static_cast<float>(c.rope_factor), low = static_cast<float>(c.rope_low_freq_factor),
              high = static_cast<float>(c.rope_high_freq_factor);
  const double old_context = static_cast<double>(c.rope_original_context);
  const float low_wavelen = static_cast<float>(old_context / c.rope_low_freq_factor);
  const float high_wavelen = static_cast<float>(old_context / c.rope_high_freq_factor);
  const float two_pi = static_cast<float>(2 * M_PI), old = static_cast<float>(old_context);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = ((1.0f / wavelen) * old - low) / (high - low);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
  return inv;
}

// The model body: tokens i32[B, T] -> logits [B, T, V]. With `dec` (T = 1):
// the token sits at dec->pos and attends to the cache's rows 0..pos-1 and to
// itself; every shape is fixed by the capacity, so the cost of a step does
// not depend on the position.
Body body_of(Tracer& tr, const LmConfig& c, const std::vector<Tensor>& params, const Tensor& tokens,
             const DecodeInputs* dec, bool last_only, bool head_apart = false) {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), D = c.d_model, H = c.n_heads, Dh = c.head_width(),
                KV = c.kv_heads();
  const bool gpt2 = c.arch == Arch::gpt2, llama = c.arch == Arch::llama;
  const DType d = params.at(0).dtype();
  size_t k = 0;
  auto next = [&]() { return params.at(k++); };
  auto norm = [&](const Tensor& x) {
    Tensor g = next();
    if (gpt2) return layer_norm(x, g, next(), c.norm_eps);
    return rms_norm(x, g, c.norm_eps);
  };
  // A weight matrix and (gpt2, or a llama with that bias) its bias, taken in
  // lm_parameters order.
  struct Linear {
    Tensor w, b;
  };
  auto take_linear = [&](bool biased) {
    Linear f;
    f.w = next();
    if (biased) f.b = next();
    return f;
  };
  auto apply = [&](const Tensor& x, const Linear& f) {
    Tensor y = matmul(x, f.w);
    return f.b.valid() ? y + f.b : y;
  };
  // The equations are recorded in the order the seed's model always recorded
  // them (its program text and kernel plan stay as they were): the positional
  // rows before the token rows, v's projection before k's before q's.
  Tensor tok_emb = next();
  Tensor x;
  if (llama) {
    x = gather_rows(tok_emb, tokens);
  } else {
    Tensor pos_emb = next();
    Tensor pos = gather_rows(pos_emb, dec ? dec->pos : tr.iota({DType::i32, {T}}, 0));
    x = gather_rows(tok_emb, tokens) + pos;   // [B,T,D] + [T,D]
  }
  auto heads = [&](const Tensor& t, int64_t n) { return transpose(reshape(t, {B, T, n, Dh}), {0, 2, 1, 3}); };

  // Rotary embedding: x * cos + rotate_half(x) * sin (trace.h's rope_tables),
  // rotate_half(x) = [-x2, x1] for the halves x1, x2 of the head's Dh.
  // Written as x R with a constant signed permutation R [Dh, Dh] rather than
  // trace.h's rotate_half (slice and concatenate): each output is one +-x term
  // plus zeros, so the product is exact and the same values, and it fuses
  // into the GPU plan's GEMMs, where slice and concatenate are launches of
  // their own (the Llama step stays within 1.2x the seed's kernel count).
  Tensor rope_cos, rope_sin, rope_r;
  if (llama) {
    const int64_t positions = dec ? dec->capacity : T;
    const RopeTables rt = c.rope_factor == 0 ? rope_tables(tr, positions, Dh, c.rope_theta, d)
                                             : rope_tables(tr, positions, rotary_inv_freq(c), d);
    rope_cos = dec ? gather_rows(rt.cos, dec->pos) : rt.cos;   // decode: the position's row [1, Dh]
    rope_sin = dec ? gather_rows(rt.sin, dec->pos) : rt.sin;
    const int64_t half = Dh / 2;
    std::vector<double> r(static_cast<size_t>(Dh * Dh), 0.0);
    for (int64_t i = 0; i < half; ++i) {
      r[static_cast<size_t>((i + half) * Dh + i)] = -1.0;   // out[i] = -x[i + half]
      r[static_cast<size_t>(i * Dh + i + half)] = 1.0;      // out[i + half] = x[i]
    }
    rope_r = tr.constant({d, {Dh, Dh}}, std::move(r));
  }
  auto rope = [&](const Tensor& t) { return t * rope_cos + matmul(t, rope_r) * rope_sin; };
  // [B, KV, T, Dh] -> [B, H, T, Dh]: query head h reads key/value head h / (H / KV).
  auto repeat_kv = [&](const Tensor& t) {
    const int64_t n = t.dim(2);
    if (KV == H) return t;
    return reshape(broadcast_in_dim(t, {B, KV, H / KV, n, Dh}, {0, 1, 3, 4}), {B, H, n, Dh});
  };
  // Decode: row `pos` of a cache [1, KV, C, Dh] replaced by the new row
  // [1, KV, 1, Dh], and the additive mask [C] that hides the rows after pos
  // (-1e9, as causal_mask's).
  Tensor at_pos, after_pos;
  if (dec) {
    const Tensor rows = tr.iota({DType::i32, {dec->capacity}}, 0);
    const Tensor p = broadcast_to(dec->pos, {dec->capacity});
    at_pos = broadcast_in_dim(compare(rows, p, Cmp::EQ), {1, KV, dec->capacity, Dh}, {2});
    after_pos = select(compare(rows, p, Cmp::GT), tr.full({dec->capacity}, -1e9, d), tr.full({dec->capacity}, 0.0, d));
  }
  auto with_row = [&](const Tensor& cache, const Tensor& row) {
    return select(at_pos, broadcast_to(row, cache.shape()), cache);
  };
  // One query against the whole cache: softmax(q K^T / sqrt(Dh) + mask) V.
  auto decode_attention = [&](const Tensor& q, const Tensor& kf, const Tensor& vf) {
    Tensor s = matmul(q, swap_last2(kf)) * (1.0 / std::sqrt(static_cast<double>(Dh))) + after_pos;
    return matmul(softmax(s, -1), vf);
  };
  Body out;

  for (int64_t l = 0; l < c.n_layers; ++l) {
    tr.set_region(static_cast<int>(l));  // block l: one checkpoint region (checkpoint_activations)
    Tensor h = norm(x);
    const bool qkv = gpt2 || c.qkv_bias;
    const Linear fq = take_linear(qkv), fk = take_linear(qkv), fv = take_linear(qkv), fo = take_linear(gpt2 || c.o_bias);
    Tensor v = heads(apply(h, fv), KV);
    Tensor kk = heads(apply(h, fk), KV);
    Tensor q = heads(apply(h, fq), H);
    if (llama) {
      kk = rope(kk);
      q = rope(q);
    }
    out.k.push_back(kk);
    out.v.push_back(v);
    Tensor att;
    if (dec) {
      att = decode_attention(q, repeat_kv(with_row(dec->k_cache.at(static_cast<size_t>(l)), kk)),
                             repeat_kv(with_row(dec->v_cache.at(static_cast<size_t>(l)), v)));
    } else {
      att = causal_attention(q, repeat_kv(kk), repeat_kv(v));
    }
    x = x + apply(reshape(transpose(att, {0, 2, 1, 3}), {B, T, H * Dh}), fo);
    h = norm(x);
    if (llama) {
      const Linear fg = take_linear(c.mlp_bias), fu = take_linear(c.mlp_bias), fd = take_linear(c.mlp_bias);
      Tensor up = apply(h, fu);
      x = x + apply(silu(apply(h, fg)) * up, fd);
    } else {
      const Linear f1 = take_linear(gpt2), f2 = take_linear(gpt2);
      x = x + apply(gelu_tanh(apply(h, f1)), f2);
    }
  }
  tr.set_region(-1);
  // The sampler draws from the last position only: the final norm and the
  // head (the widest product, [D, V]) run on that row alone.
  if (last_only && T > 1) x = slice(x, {0, T - 1, 0}, {B, T, D});
  Tensor hf = norm(x);
  Tensor head = gpt2 || c.tied_head ? transpose(tok_emb, {1, 0}) : next();
  if (head_apart) {
    out.hidden = hf;
    out.head = head;
  } else {
    out.logits = matmul(hf, head);
  }
  return out;
}

Tensor logits_of(Tracer& tr, const LmConfig& c, const std::vector<Tensor>& params, const Tensor& tokens) {
  return body_of(tr, c, params, tokens, nullptr, false).logits;
}

std::vector<Tensor> param_inputs(Tracer& tr, const LmConfig& c, DType d) {
  std::vector<Tensor> ps;
  for (const ParamSpec& p : lm_parameters(c, d)) ps.push_back(tr.input(p.name, p.type));
  return ps;
}

}  // namespace

int64_t lm_loss_chunks(const LmConfig& c, int64_t chunk_elems) {
  if (chunk_elems < 1) throw Error("lm_loss_program: chunk_elems must be at least 1, got " + std::to_string(chunk_elems));
  const int64_t rows = c.batch * c.seq;
  const int64_t per = std::max<int64_t>(1, chunk_elems / std::max<int64_t>(1, c.vocab));   // rows a chunk
  return rows <= per ? 1 : (rows + per - 1) / per;
}

std::vector<int> lm_checkpoint_regions(const LmConfig& c, const Program& grad, int every) {
  std::vector<int> r;
  for (int x : every_kth_region(grad, every))
    if (x < c.n_layers) r.push_back(x);
  for (int x : checkpoint_regions(grad))
    if (x >= c.n_layers) r.push_back(x);
  return r;
}

Program lm_loss_program(const LmConfig& c, DType d, bool masked, int64_t chunk_elems) {
  Tracer tr;
  std::vector<Tensor> ps = param_inputs(tr, c, d);
  Tensor tokens = tr.input("tokens", {DType::i32, {c.batch, c.seq}});
  Tensor targets = tr.input("targets", {DType::i32, {c.batch, c.seq}});
  const int64_t chunks = lm_loss_chunks(c, chunk_elems);
  Tensor loss;
  if (chunks == 1) {
    Tensor logits = logits_of(tr, c, ps, tokens);
    loss = masked ? masked_cross_entropy(logits, targets) : cross_entropy(logits, targets);
  } else {
    // The head and the loss over chunks of rows, each in a checkpoint region
    // of its own after the blocks': checkpointed, a chunk's logits are made
    // in the forward for its part of the loss and dropped, then made again in
    // the backward where its gradient needs them, so one chunk's logits are
    // held at a time instead of all [B * T, V].
    const Body b = body_of(tr, c, ps, tokens, nullptr, false, true);
    const int64_t rows = c.batch * c.seq, per = (rows + chunks - 1) / chunks, D = c.d_model;
    Tensor h = reshape(b.hidden, {rows, D}), t = reshape(targets, {rows});
    Tensor total, count;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t r0 = k * per, r1 = std::min(rows, r0 + per);
      tr.set_region(static_cast<int>(c.n_layers + k));
      // Each chunk's rows are read after the previous chunk's part is made:
      // a scheduler by dependencies (the host's fusion planner) would
      // otherwise make every chunk's logits first, all of them held at once.
      Tensor rows_k = slice(h, {r0, 0}, {r1, D});
      if (k > 0) rows_k = ordered_after(rows_k, total);
      Tensor part_count;
      Tensor part = cross_entropy_sum(matmul(rows_k, b.head), slice(t, {r0}, {r1}), masked ? &part_count : nullptr);
      tr.set_region(-1);
      total = k == 0 ? part : total + part;
      if (masked) count = k == 0 ? part_count : count + part_count;
    }
    loss = masked ? -(total / maximum(count, tr.scalar(1.0, d))) : total * (-1.0 / static_cast<double>(rows));
  }
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

std::string layer_name(const char* what, size_t l) { return std::string(what) + "." + std::to_string(l); }

}  // namespace

Program lm_prefill_program(const LmConfig& c, int64_t t, DType d) {
  if (t < 1 || t > c.context)
    throw Error("prefill length " + std::to_string(t) + " must be in [1, context " + std::to_string(c.context) + "]");
  Tracer tr;
  std::vector<Tensor> ps = param_inputs(tr, c, d);
  Tensor tokens = tr.input("tokens", {DType::i32, {1, t}});
  Body b = body_of(tr, c, ps, tokens, nullptr, true);
  std::vector<std::pair<std::string, Tensor>> outs = {{"logits", b.logits}};
  for (size_t l = 0; l < b.k.size(); ++l) {
    outs.push_back({layer_name("k", l), b.k[l]});
    outs.push_back({layer_name("v", l), b.v[l]});
  }
  Program p = tr.finish(outs);
  p.name = "causal_lm_prefill";
  return p;
}

Program lm_decode_program(const LmConfig& c, int64_t capacity, DType d) {
  if (capacity < 1 || capacity > c.context)
    throw Error("cache capacity " + std::to_string(capacity) + " must be in [1, context " + std::to_string(c.context) +
                "]");
  Tracer tr;
  std::vector<Tensor> ps = param_inputs(tr, c, d);
  Tensor token = tr.input("token", {DType::i32, {1, 1}});
  DecodeInputs dec;
  dec.capacity = capacity;
  dec.pos = tr.input("pos", {DType::i32, {1}});
  const Type cache{d, {1, c.kv_heads(), capacity, c.head_width()}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    dec.k_cache.push_back(tr.input(layer_name("k_cache", static_cast<size_t>(l)), cache));
    dec.v_cache.push_back(tr.input(layer_name("v_cache", static_cast<size_t>(l)), cache));
  }
  Body b = body_of(tr, c, ps, token, &dec, true);
  std::vector<std::pair<std::string, Tensor>> outs = {{"logits", b.logits}};
  for (size_t l = 0; l < b.k.size(); ++l) {
    outs.push_back({layer_name("k", l), b.k[l]});
    outs.push_back({layer_name("v", l), b.v[l]});
  }
  Program p = tr.finish(outs);
  p.name = "causal_lm_decode";
  return p;
}

std::vector<float> rope_inv_freq(const LmConfig& c) {
  c.validate();
  if (c.arch != Arch::llama) throw Error(std::string("the ") + arch_name(c.arch) + " architecture has no rotary embedding");
  return rotary_inv_freq(c);
}

std::vector<Array> init_parameters(const LmConfig& c, uint64_t seed, DType d) {
  std::vector<Array> out;
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  for (const ParamSpec& p : lm_parameters(c, d)) {
    Array a(p.type);
    const int64_t n = a.numel();
    if (p.is_gain) {
      for (int64_t i = 0; i < n; ++i) a.set(i, 1.0);
    } else if (p.is_bias) {
      // Array's storage starts zeroed.
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
