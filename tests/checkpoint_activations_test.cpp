// Activation checkpointing (checkpoint_activations, autodiff.h): the causal
// LMs' blocks are checkpoint regions; the checkpointed gradient and fused
// AdamW steps give the plain steps' bits on the host, hold less memory in the
// host's and the device's plans, and run on PJRT (and CUDA, where there is a
// GPU) within the lanes' tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/plan/device_plan.h"
#include "backend/host/interpreter.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "capstep/train_step.h"
#include "capstep/transforms.h"
#include "seed_step.h"
#include "test_util.h"

namespace capstep {
namespace {

nn::LmConfig tiny(nn::Arch a, int64_t layers) {
  nn::LmConfig c;
  c.arch = a;
  c.vocab = 13;
  c.d_model = 16;
  c.n_layers = layers;
  c.n_heads = 2;
  c.d_ff = 32;
  c.context = 8;
  c.batch = 2;
  c.seq = 7;
  if (a == nn::Arch::llama) c.n_kv_heads = 1;
  return c;
}

std::vector<std::string> names_of(const nn::LmConfig& c) {
  std::vector<std::string> n;
  for (const nn::ParamSpec& s : nn::lm_parameters(c)) n.push_back(s.name);
  return n;
}

// The loss program's inputs: initial parameters and a fixed batch.
std::vector<Array> loss_inputs(const nn::LmConfig& c) {
  std::vector<Array> in = nn::init_parameters(c, 11);
  Array tokens({DType::i32, {c.batch, c.seq}}), targets = tokens;
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set(i, static_cast<double>((i * 5 + 1) % c.vocab));
    targets.set(i, static_cast<double>((i * 3 + 2) % c.vocab));
  }
  in.push_back(tokens);
  in.push_back(targets);
  return in;
}

void expect_bit_equal(const Program& p, const std::vector<Array>& want, const std::vector<Array>& got,
                      const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(want[i].bit_equal(got[i])) << what << ": output " << p.outputs[i].name << " differs";
}

int count_region(const Program& p, int r) {
  int n = 0;
  for (const Eqn& e : p.eqns) n += e.attrs.region == r;
  return n;
}

// Tracing tags each block's equations with its index; the embedding, the
// final norm and the loss carry none; the gradient equations none either.
TEST(CheckpointActivations, BlocksAreRegions) {
  const nn::LmConfig c = tiny(nn::Arch::gpt2, 3);
  const Program loss = nn::lm_loss_program(c);
  EXPECT_EQ(checkpoint_regions(loss), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(every_kth_region(loss, 2), (std::vector<int>{0, 2}));
  EXPECT_THROW(every_kth_region(loss, 0), Error);
  EXPECT_GT(count_region(loss, -1), 0);
  // Every block records the same equations.
  EXPECT_EQ(count_region(loss, 0), count_region(loss, 1));
  EXPECT_EQ(count_region(loss, 1), count_region(loss, 2));
  const Program grad = value_and_grad(loss, names_of(c));
  EXPECT_EQ(checkpoint_regions(grad), (std::vector<int>{0, 1, 2}));
  for (size_t i = loss.eqns.size(); i < grad.eqns.size(); ++i)
    EXPECT_EQ(grad.eqns[i].attrs.region, -1) << eqn_text(grad, grad.eqns[i]);
  // The text form carries the region, and reads back.
  const std::string text = to_text(loss);
  EXPECT_NE(text.find("region=2"), std::string::npos);
  const Program back = parse_text(text);
  ASSERT_EQ(back.eqns.size(), loss.eqns.size());
  for (size_t i = 0; i < back.eqns.size(); ++i) ASSERT_EQ(back.eqns[i].attrs.region, loss.eqns[i].attrs.region);
  EXPECT_EQ(to_text(back), text);
  // fuse_attention and mixed precision keep the regions.
  EXPECT_EQ(checkpoint_regions(fuse_attention(loss)), (std::vector<int>{0, 1, 2}));
  const Program bf = optim::mixed_precision_bf16(loss);
  std::vector<int> def(static_cast<size_t>(bf.num_values()), -1);
  for (size_t i = 0; i < bf.eqns.size(); ++i) def[static_cast<size_t>(bf.eqns[i].out)] = static_cast<int>(i);
  int converts = 0, views = 0;
  for (const Eqn& e : bf.eqns)  // a bf16 operand's convert, and its bf16 views (the heads'), are in its dot's region
    if (e.op == Op::dot_general)
      for (int v : e.inputs) {
        const Eqn* c = &bf.eqns[static_cast<size_t>(def[static_cast<size_t>(v)])];
        for (; c->op == Op::transpose || c->op == Op::reshape; c = &bf.eqns[static_cast<size_t>(def[static_cast<size_t>(c->inputs[0])])]) {
          EXPECT_EQ(c->attrs.region, e.attrs.region) << eqn_text(bf, *c) << " for " << eqn_text(bf, e);
          views += c->attrs.region >= 0;
        }
        ASSERT_EQ(c->op, Op::convert) << eqn_text(bf, e);
        EXPECT_EQ(c->attrs.region, e.attrs.region) << eqn_text(bf, *c) << " for " << eqn_text(bf, e);
        converts += c->attrs.region >= 0;
      }
  EXPECT_GT(converts, 0);
  EXPECT_GT(views, 0);
}

TEST(CheckpointActivations, RefusesWhatItCannotDo) {
  const nn::LmConfig c = tiny(nn::Arch::seed, 2);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names_of(c));
  try {
    checkpoint_activations(grad, {5});
    FAIL() << "region 5 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "checkpoint_activations: program 'causal_lm_loss' has no equation in region 5 (its regions: 0, 1)");
  }
  Program none = grad;
  none.outputs.clear();
  EXPECT_THROW(checkpoint_activations(none, {}), Error);
  // No region listed: the program as it was.
  EXPECT_EQ(to_text(checkpoint_activations(grad, {})), to_text(grad));
}

// The check: loss and every gradient bit-equal on the host
// interpreter, for the three architectures, all blocks or every other one,
// with fused attention and in bf16.
TEST(CheckpointActivations, GradientStepIsBitEqualOnTheHost) {
  struct Variant {
    nn::Arch arch;
    int every;
    bool fused_attention;
    bool bf16;
  };
  for (const Variant& v : {Variant{nn::Arch::seed, 1, false, false}, Variant{nn::Arch::gpt2, 1, false, false},
                           Variant{nn::Arch::llama, 1, false, false}, Variant{nn::Arch::gpt2, 2, false, false},
                           Variant{nn::Arch::seed, 1, true, false}, Variant{nn::Arch::llama, 1, true, true}}) {
    const nn::LmConfig c = tiny(v.arch, 3);
    Program loss = nn::lm_loss_program(c);
    if (v.fused_attention) loss = fuse_attention(loss);
    if (v.bf16) loss = optim::mixed_precision_bf16(loss);
    const Program grad = value_and_grad(loss, names_of(c));
    const Program ck = checkpoint_activations(grad, every_kth_region(grad, v.every));
    const std::string what = std::string(nn::arch_name(v.arch)) + " every " + std::to_string(v.every) +
                             (v.fused_attention ? " fused attention" : "") + (v.bf16 ? " bf16" : "");
    EXPECT_NO_THROW(verify(ck)) << what;
    EXPECT_GT(ck.eqns.size(), grad.eqns.size()) << what;  // the recomputed forward
    ASSERT_EQ(ck.outputs.size(), grad.outputs.size()) << what;
    const std::vector<Array> in = loss_inputs(c);
    const std::vector<Array> want = host::run(grad, in), got = host::run(ck, in);
    expect_bit_equal(grad, want, got, what);
    // The reference path (no fusion, one kernel per equation) too.
    host::InterpreterOptions plain = host::InterpreterOptions::defaults();
    plain.fuse = false;
    expect_bit_equal(grad, host::run(grad, in, plain), host::run(ck, in, plain), what + " (unfused)");
  }
}

// The loss over chunks of rows (nn::lm_loss_program's chunk_elems): 14
// positions of 13 classes in chunks of 4 rows (4, 4, 4, 2), each chunk its
// own region after the blocks'. In f64 the loss and every gradient are the
// whole loss's up to the order of the chunks' sum (a few ulps of the largest
// part, 1e-12 relative is far above it and far below any wrong term); the
// masked loss (SFT's, some targets -100) too.
TEST(CheckpointActivations, LossInChunksIsTheWholeLoss) {
  for (nn::Arch a : {nn::Arch::seed, nn::Arch::gpt2, nn::Arch::llama})
    for (bool masked : {false, true}) {
      const nn::LmConfig c = tiny(a, 2);
      const std::string what = std::string(nn::arch_name(a)) + (masked ? " masked" : "");
      EXPECT_EQ(nn::lm_loss_chunks(c, 4 * c.vocab), 4);
      EXPECT_EQ(nn::lm_loss_chunks(c, 14 * c.vocab), 1);
      EXPECT_EQ(nn::lm_loss_chunks(c, 1), 14);   // at least a row a chunk
      EXPECT_THROW(nn::lm_loss_chunks(c, 0), Error);
      const Program whole = nn::lm_loss_program(c, DType::f64, masked);
      const Program parts = nn::lm_loss_program(c, DType::f64, masked, 4 * c.vocab);
      EXPECT_EQ(checkpoint_regions(parts), (std::vector<int>{0, 1, 2, 3, 4, 5})) << what;
      const Program gw = value_and_grad(whole, names_of(c)), gp = value_and_grad(parts, names_of(c));
      std::vector<Array> in = loss_inputs(c);
      for (Array& x : in) x = x.dtype() == DType::f32 ? x.converted(DType::f64) : x;
      if (masked)
        for (int64_t i : {0, 5, 6, 13}) in.back().set(i, -100.0);
      const std::vector<Array> w = host::run(gw, in), g = host::run(gp, in);
      ASSERT_EQ(w.size(), g.size());
      for (size_t o = 0; o < w.size(); ++o) {
        double scale = 0, err = 0;
        for (int64_t i = 0; i < w[o].numel(); ++i) {
          scale = std::max(scale, std::abs(w[o].get(i)));
          err = std::max(err, std::abs(w[o].get(i) - g[o].get(i)));
        }
        EXPECT_GT(scale, 0) << what << " " << gw.outputs[o].name;
        EXPECT_LE(err, 1e-12 * scale) << what << " " << gw.outputs[o].name;
      }
    }
}

// Checkpointed, the chunks are recomputed in the backward: the same bits as
// the chunked step without checkpointing, fused and unfused; every 2nd block
// takes the blocks 0 and 2 and every chunk (nn::lm_checkpoint_regions).
TEST(CheckpointActivations, LossChunksRecomputedGiveTheSameBits) {
  for (nn::Arch a : {nn::Arch::gpt2, nn::Arch::llama})
    for (bool masked : {false, true}) {
      const nn::LmConfig c = tiny(a, 3);
      const std::string what = std::string(nn::arch_name(a)) + (masked ? " masked" : "");
      const Program grad = value_and_grad(nn::lm_loss_program(c, DType::f32, masked, 4 * c.vocab), names_of(c));
      EXPECT_EQ(nn::lm_checkpoint_regions(c, grad, 2), (std::vector<int>{0, 2, 3, 4, 5, 6})) << what;
      std::vector<Array> in = loss_inputs(c);
      if (masked)
        for (int64_t i : {0, 5, 6, 13}) in.back().set(i, -100.0);
      host::InterpreterOptions unfused = host::InterpreterOptions::defaults();
      unfused.fuse = false;
      for (int every : {1, 2}) {
        const Program ck = checkpoint_activations(grad, nn::lm_checkpoint_regions(c, grad, every));
        EXPECT_GT(count_region(ck, 6), count_region(grad, 6)) << what;   // the last chunk's copies
        expect_bit_equal(grad, host::run(grad, in), host::run(ck, in), what);
        expect_bit_equal(grad, host::run(grad, in, unfused), host::run(ck, in, unfused), what + " (unfused)");
      }
    }
}

// Only the blocks chosen are recomputed: every 2nd of 4 recomputes blocks 0
// and 2, about half the equations of all four.
TEST(CheckpointActivations, EveryKthBlockRecomputesThoseBlocks) {
  const nn::LmConfig c = tiny(nn::Arch::seed, 4);
  const Program grad = value_and_grad(nn::lm_loss_program(c), names_of(c));
  const size_t all = checkpoint_activations(grad, every_kth_region(grad, 1)).eqns.size() - grad.eqns.size();
  const Program half = checkpoint_activations(grad, every_kth_region(grad, 2));
  const size_t added = half.eqns.size() - grad.eqns.size();
  // Blocks are alike, up to the constants block 0 keeps for the others and
  // the anchors (a select or two per block, one constant).
  EXPECT_NEAR(static_cast<double>(added * 2), static_cast<double>(all), 0.1 * static_cast<double>(all));
  // The copies carry their block's region; blocks 1 and 3 are as they were.
  EXPECT_GT(count_region(half, 0), count_region(grad, 0));
  EXPECT_GT(count_region(half, 2), count_region(grad, 2));
  EXPECT_EQ(count_region(half, 1), count_region(grad, 1));
  EXPECT_EQ(count_region(half, 3), count_region(grad, 3));
}

// with_adamw's fused step over three steps (parameters and moments fed
// back through the aliases): the checkpointed step's parameters and moments
// bit-equal the plain step's.
// Three steps of two with_adamw programs with the same aliases from the same
// inputs, each step's outputs fed back as the next one's inputs: every output
// bit-equal at every step, and the parameters and moments after the last.
void expect_steps_bit_equal(const Program& plain, const Program& other, std::vector<Array> a) {
  std::vector<Array> b = a, oa, ob;
  for (int step = 0; step < 3; ++step) {
    oa = host::run(plain, a);
    ob = host::run(other, b);
    expect_bit_equal(plain, oa, ob, "step " + std::to_string(step + 1));
    for (const Alias& al : plain.aliases) {
      a[static_cast<size_t>(al.input)] = oa[static_cast<size_t>(al.output)];
      b[static_cast<size_t>(al.input)] = ob[static_cast<size_t>(al.output)];
    }
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bit_equal(b[i])) << plain.inputs[i].name;
}

TEST(CheckpointActivations, FusedAdamWStepsAreBitEqualOnTheHost) {
  test::SeedStep s;
  optim::AdamW aw;
  const Program plain = optim::with_adamw(s.grad, s.names, aw);
  const Program ck = checkpoint_activations(plain, every_kth_region(plain, 1));
  ASSERT_EQ(ck.aliases, plain.aliases);
  expect_steps_bit_equal(plain, ck, s.with_adamw_inputs(aw));
}

// recompute_in_backward: the same loss and gradients bit for bit, fused and
// unfused, for each architecture, with the recomputed values' copies in the
// program; then checkpointed on top, still the same bits.
TEST(RecomputeInBackward, GradientStepIsBitEqualOnTheHost) {
  for (nn::Arch a : {nn::Arch::seed, nn::Arch::gpt2, nn::Arch::llama}) {
    const nn::LmConfig c = tiny(a, 3);
    const Program grad = value_and_grad(nn::lm_loss_program(c), names_of(c));
    const Program r = recompute_in_backward(grad);
    const std::string what = nn::arch_name(a);
    EXPECT_NO_THROW(verify(r)) << what;
    EXPECT_GT(r.eqns.size(), grad.eqns.size()) << what;  // the copies
    ASSERT_EQ(r.outputs.size(), grad.outputs.size()) << what;
    const std::vector<Array> in = loss_inputs(c);
    expect_bit_equal(grad, host::run(grad, in), host::run(r, in), what);
    host::InterpreterOptions plain = host::InterpreterOptions::defaults();
    plain.fuse = false;
    expect_bit_equal(grad, host::run(grad, in, plain), host::run(r, in, plain), what + " (unfused)");
    const Program ck = checkpoint_activations(r, every_kth_region(r, 1));
    expect_bit_equal(grad, host::run(grad, in), host::run(ck, in), what + " checkpointed");
  }
}

// Several steps of the fused AdamW step, parameters and moments updated in
// place (each input read through its snapshot before its update is written):
// the bits of the plain step's, and every output written in place as there.
TEST(RecomputeInBackward, FusedAdamWStepsAreBitEqualAndInPlace) {
  test::SeedStep s;
  optim::AdamW aw;
  const Program plain = optim::with_adamw(s.grad, s.names, aw);
  const Program r = optim::with_adamw(recompute_in_backward(s.grad), s.names, aw);
  ASSERT_EQ(r.aliases, plain.aliases);
  expect_steps_bit_equal(plain, r, s.with_adamw_inputs(aw));
  // In place: each donated input's Array is its output's.
  auto in_place_outputs = [&](const Program& p) {
    host::Interpreter it(p);
    std::vector<Array> in = s.with_adamw_inputs(aw), out(p.outputs.size());
    std::vector<const Array*> ptr;
    for (const Array& v : in) ptr.push_back(&v);
    for (const Alias& al : p.aliases) {
      out[static_cast<size_t>(al.output)] = in[static_cast<size_t>(al.input)];
      ptr[static_cast<size_t>(al.input)] = &out[static_cast<size_t>(al.output)];
    }
    it.run(ptr, out);
    return std::pair<int, size_t>(it.outputs_in_place(), it.memory().arena);
  };
  const auto [ip, pa] = in_place_outputs(plain);
  const auto [ir, ra] = in_place_outputs(r);
  EXPECT_EQ(ir, ip);
  EXPECT_EQ(ip, static_cast<int>(plain.aliases.size()));
  EXPECT_GT(pa, ra);
}

// Snapshots: an input that trains and that a copy reads is read through one
// copy of it made at the start; a frozen input (no gradient) is read as it
// is. In a bf16 step, a frozen weight's convert is recomputed from the weight
// itself; a trained weight's is held (recomputing it would hold an f32
// snapshot of the weight instead of its bf16 convert). The same bits.
TEST(RecomputeInBackward, OnlyTrainedInputsAreSnapshotted) {
  const nn::LmConfig c = tiny(nn::Arch::gpt2, 2);
  std::vector<std::string> trained;
  for (const std::string& n : names_of(c))
    if (n.find("norm") != std::string::npos) trained.push_back(n);  // the norms' gains and biases train
  ASSERT_FALSE(trained.empty());
  const Program grad = value_and_grad(optim::mixed_precision_bf16(nn::lm_loss_program(c)), trained);
  const Program r = recompute_in_backward(grad);
  // A snapshot: select(true, x, x) of an input x.
  std::vector<char> is_input(static_cast<size_t>(r.num_values()), 0);
  for (const NamedValue& in : r.inputs) is_input[static_cast<size_t>(in.value)] = 1;
  std::string snapped_frozen;
  int snapped = 0, converts_of_frozen = 0;
  for (const Eqn& e : r.eqns) {
    const int x = e.op == Op::select ? e.inputs[1] : e.op == Op::convert ? e.inputs[0] : -1;
    if (x < 0 || !is_input[static_cast<size_t>(x)]) continue;
    std::string name;
    for (const NamedValue& in : r.inputs)
      if (in.value == x) name = in.name;
    const bool trains = std::find(trained.begin(), trained.end(), name) != trained.end();
    if (e.op == Op::select && e.inputs[2] == x) {
      ++snapped;
      if (!trains) snapped_frozen += name + " ";
    }
    if (e.op == Op::convert && !trains && r.type(x).rank() == 2) ++converts_of_frozen;
  }
  EXPECT_EQ(snapped_frozen, "");
  EXPECT_GT(snapped, 0);  // the trained gains' broadcasts read snapshots
  // Each frozen weight matrix converted in the forward and again in the backward.
  int matrices = 0;
  for (const NamedValue& in : r.inputs)
    if (r.type(in.value).rank() == 2 && std::find(trained.begin(), trained.end(), in.name) == trained.end() &&
        in.name != "tokens" && in.name != "targets")
      ++matrices;
  EXPECT_GT(converts_of_frozen, matrices);
  const std::vector<Array> in = loss_inputs(c);
  std::vector<Array> ins;
  for (const NamedValue& v : grad.inputs) {
    const int j = nn::lm_loss_program(c).input_index(v.name);
    ins.push_back(in[static_cast<size_t>(j)]);
  }
  expect_bit_equal(grad, host::run(grad, ins), host::run(r, ins), "gpt2 bf16, norms trained");
  EXPECT_LT(host::memory_needed(r).arena, host::memory_needed(grad).arena);
}

// The host's plan of a 4-block Llama at 2 x 64 tokens: the recomputed step's
// arena is below the plain one's, and checkpointing still lowers it.
TEST(RecomputeInBackward, PlannedArenaIsSmaller) {
  nn::LmConfig c = tiny(nn::Arch::llama, 4);
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 192;
  c.context = c.seq = 64;
  const Program grad = value_and_grad(nn::lm_loss_program(c), names_of(c));
  const Program r = recompute_in_backward(grad);
  const size_t p = host::memory_needed(grad).arena, a = host::memory_needed(r).arena,
               k = host::memory_needed(checkpoint_activations(r, every_kth_region(r, 1))).arena;
  std::printf("host arena: plain %zu, recomputed %zu, and checkpointed %zu\n", p, a, k);
  EXPECT_LT(static_cast<double>(a), 0.8 * static_cast<double>(p));
  EXPECT_LT(k, a);
}

// The memory plans: with every block checkpointed, the host interpreter's
// arena (intermediate values, packed by lifetime) and the device plan's
// arena of an 8-block model at 4 x 128 tokens are less than a quarter of the
// plain step's (18% and 17%); every other block, between the two.
TEST(CheckpointActivations, PlannedMemoryIsSmaller) {
  nn::LmConfig c;
  c.n_layers = 8;
  c.d_model = 64;
  c.n_heads = 4;
  c.d_ff = 256;
  c.batch = 4;
  c.seq = 128;
  const std::vector<std::string> names = names_of(c);
  const Program plain = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{});
  const Program all = checkpoint_activations(plain, every_kth_region(plain, 1));
  const Program half = checkpoint_activations(plain, every_kth_region(plain, 2));
  const host::MemoryPlan hp = host::memory_needed(plain), ha = host::memory_needed(all), hh = host::memory_needed(half);
  const plan::Plan dp = plan::plan_memory(plain), da = plan::plan_memory(all), dh = plan::plan_memory(half);
  std::printf("host arena: plain %zu, every block %zu (%.1f%%), every 2nd %zu; device arena: plain %zu, every block "
              "%zu (%.1f%%), every 2nd %zu\n",
              hp.arena, ha.arena, 100.0 * static_cast<double>(ha.arena) / static_cast<double>(hp.arena), hh.arena,
              dp.arena_bytes, da.arena_bytes,
              100.0 * static_cast<double>(da.arena_bytes) / static_cast<double>(dp.arena_bytes), dh.arena_bytes);
  EXPECT_LT(static_cast<double>(ha.arena), 0.25 * static_cast<double>(hp.arena));
  EXPECT_LT(ha.arena, hh.arena);
  EXPECT_LT(hh.arena, hp.arena);
  EXPECT_LT(static_cast<double>(da.arena_bytes), 0.25 * static_cast<double>(dp.arena_bytes));
  EXPECT_LT(dh.arena_bytes, dp.arena_bytes);
  EXPECT_EQ(ha.inputs, hp.inputs);
  EXPECT_EQ(ha.outputs, hp.outputs);
}

// The step that `capstep train --checkpoint-activations` runs on the host
// (recompute_in_backward where it plans less, checkpoint_activations,
// AdamW on the host: the gradients are outputs) holds one [B, T, D] value
// more per block, its input on the residual stream: each block's weight and
// bias gradients are computed as its backward reaches them. (When the
// anchors' selects shared one broadcast of true, all of them joined one
// fused group, run after the last block's backward, and every block's
// cotangents and recomputed values were held to the end of the step: 12 such
// values more per block here. When the host ran the fused groups that only
// make outputs last, as a GPU's wave of them, each bias's and norm gain's
// gradient held its two [B, T, D] operands to the end: two values more.)
nn::LmConfig small_gpt2(int64_t layers, int64_t vocab, int64_t batch) {
  nn::LmConfig c;
  c.arch = nn::Arch::gpt2;
  c.vocab = vocab;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 128;
  c.context = 64;
  c.batch = batch;
  c.seq = 64;
  c.n_layers = layers;
  return c;
}

// The host arena of the step `capstep train --checkpoint-activations` runs.
size_t train_step_arena(const nn::LmConfig& c, int64_t chunk_elems = int64_t{1} << 26) {
  const std::vector<std::string> names = names_of(c);
  Program grad = host::recompute_where_smaller(value_and_grad(nn::lm_loss_program(c, DType::f32, false, chunk_elems), names));
  grad = checkpoint_activations(grad, nn::lm_checkpoint_regions(c, grad, 1));
  return host::memory_needed(TrainStep::program(grad, names, optim::AdamW{}, Lane{BackendKind::host, false})).arena;
}

TEST(CheckpointActivations, TrainStepHoldsOneResidualPerBlock) {
  const size_t two = train_step_arena(small_gpt2(2, 13, 2)), eight = train_step_arena(small_gpt2(8, 13, 2));
  const size_t residual = 2 * 64 * 32 * sizeof(float);  // [B, T, D] f32
  std::printf("host arena of the checkpointed train step: 2 blocks %zu, 8 blocks %zu (%.2f residuals per block more)\n",
              two, eight, static_cast<double>(eight - two) / 6.0 / static_cast<double>(residual));
  EXPECT_LE(eight, two + 6 * residual + residual / 2);
}

// The loss in 8 chunks, checkpointed with the blocks (as `capstep train
// --checkpoint-activations` at logits of more than 2^26 elements): the
// train step holds about one chunk's logits, not all of them. [256, 4096]
// f32 logits are 4 MiB here, the largest value of the step by far; the
// arena shrinks by at least half of them (a chunk's logits and their
// gradient, 2 x 512 KiB, stay; the loss's gradient in the whole step shares
// the logits' buffer). Without ordered_after between the chunks the fusion
// planner made every chunk's logits first, and the arena was the whole's.
TEST(CheckpointActivations, LossChunksHoldOneChunkOfLogits) {
  const nn::LmConfig c = small_gpt2(2, 4096, 4);
  const int64_t logits = c.batch * c.seq * c.vocab;
  ASSERT_EQ(nn::lm_loss_chunks(c, logits / 8), 8);
  const size_t whole = train_step_arena(c, logits), chunked = train_step_arena(c, logits / 8);
  const size_t bytes = static_cast<size_t>(logits) * sizeof(float);
  std::printf("checkpointed train step's host arena: logits whole %zu, in 8 chunks %zu (logits %zu bytes)\n", whole,
              chunked, bytes);
  EXPECT_LE(chunked + bytes / 2, whole);
}

// The anchors (select(true, x, g)) are what keeps the copies in the
// backward: with every select replaced by its x, the host's fusion planner,
// which orders groups by their longest path from the inputs, runs the copies
// during the forward and the arena is back near the plain step's.
TEST(CheckpointActivations, AnchorsKeepTheCopiesInTheBackward) {
  nn::LmConfig c;
  c.n_layers = 4;
  c.d_model = 64;
  c.n_heads = 4;
  c.d_ff = 256;
  c.seq = 128;
  const std::vector<std::string> names = names_of(c);
  const Program plain = value_and_grad(nn::lm_loss_program(c), names);
  const Program ck = checkpoint_activations(plain, every_kth_region(plain, 1));
  Program bare = ck;
  std::vector<int> rep(static_cast<size_t>(bare.num_values()));
  for (size_t v = 0; v < rep.size(); ++v) rep[v] = static_cast<int>(v);
  std::vector<const Eqn*> def(rep.size(), nullptr);
  for (const Eqn& e : bare.eqns) def[static_cast<size_t>(e.out)] = &e;
  auto all_true = [&](int v) {  // broadcast_in_dim of the constant true
    const Eqn* b = def[static_cast<size_t>(v)];
    if (!b || b->op != Op::broadcast_in_dim) return false;
    const Eqn* k = def[static_cast<size_t>(b->inputs[0])];
    return k && k->op == Op::constant && bare.type(k->out).dtype == DType::i1 && k->attrs.literal == std::vector<double>{1};
  };
  int selects = 0;
  for (Eqn& e : bare.eqns) {
    for (int& v : e.inputs) v = rep[static_cast<size_t>(v)];
    if (e.op == Op::select && all_true(e.inputs[0])) {
      rep[static_cast<size_t>(e.out)] = e.inputs[1];
      ++selects;
    }
  }
  ASSERT_GE(selects, 4);  // one (or two) per block
  bare = dead_code_eliminate(bare);
  EXPECT_TRUE(host::run(bare, loss_inputs(c))[0].bit_equal(host::run(plain, loss_inputs(c))[0]));
  const size_t p = host::memory_needed(plain).arena, a = host::memory_needed(ck).arena, b = host::memory_needed(bare).arena;
  std::printf("host arena: plain %zu, checkpointed %zu, checkpointed without anchors %zu\n", p, a, b);
  EXPECT_LT(static_cast<double>(a), 0.4 * static_cast<double>(p));
  EXPECT_GT(static_cast<double>(b), 0.6 * static_cast<double>(p));
}

// The other backends run the checkpointed fused step on their slots (aliases
// donated): three steps whose losses are within the lanes' 1e-5 (relative)
// of the host's plain step's. (Not the parameters: from zero moments AdamW's
// first update is +-lr wherever the gradient's rounding differs in sign.)
void three_steps_on(BackendKind kind, const BackendOptions& o) {
  const nn::LmConfig c = tiny(nn::Arch::seed, 2);
  const std::vector<std::string> names = names_of(c);
  optim::AdamW aw;
  const Program plain = optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, aw);
  const Program ck = checkpoint_activations(plain, every_kth_region(plain, 1));
  // Parameters, zero moments, the batch, step 1's scalars.
  std::vector<Array> in = nn::init_parameters(c, 11), out;
  for (int rep = 0; rep < 2; ++rep)
    for (size_t j = 0; j < names.size(); ++j) in.push_back(Array(in[j].type()));
  const std::vector<Array> batch = loss_inputs(c);  // the parameters, tokens, targets
  in.push_back(batch[batch.size() - 2]);
  in.push_back(batch.back());
  const optim::AdamWScalars sc = optim::adamw_scalars(aw, 1);
  for (float v : {sc.lr, sc.bc1, sc.bc2, sc.decay}) in.push_back(Array::scalar(v));
  ASSERT_EQ(in.size(), plain.inputs.size());
  std::unique_ptr<Backend> b = make_backend(kind, ck, o);
  for (size_t i = 0; i < in.size(); ++i) b->set_input(static_cast<int>(i), in[i]);
  for (int step = 0; step < 3; ++step) {
    out = host::run(plain, in);
    b->run();
    for (const Alias& al : plain.aliases) in[static_cast<size_t>(al.input)] = out[static_cast<size_t>(al.output)];
    Array loss;
    b->read_output(0, loss);
    EXPECT_NEAR(loss.get(0), out[0].get(0), 1e-5 * std::fabs(out[0].get(0))) << backend_name(kind) << " step " << step;
    EXPECT_GT(loss.get(0), 1.0);  // a loss, not zeros
  }
}

TEST(CheckpointActivations, PjrtRunsTheCheckpointedStep) {
  std::string why;
  const std::string plugin = test::pjrt_plugin(&why);
  if (plugin.empty()) GTEST_SKIP() << why;
  BackendOptions o;
  o.pjrt.plugin = plugin;
  three_steps_on(BackendKind::pjrt, o);
}

TEST(CheckpointActivations, CudaRunsTheCheckpointedStep) {
  std::string why;
  if (!cuda::available(&why)) GTEST_SKIP() << why;
  BackendOptions o;
  o.cuda.tf32 = false;  // f32 dots in f32, to compare at 1e-5
  three_steps_on(BackendKind::cuda, o);
}

}  // namespace
}  // namespace capstep
