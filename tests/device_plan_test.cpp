// The memory plan (plan::plan_memory, the device's and, with the host's
// options, the interpreter's), checked without a device: buffers that are live at
// the same time never share a byte (pairwise, exhaustively, on random
// programs), and a byte-level simulation of one step on the planned addresses
// reads every operand intact and leaves every output, donated ones included,
// where the plan says it is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "backend/plan/gemm_layout.h"
#include "backend/plan/walk.h"
#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"
#include "backend/host/interpreter.h"
#include "backend/host/step.h"
#include "backend/plan/device_plan.h"

namespace capstep {
namespace {

using plan::EndCopy;
using plan::Home;
using plan::Loc;
using plan::Plan;
using plan::Space;

Type f32(Shape s) { return {DType::f32, std::move(s)}; }

// The planner's options for one scratch buffer of scratch[d] bytes per
// equation d (none where 0).
plan::PlanOptions with_scratch(const std::vector<size_t>& scratch) {
  plan::PlanOptions o;
  for (size_t bytes : scratch) o.eqn_scratch.push_back(bytes > 0 ? std::vector<size_t>{bytes} : std::vector<size_t>{});
  return o;
}

// ---- a fake device: one tag per byte of each space --------------------------
// A tag names the value whose bytes are there (its root's id), so a read that
// finds another tag is a read of clobbered memory.
struct FakeDevice {
  std::map<Space, std::vector<int>> mem;
  explicit FakeDevice(const Plan& pl) {
    mem[Space::inputs].assign(pl.inputs_bytes, -1);
    mem[Space::statics].assign(pl.statics_bytes, -1);
    mem[Space::arena].assign(pl.arena_bytes, -1);
  }
  void write(Loc l, size_t bytes, int tag) {
    auto& m = mem[l.space];
    ASSERT_LE(l.offset + bytes, m.size()) << "write past the end of " << plan::space_name(l.space);
    std::fill(m.begin() + static_cast<long>(l.offset), m.begin() + static_cast<long>(l.offset + bytes), tag);
  }
  bool holds(Loc l, size_t bytes, int tag) {
    auto& m = mem[l.space];
    if (l.offset + bytes > m.size()) return false;
    for (size_t b = 0; b < bytes; ++b)
      if (m[l.offset + b] != tag) return false;
    return true;
  }
  void copy(Loc from, Loc to, size_t bytes) {
    std::vector<int> tmp(mem[from.space].begin() + static_cast<long>(from.offset),
                         mem[from.space].begin() + static_cast<long>(from.offset + bytes));
    std::copy(tmp.begin(), tmp.end(), mem[to.space].begin() + static_cast<long>(to.offset));
  }
};

// Runs one step of `p` on the fake device at the planned addresses and checks
// every read and every output. Returns the number of failed checks.
int simulate(const Program& p, const Plan& pl, const std::vector<size_t>& scratch = {}) {
  FakeDevice dev(pl);
  int failures = 0;
  // Equal constants and iotas share one location: the first one's tag there.
  std::map<size_t, int> static_tag;
  for (const Eqn& e : p.eqns)
    if (e.op == Op::constant || e.op == Op::iota) static_tag.try_emplace(pl.values[static_cast<size_t>(e.out)].loc.offset, e.out);
  auto tag = [&](int value) {
    const int r = pl.values[static_cast<size_t>(value)].root;
    const auto& rv = pl.values[static_cast<size_t>(r)];
    return rv.home == Home::statics ? static_tag.at(rv.loc.offset) : r;
  };
  for (const NamedValue& in : p.inputs) dev.write(pl.values[static_cast<size_t>(in.value)].loc,
                                                  pl.values[static_cast<size_t>(in.value)].bytes, in.value);
  for (const Eqn& e : p.eqns)
    if (e.op == Op::constant || e.op == Op::iota)
      dev.write(pl.values[static_cast<size_t>(e.out)].loc, pl.values[static_cast<size_t>(e.out)].bytes, tag(e.out));
  for (size_t d = 0; d < p.eqns.size(); ++d) {
    const Eqn& e = p.eqns[d];
    const bool has_scratch = d < scratch.size() && scratch[d] > 0;
    if (has_scratch) dev.write(pl.scratch_loc[d][0], scratch[d], -1000 - static_cast<int>(d));
    for (int x : e.inputs) {
      const auto& xv = pl.values[static_cast<size_t>(x)];
      if (!dev.holds(xv.loc, xv.bytes, tag(x))) {
        ++failures;
        ADD_FAILURE() << "equation " << d << " (" << op_name(e.op) << ") reads %" << x << " clobbered";
      }
    }
    const auto& ov = pl.values[static_cast<size_t>(e.out)];
    if (e.op != Op::constant && e.op != Op::iota && e.op != Op::reshape) dev.write(ov.loc, ov.bytes, tag(e.out));
    if (has_scratch && !dev.holds(pl.scratch_loc[d][0], scratch[d], -1000 - static_cast<int>(d))) {
      ++failures;
      ADD_FAILURE() << "equation " << d << ": its scratch overlaps its own result";
    }
  }
  // outputs intact before the end-of-step copies
  for (const NamedValue& o : p.outputs) {
    const auto& ov = pl.values[static_cast<size_t>(o.value)];
    if (!dev.holds(ov.loc, ov.bytes, tag(o.value))) {
      ++failures;
      ADD_FAILURE() << "output " << o.name << " clobbered before the end of the step";
    }
  }
  bool seen_back = false;
  for (const EndCopy& c : pl.end_copies) {
    if (c.kind == EndCopy::copy_back) seen_back = true;
    if (c.kind == EndCopy::snapshot && seen_back) {
      ++failures;
      ADD_FAILURE() << "a snapshot runs after a copy-back";
    }
    dev.copy(c.from, c.to, c.bytes);
  }
  // after the step: each output reads as its value from output_loc
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const int v = p.outputs[o].value;
    if (!dev.holds(pl.output_loc[o], pl.values[static_cast<size_t>(v)].bytes, tag(v))) {
      ++failures;
      ADD_FAILURE() << "output " << p.outputs[o].name << " does not read back as %" << v;
    }
  }
  // and each aliased input's region now holds its output's value
  for (const Alias& a : p.aliases) {
    const int v = p.outputs[static_cast<size_t>(a.output)].value;
    if (!dev.holds(pl.input_loc[static_cast<size_t>(a.input)], pl.values[static_cast<size_t>(v)].bytes, tag(v))) {
      ++failures;
      ADD_FAILURE() << "input " << p.inputs[static_cast<size_t>(a.input)].name << " does not hold output "
                    << p.outputs[static_cast<size_t>(a.output)].name << " after the step";
    }
  }
  return failures;
}

// Every pair of arena buffers (roots, scratch, snapshots) that are live at the
// same time: their byte ranges must be disjoint. Returns the number of clashes.
int pairwise_overlaps(const Program& p, const Plan& pl, const std::vector<size_t>& scratch) {
  struct B { size_t lo, hi; int first, last; std::string what; };
  std::vector<B> bs;
  for (int id = 0; id < p.num_values(); ++id) {
    const auto& x = pl.values[static_cast<size_t>(id)];
    if (x.home == Home::arena && x.bytes > 0)  // live from its writer to its last reader (unread: at its writer)
      bs.push_back({x.loc.offset, x.loc.offset + x.bytes, x.def, std::max(x.def, x.last), "%" + std::to_string(id)});
  }
  for (size_t d = 0; d < scratch.size(); ++d)
    if (scratch[d] > 0)
      bs.push_back({pl.scratch_loc[d][0].offset, pl.scratch_loc[d][0].offset + scratch[d], static_cast<int>(d),
                    static_cast<int>(d), "scratch of eqn " + std::to_string(d)});
  for (const EndCopy& c : pl.end_copies)
    if (c.kind == EndCopy::snapshot)
      bs.push_back({c.to.offset, c.to.offset + c.bytes, pl.num_eqns, pl.num_eqns, "snapshot"});
  int clashes = 0;
  for (size_t i = 0; i < bs.size(); ++i) {
    EXPECT_EQ(bs[i].lo % plan::kDeviceAlign, 0u) << bs[i].what << " is not 256-byte aligned";
    EXPECT_LE(bs[i].hi, pl.arena_bytes) << bs[i].what << " ends past the arena";
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const bool live_together = bs[i].first <= bs[j].last && bs[j].first <= bs[i].last;
      const bool share_bytes = bs[i].lo < bs[j].hi && bs[j].lo < bs[i].hi;
      if (live_together && share_bytes) {
        ++clashes;
        ADD_FAILURE() << bs[i].what << " and " << bs[j].what << " are live together and share bytes";
      }
    }
  }
  return clashes;
}

// ---- a random program generator ---------------------------------------------
// Values of a few f32 shapes; ops that exercise every home: elementwise (in
// place candidates), reshape views (of inputs too), constants and iota
// (statics), reductions and broadcasts (size changes), dots (scratch).
Program random_program(std::mt19937& rng, int n_eqns, int n_inputs, std::vector<size_t>* scratch) {
  Program p;
  const std::vector<Shape> shapes = {{37, 53}, {53, 37}, {37 * 53}, {37}, {53, 53}};
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int i = 0; i < n_inputs; ++i) p.add_input("in" + std::to_string(i), f32(shapes[static_cast<size_t>(pick(5))]));
  auto of_shape = [&](const Shape& s) {
    std::vector<int> c;
    for (int id = 0; id < p.num_values(); ++id)
      if (p.type(id).shape == s && p.type(id).dtype == DType::f32) c.push_back(id);
    return c;
  };
  while (static_cast<int>(p.eqns.size()) < n_eqns) {
    const int v = pick(p.num_values());
    const Type t = p.type(v);
    if (t.dtype != DType::f32) continue;
    switch (pick(9)) {
      case 0: case 1: {  // binary with another value of the same shape (often an input)
        std::vector<int> same = of_shape(t.shape);
        int w = same[static_cast<size_t>(pick(static_cast<int>(same.size())))];
        p.add_eqn(pick(2) ? Op::add : Op::multiply, {v, w}, {});
        break;
      }
      case 2: p.add_eqn(Op::exponential, {v}, {}); break;
      case 3: {  // reshape between the 2-D and flat forms
        if (t.shape == Shape{37, 53} || t.shape == Shape{53, 37}) p.add_eqn_typed(Op::reshape, {v}, {}, f32({37 * 53}));
        else if (t.shape == Shape{37 * 53}) p.add_eqn_typed(Op::reshape, {v}, {}, f32({37, 53}));
        else p.add_eqn(Op::negate, {v}, {});
        break;
      }
      case 4: {
        Attrs a;
        a.literal = {1.5};
        p.add_eqn_typed(pick(2) ? Op::constant : Op::iota, {}, a, f32(shapes[static_cast<size_t>(pick(5))]));
        break;
      }
      case 5: {  // reduce the last axis away
        if (t.rank() == 2 && t.shape[1] == 53 && t.shape[0] == 37) {
          Attrs a;
          a.dims = {1};
          p.add_eqn(Op::reduce_sum, {v}, a);
        } else {
          p.add_eqn(Op::tanh, {v}, {});
        }
        break;
      }
      case 6: {  // broadcast [37] -> [37,53]
        if (t.shape == Shape{37}) {
          Attrs a;
          a.dims = {0};
          p.add_eqn_typed(Op::broadcast_in_dim, {v}, a, f32({37, 53}));
        } else {
          p.add_eqn(Op::sqrt, {v}, {});
        }
        break;
      }
      case 7: {  // transpose
        if (t.rank() == 2) {
          Attrs a;
          a.dims = {1, 0};
          p.add_eqn(Op::transpose, {v}, a);
        } else {
          p.add_eqn(Op::log, {v}, {});
        }
        break;
      }
      case 8: {  // dot [37,53] x [53,53] with a scratch request
        std::vector<int> sq = of_shape({53, 53});
        if (t.shape == Shape{37, 53} && !sq.empty()) {
          Attrs a;
          a.lhs_contract = {1};
          a.rhs_contract = {0};
          p.add_eqn(Op::dot_general, {v, sq[static_cast<size_t>(pick(static_cast<int>(sq.size())))]}, a);
        } else {
          p.add_eqn(Op::rsqrt, {v}, {});
        }
        break;
      }
    }
    scratch->push_back(p.eqns.back().op == Op::dot_general || pick(7) == 0 ? 1000 + static_cast<size_t>(pick(5000)) : 0);
  }
  // outputs: a few random values, then aliases to inputs of the same type
  const int n_out = 2 + pick(5);
  for (int o = 0; o < n_out; ++o) p.add_output("out" + std::to_string(o), pick(p.num_values()));
  std::vector<char> used_in(p.inputs.size(), 0);
  for (int o = 0; o < n_out; ++o) {
    if (pick(3) == 0) continue;
    for (size_t i = 0; i < p.inputs.size(); ++i)
      if (!used_in[i] && p.input_type(static_cast<int>(i)) == p.output_type(o)) {
        used_in[i] = 1;
        p.aliases.push_back({o, static_cast<int>(i)});
        break;
      }
  }
  return p;
}

// ---- tests ------------------------------------------------------------------

TEST(DevicePlan, RandomProgramsNoLiveBuffersOverlapExhaustive) {
  std::mt19937 rng(1234);
  int donated = 0, copied = 0, snapshots = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<size_t> scratch;
    Program p = random_program(rng, 30 + trial, 1 + trial % 4, &scratch);
    Plan pl = plan::plan_memory(p, with_scratch(scratch));
    ASSERT_EQ(pairwise_overlaps(p, pl, scratch), 0) << to_text(p);
    ASSERT_EQ(simulate(p, pl, scratch), 0) << to_text(p) << plan::describe(p, pl);
    for (int d : pl.donated_input) donated += d >= 0;
    for (const EndCopy& c : pl.end_copies) (c.kind == EndCopy::snapshot ? snapshots : copied) += 1;
  }
  // the generator must have exercised both alias paths, or the test proves little
  EXPECT_GT(donated, 0);
  EXPECT_GT(copied, 0);
}

TEST(DevicePlan, ArenaReusesBuffersAndReportsSizes) {
  // a chain x -> e1 -> e2 -> ... : each value dies when the next is made, so two
  // buffers (plus the output) suffice however long the chain
  Program p;
  int x = p.add_input("x", f32({37, 53}));
  int v = x;
  for (int i = 0; i < 20; ++i) v = p.add_eqn(Op::exponential, {v}, {});
  p.add_output("y", v);
  Plan pl = plan::plan_memory(p);
  const size_t one = (37 * 53 * 4 + 255) / 256 * 256;
  EXPECT_EQ(pl.inputs_bytes, one);
  EXPECT_EQ(pl.arena_bytes, 2 * one);          // the op reads one buffer while writing another
  EXPECT_EQ(pl.statics_bytes, 0u);
  EXPECT_EQ(pl.total_bytes(), 3 * one);
  EXPECT_EQ(pl.output_loc[0], pl.values[static_cast<size_t>(v)].loc);
  EXPECT_EQ(simulate(p, pl), 0);
}

TEST(DevicePlan, ReshapeIsAViewAndExtendsItsRootsLife) {
  Program p;
  int x = p.add_input("x", f32({37, 53}));
  int a = p.add_eqn(Op::exponential, {x}, {});
  int r = p.add_eqn_typed(Op::reshape, {a}, {}, f32({37 * 53}));
  int b = p.add_eqn(Op::negate, {x}, {});
  int c = p.add_eqn(Op::negate, {r}, {});   // reads a (through r) after b is made
  p.add_output("b", b);
  p.add_output("c", c);
  Plan pl = plan::plan_memory(p);
  EXPECT_EQ(pl.values[static_cast<size_t>(r)].home, Home::view);
  EXPECT_EQ(pl.values[static_cast<size_t>(r)].root, a);
  EXPECT_EQ(pl.values[static_cast<size_t>(r)].loc, pl.values[static_cast<size_t>(a)].loc);
  EXPECT_EQ(pl.values[static_cast<size_t>(a)].last, 3);
  EXPECT_NE(pl.values[static_cast<size_t>(a)].loc, pl.values[static_cast<size_t>(b)].loc);
  EXPECT_EQ(simulate(p, pl), 0);
}

// AdamW's shape: p' = p - lr * g, the last read of p is the equation that makes
// p', elementwise: written straight into p's region, no copy.
TEST(DevicePlan, AliasWrittenInPlaceWhenSafe) {
  Program p;
  int w = p.add_input("w", f32({37, 53}));
  int g = p.add_input("g", f32({37, 53}));
  int lr = p.add_input("lr", f32({}));
  Attrs bd;
  bd.dims = {};
  int lrb = p.add_eqn_typed(Op::broadcast_in_dim, {lr}, bd, f32({37, 53}));
  int step = p.add_eqn(Op::multiply, {lrb, g}, {});
  int w2 = p.add_eqn(Op::subtract, {w, step}, {});
  int loss = p.add_eqn(Op::multiply, {g, g}, {});
  p.add_output("loss", loss);
  p.add_output("w'", w2);
  p.aliases.push_back({1, 0});
  Plan pl = plan::plan_memory(p);
  EXPECT_EQ(pl.donated_input[1], 0);
  EXPECT_EQ(pl.donated_input[0], -1);
  EXPECT_EQ(pl.values[static_cast<size_t>(w2)].home, Home::donated);
  EXPECT_EQ(pl.values[static_cast<size_t>(w2)].loc, pl.input_loc[0]);
  EXPECT_TRUE(pl.end_copies.empty());
  EXPECT_TRUE(pl.notes.empty());
  EXPECT_EQ(pl.output_loc[1], pl.input_loc[0]);
  EXPECT_EQ(simulate(p, pl), 0);
}

// The input is read again after its new value is made: writing in place would
// clobber it, so the planner computes into the arena and copies back.
TEST(DevicePlan, AliasCopiedBackWhenInputReadLater) {
  Program p;
  int w = p.add_input("w", f32({37, 53}));
  int w2 = p.add_eqn(Op::exponential, {w}, {});
  int late = p.add_eqn(Op::add, {w, w2}, {});   // reads w after w2 exists
  p.add_output("w'", w2);
  p.add_output("late", late);
  p.aliases.push_back({0, 0});
  Plan pl = plan::plan_memory(p);
  EXPECT_EQ(pl.donated_input[0], -1);
  EXPECT_EQ(pl.values[static_cast<size_t>(w2)].home, Home::arena);
  ASSERT_EQ(pl.end_copies.size(), 1u);
  EXPECT_EQ(pl.end_copies[0].kind, EndCopy::copy_back);
  EXPECT_EQ(pl.end_copies[0].from, pl.values[static_cast<size_t>(w2)].loc);
  EXPECT_EQ(pl.end_copies[0].to, pl.input_loc[0]);
  ASSERT_EQ(pl.notes.size(), 1u);
  EXPECT_NE(pl.notes[0].find("still read by equation 1"), std::string::npos) << pl.notes[0];
  EXPECT_EQ(simulate(p, pl), 0);
}

// A non-elementwise op that reads the input it would overwrite (transpose
// reads other elements than it writes): not in place.
TEST(DevicePlan, AliasNotInPlaceForNonElementwiseReader) {
  Program p;
  int w = p.add_input("w", f32({53, 53}));
  Attrs t;
  t.dims = {1, 0};
  int wt = p.add_eqn(Op::transpose, {w}, t);
  p.add_output("wt", wt);
  p.aliases.push_back({0, 0});
  Plan pl = plan::plan_memory(p);
  EXPECT_EQ(pl.donated_input[0], -1);
  ASSERT_EQ(pl.notes.size(), 1u);
  EXPECT_NE(pl.notes[0].find("not an elementwise op"), std::string::npos) << pl.notes[0];
  EXPECT_EQ(simulate(p, pl), 0);
}

// Swap: a' = b, b' = a, and the old a is also an output. Each copy-back
// source is an input overwritten in the same end phase, so both are
// snapshotted first; the old-a output reads its snapshot.
TEST(DevicePlan, SwapAndOldValueOutputsAreSnapshotted) {
  Program p;
  int a = p.add_input("a", f32({37}));
  int b = p.add_input("b", f32({37}));
  p.add_output("a'", b);
  p.add_output("b'", a);
  p.add_output("old a", a);
  p.aliases.push_back({0, 0});
  p.aliases.push_back({1, 1});
  Plan pl = plan::plan_memory(p);
  int snaps = 0, backs = 0;
  for (const EndCopy& c : pl.end_copies) (c.kind == EndCopy::snapshot ? snaps : backs) += 1;
  EXPECT_EQ(snaps, 2);
  EXPECT_EQ(backs, 2);
  EXPECT_EQ(pl.output_loc[2].space, Space::arena);
  EXPECT_EQ(simulate(p, pl), 0);
}

// One value donated to two inputs: the first alias writes in place, the
// second copies from the first input's region.
TEST(DevicePlan, OneValueAliasedToTwoInputs) {
  Program p;
  int a = p.add_input("a", f32({37}));
  int b = p.add_input("b", f32({37}));
  int s = p.add_eqn(Op::add, {a, b}, {});
  p.add_output("a'", s);
  p.add_output("b'", s);
  p.aliases.push_back({0, 0});
  p.aliases.push_back({1, 1});
  Plan pl = plan::plan_memory(p);
  EXPECT_EQ(pl.donated_input[0], 0);
  EXPECT_EQ(pl.donated_input[1], -1);
  ASSERT_EQ(pl.end_copies.size(), 1u);
  EXPECT_EQ(pl.end_copies[0].from, pl.input_loc[0]);
  EXPECT_EQ(pl.end_copies[0].to, pl.input_loc[1]);
  EXPECT_EQ(simulate(p, pl), 0);
}

TEST(DevicePlan, IdentityAliasNeedsNothingAndStaticsAreSeparate) {
  Program p;
  int a = p.add_input("a", f32({37}));
  Attrs c;
  c.literal = {2.0};
  int k = p.add_eqn_typed(Op::constant, {}, c, f32({37}));
  int m = p.add_eqn(Op::multiply, {a, k}, {});
  p.add_output("a", a);
  p.add_output("m", m);
  p.aliases.push_back({0, 0});
  Plan pl = plan::plan_memory(p);
  EXPECT_TRUE(pl.end_copies.empty());
  EXPECT_EQ(pl.values[static_cast<size_t>(k)].home, Home::statics);
  EXPECT_EQ(pl.values[static_cast<size_t>(k)].loc.space, Space::statics);
  EXPECT_EQ(pl.statics_bytes, 256u);
  EXPECT_EQ(simulate(p, pl), 0);
}

// Spans (a fused kernel's equations): reads count at the span's end and
// results from its start, so an operand read early in the span does not lend
// its bytes to a result made later in it; internal values get no bytes.
TEST(DevicePlan, SpansExtendLifetimesAndInternalValuesTakeNoBytes) {
  Program p;
  const int x = p.add_input("x", f32({64}));
  const int a = p.add_eqn(Op::exponential, {x}, {});   // 0
  const int b = p.add_eqn(Op::negate, {a}, {});        // 1: last read of a
  const int c = p.add_eqn(Op::tanh, {b}, {});          // 2
  const int d = p.add_eqn(Op::add, {c, c}, {});        // 3
  p.add_output("d", d);
  // unfused: a (0..1) and c (2..3) may share bytes
  const Plan plain = plan::plan_memory(p);
  EXPECT_EQ(plain.values[static_cast<size_t>(a)].loc, plain.values[static_cast<size_t>(c)].loc);
  // one kernel for equations 1..3: a is read at 3 and c is live from 1
  plan::PlanOptions o;
  o.span = {{0, 0}, {1, 3}, {1, 3}, {1, 3}};
  Plan pl = plan::plan_memory(p, o);
  EXPECT_NE(pl.values[static_cast<size_t>(a)].loc, pl.values[static_cast<size_t>(c)].loc);
  EXPECT_NE(pl.values[static_cast<size_t>(a)].loc, pl.values[static_cast<size_t>(d)].loc);
  // b and c only in registers: the arena holds a and d
  o.internal.assign(static_cast<size_t>(p.num_values()), 0);
  o.internal[static_cast<size_t>(b)] = o.internal[static_cast<size_t>(c)] = 1;
  pl = plan::plan_memory(p, o);
  EXPECT_EQ(pl.arena_bytes, 2 * plan::kDeviceAlign);
  EXPECT_EQ(pl.values[static_cast<size_t>(b)].home, Home::tile);
  EXPECT_EQ(pl.values[static_cast<size_t>(c)].home, Home::tile);
  EXPECT_EQ(pl.values[static_cast<size_t>(a)].home, Home::arena);
  // malformed options are errors
  plan::PlanOptions bad;
  bad.span = {{0, 0}};
  EXPECT_THROW(plan::plan_memory(p, bad), Error);
  bad.span = {{0, 0}, {2, 3}, {2, 3}, {2, 3}};  // equation 1 outside its span
  EXPECT_THROW(plan::plan_memory(p, bad), Error);
  bad.span.clear();
  bad.internal = {1};
  EXPECT_THROW(plan::plan_memory(p, bad), Error);
}

// The host interpreter's options of the one planner: 64-byte alignment, a
// same-dtype convert as a view, results in place over operands read for the
// last time, outputs in the caller's Arrays, two scratch buffers for one
// equation.
TEST(DevicePlan, HostOptionsViewsInPlaceDirectOutputsAndScratch) {
  Program p;
  const int x = p.add_input("x", f32({8, 8}));                                // 256 bytes
  const int a = p.add_eqn(Op::exponential, {x}, {});                          // 0
  const int c = p.add_eqn_typed(Op::convert, {a}, {}, f32({8, 8}));           // 1: moves nothing
  const int b = p.add_eqn(Op::negate, {c}, {});                               // 2: in place over a
  Attrs mm;
  mm.lhs_contract = {1};
  mm.rhs_contract = {0};
  const int m = p.add_eqn(Op::dot_general, {b, b}, mm);                       // 3: two scratch buffers
  const int n = p.add_eqn(Op::add, {m, x}, {});                               // 4: in place over m
  const int y = p.add_eqn(Op::multiply, {n, n}, {});                          // 5: not in place
  Attrs k;
  k.literal = {2.0};
  const int s = p.add_eqn_typed(Op::constant, {}, k, f32({3}));               // 6: 12 bytes of statics
  p.add_output("y", y);
  p.add_output("s", s);
  plan::PlanOptions o;
  o.align = 64;
  o.view = {0, 1, 0, 0, 0, 0, 0};
  o.eqn_scratch.assign(p.eqns.size(), {});
  o.eqn_scratch[3] = {1000, 64};
  o.in_place = [](int eqn, int operand) { return (eqn == 2 || eqn == 4) && operand == 0; };
  o.caller_arrays = true;
  const Plan pl = plan::plan_memory(p, o);
  auto at = [&](int v) { return pl.values[static_cast<size_t>(v)]; };
  EXPECT_EQ(at(x).home, Home::input);
  EXPECT_EQ(at(x).loc, Loc{});  // the caller's Array
  EXPECT_EQ(pl.inputs_bytes, 0u);
  EXPECT_EQ(at(c).home, Home::view);
  EXPECT_EQ(at(c).root, a);
  EXPECT_EQ(at(b).home, Home::view);  // in place over a, read last by b's equation
  EXPECT_EQ(at(b).root, a);
  EXPECT_EQ(at(b).last, -1);
  EXPECT_EQ(at(a).last, 3);            // to b's last reader
  EXPECT_EQ(at(n).home, Home::view);
  EXPECT_EQ(at(n).root, m);
  EXPECT_EQ(at(m).last, 5);
  EXPECT_EQ(at(y).home, Home::output);  // computed in the caller's Array
  EXPECT_EQ(at(y).loc, Loc{});
  EXPECT_EQ(pl.output_direct, (std::vector<char>{1, 0}));
  EXPECT_EQ(at(s).home, Home::statics);
  EXPECT_EQ(pl.statics_bytes, 64u);
  // the arena, largest first: the 1000-byte scratch (1024 at 64 bytes) at 0,
  // then a (equations 0..3) and m (3..5), then the 64-byte scratch, all live at 3
  ASSERT_EQ(pl.scratch_loc[3].size(), 2u);
  EXPECT_EQ(pl.scratch_loc[3][0], (Loc{Space::arena, 0}));
  EXPECT_EQ(at(a).loc, (Loc{Space::arena, 1024}));
  EXPECT_EQ(at(m).loc, (Loc{Space::arena, 1280}));
  EXPECT_EQ(pl.scratch_loc[3][1], (Loc{Space::arena, 1536}));
  EXPECT_EQ(pl.arena_bytes, 1600u);
  EXPECT_TRUE(pl.scratch_loc[0].empty());
  // the device's options on the same program: no merges, every result a buffer
  const Plan dev = plan::plan_memory(p);
  EXPECT_EQ(dev.values[static_cast<size_t>(b)].home, Home::arena);
  EXPECT_EQ(dev.values[static_cast<size_t>(c)].home, Home::arena);
  EXPECT_EQ(dev.values[static_cast<size_t>(y)].home, Home::arena);
  EXPECT_EQ(dev.statics_bytes, plan::kDeviceAlign);
  // a view must hold its operand's bytes; the error names the equation
  Program q;
  const int v = q.add_input("v", f32({8}));
  Attrs bd;
  bd.dims = {1};
  q.add_output("w", q.add_eqn_typed(Op::broadcast_in_dim, {v}, bd, f32({2, 8})));
  plan::PlanOptions bad;
  bad.view = {1};
  try {
    plan::plan_memory(q, bad);
    ADD_FAILURE() << "a broadcast that moves bytes became a view";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("equation 0 (broadcast_in_dim)"), std::string::npos) << e.what();
  }
}

// In place only for an equation run on its own: in a span of several, a
// later equation of the span may still read the operand the first wrote over.
TEST(DevicePlan, InPlaceOnlyForAnEquationRunAlone) {
  for (bool alone : {false, true}) {
    SCOPED_TRACE(alone ? "alone" : "in a span of two");
    Program p;
    const int x = p.add_input("x", f32({8, 8}));
    const int a = p.add_eqn(Op::exponential, {x}, {});   // 0
    const int b = p.add_eqn(Op::negate, {a}, {});        // 1: asked to write over a
    const int c = p.add_eqn(Op::add, {b, alone ? x : a}, {});  // 2: in the span, reads a after 1 wrote
    p.add_output("c", c);
    plan::PlanOptions o;
    if (!alone) o.span = {{0, 0}, {1, 2}, {1, 2}};
    o.in_place = [](int eqn, int operand) { return eqn == 1 && operand == 0; };
    const Plan pl = plan::plan_memory(p, o);
    const plan::ValuePlan& vb = pl.values[static_cast<size_t>(b)];
    if (alone) {
      EXPECT_EQ(vb.home, Home::view);
      EXPECT_EQ(vb.root, a);
    } else {
      EXPECT_EQ(vb.home, Home::arena);
      EXPECT_NE(vb.loc, pl.values[static_cast<size_t>(a)].loc);
    }
  }
}

// In a host fused group (PlanOptions::group), whose members run in order on
// each tile: a result the group writes out takes the buffer of a value the
// group reads for the last time when every member reading it comes before
// (here through a tile: y = (-a)^2 over a), not when one reads it after, nor
// when one reads it transposed (other elements than it writes).
TEST(DevicePlan, InPlaceInAHostGroupWhenItsMembersReadFirst) {
  enum Case { before, after, transposed };
  for (Case c : {before, after, transposed}) {
    SCOPED_TRACE(c == before ? "read before" : c == after ? "read after" : "read transposed");
    Program p;
    const int x = p.add_input("x", f32({8, 8}));
    const int a = p.add_eqn(Op::exponential, {x}, {});  // 0, alone
    const int src = c == transposed ? p.add_eqn_typed(Op::transpose, {a}, Attrs{.dims = {1, 0}}, f32({8, 8})) : a;
    const int t = p.add_eqn(Op::negate, {src}, {});     // group
    const int y = p.add_eqn(Op::multiply, {t, t}, {});  // group: the result written out
    int z = y;
    if (c == after) z = p.add_eqn(Op::add, {y, a}, {});  // group: reads a after y is written
    p.add_output("z", p.add_eqn(Op::tanh, {z}, {}));    // alone
    const int E = static_cast<int>(p.eqns.size()), g0 = 1, g1 = E - 2;  // the group: all but the first and last
    plan::PlanOptions o;
    o.align = 64;
    o.span.resize(static_cast<size_t>(E));
    o.group.assign(static_cast<size_t>(E), -1);
    o.internal.assign(static_cast<size_t>(p.num_values()), 0);
    for (int d = 0; d < E; ++d) o.span[static_cast<size_t>(d)] = {d, d};
    for (int d = g0; d <= g1; ++d) {
      o.span[static_cast<size_t>(d)] = {g0, g1};
      o.group[static_cast<size_t>(d)] = 0;
    }
    o.internal[static_cast<size_t>(t)] = 1;
    if (c == transposed) o.internal[static_cast<size_t>(src)] = 1;
    o.in_place = [](int, int) { return false; };  // nothing alone
    const Plan pl = plan::plan_memory(p, o);
    const plan::ValuePlan& vy = pl.values[static_cast<size_t>(y)];
    if (c == before) {
      EXPECT_EQ(vy.home, Home::view);
      EXPECT_EQ(vy.root, a);
    } else {
      EXPECT_EQ(vy.root, y);
      EXPECT_NE(vy.loc, pl.values[static_cast<size_t>(a)].loc);
    }
  }
}

// The host's tiles: the values a fused group makes that the host marks
// internal (PlanOptions::group given) become tiles only when nothing outside
// the group reads them and they are no output.
TEST(DevicePlan, HostTilesAreGroupValuesReadOnlyInTheirGroup) {
  Program p;
  const int x = p.add_input("x", f32({64}));
  const int u = p.add_eqn(Op::exponential, {x}, {});  // 0, group 0: read by equation 3 too
  const int w = p.add_eqn(Op::negate, {u}, {});       // 1, group 0: read only in it
  const int r = p.add_eqn_typed(Op::reshape, {w}, {}, f32({8, 8}));  // 2, group 0
  const int q = p.add_eqn_typed(Op::reshape, {p.add_eqn(Op::add, {w, w}, {})}, {}, f32({64}));  // 3 add, 4 reshape
  const int z = p.add_eqn(Op::tanh, {u}, {});         // 5, outside
  p.add_output("q", q);
  p.add_output("z", z);
  p.add_output("r", r);
  plan::PlanOptions o;
  o.align = 64;
  o.span = {{0, 4}, {0, 4}, {0, 4}, {0, 4}, {0, 4}, {5, 5}};
  o.group = {0, 0, 0, 0, 0, -1};
  o.internal.assign(static_cast<size_t>(p.num_values()), 0);
  for (int d = 0; d <= 4; ++d) o.internal[static_cast<size_t>(p.eqns[static_cast<size_t>(d)].out)] = 1;
  const Plan pl = plan::plan_memory(p, o);
  auto home = [&](int v) { return pl.values[static_cast<size_t>(v)].home; };
  EXPECT_EQ(home(u), Home::arena);  // read outside the group
  EXPECT_EQ(home(w), Home::arena);  // an output through the view r
  const int sum = p.eqns[3].out;
  EXPECT_EQ(home(sum), Home::arena);  // an output through the view q
  // without the outputs through views, w and the sum are tiles
  p.outputs.pop_back();
  p.outputs.erase(p.outputs.begin());
  const Plan pl2 = plan::plan_memory(p, o);
  EXPECT_EQ(pl2.values[static_cast<size_t>(w)].home, Home::tile);
  EXPECT_EQ(pl2.values[static_cast<size_t>(sum)].home, Home::tile);
  EXPECT_EQ(pl2.values[static_cast<size_t>(u)].home, Home::arena);
  EXPECT_EQ(pl2.arena_bytes, 2 * 256u);  // u and z
}

TEST(DevicePlan, PackerLowerBoundAndScratchCountMismatch) {
  // three buffers live together, one later: the total is the live peak
  std::vector<plan::Interval> bs = {{1000, 0, 2}, {300, 1, 3}, {256, 2, 2}, {2000, 4, 5}};
  size_t total = 0;
  std::vector<size_t> off = plan::pack(bs, plan::kDeviceAlign, &total);
  EXPECT_EQ(total, 2048u);
  EXPECT_EQ(off[3], 0u);
  Program p;
  p.add_input("x", f32({3}));
  p.add_output("x", 0);
  plan::PlanOptions two;
  two.eqn_scratch = {{1}, {2}};
  EXPECT_THROW(plan::plan_memory(p, two), Error);
}


// ---- the GEMM layout of dot_general -------------------------------------------
// Emulates what the CUDA executor does with a GemmLayout (transpose into
// scratch where asked, then a strided batch of row-major products with the
// planned leading dimensions and transposes) and compares it with dot_general
// computed from its definition.

std::vector<double> iota_values(int64_t n, double scale) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(static_cast<double>(i) * scale) + 0.1;
  return v;
}

std::vector<int64_t> unflatten(int64_t flat, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = flat % s[d];
    flat /= s[d];
  }
  return c;
}

int64_t flatten(const std::vector<int64_t>& c, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

std::vector<double> transposed(const std::vector<double>& x, const Shape& s, const std::vector<int64_t>& perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(s[static_cast<size_t>(p)]);
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    std::vector<int64_t> oc = unflatten(i, out), ic(s.size());
    for (size_t d = 0; d < perm.size(); ++d) ic[static_cast<size_t>(perm[d])] = oc[d];
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(flatten(ic, s))];
  }
  return y;
}

std::vector<double> dot_by_definition(const std::vector<double>& l, const Shape& ls, const std::vector<double>& r,
                                      const Shape& rs, const Attrs& a, const Shape& out) {
  auto is_in = [](const std::vector<int64_t>& v, int64_t d) { return std::find(v.begin(), v.end(), d) != v.end(); };
  std::vector<int64_t> lf, rf;
  for (int64_t d = 0; d < static_cast<int64_t>(ls.size()); ++d)
    if (!is_in(a.lhs_batch, d) && !is_in(a.lhs_contract, d)) lf.push_back(d);
  for (int64_t d = 0; d < static_cast<int64_t>(rs.size()); ++d)
    if (!is_in(a.rhs_batch, d) && !is_in(a.rhs_contract, d)) rf.push_back(d);
  Shape cs;
  for (int64_t d : a.lhs_contract) cs.push_back(ls[static_cast<size_t>(d)]);
  int64_t kn = 1;
  for (int64_t x : cs) kn *= x;
  int64_t on = 1;
  for (int64_t x : out) on *= x;
  std::vector<double> y(static_cast<size_t>(on), 0.0);
  for (int64_t o = 0; o < on; ++o) {
    std::vector<int64_t> oc = unflatten(o, out), lc(ls.size()), rc(rs.size());
    size_t at = 0;
    for (size_t i = 0; i < a.lhs_batch.size(); ++i, ++at) {
      lc[static_cast<size_t>(a.lhs_batch[i])] = oc[at];
      rc[static_cast<size_t>(a.rhs_batch[i])] = oc[at];
    }
    for (int64_t d : lf) lc[static_cast<size_t>(d)] = oc[at++];
    for (int64_t d : rf) rc[static_cast<size_t>(d)] = oc[at++];
    for (int64_t k = 0; k < kn; ++k) {
      std::vector<int64_t> kc = unflatten(k, cs);
      for (size_t i = 0; i < kc.size(); ++i) {
        lc[static_cast<size_t>(a.lhs_contract[i])] = kc[i];
        rc[static_cast<size_t>(a.rhs_contract[i])] = kc[i];
      }
      y[static_cast<size_t>(o)] += l[static_cast<size_t>(flatten(lc, ls))] * r[static_cast<size_t>(flatten(rc, rs))];
    }
  }
  return y;
}

std::vector<double> dot_by_layout(const std::vector<double>& l, const Shape& ls, const std::vector<double>& r,
                                  const Shape& rs, const plan::GemmLayout& g) {
  const std::vector<double> A = g.a.pack ? transposed(l, ls, g.a.perm) : l;
  const std::vector<double> B = g.b.pack ? transposed(r, rs, g.b.perm) : r;
  std::vector<double> C(static_cast<size_t>(g.batch * g.m * g.n), 0.0);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t m = 0; m < g.m; ++m)
      for (int64_t n = 0; n < g.n; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < g.k; ++k) {
          const int64_t ai = b * g.a.batch_stride + (g.a.trans ? k * g.a.ld + m : m * g.a.ld + k);
          const int64_t bi = b * g.b.batch_stride + (g.b.trans ? n * g.b.ld + k : k * g.b.ld + n);
          acc += A[static_cast<size_t>(ai)] * B[static_cast<size_t>(bi)];
        }
        C[static_cast<size_t>((b * g.m + m) * g.n + n)] = acc;
      }
  return C;
}

TEST(GemmLayout, EveryDotGeneralFormMatchesItsDefinition) {
  struct Case { Shape l, r; std::vector<int64_t> lb, rb, lc, rc; bool pack_a, pack_b, trans_a, trans_b; };
  const Case cases[] = {
      {{7, 5}, {5, 3}, {}, {}, {1}, {0}, false, false, false, false},
      {{5, 7}, {5, 3}, {}, {}, {0}, {0}, false, false, true, false},
      {{7, 5}, {3, 5}, {}, {}, {1}, {1}, false, false, false, true},
      {{2, 7, 5}, {2, 5, 3}, {0}, {0}, {2}, {1}, false, false, false, false},
      {{2, 5, 7}, {2, 3, 5}, {0}, {0}, {1}, {2}, false, false, true, true},
      // the batch axis between the matrix's axes: in place, each batch's matrix 5 (lhs) or 3 (rhs)
      // elements after the last, rows 10 (lhs) or 6 (rhs) apart
      {{7, 2, 5}, {5, 2, 3}, {1}, {1}, {2}, {0}, false, false, false, false},
      {{5, 2, 7}, {3, 2, 5}, {1}, {1}, {0}, {2}, false, false, true, true},
      // batch axes on both sides of M: uneven offsets (0, 5, 10, 105, ...), which the host reads in
      // place; cuBLAS's strided batch takes one stride, so the lhs is packed
      {{2, 7, 3, 5}, {2, 3, 5, 4}, {0, 2}, {0, 1}, {3}, {2}, true, false, false, false},
      {{7, 2, 5}, {2, 3, 5}, {1}, {0}, {2}, {2}, false, false, false, true},
      // batch axes first and last (lhs packed: uneven offsets); the rhs a column per batch element,
      // in place with a batch stride of 1
      {{2, 7, 5, 3}, {5, 2, 3}, {0, 3}, {1, 2}, {2}, {0}, true, false, false, false},
      {{4, 3, 7}, {3, 4, 6}, {}, {}, {0, 1}, {1, 0}, false, true, true, false},  // contract order follows lhs
      {{2, 3, 7, 5}, {2, 3, 5, 4}, {0, 1}, {0, 1}, {3}, {2}, false, false, false, false},
      {{7, 1, 5}, {5, 3}, {}, {}, {2}, {0}, false, false, false, false},  // size-1 axis: no packing
      {{7}, {6}, {}, {}, {}, {}, false, false, false, false},
      {{7, 5}, {5}, {}, {}, {1}, {0}, false, false, false, false},
  };
  for (const Case& c : cases) {
    Attrs a;
    a.lhs_batch = c.lb;
    a.rhs_batch = c.rb;
    a.lhs_contract = c.lc;
    a.rhs_contract = c.rc;
    const Type lt = f32(c.l), rt = f32(c.r);
    const Type out = infer_type(Op::dot_general, {lt, rt}, a);
    const plan::GemmLayout g = plan::plan_gemm(lt, rt, a);
    const std::string what = lt.str() + " x " + rt.str();
    EXPECT_EQ(g.a.pack, c.pack_a) << what;
    EXPECT_EQ(g.b.pack, c.pack_b) << what;
    EXPECT_EQ(g.a.trans, c.trans_a) << what;
    EXPECT_EQ(g.b.trans, c.trans_b) << what;
    // the lhs's scratch is rounded up to 256 bytes, so that the rhs's after it is aligned
    auto up256 = [](size_t b) { return (b + 255) / 256 * 256; };
    EXPECT_EQ(g.scratch_bytes(), (c.pack_a ? up256(lt.bytes()) : 0) + (c.pack_b ? up256(rt.bytes()) : 0)) << what;
    EXPECT_EQ(g.batch * g.m * g.n, out.numel()) << what;
    const std::vector<double> l = iota_values(lt.numel(), 0.37), r = iota_values(rt.numel(), 0.91);
    const std::vector<double> want = dot_by_definition(l, c.l, r, c.r, a, out.shape);
    const std::vector<double> got = dot_by_layout(l, c.l, r, c.r, g);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << what << " element " << i;
  }
}

// The host's dot_general (host::plan_dot) and the CUDA executor's
// (plan::plan_gemm) read one description (plan::dot_gemm); they must agree on
// every layout: the same B, M, N, K; an operand the host packs is packed on
// CUDA in the same order; one the host reads in place at evenly spaced
// batch offsets is read in place by cuBLAS with the same transpose, leading
// dimension and stride; at uneven offsets CUDA packs it. The host's
// emulated product (its offsets, transposes and leading dimensions) and the
// CUDA one must both match the definition. The sweep: every placement of the
// batch, free and contracting axes in each operand (batch axes first, in the
// middle, last, in either order), with size-1 axes among them. f64, so that
// the host's f32-only choices (panels, pack_bt, libxsmm) stay out of it:
// they do not change what is in place, only what the parts do with it.
std::vector<double> dot_by_host_plan(const std::vector<double>& l, const Shape& ls, const std::vector<double>& r,
                                     const Shape& rs, const host::DotPlan& d, const plan::DotGemm& g) {
  const std::vector<double> A = d.pack_a ? transposed(l, ls, g.a.pack_order) : l;
  const std::vector<double> B = d.pack_b ? transposed(r, rs, g.b.pack_order) : r;
  std::vector<double> C(static_cast<size_t>(d.batch * d.m * d.n), 0.0);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t m = 0; m < d.m; ++m)
      for (int64_t n = 0; n < d.n; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < d.k; ++k) {
          const int64_t ai = d.a_off[static_cast<size_t>(b)] + (d.trans_a ? k * d.lda + m : m * d.lda + k);
          const int64_t bi = d.b_off[static_cast<size_t>(b)] + (d.trans_b ? n * d.ldb + k : k * d.ldb + n);
          acc += A[static_cast<size_t>(ai)] * B[static_cast<size_t>(bi)];
        }
        C[static_cast<size_t>((b * d.m + m) * d.n + n)] = acc;
      }
  return C;
}

TEST(GemmLayout, HostAndCudaReadTheSameDescription) {
  struct Roles { int nb, nm, nk, nn; };  // batch, lhs free, contracting, rhs free axes
  const Roles roles[] = {{0, 1, 1, 1}, {1, 1, 1, 1}, {2, 1, 1, 0}, {1, 2, 1, 0}, {0, 1, 2, 1},
                         {1, 1, 2, 0}, {2, 0, 1, 1}, {1, 0, 1, 2}, {0, 2, 1, 1}};
  const std::vector<std::vector<int64_t>> sizes = {{2, 3, 4, 5}, {1, 3, 1, 2}, {3, 1, 2, 1}, {2, 2, 3, 1}};
  int cases = 0, host_in_place = 0, cuda_packs_uneven = 0, transposed_in_place = 0;
  for (const std::vector<int64_t>& sz : sizes)
    for (const Roles& ro : roles) {
      const int lr = ro.nb + ro.nm + ro.nk, rr = ro.nb + ro.nk + ro.nn;
      // size of the i-th axis of each role: batch, free (both sides), contracting
      auto size_of = [&](int role, int i) { return sz[static_cast<size_t>((role * 2 + i) % 4)]; };
      std::vector<int64_t> lp(static_cast<size_t>(lr)), rp(static_cast<size_t>(rr));
      std::iota(lp.begin(), lp.end(), 0);
      do {
        std::iota(rp.begin(), rp.end(), 0);
        do {
          // lhs: axes [batch..., free..., contracting...] placed at lp; rhs: [batch..., contracting..., free...] at rp
          Shape ls(static_cast<size_t>(lr)), rs(static_cast<size_t>(rr));
          Attrs at;
          size_t li = 0, ri = 0;
          for (int i = 0; i < ro.nb; ++i) {
            ls[static_cast<size_t>(lp[li])] = rs[static_cast<size_t>(rp[ri])] = size_of(0, i);
            at.lhs_batch.push_back(lp[li++]);
            at.rhs_batch.push_back(rp[ri++]);
          }
          for (int i = 0; i < ro.nm; ++i) ls[static_cast<size_t>(lp[li++])] = size_of(1, i);
          for (int i = 0; i < ro.nk; ++i) {
            ls[static_cast<size_t>(lp[li])] = rs[static_cast<size_t>(rp[ri])] = size_of(2, i) + 1;
            at.lhs_contract.push_back(lp[li++]);
            at.rhs_contract.push_back(rp[ri++]);
          }
          for (int i = 0; i < ro.nn; ++i) rs[static_cast<size_t>(rp[ri++])] = size_of(1, i + 1);
          const Type lt{DType::f64, ls}, rt{DType::f64, rs};
          const std::string what = lt.str() + " x " + rt.str() + " lhs batch " + ::testing::PrintToString(at.lhs_batch) +
                                   " contract " + ::testing::PrintToString(at.lhs_contract) + ", rhs batch " +
                                   ::testing::PrintToString(at.rhs_batch) + " contract " +
                                   ::testing::PrintToString(at.rhs_contract);
          const host::DotPlan d = host::plan_dot(lt, rt, at, "test");
          const plan::GemmLayout c = plan::plan_gemm(lt, rt, at);
          const plan::DotGemm g = plan::dot_gemm(lt, rt, at);
          ASSERT_EQ(std::vector<int64_t>({d.batch, d.m, d.n, d.k}), std::vector<int64_t>({c.batch, c.m, c.n, c.k})) << what;
          struct Side {
            bool pack, trans;
            int64_t ld;
            const std::vector<int64_t>& off;
            const plan::Walk& view;
            const plan::GemmOperand& cuda;
            const Type& t;
            const std::vector<int64_t>& batch;
            const std::vector<int64_t>& contract;
          };
          for (const Side& s : {Side{d.pack_a, d.trans_a, d.lda, d.a_off, d.a_view, c.a, lt, at.lhs_batch, at.lhs_contract},
                                Side{d.pack_b, d.trans_b, d.ldb, d.b_off, d.b_view, c.b, rt, at.rhs_batch, at.rhs_contract}}) {
            EXPECT_EQ(host::dot_operand_in_place(s.t, s.batch, s.contract), !s.pack) << what;
            if (s.pack) {
              ASSERT_TRUE(s.cuda.pack) << what << ": the host packs, CUDA reads in place";
              const plan::Walk w = plan::transpose_walk(s.t.shape, s.cuda.perm, "test");
              EXPECT_EQ(std::vector<int64_t>(w.size, w.size + w.rank), std::vector<int64_t>(s.view.size, s.view.size + s.view.rank)) << what;
              EXPECT_EQ(std::vector<int64_t>(w.stride, w.stride + w.rank), std::vector<int64_t>(s.view.stride, s.view.stride + s.view.rank)) << what;
              continue;
            }
            ++host_in_place;
            transposed_in_place += s.trans;
            bool even = true;
            const int64_t step = s.off.size() > 1 ? s.off[1] : 0;
            for (size_t i = 0; i < s.off.size(); ++i) even = even && s.off[i] == static_cast<int64_t>(i) * step;
            if (!even) {
              ++cuda_packs_uneven;
              EXPECT_TRUE(s.cuda.pack) << what << ": uneven batch offsets, which cuBLAS's strided batch cannot take";
              continue;
            }
            ASSERT_FALSE(s.cuda.pack) << what << ": the host reads in place, CUDA packs";
            EXPECT_EQ(s.cuda.trans, s.trans) << what;
            EXPECT_EQ(s.cuda.ld, s.ld) << what;
            if (s.off.size() > 1) {
              EXPECT_EQ(s.cuda.batch_stride, step) << what;
            }
          }
          const Type out = infer_type(Op::dot_general, {lt, rt}, at);
          const std::vector<double> l = iota_values(lt.numel(), 0.37), r = iota_values(rt.numel(), 0.91);
          const std::vector<double> want = dot_by_definition(l, ls, r, rs, at, out.shape);
          const std::vector<double> by_cuda = dot_by_layout(l, ls, r, rs, c), by_host = dot_by_host_plan(l, ls, r, rs, d, g);
          ASSERT_EQ(by_cuda.size(), want.size()) << what;
          ASSERT_EQ(by_host.size(), want.size()) << what;
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(by_cuda[i], want[i], 1e-12) << what << " element " << i << " (CUDA's layout)";
            ASSERT_NEAR(by_host[i], want[i], 1e-12) << what << " element " << i << " (the host's plan)";
          }
          ++cases;
        } while (std::next_permutation(rp.begin(), rp.end()));
      } while (std::next_permutation(lp.begin(), lp.end()));
    }
  // the sweep reaches every kind of operand
  EXPECT_GT(cases, 1000);
  EXPECT_GT(host_in_place, 0);
  EXPECT_GT(transposed_in_place, 0);
  EXPECT_GT(cuda_packs_uneven, 0);
}

// ---- the strided walks of the CUDA layout kernels -------------------------------
// The device kernels compute out[i] = in[walk_offset(w, i)] (broadcast,
// transpose) and out[o] = reduce over r of in[walk_offset(kept, o) +
// walk_offset(reduced, r)]; the same plan::walk_offset, run here on the host,
// must give the host interpreter's results.

Array numbered(const Type& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % 1009) - 500.0;
  return Array::from_doubles(t, v);
}

Array walk_copy(const Array& in, const Type& out_t, const plan::Walk& w) {
  Array out(out_t);
  for (int64_t i = 0; i < out_t.numel(); ++i) out.set(i, in.get(plan::walk_offset(w, i)));
  return out;
}

TEST(Walks, BroadcastAndTransposeMatchTheInterpreter) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    // a random rank-1..4 shape with sizes 1..6, its transposes and broadcasts
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape s;
    for (int d = 0; d < rank; ++d) s.push_back(1 + static_cast<int64_t>(rng() % 6));
    const Type t = f32(s);
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) perm[static_cast<size_t>(d)] = d;
    std::shuffle(perm.begin(), perm.end(), rng);
    {
      Program p;
      int x = p.add_input("x", t);
      Attrs a;
      a.dims = perm;
      p.add_output("y", p.add_eqn(Op::transpose, {x}, a));
      const Array in = numbered(t);
      const Array want = host::run(p, {in})[0];
      const Array got = walk_copy(in, want.type(), plan::transpose_walk(s, perm, "test"));
      EXPECT_TRUE(got.bit_equal(want)) << "transpose " << t.str() << " by " << shape_str(perm);
    }
    {
      // broadcast into a rank+1 result: a new axis at a random place, and each
      // size-1 operand axis stretched
      const size_t at = rng() % static_cast<size_t>(rank + 1);
      Shape out;
      std::vector<int64_t> dims;
      for (int d = 0, o = 0; d <= rank; ++d, ++o) {
        if (static_cast<size_t>(d) == at) out.push_back(3);
        if (d == rank) break;
        dims.push_back(static_cast<int64_t>(out.size()));
        out.push_back(s[static_cast<size_t>(d)] == 1 ? 4 : s[static_cast<size_t>(d)]);
      }
      Program p;
      int x = p.add_input("x", t);
      Attrs a;
      a.dims = dims;
      p.add_output("y", p.add_eqn_typed(Op::broadcast_in_dim, {x}, a, f32(out)));
      const Array in = numbered(t);
      const Array want = host::run(p, {in})[0];
      const Array got = walk_copy(in, want.type(), plan::broadcast_walk(s, out, dims, "test"));
      EXPECT_TRUE(got.bit_equal(want)) << "broadcast " << t.str() << " to " << shape_str(out) << " dims "
                                       << shape_str(dims);
    }
  }
}

// slice: out[i] = in[offset + walk_offset(w, i)] (k::strided_copy from the
// offset); pad: zeros, then out[offset + walk_offset(w, i)] = in[i]
// (k::strided_store); concatenate: the same store for each operand at its
// start along the axis. As the CUDA executor launches them (compile.cpp).
TEST(Walks, SlicePadConcatenateMatchTheInterpreter) {
  const Shape s = {3, 4, 5};
  const Type t = {DType::i32, s};
  const Array in = numbered(t);
  struct SliceCase {
    std::vector<int64_t> starts, limits, strides;
  };
  for (const SliceCase& c : {SliceCase{{0, 1, 2}, {3, 3, 5}, {1, 1, 1}}, SliceCase{{1, 0, 0}, {3, 4, 5}, {2, 3, 2}},
                             SliceCase{{0, 0, 4}, {3, 4, 5}, {1, 1, 1}}}) {
    Program p;
    int x = p.add_input("x", t);
    Attrs a;
    a.starts = c.starts;
    a.limits = c.limits;
    a.strides = c.strides;
    p.add_output("y", p.add_eqn(Op::slice, {x}, a));
    const Array want = host::run(p, {in})[0];
    const plan::OffsetWalk w = plan::slice_walk(s, want.type().shape, c.starts, c.strides, "test");
    Array got(want.type());
    for (int64_t i = 0; i < got.numel(); ++i) got.set(i, in.get(w.offset + plan::walk_offset(w.walk, i)));
    EXPECT_TRUE(got.bit_equal(want)) << "slice " << shape_str(c.starts) << shape_str(c.limits) << shape_str(c.strides);
  }
  for (const auto& [lo, hi] : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{1, 0, 2}, {0, 2, 1}},
                               std::pair<std::vector<int64_t>, std::vector<int64_t>>{{0, 3, 0}, {2, 0, 0}}}) {
    Program p;
    int x = p.add_input("x", t);
    Attrs a;
    a.lows = lo;
    a.highs = hi;
    p.add_output("y", p.add_eqn(Op::pad, {x}, a));
    const Array want = host::run(p, {in})[0];
    const plan::OffsetWalk w = plan::embed_walk(s, want.type().shape, lo, "test");
    Array got(want.type());  // zeros
    for (int64_t i = 0; i < in.numel(); ++i) got.set(w.offset + plan::walk_offset(w.walk, i), in.get(i));
    EXPECT_TRUE(got.bit_equal(want)) << "pad " << shape_str(lo) << shape_str(hi);
  }
  for (int64_t axis = 0; axis < 3; ++axis) {
    Shape s2 = s;
    s2[static_cast<size_t>(axis)] = 2;
    const Type t2 = {DType::i32, s2};
    const Array in2 = numbered(t2);
    Program p;
    int x = p.add_input("x", t), y = p.add_input("y", t2);
    Attrs a;
    a.axis = axis;
    p.add_output("c", p.add_eqn(Op::concatenate, {y, x, y}, a));
    const Array want = host::run(p, {in, in2})[0];
    Array got(want.type());
    std::vector<int64_t> at(3, 0);
    for (const Array* part : {&in2, &in, &in2}) {
      const plan::OffsetWalk w = plan::embed_walk(part->type().shape, want.type().shape, at, "test");
      for (int64_t i = 0; i < part->numel(); ++i) got.set(w.offset + plan::walk_offset(w.walk, i), part->get(i));
      at[static_cast<size_t>(axis)] += part->type().shape[static_cast<size_t>(axis)];
    }
    EXPECT_TRUE(got.bit_equal(want)) << "concatenate along " << axis;
  }
}

TEST(Walks, ReduceOverAnyAxesMatchesTheInterpreter) {
  const Shape s = {3, 5, 4, 2};
  const Type t = {DType::i32, s};
  for (unsigned mask = 1; mask < 16; ++mask) {
    std::vector<int64_t> axes;
    for (int d = 0; d < 4; ++d)
      if (mask & (1u << d)) axes.push_back(d);
    for (Op op : {Op::reduce_sum, Op::reduce_max}) {
      Program p;
      int x = p.add_input("x", t);
      Attrs a;
      a.dims = axes;
      p.add_output("y", p.add_eqn(op, {x}, a));
      const Array in = numbered(t);
      const Array want = host::run(p, {in})[0];
      const plan::ReduceWalks rw = plan::reduce_walks(s, axes, "test");
      ASSERT_EQ(rw.n_out, want.numel());
      Array got(want.type());
      for (int64_t o = 0; o < rw.n_out; ++o) {
        double acc = op == Op::reduce_max ? -1e300 : 0.0;
        for (int64_t r = 0; r < rw.n_red; ++r) {
          const double v = in.get(plan::walk_offset(rw.kept, o) + plan::walk_offset(rw.reduced, r));
          acc = op == Op::reduce_max ? std::max(acc, v) : acc + v;
        }
        got.set(o, acc);
      }
      EXPECT_TRUE(got.bit_equal(want)) << op_name(op) << " over " << shape_str(axes);
    }
  }
}

// Walks come collapsed (walk.h): axes whose strides chain are one axis, so a
// rank-9 identity transpose is a rank-1 copy; kMaxRank bounds the axes that
// remain, and an axis-reversing transpose keeps every one of them.
TEST(Walks, CollapseAndTheMaximumRank) {
  const plan::Walk id = plan::transpose_walk(Shape(9, 2), {0, 1, 2, 3, 4, 5, 6, 7, 8}, "rank 9");
  EXPECT_EQ(id.rank, 1);
  EXPECT_TRUE(id.is_identity());
  for (int rank : {plan::kMaxRank, plan::kMaxRank + 1}) {
    std::vector<int64_t> perm;
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
    const Shape s(static_cast<size_t>(rank), 2);
    if (rank > plan::kMaxRank) {
      EXPECT_THROW(plan::transpose_walk(s, perm, "reversed"), Error);
      continue;
    }
    const plan::Walk w = plan::transpose_walk(s, perm, "reversed");
    ASSERT_EQ(w.rank, rank);
    // element i of the reversal is the input element whose index has i's bits reversed
    for (int64_t i = 0; i < w.numel(); ++i) {
      int64_t want = 0;
      for (int b = 0; b < rank; ++b)
        if (i >> b & 1) want |= int64_t{1} << (rank - 1 - b);
      ASSERT_EQ(plan::walk_offset(w, i), want) << i;
    }
  }
}

// Lane 3's program: the seed's model (smaller), its gradient, AdamW appended
// with params/m/v donated. Every alias must be written in place (no copy-back
// costs a step), and one step simulated on the planned addresses reads every
// operand intact and leaves each updated buffer where the next step reads it.
TEST(DevicePlan, FusedAdamWProgramDonatesEveryBufferInPlace) {
  nn::LmConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_ff = 48;
  c.context = 16;
  c.batch = 2;
  c.seq = 7;
  std::vector<std::string> names;
  for (const auto& s : nn::lm_parameters(c)) names.push_back(s.name);
  // the device planner plans the adamw equations written out (as the CUDA backend does)
  Program p = expand_adamw(optim::with_adamw(value_and_grad(nn::lm_loss_program(c), names), names, optim::AdamW{}));
  std::vector<size_t> scratch(p.eqns.size(), 0);
  for (size_t d = 0; d < p.eqns.size(); ++d)
    if (p.eqns[d].op == Op::dot_general)
      scratch[d] = plan::plan_gemm(p.type(p.eqns[d].inputs[0]), p.type(p.eqns[d].inputs[1]), p.eqns[d].attrs)
                       .scratch_bytes();
  Plan pl = plan::plan_memory(p, with_scratch(scratch));
  ASSERT_EQ(p.aliases.size(), 3 * names.size());
  int donated = 0;
  for (int d : pl.donated_input) donated += d >= 0;
  EXPECT_EQ(donated, static_cast<int>(p.aliases.size())) << plan::describe(p, pl);
  EXPECT_TRUE(pl.end_copies.empty()) << plan::describe(p, pl);
  EXPECT_EQ(pairwise_overlaps(p, pl, scratch), 0);
  EXPECT_EQ(simulate(p, pl, scratch), 0);
  // the arena is far smaller than keeping every value
  size_t all = 0;
  for (const auto& v : pl.values)
    if (v.home == Home::arena) all += v.bytes;
  EXPECT_LT(pl.arena_bytes, all);
}

}  // namespace
}  // namespace capstep
