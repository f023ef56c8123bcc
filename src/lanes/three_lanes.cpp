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

#include "capstep/autodiff.h"
#include "capstep/backend.h"
#include "capstep/cuda_options.h"
#include "capstep/trace.h"
#include "capstep/data.h"
#include "capstep/host.h"
#include "capstep/host_options.h"
#include "capstep/train_step.h"
#include "lanes/lanes.h"

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

// Every lane: `warmup` untimed steps, then `steps` timed and recorded ones,
// each phase from the same start. start() resets the lane's state to it;
// step(k) runs step k (batch k, AdamW step k+1) and returns its loss.
template <class StartFn, class StepFn>
void run_phases(const Options& o, LaneResult& lane, StartFn&& start, StepFn&& step) {
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

// Every lane, one loop: the lane's TrainStep (a backend and where AdamW
// runs), reset to the start before each phase; step k fills batch k and takes
// AdamW step k+1.
void run_lane(const Options& o, const Start& s, const Program& grad, LaneResult& lane) {
  const Lane& which = lane.lane;
  TrainStep stepper(grad, s.names, o.adamw, {.lane = which, .backend = train::lane_backend_options(o.backend, nullptr)});
  Checkpoint start;
  for (size_t j = 0; j < s.names.size(); ++j) {
    start.params.push_back({s.names[j], s.params[j]});
    start.adam_m.push_back({s.names[j], Array(s.params[j].type())});
  }
  start.adam_v = start.adam_m;
  Array tokens({DType::i32, {o.model.batch, o.model.seq}}), targets = tokens;
  run_phases(
      o, lane, [&] { stepper.load(start); },
      [&](int k) {
        s.batches.fill(static_cast<uint64_t>(k), tokens, targets);
        stepper.set("tokens", tokens);
        stepper.set("targets", targets);
        return static_cast<double>(static_cast<float>(stepper.step(optim::adamw_scalars(o.adamw, k + 1))));
      });
  // After the steps: a PJRT backend holds its buffers once the state is set.
  if (which.backend != BackendKind::host) {
    const BackendInfo info = stepper.backend().describe();
    lane.device_bytes = info.bytes;
    // [4] names its device here ("PJRT cpu (plugin ...)"); the GPU lanes' is the report's.
    lane.kernels = which.backend == BackendKind::pjrt ? info.device + "; " + info.plan : info.plan;
  }
}

void finish(LaneResult& lane, const LaneResult& host) {
  lane.median_ms = median(lane.step_ms);
  if (&lane == &host || !host.ran) return;
  for (size_t k = 0; k < lane.losses.size() && k < host.losses.size(); ++k)
    lane.max_rel_vs_host = std::max(lane.max_rel_vs_host,
                                    std::fabs(lane.losses[k] - host.losses[k]) / std::fabs(host.losses[k]));
}

}  // namespace

// The lanes, as data: each a backend and where AdamW runs; the report keeps
// this order, the runs and the printout take kRunOrder's.
struct LaneSpec {
  const char* tag;
  const char* label;
  Lane lane;
};
const LaneSpec kLanes[] = {
    {"1", "[1] host", {BackendKind::host, false}},
    {"2", "[2] GPU, AdamW on the host", {BackendKind::cuda, false}},
    {"3", "[3] GPU, AdamW in the program", {BackendKind::cuda, true}},
    {"1f", "[1f] host, AdamW in the program", {BackendKind::host, true}},
    {"4", "[4] XLA (PJRT), AdamW in the program, donated buffers", {BackendKind::pjrt, true}},
};
const char* const kRunOrder[] = {"1", "1f", "2", "3", "4"};

LaneResult& Report::lane(const std::string& tag) {
  for (LaneResult& l : lanes)
    if (l.tag == tag) return l;
  throw Error("no lane \"" + tag + "\" in the report");
}
const LaneResult& Report::lane(const std::string& tag) const { return const_cast<Report*>(this)->lane(tag); }

void Options::validate() const {
  model.validate();
  adamw.validate();
  if (steps < 1 || steps > 1000000) throw Error("steps must be in [1, 1000000], got " + std::to_string(steps));
  if (warmup < 0 || warmup > 1000) throw Error("warm-up must be in [0, 1000], got " + std::to_string(warmup));
  bool known = only.empty();
  for (const LaneSpec& l : kLanes) known = known || only == l.tag;
  if (!known)
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
  r.tf32 = o.backend.cuda.tf32;
  r.precision = optim::precision_name(o.precision);
  r.steps = o.steps;
  r.warmup = o.warmup;
  r.size = o.size;
  r.tokens_per_step = o.model.batch * o.model.seq;
  for (const LaneSpec& k : kLanes) {
    LaneResult l;
    l.tag = k.tag;
    l.label = k.label;
    l.lane = k.lane;
    r.lanes.push_back(std::move(l));
  }
  const Start s = make_start(o);
  const Program traced = nn::lm_loss_program(o.model);
  const Program loss = optim::with_precision(o.fused_attention ? fuse_attention(traced) : traced, o.precision);
  const Program grad = value_and_grad(loss, s.names);

  // Whether the host threads share a cache now, which on a VM decides what
  // two threads gain (parallel.h).
  r.host_round_trip_ns = host::threads_round_trip_ns();
  if (const Support cu = supports(BackendKind::cuda, grad, o.backend); !cu) r.device = cu.why;
  else r.device = cuda::device_description();
  for (const char* tag : kRunOrder) {
    LaneResult& l = r.lane(tag);
    if (!o.only.empty() && o.only != l.tag) {
      l.skipped = "not selected (only lane " + o.only + ")";
    } else if (l.lane.backend == BackendKind::host) {
      run_lane(o, s, grad, l);
    } else if (l.lane.backend == BackendKind::pjrt && o.backend.pjrt.plugin.empty()) {
      l.skipped = "no PJRT plugin (--pjrt-plugin or CAPSTEP_PJRT_PLUGIN; scripts/pjrt-plugin downloads a CPU plugin)";
    } else if (const Support sp = supports(l.lane.backend, grad, o.backend); !sp) {
      // Each lane skips by its backend's own answer (the device or plugin,
      // then the program's equations).
      l.skipped = sp.why;
    } else {
      try {
        run_lane(o, s, grad, l);
      } catch (const Error& e) {
        l.skipped = std::string("failed: ") + e.what();
      }
    }
    if (l.tag == "1") {   // what the host ran on, once its threads have started
      r.gemm = host::gemm_line();
      r.host_threads = host::host_threads();
      r.host_threads_line = host::host_threads_line();
      r.host_loops = host::host_loops_line(o.backend.host);
      r.host_subnormals = !host::subnormal_flush_available() ? "subnormals kept (IEEE: no flush mode on this CPU)"
                          : o.backend.host.flush_subnormals ? "subnormals flushed (DAZ/FTZ)"
                                                            : "subnormals kept (IEEE)";
    }
  }
  for (LaneResult& l : r.lanes)
    if (l.ran) finish(l, r.lane("1"));
  return r;
}

// The lanes in the order they are printed: kRunOrder's.
std::vector<const LaneResult*> print_order(const Report& r) {
  std::vector<const LaneResult*> v;
  for (const char* tag : kRunOrder) v.push_back(&r.lane(tag));
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
        << (r.host_subnormals.empty() ? "" : "; ") << r.host_subnormals << round_trip_words(r.host_round_trip_ns) << '\n';
  if (r.precision != "f32") out << "precision: " << r.precision << " (GEMM operands in bf16, f32 accumulation; all else f32)\n";
  out << '\n';
  const LaneResult &h = r.lane("1"), &gpu_host = r.lane("2"), &gpu = r.lane("3"), &xla = r.lane("4");
  for (const LaneResult* lp : print_order(r)) {
    const LaneResult& l = *lp;
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
  if (gpu_host.ran || gpu.ran) {
    out << "GPU: " << r.device << "; f32 dots " << (r.tf32 ? "of cuBLAS(Lt) in TF32, generated ones in f32" : "in full f32") << '\n';
    for (const LaneResult* l : {&gpu_host, &gpu})
      if (l->ran) {
        std::snprintf(buf, sizeof buf, "%s: %.1f MiB of device memory; ", l->label.substr(0, 3).c_str(),
                      static_cast<double>(l->device_bytes) / (1 << 20));
        out << buf << l->kernels << '\n';
      }
  }
  if (xla.ran) {
    std::snprintf(buf, sizeof buf, "; %.1f MiB in the plugin's buffers", static_cast<double>(xla.device_bytes) / (1 << 20));
    out << "[4]: " << xla.kernels << buf << '\n';
  }
  std::snprintf(buf, sizeof buf, "\nmedian step (of %d, after %d warm-up)", r.steps, r.warmup);
  out << buf << '\n';
  int w = 33;  // the label column: the longest label's width, at least 33
  for (const LaneResult* lp : print_order(r)) w = std::max(w, static_cast<int>(lp->label.size()) + 1);
  std::snprintf(buf, sizeof buf, "%-*s%10s%10s%12s", w, "", "ms", "vs [1]", "tokens/s");
  out << buf << '\n';
  for (const LaneResult* lp : print_order(r)) {
    const LaneResult& l = *lp;
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
  if (gpu_host.ran && gpu.ran) {
    std::snprintf(buf, sizeof buf, "[3] is %.1f\u00d7 [2]: the parameters no longer cross the host.",
                  gpu_host.median_ms / gpu.median_ms);
    out << buf << '\n';
  } else {
    out << "[3] vs [2]: not measured (" << gpu_host.skipped << ").\n";
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
  j["host_subnormals"] = r.host_subnormals;
  j["host_round_trip_ns"] = r.host_round_trip_ns;
  j["tf32"] = r.tf32;
  j["precision"] = r.precision;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  if (!r.size.empty()) j["size"] = r.size;
  j["tokens_per_step"] = r.tokens_per_step;
  for (const LaneResult& l : r.lanes) {
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
