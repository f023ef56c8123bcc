// The host Interpreter's Steps: one per equation with its kernel chosen and
// its views, GEMM plan and scratch planned (Impl::plan_steps), and the fused
// groups that run tile by tile as one Step each (Impl::choose_fused_groups).
#include <string>

#include "backend/host/interpreter_impl.h"

namespace capstep::host {

// One Step per equation (Build::built): its kernel chosen and its views,
// GEMM plan and scratch planned; the values that move nothing are marked
// views of their operand (Build::alias; constants and iota run no step
// either: the planner makes them statics). The switch has no default so that
// a primitive without a host kernel does not compile.
void Interpreter::Impl::plan_steps(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  const std::vector<char>& folded = b.folded;
  const std::vector<char>& folded_out = b.folded_out;
  const std::vector<char>& writes_transposed = b.writes_transposed;
  const std::vector<std::vector<int64_t>>& out_strides = b.out_strides;
  std::vector<Step>& built = b.built;
  b.alias.assign(static_cast<size_t>(ne), 0);
  b.scratch.assign(static_cast<size_t>(ne), {});
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const Type& t = prog.type(e.out);
    const std::string what = "equation " + std::to_string(orig_index(i)) + " (" + op_name(e.op) + ")";
    const size_t o = static_cast<size_t>(e.out);
    Step s;
    s.eqn = orig_index(i);
    s.program = &prog;
    s.out = e.out;
    for (size_t k = 0; k < e.inputs.size() && k < 5; ++k) s.in[k] = e.inputs[k];
    s.n = t.numel();
    s.elem_bytes = dtype_size(t.dtype);
    auto alias_of_operand = [&] { b.alias[static_cast<size_t>(i)] = 1; };  // a view of its operand's buffer
    auto add_scratch = [&](size_t bytes) {  // its slot
      b.scratch[static_cast<size_t>(i)].push_back(bytes);
      return nv + b.scratch_slots++;
    };
    switch (e.op) {
      case Op::constant:
      case Op::iota:
        break;
      CAPSTEP_BINARY_OPS(CAPSTEP_CASE_OP)
        s.fn = binary_kernel(binary_op(e.op), t.dtype);
        break;
      CAPSTEP_UNARY_OPS(CAPSTEP_CASE_OP)
        s.fn = unary_kernel(unary_op(e.op), t.dtype);
        break;
      case Op::compare:
        s.fn = compare_kernel(e.attrs.cmp, prog.type(e.inputs[0]).dtype);
        break;
      case Op::select:
        s.fn = select_kernel(t.dtype);
        break;
      case Op::convert: {
        const DType from = prog.type(e.inputs[0]).dtype;
        if (from == t.dtype) alias_of_operand();
        else s.fn = convert_kernel(from, t.dtype);
        break;
      }
      case Op::broadcast_in_dim:
        s.view = plan::broadcast_walk(prog.type(e.inputs[0]).shape, t.shape, e.attrs.dims, what);
        if (s.view.is_identity()) alias_of_operand();
        else s.fn = strided_copy_kernel(t.dtype);
        break;
      case Op::reshape:
        alias_of_operand();
        break;
      case Op::transpose:
        if (folded[o] || folded_out[o]) {  // its dot_generals read the operand in place, or
          alias_of_operand();               // the dot_general it reads wrote it in its layout
          break;
        }
        s.view = plan::transpose_walk(prog.type(e.inputs[0]).shape, e.attrs.dims, what);
        if (s.view.is_identity()) alias_of_operand();
        else s.fn = strided_copy_kernel(t.dtype);
        break;
      case Op::dot_general: {
        s.fn = dot_general_kernel(prog.type(e.inputs[0]).dtype);
        // An operand that is a folded transpose: its slot holds x's bytes
        // (an alias), read with x's type and the dims mapped onto x.
        Attrs at = e.attrs;
        Type operand[2] = {prog.type(e.inputs[0]), prog.type(e.inputs[1])};
        for (int k = 0; k < 2; ++k) {
          if (!folded[static_cast<size_t>(e.inputs[static_cast<size_t>(k)])]) continue;
          const Eqn& tr = ex.eqns[static_cast<size_t>(b.def[static_cast<size_t>(e.inputs[static_cast<size_t>(k)])])];
          if (!fold_transpose_dims(at, k, tr.attrs.dims))
            throw Error(what + ": internal: a folded transpose that this dot_general cannot read in place");
          operand[k] = prog.type(tr.inputs[0]);
        }
        s.dot = plan_dot(operand[0], operand[1], at, what, writes_transposed[o] ? &out_strides[o] : nullptr);
        // packed in the result's dtype (bf16 operands: widened to f32, or as
        // bf16 where bf16 kernels run them, which then fills half the space)
        const size_t es = dtype_size(t.dtype);
        if (s.dot.pack_a) s.scratch[0] = add_scratch(static_cast<size_t>(s.dot.batch * s.dot.m * s.dot.k) * es);
        if (s.dot.pack_b || s.dot.pack_bt || s.dot.panel > 0)  // pack_bt: B transposed, [B, K, N]; panel: K x N in panels (f32)
          s.scratch[1] = add_scratch(static_cast<size_t>(s.dot.batch * s.dot.k * s.dot.n) * es);
        break;
      }
      case Op::reduce_sum:
      case Op::reduce_max: {
        const Type& in = prog.type(e.inputs[0]);
        s.fn = reduce_kernel(e.op, in.dtype);
        s.n_in = in.numel();
        s.view = plan::reduce_output_walk(in.shape, e.attrs.dims, what);
        if (in.dtype == DType::bf16)  // the f32 accumulators
          s.scratch[0] = add_scratch(static_cast<size_t>(s.n) * sizeof(float));
        break;
      }
      case Op::gather_rows:
      case Op::scatter_add_rows: {
        const Type& table = prog.type(e.inputs[0]);
        s.fn = e.op == Op::gather_rows ? gather_rows_kernel(table.dtype) : scatter_add_rows_kernel(table.dtype);
        s.rows = table.shape[0];
        s.row_elems = 1;
        for (size_t d = 1; d < table.shape.size(); ++d) s.row_elems *= table.shape[d];
        s.n_idx = prog.type(e.inputs[1]).numel();
        break;
      }
      case Op::attention:
      case Op::attention_grad:
        s.fn = attention_kernel(e.op, t.dtype);
        break;
      case Op::adamw:  // the constructor runs expand_adamw's program: never here
        throw Error("host interpreter: adamw reached a kernel unexpanded (expand_adamw first)");
      case Op::all_reduce:
        s.fn = &all_reduce_step;
        s.comm = &comm;
        break;
      case Op::slice: {
        // A copy always, even of a contiguous part: an alias would have to
        // start inside its operand's buffer, which no slot can.
        const plan::OffsetWalk w =
            plan::slice_walk(prog.type(e.inputs[0]).shape, t.shape, e.attrs.starts, e.attrs.strides, what);
        s.view = w.walk;
        s.offset = w.offset;
        s.fn = slice_kernel(t.dtype);
        break;
      }
      case Op::pad: {
        const Type& in = prog.type(e.inputs[0]);
        const plan::OffsetWalk w = plan::embed_walk(in.shape, t.shape, e.attrs.lows, what);
        s.view = w.walk;
        s.offset = w.offset;
        s.n_in = in.numel();
        s.fn = pad_kernel(t.dtype);
        break;
      }
      case Op::concatenate: {
        const size_t ax = static_cast<size_t>(e.attrs.axis);
        int64_t inner = 1;
        s.rows = 1;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          if (d < ax) s.rows *= t.shape[d];
          if (d > ax) inner *= t.shape[d];
        }
        for (int x : e.inputs) {
          s.operands.push_back(x);
          s.widths.push_back(prog.type(x).shape[ax] * inner);
        }
        if (t.numel() == 0) s.rows = 0;
        s.fn = concatenate_kernel();
        break;
      }
    }
    built.push_back(s);
  }
}

// The fewest elements for which a group of one member runs as a fused group
// (in parts, fused.cpp's kMinWork each) rather than as its own step.
constexpr int64_t kOneMemberGroupElems = 65536;

// The fused groups that run tile by tile (one Step each, run_fused_group):
// each loop, row or col group of the plan that host_fusable accepts, or its
// tail from the first member on that it accepts. in_group[i]: equation i's
// group; span[i] = the equations [first, last] of equation i's group (i alone
// outside one).
void Interpreter::Impl::choose_fused_groups(Build& b) {
  const Program& ex = ordered();
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  std::vector<int>& in_group = b.in_group;
  std::vector<std::pair<int, int>>& span = b.span;
  std::vector<const plan::Group*>& group_src = b.group_src;
  in_group.assign(static_cast<size_t>(ne), -1);
  span.resize(static_cast<size_t>(ne));
  for (int i = 0; i < ne; ++i) span[static_cast<size_t>(i)] = {i, i};
  if (fusion)
    for (const plan::Group& whole : fusion->groups) {
      if (!plan::fused_kind(whole.kind) || whole.kind == plan::GroupKind::gemm || whole.size() < 2) continue;
      // A group the host cannot run tile by tile may still from a later
      // member on: the first block's row group starts with the embedding's
      // gather_rows (fused on the GPU), which then runs as a step of its own.
      const plan::Group* gp = nullptr;
      for (int f = whole.first; f < whole.last && !gp; ++f) {
        plan::Group sub = whole;
        sub.first = f;
        if (f > whole.first) sub.adamw = -1;  // a part of an update is not the update
        const std::vector<Step> members(built.begin() + sub.first, built.begin() + sub.last + 1);
        if (!host_fusable(ex, sub, members)) continue;
        if (f == whole.first) {
          gp = &whole;
        } else {
          peeled.push_back(std::make_unique<plan::Group>(std::move(sub)));
          gp = peeled.back().get();
        }
      }
      if (!gp) continue;
      const plan::Group& g = *gp;
      for (int d = g.first; d <= g.last; ++d) {
        in_group[static_cast<size_t>(d)] = static_cast<int>(groups.size());
        span[static_cast<size_t>(d)] = {g.first, g.last};
      }
      groups.push_back(std::make_unique<FusedGroup>());
      group_src.push_back(&g);
      fused_eqns += g.size();
    }
  // An equation left on its own over many elements runs as a group of one
  // member, in parts, on every thread, where its own step would run on one:
  // an elementwise one whose result has another dtype than its operands (a
  // convert, which could not be computed in place of one; the bf16 step's
  // weights are narrowed that way) as a loop group, a sum or maximum over
  // the last axes (the loss's over the logits) as a row group.
  if (fusion)
    for (int d = 0; d < ne; ++d) {
      const Eqn& e = ex.eqns[static_cast<size_t>(d)];
      const Type& t = ex.type(e.out);
      if (in_group[static_cast<size_t>(d)] >= 0 || !built[static_cast<size_t>(d)].fn) continue;
      const int64_t n_in = e.inputs.empty() ? 0 : ex.type(e.inputs[0]).numel();
      auto g = std::make_unique<plan::Group>();
      g->first = g->last = d;
      if (is_elementwise(e.op) && t.numel() >= kOneMemberGroupElems) {
        bool widens_or_narrows = true;
        for (int v : e.inputs) widens_or_narrows = widens_or_narrows && ex.type(v).dtype != t.dtype;
        if (!widens_or_narrows) continue;
        g->kind = plan::GroupKind::loop;
        g->numel = t.numel();
      } else if ((e.op == Op::reduce_sum || e.op == Op::reduce_max) && n_in >= kOneMemberGroupElems &&
                 t.numel() > 0) {
        g->kind = plan::GroupKind::row;  // host_fusable checks that the axes are the last ones
        g->numel = n_in;
        g->rows = t.numel();
        g->cols = n_in / t.numel();
      } else {
        continue;
      }
      g->inputs.assign(e.inputs.begin(), e.inputs.end());
      g->outputs = {e.out};
      if (!host_fusable(ex, *g, {built[static_cast<size_t>(d)]})) continue;
      peeled.push_back(std::move(g));
      in_group[static_cast<size_t>(d)] = static_cast<int>(groups.size());
      groups.push_back(std::make_unique<FusedGroup>());
      group_src.push_back(peeled.back().get());
      fused_eqns += 1;
    }
}

}  // namespace capstep::host
