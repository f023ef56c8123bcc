// Instruction data: JSONL rows, chat formats, masked batches (include/capstep/sft.h).
#include "capstep/sft.h"

#include <cstring>

#include "json.h"

namespace capstep::data {


const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::plain: return "plain";
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::llama3: return "llama3";
  }
  return "?";
}

ChatTemplate parse_chat_template(const std::string& s) {
  if (s == "plain") return ChatTemplate::plain;
  if (s == "chatml") return ChatTemplate::chatml;
  if (s == "llama3") return ChatTemplate::llama3;
  throw Error("unknown chat template '" + s + "' (chatml, llama3 or plain)");
}

namespace {

const std::vector<const char*>& template_tokens(ChatTemplate c) {
  static const std::vector<const char*> none, chatml = {"<|im_start|>", "<|im_end|>"},
                                              llama3 = {"<|begin_of_text|>", "<|start_header_id|>",
                                                        "<|end_header_id|>", "<|eot_id|>"};
  switch (c) {
    case ChatTemplate::plain: return none;
    case ChatTemplate::chatml: return chatml;
    case ChatTemplate::llama3: return llama3;
  }
  return none;
}

bool has_all(ChatTemplate c, const Tokenizer& t) {
  for (const char* s : template_tokens(c))
    if (!t.token_id(s)) return false;
  return true;
}

}  // namespace

ChatTemplate detect_chat_template(const Tokenizer& t) {
  if (!t.trained()) return ChatTemplate::plain;
  if (has_all(ChatTemplate::chatml, t)) return ChatTemplate::chatml;
  if (has_all(ChatTemplate::llama3, t)) return ChatTemplate::llama3;
  return ChatTemplate::plain;
}

void check_chat_template(ChatTemplate c, const Tokenizer& t) {
  for (const char* s : template_tokens(c))
    if (!t.trained() || !t.token_id(s))
      throw Error(std::string("chat template ") + chat_template_name(c) + " needs the token \"" + s + "\", which the " +
                  t.name() + " tokenizer does not have");
}

std::vector<SftExample> parse_sft_jsonl(const std::string& text, const std::string& what) {
  std::vector<SftExample> out;
  size_t at = 0;
  int64_t line = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = what + " line " + std::to_string(line);
    nlohmann::json j = parse_json(row, where);
    if (!j.is_object()) throw Error(where + ": a row must be a JSON object, got " + std::string(j.type_name()));
    SftExample e;
    e.line = line;
    const bool has_m = j.contains("messages"), has_p = j.contains("prompt"), has_c = j.contains("completion");
    if (has_m && (has_p || has_c))
      throw Error(where + ": a row has either \"messages\" or \"prompt\" and \"completion\", not both");
    if (has_m) {
      const nlohmann::json& m = j["messages"];
      if (!m.is_array()) throw Error(where + ": \"messages\" must be an array, got " + std::string(m.type_name()));
      if (m.empty()) throw Error(where + ": \"messages\" is empty");
      for (size_t i = 0; i < m.size(); ++i) {
        const std::string mw = where + ": messages[" + std::to_string(i) + "]";
        if (!m[i].is_object()) throw Error(mw + " must be an object, got " + std::string(m[i].type_name()));
        if (!m[i].contains("role")) throw Error(mw + " has no \"role\"");
        if (!m[i].contains("content")) throw Error(mw + " has no \"content\"");
        const nlohmann::json& r = m[i]["role"];
        const nlohmann::json& c = m[i]["content"];
        if (!r.is_string()) throw Error(mw + ".role must be a string, got " + std::string(r.type_name()));
        const std::string role = r.get<std::string>();
        if (role != "system" && role != "user" && role != "assistant")
          throw Error(mw + ".role \"" + role + "\" is not one of system, user, assistant");
        if (!c.is_string()) throw Error(mw + ".content must be a string, got " + std::string(c.type_name()));
        e.messages.push_back({role, c.get<std::string>()});
      }
    } else if (has_p || has_c) {
      if (!has_p) throw Error(where + ": \"completion\" without \"prompt\"");
      if (!has_c) throw Error(where + ": \"prompt\" without \"completion\"");
      for (const char* k : {"prompt", "completion"})
        if (!j[k].is_string())
          throw Error(where + ": \"" + k + "\" must be a string, got " + std::string(j[k].type_name()));
      e.prompt_completion = true;
      e.messages = {{"user", j["prompt"].get<std::string>()}, {"assistant", j["completion"].get<std::string>()}};
    } else {
      throw Error(where + ": a row needs \"messages\" or \"prompt\" and \"completion\"");
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) throw Error(what + " holds no rows");
  return out;
}

SftRow render_sft(const SftExample& e, ChatTemplate c, const Tokenizer& t, std::optional<int32_t> eos) {
  check_chat_template(c, t);
  SftRow r;
  auto text = [&](const std::string& s, bool trained) {
    if (s.empty()) return;
    const TokenIds ids = t.encode(s, nullptr, true);
    for (size_t i = 0; i < ids.size(); ++i) {
      r.ids.push_back(ids[i]);
      r.trained.push_back(trained ? 1 : 0);
    }
  };
  auto special = [&](const char* s, bool trained) {
    r.ids.push_back(*t.token_id(s));
    r.trained.push_back(trained ? 1 : 0);
  };
  switch (c) {
    case ChatTemplate::chatml:
      for (const ChatMessage& m : e.messages) {
        const bool a = m.role == "assistant";
        special("<|im_start|>", false);
        text(m.role + "\n", false);
        text(m.content, a);
        special("<|im_end|>", a);
        text("\n", false);
      }
      break;
    case ChatTemplate::llama3:
      special("<|begin_of_text|>", false);
      for (const ChatMessage& m : e.messages) {
        const bool a = m.role == "assistant";
        special("<|start_header_id|>", false);
        text(m.role, false);
        special("<|end_header_id|>", false);
        text("\n\n", false);
        text(m.content, a);
        special("<|eot_id|>", a);
      }
      break;
    case ChatTemplate::plain:
      for (const ChatMessage& m : e.messages) {
        const bool a = m.role == "assistant";
        text(m.content, a);
        if (a && eos) {
          r.ids.push_back(*eos);
          r.trained.push_back(1);
        }
      }
      break;
  }
  return r;
}

SftBatches::SftBatches(const std::vector<SftRow>& rows, const SftOptions& o) : o_(o), rows_(rows.size()) {
  if (rows.empty()) throw Error("SFT batches: no rows");
  if (o.seq < 1 || o.batch < 1)
    throw Error("SFT batches: seq and batch must be positive, got seq " + std::to_string(o.seq) + ", batch " +
                std::to_string(o.batch));
  const size_t seq = static_cast<size_t>(o.seq);
  // One unit from tokens [0, n) of ids/trained (n <= seq + 1).
  auto add_unit = [&](const int32_t* ids, const uint8_t* trained, size_t n) {
    const size_t base = inputs_.size();
    const int64_t before = n_targets_;
    inputs_.resize(base + seq, o.pad_id);
    targets_.resize(base + seq, -100);
    for (size_t i = 0; i + 1 < n; ++i) {
      inputs_[base + i] = ids[i];
      if (!o.mask_prompt || trained[i + 1]) {
        targets_[base + i] = ids[i + 1];
        ++n_targets_;
      }
    }
    if (n_targets_ == before) ++empty_;
  };
  if (!o.pack) {
    for (const SftRow& r : rows) {
      const size_t n = r.ids.size();
      if (n > seq + 1) ++cut_;
      add_unit(r.ids.data(), r.trained.data(), std::min(n, seq + 1));
    }
  } else {
    std::vector<int32_t> ids;
    std::vector<uint8_t> tr;
    for (const SftRow& r : rows) {
      ids.insert(ids.end(), r.ids.begin(), r.ids.end());
      tr.insert(tr.end(), r.trained.begin(), r.trained.end());
    }
    for (size_t s = 0; s + 1 < ids.size(); s += seq)
      add_unit(ids.data() + s, tr.data() + s, std::min(ids.size() - s, seq + 1));
  }
  if (inputs_.empty()) throw Error("SFT batches: the rows hold fewer than 2 tokens");
}

int64_t SftBatches::unit_of(uint64_t index, int64_t row) const {
  uint64_t s = o_.seed;
  s = splitmix64(s) ^ index;
  s = splitmix64(s) ^ static_cast<uint64_t>(row);
  const uint64_t r = splitmix64(s);
  return static_cast<int64_t>((static_cast<unsigned __int128>(r) * units()) >> 64);
}

void SftBatches::fill_rows(uint64_t index, int64_t first_row, Array& inputs, Array& targets) const {
  const Type& t = inputs.type();
  const int64_t n = t.shape.size() == 2 ? t.shape[0] : -1;
  if (t.dtype != DType::i32 || t.shape.size() != 2 || t.shape[1] != o_.seq || targets.type() != t)
    throw Error("SFT batches: the arrays must be i32[R, " + std::to_string(o_.seq) + "], got " + t.str() + " and " +
                targets.type().str());
  if (first_row < 0 || first_row + n > o_.batch)
    throw Error("SFT batches: rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + n) +
                ") are not within the batch of " + std::to_string(o_.batch));
  const size_t seq = static_cast<size_t>(o_.seq);
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    const size_t u = static_cast<size_t>(unit_of(index, first_row + r));
    std::memcpy(in + static_cast<size_t>(r) * seq, inputs_.data() + u * seq, seq * sizeof(int32_t));
    std::memcpy(tg + static_cast<size_t>(r) * seq, targets_.data() + u * seq, seq * sizeof(int32_t));
  }
}

}  // namespace capstep::data
