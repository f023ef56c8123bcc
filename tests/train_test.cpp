// The training loop and the sampler (include/capstep/train.h): resume is
// bit-identical, a non-finite loss stops training and keeps the last good
// checkpoint, checkpoints hold what one AdamW step computes, the host lane
// allocates nothing per step, and greedy sampling picks the logits' argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "capstep/autodiff.h"
#include "backend/cuda/cuda.h"
#include "capstep/data.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/train.h"

#include "test_util.h"

// Every allocation of this test binary is counted, to hold the host lane to
// its promise of no allocation per step in the steady state. Not under
// AddressSanitizer, whose own operator new must pair with its delete.
#if defined(__SANITIZE_ADDRESS__)
#define CAPSTEP_COUNT_ALLOCATIONS 0
#else
#define CAPSTEP_COUNT_ALLOCATIONS 1
#endif
static std::atomic<long> g_allocations{0};
#if CAPSTEP_COUNT_ALLOCATIONS
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Out of line, so g++ does not pair an inlined free() with operator new and
// warn (-Wmismatched-new-delete) at every delete in the file.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace fs = std::filesystem;
using namespace capstep;
using namespace capstep::test;

namespace {

// A model small enough that a dozen steps take milliseconds, with every kind
// of parameter of the seed's model.
train::Options small_options() {
  train::Options o;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_ff = 64;
  o.model.context = 32;
  o.model.batch = 2;
  o.model.seq = 8;
  o.seed = 7;
  return o;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// `first` (small_options() on some lane, with its steps and save path) run,
// then resumed from its checkpoint on the host lane up to `total` steps: the
// losses of both parts, joined; `first_lane` gets the lane the first part ran on.
std::vector<double> then_on_the_host(const train::Options& first, int64_t total, train::Lane* first_lane = nullptr) {
  const train::Result r1 = train::train(first);
  if (first_lane) *first_lane = r1.lane_used;
  train::Options rest = small_options();
  rest.steps = total;
  rest.resume_path = first.save_path;
  const train::Result r2 = train::train(rest);
  std::vector<double> all = r1.losses;
  all.insert(all.end(), r2.losses.begin(), r2.losses.end());
  return all;
}

}  // namespace

TEST(Train, ResumedLossesAreBitIdenticalToAnUninterruptedRun) {
  TempDir d;
  train::Options whole = small_options();
  whole.steps = 12;
  whole.save_path = d.file("whole.safetensors");
  const train::Result a = train::train(whole);
  ASSERT_TRUE(a.stopped.empty()) << a.stopped;
  ASSERT_EQ(a.losses.size(), 12u);

  train::Options first = small_options();
  first.steps = 6;
  first.save_path = d.file("half.safetensors");
  const train::Result b1 = train::train(first);
  ASSERT_EQ(b1.losses.size(), 6u);

  train::Options second = small_options();
  second.steps = 12;
  second.resume_path = d.file("half.safetensors");
  second.save_path = d.file("resumed.safetensors");
  const train::Result b2 = train::train(second);
  ASSERT_EQ(b2.first_step, 7);
  ASSERT_EQ(b2.losses.size(), 6u);

  for (size_t k = 0; k < 12; ++k) {
    const double resumed = k < 6 ? b1.losses[k] : b2.losses[k - 6];
    EXPECT_TRUE(same_bits(a.losses[k], resumed)) << "step " << k + 1 << ": " << a.losses[k] << " vs " << resumed;
  }
  // Training moved: the losses are not all one number.
  EXPECT_NE(a.losses.front(), a.losses.back());

  // And the final states agree bit for bit, moments included.
  const Checkpoint x = load_checkpoint(whole.save_path), y = load_checkpoint(second.save_path);
  EXPECT_EQ(x.step, 12u);
  EXPECT_EQ(y.step, 12u);
  EXPECT_EQ(x.data_position, y.data_position);
  ASSERT_EQ(x.params.size(), y.params.size());
  for (size_t j = 0; j < x.params.size(); ++j) {
    EXPECT_TRUE(x.params[j].array.bit_equal(y.params[j].array)) << x.params[j].name;
    EXPECT_TRUE(x.adam_m[j].array.bit_equal(y.adam_m[j].array)) << x.adam_m[j].name;
    EXPECT_TRUE(x.adam_v[j].array.bit_equal(y.adam_v[j].array)) << x.adam_v[j].name;
  }
}

// Issue 15, item 2: warmup and cosine, the closed form at chosen steps.
TEST(Schedule, LrAtChosenStepsEqualsTheClosedForm) {
  train::LrSchedule s;
  s.warmup_steps = 10;
  // Constant after a warmup: lr * step / W, then lr.
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 1, 100), 1e-4);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 5, 100), 5e-4);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 10, 100), 1e-3);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 11, 100), 1e-3);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 100, 100), 1e-3);
  // Cosine from lr at the end of the warmup to min_lr at the last step.
  s.kind = train::Schedule::cosine;
  s.min_lr = 1e-4;
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 10, 110), 1e-3);
  EXPECT_NEAR(train::scheduled_lr(s, 1e-3, 60, 110), 5.5e-4, 1e-15);             // t = 1/2: the midpoint
  EXPECT_NEAR(train::scheduled_lr(s, 1e-3, 35, 110), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(train::scheduled_lr(s, 1e-3, 110, 110), 1e-4);
  // No warmup: step 1 already decays a little.
  s.warmup_steps = 0;
  EXPECT_NEAR(train::scheduled_lr(s, 1e-3, 1, 3), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI / 3)), 1e-15);
  EXPECT_EQ(train::parse_schedule("cosine"), train::Schedule::cosine);
  EXPECT_NE(error_of([] { train::parse_schedule("linear"); }).find("constant, cosine"), std::string::npos);
  // Out of range is refused by name.
  train::Options o = small_options();
  o.schedule.min_lr = 2 * o.adamw.lr;
  EXPECT_NE(error_of([&] { o.validate(); }).find("min-lr"), std::string::npos);
  o = small_options();
  o.schedule.warmup_steps = -1;
  EXPECT_NE(error_of([&] { o.validate(); }).find("warmup-steps"), std::string::npos);
}

// The loop uses the schedule (StepInfo::lr, and the losses differ from a
// constant lr after step 1) and a run resumed mid-warmup, then mid-cosine,
// continues bit for bit.
TEST(Schedule, ResumeMidWarmupAndMidCosineIsBitIdentical) {
  TempDir d;
  auto opts = [&](int64_t steps) {
    train::Options o = small_options();
    o.steps = steps;
    o.schedule = {train::Schedule::cosine, 4, 1e-4};
    return o;
  };
  train::Options whole = opts(12);
  std::vector<double> lrs;
  whole.on_step = [&](const train::StepInfo& s) { lrs.push_back(s.lr); };
  whole.save_path = d.file("whole.safetensors");
  const train::Result a = train::train(whole);
  ASSERT_EQ(a.losses.size(), 12u);
  ASSERT_EQ(lrs.size(), 12u);
  for (int64_t k = 1; k <= 12; ++k)
    EXPECT_EQ(lrs[static_cast<size_t>(k - 1)], train::scheduled_lr(whole.schedule, whole.adamw.lr, k, 12)) << k;
  EXPECT_DOUBLE_EQ(lrs[0], whole.adamw.lr / 4);
  EXPECT_DOUBLE_EQ(lrs[11], 1e-4);

  // Unscheduled: the same first loss (before any update), different later ones.
  train::Options flat = small_options();
  flat.steps = 3;
  const train::Result f = train::train(flat);
  EXPECT_TRUE(same_bits(f.losses[0], a.losses[0]));
  EXPECT_FALSE(same_bits(f.losses[2], a.losses[2]));

  // 12 steps as 1..2 (mid-warmup), 3..7 (into the cosine), 8..12.
  std::vector<double> pieced;
  std::string from;
  for (int64_t end : {2, 7, 12}) {
    train::Options o = opts(12);
    o.steps = end;
    o.resume_path = from;
    o.save_path = d.file("part" + std::to_string(end) + ".safetensors");
    // The cosine horizon is the run's end: resume with the same --steps. So
    // the parts stop early through should_stop rather than a smaller `steps`.
    o.steps = 12;
    int64_t at = 0;
    o.on_step = [&](const train::StepInfo& s) { at = s.step; };
    o.should_stop = [&] { return at >= end; };
    const train::Result r = train::train(o);
    pieced.insert(pieced.end(), r.losses.begin(), r.losses.end());
    from = o.save_path;
  }
  ASSERT_EQ(pieced.size(), 12u);
  for (size_t k = 0; k < 12; ++k)
    EXPECT_TRUE(same_bits(a.losses[k], pieced[k])) << "step " << k + 1 << ": " << a.losses[k] << " vs " << pieced[k];
  const Checkpoint x = load_checkpoint(whole.save_path), y = load_checkpoint(from);
  ASSERT_EQ(y.step, 12u);
  for (size_t j = 0; j < x.params.size(); ++j) EXPECT_TRUE(x.params[j].array.bit_equal(y.params[j].array)) << x.params[j].name;
}

// Issue 15, item 3 in the loop: a limit above every step's norm trains bit for
// bit like no clipping (and reports the norm); a tight limit changes the run;
// a clipped run resumes bit for bit.
TEST(Clip, TrainingWithClippingAboveTheNormIsUnclippedAndResumes) {
  TempDir d;
  train::Options plain = small_options();
  plain.steps = 6;
  const train::Result a = train::train(plain);

  train::Options loose = plain;
  loose.clip_grad_norm = 1e6;
  std::vector<double> norms;
  loose.on_step = [&](const train::StepInfo& s) { norms.push_back(s.grad_norm); };
  const train::Result b = train::train(loose);
  ASSERT_EQ(b.losses.size(), 6u);
  ASSERT_EQ(norms.size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_TRUE(same_bits(a.losses[k], b.losses[k])) << "step " << k + 1;
    EXPECT_TRUE(std::isfinite(norms[k]) && norms[k] > 0 && norms[k] < 1e6) << norms[k];
  }
  // Unclipped runs report no norm.
  double unclipped_norm = 0;
  plain.on_step = [&](const train::StepInfo& s) { unclipped_norm = s.grad_norm; };
  train::train(plain);
  EXPECT_TRUE(std::isnan(unclipped_norm));

  train::Options tight = plain;
  tight.on_step = nullptr;
  tight.clip_grad_norm = norms[0] / 10;
  tight.save_path = d.file("tight.safetensors");
  const train::Result c = train::train(tight);
  EXPECT_TRUE(same_bits(a.losses[0], c.losses[0]));
  EXPECT_FALSE(same_bits(a.losses[2], c.losses[2]));

  train::Options half = tight;
  half.steps = 3;
  half.save_path = d.file("half.safetensors");
  train::train(half);
  train::Options rest = tight;
  rest.resume_path = half.save_path;
  rest.save_path = d.file("rest.safetensors");
  const train::Result e = train::train(rest);
  ASSERT_EQ(e.losses.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(same_bits(c.losses[3 + k], e.losses[k])) << "step " << k + 4;
  train::Options bad = small_options();
  bad.clip_grad_norm = -1;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("clip-grad-norm"), std::string::npos);
}

// Issue 15, item 1: the split is a cut at a fixed place, so no validation token
// is in a training window.
TEST(Validation, SplitIsACutAtAFixedPlace) {
  std::vector<int32_t> t(1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i % 64);
  const data::TokenSplit s = data::split_tokens(t, 0.1);
  ASSERT_EQ(s.train.size(), 900u);
  ASSERT_EQ(s.val.size(), 100u);
  EXPECT_TRUE(std::equal(s.train.begin(), s.train.end(), t.begin()));
  EXPECT_TRUE(std::equal(s.val.begin(), s.val.end(), t.begin() + 900));
  EXPECT_EQ(data::split_tokens(t, 0.0).val.size(), 0u);
  EXPECT_EQ(data::split_tokens(t, 0.25).val.size(), 250u);
  EXPECT_THROW(data::split_tokens(t, 1.0), Error);
  EXPECT_THROW(data::split_tokens(t, -0.1), Error);
  // Every window of a training stream lies in the training part: its last
  // target index is below the cut.
  data::BatchStream train(s.train, 3, 4, 16);
  for (uint64_t k = 0; k < 200; ++k)
    for (int64_t r = 0; r < 4; ++r) EXPECT_LE(train.window_start(k, r) + 16, 899);
}

// The validation loss is the mean forward loss of fixed validation batches at
// the current parameters: recomputed here from the final checkpoint; the same
// in a second run; the best one is in the checkpoint.
TEST(Validation, ValLossIsTheForwardLossOfFixedBatchesAndDeterministic) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 6;
  o.val_fraction = 0.1;
  o.eval_every = 2;
  o.eval_batches = 3;
  o.save_path = d.file("v.safetensors");
  std::vector<double> seen;
  o.on_step = [&](const train::StepInfo& s) { seen.push_back(s.val_loss); };
  const train::Result a = train::train(o);
  ASSERT_EQ(a.val_steps, (std::vector<int64_t>{2, 4, 6}));
  ASSERT_EQ(a.val_losses.size(), 3u);
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_TRUE(std::isnan(seen[0]) && std::isnan(seen[2]) && std::isnan(seen[4]));
  EXPECT_TRUE(same_bits(seen[5], a.val_losses[2]));
  EXPECT_EQ(a.best_val_loss, *std::min_element(a.val_losses.begin(), a.val_losses.end()));

  // Independently: the last 10% of the corpus, batches 0..2, the loss program.
  const std::vector<int32_t> all = data::encode(data::builtin_corpus());
  const data::TokenSplit sp = data::split_tokens(all, 0.1);
  data::BatchStream vs(sp.val, o.seed, o.model.batch, o.model.seq);
  const Checkpoint c = load_checkpoint(o.save_path);
  const Program fwd = nn::lm_loss_program(o.model);
  double mean = 0;
  for (uint64_t k = 0; k < 3; ++k) {
    std::vector<Array> in;
    for (const NamedArray& p : c.params) in.push_back(p.array);
    const data::Batch b = vs.at(k);
    in.push_back(b.inputs);
    in.push_back(b.targets);
    mean += host::run(fwd, in)[0].get(0) / 3;
  }
  EXPECT_NEAR(a.val_losses[2], mean, 1e-6 * mean);
  EXPECT_GT(mean, 1.0);
  EXPECT_LT(mean, 5.0);

  const train::TrainMeta m = train::parse_meta(c);
  EXPECT_NEAR(m.best_val_loss, a.best_val_loss, 1e-8 * a.best_val_loss);

  o.save_path = d.file("w.safetensors");
  o.on_step = nullptr;
  const train::Result b = train::train(o);
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(same_bits(a.val_losses[k], b.val_losses[k])) << k;
  // Training used only the training part: the losses differ from a run on the whole text.
  train::Options whole = small_options();
  whole.steps = 6;
  EXPECT_FALSE(same_bits(train::train(whole).losses[0], a.losses[0]));
  train::Options bad = small_options();
  bad.val_fraction = 1;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("val-fraction"), std::string::npos);
}

// The checkpoint records the schedule and the clipping limit (issue 15: a
// resumed run continues the schedule without the options given again); a
// checkpoint written before those keys existed still loads, without them.
TEST(Schedule, CheckpointRecordsScheduleAndClip) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 3;
  o.schedule = {train::Schedule::cosine, 2, 2.5e-4};
  o.clip_grad_norm = 0.75;
  o.save_path = d.file("s.safetensors");
  train::train(o);
  Checkpoint c = load_checkpoint(o.save_path);
  const train::TrainMeta m = train::parse_meta(c);
  ASSERT_TRUE(m.has_schedule);
  EXPECT_EQ(m.schedule.kind, train::Schedule::cosine);
  EXPECT_EQ(m.schedule.warmup_steps, 2);
  EXPECT_EQ(m.schedule.min_lr, 2.5e-4);
  EXPECT_EQ(m.steps, 3);
  EXPECT_EQ(m.clip_grad_norm, 0.75);
  // Issue 26: the settings that change the math, for a resumed run to restore.
  ASSERT_TRUE(m.precision && m.fused_attention && m.val_fraction);
  EXPECT_EQ(*m.precision, o.precision);
  EXPECT_EQ(*m.fused_attention, o.fused_attention);
  EXPECT_EQ(*m.val_fraction, o.val_fraction);
  EXPECT_FALSE(m.text_hash) << "the built-in corpus has no file to fingerprint";

  // The metadata as it was before the schedule keys: no schedule, no error.
  c.extra[train::kTrainMetadataKey] =
      R"({"seed":7,"lr":0.001,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.01,"text":"builtin"})";
  const train::TrainMeta old = train::parse_meta(c);
  EXPECT_TRUE(old.has_train);
  EXPECT_FALSE(old.has_schedule);
  EXPECT_FALSE(old.precision || old.fused_attention || old.val_fraction || old.text_hash);
  // A schedule out of range, or unknown, is an error that says so.
  c.extra[train::kTrainMetadataKey] =
      R"({"seed":7,"lr":0.001,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.01,"text":"builtin",)"
      R"("schedule":"cosine","warmup_steps":-1,"min_lr":0,"steps":3,"clip_grad_norm":0})";
  EXPECT_NE(error_of([&] { train::parse_meta(c); }).find("schedule out of range"), std::string::npos);
  c.extra[train::kTrainMetadataKey] =
      R"({"seed":7,"lr":0.001,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.01,"text":"builtin",)"
      R"("schedule":"linear","warmup_steps":0,"min_lr":0,"steps":3,"clip_grad_norm":0})";
  EXPECT_NE(error_of([&] { train::parse_meta(c); }).find("linear"), std::string::npos);
  c.extra[train::kTrainMetadataKey] =
      R"({"seed":7,"lr":0.001,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.01,"text":"builtin",)"
      R"("precision":"fp8"})";
  EXPECT_NE(error_of([&] { train::parse_meta(c); }).find("unknown precision: fp8"), std::string::npos);
}

// file_fingerprint: FNV-1a 64 of the bytes (the published test vectors), and
// an error naming a file it cannot read.
TEST(Train, FileFingerprintIsFnv1a64) {
  TempDir d;
  EXPECT_EQ(train::file_fingerprint(d.write("empty", "")), "cbf29ce484222325");
  EXPECT_EQ(train::file_fingerprint(d.write("a", "a")), "af63dc4c8601ec8c");
  EXPECT_EQ(train::file_fingerprint(d.write("foobar", "foobar")), "85944171f73967e8");
  EXPECT_NE(error_of([&] { train::file_fingerprint(d.file("missing")); }).find("missing'"), std::string::npos);
  EXPECT_EQ(train::absolute_path("/x/./y/../z"), "/x/z");
}

// Issue 15, item 4: the spike rule on numbers, and the loop reports a spike
// (not fatal) when a step's loss jumps.
TEST(Spikes, RuleAndReport) {
  const double flat[6] = {2.0, 2.1, 1.9, 2.0, 2.05, 1.95};
  EXPECT_FALSE(train::is_loss_spike(flat, 6, 2.9));    // +45%: within 1.5x
  EXPECT_TRUE(train::is_loss_spike(flat, 6, 3.1));     // +55%, far outside the noise
  EXPECT_FALSE(train::is_loss_spike(flat, 1, 9.0));    // too few recent losses
  const double noisy[6] = {1.0, 2.0, 1.0, 2.0, 1.0, 2.0};   // mean 1.5, sd 0.5
  EXPECT_FALSE(train::is_loss_spike(noisy, 6, 3.9));   // above 1.5x but within 5 sd
  EXPECT_TRUE(train::is_loss_spike(noisy, 6, 4.1));

  // lr 0.1 without warmup makes the small model's loss jump at steps 3-4
  // (4.15, 3.70, 5.45, 8.82, ...): the issue's early spike, in small.
  train::Options o = small_options();
  o.steps = 30;
  o.adamw.lr = 0.1;
  std::vector<std::string> said;
  o.on_message = [&](const std::string& m) { said.push_back(m); };
  const train::Result r = train::train(o);
  ASSERT_FALSE(r.spikes.empty()) << "no spike at lr 0.1";
  const int64_t k = r.spikes[0];
  EXPECT_EQ(k, 4);
  // At the default lr the same run has none.
  train::Options calm = small_options();
  calm.steps = 30;
  EXPECT_TRUE(train::train(calm).spikes.empty());
  bool reported = false;
  for (const std::string& m : said) reported |= m.rfind("step " + std::to_string(k) + ": loss spike: ", 0) == 0;
  EXPECT_TRUE(reported);
  // The rule holds at that step against the 20 before it (fewer at the start).
  const size_t at = static_cast<size_t>(k - 1), from = at >= 20 ? at - 20 : 0;
  EXPECT_TRUE(train::is_loss_spike(r.losses.data() + from, at - from, r.losses[at]));
}

TEST(Train, CheckpointHoldsOneAdamWStepComputedIndependently) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 1;
  o.save_path = d.file("one.safetensors");
  const train::Result r = train::train(o);
  ASSERT_EQ(r.losses.size(), 1u);

  train::TrainMeta meta;
  const Checkpoint c = train::load_model_checkpoint(o.save_path, &meta);
  EXPECT_EQ(c.step, 1u);
  EXPECT_EQ(c.data_position, 1u);
  EXPECT_EQ(meta.model.to_json(), o.model.to_json());
  ASSERT_TRUE(meta.has_train);
  EXPECT_EQ(meta.seed, 7u);
  EXPECT_EQ(meta.adamw.lr, o.adamw.lr);
  EXPECT_EQ(meta.text, "builtin");
  // The model config is the model's own JSON; the training settings ride in
  // the extra "train" metadata.
  EXPECT_EQ(c.model_config, o.model.to_json());
  EXPECT_EQ(c.extra.count(train::kTrainMetadataKey), 1u);

  // The gradient of batch 0 at the initial parameters, from the programs
  // directly: after one step m = (1-b1) g and v = (1-b2) g^2.
  const std::vector<nn::ParamSpec> specs = nn::lm_parameters(o.model);
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : specs) names.push_back(p.name);
  std::vector<Array> ins = nn::init_parameters(o.model, o.seed);
  const data::Batch b = data::BatchStream(data::encode(data::builtin_corpus()), o.seed, o.model.batch, o.model.seq).at(0);
  ins.push_back(b.inputs);
  ins.push_back(b.targets);
  const std::vector<Array> out = host::run(value_and_grad(nn::lm_loss_program(o.model), names), ins);
  EXPECT_NEAR(out[0].get(0), r.losses[0], 1e-6 * std::fabs(r.losses[0]));
  ASSERT_EQ(c.params.size(), specs.size());
  double largest_change = 0;
  for (size_t j = 0; j < specs.size(); ++j) {
    const Array& g = out[1 + j];
    ASSERT_EQ(c.params[j].name, specs[j].name);
    for (int64_t i = 0; i < g.numel(); i += 7) {
      const double gi = g.get(i);
      EXPECT_NEAR(c.adam_m[j].array.get(i), 0.1 * gi, 1e-6 * std::fabs(gi) + 1e-12) << specs[j].name << "[" << i << "]";
      EXPECT_NEAR(c.adam_v[j].array.get(i), 0.001 * gi * gi, 1e-6 * gi * gi + 1e-20) << specs[j].name << "[" << i << "]";
      largest_change = std::max(largest_change, std::fabs(c.params[j].array.get(i) - ins[j].get(i)));
    }
  }
  // Step 1 of Adam moves each weight by about lr (m/sqrt(v) = sign(g)).
  EXPECT_GT(largest_change, 0.5 * o.adamw.lr);
  EXPECT_LT(largest_change, 1.5 * o.adamw.lr);
}

TEST(Train, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  TempDir d;
  train::Options o = small_options();
  o.adamw.lr = 1e10;   // each step moves every weight by about 1e10
  o.steps = 50;
  o.save_path = d.file("run.safetensors");
  o.save_every = 1;
  std::vector<std::string> messages;
  o.on_message = [&](const std::string& m) { messages.push_back(m); };
  const train::Result r = train::train(o);
  ASSERT_FALSE(r.stopped.empty()) << "a learning rate of 1e10 did not diverge in 50 steps";
  const int64_t bad = r.last_step + 1;
  EXPECT_NE(r.stopped.find("step " + std::to_string(bad) + ":"), std::string::npos) << r.stopped;
  EXPECT_NE(r.stopped.find("is kept"), std::string::npos) << r.stopped;
  // The reason is returned, not also said: `capstep train` prints it once, on stderr.
  EXPECT_EQ(std::count(messages.begin(), messages.end(), r.stopped), 0) << r.stopped;
  EXPECT_LT(r.last_step, 50);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  // The file is the last good state: finite, at the last step saved.
  const Checkpoint c = load_checkpoint(o.save_path);
  EXPECT_EQ(static_cast<int64_t>(c.step), r.last_saved_step);
  EXPECT_LE(r.last_saved_step, r.last_step);
  for (const NamedArray& p : c.params)
    for (int64_t i = 0; i < p.array.numel(); ++i) ASSERT_TRUE(std::isfinite(p.array.get(i))) << p.name;
}

TEST(Train, ShouldStopEndsTheRunWithACheckpointOfThatStep) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 100;
  o.save_path = d.file("stop.safetensors");
  int calls = 0;
  o.should_stop = [&] { return ++calls == 4; };
  const train::Result r = train::train(o);
  EXPECT_TRUE(r.interrupted);
  EXPECT_TRUE(r.stopped.empty());
  EXPECT_EQ(r.last_step, 4);
  EXPECT_EQ(r.losses.size(), 4u);
  EXPECT_EQ(r.last_saved_step, 4);
  EXPECT_EQ(load_checkpoint(o.save_path).step, 4u);
}

TEST(Train, HostLaneAllocatesNothingPerStep) {
  if (!CAPSTEP_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
  train::Options o = small_options();
  o.steps = 12;
  std::vector<long> at_step;
  at_step.reserve(16);
  o.on_step = [&](const train::StepInfo&) { at_step.push_back(g_allocations.load()); };
  train::train(o);
  ASSERT_EQ(at_step.size(), 12u);
  // From step 3 on (the first steps size the held outputs), nothing.
  EXPECT_EQ(at_step[11] - at_step[2], 0) << "allocations in steps 4..12";
}

TEST(Train, ProgressCountsStepsAndTokens) {
  train::Options o = small_options();
  o.steps = 5;
  std::vector<train::StepInfo> seen;
  o.on_step = [&](const train::StepInfo& s) { seen.push_back(s); };
  const train::Result r = train::train(o);
  ASSERT_EQ(seen.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(seen[k].step, static_cast<int64_t>(k) + 1);
    EXPECT_EQ(seen[k].first_step, 1);
    EXPECT_EQ(seen[k].last_step, 5);
    EXPECT_EQ(seen[k].loss, r.losses[k]);
    EXPECT_GT(seen[k].elapsed_s, 0);
    // batch 2 x seq 8 = 16 tokens a step
    EXPECT_NEAR(seen[k].tokens_per_s * seen[k].elapsed_s, 16.0 * static_cast<double>(k + 1), 1e-6);
  }
  // The first loss of a fresh model is about ln(64): it guesses uniformly.
  EXPECT_NEAR(r.losses[0], std::log(64.0), 0.1);
}

TEST(Train, ResumeRefusesAnotherModelAndAFinishedRun) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 2;
  o.save_path = d.file("a.safetensors");
  train::train(o);
  train::Options other = small_options();
  other.model.n_layers = 3;
  other.resume_path = o.save_path;
  EXPECT_NE(error_of([&] { train::train(other); }).find("different model"), std::string::npos);
  train::Options again = small_options();
  again.steps = 2;
  again.resume_path = o.save_path;
  EXPECT_NE(error_of([&] { train::train(again); }).find("is at step 2"), std::string::npos);
}

TEST(Train, GpuLaneWithoutADeviceFallsBackOrFails) {
  std::string why;
  if (cuda::available(&why)) GTEST_SKIP() << "a GPU is present; the fallback is for machines without one";
  train::Options o = small_options();
  o.steps = 2;
  o.lane = train::Lane{BackendKind::cuda, true};
  std::vector<std::string> messages;
  o.on_message = [&](const std::string& m) { messages.push_back(m); };
  const train::Result r = train::train(o);
  EXPECT_EQ(r.lane_used, (train::Lane{BackendKind::host, true}));
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages[0].find("lane cuda-fused falls back to the host-fused lane"), std::string::npos) << messages[0];
  o.require_backend = true;
  EXPECT_NE(error_of([&] { train::train(o); }).find("lane cuda-fused cannot run here: "), std::string::npos);
}

// Ten steps with warmup + cosine, clipping inside the step and the
// validation loss every five steps.
train::Options scheduled_clipped_validated() {
  train::Options o = small_options();
  o.steps = 10;
  o.schedule = {train::Schedule::cosine, 3, 1e-4};
  o.clip_grad_norm = 0.5;
  o.val_fraction = 0.1;
  o.eval_every = 5;
  o.eval_batches = 2;
  return o;
}

// AdamW in the program on the host (the with_adamw step, state updated in
// place) takes the same steps as AdamW in C++, bit for bit: the losses, the
// norms before clipping, the validation losses, and the checkpointed state,
// which resumes on the other lane with the uninterrupted run's losses.
TEST(Train, HostFusedLaneIsTheHostLaneBitForBit) {
  TempDir d;
  auto options = scheduled_clipped_validated;
  train::Options h = options();
  std::vector<double> host_norms;
  h.on_step = [&](const train::StepInfo& s) { host_norms.push_back(s.grad_norm); };
  h.save_path = d.file("host.safetensors");
  const train::Result host = train::train(h);
  train::Options f = options();
  f.lane = train::parse_lane("host-fused");
  std::vector<double> norms;
  f.on_step = [&](const train::StepInfo& s) { norms.push_back(s.grad_norm); };
  f.save_path = d.file("fused.safetensors");
  const train::Result fused = train::train(f);
  ASSERT_EQ(fused.lane_used, (train::Lane{BackendKind::host, true}));
  EXPECT_EQ(fused.losses, host.losses);
  EXPECT_EQ(norms, host_norms);
  EXPECT_EQ(fused.val_losses, host.val_losses);
  const Checkpoint a = load_checkpoint(h.save_path), b = load_checkpoint(f.save_path);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t j = 0; j < a.params.size(); ++j) {
    EXPECT_TRUE(a.params[j].array.bit_equal(b.params[j].array)) << a.params[j].name;
    EXPECT_TRUE(a.adam_m[j].array.bit_equal(b.adam_m[j].array)) << a.adam_m[j].name;
    EXPECT_TRUE(a.adam_v[j].array.bit_equal(b.adam_v[j].array)) << a.adam_v[j].name;
  }
  // Five steps on the fused lane, the rest resumed on the host lane (a
  // constant rate: a cosine schedule's length is the run's).
  train::Options whole = small_options();
  whole.steps = 10;
  const train::Result reference = train::train(whole);
  train::Options first = small_options();
  first.lane = train::parse_lane("host-fused");
  first.steps = 5;
  first.save_path = d.file("half.safetensors");
  EXPECT_EQ(then_on_the_host(first, 10), reference.losses);
}

// On a machine with a GPU: both GPU lanes follow the host's losses within the
// seed's 1e-3 relative (TF32 dots), and a checkpoint of the fused lane (its
// state downloaded from the device) resumes on the host.
TEST(Train, GpuLanesFollowTheHostAndTheirCheckpointsResume) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no GPU: " << why;
  TempDir d;
  train::Options h = small_options();
  h.steps = 12;
  const train::Result host = train::train(h);
  for (train::Lane lane : {train::Lane{BackendKind::cuda, false}, train::Lane{BackendKind::cuda, true}}) {
    train::Options g = small_options();
    g.steps = 6;
    g.lane = lane;
    g.require_backend = true;
    g.save_path = d.file(std::string(train::lane_name(lane)) + ".safetensors");
    train::Lane used;
    const std::vector<double> all = then_on_the_host(g, 12, &used);
    ASSERT_EQ(used, lane);
    ASSERT_EQ(all.size(), 12u);
    for (size_t k = 0; k < 12; ++k)
      EXPECT_LE(std::fabs(all[k] - host.losses[k]) / std::fabs(host.losses[k]), 1e-3)
          << train::lane_name(lane) << " step " << k + 1 << ": " << all[k] << " vs host " << host.losses[k];
  }
}

// capstep train on XLA through a PJRT plugin, AdamW on the host and in the
// program: the losses, the norms before clipping and the validation losses
// follow the host lane's within 1e-5 relative, and a checkpoint of the fused
// lane (its state read back from the plugin's buffers) resumes on the host.
TEST(Train, PjrtLanesFollowTheHostAndTheirCheckpointsResume) {
  std::string why;
  const std::string plugin = test::pjrt_plugin(&why);
  if (plugin.empty()) GTEST_SKIP() << why;
  TempDir d;
  train::Options h = scheduled_clipped_validated();
  std::vector<double> host_norms;
  h.on_step = [&](const train::StepInfo& s) { host_norms.push_back(s.grad_norm); };
  const train::Result host = train::train(h);
  for (const char* lane : {"pjrt", "pjrt-fused"}) {
    train::Options x = scheduled_clipped_validated();
    x.lane = train::parse_lane(lane);
    x.require_backend = true;
    x.backend.pjrt.plugin = plugin;
    std::vector<double> norms;
    x.on_step = [&](const train::StepInfo& s) { norms.push_back(s.grad_norm); };
    const train::Result r = train::train(x);
    ASSERT_EQ(r.lane_used, x.lane);
    ASSERT_EQ(r.losses.size(), host.losses.size());
    ASSERT_EQ(norms.size(), host_norms.size());
    for (size_t k = 0; k < r.losses.size(); ++k) {
      EXPECT_LE(std::fabs(r.losses[k] - host.losses[k]) / host.losses[k], 1e-5) << lane << " step " << k + 1;
      EXPECT_LE(std::fabs(norms[k] - host_norms[k]) / host_norms[k], 1e-5) << lane << " norm, step " << k + 1;
    }
    ASSERT_EQ(r.val_losses.size(), host.val_losses.size());
    for (size_t k = 0; k < r.val_losses.size(); ++k)
      EXPECT_LE(std::fabs(r.val_losses[k] - host.val_losses[k]) / host.val_losses[k], 1e-5) << lane;
  }
  // Five steps on the fused PJRT lane, saved, the rest on the host.
  train::Options whole = small_options();
  whole.steps = 10;
  const train::Result reference = train::train(whole);
  train::Options first = small_options();
  first.lane = train::parse_lane("pjrt-fused");
  first.require_backend = true;
  first.backend.pjrt.plugin = plugin;
  first.steps = 5;
  first.save_path = d.file("pjrt.safetensors");
  const std::vector<double> all = then_on_the_host(first, 10);
  ASSERT_EQ(all.size(), 10u);
  for (size_t k = 0; k < 10; ++k)
    EXPECT_LE(std::fabs(all[k] - reference.losses[k]) / reference.losses[k], 1e-5) << "step " << k + 1;
}

// Issue 15 on the GPU: warmup + cosine, clipping inside the step and the
// validation loss, on both GPU lanes, follow the host run within 1e-3 relative
// (TF32 dots): losses, the norms before clipping, the validation losses.
TEST(Train, GpuLanesScheduleClipAndValidationFollowTheHost) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << "no GPU: " << why;
  auto options = scheduled_clipped_validated;
  train::Options h = options();
  std::vector<double> host_norms;
  h.on_step = [&](const train::StepInfo& s) { host_norms.push_back(s.grad_norm); };
  const train::Result host = train::train(h);
  ASSERT_EQ(host.val_losses.size(), 2u);
  for (train::Lane lane : {train::Lane{BackendKind::cuda, false}, train::Lane{BackendKind::cuda, true}}) {
    train::Options g = options();
    g.lane = lane;
    g.require_backend = true;
    std::vector<double> norms;
    g.on_step = [&](const train::StepInfo& s) { norms.push_back(s.grad_norm); };
    const train::Result r = train::train(g);
    ASSERT_EQ(r.lane_used, lane);
    ASSERT_EQ(r.losses.size(), host.losses.size());
    ASSERT_EQ(norms.size(), host_norms.size());
    for (size_t k = 0; k < r.losses.size(); ++k) {
      EXPECT_LE(std::fabs(r.losses[k] - host.losses[k]) / host.losses[k], 1e-3) << train::lane_name(lane) << " step " << k + 1;
      EXPECT_LE(std::fabs(norms[k] - host_norms[k]) / host_norms[k], 1e-3) << train::lane_name(lane) << " norm, step " << k + 1;
    }
    ASSERT_EQ(r.val_losses.size(), host.val_losses.size());
    for (size_t k = 0; k < r.val_losses.size(); ++k)
      EXPECT_LE(std::fabs(r.val_losses[k] - host.val_losses[k]) / host.val_losses[k], 1e-3) << train::lane_name(lane);
  }
}

// Trains `o` into a checkpoint in d and returns sampling options that read it.
train::SampleOptions trained(train::Options& o, const TempDir& d) {
  o.save_path = d.file("s.safetensors");
  train::train(o);
  train::SampleOptions s;
  s.checkpoint = o.save_path;
  return s;
}

TEST(Train, OptionsOutOfRangeAreRefusedByName) {
  train::Options o = small_options();
  o.steps = 0;
  EXPECT_NE(error_of([&] { o.validate(); }).find("steps"), std::string::npos);
  o = small_options();
  o.model.n_heads = 3;
  EXPECT_NE(error_of([&] { o.validate(); }).find("not a multiple of heads 3"), std::string::npos);
  o = small_options();
  o.save_every = 5;
  EXPECT_NE(error_of([&] { o.validate(); }).find("save-every"), std::string::npos);
  EXPECT_EQ(train::parse_lane("gpu-fused"), (train::Lane{BackendKind::cuda, true}));
  EXPECT_EQ(train::parse_lane("gpu"), (train::Lane{BackendKind::cuda, false}));
  EXPECT_EQ(train::parse_lane("pjrt-fused"), (train::Lane{BackendKind::pjrt, true}));
  for (const char* name : {"host", "host-fused", "cuda", "cuda-fused", "pjrt", "pjrt-fused"})
    EXPECT_STREQ(train::lane_name(train::parse_lane(name)), name);
  EXPECT_NE(error_of([&] { train::parse_lane("tpu"); }).find("host, host-fused, cuda (or gpu)"), std::string::npos);
}

TEST(Sample, GreedyPicksTheArgmaxOfAnUnpaddedProgram) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 30;
  train::SampleOptions s = trained(o, d);
  s.prompt = "The ca";          // 6 tokens, shorter than the window of 8
  s.tokens = 1;
  s.temperature = 0;
  const std::string one = train::sample(s);
  ASSERT_EQ(one.size(), 1u);

  // The logits program of exactly the prompt's length, no padding.
  const Checkpoint c = load_checkpoint(o.save_path);
  std::vector<Array> ins;
  for (const nn::ParamSpec& p : nn::lm_parameters(o.model)) ins.push_back(*c.param(p.name));
  const std::vector<int32_t> ids = data::encode(s.prompt);
  ins.push_back(Array::i32({1, static_cast<int64_t>(ids.size())}, ids));
  const Array logits = host::run(nn::lm_logits_program(o.model, static_cast<int64_t>(ids.size())), ins)[0];
  int best = 0;
  for (int v = 1; v < 64; ++v)
    if (logits.get(5 * 64 + v) > logits.get(5 * 64 + best)) best = v;
  EXPECT_EQ(one[0], data::decode_id(best));
}

TEST(Sample, LengthSymbolsSeedAndStreaming) {
  TempDir d;
  train::Options o = small_options();
  o.steps = 20;
  train::SampleOptions s = trained(o, d);
  s.prompt = "Is the hog tan? ";    // longer than the window: it slides
  s.tokens = 40;
  s.temperature = 1.0;
  s.seed = 3;
  std::string streamed;
  s.on_char = [&](char ch) { streamed.push_back(ch); };
  const std::string a = train::sample(s);
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(streamed, a);
  for (char ch : a) EXPECT_NE(data::alphabet().find(ch), std::string_view::npos) << int(ch);
  s.on_char = nullptr;
  EXPECT_EQ(train::sample(s), a);   // same seed, same text
  s.seed = 4;
  EXPECT_NE(train::sample(s), a);   // 40 characters at temperature 1: another seed differs
  s.temperature = -1;
  EXPECT_NE(error_of([&] { train::sample(s); }).find("temperature"), std::string::npos);
  s.temperature = 1;
  s.window = 9;    // any window up to the context (32) is accepted
  EXPECT_EQ(train::sample(s).size(), 40u);
  s.window = 33;
  EXPECT_NE(error_of([&] { train::sample(s); }).find("context 32"), std::string::npos);
}

namespace {

// The logits each token was drawn from, keyed by the tokens read before it.
struct LogitsLog {
  std::vector<int64_t> read;
  std::vector<std::vector<float>> logits;
  std::function<void(int64_t, const float*)> hook(int64_t vocab) {
    return [this, vocab](int64_t n, const float* l) {
      read.push_back(n);
      logits.emplace_back(l, l + vocab);
    };
  }
};

train::Options arch_options(nn::Arch a) {
  train::Options o = small_options();
  o.model.arch = a;
  if (a == nn::Arch::llama) o.model.n_kv_heads = 1;   // grouped-query: two query heads per key/value head
  o.steps = 30;
  return o;
}

}  // namespace

// The KV cache (prefill, then one decode program per token) against the
// reference that runs the whole window for every token, while the text fits
// in the window (6 + 26 tokens, window 32): the same greedy tokens, and the
// logits they were drawn from within 1e-4. The arithmetic is not the same
// one: the decode program multiplies one row (OpenBLAS's GEMM takes another
// path and another order of summation than for a block of rows), and its
// attention sums over the cache's 32 rows, the masked ones contributing exact
// zeros. So the logits differ by reassociated f32 sums: each sum of n terms
// (n <= 64 here: d_model 32, d_ff 64) is off by at most n * 2^-24 of the sum
// of its terms' magnitudes, about 4e-6 relative; through 2 blocks, the final
// norm and the head, for logits of magnitude <= 10 (checked below), a few
// 1e-5 at worst, and 1e-4 leaves room.
TEST(Sample, KvCacheGivesTheReferencesGreedyTokensForEveryArchitecture) {
  for (nn::Arch a : {nn::Arch::seed, nn::Arch::gpt2, nn::Arch::llama}) {
    SCOPED_TRACE(nn::arch_name(a));
    TempDir d;
    train::Options o = arch_options(a);
    train::SampleOptions s = trained(o, d);
    s.prompt = "The ca";
    s.tokens = 26;
    s.temperature = 0;
    s.window = 32;
    LogitsLog cached, full;
    train::SampleStats st;
    s.stats = &st;
    s.on_logits = cached.hook(o.model.vocab);
    const std::string with_cache = train::sample(s);
    EXPECT_EQ(st.slides, 0);
    EXPECT_EQ(st.prompt_tokens, 6);
    s.kv_cache = false;
    s.on_logits = full.hook(o.model.vocab);
    const std::string reference = train::sample(s);
    EXPECT_EQ(with_cache, reference);
    ASSERT_EQ(cached.read, full.read);
    ASSERT_EQ(cached.read.size(), 26u);
    EXPECT_EQ(cached.read.front(), 6);
    EXPECT_EQ(cached.read.back(), 31);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < cached.logits.size(); ++i)
      for (size_t v = 0; v < cached.logits[i].size(); ++v) {
        worst = std::max(worst, std::abs(double(cached.logits[i][v]) - full.logits[i][v]));
        largest = std::max(largest, std::abs(double(full.logits[i][v])));
      }
    EXPECT_LE(largest, 10.0);
    EXPECT_LE(worst, 1e-4);
    std::printf("%s: largest logit %.3g, largest difference %.3g\n", nn::arch_name(a), largest, worst);
  }
}

// When the cache is full the window slides: the last window / 2 tokens are
// prefilled again. Until then the tokens are the reference's; after, the
// model reads fewer tokens than the reference's full window, and the text
// goes on at the same cost per token.
TEST(Sample, KvCacheSlidesWhenTheWindowIsFull) {
  TempDir d;
  train::Options o = arch_options(nn::Arch::llama);
  train::SampleOptions s = trained(o, d);
  s.prompt = "The ca";
  s.tokens = 40;
  s.temperature = 0;
  s.window = 8;
  LogitsLog log;
  s.on_logits = log.hook(o.model.vocab);
  train::SampleStats st;
  s.stats = &st;
  const std::string a = train::sample(s);
  EXPECT_EQ(a.size(), 40u);
  // Read 6, 7, 8 (full: slide to 4), 5, 6, 7, 8 (slide), ...
  ASSERT_EQ(log.read.size(), 40u);
  EXPECT_EQ(log.read[0], 6);
  EXPECT_EQ(log.read[2], 8);
  EXPECT_EQ(log.read[3], 4);
  EXPECT_EQ(log.read[4], 5);
  for (int64_t n : log.read) EXPECT_TRUE(n >= 4 && n <= 8) << n;
  EXPECT_EQ(st.slides, 8);   // after tokens 3, 8, ..., 38 (each read 8); not after the last
  s.kv_cache = false;
  s.on_logits = nullptr;
  EXPECT_EQ(train::sample(s).substr(0, 3), a.substr(0, 3));
}

// top-k 1 keeps the most likely symbol only, a tiny top-p too: both give
// temperature 0's text at any temperature and seed. A top-k or top-p that
// keeps everything draws what no limit draws.
TEST(Sample, TopKOneAndTinyTopPAreGreedy) {
  TempDir d;
  train::Options o = arch_options(nn::Arch::gpt2);
  train::SampleOptions s = trained(o, d);
  s.prompt = "Is the ";
  s.tokens = 20;
  s.temperature = 0;
  const std::string greedy = train::sample(s);
  s.temperature = 1.5;
  s.seed = 11;
  const std::string free = train::sample(s);
  EXPECT_NE(free, greedy);
  s.top_k = 1;
  EXPECT_EQ(train::sample(s), greedy);
  s.top_k = 0;
  s.top_p = 1e-6;
  EXPECT_EQ(train::sample(s), greedy);
  s.top_p = 1;
  s.top_k = 64;
  EXPECT_EQ(train::sample(s), free);
  s.top_k = 5;   // some other text, drawn among 5
  EXPECT_EQ(train::sample(s).size(), 20u);
  s.top_k = -1;
  EXPECT_NE(error_of([&] { train::sample(s); }).find("top-k"), std::string::npos);
  s.top_k = 0;
  s.top_p = 0;
  EXPECT_NE(error_of([&] { train::sample(s); }).find("top-p"), std::string::npos);
}
