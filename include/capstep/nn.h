// Causal language models written with the capture front end: one builder,
// three architectures (LmConfig::arch), all pre-norm decoder stacks with
// next-token cross-entropy, mean over the B x T positions. Every weight matrix
// is stored [in, out] (the activations multiply it from the left).
//
//   seed   the seed's model: token embedding [V, D] and learned positions
//          [P, D] (rows 0..T-1 gathered with an iota), L blocks (RMSNorm,
//          causal multi-head attention with q/k/v/o [D, D] and no biases,
//          RMSNorm, feed-forward D -> F -> D with GELU in its tanh form), a
//          final RMSNorm, an untied head [D, V].
//   gpt2   GPT-2 (transformers' GPT2LMHeadModel): as seed but LayerNorm with
//          gain and bias, biases on q/k/v/o and both feed-forward matrices,
//          and the head tied to the token embedding (logits = h tok_emb^T).
//   llama  Llama (transformers' LlamaForCausalLM): RMSNorm, no positional
//          table but rotary embeddings on q and k (rotate-half, rope_theta),
//          grouped-query attention (n_kv_heads key/value heads, each shared by
//          n_heads / n_kv_heads query heads), a SwiGLU feed-forward
//          down(silu(x gate) * (x up)), no biases, an untied head.
//          The variants of the small open models (transformers' Llama,
//          SmolLM2, Llama 3.2, Qwen2/Qwen2.5), each a field below that is off
//          by default (the plain Llama's program is unchanged by them): a head
//          tied to the token embedding (tied_head: no "head" parameter,
//          logits = h tok_emb^T as gpt2's), a head width other than
//          d_model / n_heads (head_dim: q [D, H Dh], k and v [D, KV Dh],
//          o [H Dh, D]), biases on q/k/v (qkv_bias), on o (o_bias) and on
//          the three feed-forward matrices (mlp_bias), and Llama 3's rotary
//          scaling (rope_factor > 0: transformers' rope_type "llama3").
//          Qwen2 is this architecture with qkv_bias and without o_bias
//          (hf.h writes such a model as Qwen2ForCausalLM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/ir.h"

namespace capstep::nn {

enum class Arch { seed, gpt2, llama };
const char* arch_name(Arch a);                  // "seed", "gpt2", "llama"
Arch parse_arch(const std::string& s);          // Error naming the architectures

struct LmConfig {
  Arch arch = Arch::seed;
  int64_t vocab = 64;
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t d_ff = 256;
  int64_t context = 256;     // rows of the positional table: the longest sequence (llama: up to 2^22, no table)
  int64_t batch = 4;
  int64_t seq = 16;
  double norm_eps = 1e-5;
  // llama only (validate() refuses other values for seed and gpt2):
  int64_t n_kv_heads = 0;      // key/value heads, dividing n_heads; 0: n_heads
  double rope_theta = 10000;   // the rotary base
  int64_t head_dim = 0;        // each head's width (even); 0: d_model / n_heads
  bool tied_head = false;      // the head is tok_emb (no "head" parameter)
  bool qkv_bias = false;       // biases "blocks.L.attn.bq", "bk", "bv" after their matrices
  bool o_bias = false;         // "blocks.L.attn.bo" (needs qkv_bias: Llama's attention_bias sets all four)
  bool mlp_bias = false;       // "blocks.L.mlp.b_gate", "b_up", "b_down" (not with qkv_bias without o_bias)
  // Llama 3's rotary scaling (transformers' _compute_llama3_parameters):
  // rope_factor 0 for none, else the factor (at least 1), with the low and
  // high frequency factors (0 < low < high) and the context the model was
  // trained with before the scaling (original_max_position_embeddings).
  double rope_factor = 0;
  double rope_low_freq_factor = 0, rope_high_freq_factor = 0;
  int64_t rope_original_context = 0;

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_width() const { return head_dim > 0 ? head_dim : d_model / n_heads; }

  // Throws Error with the reason when the combination is invalid.
  void validate() const;
  std::string describe() const;   // "A 2-layer causal LM, dModel 128, 311936 parameters; batch 4 x 16 tokens."
  // For checkpoint metadata. A seed model's JSON has no "arch" key (as
  // before architectures existed); from_json reads a missing one as seed.
  // The llama variants' fields are written only where they are not their
  // defaults, and read as the defaults where missing (older checkpoints).
  std::string to_json() const;
  static LmConfig from_json(const std::string& s);
  // The benchmark's size ladder, vocab 64 throughout:
  //   "seed": the defaults above (311,936 parameters, batch 4 x 16);
  //   "middle": 8 layers, d_model 512, 8 heads, d_ff 2048, context 256, batch 8 x 256;
  //   "gpt2-small": 12 layers, d_model 768, 12 heads, d_ff 3072, context 1024,
  //   batch 8 x 512 (GPT-2 small's shape but for its vocabulary: 85,838,592 parameters).
  // Error naming the known sizes for any other name.
  static LmConfig preset(const std::string& size);
  static const std::vector<std::string>& preset_names();
};

struct ParamSpec {
  std::string name;               // "blocks.0.attn.wq"
  Type type;
  bool is_gain = false;           // norm gains: initialised to ones
  bool is_bias = false;           // biases (gpt2): initialised to zeros
};

// Every parameter, in the order the programs take them; d is f32 or f64
// (Error otherwise), as for every function below.
std::vector<ParamSpec> lm_parameters(const LmConfig& c, DType d = DType::f32);
int64_t count_parameters(const LmConfig& c);

// Program inputs: every parameter (in lm_parameters order), then "tokens" and
// "targets" (i32[batch, seq]); output "loss" (scalar). dtype f32 or f64.
// masked: the loss is masked_cross_entropy's (trace.h): targets < 0 (the SFT
// batches' -100 on prompt and padding positions) take no part; false: the
// plain mean cross_entropy, every target in [0, vocab).
//
// Logits of more than chunk_elems elements ([batch * seq, vocab]) are made in
// chunks of rows (lm_loss_chunks of them), each chunk's head product and
// part of the loss in checkpoint region n_layers + k (after the blocks' 0 ..
// n_layers - 1), the parts summed in order: the same loss up to the order of
// that sum. checkpoint_activations on those regions holds one chunk's logits
// at a time.
Program lm_loss_program(const LmConfig& c, DType d = DType::f32, bool masked = false,
                        int64_t chunk_elems = int64_t{1} << 26);
// How many chunks lm_loss_program makes the logits in (1: whole).
int64_t lm_loss_chunks(const LmConfig& c, int64_t chunk_elems = int64_t{1} << 26);
// The checkpoint regions of lm_loss_program's gradient program `grad` that
// checkpointing every `every`-th block takes: blocks 0, every, 2 * every, ...
// and every chunk of the loss (their logits are the step's widest values).
// every_kth_region (transforms.h) checks `every`.
std::vector<int> lm_checkpoint_regions(const LmConfig& c, const Program& grad, int every);
// Program inputs: every parameter, then "tokens" (i32[1, t]); output "logits"
// [1, t, vocab]. Used for sampling.
Program lm_logits_program(const LmConfig& c, int64_t t, DType d = DType::f32);

// The KV cache's two programs, for sampling one token at a time.
// Prefill: inputs every parameter, then "tokens" (i32[1, t]); outputs
// "logits" [1, 1, vocab] of the last position, then for each layer l "k.l"
// and "v.l" [1, kv_heads, t, head_width()]: the keys (after the rotary
// embedding, for llama) and values of positions 0..t-1, which the caller
// copies into rows 0..t-1 of its caches.
Program lm_prefill_program(const LmConfig& c, int64_t t, DType d = DType::f32);
// Decode, one token: inputs every parameter, "token" (i32[1, 1]), "pos"
// (i32[1], in [0, capacity)), then for each layer "k_cache.l" and
// "v_cache.l" [1, kv_heads, capacity, head_width()]; outputs "logits"
// [1, 1, vocab] and each layer's "k.l" and "v.l" [1, kv_heads, 1, Dh]: the
// token's row, which the caller writes at row pos of the caches. The token
// attends to rows 0..pos-1 of the caches and to its own row (a mask built
// from pos hides the rest, whatever they hold); its position selects the
// positional row (seed, gpt2) or the rotary tables' row (llama: tables for
// the capacity, constants). Every shape is fixed by the capacity: one program
// serves every position at the same cost.
Program lm_decode_program(const LmConfig& c, int64_t capacity, DType d = DType::f32);

// The rotary embedding's inverse frequencies [head_width() / 2] of a llama
// (Error for the others), in f32 as transformers has them: the default
// 1 / theta^(2j / Dh), or with rope_factor those of Llama 3's scaling
// (transformers' _compute_llama3_parameters).
std::vector<float> rope_inv_freq(const LmConfig& c);

// Deterministic initial parameters: normal(0, 0.02) for matrices and embeddings
// (SplitMix64 + Box-Muller, the same on every platform), ones for gains,
// zeros for biases (which draw nothing from the generator).
std::vector<Array> init_parameters(const LmConfig& c, uint64_t seed, DType d = DType::f32);

}  // namespace capstep::nn
