// The program the host Interpreter runs and its order (AdamW expanded; fused:
// plan::fuse_expanded's groups with each all_reduce pack gathered), and the
// transposes that its dot_generals read in place or write in their layout
// (Impl::expand_and_order, Impl::fold_transposes).
#include <string>

#include "backend/host/interpreter_impl.h"
#include "ir/all_reduce_packs.h"

namespace capstep::host {
namespace {

// The strides, in transpose(x, perm)'s row-major buffer of type `out`, of
// x's axes: result axis i is x's axis perm[i].
std::vector<int64_t> strides_through_transpose(const Type& out, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> ys = row_major_strides(out.shape);
  std::vector<int64_t> st(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) st[static_cast<size_t>(perm[i])] = ys[i];
  return st;
}

// The host's rule for plan::Target::library_gemm_reads_transpose: plan_dot
// reads transpose(x, perm) as operand `side` of `dot` in place when the
// dimension numbers map onto x (fold_transpose_dims) and it reads x so
// without copying it first (dot_operand_in_place; a bf16 operand is read
// through any strides: copied, widened, where bf16 GEMMs run in f32, and
// copied as bf16 where bf16 kernels cannot read its layout).
bool gemm_reads_transpose(const Program& p, const Eqn& dot, int side, const Eqn& transpose) {
  Attrs at = dot.attrs;
  return fold_transpose_dims(at, side, transpose.attrs.dims) &&
         dot_operand_in_place(p.type(transpose.inputs[0]), side == 0 ? at.lhs_batch : at.rhs_batch,
                              side == 0 ? at.lhs_contract : at.rhs_contract);
}

// The interpreter's plan::Target: the host's grouping (loops: fuse) and its
// GEMMs' rule for reading transposes in place.
plan::Target interpreter_target(bool fuse) {
  plan::Target t = plan::host_target();
  t.loops = fuse;
  t.broadcasts_join_readers_first = true;  // with copy_far_broadcasts' copies
  t.sinks_last = false;                    // one group at a time: no wave to share
  t.library_gemm_reads_transpose = gemm_reads_transpose;
  return t;
}

}  // namespace

// dot_general reading transpose(x, perm) as its lhs (side 0) or rhs (side 1)
// is dot_general reading x with the operand's batch and contracting axes
// mapped through perm (transposed axis a is x's axis perm[a]), provided x's
// free axes come in the order of the transposed operand's: the result lists
// them in axis order. Maps them in `at` and says whether it could.
bool fold_transpose_dims(Attrs& at, int side, const std::vector<int64_t>& perm) {
  std::vector<int64_t>& batch = side == 0 ? at.lhs_batch : at.rhs_batch;
  std::vector<int64_t>& contract = side == 0 ? at.lhs_contract : at.rhs_contract;
  std::vector<char> bound(perm.size(), 0);
  for (int64_t a : batch) bound[static_cast<size_t>(a)] = 1;
  for (int64_t a : contract) bound[static_cast<size_t>(a)] = 1;
  int64_t prev = -1;
  for (size_t a = 0; a < perm.size(); ++a) {
    if (bound[a]) continue;
    if (perm[a] <= prev) return false;
    prev = perm[a];
  }
  for (int64_t& a : batch) a = perm[static_cast<size_t>(a)];
  for (int64_t& a : contract) a = perm[static_cast<size_t>(a)];
  return true;
}

// Broadcasts of at least this many elements read more than this many
// equations after they are made are copied to their readers.
constexpr int64_t kFarBroadcastElems = 65536;
constexpr int kFarBroadcastEqns = 16;

// The program to run and its order. AdamW known by name (ir.h adamw): the
// interpreter runs its expansion, the plain equations (unfused, the reference
// path, one by one); fused, each parameter's update is one loop group that
// runs as the host AdamW kernel: the planner names the groups that are one
// update each (plan::Group::adamw, from the expansion's record), and
// match_adamw_group checks the host can run it so. Fused, the equations run in plan::fuse_program's
// order with each all_reduce pack's members together (gather_packs), after
// plan::copy_far_broadcasts.
void Interpreter::Impl::expand_and_order(Program p, const InterpreterOptions& opt, Build& b) {
  std::vector<ExpandedAdamW> updates;
  prog = expand_adamw(p, &updates);  // verifies p
  // Fused, a large broadcast read far from where it is made is made again at
  // its reader, in its group, instead of held (plan::copy_far_broadcasts).
  if (opt.fuse) prog = plan::copy_far_broadcasts(prog, kFarBroadcastElems, kFarBroadcastEqns);
  configure_blas_threads();
  b.pack_of = all_reduce_packs(prog);  // per equation of prog
  if (opt.fuse) {
    fusion = plan::fuse_expanded(prog, std::move(updates), interpreter_target(true));
    gather_packs(*fusion, b.pack_of);
  }
  const Program& ex = ordered();
  const int nv = b.nv = prog.num_values();
  const int ne = b.ne = static_cast<int>(prog.eqns.size());
  if (fusion) {
    b.view = fusion->view;
  } else {  // unfused: the planner's views without its groups (loops false), in prog's order
    const plan::Fused one_by_one = plan::fuse_program(prog, interpreter_target(false));
    b.view.assign(static_cast<size_t>(ne), 0);
    for (int i = 0; i < ne; ++i)
      b.view[static_cast<size_t>(one_by_one.old_index[static_cast<size_t>(i)])] = one_by_one.view[static_cast<size_t>(i)];
  }
  b.def.assign(static_cast<size_t>(nv), -1);
  for (int i = 0; i < ne; ++i) b.def[static_cast<size_t>(ex.eqns[static_cast<size_t>(i)].out)] = i;  // of ex
}

// Transposes that their dot_generals read in place (folded): the planner's
// views (Fused::view, decided with the host's GEMM rule, interpreter_target):
// every reader of the transpose is a dot_general that plan_dot runs on x with
// the dimension numbers mapped through the permutation and without a
// transposed copy of x (a bf16 operand is copied, widened, either way); the
// transpose is no output, and as a view it joins no fused group.
// It moves nothing (a view of x, read by those dots only) and each dot is
// planned on x. The attention heads' transposes of q, k, v and their
// cotangents are these.
void Interpreter::Impl::fold_transposes(Build& b) {
  const Program& ex = ordered();
  const int nv = b.nv, ne = b.ne;
  auto def = [&](size_t v) { return b.def[v]; };
  std::vector<char>& folded = b.folded;
  std::vector<char>& folded_out = b.folded_out;
  std::vector<char>& writes_transposed = b.writes_transposed;
  std::vector<std::vector<int64_t>>& out_strides = b.out_strides;
  folded.assign(static_cast<size_t>(nv), 0);
  folded_out.assign(static_cast<size_t>(nv), 0);
  writes_transposed.assign(static_cast<size_t>(nv), 0);
  out_strides.assign(static_cast<size_t>(nv), {});
  std::vector<int> readers(static_cast<size_t>(nv), 0);
  std::vector<char> grouped(static_cast<size_t>(ne), 0);
  if (fusion)
    for (const plan::Group& g : fusion->groups)
      if (g.size() > 1)
        for (int d = g.first; d <= g.last; ++d) grouped[static_cast<size_t>(d)] = 1;
  for (const NamedValue& out : prog.outputs) readers[static_cast<size_t>(out.value)] = -1;
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    for (int v : e.inputs)
      if (readers[static_cast<size_t>(v)] >= 0) ++readers[static_cast<size_t>(v)];
    // (a group of its own: fuse_program checks it)
    folded[static_cast<size_t>(e.out)] = e.op == Op::transpose && b.view[static_cast<size_t>(i)];
  }
  // The other way round: a transpose that is the one reader of a
  // dot_general's result (the attention output and dq, dk, dv, back to
  // token-major): the dot writes its result in the transpose's layout
  // (DotPlan::ldc, c_off), and the transpose is a view of it. Decided here,
  // not by the planner: it depends on the groups the planner makes (such a
  // transpose may join its readers' loop group, and is then read tile by
  // tile), and its root, the dot's result, is stored in a layout that is not
  // its type's row-major one, which Fused::view does not describe (plan::view_of
  // reads every root as row-major).
  for (int i = 0; i < ne; ++i) {
    const Eqn& e = ex.eqns[static_cast<size_t>(i)];
    const size_t o = static_cast<size_t>(e.out);
    if (e.op != Op::transpose || folded[o] || grouped[static_cast<size_t>(i)] || readers[o] < 0) continue;
    const size_t x = static_cast<size_t>(e.inputs[0]);
    const int d = def(x);
    if (d < 0 || readers[x] != 1 || grouped[static_cast<size_t>(d)]) continue;
    const Eqn& dot = ex.eqns[static_cast<size_t>(d)];
    if (dot.op != Op::dot_general || prog.type(dot.out).numel() == 0) continue;
    const Type &lt = prog.type(dot.inputs[0]), &rt = prog.type(dot.inputs[1]);
    int64_t k = 1;
    for (int64_t a : dot.attrs.lhs_contract) k *= lt.shape[static_cast<size_t>(a)];
    if (k == 0) continue;  // an empty sum fills C whole
    DotPlan probe;
    std::vector<int64_t> st = strides_through_transpose(prog.type(e.out), e.attrs.dims);
    if (!dot_out_layout(dot.attrs, lt.rank(), rt.rank(), st, lt, rt, probe)) continue;
    writes_transposed[x] = 1;
    out_strides[x] = std::move(st);
    folded_out[o] = 1;
  }
}

}  // namespace capstep::host
