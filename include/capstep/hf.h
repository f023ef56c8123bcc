// Models in the Hugging Face layout (transformers' GPT2LMHeadModel,
// LlamaForCausalLM and Qwen2ForCausalLM), both ways: capstep's parameters
// under transformers' names and layouts with a config.json, and back.
//
//   gpt2   transformer.wte.weight [V, D] (tok_emb; the head is tied to it and
//          is not written), transformer.wpe.weight [P, D], per layer
//          transformer.h.L.ln_1 / ln_2 .weight .bias, attn.c_attn.weight
//          [D, 3D] (Conv1D: [in, out]; wq | wk | wv side by side) and .bias
//          [3D], attn.c_proj, mlp.c_fc, mlp.c_proj (.weight [in, out], .bias),
//          transformer.ln_f.weight .bias.
//   llama  model.embed_tokens.weight [V, D], per layer model.layers.L.
//          input_layernorm.weight, self_attn.{q,k,v,o}_proj.weight and
//          mlp.{gate,up,down}_proj.weight (nn.Linear: [out, in], so capstep's
//          [in, out] matrices transposed), post_attention_layernorm.weight,
//          model.norm.weight, lm_head.weight [V, D]. With nn.h's variants:
//          q_proj, k_proj, v_proj .bias (attention_bias, Qwen2), o_proj.bias
//          (attention_bias), mlp.{gate,up,down}_proj.bias (mlp_bias), each
//          after its weight; q_proj [H Dh, D], k_proj and v_proj [KV Dh, D],
//          o_proj [D, H Dh] for a head_dim Dh; no lm_head.weight for a tied
//          head (tie_word_embeddings).
//   qwen2  a llama with q/k/v biases and no o bias (LmConfig::qkv_bias
//          without o_bias) is transformers' Qwen2ForCausalLM, model_type
//          "qwen2", in the same names.
//
// The seed's architecture has no transformers counterpart: an Error.
#pragma once

#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/data.h"
#include "capstep/nn.h"
#include "capstep/safetensors.h"

namespace capstep::nn {

// capstep's parameters (lm_parameters order, f32) as transformers' tensors,
// in lm_parameters order of their first piece.
std::vector<NamedArray> to_hf_tensors(const LmConfig& c, const std::vector<Array>& params);
// For each capstep parameter (lm_parameters order), the names of the
// transformers tensors it is part of (one; for GPT-2's wq, wk, wv and bq,
// bk, bv, the c_attn tensor they share); empty lists for the seed
// architecture, which has no transformers names.
std::vector<std::vector<std::string>> hf_parameter_names(const LmConfig& c);
// The inverse: every tensor transformers' model has must be there with its
// shape, in f32 or bf16 (read into f32, exactly); any other is an Error
// naming it (but for the causal-mask buffers "*.attn.bias" and
// "*.attn.masked_bias" of older GPT-2 files, and a tied model's
// "lm_head.weight" equal to the token embedding, which are skipped).
std::vector<Array> params_from_hf(const LmConfig& c, const std::vector<NamedArray>& tensors);

// Where each of capstep's weight matrices (the rank-2 parameters, in
// lm_parameters order) sits in transformers' model: `module`, the path of
// its transformers module (its tensor's name less ".weight":
// "model.layers.0.self_attn.q_proj", "transformer.wte"); `part` of `parts`
// column blocks where one tensor holds several (GPT-2's c_attn: wq | wk | wv).
struct HfMatrix {
  std::string param;
  std::string module;
  int part = 0, parts = 1;
};
std::vector<HfMatrix> hf_matrices(const LmConfig& c);

// transformers' class of the model: "GPT2LMHeadModel", "LlamaForCausalLM"
// or "Qwen2ForCausalLM" (Error for the seed).
const char* hf_architecture(const LmConfig& c);

// config.json for `c` (architectures, model_type and every field that
// transformers' config class of the architecture reads for this model; a
// Llama's rope_theta and Llama 3 scaling both as transformers 4 reads them,
// rope_theta and rope_scaling, and as 5 does, rope_parameters).
// `extra` (a JSON object, may be empty) is merged in: capstep writes
// "capstep_tokenizer" there.
std::string hf_config_json(const LmConfig& c, const std::string& extra = "");
// The model of a config.json: model_type "gpt2", "llama" or "qwen2". Read:
// head_dim, tie_word_embeddings, attention_bias and mlp_bias (llama), the
// rotary embedding's rope_theta and scaling from rope_scaling (transformers 4;
// "type" or "rope_type") and rope_parameters (5; its rope_theta too), of
// rope_type "default" or "llama3" (factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings). Error naming the
// field for anything capstep cannot represent (another model_type, an
// activation, another rope_type such as "yarn", a partial_rotary_factor, a
// Qwen2 use_sliding_window or a layer_types entry other than
// "full_attention", untied GPT-2 embeddings, pretraining_tp other than 1,
// ...). batch and seq are LmConfig's defaults (seq at most the context).
LmConfig config_from_hf(const std::string& json);

// How write_hf_dir writes the weights.
struct HfWriteOptions {
  // f32, or bf16 (each weight rounded to nearest even; config.json's
  // torch_dtype says "bfloat16").
  DType dtype = DType::f32;
  // 0: one model.safetensors, whatever its size. N > 0: as save_pretrained's
  // max_shard_size (huggingface_hub's split): the tensors in order, a new
  // shard where the next would take the current past N bytes of tensor
  // data, a tensor above N alone in a shard; with two shards or more, files
  // model-00001-of-0000K.safetensors ... and model.safetensors.index.json
  // ({"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}),
  // else model.safetensors. The other layout's files of an earlier save in
  // the directory are removed (model.safetensors would be read first).
  int64_t max_shard_bytes = 0;
};

// The weights' files of a directory: model.safetensors, or where there is
// none, the shards model.safetensors.index.json names (each tensor must be in
// the file its weight_map gives, and in one file only). F32 and BF16 tensors
// as read_safetensors reads them; F16 ones read into f32, exactly. *from (if
// given) is the file named in errors about the tensors. Error naming the file
// and what is wrong.
std::vector<NamedArray> read_hf_weights(const std::string& dir, std::string* from = nullptr);
// Writes `tensors` to dir (which must exist) as HfWriteOptions says, each
// file atomically; returns the names of the files written.
std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<NamedArray>& tensors,
                                          const HfWriteOptions& options = {});

// A directory's BOS and EOS token ids (for a feature that adds them to a
// text, such as SFT; capstep's encode never does): from tokenizer_config.json's
// "bos_token" and "eos_token" (the token's text, a string or an AddedToken
// object {"content": ...}, looked up with data::Tokenizer::token_id), and from
// generation_config.json's "bos_token_id" and "eos_token_id" (an id or a list
// of ids). bos: tokenizer_config.json's, else generation_config.json's, else
// -1. eos: tokenizer_config.json's first, then generation_config.json's that
// are not already there (Llama 3.1's end_of_text, eom_id and eot_id); empty
// when neither names one. A file that is not there is skipped.
struct HfSpecialTokens {
  int64_t bos = -1;
  std::vector<int64_t> eos;
};
// Reads them from `dir` for its tokenizer `t`; Error naming the file and the
// field for a token that is not `t`'s, an id outside its vocabulary, or a
// field of another type.
HfSpecialTokens read_hf_special_tokens(const std::string& dir, const data::Tokenizer& t);

// A directory as save_pretrained writes it: config.json and the weights.
struct HfModel {
  LmConfig config;
  std::vector<Array> params;        // lm_parameters order
  // The tokenizer: config.json's "capstep_tokenizer", or the one of the
  // directory's own files (read_hf_dir), or empty when it has none.
  std::string tokenizer;
  // Its model (data::Tokenizer::model): a SentencePiece model (tokenizer.model)
  // or a byte-level BPE's tokenizer.json as capstep writes it; else empty.
  std::string tokenizer_model;
  std::string tokenizer_file;       // the file it was read from, or empty
  HfSpecialTokens special;          // its BOS and EOS ids (read_hf_special_tokens)
};
// What read_hf_dir looks for, in words, for a message saying none was there.
std::string hf_tokenizer_files();
// tokenizer.json (the `tokenizers` library's format, which transformers'
// AutoTokenizer reads) for capstep's tokenizer `t`, giving capstep's ids for
// any text (a Python str: valid UTF-8) and capstep's text back:
//   char     a BPE model without merges: every character one token, any
//            other '~' (its unknown token).
//   byte     a BPE model without merges over GPT-2's byte-level alphabet:
//            every byte one token, id = its value.
//   bpe:N    a BPE model with byte fallback: SentencePiece's vocabulary and,
//            as merges, every split of a piece into two pieces ranked by the
//            whole piece's score (SentencePiece merges the pair whose piece
//            scores highest).
//   unigram:N  a Unigram model with byte fallback: SentencePiece's pieces and
//            scores; the reserved pieces (<unk>, <0xAB>) score below any path
//            of normal pieces, since `tokenizers` would match their names in
//            the text and SentencePiece never does.
// The subword pieces are written with spaces for SentencePiece's U+2581, and
// there is no normalizer and no pre-tokenizer (capstep's training adds no
// space and normalizes nothing), so a U+2581 in the text is a character
// without a piece, encoded as its bytes as capstep does; the decoder turns
// byte pieces into bytes (a sequence that is not UTF-8 comes out as U+FFFD in
// transformers, as the bytes in capstep). Where transformers' tokenizer would
// encode some text differently, a sentence saying which goes to *warnings.
// Unigram always has one: where two segmentations score the same (the same
// pieces in another order, as in a run of one character), SentencePiece's
// float sums and tokenizers' double sums can pick different ones (the ids
// differ, the text is the same); and one more when a character of a reserved
// piece's name has no piece (a text spelling that name would be taken as the
// piece). BPE has neither. Error for an untrained subword tokenizer.
std::string hf_tokenizer_json(const data::Tokenizer& t, std::vector<std::string>* warnings = nullptr);
// The char or byte tokenizer by name (Tokenizer::parse): Error for a subword name.
std::string hf_tokenizer_json(const std::string& tokenizer);

// Writes DIR/config.json and the weights (write_hf_weights: by default one
// model.safetensors in f32; atomically, each file), creating DIR if needed. With a tokenizer (its name, and for a subword one
// its SentencePiece model): "capstep_tokenizer" in config.json,
// tokenizer.json (above) and tokenizer_config.json (PreTrainedTokenizerFast,
// no token added to the text), and for a subword tokenizer tokenizer.model,
// the SentencePiece model itself; *warnings as hf_tokenizer_json's.
void write_hf_dir(const std::string& dir, const LmConfig& c, const std::vector<Array>& params,
                  const std::string& tokenizer = "", const std::string& tokenizer_model = "",
                  std::vector<std::string>* warnings = nullptr, const HfWriteOptions& options = {});
// A directory as above, or as transformers' save_pretrained writes one
// (config.json, the weights as read_hf_weights reads them); a subword "capstep_tokenizer"
// needs its tokenizer.model, a bytelevel-bpe one its tokenizer.json. Without
// "capstep_tokenizer", the directory's own tokenizer, the first of:
//   tokenizer.model   a SentencePiece model (a Llama directory's; bpe:N or
//                     unigram:N, data::Tokenizer::from_sentencepiece)
//   tokenizer.json    a byte-level BPE (GPT-2's, Llama 3's, Qwen2's, SmolLM2's:
//                     data::Tokenizer::from_bytelevel; bytelevel-bpe:N); another
//                     kind (model.type "WordPiece", a Metaspace pre-tokenizer)
//                     is an Error naming the field
//   vocab.json + merges.txt   the same from GPT-2's older files
// whose ids must fit in config.json's vocab_size (Error naming both
// numbers; a larger vocab_size pads the tokenizer, data::Tokenizer::padded_to),
// or none (tokenizer empty); with a tokenizer, `special` from
// read_hf_special_tokens. Error naming the file and what is wrong.
HfModel read_hf_dir(const std::string& dir);

}  // namespace capstep::nn
