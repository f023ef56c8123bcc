// Training the causal LM for N steps on one of the three lanes, with
// checkpoints, bit-identical resume, a stop on a non-finite loss; and sampling
// text from a checkpoint on the host. The engine behind `capstep train` and
// `capstep sample` (tools/), usable from C++ directly:
//
//   capstep::train::Options o;             // the seed's model on the built-in corpus
//   o.steps = 2000;
//   o.save_path = "run.safetensors";
//   o.save_every = 500;
//   o.on_step = [](const capstep::train::StepInfo& s) { ... };
//   capstep::train::Result r = capstep::train::train(o);
//
// Lanes: a backend (capstep/backend.h: host, cuda, pjrt) and where AdamW runs.
//   host         the gradient program in the host interpreter, AdamW in C++ on the
//                host. Steady state allocates nothing per step (held outputs).
//   host-fused   the with_adamw program in the host interpreter; parameters and
//                moments updated in place.
//   cuda         the gradient program on the GPU (every parameter up, every
//                gradient down), AdamW on the host. ("gpu" is a second name.)
//   cuda-fused   the with_adamw program on the GPU; parameters and moments stay in
//                device memory; only the batch, four scalars and the loss cross.
//                ("gpu-fused" is a second name.)
//   pjrt, pjrt-fused  the same two through an XLA device (a PJRT plugin:
//                BackendOptions::pjrt).
// A lane whose backend cannot run here (no GPU, no plugin) falls back to the
// host backend, AdamW where it was asked, with a message (Options::on_message),
// or throws Error when require_backend is set.
//
// Step numbering: step k (from 1) is the k-th optimizer step since the start
// of training, across resumes. `steps` is the step to reach, so a run resumed
// from a checkpoint at step 6 with steps = 12 takes steps 7..12, and on the
// host its losses are bit-identical to steps 7..12 of an uninterrupted run.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capstep/backend.h"
#include "capstep/backend_options.h"
#include "capstep/checkpoint.h"
#include "capstep/collective.h"
#include "capstep/data.h"
#include "capstep/lora.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/train_step.h"

namespace capstep::train {

// The one lane type is capstep::Lane (capstep/train_step.h), here by its
// older name too.
using capstep::Lane;
using capstep::lane_name;
using capstep::parse_lane;

// The options a lane's backend is made with: `base` with a CUDA graph, and
// the replicas its all_reduce equations sum over (comm: the CUDA backend makes
// its NCCL communicator from it; nullptr: one replica).
BackendOptions lane_backend_options(const BackendOptions& base, Communicator* comm);

// What the progress callback gets, once per step.
struct StepInfo {
  int64_t step = 0;            // the step just taken (from 1, across resumes)
  int64_t first_step = 0;      // the first step of this run
  int64_t last_step = 0;       // the step this run ends at (Options::steps)
  double loss = 0;             // loss of this step's batch, before the update
  double lr = 0;               // the learning rate this step's update used (the schedule's)
  double grad_norm = NAN;      // with clip_grad_norm: the global gradient norm before clipping
  double val_loss = NAN;       // on evaluation steps: mean loss over the validation batches, else NaN
  double tokens_per_s = 0;     // this run so far: batch*seq*(steps done)/elapsed
  double elapsed_s = 0;        // since this run's first step began
};

// Learning-rate schedule, computed on the host each step; the lr enters the
// step as a scalar input (AdamWScalars::lr), so a schedule recompiles nothing.
//   warmup: steps 1..W take lr * step / W (linear from 0; step W takes lr);
//   then constant: lr; or cosine: min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2
//   with t = (step - W) / (steps - W), so the last step (Options::steps) takes min_lr.
// A pure function of the step number: a resumed run with the same options
// continues the schedule at the saved step.
enum class Schedule { constant, cosine };
const char* schedule_name(Schedule s);             // "constant", "cosine"
Schedule parse_schedule(const std::string& s);     // Error naming the allowed values

struct LrSchedule {
  Schedule kind = Schedule::constant;
  int64_t warmup_steps = 0;
  double min_lr = 0;                     // cosine only: the lr of the last step
};
// The lr of `step` (from 1) for peak lr `lr` in a run ending at `steps`.
double scheduled_lr(const LrSchedule& s, double lr, int64_t step, int64_t steps);

struct Options {
  nn::LmConfig model;                    // the seed's model by default
  // lr 1e-3, not the seed's 1e-2: measured on the built-in corpus, 1e-2 is
  // too high to train far (mean loss of steps 2501-3000, seed 1: 1e-2 2.13,
  // 3e-3 1.25, 1e-3 0.70). Betas 0.9/0.999, eps 1e-8, weight decay 0.01 as in the seed.
  optim::AdamW adamw{.lr = 1e-3};
  LrSchedule schedule;                   // constant lr, no warmup by default
  // > 0: scale all gradients by min(1, C/||g||) inside the step program
  // (optim::clip_grad_norm), with ||g|| their global norm; 0: no clipping.
  double clip_grad_norm = 0;
  // Held-out loss: with val_fraction > 0 the text's last val_fraction is kept
  // out of training (data::split_tokens); every eval_every steps (0: only at
  // the end) and at the last step, the mean loss of the forward program over
  // eval_batches fixed validation batches (batches 0..N-1 of a stream over the
  // validation tokens, seeded by `seed`) is computed on the host interpreter,
  // whatever the lane: no gradient, no update.
  double val_fraction = 0;
  int64_t eval_every = 0;
  int64_t eval_batches = 8;
  int64_t steps = 1000;                  // train until this step count (see above)
  uint64_t seed = 1;                     // initial parameters and batch order
  Lane lane;                             // the host backend, AdamW on the host
  bool require_backend = false;          // a lane whose backend cannot run here is an Error (else: the host)
  BackendOptions backend;                // the host and CUDA switches of the step's Interpreter or Executable
  // bf16: the step program is built from optim::mixed_precision_bf16 of the
  // loss (bf16 GEMM operands, f32 accumulation, f32 master parameters, AdamW
  // moments and reductions), the validation loss too. On every lane: the CUDA
  // backend stores bf16 values as bf16 and rounds them as the host does.
  optim::Precision precision = optim::Precision::f32;
  bool fused_attention = false;          // fuse_attention (trace.h) on the loss program: the attention primitives
  // > 0: activation checkpointing (transforms.h's checkpoint_activations) of
  // every K-th transformer block from block 0 (1: every block) and of the
  // loss's chunks of logits (nn::lm_checkpoint_regions): the step recomputes
  // their forward inside the backward instead of holding their activations;
  // the same losses and parameters, bit for bit. 0: off.
  int checkpoint_every = 0;
  std::string text_path;                 // empty: the built-in corpus
  // Token files (capstep/token_file.h) in place of the text (not with
  // text_path): a file or a glob of shards, mapped, the ids taken as they are
  // (the tokenizer only names them, for the checkpoint and sampling; one with
  // a model must come trained: tokenizer_model or the resumed checkpoint's);
  // an id >= model.vocab is an Error naming the file and its offset.
  // val_tokens_path: the validation batches' ids (instead of val_fraction).
  std::string tokens_path, val_tokens_path;
  std::string tokens_format = "auto";    // data::parse_token_file_format's names
  // Instruction data (capstep/sft.h) in place of the text (not with
  // text_path or tokens_path): a JSONL file of prompt/completion or messages
  // rows, rendered in chat_template ("chatml", "llama3", "plain"; empty: the
  // tokenizer's, data::detect_chat_template), which needs a trained tokenizer
  // (init_from's, or the resumed checkpoint's; char and byte are). plain's EOS
  // is init_from's first EOS id, else "<|endoftext|>" if the tokenizer has it.
  // The loss program is nn::lm_loss_program(..., masked = true): mean
  // cross-entropy over the targets that are not -100. mask_prompt: only
  // completion/assistant tokens are targets (false: every real token; padding
  // never). sft_pack: rows concatenated into windows of seq + 1 tokens; else
  // one row per batch row, padded (cut when longer, said through on_message
  // as "N of M rows cut to --seq S"). val_fraction keeps the last rows out for
  // validation. Batches over rows from `seed` (data::SftBatches).
  std::string sft_path;
  std::string chat_template;
  bool mask_prompt = true;
  bool sft_pack = false;
  // data::Tokenizer::parse's name: "char" (the seed's, vocab 64), "byte"
  // (vocab 256), "bpe:N" or "unigram:N" (vocab N), or "bytelevel-bpe:N"
  // (only with tokenizer_model); model.vocab must be the tokenizer's
  // vocabulary. A subword tokenizer is trained on the text before the first
  // step (or taken from tokenizer_model, or, resuming, from the checkpoint,
  // whose tokenizer must be this one) and saved in every checkpoint.
  std::string tokenizer = "char";
  // A text with more than data::kMaxUnknownShare characters the tokenizer
  // cannot represent is refused (data::UnknownTextError) unless this is set;
  // any nonzero share is said through on_message.
  bool allow_unknown = false;
  std::string save_path;                 // empty: no checkpoints
  int64_t save_every = 0;                // also save every K steps (0: only at the end)
  std::string resume_path;               // empty: start from init_parameters(seed)
  // A directory in the Hugging Face layout (hf.h: config.json and
  // model.safetensors, from transformers or `capstep export-hf`): training
  // starts from its weights, with fresh AdamW moments at step 0. Its
  // config.json must describe `model` but for batch and seq (Error otherwise).
  // Not with resume_path.
  std::string init_from;
  // The model (data::Tokenizer::model) of a subword or byte-level tokenizer
  // to use instead of training one on the text: an init_from directory's
  // own (nn::HfModel::tokenizer_model: its tokenizer.model, or its byte-level
  // BPE), whose ids its weights were trained on. Empty: trained (or,
  // resuming, the checkpoint's). Only with a `tokenizer` of its kind and
  // size, and not with resume_path.
  std::string tokenizer_model;
  // Data parallelism: with a communicator of R replicas (ranks),
  // every rank runs this same loop; model.batch is the local batch and the
  // global batch is R x model.batch. Batch k of the stream is drawn with the
  // global batch's rows and rank r takes rows [r*b, (r+1)*b), so the data seen
  // does not depend on R. The step program is optim::data_parallel's (mean
  // all_reduce of the gradients and the loss), so every rank applies the same
  // update and reports the global loss. Only rank 0 writes checkpoints; every
  // rank resumes from resume_path. comm is the backend's
  // BackendOptions::communicator on every lane; R > 1 on a GPU lane needs
  // NCCL in the build (an Error otherwise): one process per GPU, the
  // all_reduces NCCL's, on the communicator the CUDA backend makes from comm
  // (several GPUs not yet run); the PJRT lane refuses R > 1. nullptr: one
  // process, no all_reduce.
  Communicator* comm = nullptr;
  // With comm: optim::DataParallelOptions::pack (every gradient and the loss
  // in one all-reduce message per step; false: one message per value).
  bool dp_pack = true;
  int64_t dp_bucket_bytes = optim::DataParallelOptions{}.bucket_bytes;  // with dp_pack: DataParallelOptions::bucket_bytes

  // Which parameters train: glob patterns (* any run of
  // characters, dots included; ? one character), each entry a comma-separated
  // list, matched against capstep's names (nn::lm_parameters: "blocks.0.attn.wq")
  // and, for gpt2 and llama, transformers' (nn::hf_parameter_names:
  // "model.layers.*.self_attn.q_proj.weight"). A pattern that names GPT-2's
  // packed attn.c_attn tensor applies to all three of wq, wk, wv (or bq, bk,
  // bv); capstep's names pick one. With train_patterns, only the parameters
  // they match train; freeze_patterns' never do. The others are frozen:
  // inputs of the step with no gradient and no AdamW moments, on every lane
  // (with AdamW in the program, plain inputs set once, not donated).
  // Checkpoints hold every parameter and the moments of the trained ones
  // (Checkpoint::frozen); a resumed run must freeze the same ones. Error for
  // a pattern that matches no parameter (naming it) or when none is left.
  std::vector<std::string> train_patterns;
  std::vector<std::string> freeze_patterns;
  // Gradient accumulation: each optimizer step takes grad_accum
  // micro-batches of model.batch rows and one AdamW update of their mean
  // gradient (optim::accumulate_gradients; with AdamW in the program also
  // optim::update_on_last), clipping on that mean. Micro-batch j of step k
  // is rows [j*b, (j+1)*b) of batch k-1 of a stream of grad_accum*b-row
  // batches (data parallel: rank r takes rows [(j*R + r)*b, ...)), so N
  // micro-batches of b see exactly the rows of one batch of N*b. Steps,
  // the lr schedule, logging, eval_every, save_every and checkpoints count
  // optimizer steps; StepInfo::loss is the mean of the micro-batches' losses;
  // tokens/s counts every micro-batch's tokens. Checkpoints are written only
  // between optimizer steps, so none holds a partial accumulation; should_stop
  // is asked after a whole step, so a stop (Ctrl-C) mid-accumulation finishes
  // that step first. 1: no accumulation.
  int64_t grad_accum = 1;
  // LoRA (lora.h): with rank > 0 or `from`, the step trains only
  // the adapters lora::lora gives the target weights (inputs lora.A.<target>
  // [r, in], lora.B.<target> [out, r]); every base parameter is frozen (the
  // machinery of train_patterns above: no gradient, no moments, set once).
  // The loss is with_precision(lora(lm_loss_program), precision). Fresh
  // adapters are lora::init_adapter's (seeded by `seed`: B zeros, so step 1's
  // loss is the base model's); `from` is a PEFT adapter directory
  // (lora::read_peft_dir) whose rank, alpha, rslora and targets replace
  // these, its A and B the starting ones. targets: lora::targets_for's
  // target_modules; empty: PEFT's defaults (llama q_proj,v_proj; gpt2
  // c_attn). base_bf16: lora::Options::base_bf16 (the target weights held,
  // and checkpointed, in bf16). Checkpoints hold the base parameters, A and
  // B, moments for A and B only, and the "lora" metadata (kLoraMetadataKey);
  // a resumed LoRA checkpoint must be resumed with the same LoRA options.
  // Not with train_patterns / freeze_patterns. Dropout is not supported.
  struct Lora {
    int64_t rank = 0;                    // 0 (and no `from`): no LoRA
    double alpha = 8;                    // PEFT's lora_alpha default
    bool rslora = false;
    std::vector<std::string> targets;
    bool base_bf16 = false;
    std::string from;
    bool on() const { return rank > 0 || !from.empty(); }
  };
  Lora lora;

  std::function<void(const StepInfo&)> on_step;          // progress, each step
  std::function<void(const std::string&)> on_message;    // fallbacks, saves, stops
  // Asked after each step; true ends the run there, with a checkpoint of that
  // step when save_path is set (Ctrl-C, SIGTERM or SIGHUP in `capstep train`).
  std::function<bool()> should_stop;

  void validate() const;                 // Error naming the option out of range
};

struct Result {
  Lane lane_used;                        // after any fallback
  int64_t first_step = 0;                // step of losses[0]
  int64_t last_step = 0;                 // last step taken with a finite loss
  std::vector<double> losses;            // one per step of this run (finite ones)
  double seconds = 0;                    // wall time of the steps (saves included)
  double tokens_per_s = 0;
  // Set when a non-finite loss stopped training: "step 57: the loss is NaN ...".
  // The last good checkpoint (if any) is left untouched. Returned only, not
  // also said through on_message (a caller prints it once, where errors go).
  std::string stopped;
  int64_t last_saved_step = -1;          // step of the last checkpoint written, -1 if none
  bool interrupted = false;              // should_stop ended the run early
  std::vector<int64_t> val_steps;        // steps evaluated on the validation split
  std::vector<double> val_losses;        // their mean validation losses
  double best_val_loss = NAN;            // the lowest, this run and the resumed checkpoint's
  std::vector<int64_t> spikes;           // steps whose loss was a spike (is_loss_spike), also said as messages
};

// A loss spike: `loss` above both 1.5 times the mean of the `n` recent losses
// and that mean plus 5 of their standard deviations; never with fewer than 2
// recent losses (so an early spike, from step 3 on, is caught). The loop keeps
// the last 20 steps' losses and reports a spike through on_message
// ("step K: loss spike: X, the last N steps averaged Y"); it is not fatal.
bool is_loss_spike(const double* recent, size_t n, double loss);

// Glob match of a whole name: * any run of characters, ? one character.
bool glob_match(const std::string& pattern, const std::string& name);
// Per parameter of the model (lm_parameters order): whether it trains under
// Options::train_patterns and freeze_patterns (see there); Error naming a
// pattern that matches nothing, or when no parameter is left to train.
std::vector<bool> trainable_mask(const nn::LmConfig& model, const std::vector<std::string>& train_patterns,
                                 const std::vector<std::string>& freeze_patterns);

// Trains; throws Error for bad options, an unreadable or binary text file, an
// unreadable or corrupted checkpoint, a checkpoint that does not match the
// model, a save_path where no file can be created (checked before the first
// step), a model whose parameters, gradients and moments exceed the machine's
// memory, or a failed save.
Result train(const Options& o);

// ---- checkpoints of a training run -------------------------------------------
// Beside the model config ("capstep.model_config", nn::LmConfig::to_json), a
// training checkpoint carries one extra metadata key, "train": JSON
// {"seed", "lr", "beta1", "beta2", "eps", "weight_decay", "text",
//  "schedule", "warmup_steps", "min_lr", "steps", "clip_grad_norm",
//  "text_hash", "precision", "fused_attention", "val_fraction", "tokenizer",
//  "grad_accum"}
// (text: "builtin" or the file's absolute path, as given in checkpoints
// written before text_hash existed; text_hash: file_fingerprint of the text,
// absent for the built-in corpus; schedule "constant" or "cosine"; steps: the
// run's end, the cosine's horizon; precision "f32" or "bf16"; tokenizer
// "char", "byte", "bpe:N" or "unigram:N"), so a resumed run or a sampler can
// default to what the checkpoint was trained with. Checkpoints written before
// the schedule keys existed have none of them (TrainMeta::has_schedule); those
// written before the next four lack them (empty optionals); one without
// "tokenizer" was trained with the char tokenizer. A key added later is
// optional in the same way: older checkpoints still load.
constexpr const char* kTrainMetadataKey = "train";
// With a validation split, also "best_val_loss": the lowest validation loss
// of the run up to the checkpoint (a decimal number, %.9g).
constexpr const char* kBestValLossKey = "best_val_loss";
// With a subword or byte-level tokenizer, also "tokenizer_model": its model
// (data::Tokenizer::model(): SentencePiece's, or the byte-level BPE's
// tokenizer.json) in base64, so sample and resume use the very pieces the
// run trained with.
constexpr const char* kTokenizerModelKey = "tokenizer_model";

// A run on token files also records "tokens" (the file or glob, absolute),
// "tokens_hash" (data::MappedTokens::fingerprint), "tokens_format" and, with
// validation files, "val_tokens" and "val_tokens_hash"; its "text" is "".
struct TokensMeta {
  std::string tokens, tokens_hash, format = "auto", val_tokens, val_tokens_hash;
};
// A run on instruction data (Options::sft_path) records "sft": {"path" (absolute),
// "hash" (file_fingerprint), "chat_template" (as given: "" for the
// tokenizer's), "mask_prompt", "pack"}; its "text" is "".
struct SftMeta {
  std::string path, hash, chat_template;
  bool mask_prompt = true, pack = false;
};

// A LoRA run's checkpoint also records "lora": JSON {"r", "alpha", "rslora",
// "base_precision" ("f32" or "bf16"), "target_modules" (as given; PEFT's
// defaults filled in), "targets": [{"name", "weights": [...]}]}. Its
// parameters are the base model's (lm_parameters) then adapter_inputs'
// A and B (f32), trained; the base ones frozen. With base_precision bf16 the
// target weights are stored in bf16 (load_model_checkpoint widens them to f32).
constexpr const char* kLoraMetadataKey = "lora";
struct LoraMeta {
  lora::Options options;
  std::vector<std::string> target_modules;
  std::vector<lora::Target> targets;
};
std::string lora_metadata(const LoraMeta& m);
struct TrainMeta;
// The checkpoint's adapter (its A and B, c.params by name), for
// lora::write_peft_dir or lora::merge. Error when m has no "lora".
lora::Adapter checkpoint_adapter(const Checkpoint& c, const TrainMeta& m);

struct TrainMeta {
  nn::LmConfig model;
  bool has_train = false;                // false for checkpoints without "train"
  uint64_t seed = 1;
  optim::AdamW adamw;
  std::string text;                      // "builtin", or the text file's absolute path (as typed in older checkpoints)
  bool has_schedule = false;             // false for checkpoints without the schedule keys
  LrSchedule schedule;
  int64_t steps = 0;                     // the end of the run that wrote it
  double clip_grad_norm = 0;
  std::string tokenizer = "char";        // the tokenizer's name; its vocabulary is model.vocab
  std::string tokenizer_model;           // a subword tokenizer's model (decoded), else empty
  double best_val_loss = NAN;            // NaN when the checkpoint has none
  std::optional<std::string> text_hash;  // file_fingerprint of the text file
  std::optional<optim::Precision> precision;
  std::optional<bool> fused_attention;
  std::optional<double> val_fraction;    // the held-out share: which tokens the batches come from
  std::optional<int64_t> grad_accum;     // micro-batches per step: which rows the batches hold
  std::vector<std::string> frozen;       // the checkpoint's frozen parameters (Checkpoint::frozen)
  std::optional<TokensMeta> tokens;      // a run on token files
  std::optional<LoraMeta> lora;          // a LoRA run's (kLoraMetadataKey)
  std::optional<SftMeta> sft;            // a run on instruction data
};
// The "train" metadata of a run with options `o` on `text` ("builtin" or a
// path) whose bytes have the fingerprint `text_hash` ("": none recorded).
std::string train_metadata(const Options& o, const std::string& text, const std::string& text_hash = "",
                           const TokensMeta* tokens = nullptr);
// The checkpoint's tokenizer, trained (its model from kTokenizerModelKey);
// Error naming what is missing or wrong.
data::Tokenizer checkpoint_tokenizer(const TrainMeta& m);
std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);   // Error for a character outside base64
TrainMeta parse_meta(const Checkpoint& c);   // Error naming what is wrong
// A cheap fingerprint of a file's bytes: FNV-1a 64 as 16 hex digits, read in
// chunks (not a cryptographic hash: it tells an edited text from the one a
// checkpoint was trained on). Error naming the file when it cannot be read.
std::string file_fingerprint(const std::string& path);
// `path` made absolute against the working directory (lexically normal; links
// are kept): what a checkpoint records, so a run resumed elsewhere finds it.
std::string absolute_path(const std::string& path);

// Loads a checkpoint and checks every tensor against the model its config
// describes; parameters come in lm_parameters order (a LoRA checkpoint's
// adapters after them, adapter_inputs order; bf16 base weights widened to f32).
Checkpoint load_model_checkpoint(const std::string& path, TrainMeta* meta);

// ---- sampling ------------------------------------------------------------------
// Generates `tokens` tokens after `prompt` on the host. Window: the model
// reads at most `window` tokens, with window = the checkpoint's training
// sequence length by default (positions beyond it were never trained), at
// most the model's context.
// An empty prompt starts from "\n" (a paragraph starts after a newline in the
// built-in corpus); the newline is not part of the result.
// temperature 0 picks the most likely symbol; otherwise softmax(logits / T).
//
// With kv_cache (the default) the window is the capacity of a KV cache: a
// prefill program reads the prompt's last min(length, window) tokens once,
// then a one-token decode program (nn::lm_decode_program) gives each next
// token at a cost that does not depend on its position. When the cache is
// full, the window slides: the last max(1, window / 2) tokens are prefilled
// again and decoding goes on from there, so the model always reads between
// window / 2 and window tokens. Without kv_cache every token runs the whole
// logits program over the last min(length, window) tokens (the reference:
// the same choices while the text fits in the window): one program of
// `window` tokens, a shorter text right-padded, which causal attention keeps
// from the logits at position len-1.
// top_k (0: every symbol) keeps the k most likely symbols, top_p (1: every
// symbol) the fewest most likely whose probabilities reach p; both apply
// after the temperature, before the draw; ties go to the lower index, so
// top_k 1 and a tiny top_p pick what temperature 0 picks.
struct SampleStats {
  int64_t prompt_tokens = 0;   // tokens of the first prefill
  double prefill_s = 0;        // its time
  int64_t tokens = 0;          // generated tokens
  double generate_s = 0;       // their time, slides included
  int64_t slides = 0;          // prefills again after the cache filled
  double tokens_per_s() const { return generate_s > 0 ? tokens / generate_s : 0; }
};
struct SampleOptions {
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;                     // 0: no limit
  double top_p = 1.0;                    // in (0, 1]; 1: no limit
  uint64_t seed = 1;
  int64_t window = 0;                    // 0: the training sequence length
  bool kv_cache = true;
  // The prompt's special tokens ("<|im_start|>", "<|eot_id|>", ... as the
  // tokenizer's added tokens name them) become their ids, as transformers'
  // tokenizers encode them and as --sft's chat templates write them; false:
  // their text is encoded as any other text.
  bool special_tokens = false;
  std::function<void(char)> on_char;     // each character as it is produced
  // The logits each token is drawn from (vocab floats), with the number of
  // tokens the model read before it (the prompt's length for the first).
  std::function<void(int64_t, const float*)> on_logits;
  SampleStats* stats = nullptr;          // filled in when given
  BackendOptions backend;                // host and host_threads: the model's Interpreter
  void validate() const;
};
// The tokenizer is the checkpoint's (TrainMeta::tokenizer). A prompt with a
// character it cannot represent is refused (data::UnknownTextError naming
// its position). The generated text (without the prompt): with the char
// tokenizer every character is a symbol of data::alphabet(); with the byte
// tokenizer it is bytes, possibly not valid UTF-8.
std::string sample(const SampleOptions& o);

}  // namespace capstep::train
