// LoRA in the program (transforms.h): the transform, PEFT's initialisation
// and the merge. PEFT's files and the choice of targets in capstep's models
// (lora.h) are in src/nn/peft.cpp.
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "capstep/random.h"
#include "capstep/transforms.h"

namespace capstep::lora {

std::string a_name(const std::string& target) { return "lora.A." + target; }
std::string b_name(const std::string& target) { return "lora.B." + target; }

std::vector<std::string> adapter_inputs(const std::vector<Target>& targets) {
  std::vector<std::string> out;
  for (const Target& t : targets) {
    out.push_back(a_name(t.name));
    out.push_back(b_name(t.name));
  }
  return out;
}

void Options::validate() const {
  if (r < 1 || r > 65536) throw Error("LoRA rank r must be in [1, 65536], got " + std::to_string(r));
  if (!std::isfinite(alpha) || alpha <= 0) throw Error("LoRA alpha must be a positive finite number");
}

double scale(const Options& o) {
  o.validate();
  const double r = static_cast<double>(o.r);
  return o.rslora ? o.alpha / std::sqrt(r) : o.alpha / r;
}

std::vector<Array> Adapter::inputs() const {
  if (a.size() != targets.size() || b.size() != targets.size())
    throw Error("LoRA adapter: " + std::to_string(targets.size()) + " targets but " + std::to_string(a.size()) +
                " A and " + std::to_string(b.size()) + " B matrices");
  std::vector<Array> out;
  for (size_t i = 0; i < targets.size(); ++i) {
    out.push_back(a[i]);
    out.push_back(b[i]);
  }
  return out;
}

namespace {

// Where each weight sits: its target and its rows of B.
struct WeightPlace {
  size_t target;
  int64_t row0, rows;
};

// The targets checked against p: every weight a rank-2 f32 input, one `in`
// per target; returns each target's (in, out) and each weight's place.
void check_targets(const Program& p, const std::vector<Target>& targets, std::vector<std::pair<int64_t, int64_t>>& dims,
                   std::map<std::string, WeightPlace>& places, std::vector<DType>* dtypes = nullptr) {
  std::set<std::string> names;
  for (size_t ti = 0; ti < targets.size(); ++ti) {
    const Target& t = targets[ti];
    if (t.name.empty()) throw Error("LoRA: a target without a name");
    if (!names.insert(t.name).second) throw Error("LoRA: target '" + t.name + "' is given twice");
    if (t.weights.empty()) throw Error("LoRA: target '" + t.name + "' names no weight");
    for (const std::string& n : {a_name(t.name), b_name(t.name)})
      if (p.input_index(n) >= 0) throw Error("LoRA: the program already has an input '" + n + "'");
    int64_t in = -1, out = 0;
    for (const std::string& w : t.weights) {
      const int i = p.input_index(w);
      if (i < 0) throw Error("LoRA: target weight '" + w + "' is not an input of program '" + p.name + "'");
      const Type& ty = p.input_type(i);
      if ((ty.dtype != DType::f32 && ty.dtype != DType::f64) || ty.rank() != 2)
        throw Error("LoRA: target weight '" + w + "' is " + ty.str() + "; LoRA adapts rank-2 f32 matrices [in, out]");
      if (in >= 0 && ty.dtype != p.input_type(p.input_index(t.weights[0])).dtype)
        throw Error("LoRA: the weights of target '" + t.name + "' have different types");
      if (in >= 0 && ty.shape[0] != in)
        throw Error("LoRA: the weights of target '" + t.name + "' have different input sizes (" + std::to_string(in) +
                    " and " + std::to_string(ty.shape[0]) + " for '" + w + "')");
      in = ty.shape[0];
      if (places.count(w)) throw Error("LoRA: weight '" + w + "' is in two targets");
      places[w] = {ti, out, ty.shape[1]};
      out += ty.shape[1];
    }
    dims.push_back({in, out});
    if (dtypes) dtypes->push_back(p.input_type(p.input_index(t.weights[0])).dtype);
  }
}

// Whether equation e reads weight value w as trace.h's matmul(x, W) does.
bool supported_use(const Program& p, const Eqn& e, int w) {
  if (e.op != Op::dot_general || e.inputs.size() != 2 || e.inputs[1] != w || e.inputs[0] == w) return false;
  const Type& x = p.type(e.inputs[0]);
  const Attrs& a = e.attrs;
  return x.dtype == p.type(w).dtype && x.rank() >= 1 && a.lhs_batch.empty() && a.rhs_batch.empty() &&
         a.lhs_contract == std::vector<int64_t>{x.rank() - 1} && a.rhs_contract == std::vector<int64_t>{0};
}

}  // namespace

Program lora(const Program& p, const std::vector<Target>& targets, const Options& o) {
  verify(p);
  const double s = scale(o);
  std::vector<std::pair<int64_t, int64_t>> dims;
  std::map<std::string, WeightPlace> places;
  std::vector<DType> dtypes;
  check_targets(p, targets, dims, places, &dtypes);
  // Each weight's value -> its place; every use checked before anything is built.
  std::map<int, const WeightPlace*> by_value;
  std::map<int, std::string> weight_name;
  for (const auto& [name, place] : places) {
    const int v = p.inputs[static_cast<size_t>(p.input_index(name))].value;
    by_value[v] = &place;
    weight_name[v] = name;
  }
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    for (int v : e.inputs)
      if (by_value.count(v) && !supported_use(p, e, v))
        throw Error("LoRA: target weight '" + weight_name[v] + "' is used by equation " + std::to_string(i) + " (" +
                    eqn_text(p, e) + "), not as the right operand of x W (a dot_general contracting x's last axis "
                    "with the weight's first, no batch axes, x of the weight's type)");
  }
  for (const NamedValue& out : p.outputs)
    if (by_value.count(out.value))
      throw Error("LoRA: target weight '" + weight_name[out.value] + "' is the program's output '" + out.name + "'");

  Program q;
  q.name = p.name;
  std::vector<int> remap(static_cast<size_t>(p.num_values()), -1);
  for (const NamedValue& in : p.inputs) {
    Type t = p.type(in.value);
    if (o.base_bf16 && places.count(in.name)) {
      if (t.dtype != DType::f32)
        throw Error("LoRA: base_bf16 stores f32 weights in bf16; target weight '" + in.name + "' is " + t.str());
      t.dtype = DType::bf16;
    }
    remap[static_cast<size_t>(in.value)] = q.add_input(in.name, t);
  }
  std::vector<int> a_val, b_val;
  for (size_t t = 0; t < targets.size(); ++t) {
    a_val.push_back(q.add_input(a_name(targets[t].name), {dtypes[t], {o.r, dims[t].first}}));
    b_val.push_back(q.add_input(b_name(targets[t].name), {dtypes[t], {dims[t].second, o.r}}));
  }
  if (o.base_bf16)
    for (const NamedValue& in : p.inputs)
      if (places.count(in.name)) {
        int& v = remap[static_cast<size_t>(in.value)];
        v = q.add_eqn_typed(Op::convert, {v}, {}, p.type(in.value));
      }
  std::map<std::pair<size_t, int>, int> x_a;        // (target, x) -> x A^T
  std::map<std::pair<size_t, int64_t>, int> b_rows; // (target, first row) -> B's rows of that weight
  for (const Eqn& e : p.eqns) {
    std::vector<int> ins;
    for (int v : e.inputs) ins.push_back(remap[static_cast<size_t>(v)]);
    int y = q.add_eqn_typed(e.op, ins, e.attrs, p.type(e.out));
    auto w = e.op == Op::dot_general ? by_value.find(e.inputs[1]) : by_value.end();
    if (w != by_value.end()) {
      const WeightPlace& pl = *w->second;
      const int x = ins[0];
      const int64_t last = q.type(x).rank() - 1;
      Attrs dot;
      dot.lhs_contract = {last};
      dot.rhs_contract = {1};
      auto xa = x_a.find({pl.target, x});
      if (xa == x_a.end()) xa = x_a.emplace(std::make_pair(pl.target, x), q.add_eqn(Op::dot_general, {x, a_val[pl.target]}, dot)).first;
      int b = b_val[pl.target];
      if (pl.rows != dims[pl.target].second) {
        auto it = b_rows.find({pl.target, pl.row0});
        if (it == b_rows.end()) {
          Attrs sl;
          sl.starts = {pl.row0, 0};
          sl.limits = {pl.row0 + pl.rows, o.r};
          sl.strides = {1, 1};
          it = b_rows.emplace(std::make_pair(pl.target, pl.row0), q.add_eqn(Op::slice, {b}, sl)).first;
        }
        b = it->second;
      }
      const int u = q.add_eqn(Op::dot_general, {xa->second, b}, dot);
      Attrs c;
      c.literal = {q.type(u).dtype == DType::f32 ? static_cast<double>(static_cast<float>(s)) : s};
      const int sc = q.add_eqn_typed(Op::constant, {}, c, q.type(u));
      y = q.add_eqn(Op::add, {y, q.add_eqn(Op::multiply, {u, sc}, {})}, {});
    }
    remap[static_cast<size_t>(e.out)] = y;
  }
  for (const NamedValue& out : p.outputs) q.add_output(out.name, remap[static_cast<size_t>(out.value)]);
  q.aliases = p.aliases;
  verify(q);
  return q;
}

Program convert_at_each_use(const Program& p) {
  verify(p);
  std::vector<char> is_input(static_cast<size_t>(p.num_values()), 0), moved(p.eqns.size(), 0);
  for (const NamedValue& in : p.inputs) is_input[static_cast<size_t>(in.value)] = 1;
  std::map<int, size_t> convert_of;   // converted value -> its equation
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    const Eqn& e = p.eqns[i];
    if (e.op == Op::convert && e.inputs.size() == 1 && is_input[static_cast<size_t>(e.inputs[0])] &&
        p.type(e.inputs[0]).dtype == DType::bf16 && p.type(e.out).dtype == DType::f32) {
      moved[i] = 1;
      convert_of[e.out] = i;
    }
  }
  Program q;
  q.name = p.name;
  std::vector<int> remap(static_cast<size_t>(p.num_values()), -1);
  for (const NamedValue& in : p.inputs) remap[static_cast<size_t>(in.value)] = q.add_input(in.name, p.type(in.value));
  auto fresh = [&](int v) {
    const Eqn& c = p.eqns[convert_of.at(v)];
    return q.add_eqn_typed(Op::convert, {remap[static_cast<size_t>(c.inputs[0])]}, c.attrs, p.type(v));
  };
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    if (moved[i]) continue;
    const Eqn& e = p.eqns[i];
    std::map<int, int> here;   // one convert for this equation, however often it reads the value
    std::vector<int> ins;
    for (int v : e.inputs) {
      if (convert_of.count(v)) {
        auto it = here.find(v);
        if (it == here.end()) it = here.emplace(v, fresh(v)).first;
        ins.push_back(it->second);
      } else {
        ins.push_back(remap[static_cast<size_t>(v)]);
      }
    }
    remap[static_cast<size_t>(e.out)] = q.add_eqn_typed(e.op, ins, e.attrs, p.type(e.out));
  }
  for (const NamedValue& out : p.outputs)
    q.add_output(out.name, convert_of.count(out.value) ? fresh(out.value) : remap[static_cast<size_t>(out.value)]);
  q.aliases = p.aliases;
  verify(q);
  return q;
}

Adapter init_adapter(const Program& p, const std::vector<Target>& targets, const Options& o, uint64_t seed) {
  o.validate();
  std::vector<std::pair<int64_t, int64_t>> dims;
  std::map<std::string, WeightPlace> places;
  check_targets(p, targets, dims, places);
  Adapter ad;
  ad.options = o;
  ad.targets = targets;
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 0x4C6F5241ull;
  for (const auto& [in, out] : dims) {
    // kaiming_uniform_(a=sqrt(5)) over [r, in]: fan_in = in, gain = sqrt(2 / (1 + 5)),
    // bound = gain * sqrt(3 / fan_in) = 1 / sqrt(in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    Array a({DType::f32, {o.r, in}});
    for (int64_t i = 0; i < a.numel(); ++i) {
      a.set(i, (2 * uniform01(state) - 1) * bound);
    }
    ad.a.push_back(std::move(a));
    ad.b.emplace_back(Type{DType::f32, {out, o.r}});
  }
  return ad;
}

void merge(const Adapter& ad, const std::vector<std::string>& names, std::vector<Array>& params) {
  const float s = static_cast<float>(scale(ad.options));
  if (names.size() != params.size())
    throw Error("LoRA merge: " + std::to_string(names.size()) + " names for " + std::to_string(params.size()) +
                " parameters");
  if (ad.a.size() != ad.targets.size() || ad.b.size() != ad.targets.size())
    throw Error("LoRA merge: the adapter has " + std::to_string(ad.targets.size()) + " targets but " +
                std::to_string(ad.a.size()) + " A and " + std::to_string(ad.b.size()) + " B matrices");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  const int64_t r = ad.options.r;
  for (size_t t = 0; t < ad.targets.size(); ++t) {
    const Array& A = ad.a[t];
    const Array& B = ad.b[t];
    const Target& tg = ad.targets[t];
    if (A.dtype() != DType::f32 || B.dtype() != DType::f32 || A.shape().size() != 2 || B.shape().size() != 2 ||
        A.shape()[0] != r || B.shape()[1] != r)
      throw Error("LoRA merge: target '" + tg.name + "' has A " + A.type().str() + " and B " + B.type().str() +
                  " for rank " + std::to_string(r));
    const int64_t in = A.shape()[1];
    int64_t row0 = 0;
    for (const std::string& w : tg.weights) {
      auto it = index.find(w);
      if (it == index.end()) throw Error("LoRA merge: no parameter '" + w + "' (target '" + tg.name + "')");
      Array& W = params[it->second];
      if (W.dtype() != DType::f32 || W.shape().size() != 2 || W.shape()[0] != in || row0 + W.shape()[1] > B.shape()[0])
        throw Error("LoRA merge: parameter '" + w + "' is " + W.type().str() + ", which A " + A.type().str() +
                    " and B " + B.type().str() + " of target '" + tg.name + "' do not fit");
      const int64_t out = W.shape()[1];
      float* wp = W.data<float>();
      const float* ap = A.data<float>();
      const float* bp = B.data<float>();
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k)
            d += static_cast<double>(bp[(row0 + o) * r + k]) * static_cast<double>(ap[k * in + i]);
          wp[i * out + o] += static_cast<float>(d) * s;
        }
      row0 += out;
    }
    if (row0 != B.shape()[0])
      throw Error("LoRA merge: target '" + tg.name + "' has B " + B.type().str() + " but its weights have " +
                  std::to_string(row0) + " outputs");
  }
}

}  // namespace capstep::lora
