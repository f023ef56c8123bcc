// plan_kernels: the fused grouping, the GEMM layouts, the memory plan and the
// launch list of one Program, in that order (each needs the one before).
#include "backend/plan/kernel_plan.h"

#include <map>
#include <sstream>

#include "backend/plan/walk.h"

namespace capstep::plan {

const char* item_kind_name(ItemKind k) {
  switch (k) {
    case ItemKind::loop: return "loop";
    case ItemKind::row: return "row";
    case ItemKind::col: return "col";
    case ItemKind::wave: return "wave";
    case ItemKind::gemm: return "gemm";
    case ItemKind::small_gemm: return "small_gemm";
    case ItemKind::pack: return "pack";
    case ItemKind::fill: return "fill";
    case ItemKind::copy: return "copy";
    case ItemKind::strided: return "strided";
    case ItemKind::elementwise: return "elementwise";
    case ItemKind::reduce: return "reduce";
    case ItemKind::gather: return "gather";
    case ItemKind::scatter: return "scatter";
    case ItemKind::scatter_gen: return "scatter_gen";
    case ItemKind::attention: return "attention";
    case ItemKind::end_copy: return "end_copy";
    case ItemKind::collective: return "collective";
  }
  return "?";
}

namespace {

std::string group_what(const Program& p, const Group& g) {
  std::ostringstream s;
  s << "equations " << g.first << ".." << g.last << ":";
  for (int d = g.first; d <= g.last && d < g.first + 6; ++d) s << " " << op_name(p.eqns[static_cast<size_t>(d)].op);
  if (g.size() > 6) s << " ... (" << g.size() << ")";
  if (g.kind == GroupKind::row) s << "; " << g.rows << " rows of " << g.cols;
  if (g.kind == GroupKind::col) s << "; " << g.cols << " sums of " << g.rows;
  if (g.kind == GroupKind::loop) s << "; " << g.numel << " elements";
  if (g.kind == GroupKind::scatter) {
    const Eqn& e = p.eqns[static_cast<size_t>(g.first)];
    s.str("");
    s << "%" << e.out << " scatter_add_rows " << p.type(e.out).str() << " (generated: sums in index order)";
  }
  if (g.kind == GroupKind::gemm) {
    const Eqn& e = p.eqns[static_cast<size_t>(g.first)];
    s.str("");
    s << "%" << e.out << " dot_general " << p.type(e.out).str() << " (generated)";
  }
  return s.str();
}

// The single items of equation d (one or two launches).
void single_items(const Program& p, const std::vector<GemmLayout>& gemm, const std::vector<int>& attention_group, int d,
                  std::vector<Item>& items) {
  const Eqn& e = p.eqns[static_cast<size_t>(d)];
  const Type& ot = p.type(e.out);
  auto add = [&](ItemKind k, std::string what) {
    Item it;
    it.kind = k;
    it.eqn = d;
    it.reads = e.inputs;
    it.writes = {e.out};
    it.what = std::string("%").append(std::to_string(e.out)).append(" ").append(what);
    items.push_back(std::move(it));
  };
  const std::string name = op_name(e.op);
  switch (e.op) {
    case Op::constant: case Op::iota: case Op::reshape:
      return;  // filled once, or a view
    CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
    CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
    case Op::compare: case Op::select:
      add(ItemKind::elementwise, name + " " + ot.str());
      return;
    case Op::convert:
      add(p.type(e.inputs[0]).dtype == ot.dtype ? ItemKind::copy : ItemKind::elementwise, name + " " + ot.str());
      return;
    case Op::broadcast_in_dim:
      add(p.type(e.inputs[0]).numel() == ot.numel() ? ItemKind::copy : ItemKind::strided, name + " " + ot.str());
      return;
    case Op::transpose:
      add(transpose_moves_nothing(p.type(e.inputs[0]).shape, e.attrs.dims) ? ItemKind::copy : ItemKind::strided,
          name + " " + ot.str());
      return;
    case Op::dot_general: {
      if (ot.numel() == 0) return;
      const GemmLayout& g = gemm[static_cast<size_t>(d)];
      if (g.k == 0) {
        add(ItemKind::fill, "dot_general with nothing to contract: zeros " + ot.str());
        return;
      }
      if (g.a.pack) add(ItemKind::pack, "lhs of dot_general transposed for the GEMM");
      if (g.b.pack) add(ItemKind::pack, "rhs of dot_general transposed for the GEMM");
      std::ostringstream s;
      s << "dot_general " << ot.str() << ": " << g.batch << " x [" << g.m << "x" << g.k << "] * [" << g.k << "x" << g.n
        << "]";
      add(ItemKind::gemm, s.str());
      return;
    }
    case Op::reduce_sum: case Op::reduce_max:
      add(ItemKind::reduce, name + " " + p.type(e.inputs[0]).str() + " -> " + ot.str());
      return;
    case Op::gather_rows:
      add(ItemKind::gather, name + " " + ot.str());
      return;
    case Op::scatter_add_rows:
      add(ItemKind::copy, "the operand of scatter_add_rows " + ot.str());
      add(ItemKind::scatter, name + " " + ot.str());
      return;
    case Op::attention: {
      const AttentionLaunch a = attention_launch(ot);
      add(ItemKind::attention, "attention " + ot.str() + ": flash forward, " + std::to_string(a.blocks) + " blocks of " +
                                   std::to_string(a.rows) + " query rows");
      items.back().eqns = {d};
      return;
    }
    case Op::adamw:  // plan_kernels plans expand_adamw's program: never here
      throw Error("kernel plan: adamw reached the planner unexpanded (expand_adamw first)");
    case Op::attention_grad: {
      if (attention_group[static_cast<size_t>(d)] != d) return;  // computed by its group's first equation
      const AttentionLaunch a = attention_launch(ot);
      std::string which;
      std::vector<int> members;
      for (int m = d; m < static_cast<int>(p.eqns.size()); ++m) {
        if (attention_group[static_cast<size_t>(m)] != d) continue;
        const Eqn& x = p.eqns[static_cast<size_t>(m)];
        members.push_back(m);
        which += std::string(which.empty() ? "" : ", ") + (x.attrs.axis == 0 ? "dq" : x.attrs.axis == 1 ? "dk" : "dv");
      }
      // two launches: dq with the rows' lse and D (always: dk and dv need
      // them), then dk and dv by key tiles when either is wanted
      std::vector<int> dq, kv;
      for (int m : members) (p.eqns[static_cast<size_t>(m)].attrs.axis == 0 ? dq : kv).push_back(p.eqns[static_cast<size_t>(m)].out);
      const std::string grid = ", " + std::to_string(a.blocks) + " blocks of " + std::to_string(a.rows) + " rows";
      add(ItemKind::attention, "attention_grad (" + which + ") " + ot.str() + ": " + (dq.empty() ? "" : "dq, ") +
                                   "row lse and D" + grid);
      items.back().eqns = members;
      items.back().writes = dq;
      if (kv.empty()) return;
      add(ItemKind::attention, "attention_grad (" + which + ") " + ot.str() + ": dk, dv by key tiles" + grid);
      items.back().eqns = members;
      items.back().writes = kv;
      return;
    }
    case Op::slice:
      add(ItemKind::strided, name + " " + p.type(e.inputs[0]).str() + " -> " + ot.str());
      return;
    case Op::pad:
      add(ItemKind::fill, "zeros of pad " + ot.str());
      add(ItemKind::strided, "the operand of pad " + p.type(e.inputs[0]).str() + " into its place");
      return;
    case Op::concatenate:
      for (size_t i = 0; i < e.inputs.size(); ++i) {
        add(ItemKind::strided, "operand " + std::to_string(i) + " of concatenate " + p.type(e.inputs[i]).str() +
                                   " into its place in " + ot.str());
        items.back().reads = {e.inputs[i]};
      }
      return;
    case Op::all_reduce:
      add(ItemKind::collective, name + " " + ot.str() + " (" + std::to_string(ot.bytes()) + " bytes)");
      return;
  }
}

}  // namespace

PlanOptions memory_options(const Fused& f) {
  // A fused group's reads and writes all happen during its one kernel (all the
  // sinks are one kernel, each group a part of its own); a row group reads its
  // inputs again in each pass, so it never writes in place.
  const size_t E = f.program.eqns.size();
  PlanOptions po;
  po.span = group_spans(f);
  po.internal = internal_values(f);
  po.no_in_place.assign(E, 0);
  po.part = f.group_of;
  po.view = f.view;
  for (const Group& g : f.groups)
    if (g.kind == GroupKind::row)
      for (int d = g.first; d <= g.last; ++d) po.no_in_place[static_cast<size_t>(d)] = 1;
  return po;
}

KernelPlan plan_kernels(const Program& p, const KernelPlanOptions& o) {
  KernelPlan kp;
  kp.fused = fuse_program(p, cuda_target(o.fuse, o.gemm_max_macs));
  const Program& fp = kp.fused.program;
  const int E = static_cast<int>(fp.eqns.size());
  kp.gemm.resize(static_cast<size_t>(E));
  PlanOptions po = o.fuse ? memory_options(kp.fused) : PlanOptions{};
  po.eqn_scratch.assign(static_cast<size_t>(E), {});
  for (int d = 0; d < E; ++d) {
    const Eqn& e = fp.eqns[static_cast<size_t>(d)];
    if (e.op != Op::dot_general) continue;
    kp.gemm[static_cast<size_t>(d)] = plan_gemm(fp.type(e.inputs[0]), fp.type(e.inputs[1]), e.attrs);
    po.eqn_scratch[static_cast<size_t>(d)] = {kp.gemm[static_cast<size_t>(d)].scratch_bytes()};
  }
  // attention_grad equations with the same operands form one group: one item
  // at the first, lse and D in its scratch, every member's result live (and
  // every operand read) over the whole span of the group.
  kp.attention_group.assign(static_cast<size_t>(E), -1);
  for (int d = 0; d < E; ++d) {
    const Eqn& e = fp.eqns[static_cast<size_t>(d)];
    if (e.op != Op::attention_grad || kp.attention_group[static_cast<size_t>(d)] >= 0) continue;
    int last = d;
    for (int m = d; m < E; ++m) {
      const Eqn& x = fp.eqns[static_cast<size_t>(m)];
      if (x.op == Op::attention_grad && x.inputs == e.inputs && kp.attention_group[static_cast<size_t>(m)] < 0) {
        kp.attention_group[static_cast<size_t>(m)] = d;
        last = m;
      }
    }
    po.eqn_scratch[static_cast<size_t>(d)] = {attention_launch(fp.type(e.out)).scratch_bytes};
    if (last == d) continue;
    if (po.span.empty())
      for (int x = 0; x < E; ++x) po.span.emplace_back(x, x);
    for (int m = d; m <= last; ++m)
      if (kp.attention_group[static_cast<size_t>(m)] == d) po.span[static_cast<size_t>(m)] = {d, last};
  }
  if (o.fuse) kp.sources = kernel_sources(kp.fused);
  kp.memory = plan_memory(fp, po);

  // kp.sources has one kernel per wave, in wave order
  for (int gi = 0; gi < static_cast<int>(kp.fused.groups.size()); ++gi) {
    const Group& g = kp.fused.groups[static_cast<size_t>(gi)];
    if (g.kind == GroupKind::free) continue;  // filled once, or a view: no launch
    if (!fused_kind(g.kind)) {
      for (int d = g.first; d <= g.last; ++d) single_items(fp, kp.gemm, kp.attention_group, d, kp.items);
      continue;
    }
    const std::vector<int>& wave = kp.fused.waves[static_cast<size_t>(g.wave)];
    if (wave.front() != gi) continue;  // the wave's kernel is launched at its first group
    Item it;
    it.group = gi;
    it.eqn = g.first;
    it.source = g.wave;
    const KernelSource& k = kp.sources[static_cast<size_t>(it.source)];
    it.reads.assign(k.params.begin(), k.params.begin() + k.n_inputs);
    it.writes.assign(k.params.begin() + k.n_inputs, k.params.end());
    if (wave.size() > 1) {
      it.kind = ItemKind::wave;
      std::map<GroupKind, int> n;
      for (int h : wave) ++n[kp.fused.groups[static_cast<size_t>(h)].kind];
      std::ostringstream s;
      s << wave.size() << " independent groups in one launch:";
      for (const auto& [kind, c] : n) s << " " << c << " " << group_kind_name(kind) << ",";
      it.what = s.str();
      it.what.pop_back();
      if (g.sink) it.what += " (the sinks: the parameter updates)";
    } else {
      it.kind = g.kind == GroupKind::loop ? ItemKind::loop
                : g.kind == GroupKind::row ? ItemKind::row
                : g.kind == GroupKind::col ? ItemKind::col
                : g.kind == GroupKind::scatter ? ItemKind::scatter_gen
                                           : ItemKind::small_gemm;
      it.what = group_what(fp, g);
    }
    kp.items.push_back(std::move(it));
  }
  for (const EndCopy& c : kp.memory.end_copies) {
    if (c.bytes == 0 || c.from == c.to) continue;
    Item it;
    it.kind = ItemKind::end_copy;
    it.what = std::string(c.kind == EndCopy::snapshot ? "save input \"" : "copy back into input \"") +
              fp.inputs[static_cast<size_t>(c.input)].name + "\" (" + std::to_string(c.bytes) + " bytes)";
    kp.items.push_back(std::move(it));
  }
  return kp;
}

std::string KernelPlan::describe() const {
  std::ostringstream s;
  std::map<ItemKind, int> count;
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    ++count[it.kind];
    s << k << "\t" << item_kind_name(it.kind) << "\t" << it.what << "\n";
  }
  s << "kernels by kind:";
  for (const auto& [kind, n] : count) s << " " << item_kind_name(kind) << " " << n << ",";
  s.seekp(-1, std::ios_base::end);
  s << "\ntotal " << items.size() << " kernels\n";
  return s.str();
}

}  // namespace capstep::plan
