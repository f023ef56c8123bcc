// AdamW on the host: the per-element kernel (also run by the interpreter's
// fused with_adamw groups, fused.cpp), adamw_update over the host's threads,
// and HostAdamW, which starts each parameter's update in the idle moments of
// a host backend's run (capstep/host_adamw.h). Part of the host backend: it uses its threads and its
// run events; optim/ holds only the settings and the scalars.
#include <algorithm>
#include <cmath>

#include "backend/host/adamw_kernel.h"
#include "ir/bf16.h"
#include "backend/host/parallel.h"
#include "backend/host/step.h"
#include "capstep/host_adamw.h"
#include "backend/host/interpreter.h"
#include "capstep/optim.h"

namespace capstep::host {

using optim::AdamW;
using optim::AdamWScalars;

namespace {
// One element, in the operation order of the program with_adamw appends.
inline void adamw_element(const AdamWConstants& k, const AdamWScalars& s, float p, float g, float m, float v,
                          float& p_out, float& m_out, float& v_out) {
  const float mi = k.b1 * m + k.c1 * g;
  const float vi = k.b2 * v + k.c2 * (g * g);
  m_out = mi;
  v_out = vi;
  p_out = p * s.decay - s.lr * ((mi * s.bc1) / (std::sqrt(vi * s.bc2) + k.eps));
}

inline float rounded_to_bf16(float g) { return bf16::to_float(bf16::from_float(g)); }
}  // namespace

// One loop for each round_g, so that neither tests it per element.
CAPSTEP_HOST_CLONES void adamw_range(const AdamWConstants& k, const AdamWScalars& s, float* __restrict p,
                                     const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                                     bool round_g) {
  if (round_g)
    for (int64_t i = 0; i < n; ++i) adamw_element(k, s, p[i], rounded_to_bf16(g[i]), m[i], v[i], p[i], m[i], v[i]);
  else
    for (int64_t i = 0; i < n; ++i) adamw_element(k, s, p[i], g[i], m[i], v[i], p[i], m[i], v[i]);
}

CAPSTEP_HOST_CLONES void adamw_range_into(const AdamWConstants& k, const AdamWScalars& s, const float* __restrict p,
                                          const float* __restrict g, const float* __restrict m,
                                          const float* __restrict v, float* __restrict p_out,
                                          float* __restrict m_out, float* __restrict v_out, int64_t n,
                                          bool round_g) {
  if (round_g)
    for (int64_t i = 0; i < n; ++i)
      adamw_element(k, s, p[i], rounded_to_bf16(g[i]), m[i], v[i], p_out[i], m_out[i], v_out[i]);
  else
    for (int64_t i = 0; i < n; ++i) adamw_element(k, s, p[i], g[i], m[i], v[i], p_out[i], m_out[i], v_out[i]);
}

// The same constants, in the same precision, as with_adamw bakes into its program.
AdamWConstants adamw_constants(const AdamW& o) {
  return {static_cast<float>(o.beta1), static_cast<float>(1.0 - o.beta1), static_cast<float>(o.beta2),
          static_cast<float>(1.0 - o.beta2), static_cast<float>(o.eps)};
}

// Each part at least 4096 elements: the interpreter's with_adamw groups
// (fused.cpp) update one parameter at a time, and below that size a second
// thread's start costs about what it saves. The update is elementwise, so the
// parts do not change a result.
int adamw_parts(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(host_threads(), n / 4096)));
}

}  // namespace capstep::host

namespace capstep::optim {

using host::adamw_constants;
using host::adamw_parts;
using host::adamw_range;
using host::AdamWConstants;

namespace {

void check_types(const Array& p, const Array& g, const Array& m, const Array& v) {
  const Type& t = p.type();
  if (t.dtype != DType::f32) throw Error("adamw_update: parameters must be f32, got " + t.str());
  if (g.type() != t || m.type() != t || v.type() != t)
    throw Error("adamw_update: parameter " + t.str() + ", gradient " + g.type().str() + ", moments " +
                m.type().str() + " and " + v.type().str() + " must have one type");
}

}  // namespace

void adamw_update(const AdamW& o, const AdamWScalars& s, float* p, const float* g, float* m, float* v, int64_t n) {
  const AdamWConstants k = adamw_constants(o);
  const int parts = adamw_parts(n);
  if (parts == 1) return adamw_range(k, s, p, g, m, v, n);
  host::parallel_parts(parts, [&](int i) {
    int64_t b = 0, e = 0;
    host::part_range(n, parts, i, 16, b, e);
    adamw_range(k, s, p + b, g + b, m + b, v + b, e - b);
  });
}

void adamw_update(const AdamW& o, const AdamWScalars& s, Array& p, const Array& g, Array& m, Array& v) {
  check_types(p, g, m, v);
  adamw_update(o, s, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel());
}

void adamw_update(const AdamW& o, const AdamWScalars& s, std::vector<Array>& p, const Array* g, std::vector<Array>& m,
                  std::vector<Array>& v) {
  const size_t n = p.size();
  if (m.size() != n || v.size() != n)
    throw Error("adamw_update: " + std::to_string(n) + " parameters but " + std::to_string(m.size()) + " first and " +
                std::to_string(v.size()) + " second moments");
  int64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    check_types(p[j], g[j], m[j], v[j]);
    total += p[j].numel();
  }
  const AdamWConstants k = adamw_constants(o);
  // The parameters' elements as one run [0, total): part i updates its range
  // of it, tensor by tensor.
  const int parts = adamw_parts(total);
  auto part_fn = [&](int i) {
    int64_t b = 0, e = 0;
    host::part_range(total, parts, i, 16, b, e);
    int64_t base = 0;
    for (size_t j = 0; j < n && base < e; ++j) {
      const int64_t len = p[j].numel(), lo = std::max(b, base), hi = std::min(e, base + len);
      if (lo < hi) {
        const int64_t off = lo - base;
        adamw_range(k, s, p[j].data<float>() + off, g[j].data<float>() + off, m[j].data<float>() + off,
                    v[j].data<float>() + off, hi - lo);
      }
      base += len;
    }
  };
  if (parts == 1) return part_fn(0);
  host::parallel_parts(parts, part_fn);
}

}  // namespace capstep::optim

namespace capstep::host {

HostAdamW::HostAdamW(const AdamW& o) : o_(o) { o_.validate(); }

void HostAdamW::run_chunk(void* self, int i) {
  const HostAdamW& h = *static_cast<const HostAdamW*>(self);
  const Chunk& c = h.chunks_[static_cast<size_t>(i)];
  adamw_range(adamw_constants(h.o_), h.s_, c.p, c.g, c.m, c.v, c.n);
}

void HostAdamW::ready(int j) {
  if (gate_ == Gate::shut) return;
  if (gate_ == Gate::waiting) {
    waiting_.push_back(j);  // within its capacity: no allocation
    return;
  }
  const size_t k = static_cast<size_t>(j);
  Array& pa = *b_->host_input(j);
  float* p = pa.data<float>();
  float* m = (*m_)[k].data<float>();
  float* v = (*v_)[k].data<float>();
  const float* g = b_->host_output(first_grad_ + j)->data<float>();
  const int64_t n = pa.numel();
  for (int64_t b = 0; b < n; b += kChunk)
    chunks_[static_cast<size_t>(count_++)] = {p + b, m + b, v + b, g + b, std::min(kChunk, n - b)};
  background_->release(count_);
}

bool HostAdamW::step(Backend& b, int first_grad, const AdamWScalars& s, std::vector<Array>& m, std::vector<Array>& v,
                     int finite_output) {
  const InterpreterOptions& io = interpreter_options(b);  // Error on another backend
  const Program& prog = b.program();
  const size_t n = m.size();
  if (finite_output >= 0) {
    if (static_cast<size_t>(finite_output) >= prog.outputs.size() ||
        prog.output_type(finite_output) != Type{DType::f32, {}} ||
        (finite_output >= first_grad && static_cast<size_t>(finite_output) < static_cast<size_t>(first_grad) + n))
      throw Error("HostAdamW: finite_output " + std::to_string(finite_output) + " must be a scalar f32 output of program \"" +
                  prog.name + "\" other than the gradients");
  }
  if (v.size() != n)
    throw Error("HostAdamW: " + std::to_string(n) + " first moments but " + std::to_string(v.size()) +
                " second moments");
  if (first_grad < 0 || static_cast<size_t>(first_grad) + n > prog.outputs.size() || n > prog.inputs.size())
    throw Error("HostAdamW: " + std::to_string(n) + " parameters, their gradients from output " +
                std::to_string(first_grad) + ", but program \"" + prog.name + "\" has " +
                std::to_string(prog.inputs.size()) + " inputs and " + std::to_string(prog.outputs.size()) + " outputs");
  size_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const int i = static_cast<int>(j);
    const Type& pt = prog.input_type(i);
    for (const Alias& a : prog.aliases)
      if (a.input == i)
        throw Error("HostAdamW: parameter \"" + prog.inputs[j].name + "\" is donated to output \"" +
                    prog.outputs[static_cast<size_t>(a.output)].name + "\", which the run writes while the update does");
    if (pt.dtype != DType::f32) throw Error("HostAdamW: parameters must be f32, got " + pt.str());
    if (m[j].type() != pt || v[j].type() != pt)
      throw Error("HostAdamW: parameter \"" + prog.inputs[j].name + "\" " + pt.str() + ", moments " +
                  m[j].type().str() + " and " + v[j].type().str() + " must have one type");
    const Type& gt = prog.output_type(first_grad + i);
    if (gt != pt)
      throw Error("HostAdamW: parameter \"" + prog.inputs[j].name + "\" is " + pt.str() + ", its gradient (output \"" +
                  prog.outputs[static_cast<size_t>(first_grad) + j].name + "\") " + gt.str());
    total += static_cast<size_t>((pt.numel() + kChunk - 1) / kChunk);
  }
  if (chunks_.size() < total) chunks_.resize(total);
  grad_done_.assign(n, 0);
  param_done_.assign(n, 0);
  waiting_.clear();
  waiting_.reserve(n);
  finite_output_ = finite_output;
  gate_ = finite_output >= 0 ? Gate::waiting : Gate::open;
  b_ = &b, m_ = &m, v_ = &v;
  first_grad_ = first_grad;
  s_ = s;
  count_ = early_ = 0;
  // the run's subnormal mode for the updates too, on whichever thread: the
  // same bits as the with_adamw program on the same interpreter options
  const SubnormalMode mode(io.flush_subnormals);
  Background bg(&run_chunk, this);
  background_ = &bg;
  RunEvents ev;
  ev.output_ready = [this, n](int out) {
    if (out == finite_output_) {
      gate_ = std::isfinite(b_->host_output(out)->data<float>()[0]) ? Gate::open : Gate::shut;
      if (gate_ == Gate::open)
        for (int j : waiting_) ready(j);
      return;
    }
    const int j = out - first_grad_;
    if (j < 0 || static_cast<size_t>(j) >= n) return;
    grad_done_[static_cast<size_t>(j)] = 1;
    if (param_done_[static_cast<size_t>(j)]) ready(j);
  };
  ev.input_released = [this, n](int in) {
    if (static_cast<size_t>(in) >= n) return;
    param_done_[static_cast<size_t>(in)] = 1;
    if (grad_done_[static_cast<size_t>(in)]) ready(in);
  };
  b.run(ev);
  background_ = nullptr;
  if (gate_ == Gate::shut) {
    bg.finish();
    return false;
  }
  if (static_cast<size_t>(count_) != total)
    throw Error("HostAdamW: internal: the run released " + std::to_string(count_) + " of " + std::to_string(total) +
                " chunks");
  early_ = bg.done_so_far();
  bg.finish();
  return true;
}

}  // namespace capstep::host
