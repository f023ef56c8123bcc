// Tensor handles and the Tracer that records their equations.
#include <algorithm>

#include "trace/internal.h"

namespace capstep {

Tensor::Tensor(Tracer* t, int id) : tracer_(t), id_(id) {
  if (t != nullptr) alive_ = t->alive_;
}

Tracer* Tensor::tracer() const {
  if (tracer_ != nullptr && alive_.expired())
    throw Error("Tensor %" + std::to_string(id_) +
                " is used after the Tracer that recorded it was destroyed: a Tensor is valid only while its "
                "Tracer lives");
  return tracer_;
}

Type Tensor::type() const {
  if (!valid()) throw Error("Tensor: use of an empty (default-constructed) Tensor");
  return tracer()->program().type(id_);
}

int64_t Tensor::dim(int axis) const {
  const Type t = type();
  return t.shape[static_cast<size_t>(trace_detail::normalize_axis("Tensor::dim", axis, t.rank()))];
}

Tensor Tracer::input(const std::string& name, const Type& t) {
  return Tensor(this, prog_.add_input(name, t));
}

Tensor Tracer::emit(Op op, const std::vector<Tensor>& inputs, Attrs attrs) {
  std::vector<int> ids;
  ids.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.valid()) throw Error(std::string(op_name(op)) + ": operand is an empty Tensor");
    if (t.tracer() != this)
      throw Error(std::string(op_name(op)) + ": operand was recorded by a different Tracer");
    ids.push_back(t.id());
  }
  return Tensor(this, prog_.add_eqn(op, std::move(ids), std::move(attrs)));
}

Tensor Tracer::constant(const Type& t, std::vector<double> values) {
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != t.numel())
    throw Error("constant " + t.str() + ": expected 1 value (splat) or " + std::to_string(t.numel()) +
                " values, got " + std::to_string(values.size()));
  Attrs a;
  a.literal = std::move(values);
  return trace_detail::emit_typed(*this, Op::constant, {}, std::move(a), t);
}

Tensor Tracer::iota(const Type& t, int64_t axis) {
  Attrs a;
  a.axis = trace_detail::normalize_axis("iota", axis, t.rank());
  return trace_detail::emit_typed(*this, Op::iota, {}, std::move(a), t);
}

void Tracer::tag_recorded() {
  if (region_ >= 0)
    for (size_t i = tagged_; i < prog_.eqns.size(); ++i)
      if (prog_.eqns[i].attrs.region < 0) prog_.eqns[i].attrs.region = region_;
  tagged_ = prog_.eqns.size();
}

void Tracer::set_region(int region) {
  if (region < -1) throw Error("Tracer::set_region: region " + std::to_string(region) + " is below -1");
  tag_recorded();
  region_ = region;
}

Program Tracer::finish(const std::vector<std::pair<std::string, Tensor>>& outputs) {
  tag_recorded();
  Program out = prog_;
  for (const auto& [name, t] : outputs) {
    if (!t.valid() || t.tracer() != this)
      throw Error("Tracer::finish: output '" + name + "' was not recorded by this Tracer");
    out.add_output(name, t.id());
  }
  verify(out);
  return out;
}

namespace trace_detail {

Tracer& tracer_of(const char* what, const std::vector<Tensor>& operands) {
  Tracer* tr = nullptr;
  for (const Tensor& t : operands) {
    if (!t.valid()) throw Error(std::string(what) + ": operand is an empty Tensor");
    if (tr && t.tracer() != tr)
      throw Error(std::string(what) + ": operands were recorded by different Tracers");
    tr = t.tracer();
  }
  if (!tr) throw Error(std::string(what) + ": no operands");
  return *tr;
}

Tensor emit_typed(Tracer& tr, Op op, const std::vector<Tensor>& inputs, Attrs attrs, const Type& out) {
  std::vector<int> ids;
  ids.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.valid() || t.tracer() != &tr)
      throw Error(std::string(op_name(op)) + ": operand is empty or from a different Tracer");
    ids.push_back(t.id());
  }
  Type copy = out;  // `out` may refer into the program's type table, which grows
  return Tensor(&tr, tr.program().add_eqn_typed(op, std::move(ids), std::move(attrs), copy));
}

int64_t normalize_axis(const char* what, int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw Error(std::string(what) + ": axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  return a;
}

std::vector<int64_t> normalize_axes(const char* what, std::vector<int64_t> axes, int rank) {
  for (int64_t& a : axes) a = normalize_axis(what, a, rank);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

std::vector<int64_t> kept_axes(int rank, const std::vector<int64_t>& removed) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < rank; ++i)
    if (!std::binary_search(removed.begin(), removed.end(), i)) kept.push_back(i);
  return kept;
}

Tensor unreduce(const Tensor& reduced, const Shape& shape, const std::vector<int64_t>& reduced_axes) {
  if (reduced_axes.empty()) return reduced;
  return broadcast_in_dim(reduced, shape, kept_axes(static_cast<int>(shape.size()), reduced_axes));
}

Program retrace(const Program& p, const Expand& expand) {
  Tracer tr;
  std::vector<Tensor> val(static_cast<size_t>(p.num_values()));
  for (const NamedValue& in : p.inputs) val[static_cast<size_t>(in.value)] = tr.input(in.name, p.type(in.value));
  for (const Eqn& e : p.eqns) {
    Tensor r = expand(tr, e, val);
    if (!r.valid()) {
      std::vector<int> ins;
      for (int v : e.inputs) ins.push_back(val[static_cast<size_t>(v)].id());
      r = Tensor(&tr, tr.program().add_eqn_typed(e.op, ins, e.attrs, p.type(e.out)));
    }
    val[static_cast<size_t>(e.out)] = r;
  }
  std::vector<std::pair<std::string, Tensor>> outs;
  for (const NamedValue& o : p.outputs) outs.emplace_back(o.name, val[static_cast<size_t>(o.value)]);
  Program q = tr.finish(outs);
  q.name = p.name;
  q.aliases = p.aliases;
  verify(q);
  return q;
}

void mark_no_grad(const Tensor& t) {
  if (!t.valid()) throw Error("mark_no_grad: an invalid tensor");
  std::vector<Eqn>& eqns = t.tracer()->program().eqns;
  for (auto it = eqns.rbegin(); it != eqns.rend(); ++it)
    if (it->out == t.id()) {
      it->attrs.no_grad = true;
      return;
    }
  throw Error("mark_no_grad: %" + std::to_string(t.id()) + " is not the result of an equation");
}

}  // namespace trace_detail
}  // namespace capstep
