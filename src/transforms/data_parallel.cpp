// data_parallel: the gradient all-reduce of data parallelism as equations of
// the step program (Op::all_reduce), so that it is differentiated, planned,
// exported and checked like every other equation, never a side channel.
#include <algorithm>

#include "capstep/transforms.h"
#include "capstep/trace.h"

namespace capstep::optim {

const char* const kLossName = "loss";

Program data_parallel(const Program& g, const std::vector<std::string>& params, int num_replicas,
                      const DataParallelOptions& options) {
  verify(g);
  if (params.empty()) throw Error("data_parallel: no parameters given");
  if (num_replicas < 1) throw Error("data_parallel: the replica count must be >= 1, got " + std::to_string(num_replicas));
  for (const Eqn& e : g.eqns)
    if (e.op == Op::all_reduce) throw Error("data_parallel: the program already has an all_reduce (made data-parallel twice?)");
  std::vector<int> mean_of;  // output indices to average over the replicas
  for (const std::string& p : params) {
    const int k = g.output_index("grad." + p);
    if (k < 0) throw Error("data_parallel: the gradient program has no output \"grad." + p + "\"");
    if (std::find(mean_of.begin(), mean_of.end(), k) != mean_of.end())
      throw Error("data_parallel: parameter \"" + p + "\" is listed twice");
    if (!is_float(g.output_type(k).dtype))
      throw Error("data_parallel: output \"grad." + p + "\" is " + g.output_type(k).str() + ", not a float");
    mean_of.push_back(k);
  }
  const int loss = g.output_index(kLossName);
  if (loss >= 0 && is_float(g.output_type(loss).dtype)) mean_of.push_back(loss);

  Tracer tr;
  std::vector<int> remap(static_cast<size_t>(g.num_values()), -1);
  for (const NamedValue& in : g.inputs) remap[static_cast<size_t>(in.value)] = tr.input(in.name, g.type(in.value)).id();
  Program& q = tr.program();
  for (const Eqn& e : g.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    remap[static_cast<size_t>(e.out)] = q.add_eqn_typed(e.op, std::move(ins), e.attrs, g.type(e.out));
  }
  std::vector<Tensor> outv;
  for (size_t k = 0; k < g.outputs.size(); ++k) outv.emplace_back(&tr, remap[static_cast<size_t>(g.outputs[k].value)]);
  auto is_mean = [&](size_t k) { return std::find(mean_of.begin(), mean_of.end(), static_cast<int>(k)) != mean_of.end(); };
  // The mean of the replicas' values: each replica's loss is a mean over its
  // own rows, so with equal local batches this is the global mean.
  // Packed: every all_reduce first (one consecutive run, one message), then
  // the divisions; unpacked: each all_reduce followed by its division.
  // Packed in buckets: consecutive values while their bytes fit in
  // bucket_bytes (a larger value is a bucket alone); a bucket's divisions
  // follow it, so that they separate it from the next bucket's run.
  if (options.bucket_bytes < 0)
    throw Error("data_parallel: bucket_bytes must be >= 0 (0: one bucket), got " + std::to_string(options.bucket_bytes));
  std::vector<size_t> bucket;
  int64_t bucket_bytes = 0;
  auto divide_bucket = [&] {
    if (num_replicas > 1)
      for (size_t k : bucket) outv[k] = outv[k] / static_cast<double>(num_replicas);
    bucket.clear();
    bucket_bytes = 0;
  };
  for (size_t k = 0; k < outv.size(); ++k) {
    if (!is_mean(k)) continue;
    const int64_t b = static_cast<int64_t>(g.output_type(static_cast<int>(k)).bytes());
    if (!options.pack || (options.bucket_bytes > 0 && !bucket.empty() && bucket_bytes + b > options.bucket_bytes))
      divide_bucket();
    outv[k] = all_reduce(outv[k]);
    bucket.push_back(k);
    bucket_bytes += b;
  }
  divide_bucket();
  std::vector<std::pair<std::string, Tensor>> outs;
  for (size_t k = 0; k < g.outputs.size(); ++k) outs.push_back({g.outputs[k].name, outv[k]});
  Program r = tr.finish(outs);
  r.name = g.name + "_dp";
  r.aliases = g.aliases;
  verify(r);
  return r;
}

}  // namespace capstep::optim
