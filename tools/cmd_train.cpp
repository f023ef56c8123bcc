// `capstep train`: options -> train::Options, progress on the terminal or as
// log lines, then the loss log (CSV) and the loss curve (gnuplot).
#include <cstdlib>
#include <signal.h>
#include <unistd.h>

#include <csignal>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "capstep/data.h"
#include "capstep/hf.h"
#include "commands.h"
#include "env_options.h"
#ifdef CAPSTEP_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif
#include "plot.h"
#include "progress.h"

namespace capstep::cli {
namespace {

// "%g" of a number, for notes.
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// A setting the checkpoint records and the user gave again with another
// value: the given value wins, and a note says so (never silently).
void note_changed(const std::string& saved, const std::string& now) {
  if (saved != now)
    std::cout << "note: the checkpoint was trained with " << saved << "; continuing with " << now << " as given\n";
}

// With --resume the checkpoint says which model it is, and by default which
// seed, AdamW settings, lr schedule, clipping limit, precision, attention,
// validation share and text it was trained with: the continuation then
// matches an uninterrupted run. A different model is an error; another value
// of any other setting given on the command line wins, with a note.
void adopt_checkpoint(TrainArgs& a) {
  train::Options& o = a.opts;
  const train::TrainMeta meta = train::parse_meta(load_checkpoint(o.resume_path));
  if (a.tokenizer_given && o.tokenizer != meta.tokenizer)
    throw UsageError("--tokenizer: checkpoint '" + o.resume_path + "' was trained with the " + meta.tokenizer +
                     " tokenizer, not " + o.tokenizer + "; leave --tokenizer out to continue it");
  o.tokenizer = meta.tokenizer;
  a.model.config.vocab = meta.model.vocab;   // the tokenizer's; not a model option the user gives
  if (a.model.given && a.model.checked().to_json() != meta.model.to_json())
    throw UsageError("--resume: checkpoint '" + o.resume_path + "' holds \"" + meta.model.describe() +
                     "\" but the model options ask for \"" + a.model.config.describe() +
                     "\"; leave the model options out to continue it");
  o.model = meta.model;
  if (!meta.has_train) return;
  if (a.seed_given) note_changed("--seed " + std::to_string(meta.seed), "--seed " + std::to_string(o.seed));
  else o.seed = meta.seed;
  const double lr = o.adamw.lr;
  o.adamw = meta.adamw;
  if (a.lr_given) {
    o.adamw.lr = lr;
    note_changed("--lr " + num(meta.adamw.lr), "--lr " + num(lr));
  }
  if (meta.has_schedule) {
    const char* saved_kind = train::schedule_name(meta.schedule.kind);
    if (a.schedule_given)
      note_changed(std::string("--schedule ") + saved_kind, std::string("--schedule ") + train::schedule_name(o.schedule.kind));
    else o.schedule.kind = meta.schedule.kind;
    if (a.warmup_given)
      note_changed("--warmup-steps " + std::to_string(meta.schedule.warmup_steps),
                   "--warmup-steps " + std::to_string(o.schedule.warmup_steps));
    else o.schedule.warmup_steps = meta.schedule.warmup_steps;
    if (a.min_lr_given) note_changed("--min-lr " + num(meta.schedule.min_lr), "--min-lr " + num(o.schedule.min_lr));
    else o.schedule.min_lr = meta.schedule.min_lr;
    if (a.clip_given)
      note_changed("--clip-grad-norm " + num(meta.clip_grad_norm), "--clip-grad-norm " + num(o.clip_grad_norm));
    else o.clip_grad_norm = meta.clip_grad_norm;
    if (o.schedule.kind == train::Schedule::cosine && meta.schedule.kind == train::Schedule::cosine &&
        o.steps != meta.steps)
      std::cout << "note: the checkpoint's cosine schedule ends at step " << meta.steps << "; it now ends at step "
                << o.steps << " (--steps)\n";
  }
  if (meta.precision) {
    const std::string saved = std::string("--precision ") + optim::precision_name(*meta.precision);
    if (a.precision_given) note_changed(saved, std::string("--precision ") + optim::precision_name(o.precision));
    else o.precision = *meta.precision;
  }
  if (meta.fused_attention) {
    auto flag = [](bool on) { return std::string(on ? "--fused-attention" : "--no-fused-attention"); };
    if (a.fused_attention_given) note_changed(flag(*meta.fused_attention), flag(o.fused_attention));
    else o.fused_attention = *meta.fused_attention;
  }
  // Micro-batches per step and the frozen parameters decide which rows a
  // step sees and which parameters have moments: the checkpoint's unless given.
  if (meta.grad_accum) {
    if (a.accum_given)
      note_changed("--grad-accum " + std::to_string(*meta.grad_accum), "--grad-accum " + std::to_string(o.grad_accum));
    else o.grad_accum = *meta.grad_accum;
  }
  // A LoRA run continues with its adapters' options unless they are given.
  if (meta.lora && !a.lora_given) {
    o.lora.rank = meta.lora->options.r;
    o.lora.alpha = meta.lora->options.alpha;
    o.lora.rslora = meta.lora->options.rslora;
    o.lora.base_bf16 = meta.lora->options.base_bf16;
    o.lora.targets = meta.lora->target_modules;
  } else if (!meta.lora && o.train_patterns.empty() && o.freeze_patterns.empty()) {
    o.freeze_patterns = meta.frozen;
  }
  // The held-out share decides which tokens the training batches come from.
  if (meta.val_fraction) {
    if (a.val_fraction_given)
      note_changed("--val-fraction " + num(*meta.val_fraction), "--val-fraction " + num(o.val_fraction));
    else o.val_fraction = *meta.val_fraction;
  }
  // Token files: the checkpoint's unless --text or --tokens (train() warns
  // when their fingerprint changed).
  if (meta.tokens && !a.text_given && o.tokens_path.empty()) {
    o.tokens_path = meta.tokens->tokens;
    if (o.val_tokens_path.empty() && !a.val_fraction_given) o.val_tokens_path = meta.tokens->val_tokens;
    if (o.tokens_format == "auto") o.tokens_format = meta.tokens->format;
    std::cout << "note: the token files '" << o.tokens_path << "' come from the checkpoint; --tokens overrides them\n";
  }
  // Instruction data: the checkpoint's file and settings unless --text, --tokens or --sft.
  if (meta.sft && !a.text_given && o.tokens_path.empty() && o.sft_path.empty()) {
    o.sft_path = meta.sft->path, o.chat_template = meta.sft->chat_template;
    o.mask_prompt = meta.sft->mask_prompt, o.sft_pack = meta.sft->pack;
    std::cout << "note: the instruction data '" << o.sft_path << "' comes from the checkpoint; --sft overrides it\n";
  }
  if (!o.tokens_path.empty() || meta.tokens || !o.sft_path.empty() || meta.sft) return;
  // The text: the checkpoint's (an absolute path; older checkpoints hold it as
  // typed, relative to the directory the run was started in) unless --text.
  if (!a.text_given && meta.text != "builtin") {
    o.text_path = meta.text;
    std::cout << "note: the text path '" << meta.text << "' comes from the checkpoint; --text overrides it\n";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(meta.text, ec)) {
      const bool relative = std::filesystem::path(meta.text).is_relative();
      throw Error("cannot read text file '" + meta.text + "': " +
                  (std::filesystem::exists(meta.text, ec) ? "not a regular file" : "no such file") +
                  "; the path comes from checkpoint '" + o.resume_path + "'" +
                  (relative ? " (relative to the directory that run started in)" : "") +
                  "; give --text FILE to train on it where it is now");
    }
  }
  if (a.text_given && meta.text != train::absolute_path(o.text_path) && meta.text != o.text_path)
    std::cout << "note: the checkpoint was trained on " << (meta.text == "builtin" ? "the built-in corpus" : "'" + meta.text + "'")
              << "; continuing on '" << o.text_path << "'\n";
}

// Ctrl-C, SIGTERM (schedulers, containers, kill) and SIGHUP (a closed
// terminal): finish the step, save it (with --save), write the log and the
// plot, exit 128 + the signal's number. A second one of them ends the process
// at once (the default action, restored by the first).
volatile std::sig_atomic_t g_signal = 0;
void on_stop_signal(int sig) {
  g_signal = sig;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

// With --clip-grad-norm a last column, grad_norm: the norm before clipping.
// With a validation split a column val_loss, empty on steps not evaluated.
void write_csv(const std::string& path, const std::vector<train::StepInfo>& steps, bool clipping, bool validation) {
  std::string text = "step,loss,elapsed_s,tokens_per_s,lr";
  if (clipping) text += ",grad_norm";
  if (validation) text += ",val_loss";
  text += '\n';
  char buf[160];
  for (const train::StepInfo& s : steps) {
    std::snprintf(buf, sizeof buf, "%lld,%.9g,%.6f,%.1f,%.9g", static_cast<long long>(s.step), s.loss, s.elapsed_s,
                  s.tokens_per_s, s.lr);
    text += buf;
    if (clipping) {
      std::snprintf(buf, sizeof buf, ",%.9g", s.grad_norm);
      text += buf;
    }
    if (validation) {
      text += ',';
      if (!std::isnan(s.val_loss)) {
        std::snprintf(buf, sizeof buf, "%.9g", s.val_loss);
        text += buf;
      }
    }
    text += '\n';
  }
  write_file_atomically(path, text);
}

}  // namespace

// Whether two paths name one file: the same absolute path, or (both
// existing) the same inode, as through a link.
static bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  if (train::absolute_path(a) == train::absolute_path(b)) return true;
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// A directory, or a name that ends in '/', is a wrong value (exit 2); a
// directory that is missing or takes no new file is the machine's state
// (exit 1).
void check_output(const char* option, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(std::string(option) + ": '" + path + "' is a directory; give a file name");
  if (path.back() == '/')
    throw UsageError(std::string(option) + ": '" + path + "' names a directory; give a file name");
  if (path == "-")
    throw UsageError(std::string(option) + ": '-' would be a file named '-' (only export --out - writes to standard "
                     "output); give a file name");
  try {
    check_writable(path);
  } catch (const Error& e) {
    throw Error(std::string(option) + ": " + e.what());
  }
}

int run_train(TrainArgs a) {
  train::Options& o = a.opts;
  // --pjrt-plugin and --pjrt-cache over CAPSTEP_PJRT_PLUGIN and CAPSTEP_PJRT_CACHE
  const std::string plugin = o.backend.pjrt.plugin, cache = o.backend.pjrt.cache_dir;
  o.backend = env::backend_options(o.backend);
  if (!plugin.empty()) o.backend.pjrt.plugin = plugin;
  if (!cache.empty()) o.backend.pjrt.cache_dir = cache;
  o.lane = !a.lane.empty() ? train::parse_lane(a.lane) : train::Lane{parse_backend(a.backend), a.adamw == "program"};
  // --data-parallel: this process is one rank of an MPI job. Every rank parses
  // the same options and takes the same decisions below; only rank 0 prints
  // and writes files.
#ifdef CAPSTEP_HAVE_MPI
  std::unique_ptr<dist::MpiCommunicator> comm;
  if (a.data_parallel) {
    // A GPU lane: one process per GPU. Ranks sharing a node each see their own
    // GPU as device 0 (the CUDA backend drives device 0), set before anything
    // starts CUDA, unless the launcher set CUDA_VISIBLE_DEVICES already.
    // (Untested: only a one-GPU machine has been available.)
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (o.lane.backend == BackendKind::cuda && local_rank && local_size && std::atoi(local_size) > 1 &&
        !std::getenv("CUDA_VISIBLE_DEVICES"))
      setenv("CUDA_VISIBLE_DEVICES", local_rank, 1);
    comm = std::make_unique<dist::MpiCommunicator>(a.dp_timeout);
    o.comm = comm.get();
    if (comm->rank() != 0) {
      if (!std::freopen("/dev/null", "w", stdout)) throw Error("rank " + std::to_string(comm->rank()) + ": cannot silence stdout");
      a.log_csv.clear();
      a.plot.clear();
    }
  }
#else
  if (a.data_parallel)
    throw Error("--data-parallel needs MPI, and this capstep was built without it (Debian: apt-get install "
                "libopenmpi-dev openmpi-bin, or run scripts/install-deps, then rebuild)");
#endif
  int rank = 0;
#ifdef CAPSTEP_HAVE_MPI
  if (comm) rank = comm->rank();
#endif
  if (o.save_every > 0 && o.save_path.empty()) throw UsageError("--save-every needs --save FILE");
  if (a.lora_dropout != 0)
    throw UsageError("--lora-dropout: LoRA dropout is not supported (the adapters train without it); leave it out or give 0");
  if (a.lora_given && !o.lora.from.empty() && (o.lora.rank > 0 || !a.lora_targets.empty()))
    throw UsageError("--lora-from: the rank, alpha and targets come from its adapter_config.json; leave out --lora-rank "
                     "and --lora-targets");
  if (a.lora_given && o.lora.rank == 0 && o.lora.from.empty() && o.resume_path.empty())
    throw UsageError("the --lora-* flags and --base-precision need --lora-rank R (or --lora-from DIR)");
  for (size_t p = 0; p < a.lora_targets.size();) {
    const size_t q = std::min(a.lora_targets.find(',', p), a.lora_targets.size());
    if (q == p) throw UsageError("--lora-targets: an empty name in '" + a.lora_targets + "'");
    o.lora.targets.push_back(a.lora_targets.substr(p, q - p));
    p = q + 1;
  }
  o.lora.base_bf16 = a.base_precision == "bf16";
  if (!a.plot.empty() && plot_format(a.plot).empty())
    throw UsageError("--plot: '" + a.plot + "' must end in .svg or .png");
  if (!a.init_from.empty()) {
    if (!o.resume_path.empty())
      throw UsageError("--init-from starts a run from a model's weights and --resume continues a checkpoint: give one");
    if (a.model.shape_given)
      throw UsageError("--init-from: the architecture and sizes come from '" + a.init_from +
                       "/config.json'; leave out --arch, --layers, --d-model, --heads, --kv-heads, --rope-theta, "
                       "--context and --d-ff (--batch and --seq apply)");
    const nn::HfModel m = nn::read_hf_dir(a.init_from);
    const std::string vocab_size = std::to_string(m.config.vocab);
    // For a directory without a tokenizer of its own: what was looked for,
    // and the one of capstep's that has its vocabulary, if any.
    const std::string none = "no tokenizer of its own (looked for " + nn::hf_tokenizer_files() + ")";
    const std::string fits = m.config.vocab == 256 ? "; its ids may be bytes: give --tokenizer byte"
                             : m.config.vocab == data::kVocabSize ? "; its ids may be characters: give --tokenizer char"
                                                                  : "";
    if (!a.tokenizer_given) {
      if (m.tokenizer.empty())
        throw UsageError("--init-from: '" + a.init_from + "' holds " + none + " for the vocab_size " + vocab_size +
                         " of its config.json" + fits);
      o.tokenizer = m.tokenizer;
    }
    // A tokenizer with a model is the directory's own (tokenizer.model,
    // tokenizer.json), whose ids the weights stand for: new pieces trained
    // on the text would not be, so another such tokenizer is refused.
    if (data::Tokenizer::parse(o.tokenizer).has_model()) {
      if (o.tokenizer != m.tokenizer)
        throw UsageError("--init-from: '" + a.init_from + "' holds " +
                         (m.tokenizer.empty() ? none : "the " + m.tokenizer + " tokenizer") +
                         ", whose pieces its weights' ids stand for" +
                         (m.tokenizer_file.empty() ? "" : " ('" + m.tokenizer_file + "')") + "; a " + o.tokenizer +
                         " tokenizer cannot be made anew for it: leave --tokenizer out" +
                         (m.tokenizer.empty() ? fits : ""));
      o.tokenizer_model = m.tokenizer_model;
    }
    const int64_t vocab = data::Tokenizer::parse(o.tokenizer).vocab();
    if (vocab != m.config.vocab)
      throw UsageError("--init-from: '" + a.init_from + "/config.json' has vocab_size " + vocab_size + " but the " +
                       o.tokenizer + " tokenizer has " + std::to_string(vocab) + " symbols; " +
                       (m.tokenizer.empty() ? "the directory holds " + none + fits
                                            : "leave --tokenizer out for the directory's own, the " + m.tokenizer));
    nn::LmConfig c = m.config;
    c.batch = a.model.config.batch;
    c.seq = a.model.config.seq;
    a.model.config = c;
    o.model = a.model.checked();
    o.init_from = a.init_from;
  } else if (!o.resume_path.empty()) {
    adopt_checkpoint(a);
  } else {
    if (data::Tokenizer::parse(o.tokenizer).kind() == data::TokenizerKind::bytelevel_bpe)
      throw UsageError("--tokenizer " + o.tokenizer + ": a byte-level BPE is not trained by capstep; it comes from "
                       "a Hugging Face directory's tokenizer.json or vocab.json + merges.txt (--init-from DIR)");
    a.model.config.vocab = data::Tokenizer::parse(o.tokenizer).vocab();   // the model's vocabulary is the tokenizer's
    o.model = a.model.checked();
  }
  // --val-tokens is the validation data: no share of the training ids is
  // held out then, unless --val-fraction is given too (refused below).
  if (!o.val_tokens_path.empty() && !a.val_fraction_given) o.val_fraction = 0;
  try {
    o.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // Two outputs in one file, or an output written over the text or the
  // checkpoint the run reads, would lose one of them.
  const std::pair<const char*, const std::string*> outputs[] = {{"--save", &o.save_path}, {"--log", &a.log_csv},
                                                                {"--plot", &a.plot}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (same_file(*outputs[i].second, *outputs[j].second))
        throw UsageError(std::string(outputs[i].first) + ": '" + *outputs[i].second + "' is also the " +
                         outputs[j].first + " file; give each output its own file");
    for (const std::string* ids : {&o.tokens_path, &o.val_tokens_path})
      if (same_file(*outputs[i].second, *ids))
        throw UsageError(std::string(outputs[i].first) + ": '" + *outputs[i].second +
                         "' is a token file the run reads; give another file name");
    if (same_file(*outputs[i].second, o.text_path))
      throw UsageError(std::string(outputs[i].first) + ": '" + *outputs[i].second +
                       "' is the text the run trains on; give another file name");
    if (i > 0 && same_file(*outputs[i].second, o.resume_path))
      throw UsageError(std::string(outputs[i].first) + ": '" + *outputs[i].second +
                       "' is the checkpoint the run resumes; give another file name");
  }
  // A fresh run must not replace a checkpoint at its first save: only the
  // run that continues it (--resume of the same file), or --overwrite.
  std::error_code ec;
  if (!o.save_path.empty() && !a.overwrite && std::filesystem::exists(o.save_path, ec) &&
      !std::filesystem::is_directory(o.save_path, ec) &&
      (o.resume_path.empty() || !std::filesystem::equivalent(o.save_path, o.resume_path, ec))) {
    std::string what = "a file";
    try {
      what = "a checkpoint at step " + std::to_string(load_checkpoint(o.save_path).step);
    } catch (const std::exception&) {
    }
    throw UsageError("--save: '" + o.save_path + "' exists (" + what +
                     "); use --resume to continue it, or --overwrite to replace it");
  }
  // Nor a file that --log or --plot would replace, without --overwrite.
  for (const auto& [option, path] : {std::pair<const char*, const std::string*>{"--log", &a.log_csv}, {"--plot", &a.plot}})
    if (!a.overwrite && !path->empty() && std::filesystem::exists(*path, ec) && !std::filesystem::is_directory(*path, ec))
      throw UsageError(std::string(option) + ": '" + *path + "' exists; use --overwrite to replace it");
  // Fail before training, not after it, when a result cannot be written.
  check_output("--save", o.save_path);
  check_output("--log", a.log_csv);
  check_output("--plot", a.plot);
  if (!a.plot.empty() && find_gnuplot().empty())
    throw Error("--plot draws with gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");

  // The bar redraws in place with \r and "erase line": only on rank 0 and a
  // terminal, and not with --no-progress (mpirun gives every rank a pty even
  // when its own output goes to a file).
  const bool terminal = !a.no_progress && rank == 0 && isatty(STDOUT_FILENO);
  Progress progress(stdout, terminal, a.print_every);
  std::vector<train::StepInfo> log;
  log.reserve(static_cast<size_t>(o.steps));
  o.on_step = [&](const train::StepInfo& s) {
    log.push_back(s);
    progress.step(s);
    if (!std::isnan(s.val_loss)) {
      char b[128];
      std::snprintf(b, sizeof b, "step %lld: val loss %.4f (train loss %.4f)", static_cast<long long>(s.step), s.val_loss,
                    s.loss);
      progress.message(b);
    }
  };
  o.on_message = [&](const std::string& m) { progress.message(m); };
  o.should_stop = [] { return g_signal != 0; };
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, on_stop_signal);

  std::printf("%s\n", o.model.describe().c_str());
  if (!o.init_from.empty()) std::printf("weights from '%s'\n", o.init_from.c_str());
  std::printf("lane %s; %s: %s; seed %llu; lr %g", train::lane_name(o.lane),
              !o.sft_path.empty() ? "sft" : o.tokens_path.empty() ? "text" : "tokens",
              !o.sft_path.empty() ? o.sft_path.c_str() : !o.tokens_path.empty() ? o.tokens_path.c_str() : o.text_path.empty() ? "the built-in corpus" : o.text_path.c_str(),
              static_cast<unsigned long long>(o.seed),
              o.adamw.lr);
  if (o.tokenizer != "char") std::printf("; tokenizer %s", o.tokenizer.c_str());
  if (o.schedule.warmup_steps > 0) std::printf(", warmup %lld steps", static_cast<long long>(o.schedule.warmup_steps));
  if (o.schedule.kind == train::Schedule::cosine) std::printf(", cosine to %g at step %lld", o.schedule.min_lr,
                                                               static_cast<long long>(o.steps));
  if (o.clip_grad_norm > 0) std::printf(", gradients clipped to norm %g", o.clip_grad_norm);
  if (o.precision == optim::Precision::bf16) std::printf("; precision bf16 (GEMM operands bf16, f32 accumulation)");
  if (o.fused_attention) std::printf(", fused attention");
  if (o.lora.on())
    std::printf("; LoRA %s%s", o.lora.from.empty() ? ("r " + std::to_string(o.lora.rank)).c_str() : ("from " + o.lora.from).c_str(),
                o.lora.base_bf16 ? ", base in bf16" : "");
  if (o.grad_accum > 1)
    std::printf(", %lld micro-batches a step (batch %lld)", static_cast<long long>(o.grad_accum),
                static_cast<long long>(o.grad_accum * o.model.batch));
  if (o.checkpoint_every > 0) {
    std::printf(o.checkpoint_every == 1 ? ", activations checkpointed (every block recomputed in the backward"
                                        : ", activations checkpointed (every %d blocks from block 0",
                o.checkpoint_every);
    const int64_t chunks = nn::lm_loss_chunks(o.model);
    if (chunks > 1) std::printf(", and the loss's %lld chunks of logits", static_cast<long long>(chunks));
    std::printf(")");
  }
  if (o.comm)
    std::printf(", data-parallel over %d ranks (global batch %lld)", o.comm->size(),
                static_cast<long long>(o.comm->size() * o.model.batch));
  std::printf("\n");
  std::fflush(stdout);
  train::Result r;
#ifdef CAPSTEP_HAVE_MPI
  try {
    r = train::train(o);
  } catch (const std::exception& e) {
    if (!comm || comm->size() == 1) throw;
    // The other ranks may be inside a collective that will never complete;
    // MPI_Finalize would wait for them. End the whole job instead.
    progress.finish();
    std::fflush(stdout);
    std::fprintf(stderr, "capstep train: error: rank %d: %s\n", comm->rank(), e.what());
    std::fflush(stderr);
    comm->abort(kFailed);
  }
#else
  r = train::train(o);
#endif
  progress.finish();

  if (!r.losses.empty()) {
    std::printf("trained steps %lld..%lld on the %s lane in %.1f s (%s tokens/s); loss %.4f -> %.4f\n",
                static_cast<long long>(r.first_step), static_cast<long long>(r.last_step), train::lane_name(r.lane_used),
                r.seconds, rate_text(r.tokens_per_s).c_str(), r.losses.front(), r.losses.back());
  }
  if (!r.val_losses.empty())
    std::printf("validation loss %.4f at step %lld; best %.4f\n", r.val_losses.back(),
                static_cast<long long>(r.val_steps.back()), r.best_val_loss);
  if (!a.log_csv.empty()) {
    write_csv(a.log_csv, log, o.clip_grad_norm > 0, o.val_fraction > 0 || !o.val_tokens_path.empty());
    std::printf("loss log: %s (%zu rows)\n", a.log_csv.c_str(), log.size());
  }
  if (!a.plot.empty() && !log.empty()) {
    Curve c{o.model.describe(), {}, {}, {}, {}};
    c.unit = o.tokenizer == "char" ? "character" : o.tokenizer == "byte" ? "byte" : "token";
    for (const train::StepInfo& s : log) {
      c.steps.push_back(s.step);
      c.losses.push_back(s.loss);
      if (!std::isnan(s.val_loss)) {
        c.val_steps.push_back(s.step);
        c.val_losses.push_back(s.val_loss);
      }
    }
    plot_losses(c, a.plot);
    std::printf("loss curve: %s\n", a.plot.c_str());
  }
  std::fflush(stdout);
  if (!r.stopped.empty()) {
    std::cerr << "capstep train: " << r.stopped << '\n';
    return kFailed;
  }
  if (!r.interrupted) return kOk;
  // A rank of a data-parallel run may stop because another rank got the signal.
  const int sig = g_signal != 0 ? static_cast<int>(g_signal) : SIGINT;
  if (g_signal != 0)
    std::cerr << "capstep train: " << signal_name(sig) << ": stopped after step " << r.last_step << '\n';
  return 128 + sig;
}

}  // namespace capstep::cli
