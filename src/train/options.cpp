// Lane names and the range checks of train::Options and SampleOptions.
#include <algorithm>
#include <cmath>
#include <string>

#include "capstep/data.h"
#include "capstep/token_file.h"
#include "capstep/train.h"

namespace capstep::train {

BackendOptions lane_backend_options(const BackendOptions& base, Communicator* comm) {
  BackendOptions bo = base;
  bo.cuda.cuda_graph = true;
  bo.communicator = comm;
  return bo;
}

const char* schedule_name(Schedule s) { return s == Schedule::cosine ? "cosine" : "constant"; }

Schedule parse_schedule(const std::string& s) {
  for (Schedule k : {Schedule::constant, Schedule::cosine})
    if (s == schedule_name(k)) return k;
  throw Error("unknown schedule '" + s + "'; the schedules are constant, cosine");
}

double scheduled_lr(const LrSchedule& s, double lr, int64_t step, int64_t steps) {
  if (step < 1) throw Error("the schedule counts steps from 1, got " + std::to_string(step));
  if (s.warmup_steps > 0 && step <= s.warmup_steps)
    return lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  if (s.kind == Schedule::constant) return lr;
  const int64_t span = steps - s.warmup_steps;
  if (span <= 0) return lr;
  const double t = std::min(1.0, static_cast<double>(step - s.warmup_steps) / static_cast<double>(span));
  return s.min_lr + (lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
}

bool is_loss_spike(const double* recent, size_t n, double loss) {
  if (n < 2) return false;
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += recent[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (size_t i = 0; i < n; ++i) var += (recent[i] - mean) * (recent[i] - mean);
  const double sd = std::sqrt(var / static_cast<double>(n));
  return loss > 1.5 * mean && loss > mean + 5 * sd;
}

void Options::validate() const {
  model.validate();
  adamw.validate();
  const int64_t vocab = data::Tokenizer::parse(tokenizer).vocab();
  if (model.vocab != vocab)
    throw Error("the model's vocabulary must be the " + tokenizer + " tokenizer's " + std::to_string(vocab) +
                " symbols, got " + std::to_string(model.vocab));
  if (steps < 1 || steps > 100000000) throw Error("steps must be in [1, 100000000], got " + std::to_string(steps));
  if (save_every < 0) throw Error("save-every must be >= 0 (0: only at the end), got " + std::to_string(save_every));
  if (schedule.warmup_steps < 0 || schedule.warmup_steps > 100000000)
    throw Error("warmup-steps must be in [0, 100000000], got " + std::to_string(schedule.warmup_steps));
  if (!std::isfinite(schedule.min_lr) || schedule.min_lr < 0 || schedule.min_lr > adamw.lr)
    throw Error("min-lr must be in [0, lr " + std::to_string(adamw.lr) + "], got " + std::to_string(schedule.min_lr));
  if (!std::isfinite(clip_grad_norm) || clip_grad_norm < 0 || clip_grad_norm > 1e30)
    throw Error("clip-grad-norm must be in [0, 1e30] (0: no clipping), got " + std::to_string(clip_grad_norm));
  if (checkpoint_every < 0 || checkpoint_every > 256)
    throw Error("checkpoint-every must be in [0, 256] (0: no activation checkpointing), got " +
                std::to_string(checkpoint_every));
  if (!std::isfinite(val_fraction) || val_fraction < 0 || val_fraction >= 1)
    throw Error("val-fraction must be in [0, 1) (0: no validation), got " + std::to_string(val_fraction));
  if (eval_every < 0) throw Error("eval-every must be >= 0 (0: only at the end), got " + std::to_string(eval_every));
  if (eval_batches < 1 || eval_batches > 100000)
    throw Error("eval-batches must be in [1, 100000], got " + std::to_string(eval_batches));
  if (grad_accum < 1 || grad_accum > 1000000)
    throw Error("grad-accum must be in [1, 1000000] (1: no accumulation), got " + std::to_string(grad_accum));
  if (save_every > 0 && save_path.empty()) throw Error("save-every needs a checkpoint path to save to");
  if (!init_from.empty() && !resume_path.empty())
    throw Error("init-from starts a run from a model's weights and resume continues a checkpoint: give one");
  if (!tokens_path.empty() && !text_path.empty())
    throw Error("token files (tokens) take the place of the text: give one of text and tokens");
  if (!val_tokens_path.empty() && tokens_path.empty()) throw Error("val-tokens needs token files to train on (tokens)");
  if (!sft_path.empty() && (!text_path.empty() || !tokens_path.empty()))
    throw Error("instruction data (sft) takes the place of the text and token files: give one of text, tokens and sft");
  if (sft_path.empty() && (!chat_template.empty() || sft_pack || !mask_prompt))
    throw Error("chat-template, sft-pack and no-mask-prompt need instruction data (sft)");
  if (!chat_template.empty() && chat_template != "chatml" && chat_template != "llama3" && chat_template != "plain")
    throw Error("unknown chat template '" + chat_template + "' (chatml, llama3 or plain)");
  if (!val_tokens_path.empty() && val_fraction > 0)
    throw Error("val-tokens gives the validation ids and val-fraction cuts them from the training ids: give one");
  data::parse_token_file_format(tokens_format);   // Error naming the layouts
  if (lora.rank < 0) throw Error("lora rank must be >= 0 (0: no LoRA), got " + std::to_string(lora.rank));
  if (!(lora.alpha > 0) || !std::isfinite(lora.alpha)) throw Error("lora alpha must be positive, got " + std::to_string(lora.alpha));
  if (lora.rank > 0 && !lora.from.empty()) throw Error("lora: give a rank or a PEFT directory to start from, not both");
  if (!tokenizer_model.empty()) {
    if (!resume_path.empty()) throw Error("a resumed run takes its checkpoint's tokenizer; give no tokenizer model");
    data::Tokenizer::from_model(tokenizer, tokenizer_model);   // Error for char, byte or a model of another size
  }
}

void SampleOptions::validate() const {
  if (checkpoint.empty()) throw Error("sampling needs a checkpoint");
  if (tokens < 0 || tokens > 1000000) throw Error("tokens must be in [0, 1000000], got " + std::to_string(tokens));
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100)
    throw Error("temperature must be in [0, 100] (0: always the most likely symbol), got " + std::to_string(temperature));
  if (top_k < 0 || top_k > 1 << 20) throw Error("top-k must be in [0, 1048576] (0: no limit), got " + std::to_string(top_k));
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1)
    throw Error("top-p must be in (0, 1] (1: no limit), got " + std::to_string(top_p));
  if (window < 0) throw Error("window must be >= 0 (0: the training sequence length), got " + std::to_string(window));
}

}  // namespace capstep::train
