// Instruction data (capstep/sft.h, `train --sft`): the masked loss against
// PyTorch's cross_entropy(ignore_index=-100) and f64 finite differences; the
// chat formats' ids and trained tokens against transformers'
// apply_chat_template (tests/golden/sft, scripts/make-sft-goldens); bad rows;
// padding, packing and cutting; a training run whose first loss is a
// hand-built masked batch's, from the library and from the CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "capstep/autodiff.h"
#include "capstep/hf.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/safetensors.h"
#include "capstep/sft.h"
#include "capstep/trace.h"
#include "capstep/train.h"
#include "gradcheck_util.h"
#include "process_util.h"
#include "test_util.h"

using namespace capstep;
using capstep::test::error_of;
using capstep::test::slurp;
using capstep::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* s = std::getenv("CAPSTEP_SOURCE_DIR");
  return s ? s : fs::path(__FILE__).parent_path().parent_path().string();
}

// loss = masked_cross_entropy(logits, targets) over f64 logits.
Program masked_ce_program(const Shape& logits_shape) {
  Tracer tr;
  Tensor l = tr.input("logits", {DType::f64, logits_shape});
  Tensor t = tr.input("targets", {DType::i32, Shape(logits_shape.begin(), logits_shape.end() - 1)});
  return tr.finish({{"loss", masked_cross_entropy(l, t)}});
}

TEST(Sft, MaskedLossEqualsPyTorchIgnoreIndex) {
  const SafetensorsFile g = read_safetensors(source_dir() + "/tests/golden/sft/masked_ce.safetensors");
  const Array& logits = *g.find("logits");
  const Array& targets = *g.find("targets");
  const Program p = masked_ce_program(logits.type().shape);
  const Program vg = value_and_grad(p, {"logits"});
  host::Interpreter in(vg);
  const std::vector<Array> out = in.run({logits, targets});
  const double want = g.find("loss")->get(0);
  EXPECT_NEAR(out[0].get(0), want, 1e-13 * std::fabs(want));
  const Array& grad = *g.find("grad");
  ASSERT_EQ(out[1].type(), grad.type());
  double worst = 0;
  for (int64_t i = 0; i < grad.numel(); ++i) worst = std::max(worst, std::fabs(out[1].get(i) - grad.get(i)));
  EXPECT_LT(worst, 1e-15);
  // Ignored positions get no gradient at all.
  for (int64_t pos = 0; pos < targets.numel(); ++pos)
    if (targets.data<int32_t>()[pos] < 0) {
      for (int64_t c = 0; c < 11; ++c) EXPECT_EQ(out[1].get(pos * 11 + c), 0.0);
    }
  // All ignored: PyTorch gives NaN (0/0); capstep 0 (documented in trace.h).
  EXPECT_TRUE(std::isnan(g.find("none_loss")->get(0)));
  Array none(targets.type());
  for (int64_t i = 0; i < none.numel(); ++i) none.data<int32_t>()[i] = -100;
  EXPECT_EQ(host::Interpreter(p).run({logits, none})[0].get(0), 0.0);
}

TEST(Sft, MaskedLossGradientMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  const Shape s{2, 4, 6};
  const Program p = masked_ce_program(s);
  Array targets({DType::i32, {2, 4}});
  const int32_t t[8] = {-100, 3, 5, -100, 0, -100, 2, 1};
  for (int i = 0; i < 8; ++i) targets.data<int32_t>()[i] = t[i];
  const gradcheck::Report r =
      gradcheck::check(p, {gradcheck::random_array(rng, {DType::f64, s}, -3, 3), targets}, {"logits"});
  EXPECT_EQ(r.checked, 48);
  EXPECT_LT(r.max_rel_err, 1e-7) << r.worst;
}

// With no target ignored, the masked loss is the plain mean cross-entropy;
// a target >= V is still the gather's error.
TEST(Sft, MaskedLossWithNothingIgnoredIsCrossEntropy) {
  std::mt19937 rng(9);
  Tracer tr;
  Tensor l = tr.input("logits", {DType::f64, {3, 7}});
  Tensor t = tr.input("targets", {DType::i32, {3}});
  host::Interpreter both(tr.finish({{"masked", masked_cross_entropy(l, t)}, {"plain", cross_entropy(l, t)}}));
  Array targets({DType::i32, {3}});
  for (int i = 0; i < 3; ++i) targets.data<int32_t>()[i] = 2 * i + 1;
  const std::vector<Array> out = both.run({gradcheck::random_array(rng, {DType::f64, {3, 7}}, -2, 2), targets});
  EXPECT_NEAR(out[0].get(0), out[1].get(0), 1e-14);
  targets.data<int32_t>()[1] = 7;
  EXPECT_ANY_THROW(both.run({gradcheck::random_array(rng, {DType::f64, {3, 7}}), targets}));
}

data::Tokenizer golden_tokenizer(const std::string& dir) {
  return data::Tokenizer::from_bytelevel(slurp(source_dir() + "/" + dir + "/tokenizer.json"));
}

TEST(Sft, ChatFormatsEqualApplyChatTemplate) {
  const nlohmann::json cases = nlohmann::json::parse(slurp(source_dir() + "/tests/golden/sft/chat.json"));
  ASSERT_EQ(cases.size(), 3u);
  for (const nlohmann::json& c : cases) {
    const data::Tokenizer t = golden_tokenizer(c["tokenizer"].get<std::string>());
    const data::ChatTemplate ct = data::parse_chat_template(c["template"].get<std::string>());
    EXPECT_EQ(data::detect_chat_template(t), ct) << c["tokenizer"];
    const std::optional<int32_t> eos = t.token_id("<|endoftext|>");
    for (const nlohmann::json& conv : c["conversations"]) {
      data::SftExample e;
      for (const nlohmann::json& m : conv["messages"])
        e.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      const data::SftRow r = data::render_sft(e, ct, t, eos);
      const std::vector<int32_t> ids = conv["ids"].get<std::vector<int32_t>>();
      std::vector<uint8_t> mask;
      for (int v : conv["assistant_mask"].get<std::vector<int>>()) mask.push_back(static_cast<uint8_t>(v));
      EXPECT_EQ(r.ids, ids) << c["template"] << " " << conv["messages"].dump();
      EXPECT_EQ(r.trained, mask) << c["template"] << " " << conv["messages"].dump();
    }
  }
  // A template whose tokens the tokenizer lacks.
  EXPECT_NE(error_of([&] { data::check_chat_template(data::ChatTemplate::llama3, golden_tokenizer("tests/golden/hf/pretok/qwen2")); })
                .find("needs the token \"<|begin_of_text|>\""),
            std::string::npos);
  EXPECT_NE(error_of([] { data::parse_chat_template("alpaca"); }).find("chatml, llama3 or plain"), std::string::npos);
}

TEST(Sft, PromptCompletionRowsAndBadRows) {
  const std::vector<data::SftExample> ex = data::parse_sft_jsonl(
      "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}\r\n",
      "f.jsonl");
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_TRUE(ex[0].prompt_completion);
  EXPECT_EQ(ex[0].messages[1].role, "assistant");
  EXPECT_EQ(ex[0].messages[1].content, "b");
  EXPECT_EQ(ex[1].line, 3);
  // plain: prompt, completion, EOS; only the last two are trained.
  const data::Tokenizer bytes = data::Tokenizer::parse("byte");
  const data::SftRow r = data::render_sft(ex[0], data::ChatTemplate::plain, bytes, 7);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{'a', 'b', 7}));
  EXPECT_EQ(r.trained, (std::vector<uint8_t>{0, 1, 1}));

  const std::string good = "{\"prompt\": \"p\", \"completion\": \"c\"}\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"prompt\": \"p\", \"completion\": ", "f.jsonl line 2 is not JSON"},
      {"[1, 2]", "f.jsonl line 2: a row must be a JSON object"},
      {"{\"prompt\": \"p\"}", "f.jsonl line 2: \"prompt\" without \"completion\""},
      {"{\"completion\": \"c\"}", "f.jsonl line 2: \"completion\" without \"prompt\""},
      {"{\"text\": \"t\"}", "f.jsonl line 2: a row needs \"messages\" or \"prompt\" and \"completion\""},
      {"{\"prompt\": 3, \"completion\": \"c\"}", "f.jsonl line 2: \"prompt\" must be a string, got number"},
      {"{\"messages\": []}", "f.jsonl line 2: \"messages\" is empty"},
      {"{\"messages\": {}}", "f.jsonl line 2: \"messages\" must be an array"},
      {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
       "f.jsonl line 2: messages[0].role \"tool\" is not one of system, user, assistant"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": null}]}",
       "f.jsonl line 2: messages[1].content must be a string, got null"},
      {"{\"messages\": [{\"role\": \"user\"}]}", "f.jsonl line 2: messages[0] has no \"content\""},
      {"{\"messages\": [\"hi\"]}", "f.jsonl line 2: messages[0] must be an object"},
      {"{\"messages\": [], \"prompt\": \"p\"}", "f.jsonl line 2: a row has either"},
  };
  for (const auto& [row, want] : bad) {
    const std::string e = error_of([&] { data::parse_sft_jsonl(good + row + "\n" + good, "f.jsonl"); });
    EXPECT_EQ(e.substr(0, want.size()), want) << e;
  }
  EXPECT_NE(error_of([] { data::parse_sft_jsonl("\n  \n", "e.jsonl"); }).find("e.jsonl holds no rows"),
            std::string::npos);
}

data::SftRow row_of(int n, int prompt) {
  data::SftRow r;
  for (int i = 0; i < n; ++i) {
    r.ids.push_back(10 + i);
    r.trained.push_back(i >= prompt ? 1 : 0);
  }
  return r;
}

TEST(Sft, PaddingPackingAndCutting) {
  const std::vector<data::SftRow> rows = {row_of(3, 1), row_of(6, 2), row_of(9, 4)};
  // Padded to seq 5: the 9-token row is cut to 6 tokens.
  data::SftBatches padded(rows, {.seq = 5, .batch = 3, .seed = 1});
  EXPECT_EQ(padded.units(), 3u);
  EXPECT_EQ(padded.cut(), 1u);
  // Targets: row 0: 2 (ids 1, 2 trained); row 1: 4 (ids 2..5); row 2: 2 (ids 4, 5 of the cut 6).
  EXPECT_EQ(padded.targets(), 2 + 4 + 2);
  EXPECT_EQ(padded.empty_units(), 0u);
  // A row whose trained tokens are all past seq + 1 has no target left.
  EXPECT_EQ(data::SftBatches({row_of(9, 7), row_of(3, 1)}, {.seq = 5}).empty_units(), 1u);
  Array in({DType::i32, {3, 5}}), tg({DType::i32, {3, 5}});
  // Find a batch whose first row is unit 0 and check it exactly.
  uint64_t k = 0;
  while (padded.unit_of(k, 0) != 0) ++k;
  padded.fill_rows(k, 0, in, tg);
  const std::vector<int32_t> in0(in.data<int32_t>(), in.data<int32_t>() + 5), tg0(tg.data<int32_t>(), tg.data<int32_t>() + 5);
  EXPECT_EQ(in0, (std::vector<int32_t>{10, 11, 0, 0, 0}));
  EXPECT_EQ(tg0, (std::vector<int32_t>{11, 12, -100, -100, -100}));
  // Deterministic from the seed; another seed draws other units.
  data::SftBatches again(rows, {.seq = 5, .batch = 3, .seed = 1}), other(rows, {.seq = 5, .batch = 3, .seed = 2});
  int differ = 0;
  for (uint64_t i = 0; i < 20; ++i)
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(again.unit_of(i, r), padded.unit_of(i, r));
      differ += other.unit_of(i, r) != padded.unit_of(i, r);
    }
  EXPECT_GT(differ, 0);
  // No prompt mask: every real next token (17 - 1 per row... cut row: 5) is a target.
  data::SftBatches all(rows, {.seq = 5, .batch = 3, .seed = 1, .mask_prompt = false});
  EXPECT_EQ(all.targets(), 2 + 5 + 5);
  // Packed: 18 tokens in windows of 6 starting at 0, 5, 10, 15; nothing cut.
  data::SftBatches packed(rows, {.seq = 5, .batch = 2, .seed = 1, .pack = true});
  EXPECT_EQ(packed.units(), 4u);
  EXPECT_EQ(packed.cut(), 0u);
  // Trained tokens 1..17 (all but each row's first `prompt`): 2 + 4 + 5 = 11, every one a target once.
  EXPECT_EQ(packed.targets(), 11);
  // Errors: rows outside the batch, arrays of another type.
  Array wrong({DType::i32, {3, 4}});
  EXPECT_NE(error_of([&] { packed.fill_rows(0, 0, in, tg); }).find("not within the batch of 2"), std::string::npos);
  EXPECT_NE(error_of([&] { padded.fill_rows(0, 0, wrong, wrong); }).find("i32[R, 5]"), std::string::npos);
}

// A row file for the gpt2-bpe tokenizer (plain: no chat tokens); the third
// row is longer than --seq 16 and is cut.
std::string rows_jsonl() {
  return "{\"prompt\": \"Q: 2+2?\\nA:\", \"completion\": \" 4\"}\n"
         "{\"messages\": [{\"role\": \"system\", \"content\": \"Be short.\"}, {\"role\": \"user\", \"content\": "
         "\"Say hi\"}, {\"role\": \"assistant\", \"content\": \"hi\"}]}\n"
         "{\"prompt\": \"Repeat: the tokenizer's pieces stand for bytes, lines of text, many of them\", "
         "\"completion\": \" the tokenizer's pieces stand for bytes\"}\n"
         "{\"prompt\": \"x = \", \"completion\": \"f(7)\"}\n";
}

// train() on --sft rows: the first step's loss is the masked loss of batch 0
// as SftBatches makes it, at the directory's weights.
TEST(Sft, TrainFirstLossIsTheHandBuiltMaskedBatch) {
  const std::string dir = source_dir() + "/tests/golden/hf/gpt2-bpe";
  TempDir d;
  const std::string path = d.write("rows.jsonl", rows_jsonl());
  nn::HfModel m = nn::read_hf_dir(dir);
  train::Options o;
  o.model = m.config;
  o.model.batch = 2;
  o.model.seq = 16;
  o.init_from = dir;
  o.tokenizer = m.tokenizer;
  o.tokenizer_model = m.tokenizer_model;
  o.sft_path = path;
  o.steps = 3;
  std::vector<std::string> said;
  o.on_message = [&](const std::string& s) { said.push_back(s); };
  const train::Result r = train::train(o);
  ASSERT_EQ(r.losses.size(), 3u) << r.stopped;
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  bool cut_line = false;
  for (const std::string& s : said) cut_line |= s == "1 of 4 rows cut to --seq 16";
  EXPECT_TRUE(cut_line) << ::testing::PrintToString(said);

  const data::Tokenizer t = data::Tokenizer::from_model(m.tokenizer, m.tokenizer_model);
  std::vector<data::SftRow> rows;
  for (const data::SftExample& e : data::parse_sft_jsonl(rows_jsonl(), "rows"))
    rows.push_back(data::render_sft(e, data::ChatTemplate::plain, t, t.token_id("<|endoftext|>")));
  data::SftBatches b(rows, {.seq = 16, .batch = 2, .seed = 1});
  EXPECT_EQ(b.cut(), 1u);
  Array tokens({DType::i32, {2, 16}}), targets({DType::i32, {2, 16}});
  b.fill_rows(0, 0, tokens, targets);
  int ignored = 0;
  for (int i = 0; i < 32; ++i) ignored += targets.data<int32_t>()[i] == -100;
  EXPECT_GT(ignored, 0);
  EXPECT_LT(ignored, 32);
  std::vector<Array> ins = m.params;
  ins.push_back(tokens);
  ins.push_back(targets);
  nn::LmConfig c = m.config;
  c.batch = 2, c.seq = 16;
  const double want = host::Interpreter(nn::lm_loss_program(c, DType::f32, true)).run(ins)[0].get(0);
  EXPECT_NEAR(r.losses[0], want, 1e-5 * want);
  // The unmasked loss of that batch is another number: the mask matters.
  for (int i = 0; i < 32; ++i)
    if (targets.data<int32_t>()[i] == -100) targets.data<int32_t>()[i] = tokens.data<int32_t>()[i];
  ins.back() = targets;
  EXPECT_GT(std::fabs(host::Interpreter(nn::lm_loss_program(c, DType::f32, true)).run(ins)[0].get(0) - want), 1e-3);

  // Errors: sft with a text; a tokenizer that is not trained.
  train::Options bad = o;
  bad.text_path = path;
  EXPECT_NE(error_of([&] { train::train(bad); }).find("give one of text, tokens and sft"), std::string::npos);
  bad = o;
  bad.sft_path = d.write("bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": 1}\n");
  EXPECT_NE(error_of([&] { train::train(bad); }).find("bad.jsonl line 2: \"prompt\" without \"completion\""),
            std::string::npos);
  bad = o;
  bad.sft_path = d.write("long.jsonl", "{\"prompt\": \"" + std::string(40, 'x') + "\", \"completion\": \"y\"}\n");
  EXPECT_NE(error_of([&] { train::train(bad); }).find("no training row has a trained token within --seq 16"),
            std::string::npos);
}

// A one-layer Llama in d/name with the chat tokenizer of
// tests/golden/hf/pretok/<name> (t: that tokenizer), read back as
// transformers' directory.
nn::HfModel chat_model(TempDir& d, const std::string& name, const data::Tokenizer& t, int64_t context) {
  nn::LmConfig c;
  c.arch = nn::Arch::llama;
  c.vocab = t.vocab();
  c.n_layers = 1, c.d_model = 16, c.n_heads = 2, c.d_ff = 16, c.context = context, c.seq = 16, c.batch = 2;
  const std::string dir = d.file(name);
  nn::write_hf_dir(dir, c, nn::init_parameters(c, 3));
  fs::copy_file(source_dir() + "/tests/golden/hf/pretok/" + name + "/tokenizer.json", dir + "/tokenizer.json");
  return nn::read_hf_dir(dir);
}

// Training options on that model (in `dir`), batches of 2 x seq.
train::Options chat_model_options(const nn::HfModel& m, const std::string& dir, int64_t seq) {
  train::Options o;
  o.model = m.config;
  o.model.batch = 2, o.model.seq = seq;
  o.init_from = dir;
  o.tokenizer = m.tokenizer;
  o.tokenizer_model = m.tokenizer_model;
  return o;
}

// A Llama whose directory holds a tokenizer with chat tokens (the
// tokenizer.json of tests/golden/hf/pretok/qwen2: chatml; pretok/llama3:
// llama3): train() picks the format from the tokens, and its first loss is
// the hand-built masked batch's.
TEST(Sft, ChatTokenizerPicksItsFormatInTraining) {
  TempDir d;
  const std::string path = d.write(
      "rows.jsonl",
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be short.\"}, {\"role\": \"user\", \"content\": "
      "\"Say hi\"}, {\"role\": \"assistant\", \"content\": \"hi\"}]}\n"
      "{\"prompt\": \"Count: 1 2 3\", \"completion\": \"4 5\"}\n");
  for (const auto& [name, want] : std::vector<std::pair<std::string, std::string>>{{"qwen2", "chatml"},
                                                                                         {"llama3", "llama3"}}) {
    const data::Tokenizer t = golden_tokenizer("tests/golden/hf/pretok/" + name);
    const nn::HfModel m = chat_model(d, name, t, 128);
    train::Options o = chat_model_options(m, d.file(name), 64);
    o.sft_path = path;
    o.steps = 2;
    std::vector<std::string> said;
    o.on_message = [&](const std::string& s) { said.push_back(s); };
    const train::Result r = train::train(o);
    ASSERT_EQ(r.losses.size(), 2u) << r.stopped;
    ASSERT_FALSE(said.empty());
    EXPECT_EQ(said[0], "instruction data: 2 rows, chat template " + want + ", padded to --seq 64, loss on completions only");
    std::vector<data::SftRow> rows;
    for (const data::SftExample& e : data::parse_sft_jsonl(slurp(path), "rows"))
      rows.push_back(data::render_sft(e, data::parse_chat_template(want), t, std::nullopt));
    data::SftBatches b(rows, {.seq = 64, .batch = 2, .seed = 1});
    EXPECT_EQ(b.cut(), 0u);
    Array tokens({DType::i32, {2, 64}}), targets({DType::i32, {2, 64}});
    b.fill_rows(0, 0, tokens, targets);
    std::vector<Array> ins = m.params;
    ins.push_back(tokens);
    ins.push_back(targets);
    const double first = host::Interpreter(nn::lm_loss_program(o.model, DType::f32, true)).run(ins)[0].get(0);
    EXPECT_NEAR(r.losses[0], first, 1e-5 * first) << name;
  }
}

// `sample --special-tokens`: a ChatML prompt's "<|im_start|>" and
// "<|im_end|>" go to the model as their ids (as transformers' tokenizer and
// the chat template of training write them), not as the text's pieces; and
// the first token's logits are the loss program's at the last prompt
// position of those ids.
TEST(Sft, SampleReadsChatTokensAsTheirIds) {
  TempDir d;
  const data::Tokenizer t = golden_tokenizer("tests/golden/hf/pretok/qwen2");
  const nn::HfModel m = chat_model(d, "qwen2", t, 64);
  const nn::LmConfig& c = m.config;
  train::Options o = chat_model_options(m, d.file("qwen2"), 32);
  o.sft_path = d.write("rows.jsonl", "{\"prompt\": \"Say hi\", \"completion\": \"hi\"}\n");
  o.steps = 1;
  o.save_path = d.file("ck.st");
  ASSERT_EQ(train::train(o).losses.size(), 1u);
  const std::string prompt = "<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int32_t> ids = t.encode(prompt, nullptr, true).to_vector();
  ASSERT_LT(ids.size(), t.encode(prompt).size());   // the special tokens are one id each only when asked
  for (const bool special : {false, true}) {
    train::SampleStats st;
    std::vector<float> first;
    train::SampleOptions so;
    so.checkpoint = o.save_path;
    so.prompt = prompt;
    so.tokens = 1;
    so.temperature = 0;
    so.special_tokens = special;
    so.window = c.context;
    so.stats = &st;
    so.on_logits = [&](int64_t, const float* l) {
      if (first.empty()) first.assign(l, l + c.vocab);
    };
    train::sample(so);
    EXPECT_EQ(static_cast<size_t>(st.prompt_tokens), special ? ids.size() : t.encode(prompt).size());
    if (!special) continue;
    // The forward program at those ids: its logits at the prompt's last position.
    const int64_t n = static_cast<int64_t>(ids.size());
    Array tokens({DType::i32, {1, n}});
    for (int64_t i = 0; i < n; ++i) tokens.set(i, ids[static_cast<size_t>(i)]);
    train::TrainMeta meta;
    const Checkpoint ck = train::load_model_checkpoint(o.save_path, &meta);
    std::vector<Array> ins;
    for (const NamedArray& p : ck.params) ins.push_back(p.array);
    ins.push_back(tokens);
    const Array logits = host::Interpreter(nn::lm_logits_program(meta.model, n)).run(ins)[0];
    ASSERT_EQ(first.size(), static_cast<size_t>(c.vocab));
    for (int64_t v = 0; v < c.vocab; ++v)
      ASSERT_NEAR(first[static_cast<size_t>(v)], logits.get((n - 1) * c.vocab + v), 1e-4) << v;
  }
}

// A run on instruction data resumed from its checkpoint takes the same
// batches: its losses are bit-identical to an uninterrupted run's; the
// checkpoint records the file and settings.
TEST(Sft, ResumedRunIsBitIdentical) {
  const std::string dir = source_dir() + "/tests/golden/hf/gpt2-bpe";
  TempDir d;
  const std::string path = d.write("rows.jsonl", rows_jsonl());
  nn::HfModel m = nn::read_hf_dir(dir);
  train::Options o;
  o.model = m.config;
  o.model.batch = 2;
  o.model.seq = 16;
  o.init_from = dir;
  o.tokenizer = m.tokenizer;
  o.tokenizer_model = m.tokenizer_model;
  o.sft_path = path;
  o.sft_pack = true;
  o.steps = 4;
  const train::Result whole = train::train(o);
  ASSERT_EQ(whole.losses.size(), 4u) << whole.stopped;
  o.steps = 2;
  o.save_path = d.file("ck.st");
  ASSERT_EQ(train::train(o).losses.size(), 2u);
  train::TrainMeta meta;
  train::load_model_checkpoint(o.save_path, &meta);
  ASSERT_TRUE(meta.sft.has_value());
  EXPECT_EQ(meta.sft->path, train::absolute_path(path));
  EXPECT_TRUE(meta.sft->pack);
  EXPECT_TRUE(meta.sft->mask_prompt);
  train::Options r = o;
  r.init_from.clear();
  r.tokenizer_model.clear();
  r.resume_path = o.save_path;
  r.save_path.clear();
  r.steps = 4;
  const train::Result rest = train::train(r);
  ASSERT_EQ(rest.losses.size(), 2u) << rest.stopped;
  EXPECT_EQ(rest.losses[0], whole.losses[2]);
  EXPECT_EQ(rest.losses[1], whole.losses[3]);
}

TEST(Sft, CliTrainsOnRows) {
  const std::string bin = test::capstep_binary();
  if (bin.empty() || !fs::exists(bin)) GTEST_SKIP() << "no capstep binary beside the test";
  TempDir d;
  const std::string path = d.write("rows.jsonl", rows_jsonl());
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin);
    const pid_t pid = test::spawn_process(args, d.file("out"), d.file("err"));
    int status = 0;
    waitpid(pid, &status, 0);
    test::Outcome o;
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    o.out = slurp(d.file("out"));
    o.err = slurp(d.file("err"));
    return o;
  };
  const std::string dir = source_dir() + "/tests/golden/hf/gpt2-bpe";
  test::Outcome r = run({"train", "--init-from", dir, "--sft", path, "--steps", "3", "--seq", "16", "--batch", "2",
                         "--no-progress", "--sft-pack", "--val-fraction", "0.25"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("sft: " + path), std::string::npos) << r.out;
  EXPECT_NE((r.out + r.err).find("instruction data: 4 rows, chat template plain, packed to --seq 16"),
            std::string::npos)
      << r.out << r.err;
  r = run({"train", "--init-from", dir, "--sft", path, "--steps", "3", "--seq", "16", "--batch", "2", "--no-progress",
           "--no-mask-prompt"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("1 of 4 rows cut to --seq 16"), std::string::npos) << r.out << r.err;
  // --resume alone continues on the checkpoint's rows and settings.
  const std::string ck = d.file("ck.st");
  r = run({"train", "--init-from", dir, "--sft", path, "--steps", "2", "--seq", "16", "--batch", "2", "--no-progress",
           "--sft-pack", "--save", ck});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  r = run({"train", "--resume", ck, "--steps", "3", "--no-progress"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("note: the instruction data '" + train::absolute_path(path) + "' comes from the checkpoint"),
            std::string::npos)
      << r.out;
  EXPECT_NE((r.out + r.err).find("packed to --seq 16"), std::string::npos) << r.out << r.err;
  r = run({"train", "--init-from", dir, "--sft", path, "--steps", "1", "--chat-template", "chatml"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("needs the token \"<|im_start|>\""), std::string::npos) << r.err;
  r = run({"train", "--steps", "1", "--sft-pack"});
  EXPECT_NE(r.code, 0);
}

}  // namespace
