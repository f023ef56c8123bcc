// Broadcasts recomputed where they are read (fusion.h, copy_far_broadcasts).
#include <map>

#include "backend/plan/fusion.h"

namespace capstep::plan {

Program copy_far_broadcasts(const Program& p, int64_t min_elems, int near) {
  std::vector<int> def(static_cast<size_t>(p.num_values()), -1);
  for (size_t i = 0; i < p.eqns.size(); ++i) def[static_cast<size_t>(p.eqns[i].out)] = static_cast<int>(i);
  auto copied = [&](int x) {
    const int d = def[static_cast<size_t>(x)];
    if (d < 0) return false;
    const Eqn& e = p.eqns[static_cast<size_t>(d)];
    const int64_t from = p.type(e.inputs.empty() ? x : e.inputs[0]).numel(), to = p.type(x).numel();
    return e.op == Op::broadcast_in_dim && from > 1 && from < to && to >= min_elems;
  };
  Program q = p;
  q.eqns.clear();
  struct Copy {
    int value = -1, last_read = -1;
  };
  std::map<int, Copy> copy;  // per broadcast value: the copy its latest readers read
  for (size_t i = 0; i < p.eqns.size(); ++i) {
    Eqn e = p.eqns[i];
    for (int& x : e.inputs) {
      if (!copied(x) || static_cast<int>(i) - def[static_cast<size_t>(x)] <= near) continue;
      Copy& c = copy[x];
      if (c.value < 0 || static_cast<int>(i) - c.last_read > near) {
        const Eqn& b = p.eqns[static_cast<size_t>(def[static_cast<size_t>(x)])];
        c.value = q.add_eqn_typed(Op::broadcast_in_dim, b.inputs, b.attrs, p.type(x));
      }
      c.last_read = static_cast<int>(i);
      x = c.value;
    }
    q.eqns.push_back(std::move(e));
  }
  // An original that every reader now reads a copy of (and no output) goes.
  std::vector<char> read(static_cast<size_t>(q.num_values()), 0);
  for (const Eqn& e : q.eqns)
    for (int x : e.inputs) read[static_cast<size_t>(x)] = 1;
  for (const NamedValue& o : q.outputs) read[static_cast<size_t>(o.value)] = 1;
  std::vector<Eqn> kept;
  for (Eqn& e : q.eqns)
    if (read[static_cast<size_t>(e.out)] || !copy.count(e.out)) kept.push_back(std::move(e));
  q.eqns = std::move(kept);
  return q;
}

}  // namespace capstep::plan
