// The adamw primitive's pass (ir.h): expand_adamw writes each
// parameter's update out as the plain equations it stands for, in the
// operation order of the host AdamW kernel (adamw_update) and with the same
// constants, so that StableHLO export, the GPU planner and the host's
// reference path compute what the host kernel computes, value for value.
#include <cstring>
#include <map>

#include "capstep/transforms.h"
#include "trace/internal.h"

namespace capstep {

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// One parameter's update while it is written out: its operands, the results
// made so far, and the record the caller gets.
struct Update {
  std::vector<int> inputs;  // the adamw equations' operands (value ids of p)
  std::vector<double> literal;
  Tensor m, v, p;           // m', v', p' once made
  ExpandedAdamW rec;
};

}  // namespace

bool has_adamw(const Program& p) {
  for (const Eqn& e : p.eqns)
    if (e.op == Op::adamw) return true;
  return false;
}

Program expand_adamw(const Program& p, std::vector<ExpandedAdamW>* updates) {
  verify(p);
  if (updates) updates->clear();
  if (!has_adamw(p)) return p;
  std::vector<Update> ups;
  std::map<std::vector<int>, std::vector<size_t>> by_inputs;  // operands -> updates with them
  Program out = trace_detail::retrace(p, [&](Tracer& tr, const Eqn& e, const std::vector<Tensor>& val) -> Tensor {
    if (e.op != Op::adamw) return {};  // copied as it is
    const Program& q = tr.program();
    // The update of these operands and constants: the one met before, or a new one.
    std::vector<size_t>& same = by_inputs[e.inputs];
    Update* u = nullptr;
    for (size_t k : same) {
      Update& c = ups[k];
      bool eq = c.literal.size() == e.attrs.literal.size();
      for (size_t i = 0; eq && i < c.literal.size(); ++i) eq = same_bits(c.literal[i], e.attrs.literal[i]);
      if (eq) u = &c;
    }
    if (!u) {
      same.push_back(ups.size());
      ups.push_back({e.inputs, e.attrs.literal, {}, {}, {}, {}});
      u = &ups.back();
      ExpandedAdamW& r = u->rec;
      auto id = [&](size_t i) { return val[static_cast<size_t>(e.inputs[i])].id(); };
      r.p = id(0), r.g = id(1), r.m = id(2), r.v = id(3), r.lr = id(4), r.bc1 = id(5), r.bc2 = id(6), r.decay = id(7);
    }
    const double beta1 = u->literal[0], beta2 = u->literal[1], eps = u->literal[2];
    auto x = [&](size_t i) { return val[static_cast<size_t>(u->inputs[i])]; };
    const int made_from = q.num_values();
    // The update, in the operation order of the host AdamW kernel
    // (adamw_kernel.h), so both round alike; each result made once.
    const Tensor &P = x(0), &gr = x(1), &M = x(2), &V = x(3), &lr = x(4), &bc1 = x(5), &bc2 = x(6), &decay = x(7);
    if (!u->m.valid() && e.attrs.axis != 2) u->m = M * beta1 + gr * (1.0 - beta1);
    if (!u->v.valid() && e.attrs.axis != 1) u->v = V * beta2 + (gr * gr) * (1.0 - beta2);
    if (!u->p.valid() && e.attrs.axis == 0) {
      const Tensor& m = u->m;
      const Tensor& v = u->v;
      Tensor upd = (m * bc1) / (sqrt(v * bc2) + eps);
      u->p = P * decay - lr * upd;
    }
    ExpandedAdamW& r = u->rec;
    for (int w = made_from; w < q.num_values(); ++w) r.values.push_back(w);
    for (size_t k = q.eqns.size(); k-- > 0 && q.eqns[k].out >= made_from;) {
      const Eqn& c = q.eqns[k];
      if (c.op != Op::constant || c.attrs.literal.size() != 1) continue;
      const double l = c.attrs.literal[0];  // stored rounded to f32
      auto is = [&](double x) { return same_bits(l, static_cast<double>(static_cast<float>(x))); };
      int* slot = is(beta1) ? &r.b1 : is(1.0 - beta1) ? &r.c1 : is(beta2) ? &r.b2 : is(1.0 - beta2) ? &r.c2
                  : is(eps) ? &r.eps : nullptr;
      if (slot && *slot < 0) *slot = c.out;
    }
    r.m_out = u->m.valid() ? u->m.id() : -1;
    r.v_out = u->v.valid() ? u->v.id() : -1;
    r.p_out = u->p.valid() ? u->p.id() : -1;
    return e.attrs.axis == 0 ? u->p : e.attrs.axis == 1 ? u->m : u->v;
  });
  if (updates)
    for (Update& u : ups) updates->push_back(std::move(u.rec));
  return out;
}

}  // namespace capstep
