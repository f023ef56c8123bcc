// The order the host Interpreter's Steps run in: dot_generals paired to run
// side by side (Impl::pair_dot_generals, run_dot_pair), the Steps in order
// (order_steps) and the RunEvents after each (plan_run_events).
#include <algorithm>

#include "backend/host/interpreter_impl.h"
#include "backend/host/parallel.h"

namespace capstep::host {
namespace {

// Two dot_generals side by side (InterpreterOptions::pair_dots): part k runs
// step k whole, its own parts in turn on this thread (a parallel_parts inside
// a part runs inline), so each GEMM's result is that of its parts as ever.
void run_dot_pair(const Step& s, void* const* p) {
  const Step* two = s.pair;
  parallel_parts(2, [&](int k) { two[k].fn(two[k], p); });
}

}  // namespace

// dot_generals side by side (InterpreterOptions::pair_dots, on two
// threads: measured there; with more, one thread per GEMM would leave
// threads idle that the GEMMs' own parts use): a
// dot_general (equation i) and the next equation that runs a step (j), when
// that is a dot_general too, neither in a fused group, j reads nothing that
// i writes (every operand made before i, or a constant or a view made
// between them of something made before i), and neither does more than twice
// the other's multiply-adds. They run at once, so every buffer either touches
// lives over both: the memory plan sees them as one span [i, j] (plan_buffers).
// The GEMMs' own parts (DotPlan::parts) are fixed by their shapes, so their
// results do not change.
void Interpreter::Impl::pair_dot_generals(const InterpreterOptions& opt, Build& b) {
  const Program& ex = ordered();
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  const std::vector<int>& in_group = b.in_group;
  std::vector<int>& pair_of = b.pair_of;
  pair_of.assign(static_cast<size_t>(ne), -1);
  if (!opt.pair_dots || host_threads() != 2) return;
  auto plain_dot = [&](int i) {
    return ex.eqns[static_cast<size_t>(i)].op == Op::dot_general && built[static_cast<size_t>(i)].fn &&
           in_group[static_cast<size_t>(i)] < 0;
  };
  auto work = [&](int i) {
    const DotPlan& d = built[static_cast<size_t>(i)].dot;
    return static_cast<double>(d.batch) * static_cast<double>(d.m) * static_cast<double>(d.n) *
           static_cast<double>(d.k);
  };
  // Whether the bytes of x were made before equation i: x is an input or made
  // before i, or it is a constant or a view made after i (the equations that
  // run no step, all there is between i and j) of such bytes.
  auto made_before = [&](int x, int i) {
    for (;;) {
      const int d = b.def[static_cast<size_t>(x)];
      if (d < i) return true;
      if (d == i) return false;
      const Op op = ex.eqns[static_cast<size_t>(d)].op;
      if (op == Op::constant || op == Op::iota) return true;
      if (!b.alias[static_cast<size_t>(d)]) return false;
      x = ex.eqns[static_cast<size_t>(d)].inputs[0];
    }
  };
  for (int i = 0; i < ne; ++i) {
    if (!plain_dot(i)) continue;
    int j = i + 1;
    while (j < ne && in_group[static_cast<size_t>(j)] < 0 && !built[static_cast<size_t>(j)].fn) ++j;
    if (j >= ne || !plain_dot(j)) continue;
    bool independent = true;
    for (int v : ex.eqns[static_cast<size_t>(j)].inputs) independent = independent && made_before(v, i);
    const double wi = work(i), wj = work(j);
    if (!independent || wi > 2 * wj || wj > 2 * wi) continue;
    pair_of[static_cast<size_t>(i)] = j;
    pair_of[static_cast<size_t>(j)] = i;
    i = j;
  }
}

// The Steps in order: a step per equation that does work, one per fused
// group (at its last member) and one per dot pair (at its first).
// step_at[i]: the step that runs equation i (the members of a group: the
// group's; an equation that runs no step, such as a view: the step before
// it, -1 before the first).
void Interpreter::Impl::order_steps(Build& b) {
  const int ne = b.ne;
  const std::vector<Step>& built = b.built;
  const std::vector<int>& in_group = b.in_group;
  const std::vector<std::pair<int, int>>& span = b.span;
  const std::vector<int>& pair_of = b.pair_of;
  std::vector<int>& step_at = b.step_at;
  step_at.assign(static_cast<size_t>(ne), -1);
  for (int i = 0; i < ne; ++i) {
    const int g = in_group[static_cast<size_t>(i)];
    const int p = pair_of[static_cast<size_t>(i)];
    if (p > i) {
      dot_pairs.push_back(std::make_unique<std::array<Step, 2>>(
          std::array<Step, 2>{built[static_cast<size_t>(i)], built[static_cast<size_t>(p)]}));
      Step s = built[static_cast<size_t>(i)];
      s.fn = &run_dot_pair;
      s.pair = dot_pairs.back()->data();
      steps.push_back(s);
    } else if (p >= 0) {
      // runs beside equation p, in its step
    } else if (g < 0) {
      if (built[static_cast<size_t>(i)].fn) steps.push_back(built[static_cast<size_t>(i)]);
    } else if (i == span[static_cast<size_t>(i)].second) {
      Step s;
      s.fn = &run_fused_group;
      s.group = groups[static_cast<size_t>(g)].get();
      s.program = &prog;
      s.eqn = orig_index(i);
      steps.push_back(s);
      for (int d = span[static_cast<size_t>(i)].first; d < i; ++d)
        step_at[static_cast<size_t>(d)] = static_cast<int>(steps.size()) - 1;
    }
    step_at[static_cast<size_t>(i)] = p >= 0 && p < i ? step_at[static_cast<size_t>(p)] : static_cast<int>(steps.size()) - 1;
  }
}

// RunEvents: after which step each output is final (a Direct output: after
// its last writing step; the others at the end) and each input read no more
// (after the step of its last reader; passed through: at the end).
void Interpreter::Impl::plan_run_events(Build& b) {
  const int ne = b.ne;
  const Values& values = b.values;
  const std::vector<int>& step_at = b.step_at;
  ready_after.assign(steps.size(), {});
  released_after.assign(steps.size(), {});
  direct_of_output.assign(prog.outputs.size(), -1);
  for (size_t k = 0; k < direct.size(); ++k) direct_of_output[static_cast<size_t>(direct[k].output)] = static_cast<int>(k);
  for (size_t j = 0; j < prog.outputs.size(); ++j) {
    const int k = direct_of_output[j];
    int writer = -1;  // the last equation writing the output's buffer
    if (k >= 0)
      for (int v : direct[static_cast<size_t>(k)].slots) writer = std::max(writer, of(values, v).def);
    const int at = writer >= 0 ? step_at[static_cast<size_t>(writer)] : -1;
    (at >= 0 ? ready_after[static_cast<size_t>(at)] : ready_at_end).push_back(static_cast<int>(j));
  }
  for (size_t i = 0; i < prog.inputs.size(); ++i) {
    const int l = of(values, of(values, prog.inputs[i].value).root).last;
    if (l >= ne) released_at_end.push_back(static_cast<int>(i));  // read at the end: passed through
    else if (l < 0 || step_at[static_cast<size_t>(l)] < 0) released_at_start.push_back(static_cast<int>(i));
    else released_after[static_cast<size_t>(step_at[static_cast<size_t>(l)])].push_back(static_cast<int>(i));
  }
}

}  // namespace capstep::host
