// Instruction data (supervised fine-tuning, `capstep train --sft FILE.jsonl`):
// JSONL rows of {"prompt": ..., "completion": ...} or {"messages": [{"role":
// "system"|"user"|"assistant", "content": ...}, ...]}, rendered in the chat
// format of the model's family, tokenized, with the loss on the completion /
// assistant tokens only (their end token included), and made into batches of
// i32[batch, seq] whose ignored targets are -100 (masked_cross_entropy, trace.h).
//
//   std::vector<data::SftExample> ex = data::parse_sft_jsonl(text, "rows.jsonl");
//   data::ChatTemplate t = data::detect_chat_template(tokenizer);
//   std::vector<data::SftRow> rows;
//   for (auto& e : ex) rows.push_back(data::render_sft(e, t, tokenizer, eos));
//   data::SftBatches b(rows, {.seq = 256, .batch = 8, .seed = 1});
//   b.fill_rows(k, 0, tokens, targets);          // batch k
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/data.h"

namespace capstep::data {

// The chat formats, written out here (not a Jinja template):
//   chatml  (Qwen2.5, SmolLM2): per message "<|im_start|>{role}\n{content}<|im_end|>\n".
//           No default system message is inserted (Qwen2.5's own template adds
//           "You are Qwen, created by Alibaba Cloud..." when there is none;
//           capstep renders only the messages the row has: give a system
//           message in the row to get one).
//   llama3  "<|begin_of_text|>", then per message
//           "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
//           (the content as it is, not trimmed; no default system message).
//   plain   no markers: each message's content as it is, one after the
//           other, an assistant's followed by EOS (the eos id given to
//           render_sft, if any); a prompt/completion row is prompt,
//           completion, EOS.
// A prompt/completion row is a user message (the prompt) and an assistant
// message (the completion) for chatml and llama3.
// Trained tokens (the loss's targets): an assistant message's content and its
// end token ("<|im_end|>", "<|eot_id|>", plain's EOS); every other token (the
// role headers, system and user messages, the "\n" after "<|im_end|>") is
// prompt. Each piece is encoded on its own (special tokens as their ids), so a
// content's ids are those of the content alone; on the conversations of
// tests/golden/sft the ids equal transformers' apply_chat_template's.
enum class ChatTemplate { plain, chatml, llama3 };
const char* chat_template_name(ChatTemplate t);             // "plain", "chatml", "llama3"
ChatTemplate parse_chat_template(const std::string& s);     // those; Error naming them otherwise
// From the tokenizer's tokens: chatml when it has "<|im_start|>" and
// "<|im_end|>", llama3 when it has "<|begin_of_text|>", "<|start_header_id|>",
// "<|end_header_id|>" and "<|eot_id|>", else plain.
ChatTemplate detect_chat_template(const Tokenizer& t);
// Error when `t`'s tokenizer lacks one of the template's tokens, naming it.
void check_chat_template(ChatTemplate c, const Tokenizer& t);

struct ChatMessage {
  std::string role;      // "system", "user" or "assistant"
  std::string content;
};
struct SftExample {
  std::vector<ChatMessage> messages;  // a prompt/completion row: user, assistant
  bool prompt_completion = false;     // the row was {"prompt", "completion"}
  int64_t line = 0;                   // its line in the file (from 1)
};
// One example per non-blank line. Error "<what> line N: ..." for a line that
// is not JSON, not an object, has neither "messages" nor both "prompt" and
// "completion" (or both kinds), a "messages" that is not a non-empty array,
// a message that is not an object, a role outside system/user/assistant, a
// content (or prompt, completion) that is not a string; and for a file with
// no rows.
std::vector<SftExample> parse_sft_jsonl(const std::string& text, const std::string& what);

// A tokenized example: ids and, per id, whether it is a trained token.
struct SftRow {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;   // 1: completion/assistant token (its end token included)
};
// The example in template `c` encoded by `t` (special tokens as their ids).
// eos: plain's end token (e.g. "<|endoftext|>"'s id); none: no end token.
SftRow render_sft(const SftExample& e, ChatTemplate c, const Tokenizer& t, std::optional<int32_t> eos);

// Batches over rows. Unit k of the stream:
//   padded (pack false, the default): one row per unit; its first seq + 1
//     tokens (a longer row is cut there, and counted in cut()), inputs
//     ids[0..n-1), targets ids[1..n), the rest of the seq positions padding
//     (input pad_id, target -100);
//   packed: the rows' tokens one after the other (no separator beyond each
//     row's own end token, attention not reset between rows), in windows of
//     seq + 1 tokens that overlap by one (window j starts at token j*seq), the
//     last one padded; nothing is cut.
// A target is -100 unless its token is trained (or mask_prompt is false: every
// real token is a target; padding stays -100). Row r of batch `index` is unit
// u = f(seed, index, r) (uniform, with replacement, counter-based as
// BatchStream's windows), so any batch comes straight from its index.
struct SftOptions {
  int64_t seq = 16;
  int64_t batch = 4;
  uint64_t seed = 1;
  bool pack = false;
  bool mask_prompt = true;
  int32_t pad_id = 0;
};
class SftBatches {
 public:
  // Error for no rows, seq or batch not positive.
  SftBatches(const std::vector<SftRow>& rows, const SftOptions& o);
  // Rows [first_row, first_row + R) of batch `index` into i32[R, seq] arrays;
  // Error when the rows are outside [0, batch) or the arrays have another type.
  void fill_rows(uint64_t index, int64_t first_row, Array& inputs, Array& targets) const;
  int64_t unit_of(uint64_t index, int64_t row) const;  // which unit row `row` of batch `index` takes
  size_t units() const { return inputs_.size() / static_cast<size_t>(o_.seq); }
  size_t rows() const { return rows_; }
  size_t cut() const { return cut_; }                  // padded: rows longer than seq + 1 tokens
  int64_t targets() const { return n_targets_; }       // non-ignored targets over all units
  size_t empty_units() const { return empty_; }          // units with no target left (a completion cut away)
  uint64_t position() const { return position_; }
  void set_position(uint64_t p) { position_ = p; }

 private:
  SftOptions o_;
  size_t rows_ = 0, cut_ = 0, empty_ = 0;
  int64_t n_targets_ = 0;
  std::vector<int32_t> inputs_, targets_;   // units() x seq each
  uint64_t position_ = 0;
};

}  // namespace capstep::data
