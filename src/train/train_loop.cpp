// The training loop shared by every lane: batches from a resumable stream,
// AdamW scalars from the step number, progress, periodic checkpoints, and a
// stop on the first non-finite loss that leaves the last good checkpoint alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <iomanip>
#include <sstream>

#include <malloc.h>
#include <unistd.h>

#include "capstep/host.h"
#include "capstep/autodiff.h"
#include "capstep/token_file.h"
#include "capstep/trace.h"
#include "capstep/cuda_options.h"
#include "capstep/data.h"
#include "capstep/hf.h"
#include "capstep/host_options.h"
#include "capstep/sft.h"
#include "capstep/train.h"
#include "lora_run.h"
#include "memory.h"

namespace capstep::train {
namespace {

using Clock = std::chrono::steady_clock;

// The parameters that train and both moments (lm_parameters order among
// them), and the frozen parameters (Options::freeze), as the run starts.
struct State {
  std::vector<std::string> names;
  std::vector<Array> params, m, v;
  std::vector<std::string> frozen_names = {};
  std::vector<Array> frozen = {};
};

// The state as a checkpoint that TrainStep::load takes, its arrays moved.
Checkpoint take(State& s, uint64_t step) {
  Checkpoint c;
  for (size_t j = 0; j < s.names.size(); ++j) {
    c.params.push_back({s.names[j], std::move(s.params[j])});
    c.adam_m.push_back({s.names[j], std::move(s.m[j])});
    c.adam_v.push_back({s.names[j], std::move(s.v[j])});
  }
  for (size_t j = 0; j < s.frozen.size(); ++j) c.params.push_back({s.frozen_names[j], std::move(s.frozen[j])});
  c.frozen = s.frozen_names;
  c.step = step;
  s = State{};
  return c;
}

// Index of the first non-finite element of any tensor, named, or "".
std::string first_non_finite(const Checkpoint& c) {
  const std::vector<NamedArray>* groups[3] = {&c.params, &c.adam_m, &c.adam_v};
  const char* labels[3] = {"parameter", "first moment of", "second moment of"};
  for (int g = 0; g < 3; ++g)
    for (const NamedArray& t : *groups[g]) {
      if (t.array.dtype() != DType::f32) continue;   // a LoRA run's bf16 base: frozen
      const float* p = t.array.data<float>();
      for (int64_t i = 0; i < t.array.numel(); ++i)
        if (!std::isfinite(p[i])) return std::string(labels[g]) + " " + t.name + " (element " + std::to_string(i) + ")";
    }
  return "";
}

// Where training starts: a checkpoint, or fresh parameters and zero moments.
// On resume, *meta is the checkpoint's training metadata.
// LoRA: specs and trains end with the adapters (lr.start their first values).
State start_state(const Options& o, const std::vector<nn::ParamSpec>& specs, const std::vector<bool>& trains,
                  const LoraRun& lr, uint64_t* step, uint64_t* position, TrainMeta* meta_out) {
  // With base_bf16 the adapted weights are held in bf16 (lora::Options::base_bf16).
  auto narrow = [&](State& s) {
    if (!lr.meta.options.base_bf16) return;
    for (size_t j = 0; j < s.names.size(); ++j)
      if (std::find(lr.base_targets.begin(), lr.base_targets.end(), s.names[j]) != lr.base_targets.end())
        s.params[j] = s.params[j].converted(DType::bf16);
  };
  State s;
  for (const nn::ParamSpec& p : specs) s.names.push_back(p.name);
  if (o.resume_path.empty()) {
    if (o.init_from.empty()) {
      s.params = nn::init_parameters(o.model, o.seed);
    } else {
      nn::HfModel m = nn::read_hf_dir(o.init_from);
      nn::LmConfig want = o.model;
      want.batch = m.config.batch, want.seq = m.config.seq;
      if (m.config.to_json() != want.to_json())
        throw Error("'" + o.init_from + "' holds a different model (" + m.config.describe() + ") than the one asked for (" +
                    o.model.describe() + ")");
      s.params = std::move(m.params);
    }
    for (const Array& a : lr.start) s.params.push_back(a);
    // Zero moments for the parameters that train only (split_frozen drops the others').
    for (size_t j = 0; j < s.params.size(); ++j) {
      s.m.push_back(trains[j] ? Array(s.params[j].type()) : Array());
      s.v.push_back(trains[j] ? Array(s.params[j].type()) : Array());
    }
    narrow(s);
    *step = 0;
    *position = 0;
    return s;
  }
  TrainMeta meta;
  Checkpoint c = load_model_checkpoint(o.resume_path, &meta);
  if (meta.model.to_json() != o.model.to_json())
    throw Error("checkpoint '" + o.resume_path + "' holds a different model (" + meta.model.describe() +
                ") than the one asked for (" + o.model.describe() + ")");
  const std::string want_lora = lr.on ? lora_metadata(lr.meta) : "none", had_lora = meta.lora ? lora_metadata(*meta.lora) : "none";
  if (want_lora != had_lora)
    throw Error("checkpoint '" + o.resume_path + "' was trained with LoRA " + had_lora + ", this run asks for " +
                want_lora + " (resume with the checkpoint's LoRA options)");
  // Moments of the parameters the checkpoint trained (Checkpoint::frozen has
  // none): zeros for a frozen one, which split_frozen drops.
  for (size_t j = 0, k = 0; j < specs.size(); ++j) {
    s.params.push_back(std::move(c.params[j].array));
    const bool has = k < c.adam_m.size() && c.adam_m[k].name == specs[j].name;
    s.m.push_back(has ? std::move(c.adam_m[k].array) : trains[j] ? Array(specs[j].type) : Array());
    s.v.push_back(has ? std::move(c.adam_v[k].array) : trains[j] ? Array(specs[j].type) : Array());
    k += has ? 1 : 0;
  }
  narrow(s);
  *step = c.step;
  *position = c.data_position;
  *meta_out = std::move(meta);
  return s;
}

// The parameters that do not train move from s's lists to s.frozen (their
// moments dropped); a resumed checkpoint must have frozen the same ones.
void split_frozen(State& s, const std::vector<bool>& trains, const Options& o, const TrainMeta& resumed) {
  State t;
  std::string now_frozen, now_trained;
  for (size_t j = 0; j < s.names.size(); ++j) {
    if (trains[j]) {
      t.names.push_back(s.names[j]);
      t.params.push_back(std::move(s.params[j]));
      t.m.push_back(std::move(s.m[j]));
      t.v.push_back(std::move(s.v[j]));
    } else {
      t.frozen_names.push_back(s.names[j]);
      t.frozen.push_back(std::move(s.params[j]));
    }
    if (o.resume_path.empty()) continue;
    const bool was_frozen =
        std::find(resumed.frozen.begin(), resumed.frozen.end(), s.names[j]) != resumed.frozen.end();
    if (was_frozen && trains[j]) now_trained += (now_trained.empty() ? "" : ", ") + s.names[j];
    if (!was_frozen && !trains[j]) now_frozen += (now_frozen.empty() ? "" : ", ") + s.names[j];
  }
  if (!now_frozen.empty() || !now_trained.empty())
    throw Error("checkpoint '" + o.resume_path + "' trained other parameters than --train/--freeze ask for now" +
                (now_trained.empty() ? "" : "; frozen there, trained now: " + now_trained) +
                (now_frozen.empty() ? "" : "; trained there, frozen now: " + now_frozen) +
                " (resume with the patterns it was trained with)");
  s = std::move(t);
}

// Instruction data: the rows of o.sft_path in o.chat_template (or the
// tokenizer's), split into training and validation rows (val_fraction: the
// last max(1, floor(M * val_fraction)) of the M rows), as SftBatches; the cut
// rows said once.
void sft_batches(const Options& o, const data::Tokenizer& tokenizer, std::unique_ptr<data::SftBatches>* train,
                 std::unique_ptr<data::SftBatches>* val, const std::function<void(const std::string&)>& say) {
  if (!tokenizer.trained())
    throw Error("the " + tokenizer.name() + " tokenizer would be trained on a text; with instruction data (" +
                o.sft_path + ") it must come trained: from an --init-from directory or the resumed checkpoint");
  const data::ChatTemplate ct =
      o.chat_template.empty() ? data::detect_chat_template(tokenizer) : data::parse_chat_template(o.chat_template);
  // plain's EOS: the directory's (tokenizer_config.json, generation_config.json), else "<|endoftext|>".
  std::optional<int32_t> eos;
  if (!o.init_from.empty()) {
    const nn::HfSpecialTokens sp = nn::read_hf_special_tokens(o.init_from, tokenizer);
    if (!sp.eos.empty()) eos = static_cast<int32_t>(sp.eos[0]);
  }
  if (!eos) eos = tokenizer.token_id("<|endoftext|>");
  const std::vector<data::SftExample> ex = data::parse_sft_jsonl(data::read_text_bytes(o.sft_path), o.sft_path);
  std::vector<data::SftRow> rows;
  for (const data::SftExample& e : ex) {
    rows.push_back(data::render_sft(e, ct, tokenizer, eos));
    for (int32_t id : rows.back().ids)
      if (id < 0 || id >= o.model.vocab)
        throw Error(o.sft_path + " line " + std::to_string(e.line) + ": token id " + std::to_string(id) +
                    " is outside the model's vocabulary of " + std::to_string(o.model.vocab));
  }
  // The last max(1, floor(M * val_fraction)) rows validate (none without val_fraction).
  const size_t cut = o.val_fraction > 0 ? std::min(data::split_point(rows.size(), o.val_fraction), rows.size() - 1)
                                        : rows.size();
  if (cut == 0)
    throw Error("instruction data '" + o.sft_path + "' has " + std::to_string(rows.size()) +
                " rows, too few to keep --val-fraction " + std::to_string(o.val_fraction) + " of them for validation");
  const int ranks = o.comm ? o.comm->size() : 1;
  data::SftOptions so{.seq = o.model.seq, .batch = o.model.batch * ranks * o.grad_accum, .seed = o.seed,
                      .pack = o.sft_pack, .mask_prompt = o.mask_prompt};
  *train = std::make_unique<data::SftBatches>(std::vector<data::SftRow>(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(cut)), so);
  if (cut < rows.size()) {
    so.batch = o.model.batch * ranks;
    *val = std::make_unique<data::SftBatches>(std::vector<data::SftRow>(rows.begin() + static_cast<std::ptrdiff_t>(cut), rows.end()), so);
  }
  std::string m = std::string("instruction data: ") + std::to_string(rows.size()) + " rows, chat template " +
                  data::chat_template_name(ct) + (o.sft_pack ? ", packed" : ", padded") + " to --seq " +
                  std::to_string(o.model.seq) + ", loss on " + (o.mask_prompt ? "completions only" : "every token");
  say(m);
  const size_t n_cut = (*train)->cut() + (*val ? (*val)->cut() : 0);
  if (n_cut > 0)
    say(std::to_string(n_cut) + " of " + std::to_string(rows.size()) + " rows cut to --seq " + std::to_string(o.model.seq));
  if ((*train)->targets() == 0)
    throw Error("instruction data '" + o.sft_path + "': no training row has a trained token within --seq " +
                std::to_string(o.model.seq) + " (every completion is cut away, or there is none); give a longer --seq");
  // A unit with no target adds nothing to the loss (a batch of only such has loss 0).
  const size_t n_empty = (*train)->empty_units() + (*val ? (*val)->empty_units() : 0);
  if (n_empty > 0)
    say(std::string("warning: ") + std::to_string(n_empty) + " of " + std::to_string((*train)->units() + (*val ? (*val)->units() : 0)) +
        (o.sft_pack ? " windows" : " rows") + " have no trained token within --seq " + std::to_string(o.model.seq) +
        " and add nothing to the loss");
}

}  // namespace

Result train(const Options& o) {
  o.validate();
  if (o.backend.host_threads != 0) host::set_host_threads(o.backend.host_threads);
  auto say = [&](const std::string& m) {
    if (o.on_message) o.on_message(m);
  };
  Result r;
  const int ranks = o.comm ? o.comm->size() : 1;
  const int rank = o.comm ? o.comm->rank() : 0;
#ifndef CAPSTEP_HAVE_NCCL
  if (ranks > 1 && o.lane.backend == BackendKind::cuda)
    throw Error(std::string("data parallelism over ") + std::to_string(ranks) + " processes on lane " + lane_name(o.lane) +
                " needs NCCL, and this capstep was built without it (CMake found no nccl.h and libnccl: see "
                "docs/scaling.md); the host lane runs it over MPI");
#endif

  // The lane, or the host backend when its own cannot run here.
  r.lane_used = o.lane;
  if (o.lane.backend != BackendKind::host) {
    std::string why;
    if (!backend_available(o.lane.backend, o.backend, &why)) {
      if (o.require_backend)
        throw Error(std::string("lane ") + lane_name(o.lane) + " cannot run here: " + why);
      r.lane_used.backend = BackendKind::host;
      say(std::string("the ") + backend_name(o.lane.backend) + " backend cannot run here (" + why + "); lane " +
          lane_name(o.lane) + " falls back to the " + lane_name(r.lane_used) + " lane");
    }
  }
  if (ranks > 1 && r.lane_used.backend == BackendKind::pjrt)
    throw Error("data parallelism on lane " + std::string(lane_name(r.lane_used)) +
                " is not supported: the PJRT backend runs one replica");

  // Parameters, gradients and both moments take 16 bytes a parameter; a model
  // that needs more than the machine's memory would be killed by the kernel
  // part-way through initialisation. Refuse it with the figures instead.
  // Frozen parameters: 4 bytes, no gradient or moments.
  // LoRA: the adapters after the model's parameters, they alone trained.
  // SFT: targets < 0 are ignored (the masked mean); otherwise the plain loss program.
  const Program base_loss = nn::lm_loss_program(o.model, DType::f32, !o.sft_path.empty());
  const LoraRun lora_run = make_lora_run(o, base_loss);
  // The loss the step differentiates and validation runs: fused attention,
  // LoRA, mixed precision as asked.
  const Program fused_loss = o.fused_attention ? fuse_attention(base_loss) : base_loss;
  const Program loss_program = optim::with_precision(
      lora_run.on ? lora::lora(fused_loss, lora_run.meta.targets, lora_run.meta.options) : fused_loss, o.precision);
  std::vector<nn::ParamSpec> specs = nn::lm_parameters(o.model);
  std::vector<bool> trains = lora_run.on ? std::vector<bool>(specs.size(), false)
                                         : trainable_mask(o.model, o.train_patterns, o.freeze_patterns);
  if (lora_run.on)
    for (const ParamSpec& a : lora_specs(o.model, lora_run.meta)) {
      specs.push_back({a.name, a.type});
      trains.push_back(true);
    }
  int64_t n_train = 0, n_frozen = 0, v_train = 0, v_frozen = 0;
  {
    const std::vector<nn::ParamSpec>& ps = specs;
    for (size_t j = 0; j < ps.size(); ++j) {
      (trains[j] ? n_train : n_frozen) += 1;
      (trains[j] ? v_train : v_frozen) += ps[j].type.numel();
    }
  }
  // (Accumulation: 4 more bytes per trained value for the accumulators.)
  const double per_trained = o.grad_accum > 1 ? 20.0 : 16.0;
  // (A LoRA run's bf16 base weights: 2 bytes each.)
  double frozen_bytes = 4.0 * static_cast<double>(v_frozen);
  if (lora_run.meta.options.base_bf16)
    for (const nn::ParamSpec& p : specs)
      if (std::find(lora_run.base_targets.begin(), lora_run.base_targets.end(), p.name) != lora_run.base_targets.end())
        frozen_bytes -= 2.0 * static_cast<double>(p.type.numel());
  const double need = per_trained * static_cast<double>(v_train) + frozen_bytes;
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have) {
    std::ostringstream m;
    m << std::fixed << std::setprecision(1) << "the model needs " << need / (1 << 30) << " GiB for its "
      << nn::count_parameters(o.model) << " parameters, their gradients and AdamW moments (" << static_cast<int>(per_trained)
      << " bytes each" << (v_frozen > 0 ? ", 4 for the " + std::to_string(v_frozen) + " frozen" : std::string())
      << "); this machine has "
      << have / (1 << 30) << " GiB of memory";
    throw Error(m.str());
  }

  // A run that cannot save its result must fail now, not after hours.
  if (!o.save_path.empty() && rank == 0) check_writable(o.save_path);

  // The state: new, or the resumed checkpoint's (read once: its metadata
  // also gives a subword tokenizer's pieces below).
  uint64_t done = 0, position = 0;
  TrainMeta resumed;
  State state = start_state(o, specs, trains, lora_run, &done, &position, &resumed);
  split_frozen(state, trains, o, resumed);
  if (lora_run.on)
    say("LoRA r " + std::to_string(lora_run.meta.options.r) + ", alpha " + [&] {
          std::ostringstream a;
          a << lora_run.meta.options.alpha;
          return a.str();
        }() +
        " on " + std::to_string(lora_run.meta.targets.size()) + " targets: the adapters train (" +
        std::to_string(v_train) + " values), the " + std::to_string(n_frozen) + " base parameters are frozen (" +
        std::to_string(v_frozen) + " values" + (lora_run.meta.options.base_bf16 ? ", the adapted ones in bf16)" : ")"));
  else if (n_frozen > 0)
    say(std::to_string(n_train) + " parameters train (" + std::to_string(v_train) + " values), " +
        std::to_string(n_frozen) + " are frozen (" + std::to_string(v_frozen) + " values)");
  if (static_cast<int64_t>(done) >= o.steps)
    throw Error("nothing to train: checkpoint '" + o.resume_path + "' is at step " + std::to_string(done) +
                " and the run ends at step " + std::to_string(o.steps) + "; ask for more steps");

  // The checkpoint records the text's absolute path, so that a run resumed
  // from another directory finds it, and its fingerprint (below, once the
  // text has been read), so that a resumed run can tell an edited text from
  // the one it was trained on.
  const std::string text_name = !o.tokens_path.empty() || !o.sft_path.empty() ? "" : o.text_path.empty() ? "builtin" : absolute_path(o.text_path);
  const std::string which = !o.sft_path.empty()     ? "instruction data '" + o.sft_path + "'"
                            : !o.tokens_path.empty()  ? "token files '" + o.tokens_path + "'"
                            : o.text_path.empty() ? "the built-in corpus"
                                                  : "text file '" + o.text_path + "'";
  // The text, read once and encoded in place: its ids, one byte each, are
  // the only copy held (the two parts below share them).
  data::Tokenizer tokenizer = data::Tokenizer::parse(o.tokenizer);
  if (tokenizer.has_model() && !o.resume_path.empty()) {
    // Resumed: the pieces the run trained with, never a new training.
    if (resumed.tokenizer != o.tokenizer)
      throw Error("checkpoint '" + o.resume_path + "' was trained with the " + resumed.tokenizer +
                  " tokenizer, not " + o.tokenizer);
    tokenizer = checkpoint_tokenizer(resumed);
  } else if (tokenizer.has_model() && !o.tokenizer_model.empty()) {
    tokenizer = data::Tokenizer::from_model(o.tokenizer, o.tokenizer_model);   // --init-from's pieces
  }
  data::TextStats stats;
  std::shared_ptr<const data::TokenSource> text, val_ids;
  std::optional<TokensMeta> tokens_meta;
  // Instruction data (capstep/sft.h): rows, not a text; the batches below.
  std::unique_ptr<data::SftBatches> sft, sft_val;
  if (!o.sft_path.empty()) {
    sft_batches(o, tokenizer, &sft, &sft_val, say);
    // Resumed: other rows or settings draw other batches from here on; said.
    const std::optional<SftMeta>& was = resumed.sft;
    if (!o.resume_path.empty() &&
        (!was || was->path != absolute_path(o.sft_path) || was->hash != file_fingerprint(o.sft_path) ||
         was->chat_template != o.chat_template || was->mask_prompt != o.mask_prompt || was->pack != o.sft_pack))
      say("warning: checkpoint '" + o.resume_path + "' was not trained on these instruction data and settings (" +
          (was ? "'" + was->path + "'" : std::string("no --sft")) +
          "); the batches from here on are drawn from '" + o.sft_path + "' as given");
  } else if (!o.tokens_path.empty()) {
    // Token files: mapped, their ids taken as they are (checked against the
    // model's vocabulary once, as they are opened).
    if (!tokenizer.trained())
      throw Error("the " + tokenizer.name() + " tokenizer would be trained on a text; with token files (" +
                  o.tokens_path + ") it must come trained: from an --init-from directory or the resumed checkpoint");
    const data::TokenFileFormat format = data::parse_token_file_format(o.tokens_format);
    auto mapped = data::MappedTokens::open(o.tokens_path, o.model.vocab, format);
    tokens_meta.emplace();
    tokens_meta->tokens = absolute_path(o.tokens_path);
    tokens_meta->tokens_hash = mapped->fingerprint();
    tokens_meta->format = o.tokens_format;
    text = mapped;
    if (!o.val_tokens_path.empty()) {
      auto v = data::MappedTokens::open(o.val_tokens_path, o.model.vocab, format);
      tokens_meta->val_tokens = absolute_path(o.val_tokens_path);
      tokens_meta->val_tokens_hash = v->fingerprint();
      val_ids = v;
    }
  } else if (!tokenizer.trained()) {
    std::string raw = o.text_path.empty() ? data::builtin_corpus() : data::read_text_bytes(o.text_path);
    // (a byte-level BPE has no training: trained_on says where it comes from)
    if (tokenizer.subword()) say("training the " + tokenizer.name() + " tokenizer on " + which + " (SentencePiece)");
    tokenizer = tokenizer.trained_on(raw);
    text = std::make_shared<const data::TokenIds>(
        data::text_tokens(std::move(raw), which, tokenizer, o.allow_unknown, &stats));
  } else {
    text = std::make_shared<const data::TokenIds>(
        o.text_path.empty() ? tokenizer.encode(data::builtin_corpus(), &stats)
                            : data::read_text_tokens(o.text_path, tokenizer, o.allow_unknown, &stats));
  }
  if (stats.unknown > 0) say(which + ": " + data::describe_unknown(stats, tokenizer.name()));
  const std::string text_hash = o.text_path.empty() ? "" : file_fingerprint(o.text_path);  // read in chunks
  // Token files resumed: other files, or the same ones with other bytes, are
  // said (the batches from here on come from the ids as they are now).
  if (!o.resume_path.empty() && tokens_meta) {
    const std::optional<TokensMeta>& was = resumed.tokens;
    if (!was)
      say("warning: checkpoint '" + o.resume_path + "' was trained on " +
          (resumed.text == "builtin" ? std::string("the built-in corpus") : "text file '" + resumed.text + "'") +
          "; continuing on token files '" + o.tokens_path + "'");
    else if (was->tokens != tokens_meta->tokens || was->tokens_hash != tokens_meta->tokens_hash)
      say("warning: checkpoint '" + o.resume_path + "' was trained on token files '" + was->tokens + "' (fingerprint " +
          was->tokens_hash + "); continuing on '" + tokens_meta->tokens + "' (fingerprint " + tokens_meta->tokens_hash +
          "): the batches from here on are drawn from other ids");
  }
  const size_t cut = sft ? 0 : data::split_point(text->size(), o.val_fraction);
  const char* unit = !o.tokens_path.empty()                              ? " tokens"
                     : tokenizer.kind() == data::TokenizerKind::chars ? " characters"
                     : tokenizer.kind() == data::TokenizerKind::bytes ? " bytes" : " tokens";
  auto need_tokens = [&](size_t n, const char* part) {
    if (static_cast<int64_t>(n) <= o.model.seq)
      throw Error(which + " has " + std::to_string(n) + unit + part + "; a window of " +
                  std::to_string(o.model.seq) + " and its next-token targets need at least " +
                  std::to_string(o.model.seq + 1));
  };
  if (!sft) {
    need_tokens(text->size(), "");
    need_tokens(cut, o.val_fraction > 0 ? " for training" : "");
    if (o.val_fraction > 0) need_tokens(text->size() - cut, " in its validation part (--val-fraction)");
  }
  if (val_ids && static_cast<int64_t>(val_ids->size()) <= o.model.seq)
    throw Error("validation token files '" + o.val_tokens_path + "' have " + std::to_string(val_ids->size()) +
                " tokens; a window of " + std::to_string(o.model.seq) + " and its next-token targets need at least " +
                std::to_string(o.model.seq + 1));
  const bool validating = o.val_fraction > 0 || val_ids != nullptr;
  // The stream of global batches; this rank's rows of each (all of them alone).
  // Accumulating N micro-batches: batch k holds all N of step k+1 (Options::grad_accum).
  const int64_t accum = o.grad_accum;
  std::unique_ptr<data::BatchStream> batches =
      sft ? nullptr : std::make_unique<data::BatchStream>(text, 0, cut, o.seed, o.model.batch * ranks * accum, o.model.seq);
  auto fill_batch = [&](uint64_t k, int64_t row, Array& in, Array& tg) {
    if (sft) sft->fill_rows(k, row, in, tg);
    else batches->fill_rows(k, row, in, tg);
  };
  auto data_position = [&]() { return sft ? sft->position() : batches->position(); };
  // Validation: fixed batches, and the forward program on the host.
  std::unique_ptr<data::BatchStream> val;
  std::unique_ptr<Backend> forward;  // the host backend, built after the memory check below
  Program forward_program;
  std::vector<data::Batch> val_batches;
  if (validating) {
    // Data parallel: the global batches' rows, every rank all of them in
    // chunks of the local batch (the mean of the equal chunks' means is the
    // global batches' mean), so the figure does not depend on the rank count.
    if (!sft)
      val = val_ids ? std::make_unique<data::BatchStream>(val_ids, 0, val_ids->size(), o.seed, o.model.batch * ranks,
                                                          o.model.seq)
                    : std::make_unique<data::BatchStream>(text, cut, text->size(), o.seed, o.model.batch * ranks,
                                                          o.model.seq);
    for (int64_t k = 0; k < o.eval_batches; ++k)
      for (int c = 0; c < ranks; ++c) {
        const Type t{DType::i32, {o.model.batch, o.model.seq}};
        data::Batch b{Array(t), Array(t)};
        if (sft_val) sft_val->fill_rows(static_cast<uint64_t>(k), c * o.model.batch, b.inputs, b.targets);
        else val->fill_rows(static_cast<uint64_t>(k), c * o.model.batch, b.inputs, b.targets);
        val_batches.push_back(std::move(b));
      }
    forward_program = loss_program;
  }
  if (sft) sft->set_position(position);
  else batches->set_position(position);
  if (!o.resume_path.empty())
    say("resumed from '" + o.resume_path + "' at step " + std::to_string(done));
  // The same file, other bytes: training goes on (the file may have been
  // extended on purpose), but not without a word.
  if (!o.resume_path.empty() && resumed.text_hash && !o.text_path.empty() && resumed.text == text_name &&
      *resumed.text_hash != text_hash)
    say("warning: text file '" + o.text_path + "' has changed since checkpoint '" + o.resume_path +
        "' was saved (fingerprint " + *resumed.text_hash + " then, " + text_hash +
        " now): the batches from here on are drawn from the new text");

  // Over the trained parameters only (the frozen ones are plain inputs).
  Program grad = value_and_grad(loss_program, state.names);
  // Cheap forward values (broadcasts, elementwise chains) recomputed where
  // the backward reads them, not held from the forward until then, where
  // the host's plan of the step says that holds less.
  grad = host::recompute_where_smaller(grad, o.backend.host);
  if (o.checkpoint_every > 0) grad = checkpoint_activations(grad, nn::lm_checkpoint_regions(o.model, grad, o.checkpoint_every));
  // A bf16 base: each weight's f32 copy made at its readers, not held from
  // the forward through the backward.
  if (lora_run.meta.options.base_bf16) grad = lora::convert_at_each_use(grad);
  // Data parallel: the mean over the replicas of the gradients and the loss,
  // before clipping (the global gradient is clipped) and the update.
  if (o.comm) grad = optim::data_parallel(grad, state.names, ranks, {o.dp_pack, o.dp_bucket_bytes});
  // Accumulation: the micro-batches' mean gradient is the one clipped.
  if (accum > 1) grad = optim::accumulate_gradients(grad, state.names, static_cast<int>(accum));
  // Clipping is part of the step program (the norm and the scale computed where
  // the step runs); the limit is a scalar input.
  if (o.clip_grad_norm > 0) grad = optim::clip_grad_norm(grad, state.names);
  // The run's host memory, planned, against the memory left (memory.h); only
  // then the validation interpreter, whose constants may take gigabytes.
  const Program step_program = TrainStep::program(grad, state.names, o.adamw, r.lane_used);
  check_host_memory(o, r.lane_used.backend == BackendKind::host, step_program, validating ? &forward_program : nullptr);
  if (validating) forward = make_backend(BackendKind::host, std::move(forward_program), o.backend);
  // Data parallel: o.comm goes to the backend whatever it is. On a GPU lane
  // the CUDA backend makes its NCCL communicator from it (the NCCL id from
  // rank 0 through o.comm), one process per GPU: every rank takes the same
  // lane decision above and gets here, or the job would stop here, waiting.
  StepOptions so{.lane = r.lane_used,
                 .frozen = state.frozen_names,
                 .clip_max_norm = static_cast<float>(o.clip_grad_norm),
                 .backend = lane_backend_options(o.backend, o.comm)};
  TrainStep stepper(make_backend(r.lane_used.backend, step_program, so.backend), state.names, o.adamw, so);
  if (o.comm && r.lane_used.backend == BackendKind::cuda) {
    const std::string via = stepper.backend().describe().collective;
    say(std::string("data parallel on lane ") + lane_name(r.lane_used) + ": " + std::to_string(ranks) + " rank(s), " +
        (via.empty() ? std::string("one replica (all_reduce a device copy: built without NCCL)") : via));
  }
  stepper.load(take(state, done));
#if defined(__GLIBC__)
  // What loading freed (the files' bytes, a bf16 base's f32 weights, the
  // copies the stepper did not take) is mostly in blocks under malloc's mmap
  // threshold, which free() keeps in the heap: given back to the system
  // here, before the step's arena, or the peak counts it twice.
  malloc_trim(0);
#endif

  // Held across saves so that each save reuses the same host arrays.
  Checkpoint ckpt;
  if (!o.resume_path.empty() && validating) r.best_val_loss = resumed.best_val_loss;
  // Mean loss of the validation batches at the current parameters.
  Array val_loss;
  auto evaluate = [&]() -> double {
    // The parameters read where the stepper holds them on the host (no copy
    // of them, nor of the moments), else copied out of its backend. The
    // step's arena and validation's are resident one at a time: the step's
    // pages go back before validation, validation's after.
    stepper.backend().release_scratch();
    for (const auto& [name, a] : stepper.parameters_in_place())
      if (!a || !forward->borrow_input(forward->input(name), *a)) forward->set(name, a ? *a : stepper.read(name));
    double total = 0;
    for (const data::Batch& b : val_batches) {
      forward->set("tokens", b.inputs);
      forward->set("targets", b.targets);
      forward->run();
      forward->read_output(0, val_loss);
      total += static_cast<double>(val_loss.data<float>()[0]);
    }
    forward->release_scratch();
    return total / static_cast<double>(val_batches.size());
  };
  ckpt.model_config = o.model.to_json();
  ckpt.extra[kTrainMetadataKey] = train_metadata(o, text_name, text_hash, tokens_meta ? &*tokens_meta : nullptr);
  if (tokenizer.has_model()) ckpt.extra[kTokenizerModelKey] = base64_encode(tokenizer.model());
  if (lora_run.on) ckpt.extra[kLoraMetadataKey] = lora_metadata(lora_run.meta);
  auto save = [&](int64_t step) -> bool {
    stepper.save(ckpt);
    const std::string bad = first_non_finite(ckpt);
    if (!bad.empty()) {
      std::ostringstream m;
      m << "step " << step << ": the " << bad << " is not finite; training stopped and checkpoint '" << o.save_path
        << "' was not overwritten";
      if (r.last_saved_step >= 0) m << " (it holds step " << r.last_saved_step << ")";
      r.stopped = m.str();
      return false;
    }
    if (!std::isnan(r.best_val_loss)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.9g", r.best_val_loss);
      ckpt.extra[kBestValLossKey] = b;
    }
    ckpt.step = static_cast<uint64_t>(step);
    ckpt.data_position = data_position();
    // Data parallel: every rank holds the same state (and took the same
    // decision above); rank 0 alone writes it.
    if (rank == 0) save_checkpoint(o.save_path, ckpt);
    r.last_saved_step = step;
    say("saved '" + o.save_path + "' at step " + std::to_string(step));
    return true;
  };

  const int64_t first = static_cast<int64_t>(done) + 1;
  r.first_step = first;
  r.last_step = first - 1;
  r.losses.reserve(static_cast<size_t>(o.steps - first + 1));
  const double tokens_per_step = static_cast<double>(o.model.batch * ranks * o.model.seq * accum);
  std::vector<Array> tokens(static_cast<size_t>(accum), Array({DType::i32, {o.model.batch, o.model.seq}})),
      targets = tokens;
  StepInfo info;
  info.first_step = first;
  info.last_step = o.steps;
  constexpr size_t kRecent = 20;
  double recent[kRecent] = {};
  size_t n_recent = 0, next_recent = 0;
  const Clock::time_point t0 = Clock::now();
  for (int64_t step = first; step <= o.steps; ++step) {
    for (int64_t j = 0; j < accum; ++j)
      fill_batch(data_position(), (j * ranks + rank) * o.model.batch, tokens[static_cast<size_t>(j)],
                 targets[static_cast<size_t>(j)]);
    if (sft) sft->set_position(sft->position() + 1);
    else batches->set_position(batches->position() + 1);
    const double lr = scheduled_lr(o.schedule, o.adamw.lr, step, o.steps);
    const float loss = static_cast<float>(stepper.step(
        static_cast<int>(accum),
        [&](int i) {
          stepper.set("tokens", tokens[static_cast<size_t>(i)]);
          stepper.set("targets", targets[static_cast<size_t>(i)]);
        },
        optim::adamw_scalars(o.adamw, step, lr)));
    if (!std::isfinite(loss)) {
      std::ostringstream m;
      m << "step " << step << ": the loss is " << (std::isnan(loss) ? "NaN" : loss > 0 ? "+infinity" : "-infinity")
        << "; training stopped";
      if (o.save_path.empty()) m << " (no checkpoint was asked for)";
      else if (r.last_saved_step >= 0)
        m << "; the last good checkpoint, '" << o.save_path << "' at step " << r.last_saved_step << ", is kept";
      else m << " before the first checkpoint, so none was written";
      r.stopped = m.str();
      break;
    }
    // Spikes: against the last kRecent losses of this run (a ring, no allocation).
    if (is_loss_spike(recent, n_recent, loss)) {
      double mean = 0;
      for (size_t i = 0; i < n_recent; ++i) mean += recent[i] / static_cast<double>(n_recent);
      std::ostringstream m;
      m << std::fixed << std::setprecision(4) << "step " << step << ": loss spike: " << loss << ", the last " << n_recent
        << " steps averaged " << mean;
      r.spikes.push_back(step);
      say(m.str());
    }
    recent[next_recent] = loss;
    next_recent = (next_recent + 1) % kRecent;
    n_recent = std::min(n_recent + 1, kRecent);
    r.losses.push_back(loss);
    r.last_step = step;
    info.step = step;
    info.loss = loss;
    info.lr = lr;
    info.grad_norm = stepper.grad_norm();
    info.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    info.tokens_per_s = info.elapsed_s > 0 ? tokens_per_step * static_cast<double>(step - first + 1) / info.elapsed_s : 0;
    info.val_loss = NAN;
    if (forward && (step == o.steps || (o.eval_every > 0 && step % o.eval_every == 0))) {
      info.val_loss = evaluate();
      r.val_steps.push_back(step);
      r.val_losses.push_back(info.val_loss);
      if (std::isnan(r.best_val_loss) || info.val_loss < r.best_val_loss) r.best_val_loss = info.val_loss;
    }
    if (o.on_step) o.on_step(info);
    const bool periodic = o.save_every > 0 && step % o.save_every == 0;
    bool stop = step < o.steps && o.should_stop && o.should_stop();
    if (o.comm && ranks > 1 && step < o.steps && o.should_stop) {
      // Every rank must stop at the same step (a signal reaches them at
      // different moments): stop when any rank was asked to.
      float any = stop ? 1.0f : 0.0f;
      o.comm->all_reduce_sum(&any, DType::f32, 1);
      stop = any > 0;
    }
    if (!o.save_path.empty() && (periodic || step == o.steps || stop) && !save(step)) break;
    if (stop) {
      r.interrupted = true;
      say("stopped after step " + std::to_string(step) + " of " + std::to_string(o.steps) + " as asked");
      break;
    }
  }
  if (ranks > 1 && r.stopped.empty()) {
    // The replicas must end with identical parameters (each applied the same
    // all-reduced update). Each rank sums the ranks' 32-bit hashes of their
    // parameter bytes (exact in a double): unless all are equal, the sum
    // differs from ranks x its own hash on at least one rank, which fails.
    stepper.save(ckpt);
    uint32_t h = 2166136261u;  // FNV-1a
    for (const NamedArray& t : ckpt.params) {
      const unsigned char* b = static_cast<const unsigned char*>(t.array.raw());
      for (size_t i = 0; i < t.array.bytes(); ++i) h = (h ^ b[i]) * 16777619u;
    }
    double sum = static_cast<double>(h);
    o.comm->all_reduce_sum(&sum, DType::f64, 1);
    if (sum != static_cast<double>(ranks) * static_cast<double>(h))
      throw Error("data parallel: the " + std::to_string(ranks) + " ranks ended with different parameters (rank " +
                  std::to_string(rank) + "'s hash " + std::to_string(h) + "); their updates diverged");
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens_per_s = r.seconds > 0 ? tokens_per_step * static_cast<double>(r.losses.size()) / r.seconds : 0;
  return r;
}

}  // namespace capstep::train
