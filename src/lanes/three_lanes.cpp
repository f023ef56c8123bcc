// The three lanes. Each starts from the same initial parameters (one seed) and
// sees the same batches; warm-up steps run on a throwaway copy of that start.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/host/gemm.h"
#include "backend/host/loop_jit.h"
#include "backend/host/parallel.h"
#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "capstep/cuda.h"
#include "capstep/trace.h"
#include "capstep/data.h"
#include "capstep/interpreter.h"
#include "capstep/lanes.h"

namespace capstep::lanes {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What every lane starts from: parameters, zero moments, the batch stream.
struct Start {
  std::vector<std::string> names;
  std::vector<Array> params;
  data::BatchStream batches;
};

Start make_start(const Options& o) {
  // The seed's char tokenizer; a text it would mostly replace by '~' is
  // refused as in `capstep train`.
  const data::Tokenizer chars;
  data::TokenIds ids = o.text_path.empty() ? chars.encode(data::builtin_corpus())
                                           : data::read_text_tokens(o.text_path, chars, /*allow_unknown=*/false);
  Start s{{}, nn::init_parameters(o.model, o.seed), data::BatchStream(std::move(ids), o.seed, o.model.batch, o.model.seq)};
  for (const nn::ParamSpec& p : nn::lm_parameters(o.model)) s.names.push_back(p.name);
  return s;
}

std::vector<Array> zeros_like(const std::vector<Array>& v) {
  std::vector<Array> z;
  for (const Array& a : v) z.emplace_back(a.type());
  return z;
}

// Every lane: `warmup` untimed steps, then `steps` timed and recorded ones,
// each phase from the same start. start() resets the lane's state to it;
// step(k) runs step k (batch k, AdamW step k+1) and returns its loss.
template <class StartFn, class StepFn>
void run_phases(const Options& o, Lane& lane, StartFn&& start, StepFn&& step) {
  auto phase = [&](int steps, bool record) {
    start();
    for (int k = 0; k < steps; ++k) {
      auto t0 = Clock::now();
      const double loss = step(k);
      const double ms = ms_since(t0);
      if (record) {
        lane.losses.push_back(loss);
        lane.step_ms.push_back(ms);
      }
    }
  };
  phase(o.warmup, false);
  // Room for every figure first, so that the timed steps allocate nothing.
  lane.losses.reserve(static_cast<size_t>(o.steps));
  lane.step_ms.reserve(static_cast<size_t>(o.steps));
  // The process's CPU time (every thread: the host pool's workers, BLAS's,
  // a GPU runtime's) over the timed steps only, so that start-up cannot
  // blur it the way a difference of two whole runs does.
  auto cpu_s = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const double c0 = cpu_s();
  phase(o.steps, true);
  if (o.steps > 0) lane.cpu_ms_per_step = 1e3 * (cpu_s() - c0) / o.steps;
  lane.ran = true;
}

// Lanes 1 and 2 share the loop: train(p, m, v, tokens, targets, outs, sc)
// computes the loss and gradients of (params, batch) into outs and updates
// p, m and v with AdamW on the host.
template <class Train>
void host_adamw_lane(const Options& o, const Start& s, Lane& lane, Train&& train) {
  Array tokens({DType::i32, {o.model.batch, o.model.seq}}), targets = tokens;
  std::vector<Array> outs;  // loss, grads; reused
  std::vector<Array> p, m, v;
  run_phases(
      o, lane,
      [&] {
        p = s.params;
        m = zeros_like(p);
        v = zeros_like(p);
      },
      [&](int k) {
        s.batches.fill(static_cast<uint64_t>(k), tokens, targets);
        train(p, m, v, tokens, targets, outs, optim::adamw_scalars(o.adamw, k + 1));
        return outs[0].get(0);
      });
}

// [1]: the gradient program in the interpreter; each parameter's AdamW update
// starts on the idle host threads as soon as the run has its gradient
// (optim::HostAdamW: the same bits as adamw_update after the run).
void lane_host(const Options& o, const Start& s, const Program& grad_prog, Lane& lane) {
  host::Interpreter interp(grad_prog, o.backend.host);
  optim::HostAdamW adamw(o.adamw);
  std::vector<const Array*> ins(grad_prog.inputs.size());
  host_adamw_lane(o, s, lane,
                  [&](std::vector<Array>& p, std::vector<Array>& m, std::vector<Array>& v, Array& tokens,
                      Array& targets, std::vector<Array>& outs, const optim::AdamWScalars& sc) {
                    for (size_t j = 0; j < p.size(); ++j) ins[j] = &p[j];
                    ins[p.size()] = &tokens;
                    ins[p.size() + 1] = &targets;
                    adamw.step(interp, ins, outs, 1, sc, p, m, v);  // gradients after the loss
                  });
}

// [1f]: the with_adamw program (gradients and AdamW in one Program) in the
// interpreter. Parameters and both moments are inputs and outputs of one set
// of Arrays: each output is also its input's Array, and the interpreter
// updates them in place (Interpreter::outputs_in_place: all 60 of the seed's
// with fusion, the default; without (backend.host.fuse off) the 20 parameters are
// computed aside and copied in at the end), so the state is held once. Only
// the batch, four scalars and the loss go in or out, as in lane 3 on the GPU.
void lane_host_fused(const Options& o, const Start& s, const Program& fused, Lane& lane) {
  host::Interpreter interp(fused, o.backend.host);
  const size_t n = s.params.size();
  std::vector<Array> state(fused.outputs.size());  // one Array per output: the loss, then the state
  std::vector<const Array*> ins(fused.inputs.size(), nullptr);
  std::vector<int> state_out(3 * n);  // output index of input j (j < 3n: parameters, m, v)
  for (size_t j = 0; j < 3 * n; ++j) {
    const int k = fused.output_index(optim::updated_name(fused.inputs[j].name));
    if (k < 0) throw Error("with_adamw program: no output for input \"" + fused.inputs[j].name + "\"");
    state_out[j] = k;
    ins[j] = &state[static_cast<size_t>(k)];
  }
  Array tokens({DType::i32, {o.model.batch, o.model.seq}}), targets = tokens;
  std::vector<Array> scalars(4, Array({DType::f32, {}}));
  ins[static_cast<size_t>(fused.input_index("tokens"))] = &tokens;
  ins[static_cast<size_t>(fused.input_index("targets"))] = &targets;
  for (int i = 0; i < 4; ++i) ins[static_cast<size_t>(fused.input_index(optim::kScalarNames[i]))] = &scalars[static_cast<size_t>(i)];
  const size_t loss_out = static_cast<size_t>(fused.output_index("loss"));
  run_phases(
      o, lane,
      [&] {
        for (size_t j = 0; j < n; ++j) {
          state[static_cast<size_t>(state_out[j])] = s.params[j];
          state[static_cast<size_t>(state_out[n + j])] = Array(s.params[j].type());
          state[static_cast<size_t>(state_out[2 * n + j])] = Array(s.params[j].type());
        }
      },
      [&](int k) {
        s.batches.fill(static_cast<uint64_t>(k), tokens, targets);
        const optim::AdamWScalars sc = optim::adamw_scalars(o.adamw, k + 1);
        const float vals[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
        for (int i = 0; i < 4; ++i) scalars[static_cast<size_t>(i)].data<float>()[0] = vals[i];
        interp.run(ins, state);
        return state[loss_out].get(0);
      });
}

// The GPU lanes' executable options: the backend switches, TF32 as asked, a
// CUDA graph, one replica.
cuda::Options gpu_options(const Options& o) {
  cuda::Options c = o.backend.cuda;
  c.tf32 = o.tf32;
  c.cuda_graph = true;
  c.nccl = nullptr;
  return c;
}

void lane_gpu_host_adamw(const Options& o, const Start& s, const Program& grad_prog, Lane& lane) {
  cuda::Executable exe(grad_prog, gpu_options(o));
  lane.device_bytes = exe.device_bytes();
  lane.kernels = exe.describe_launches();
  std::vector<Array> ins(grad_prog.inputs.size());
  host_adamw_lane(o, s, lane,
                  [&](std::vector<Array>& p, std::vector<Array>& m, std::vector<Array>& v, Array& tokens,
                      Array& targets, std::vector<Array>& outs, const optim::AdamWScalars& sc) {
                    // Every parameter goes up, every gradient comes down: that is this lane.
                    for (size_t j = 0; j < p.size(); ++j) ins[j] = p[j];
                    ins[p.size()] = tokens;
                    ins[p.size() + 1] = targets;
                    outs = exe.run(ins);
                    optim::adamw_update(o.adamw, sc, p, outs.data() + 1, m, v);  // gradients after the loss
                  });
}

void lane_gpu_fused(const Options& o, const Start& s, const Program& fused, Lane& lane) {
  cuda::Executable exe(fused, gpu_options(o));
  lane.device_bytes = exe.device_bytes();
  lane.kernels = exe.describe_launches();
  const int n = static_cast<int>(s.params.size());
  const int tok_in = fused.input_index("tokens"), tgt_in = fused.input_index("targets");
  int sc_in[4];
  for (int i = 0; i < 4; ++i) sc_in[i] = fused.input_index(optim::kScalarNames[i]);
  const int loss_out = fused.output_index("loss");
  Array tokens({DType::i32, {o.model.batch, o.model.seq}}), targets = tokens, loss({DType::f32, {}});
  Array scalar({DType::f32, {}});
  const std::vector<Array> z = zeros_like(s.params);
  run_phases(
      o, lane,
      [&] {
        // Parameters and both moments go up once; from here on they live on the device.
        for (int j = 0; j < n; ++j) {
          exe.upload(j, s.params[static_cast<size_t>(j)]);
          exe.upload(n + j, z[static_cast<size_t>(j)]);
          exe.upload(2 * n + j, z[static_cast<size_t>(j)]);
        }
      },
      [&](int k) {
        s.batches.fill(static_cast<uint64_t>(k), tokens, targets);
        exe.upload(tok_in, tokens);
        exe.upload(tgt_in, targets);
        const optim::AdamWScalars sc = optim::adamw_scalars(o.adamw, k + 1);
        const float vals[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
        for (int i = 0; i < 4; ++i) {
          scalar.data<float>()[0] = vals[i];
          exe.upload(sc_in[i], scalar);
        }
        exe.step();
        exe.download_output(loss_out, loss);
        return loss.get(0);
      });
}

// [4]: the with_adamw program through a PJRT plugin (XLA compiles its
// StableHLO), over capstep/backend.h. Parameters and both moments go into the
// plugin's buffers once; every run donates them (tf.aliasing_output), so the
// updated state is written where it was and stays there. Only the batch, four
// scalars and the loss cross, as in [3].
void lane_pjrt(const Options& o, const Start& s, const Program& fused, Lane& lane) {
  std::unique_ptr<Backend> b = make_backend(BackendKind::pjrt, fused, o.backend);
  const int n = static_cast<int>(s.params.size());
  const int tok_in = fused.input_index("tokens"), tgt_in = fused.input_index("targets");
  int sc_in[4];
  for (int i = 0; i < 4; ++i) sc_in[i] = fused.input_index(optim::kScalarNames[i]);
  const int loss_out = fused.output_index("loss");
  Array tokens({DType::i32, {o.model.batch, o.model.seq}}), targets = tokens, loss({DType::f32, {}});
  std::vector<Array> scalars(4, Array({DType::f32, {}}));
  const std::vector<Array> z = zeros_like(s.params);
  run_phases(
      o, lane,
      [&] {
        for (int j = 0; j < n; ++j) {
          b->set_input(j, s.params[static_cast<size_t>(j)]);
          b->set_input(n + j, z[static_cast<size_t>(j)]);
          b->set_input(2 * n + j, z[static_cast<size_t>(j)]);
        }
      },
      [&](int k) {
        s.batches.fill(static_cast<uint64_t>(k), tokens, targets);
        b->set_input(tok_in, tokens);
        b->set_input(tgt_in, targets);
        const optim::AdamWScalars sc = optim::adamw_scalars(o.adamw, k + 1);
        const float vals[4] = {sc.lr, sc.bc1, sc.bc2, sc.decay};
        for (int i = 0; i < 4; ++i) {
          scalars[static_cast<size_t>(i)].data<float>()[0] = vals[i];
          b->set_input(sc_in[i], scalars[static_cast<size_t>(i)]);
        }
        b->run();
        b->read_output(loss_out, loss);
        return loss.get(0);
      });
  const BackendInfo info = b->describe();
  lane.device_bytes = info.bytes;
  lane.kernels = info.device + "; " + info.plan;
}

void finish(Lane& lane, const Lane& host) {
  lane.median_ms = median(lane.step_ms);
  if (&lane == &host || !host.ran) return;
  for (size_t k = 0; k < lane.losses.size() && k < host.losses.size(); ++k)
    lane.max_rel_vs_host = std::max(lane.max_rel_vs_host,
                                    std::fabs(lane.losses[k] - host.losses[k]) / std::fabs(host.losses[k]));
}

}  // namespace

void Options::validate() const {
  model.validate();
  adamw.validate();
  if (steps < 1 || steps > 1000000) throw Error("steps must be in [1, 1000000], got " + std::to_string(steps));
  if (warmup < 0 || warmup > 1000) throw Error("warm-up must be in [0, 1000], got " + std::to_string(warmup));
  if (!only.empty() && only != "1" && only != "1f" && only != "2" && only != "3" && only != "4")
    throw Error("the lane to run alone must be 1, 1f, 2, 3 or 4, got \"" + only + "\"");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

Report run(const Options& o) {
  o.validate();
  if (o.backend.host_threads != 0) host::set_host_threads(o.backend.host_threads);
  Report r;
  r.model_line = o.model.describe() + (o.fused_attention ? " Fused attention (the attention primitives)." : "");
  r.tf32 = o.tf32;
  r.precision = optim::precision_name(o.precision);
  r.steps = o.steps;
  r.warmup = o.warmup;
  r.size = o.size;
  r.tokens_per_step = o.model.batch * o.model.seq;
  r.lanes.resize(5);
  r.lanes[0].label = "[1] host";
  r.lanes[1].label = "[2] GPU, AdamW on the host";
  r.lanes[2].label = "[3] GPU, AdamW in the program";
  r.lanes[3].label = "[1f] host, AdamW in the program";
  r.lanes[4].label = "[4] XLA (PJRT), AdamW in the program, donated buffers";
  const Start s = make_start(o);
  const Program traced = nn::lm_loss_program(o.model);
  const Program loss = optim::with_precision(o.fused_attention ? fuse_attention(traced) : traced, o.precision);
  const Program grad = value_and_grad(loss, s.names);

  auto selected = [&](const char* tag, Lane& l) {
    if (o.only.empty() || o.only == tag) return true;
    l.skipped = "not selected (only lane " + o.only + ")";
    return false;
  };
  // Whether the host threads share a cache now, which on a VM decides what
  // two threads gain (parallel.h).
  r.host_round_trip_ns = host::threads_round_trip_ns();
  if (selected("1", r.lanes[0])) lane_host(o, s, grad, r.lanes[0]);
  r.gemm = host::gemm_info().line;
  r.host_threads = host::host_threads();
  r.host_threads_line = host::host_threads_line();
  r.host_loops = host::host_loops_line(o.backend.host);
  const Program with_adamw = optim::with_adamw(grad, s.names, o.adamw);
  if (selected("1f", r.lanes[3])) lane_host_fused(o, s, with_adamw, r.lanes[3]);

  std::string why;
  if (!cuda::available(&why)) {
    r.device = why;
    r.lanes[1].skipped = r.lanes[2].skipped = why;
  } else {
    r.device = cuda::device_description();
    for (int i : {1, 2}) {
      if (!selected(i == 1 ? "2" : "3", r.lanes[static_cast<size_t>(i)])) continue;
      try {
        if (i == 1) lane_gpu_host_adamw(o, s, grad, r.lanes[1]);
        else lane_gpu_fused(o, s, with_adamw, r.lanes[2]);
      } catch (const Error& e) {
        r.lanes[static_cast<size_t>(i)].skipped = std::string("failed: ") + e.what();
      }
    }
  }
  if (selected("4", r.lanes[4])) {
    std::string no_pjrt;
    if (o.backend.pjrt.plugin.empty()) {
      r.lanes[4].skipped = "no PJRT plugin (CAPSTEP_PJRT_PLUGIN; scripts/pjrt-plugin downloads a CPU plugin)";
    } else if (!backend_available(BackendKind::pjrt, o.backend, &no_pjrt)) {
      r.lanes[4].skipped = no_pjrt;
    } else {
      try {
        lane_pjrt(o, s, with_adamw, r.lanes[4]);
      } catch (const Error& e) {
        r.lanes[4].skipped = std::string("failed: ") + e.what();
      }
    }
  }
  for (Lane& l : r.lanes)
    if (l.ran) finish(l, r.lanes[0]);
  return r;
}

// The lanes in the order they are printed: [1], [1f], [2], [3], [4].
std::vector<const Lane*> print_order(const Report& r) {
  std::vector<const Lane*> v;
  for (size_t i : {size_t{0}, size_t{3}, size_t{1}, size_t{2}, size_t{4}})
    if (i < r.lanes.size()) v.push_back(&r.lanes[i]);
  return v;
}

namespace {
// "; threads' cache-line round trip 95 ns" for the host: line; nothing
// where it was not measured (one thread, or the two parts did not meet).
std::string round_trip_words(double ns) {
  if (ns <= 0) return "";
  char b[96];
  std::snprintf(b, sizeof b, "; threads' cache-line round trip %.0f ns", ns);
  return b;
}
}  // namespace

void print(const Report& r, std::ostream& out) {
  char buf[256];
  out << r.model_line << '\n';
  if (!r.gemm.empty()) out << "GEMM: " << r.gemm << '\n';
  if (!r.host_threads_line.empty())
    out << "host: " << r.host_threads_line << (r.host_loops.empty() ? "" : "; ") << r.host_loops
        << round_trip_words(r.host_round_trip_ns) << '\n';
  if (r.precision != "f32") out << "precision: " << r.precision << " (GEMM operands in bf16, f32 accumulation; all else f32)\n";
  out << '\n';
  const Lane& h = r.lanes[0];
  for (const Lane* lp : print_order(r)) {
    const Lane& l = *lp;
    out << l.label << ": ";
    if (!l.ran) {
      out << "skipped (" << l.skipped << ")\n";
      continue;
    }
    std::snprintf(buf, sizeof buf, "losses %.4f -> %.4f over %zu steps", l.losses.front(), l.losses.back(), l.losses.size());
    out << buf;
    if (&l != &h && h.ran) {
      std::snprintf(buf, sizeof buf, ", at most %.1e from [1]", l.max_rel_vs_host);
      out << buf;
    }
    out << '\n';
  }
  if (r.lanes[1].ran || r.lanes[2].ran) {
    out << "GPU: " << r.device << "; f32 dots " << (r.tf32 ? "of cuBLAS(Lt) in TF32, generated ones in f32" : "in full f32") << '\n';
    for (const Lane* l : {&r.lanes[1], &r.lanes[2]})
      if (l->ran) {
        std::snprintf(buf, sizeof buf, "%s: %.1f MiB of device memory; ", l->label.substr(0, 3).c_str(),
                      static_cast<double>(l->device_bytes) / (1 << 20));
        out << buf << l->kernels << '\n';
      }
  }
  if (r.lanes.size() > 4 && r.lanes[4].ran) {
    std::snprintf(buf, sizeof buf, "; %.1f MiB in the plugin's buffers", static_cast<double>(r.lanes[4].device_bytes) / (1 << 20));
    out << "[4]: " << r.lanes[4].kernels << buf << '\n';
  }
  std::snprintf(buf, sizeof buf, "\nmedian step (of %d, after %d warm-up)", r.steps, r.warmup);
  out << buf << '\n';
  int w = 33;  // the label column: the longest label's width, at least 33
  for (const Lane* lp : print_order(r)) w = std::max(w, static_cast<int>(lp->label.size()) + 1);
  std::snprintf(buf, sizeof buf, "%-*s%10s%10s%12s", w, "", "ms", "vs [1]", "tokens/s");
  out << buf << '\n';
  for (const Lane* lp : print_order(r)) {
    const Lane& l = *lp;
    const double tps = l.median_ms > 0 ? static_cast<double>(r.tokens_per_step) / (l.median_ms / 1e3) : 0;
    if (l.ran && h.ran) {
      std::snprintf(buf, sizeof buf, "%-*s%10.3f%9.1f\u00d7%12.0f", w, l.label.c_str(), l.median_ms, h.median_ms / l.median_ms, tps);
    } else if (l.ran) {
      std::snprintf(buf, sizeof buf, "%-*s%10.3f%10s%12.0f", w, l.label.c_str(), l.median_ms, "-", tps);
    } else {
      std::snprintf(buf, sizeof buf, "%-*s%10s", w, l.label.c_str(), "skipped");
    }
    out << buf << '\n';
  }
  out << '\n';
  if (r.lanes[1].ran && r.lanes[2].ran) {
    std::snprintf(buf, sizeof buf, "[3] is %.1f\u00d7 [2]: the parameters no longer cross the host.",
                  r.lanes[1].median_ms / r.lanes[2].median_ms);
    out << buf << '\n';
  } else {
    out << "[3] vs [2]: not measured (" << r.lanes[1].skipped << ").\n";
  }
  out << "[2] moves every parameter up and every gradient down each step; [3] moves the batch, "
         "four scalars and the loss.\n";
}

std::string to_json(const Report& r) {
  nlohmann::json j;
  j["model"] = r.model_line;
  j["device"] = r.device;
  j["gemm"] = r.gemm;
  j["host_threads"] = r.host_threads;
  j["host_loops"] = r.host_loops;
  j["host_round_trip_ns"] = r.host_round_trip_ns;
  j["tf32"] = r.tf32;
  j["precision"] = r.precision;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  if (!r.size.empty()) j["size"] = r.size;
  j["tokens_per_step"] = r.tokens_per_step;
  for (const Lane& l : r.lanes) {
    nlohmann::json x;
    x["label"] = l.label;
    x["ran"] = l.ran;
    if (l.ran) {
      x["losses"] = l.losses;
      x["step_ms"] = l.step_ms;
      x["median_ms"] = l.median_ms;
      x["cpu_ms_per_step"] = l.cpu_ms_per_step;
      x["max_rel_vs_host"] = l.max_rel_vs_host;
      x["tokens_per_s"] = l.median_ms > 0 ? static_cast<double>(r.tokens_per_step) / (l.median_ms / 1e3) : 0.0;
      if (!l.kernels.empty()) {
        x["device_bytes"] = l.device_bytes;
        x["kernels"] = l.kernels;
      }
    } else {
      x["skipped"] = l.skipped;
    }
    j["lanes"].push_back(x);
  }
  return j.dump(2);
}

}  // namespace capstep::lanes
