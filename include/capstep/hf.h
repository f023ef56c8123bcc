// Models in the Hugging Face layout (transformers' GPT2LMHeadModel and
// LlamaForCausalLM), both ways: capstep's parameters under transformers'
// names and layouts with a config.json, and back.
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
//          model.norm.weight, lm_head.weight [V, D].
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
// The inverse: every tensor transformers' model has must be there with its
// shape, in f32; any other is an Error naming it (but for the causal-mask
// buffers "*.attn.bias" and "*.attn.masked_bias" of older GPT-2 files, and a
// GPT-2 "lm_head.weight" equal to the token embedding, which are skipped).
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

// config.json for `c` (architectures, model_type and every field that
// transformers' config class of the architecture reads for this model).
// `extra` (a JSON object, may be empty) is merged in: capstep writes
// "capstep_tokenizer" there.
std::string hf_config_json(const LmConfig& c, const std::string& extra = "");
// The model of a config.json: Error naming the field for anything capstep
// cannot represent (another model_type, an activation, biases Llama does not
// have, rope scaling, untied GPT-2 or tied Llama embeddings, ...). batch and
// seq are LmConfig's defaults (seq at most the context).
LmConfig config_from_hf(const std::string& json);

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

// A directory as save_pretrained writes it: config.json and model.safetensors.
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

// Writes DIR/config.json and DIR/model.safetensors (atomically, each),
// creating DIR if needed. With a tokenizer (its name, and for a subword one
// its SentencePiece model): "capstep_tokenizer" in config.json,
// tokenizer.json (above) and tokenizer_config.json (PreTrainedTokenizerFast,
// no token added to the text), and for a subword tokenizer tokenizer.model,
// the SentencePiece model itself; *warnings as hf_tokenizer_json's.
void write_hf_dir(const std::string& dir, const LmConfig& c, const std::vector<Array>& params,
                  const std::string& tokenizer = "", const std::string& tokenizer_model = "",
                  std::vector<std::string>* warnings = nullptr);
// A directory as above, or as transformers' save_pretrained writes one
// (config.json, model.safetensors in f32); a subword "capstep_tokenizer"
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
