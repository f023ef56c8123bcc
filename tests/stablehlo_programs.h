// Programs and inputs shared by the StableHLO tests (golden text, round trip,
// XLA). Built with Program::add_input / add_eqn directly so that each program
// holds exactly the primitives it names; together they cover every primitive.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capstep/array.h"
#include "capstep/autodiff.h"
#include "capstep/ir.h"
#include "capstep/nn.h"
#include "capstep/optim.h"
#include "capstep/trace.h"

namespace capstep::hlo_test {

struct Case {
  std::string name;            // golden file stem: tests/golden/stablehlo_<name>.mlir
  Program program;
  std::vector<Array> inputs;   // valid inputs (in-range indices) for interpreter and XLA
};

inline Attrs dims(std::vector<int64_t> d) {
  Attrs a;
  a.dims = std::move(d);
  return a;
}
inline Attrs literal(std::vector<double> v) {
  Attrs a;
  a.literal = std::move(v);
  return a;
}

// Deterministic values in [lo, hi): a small LCG, the same on every machine.
inline std::vector<double> ramp(int64_t n, double lo, double hi, uint32_t seed = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<double>(s >> 8) / static_cast<double>(1u << 24);
  }
  return v;
}
inline Array random_array(const Type& t, double lo, double hi, uint32_t seed) {
  return Array::from_doubles(t, ramp(t.numel(), lo, hi, seed));
}

// Every elementwise primitive on f32, plus compare / select / convert.
inline Case elementwise_case() {
  Program p;
  Type t{DType::f32, {2, 3}};
  int x = p.add_input("x", t), y = p.add_input("y", t);
  int s = p.add_eqn(Op::add, {x, y}, {});
  int d = p.add_eqn(Op::subtract, {s, y}, {});
  int m = p.add_eqn(Op::multiply, {d, y}, {});
  int q = p.add_eqn(Op::divide, {m, s}, {});
  int mx = p.add_eqn(Op::maximum, {q, x}, {});
  int n = p.add_eqn(Op::negate, {mx}, {});
  int e = p.add_eqn(Op::exponential, {n}, {});
  int l = p.add_eqn(Op::log, {y}, {});
  int th = p.add_eqn(Op::tanh, {l}, {});
  int r = p.add_eqn(Op::rsqrt, {y}, {});
  int sq = p.add_eqn(Op::sqrt, {x}, {});
  Attrs lt;
  lt.cmp = Cmp::LT;
  int c = p.add_eqn(Op::compare, {x, y}, lt);
  int sel = p.add_eqn(Op::select, {c, th, r}, {});
  int ci = p.add_eqn_typed(Op::convert, {x}, {}, {DType::i32, t.shape});
  int cb = p.add_eqn_typed(Op::convert, {c}, {}, {DType::f32, t.shape});
  Attrs ge;
  ge.cmp = Cmp::GE;
  int three = p.add_eqn_typed(Op::constant, {}, literal({3}), {DType::i32, t.shape});
  int ic = p.add_eqn(Op::compare, {ci, three}, ge);
  p.add_output("exp", e);
  p.add_output("sqrt", sq);
  p.add_output("select", sel);
  p.add_output("as_i32", ci);
  p.add_output("lt_as_f32", cb);
  p.add_output("ge3", ic);
  return {"elementwise", p,
          {random_array(t, 0.5, 5.0, 1), random_array(t, 0.5, 5.0, 2)}};
}

// Layout, contraction and reduction primitives, iota, and constants of every
// text form: splat, nested list, large hex string, non-finite and -0.
inline Case shapes_case() {
  Program p;
  int a = p.add_input("a", {DType::f32, {2, 3, 4}});
  int b = p.add_input("b", {DType::f32, {2, 4, 5}});
  int v = p.add_input("v", {DType::f32, {5}});
  int bm = p.add_eqn(Op::dot_general, {a, b}, [] {
    Attrs d;
    d.lhs_batch = {0};
    d.rhs_batch = {0};
    d.lhs_contract = {2};
    d.rhs_contract = {1};
    return d;
  }());                                                                         // [2,3,5]
  int vb = p.add_eqn_typed(Op::broadcast_in_dim, {v}, dims({2}), {DType::f32, {2, 3, 5}});
  int sum = p.add_eqn(Op::add, {bm, vb}, {});
  int tr = p.add_eqn(Op::transpose, {sum}, dims({2, 0, 1}));                   // [5,2,3]
  int rs = p.add_eqn_typed(Op::reshape, {tr}, {}, {DType::f32, {10, 3}});
  int rsum = p.add_eqn(Op::reduce_sum, {rs}, dims({1}));                       // [10]
  int rmax = p.add_eqn(Op::reduce_max, {sum}, dims({0, 2}));                   // [3]
  Attrs ax;
  ax.axis = 1;
  int io = p.add_eqn_typed(Op::iota, {}, ax, {DType::f32, {3, 4}});
  int io_i = p.add_eqn_typed(Op::iota, {}, {}, {DType::i32, {4}});
  // Constants: splat, small list, special values, and one of 24 values (hex string).
  int k_list = p.add_eqn_typed(Op::constant, {}, literal({0.1, -2.5, 1e-45, 3.4028234663852886e38}),
                               {DType::f32, {4}});
  double inf = std::numeric_limits<double>::infinity();
  int k_special = p.add_eqn_typed(Op::constant, {}, literal({inf, -inf, -0.0, std::nan("")}), {DType::f32, {2, 2}});
  int k_big = p.add_eqn_typed(Op::constant, {}, literal(ramp(24, -1, 1, 7)), {DType::f32, {2, 3, 4}});
  int k_splat = p.add_eqn_typed(Op::constant, {}, literal({0.5}), {DType::f32, {3, 4}});
  int k_i32 = p.add_eqn_typed(Op::constant, {}, literal({-2147483648.0, 7, 0}), {DType::i32, {3}});
  int k_i1 = p.add_eqn_typed(Op::constant, {}, literal({1, 0, 1}), {DType::i1, {3}});
  int big = p.add_eqn(Op::add, {a, k_big}, {});
  int io2 = p.add_eqn(Op::multiply, {io, k_splat}, {});
  p.add_output("dot_bias", sum);
  p.add_output("row_sums", rsum);
  p.add_output("max_02", rmax);
  p.add_output("iota_half", io2);
  p.add_output("iota_i32", io_i);
  p.add_output("consts", k_list);
  p.add_output("special", k_special);
  p.add_output("a_plus", big);
  p.add_output("ints", k_i32);
  p.add_output("bools", k_i1);
  return {"shapes", p,
          {random_array({DType::f32, {2, 3, 4}}, -1, 1, 3), random_array({DType::f32, {2, 4, 5}}, -1, 1, 4),
           random_array({DType::f32, {5}}, -1, 1, 5)}};
}

// gather_rows / scatter_add_rows with indices of rank 2, 0 and 1, on a 2-D and a 1-D table.
inline Case rows_case() {
  Program p;
  int table = p.add_input("table", {DType::f32, {6, 4}});
  int idx = p.add_input("idx", {DType::i32, {2, 3}});
  int one = p.add_input("one", {DType::i32, {}});
  int vec = p.add_input("vec", {DType::f32, {6}});
  int ids = p.add_input("ids", {DType::i32, {5}});
  int g = p.add_eqn(Op::gather_rows, {table, idx}, {});                        // [2,3,4]
  int g1 = p.add_eqn(Op::gather_rows, {table, one}, {});                       // [4]
  int gv = p.add_eqn(Op::gather_rows, {vec, ids}, {});                         // [5]
  int zeros = p.add_eqn_typed(Op::constant, {}, literal({0}), {DType::f32, {6, 4}});
  int s = p.add_eqn(Op::scatter_add_rows, {zeros, idx, g}, {});               // [6,4]
  int sv = p.add_eqn(Op::scatter_add_rows, {vec, ids, gv}, {});               // [6]
  p.add_output("gathered", g);
  p.add_output("row", g1);
  p.add_output("gathered_1d", gv);
  p.add_output("scattered", s);
  p.add_output("scattered_1d", sv);
  return {"rows", p,
          {random_array({DType::f32, {6, 4}}, -1, 1, 6), Array::i32({2, 3}, {5, 0, 2, 2, 5, 1}),
           Array::i32({}, {3}), random_array({DType::f32, {6}}, -1, 1, 8), Array::i32({5}, {0, 0, 5, 3, 1})}};
}

// One SGD step on a linear model with donated parameters: the alias form.
inline Case sgd_step_case() {
  Program p;
  int w = p.add_input("w", {DType::f32, {3, 2}});
  int x = p.add_input("x", {DType::f32, {4, 3}});
  int lr = p.add_input("lr", {DType::f32, {}});
  Attrs mm;
  mm.lhs_contract = {1};
  mm.rhs_contract = {0};
  int y = p.add_eqn(Op::dot_general, {x, w}, mm);                              // [4,2]
  int sq = p.add_eqn(Op::multiply, {y, y}, {});
  int loss = p.add_eqn(Op::reduce_sum, {sq}, dims({0, 1}));
  int two = p.add_eqn_typed(Op::constant, {}, literal({2}), {DType::f32, {4, 2}});
  int dy = p.add_eqn(Op::multiply, {y, two}, {});
  Attrs tg;
  tg.lhs_contract = {0};
  tg.rhs_contract = {0};
  int gw = p.add_eqn(Op::dot_general, {x, dy}, tg);                            // [3,2]
  int lrb = p.add_eqn_typed(Op::broadcast_in_dim, {lr}, dims({}), {DType::f32, {3, 2}});
  int step = p.add_eqn(Op::multiply, {gw, lrb}, {});
  int w2 = p.add_eqn(Op::subtract, {w, step}, {});
  p.add_output("loss", loss);
  p.add_output("w.new", w2);
  p.aliases.push_back({1, 0});
  return {"sgd_step", p,
          {random_array({DType::f32, {3, 2}}, -1, 1, 9), random_array({DType::f32, {4, 3}}, -1, 1, 10),
           Array::scalar(0.05)}};
}

// f64 and i32 arithmetic (the gradient-check dtype and the token dtype).
inline Case f64_i32_case() {
  Program p;
  int x = p.add_input("x", {DType::f64, {3}});
  int k = p.add_input("k", {DType::i32, {3}});
  int e = p.add_eqn(Op::exponential, {x}, {});
  int c = p.add_eqn_typed(Op::constant, {}, literal({0.1, 1.0 / 3.0, -1e-300}), {DType::f64, {3}});
  int s = p.add_eqn(Op::add, {e, c}, {});
  int k2 = p.add_eqn(Op::multiply, {k, k}, {});
  int kn = p.add_eqn(Op::negate, {k2}, {});
  int km = p.add_eqn(Op::maximum, {kn, k}, {});
  int kmax = p.add_eqn(Op::reduce_max, {km}, dims({0}));
  int ksum = p.add_eqn(Op::reduce_sum, {k2}, dims({0}));
  int kf = p.add_eqn_typed(Op::convert, {k}, {}, {DType::f64, {3}});
  int xf = p.add_eqn_typed(Op::convert, {s}, {}, {DType::f32, {3}});
  p.add_output("exp_plus", s);
  p.add_output("kmax", kmax);
  p.add_output("ksum", ksum);
  p.add_output("k_as_f64", kf);
  p.add_output("as_f32", xf);
  return {"f64_i32", p, {Array::f64({3}, {0.25, -1.5, 2.0}), Array::i32({3}, {-4, 3, 9})}};
}

// bf16 (issue 11): f32 inputs converted to bf16, bf16 elementwise ops and
// constants (a splat, a list, and a hex string of more than 16), a bf16 x
// slice (with and without strides), pad and concatenate (three operands, and
// i32 ones), then rotate-half (the Llama model's) with its gradient, so that
// the VJPs (pad for slice, slices for concatenate) are exported and run too.
inline Case slices_case() {
  Tracer tr;
  Tensor x = tr.input("x", {DType::f32, {2, 3, 8}});
  Tensor k = tr.input("k", {DType::i32, {2, 5}});
  Tensor cs = tr.input("cos", {DType::f32, {3, 8}});
  Tensor sn = tr.input("sin", {DType::f32, {3, 8}});
  Tensor x1 = slice(x, {0, 0, 0}, {2, 3, 4});
  Tensor x2 = slice(x, {0, 0, 4}, {2, 3, 8});
  Tensor rot = x * cs + concatenate({-x2, x1}, -1) * sn;
  Tensor strided = slice(x, {1, 0, 1}, {2, 3, 8}, {1, 2, 3});             // [1,2,3]
  Tensor padded = pad(strided, {1, 0, 2}, {0, 3, 1});                     // [2,5,6]
  Tensor loss = sum(rot * rot) + sum(padded * padded);
  Tensor three = concatenate({x, x1, x2 * 2.0}, 2);                       // [2,3,16]
  Tensor ki = concatenate({k, slice(k, {0, 1}, {2, 3}), pad(k, {0, 0}, {0, 1})}, 1);  // [2,13]
  Program fwd = tr.finish({{"loss", loss}, {"padded", padded}, {"three", three}, {"ints", ki}});
  Program p = value_and_grad(fwd, {"x"});
  return {"slices", p,
          {random_array({DType::f32, {2, 3, 8}}, -2, 2, 31), Array::from_doubles({DType::i32, {2, 5}}, {1, -2, 3, 4, 5, 6, 7, -8, 9, 10}),
           random_array({DType::f32, {3, 8}}, -1, 1, 32), random_array({DType::f32, {3, 8}}, -1, 1, 33)}};
}

// bf16 -> f32 dot_general, a bf16 reduce_max, and f32 outputs (npy has no
// bfloat16 of its own, so what crosses to XLA stays f32).
inline Case bf16_case() {
  Program p;
  const Type xf{DType::f32, {4, 20}}, wf{DType::f32, {20, 3}};
  int x = p.add_input("x", xf), w = p.add_input("w", wf);
  int xb = p.add_eqn_typed(Op::convert, {x}, {}, {DType::bf16, xf.shape});
  int wb = p.add_eqn_typed(Op::convert, {w}, {}, {DType::bf16, wf.shape});
  int half = p.add_eqn_typed(Op::constant, {}, literal({0.5}), {DType::bf16, xf.shape});
  std::vector<double> row(20);
  for (int i = 0; i < 20; ++i) row[static_cast<size_t>(i)] = 0.1 * (i - 7);  // rounded to bf16 when added
  int rowc = p.add_eqn_typed(Op::constant, {}, literal(row), {DType::bf16, {20}});
  int rowb = p.add_eqn_typed(Op::broadcast_in_dim, {rowc}, dims({1}), {DType::bf16, xf.shape});
  int three = p.add_eqn_typed(Op::constant, {}, literal({1.0, -2.5, 3.0}), {DType::bf16, {3}});
  int a = p.add_eqn(Op::add, {xb, rowb}, {});
  int m = p.add_eqn(Op::multiply, {a, half}, {});
  int t = p.add_eqn(Op::tanh, {m}, {});
  Attrs gt;
  gt.cmp = Cmp::GT;
  int c = p.add_eqn(Op::compare, {t, half}, gt);
  int sel = p.add_eqn(Op::select, {c, half, t}, {});
  Attrs mm;
  mm.lhs_contract = {1};
  mm.rhs_contract = {0};
  int d = p.add_eqn(Op::dot_general, {sel, wb}, mm);  // bf16 x bf16 -> f32
  int mx = p.add_eqn(Op::reduce_max, {wb}, dims({0}));
  int mx3 = p.add_eqn(Op::multiply, {mx, three}, {});
  p.add_output("dot", d);
  p.add_output("tanh", p.add_eqn_typed(Op::convert, {sel}, {}, {DType::f32, xf.shape}));
  p.add_output("max", p.add_eqn_typed(Op::convert, {mx3}, {}, {DType::f32, {3}}));
  return {"bf16", p, {random_array(xf, -2, 2, 21), random_array(wf, -1, 1, 22)}};
}

// The seed's training step at a given size: causal LM loss, value_and_grad,
// AdamW appended (with_adamw): params, m, v, tokens, targets, 4 scalars ->
// loss, params', m', v', with the aliases. Inputs: initial parameters, moments
// after one made-up step, one batch, step-3 scalars.
// clip > 0: the step clips the global gradient norm to `clip` inside the
// program (optim::clip_grad_norm between value_and_grad and with_adamw).
// fused_attention: the loss program through fuse_attention first (the
// attention primitives, which the export writes out as primitives).
// chunk_elems: lm_loss_program's (logits of more elements in chunks of rows).
inline Case fused_step_case(const nn::LmConfig& c, const std::string& name, double clip = 0, bool fused_attention = false,
                            int64_t chunk_elems = int64_t{1} << 26) {
  std::vector<std::string> names;
  for (const auto& ps : nn::lm_parameters(c)) names.push_back(ps.name);
  Program loss = nn::lm_loss_program(c, DType::f32, false, chunk_elems);
  if (fused_attention) loss = fuse_attention(loss);
  Program grad = value_and_grad(loss, names);
  if (clip > 0) grad = optim::clip_grad_norm(grad, names);
  optim::AdamW o;
  Program fused = optim::with_adamw(grad, names, o);
  std::vector<Array> params = nn::init_parameters(c, 42);
  std::vector<Array> in;
  for (const Array& a : params) in.push_back(a);
  uint32_t seed = 100;
  for (const Array& a : params) in.push_back(random_array(a.type(), -1e-3, 1e-3, seed++));
  for (const Array& a : params) in.push_back(random_array(a.type(), 0, 1e-5, seed++));
  std::vector<int32_t> tok(static_cast<size_t>(c.batch * c.seq)), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(c.vocab));
    tgt[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(c.vocab));
  }
  in.push_back(Array::i32({c.batch, c.seq}, tok));
  in.push_back(Array::i32({c.batch, c.seq}, tgt));
  if (clip > 0) in.push_back(Array::scalar(static_cast<float>(clip)));
  optim::AdamWScalars s = optim::adamw_scalars(o, 3);
  for (float f : {s.lr, s.bc1, s.bc2, s.decay}) in.push_back(Array::scalar(f));
  if (in.size() != fused.inputs.size()) throw Error("fused_step_case: input count differs from the program's");
  return {name, fused, in};
}

// The KV cache's programs of `capstep sample` (nn::lm_prefill_program over
// c.seq tokens, lm_decode_program over a cache of c.context rows), with
// initial parameters, fixed tokens, random caches and the token at `pos`.
inline Case kv_cache_case(const nn::LmConfig& c, bool decode, const std::string& name, int32_t pos = 0) {
  Case k;
  k.name = name;
  k.program = decode ? nn::lm_decode_program(c, c.context) : nn::lm_prefill_program(c, c.seq);
  std::vector<Array> params = nn::init_parameters(c, 42);
  for (Array& a : params) k.inputs.push_back(std::move(a));
  uint32_t seed = 300;
  for (size_t i = k.inputs.size(); i < k.program.inputs.size(); ++i) {
    const std::string& in = k.program.inputs[i].name;
    const Type t = k.program.input_type(static_cast<int>(i));
    if (in == "pos") {
      k.inputs.push_back(Array::i32({1}, {pos}));
    } else if (t.dtype == DType::i32) {  // "tokens" or "token"
      std::vector<int32_t> tok(static_cast<size_t>(t.numel()));
      for (size_t j = 0; j < tok.size(); ++j) tok[j] = static_cast<int32_t>((j * 7 + 3) % static_cast<size_t>(c.vocab));
      k.inputs.push_back(Array::i32(t.shape, tok));
    } else {  // a layer's k_cache or v_cache
      k.inputs.push_back(random_array(t, -1, 1, seed++));
    }
  }
  return k;
}

inline nn::LmConfig tiny_lm() {
  nn::LmConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.d_ff = 16;
  c.context = 6;
  c.batch = 2;
  c.seq = 5;
  return c;
}

}  // namespace capstep::hlo_test
