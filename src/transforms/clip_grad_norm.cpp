// clip_grad_norm: global gradient-norm clipping appended to a gradient program
// as ordinary equations, so it runs wherever the step runs (the interpreter,
// a GPU lane, any StableHLO consumer) and nothing extra crosses the host.
#include <algorithm>

#include "capstep/transforms.h"
#include "capstep/trace.h"

namespace capstep::optim {

const char* const kClipMaxNormName = "clip.max_norm";
const char* const kGradNormName = "grad_norm";

Program clip_grad_norm(const Program& g, const std::vector<std::string>& params) {
  verify(g);
  if (params.empty()) throw Error("clip_grad_norm: no parameters given");
  if (g.input_index(kClipMaxNormName) >= 0 || g.output_index(kGradNormName) >= 0)
    throw Error("clip_grad_norm: the program already has \"clip.max_norm\" or \"grad_norm\" (clipped twice?)");
  std::vector<int> gout;
  for (const std::string& p : params) {
    const int k = g.output_index("grad." + p);
    if (k < 0) throw Error("clip_grad_norm: the gradient program has no output \"grad." + p + "\"");
    if (std::find(gout.begin(), gout.end(), k) != gout.end())
      throw Error("clip_grad_norm: parameter \"" + p + "\" is listed twice");
    if (g.output_type(k).dtype != DType::f32)
      throw Error("clip_grad_norm: output \"grad." + p + "\" is " + g.output_type(k).str() + "; clipping here is f32");
    gout.push_back(k);
  }

  Tracer tr;
  std::vector<int> remap(static_cast<size_t>(g.num_values()), -1);
  for (const NamedValue& in : g.inputs) remap[static_cast<size_t>(in.value)] = tr.input(in.name, g.type(in.value)).id();
  const Tensor max_norm = tr.input(kClipMaxNormName, {DType::f32, {}});
  Program& q = tr.program();
  for (const Eqn& e : g.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    remap[static_cast<size_t>(e.out)] = q.add_eqn_typed(e.op, std::move(ins), e.attrs, g.type(e.out));
  }
  auto out = [&](int k) { return Tensor(&tr, remap[static_cast<size_t>(g.outputs[static_cast<size_t>(k)].value)]); };

  // ||g|| = sqrt(sum over parameters, in params order, of sum(g*g)).
  Tensor sq;
  for (size_t j = 0; j < gout.size(); ++j) {
    const Tensor gr = out(gout[j]);
    const Tensor s = sum(gr * gr);
    sq = j == 0 ? s : sq + s;
  }
  const Tensor norm = sqrt(sq);
  // min(1, C/||g||) as a select, so that an unclipped gradient is passed
  // through untouched (bit for bit), not multiplied by a rounded 1.
  const Tensor clip = compare(norm, max_norm, Cmp::GT);
  const Tensor scale = max_norm / norm;

  std::vector<std::pair<std::string, Tensor>> outs;
  std::vector<int> which(g.outputs.size(), -1);
  for (size_t j = 0; j < gout.size(); ++j) which[static_cast<size_t>(gout[j])] = static_cast<int>(j);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Tensor v = out(static_cast<int>(k));
    outs.push_back({g.outputs[k].name, which[k] < 0 ? v : select(clip, v * scale, v)});
  }
  outs.push_back({kGradNormName, norm});
  Program r = tr.finish(outs);
  r.name = g.name + "_clip";
  r.aliases = g.aliases;   // outputs keep their places; grad_norm comes last
  r = dead_code_eliminate(r);
  verify(r);
  return r;
}

}  // namespace capstep::optim
